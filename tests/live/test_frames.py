"""frames: columns, running sums, block grid counts, empty input — on hand-built events."""
import math

import pandas as pd
import pytest

from kvviz.core.events import BlockStat, LayerStat, StepEvent
from kvviz.live.frames import (
    STEP_COLUMNS, block_grid_frame, layer_bytes_frame, layer_times_frame, reservation_frame,
    steps_frame,
)


def blocks(num_used=4, num_blocks=10, last=5, block_size=16):
    return BlockStat(block_size=block_size, num_blocks=num_blocks, num_used_blocks=num_used,
                     num_free_blocks=num_blocks - num_used, num_slots_in_last_block=last,
                     paged_bytes=num_used * 1000, contiguous_bytes=num_blocks * 1000,
                     contiguous_is_real=False)


def event(mode="cached", step=0, step_ms=10.0, positions=8, batch=2, cuda=None):
    layers = tuple(LayerStat(layer=i, k_bytes=100 * (i + 1), v_bytes=50 * (i + 1),
                             tokens=4 + step, forward_ms=0.5 + i + step)
                   for i in range(3))
    return StepEvent(
        mode=mode, phase="prefill" if step == 0 else "decode", step=step,
        token_ids=(1,) * batch, texts=("a",) * batch, finished=(False,) * batch,
        step_ms=step_ms, seq_len=4 + step, positions=positions, kv_bytes=900 + step,
        formula_bytes=900 + step, layers=layers,
        blocks=blocks() if mode == "cached" else None, cuda_allocated_bytes=cuda)


def race_events():
    """cached and recompute interleaved, as the page records them."""
    return [
        event("cached", 0, 100.0, 8), event("recompute", 0, 120.0, 8),
        event("cached", 1, 10.0, 2), event("recompute", 1, 130.0, 10),
        event("cached", 2, 11.0, 2, cuda=4096), event("recompute", 2, 140.0, 12),
    ]


def test_steps_frame_columns_and_order():
    df = steps_frame(race_events())
    assert list(df.columns) == list(STEP_COLUMNS)
    assert len(df) == 6
    assert list(df["mode"]) == ["cached", "recompute"] * 3
    assert list(df["phase"]) == ["prefill", "prefill", "decode", "decode", "decode", "decode"]


def test_steps_frame_running_sums_are_per_mode():
    df = steps_frame(race_events())
    cached, recompute = df[df["mode"] == "cached"], df[df["mode"] == "recompute"]
    assert list(cached["elapsed_ms"]) == [100.0, 110.0, 121.0]
    assert list(recompute["elapsed_ms"]) == [120.0, 250.0, 390.0]
    assert list(cached["positions_total"]) == [8, 10, 12]
    assert list(recompute["positions_total"]) == [8, 18, 30]
    assert list(cached["new_tokens"]) == [1, 2, 3]
    assert list(recompute["new_tokens"]) == [1, 2, 3]


def test_steps_frame_missing_blocks_and_cuda_are_null():
    df = steps_frame(race_events())
    recompute = df[df["mode"] == "recompute"]
    for column in ("num_used_blocks", "num_free_blocks", "paged_bytes", "contiguous_bytes"):
        assert recompute[column].isna().all(), column
    cached = df[df["mode"] == "cached"].reset_index()
    assert list(cached["num_used_blocks"]) == [4, 4, 4]
    assert list(cached["paged_bytes"]) == [4000, 4000, 4000]
    assert cached["cuda_allocated_bytes"].isna().tolist() == [True, True, False]
    assert cached["cuda_allocated_bytes"].iloc[2] == 4096


def test_steps_frame_empty_keeps_columns():
    df = steps_frame([])
    assert df.empty
    assert list(df.columns) == list(STEP_COLUMNS)


def test_layer_bytes_frame_has_k_and_v_rows_per_layer():
    df = layer_bytes_frame(event(step=3))
    assert list(df.columns) == ["layer", "kind", "kv_bytes", "tokens"]
    assert len(df) == 6
    assert list(df["kind"]) == ["K", "V"] * 3
    assert df.set_index(["layer", "kind"]).loc[(2, "K"), "kv_bytes"] == 300
    assert df.set_index(["layer", "kind"]).loc[(2, "V"), "kv_bytes"] == 150
    assert set(df["tokens"]) == {7}


def test_layer_times_frame_one_row_per_event_and_layer():
    df = layer_times_frame(race_events())
    assert list(df.columns) == ["mode", "step", "phase", "layer", "forward_ms"]
    assert len(df) == 6 * 3
    row = df[(df["mode"] == "recompute") & (df["step"] == 2) & (df["layer"] == 1)]
    assert row["forward_ms"].tolist() == [3.5]
    assert layer_times_frame([]).columns.tolist() == list(df.columns)


@pytest.mark.parametrize("stat,batch", [
    (blocks(num_used=4, num_blocks=10, last=5), 2),
    (blocks(num_used=6, num_blocks=9, last=16), 3),
    (blocks(num_used=3, num_blocks=3, last=1), 1),
    (blocks(num_used=0, num_blocks=5, last=0), 2),
])
def test_block_grid_counts_match_blockstat(stat, batch):
    df = block_grid_frame(stat, batch)
    assert list(df.columns) == ["block", "seq", "slot_fill", "state"]
    assert list(df["block"]) == list(range(stat.num_blocks))
    counts = df["state"].value_counts()
    partial = batch if 0 < stat.num_slots_in_last_block < stat.block_size and stat.num_used_blocks else 0
    assert counts.get("free", 0) == stat.num_free_blocks
    assert counts.get("partial", 0) == partial
    assert counts.get("full", 0) == stat.num_used_blocks - partial
    assert (df["seq"] == -1).sum() == stat.num_free_blocks
    tokens = stat.num_used_blocks // batch * stat.block_size - stat.block_size + stat.num_slots_in_last_block
    if stat.num_used_blocks:
        assert df["slot_fill"].sum() == batch * tokens


def test_block_grid_runs_are_contiguous_per_sequence():
    df = block_grid_frame(blocks(num_used=6, num_blocks=8, last=3), batch=2)
    assert list(df["seq"]) == [0, 0, 0, 1, 1, 1, -1, -1]
    assert list(df["state"]) == ["full", "full", "partial", "full", "full", "partial", "free", "free"]
    assert list(df["slot_fill"]) == [16, 16, 3, 16, 16, 3, 0, 0]


def test_block_grid_caps_rows_at_max_blocks():
    df = block_grid_frame(blocks(num_used=2, num_blocks=5000, last=16), batch=1)
    assert len(df) == 1024
    assert len(block_grid_frame(blocks(num_used=2, num_blocks=5000), 1, max_blocks=10)) == 10


def test_reservation_frame_used_unused_and_waste():
    df = reservation_frame(blocks(num_used=4, num_blocks=10), kv_bytes=3000)
    assert list(df.columns) == ["layout", "part", "bytes", "wasted_fraction"]
    table = df.set_index(["layout", "part"])["bytes"]
    assert table[("paged (modelled)", "used")] == 3000
    assert table[("paged (modelled)", "unused")] == 1000
    assert table[("contiguous max-length", "used")] == 3000
    assert table[("contiguous max-length", "unused")] == 7000
    waste = df.groupby("layout")["wasted_fraction"].first()
    assert math.isclose(waste["paged (modelled)"], 0.25)
    assert math.isclose(waste["contiguous max-length"], 0.7)
    assert df.groupby("layout")["bytes"].sum().to_dict() == {
        "contiguous max-length": 10000, "paged (modelled)": 4000}


def test_reservation_frame_nothing_reserved_is_no_waste():
    stat = BlockStat(block_size=16, num_blocks=0, num_used_blocks=0, num_free_blocks=0, num_slots_in_last_block=0,
                     paged_bytes=0, contiguous_bytes=0, contiguous_is_real=False)
    df = reservation_frame(stat, kv_bytes=0)
    assert (df["wasted_fraction"] == 0.0).all()
    assert isinstance(df, pd.DataFrame) and len(df) == 4
