"""The live page's charts from a run's events: their DataFrames and their Altair builders. Pure.

Shared by the live panels (which build each spec once and then swap data) and the HTML report.
"""
from __future__ import annotations

import altair as alt

from kvviz import charts, frames
from kvviz.events import StepEvent

WEIGHTS_RULE_MAX = 4  # the weights' rule is left out beyond this x the reservation (caption says it)


def chart_data(meta: dict, cached: list[StepEvent], recompute: list[StepEvent]) -> dict:
    """Each chart's DataFrame, from the events so far (at least one cached event)."""
    steps = frames.steps_frame(cached + recompute)
    last = cached[-1]
    held = (last.seq_len - 1) * meta["bytes_per_token"] * meta["batch"]  # tokens held x bytes
    data = {"layers": frames.layer_bytes_frame(last), "total": steps[steps["mode"] == "cached"],
            "steps": steps, "layer_times": frames.layer_times_frame(cached), "race": steps,
            "positions": steps}
    if last.blocks is not None:
        data["grid"] = frames.block_grid_frame(last.blocks, meta["batch"])
        data["reservation"] = frames.reservation_frame(last.blocks, held)
    return data


def weights_on_scale(weight_bytes: int, contiguous_bytes: int) -> int:
    """The weights' rule, or 0 (left out) when it would flatten the cache to the floor."""
    return weight_bytes if weight_bytes <= WEIGHTS_RULE_MAX * contiguous_bytes else 0


def build_charts(meta: dict, max_new_tokens: int, data: dict) -> dict[str, alt.TopLevelMixin]:
    """Every chart of `data`, with axes fixed to the run's maxima so marks grow in a still frame."""
    layer_max = meta["num_kv_heads"] * meta["head_dim"] * meta["max_len"] * meta["batch"] * meta["elem_bytes"]
    contiguous = meta["bytes_per_token"] * meta["max_len"] * meta["batch"]
    built = {
        "layers": charts.layer_bytes_chart(data["layers"], layer_max, meta["num_layers"]),
        "total": charts.total_cache_chart(data["total"], weights_on_scale(meta["weight_bytes"], contiguous),
                                          contiguous, max_seq_len=meta["max_len"]),
        "steps": charts.step_time_chart(data["steps"], max_step=max_new_tokens),
        "layer_times": charts.layer_time_chart(data["layer_times"], max_step=max_new_tokens),
        "race": charts.race_chart(data["race"], max_tokens=max_new_tokens),
        "positions": charts.positions_chart(data["positions"], max_tokens=max_new_tokens),
    }
    if "grid" in data:
        built["grid"] = charts.block_grid_chart(data["grid"])
        built["reservation"] = charts.reservation_chart(data["reservation"], max_bytes=contiguous)
    return built
