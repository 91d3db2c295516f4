"""Replaying a vLLM watch (kvviz.vllm.trace.replay_frames) on the crafted file of issue 41:
45,000 blocks stored after one parent, each a request to explain. Work grows linearly with the
events (counted in function calls, not timed: speed targets live in bench/vllm_replay.py), the
file replays to the right rows, and a page's progress callback is called as it goes (a visitor
who leaves stops the replay there)."""
import sys

import pytest

from bench.vllm_streams import shared_parent
from kvviz.core.trace import MAX_TRACE_BYTES
from kvviz.app.hosted import Policy
from kvviz.vllm import reasons
from kvviz.vllm.trace import PROGRESS_EVERY, Recording, replay_frames


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


def test_a_progress_call_that_raises_stops_the_replay_there():
    """Streamlit stops a script by raising at its next drawing call: the replay must reach one."""
    recording = shared_parent(3 * PROGRESS_EVERY)

    class Left(Exception):
        pass

    def leave(done, total):
        raise Left

    frames = replay_frames(recording, [recording.duration_s], leave)
    with pytest.raises(Left):
        next(frames)
