"""The vLLM page's per-request accounting: replaying a watch and keeping up with a live server.

Rows: replay time growth on the crafted file of issue 41 (blocks sharing one parent) and on a
busy server's stream up to a million events (linear growth: time at 4× the events ≤ 1.5 × four
times the time at 1×), and the events per second replay and the live watch's per-message path
keep up with, against a busy GPU server's modelled event rate.
"""
from __future__ import annotations

import time

import msgspec

from bench.results import Result, interleaved, medians, spread
from bench.settings import Settings
from bench.vllm_streams import busy_server, shared_parent

GROWTH_LIMIT = 1.5  # time(4n) / (4 × time(n)): 1 is linear, 4 is quadratic
# A busy GPU server, modelled (not measured here): 100 engine steps a second, 256 running
# sequences of block size 16 each filling a block every 16 steps (16 BlockStored a step), as many
# blocks evicted (16 BlockRemoved), and 16 new requests a second each storing its prompt and
# reporting its reuse (2 events): 100 × 32 + 32 = 3,232 events a second.
BUSY_EVENTS_PER_S = 3232
URL = "http://127.0.0.1:8000"


def replay_s(recording) -> float:
    """Process seconds of `replay_frames` to the end of `recording` (what the Replay page runs)."""
    from kvviz.vllm.trace import replay_frames
    start = time.process_time()
    for _ in replay_frames(recording, [recording.duration_s]):
        pass
    return time.process_time() - start


def shared_parent_growth(s: Settings) -> tuple[Result, str]:
    from kvviz.vllm.trace import Recording
    n = 5_000 if s.reps < 5 else 10_000  # below ~5,000 the first blocks' warm-up (GC) still shows
    files = {k: Recording.from_json(shared_parent(k).to_json()) for k in (n, 4 * n)}
    samples = interleaved({k: (lambda r=r: replay_s(r)) for k, r in files.items()}, max(3, s.reps))
    med = medians(samples)
    ratio = med[4 * n] / (4 * med[n])
    row = Result(f"vLLM replay, {4 * n:,} vs {n:,} blocks after one parent: time / (4 × time)",
                 f"{med[4 * n]:.2f} s", f"4 × {med[n]:.3f} s", ratio, "<=", GROWTH_LIMIT)
    return row, (f"{n:,} blocks: {spread(samples[n])} s; {4 * n:,}: {spread(samples[4 * n])} s")


def apply_stream(events: int, live: bool, mark: int | None = None) -> tuple[float, int, int, tuple]:
    """(process seconds, events, blocks, (seconds, events) when `mark` events were passed) of
    `events` events of a busy server through the replay's per-record path, or (`live`) the watch
    thread's: msgpack decode of the published frames, then `EngineWatch.record`. Only that work
    is timed, never building the stream."""
    from kvviz.vllm.events import decode_message
    from kvviz.vllm.trace import BatchRecord, apply_record
    from kvviz.vllm.watch import EngineWatch
    watch, states = EngineWatch([URL]), {}
    encoder = msgspec.msgpack.Encoder()
    spent, n_events, n_blocks, at_mark = 0.0, 0, 0, (0.0, 0)
    for seq, batch in enumerate(busy_server(events)):
        n_events += len(batch.events)
        n_blocks += sum(len(getattr(e, "block_hashes", ())) for e in batch.events)
        if live:
            frames = [b"", seq.to_bytes(8, "big", signed=True), encoder.encode(batch)]
            start = time.process_time()
            watch.record(URL, 0, decode_message(frames))
        else:
            record = BatchRecord(seq * 0.01, URL, 0, seq, batch)
            start = time.process_time()
            apply_record(states, record)
        spent += time.process_time() - start
        if mark is not None and not at_mark[1] and n_events >= mark:
            at_mark = (spent, n_events)
    return spent, n_events, n_blocks, at_mark


def busy_rows(s: Settings) -> tuple[list[Result], str]:
    big = 400_000 if s.reps < 5 else 1_000_000
    t_big, e_big, b_big, (t_small, e_small) = apply_stream(big, live=False, mark=big // 4)
    t_live, e_live, b_live, _ = apply_stream(big // 4, live=True)
    ratio = (t_big / e_big) / (t_small / e_small)
    rows = [
        Result(f"vLLM replay, a busy server's {e_big:,} events vs its first {e_small:,}: time per event, ratio",
               f"{t_big:.1f} s ({e_big / t_big:,.0f} events/s)", f"{t_small:.1f} s ({e_small / t_small:,.0f} events/s)",
               ratio, "<=", GROWTH_LIMIT),
        Result("vLLM replay: events a second, vs a busy GPU server's (modelled)",
               f"{e_big / t_big:,.0f} events/s ({b_big / t_big:,.0f} blocks/s)",
               f"{BUSY_EVENTS_PER_S:,} events/s", e_big / t_big / BUSY_EVENTS_PER_S, ">=", 1.0),
        Result("vLLM live watch (decode + record): events a second, vs a busy GPU server's (modelled)",
               f"{e_live / t_live:,.0f} events/s ({b_live / t_live:,.0f} blocks/s)",
               f"{BUSY_EVENTS_PER_S:,} events/s", e_live / t_live / BUSY_EVENTS_PER_S, ">=", 1.0),
    ]
    return rows, (f"busy stream: its first {e_small:,} events in {t_small:.1f} s, all {e_big:,} events "
                  f"({b_big:,} blocks) in {t_big:.1f} s; live path {e_live:,} events in {t_live:.1f} s")


def vllm_replay(s: Settings) -> tuple[list[Result], str]:
    growth, growth_note = shared_parent_growth(s)
    rows, busy_note = busy_rows(s)
    return [growth, *rows], (
        "Process seconds of `kvviz.vllm.trace.replay_frames` (what the Replay page runs) on the "
        "crafted watch of issue 41 — blocks stored after one parent, each a request whose miss must "
        "be explained against every earlier sibling — at n and 4n blocks, interleaved; then a busy "
        "server's stream (bench/vllm_streams.py: 4 shared system prompts of 8 blocks, 2,000 "
        "multi-turn sessions, a 4,096-block LRU pool that evicts, reuse reports, generated blocks "
        "stored step by step; block size 16) through the replay's per-record path (`apply_record`): "
        "a million events (400,000 with --quick) in one run, its time read also after the first "
        "quarter; and a quarter of it "
        "through the live watch's per-message path (msgpack frames as vLLM publishes them decoded, "
        "then `EngineWatch.record`, sockets aside). Only kvviz's work is timed, never building the "
        "stream. Growth targets: time at 4× the events ≤ 1.5 × four times the time at 1× (linear "
        "is 1, quadratic 4). Rate targets: at least a busy GPU server's event rate, modelled (not "
        "measured here): 100 engine steps a second, 256 running sequences each filling a 16-token "
        "block every 16 steps, as many evicted, 16 new requests a second: 3,232 events a second. "
        f"{growth_note}; {busy_note}.")
