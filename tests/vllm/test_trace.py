"""A vLLM watch (kvviz.vllm.trace): the file saved, loaded and refused (the capture of
tests/data/vllm, the real fleet's with its request log, and bad documents), its state at a time,
and replay on the crafted file of issue 41: 45,000 blocks stored after one parent, each a request
to explain. Work grows linearly with the events (counted in function calls, not timed: speed
targets live in bench/vllm_replay.py), the file replays to the right rows, and a page's progress
callback is called as it goes (a visitor who leaves stops the replay there)."""
import gc
import json
import sys

import pytest

from bench.vllm_streams import shared_parent
from kvviz.core.trace import MAX_TRACE_BYTES, TraceError
from kvviz.app.hosted import Policy
from kvviz.vllm import reasons
from kvviz.vllm.state import format_summary, summary
from kvviz.vllm.trace import PROGRESS_EVERY, Recording, replay_frames, states_at
from tests.vllm.conftest import FLEET
from vllm_payloads import recording_of_capture, replayed_pool


def calls_to_replay(recording: Recording) -> int:
    """Python function calls made while replaying `recording` to its end."""
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        count += event == "call"

    sys.setprofile(profile)
    try:
        for _ in replay_frames(recording, [recording.duration_s]):
            pass
    finally:
        sys.setprofile(None)
    return count


def test_explaining_siblings_of_one_parent_costs_the_same_per_request_however_many():
    small, large = calls_to_replay(shared_parent(1_000)), calls_to_replay(shared_parent(4_000))
    assert large <= 4.4 * small, (small, large)  # a scan of the siblings seen so far: ×16


@pytest.fixture(scope="module")
def hostile() -> bytes:
    """The crafted watch: 45,000 root BlockStored events sharing one parent (generated here, never shipped)."""
    return shared_parent(45_000).to_json()


@pytest.mark.slow  # 45,000 events: a few seconds
def test_the_crafted_file_replays_to_one_explained_row_per_request(hostile):
    assert 6 * 2**20 < len(hostile) < Policy(enabled=True).max_upload_bytes <= MAX_TRACE_BYTES
    recording = Recording.from_json(hostile)
    told = []
    states = dict(replay_frames(recording, [recording.duration_s], lambda done, total: told.append((done, total))))
    (state,) = states[recording.duration_s].values()
    rows = state.ledger.rows()
    assert len(rows) == 5_000 and rows[-1]["request"] == "#45000"  # the newest, within MAX_REQUESTS
    assert {r["reason"] for r in rows} == {reasons.DIVERGED}
    misses = [r["first_miss_token"] for r in rows]  # the last token differs from the one before's,
    assert misses.count(6) == 5 and misses.count(7) == 4_995  # both last two at every thousandth
    assert rows[-1]["miss_reason"].startswith("diverged at token 7 from the prefix request #44999 cached: token id ")
    assert state.pool.num_cached_blocks == 45_000
    assert len(told) == 45_000 // PROGRESS_EVERY and told[-1] == (45_000, 45_000)
    assert [done for done, _ in told] == sorted(done for done, _ in told)


@pytest.fixture
def nothing_frozen():
    """A process that froze nothing (the CLI, the bench); a test worker that ran the page has frozen
    what it held (kvviz.app.collector): undone for the test, redone after."""
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    yield
    if frozen:
        gc.freeze()


def test_a_progress_call_that_raises_stops_the_replay_there(nothing_frozen):
    """Streamlit stops a script by raising at its next drawing call: the replay must reach one."""
    recording = shared_parent(3 * PROGRESS_EVERY)

    class Left(Exception):
        pass

    def leave(done, total):
        raise Left

    frames = replay_frames(recording, [recording.duration_s], leave)
    with pytest.raises(Left):
        next(frames)
    assert gc.get_freeze_count() == 0  # the older objects are collectable again


def test_the_replay_freezes_the_older_objects_while_it_applies_and_only_then(nothing_frozen):
    """Full collections during a replay leave out what existed before it (the server's models,
    other sessions): its time follows its events, not the process's heap."""
    recording = shared_parent(2 * PROGRESS_EVERY)
    seen = []
    frames = replay_frames(recording, [recording.duration_s / 2, recording.duration_s],
                           lambda done, total: seen.append(gc.get_freeze_count()))
    for _ in frames:
        assert gc.get_freeze_count() == 0  # between frames the page draws, with nothing frozen
    assert len(seen) == 2 and all(count > 1000 for count in seen)  # the process's objects, frozen


def test_in_a_server_that_froze_what_it_keeps_the_replay_leaves_that_freeze_alone():
    """Unfreezing at the replay's end would give the server's models and modules back to every full
    collection after it (kvviz.app.collector froze them once)."""
    ours = not gc.get_freeze_count()
    if ours:
        gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        seen = []
        recording = shared_parent(2 * PROGRESS_EVERY)
        for _ in replay_frames(recording, [recording.duration_s], lambda done, total: seen.append(gc.get_freeze_count())):
            pass
        # frozen objects freed by reference counting leave the count (a few); an unfreeze empties it
        assert len(seen) == 2 and min(seen + [gc.get_freeze_count()]) > frozen * 0.9
    finally:
        if ours:
            gc.unfreeze()


# --- the watch file: saved, loaded, refused -------------------------------------------------------
def test_watch_file_round_trips_and_replays_the_same_state(tmp_path):
    rec = recording_of_capture()
    path = tmp_path / "watch.json"
    rec.save(path)
    loaded = Recording.load(path)
    assert len(loaded.batches) == len(rec.batches) and loaded.batches[5].batch == rec.batches[5].batch
    (state,) = states_at(loaded).values()
    assert state.pool.num_cached_blocks == replayed_pool().num_cached_blocks
    assert state.pool.counts == replayed_pool().counts
    assert len(state.history) == 3 and state.metrics.num_gpu_blocks == 72
    mid = states_at(loaded, 20.0)["127.0.0.1:8000 · rank 0"]
    assert mid.pool.counts.num_batches == 41
    text = format_summary(summary(state))
    assert "evicted 104" in text and "hit rate" in text


@pytest.mark.parametrize("doc, message", [
    (b'{"format": "kvviz-trace", "version": 1}', "not a kvviz vLLM watch"),
    (b'{"format": "kvviz-vllm-watch", "version": 1, "meta": {}}', "invalid"),
    (b'{"format": "kvviz-vllm-watch", "version": 9, "meta": {}, "batches": [], "scrapes": [], "notes": []}',
     "newer kvviz"),
    (b"not json", "not a kvviz vLLM watch"),
])
def test_bad_watch_files_are_refused_with_a_message(doc, message):
    with pytest.raises(TraceError, match=message):
        Recording.from_json(doc)


def test_a_watch_keeps_its_request_log_through_save_and_load_and_reads_version_1(tmp_path):
    recording = Recording.load(FLEET / "watch.json")
    assert len(recording.replies) == 18 and recording.meta["replicas"] == {
        "http://127.0.0.1:18100": "r0", "http://127.0.0.1:18101": "r1"}
    recording.save(tmp_path / "again.json")
    back = Recording.load(tmp_path / "again.json")
    assert [r.reply for r in back.replies] == [r.reply for r in recording.replies]
    old = json.loads((FLEET / "watch.json").read_text())
    del old["replies"]
    old["version"] = 1
    assert Recording.from_json(json.dumps(old)).replies == []
