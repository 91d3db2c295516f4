"""The frames of the per-request table and the block lifetimes (kvviz.vllm.request_views), from a
state fed a small KV-event stream built for it: newest request first, every reason counted (zeros
included), the lifetime columns, and a CSV whose client-given names start no formula."""
import csv
import io

import pandas as pd

from kvviz.vllm import request_views
from kvviz.vllm.reasons import CODES, DIVERGED, FIRST_SEEN
from kvviz.vllm.state import EngineState
from tests.vllm.conftest import ledger_of, removed, stored


def fed_state() -> EngineState:
    """#1 stores blocks 1, 2; its block 2 is evicted at 5 s; at 8 s a second request (session
    "=cmd()", a name a client chose) reuses block 1 and stores a block of its own after it: it
    diverged inside block 2's tokens, at token 6."""
    ledger = ledger_of((0.0, [stored([1, 2], None, range(8))]),
                       (5.0, [removed(2)]),
                       (8.0, [stored([1], None, range(4), session="=cmd()"),
                               stored([3], 1, [4, 5, 99, 99], session="=cmd()")]))
    return EngineState(key="x", ledger=ledger)


def test_the_table_is_newest_first_in_its_columns():
    state = fed_state()
    df = request_views.requests_frame(state)
    assert list(df.columns) == request_views.COLUMNS
    assert df.request.tolist() == [r["request"] for r in state.request_rows()][::-1] == ["=cmd()", "#1"]
    assert df.reason.tolist() == [DIVERGED, FIRST_SEEN] and df.first_miss_token.tolist() == [6, 0]


def test_every_reason_is_counted_in_its_order_zeros_included():
    counts = request_views.reasons_frame(request_views.requests_frame(fed_state()))
    assert counts.reason.tolist() == list(CODES)
    assert dict(zip(counts.reason, counts.requests)) == {c: int(c in (DIVERGED, FIRST_SEEN)) for c in CODES}
    empty = request_views.reasons_frame(pd.DataFrame(columns=request_views.COLUMNS))
    assert empty.requests.tolist() == [0] * len(CODES)


def test_the_lifetime_frames_hold_the_evicted_block_s_life():
    frames = request_views.lifetime_frames(fed_state())
    assert list(frames) == list(request_views.LIFETIME_CHARTS)
    assert frames["lifetime_s"].lifetime_s.tolist() == [5.0]  # block 2: stored at 0 s, evicted at 5 s
    assert frames["idle_before_eviction_s"].idle_before_eviction_s.tolist() == [5.0]  # never reused
    assert frames["gap_s"].gap_s.tolist() == [8.0]  # block 1: stored at 0 s, reused at 8 s
    assert sorted(frames["reuses"].reuses) == [0, 0, 1]


def test_the_csv_starts_no_formula_from_a_client_s_name():
    rows = list(csv.reader(io.StringIO(request_views.csv_bytes(request_views.requests_frame(fed_state())).decode())))
    assert rows[0] == request_views.COLUMNS and len(rows) == 3
    assert not any(cell.startswith(("=", "+", "-", "@")) for row in rows for cell in row)
    assert any("=cmd()" in cell for cell in rows[1])
