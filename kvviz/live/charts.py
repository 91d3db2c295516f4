"""The live page's charts from a run's events: their DataFrames and their Altair builders. Pure.

Shared by the live panels (which build each spec once and then swap data) and the HTML report.
"""
from __future__ import annotations

import altair as alt
import pandas as pd

from kvviz.core import spec
from kvviz.live import cache_map, captions, frames
from kvviz.viz import charts
from kvviz.core.events import StepEvent

WEIGHTS_RULE_MAX = 4  # the weights' rule is left out beyond this x the reservation (caption says it)


def chart_data(meta: dict, cached: list[StepEvent], recompute: list[StepEvent]) -> dict:
    """Each chart's DataFrame, from the events so far (at least one cached event)."""
    steps = frames.steps_frame(cached + recompute)
    last = cached[-1]
    data = {"layers": layer_groups_frame(meta, last), "total": steps[steps["mode"] == "cached"],
            "steps": steps, "layer_times": frames.layer_times_frame(cached), "race": steps,
            "positions": steps}
    if last.blocks is not None:
        data["grid"] = frames.block_grid_frame(last.blocks, meta["batch"])
        data["reservation"] = reservation_data(meta, last)
    return data


def reservation_data(meta: dict, last: StepEvent) -> pd.DataFrame:
    """The blocks chart's frame (frames.reservation_frame) with each bar's "NN% unused" label made
    here, by captions.unused_label from captions.wasted_fractions: the caption says the same."""
    df = frames.reservation_frame(last.blocks, captions.held_bytes(meta, last))
    paged, contiguous = captions.wasted_fractions(meta, last)
    labels = {frames.LAYOUT_PAGED: captions.unused_label(paged),
              frames.LAYOUT_CONTIGUOUS: captions.unused_label(contiguous)}
    return df.assign(unused_label=df["layout"].map(labels))


GROUP_COLUMNS = ["group", "kind", "kv_bytes", "tokens", "layers", "group_bytes", "cap_bytes", "cap_label"]


def layer_groups(meta: dict) -> dict[str, list[int]]:
    """Layers grouped by their spec's label, in order of first appearance: {"10 layers · full": [0, 3, ...]}.

    One group for a uniform model ("all 30 layers · full"), so that it reads as one fact, not
    thirty identical bars.
    """
    by_label = spec.layer_groups(cache_map.layer_kinds(meta))
    if len(by_label) == 1:
        (label, layers), = by_label.items()
        return {f"all {len(layers)} layers · {label}": layers}
    return {f"{len(layers)} layer{'s' if len(layers) > 1 else ''} · {label}": layers
            for label, layers in by_label.items()}


def _cap(layer: spec.CacheSpec, row: int, meta: dict) -> tuple[float | None, str | None]:
    """Bytes tensor row `row` (0: K, 1: V) of a sliding or chunked layer holds once full (its
    window − 1 tokens, `CacheSpec.tensor_bytes`), and the cap's words; (None, None) for other layers."""
    if not layer.cap_label:
        return None, None
    return layer.tensor_bytes(layer.max_tokens_held, meta["elem_bytes"], meta["batch"])[row], layer.cap_label


def layer_groups_frame(meta: dict, event: StepEvent) -> pd.DataFrame:
    """Bytes one layer of each group holds after `event`, per tensor (K, V, and state if any).

    Columns: GROUP_COLUMNS. kv_bytes / tokens: the group's largest layer; group_bytes: the sum
    over the group's layers; cap_bytes / cap_label: where a sliding or chunked layer stops growing.
    """
    specs, stats = cache_map.layer_kinds(meta), {s.layer: s for s in event.layers}
    with_state = any(s.state_bytes for s in event.layers)
    rows = []
    for group, layers in layer_groups(meta).items():
        held = [stats[i] for i in layers if i in stats]
        for row, (tensor, read) in enumerate((("K", lambda s: s.k_bytes), ("V", lambda s: s.v_bytes),
                                              ("state", lambda s: s.state_bytes))[:3 if with_state else 2]):
            top = max(held, key=read, default=None)
            cap = _cap(specs[layers[0]], row, meta) if tensor != "state" else (None, None)
            rows.append((group, tensor, read(top) if top else 0, top.tokens if top else 0, len(layers),
                         sum(read(s) for s in held), *cap))
    return pd.DataFrame(rows, columns=GROUP_COLUMNS)


def largest_tensor_bytes(meta: dict) -> int:
    """The per-layer chart's y top: the largest one tensor (K, V or state) any layer can get in
    this run (`kvviz.core.spec.largest_tensor_bytes`: every layer's K, V and state at max_len
    positions, a sliding or chunked layer at its window − 1)."""
    top = spec.largest_tensor_bytes(cache_map.layer_kinds(meta), meta["max_len"], meta["elem_bytes"], meta["batch"])
    return max(top, 1)


def weights_on_scale(weight_bytes: int, contiguous_bytes: int) -> int:
    """The weights' rule, or 0 (left out) when it would flatten the cache to the floor."""
    return weight_bytes if weight_bytes <= WEIGHTS_RULE_MAX * contiguous_bytes else 0


def build_charts(meta: dict, max_new_tokens: int, data: dict) -> dict[str, alt.TopLevelMixin]:
    """Every chart of `data`, with axes fixed to the run's maxima so marks grow in a still frame."""
    layer_max = largest_tensor_bytes(meta)
    contiguous = meta["bytes_per_token"] * meta["max_len"] * meta["batch"]
    built = {
        "layers": charts.layer_groups_chart(data["layers"], layer_max, list(layer_groups(meta)),
                                            tensors=tuple(dict.fromkeys(data["layers"]["kind"]))),
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
