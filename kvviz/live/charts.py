"""The live page's charts from a run's events: their DataFrames and their Altair builders. Pure.

Shared by the live panels (which build each chart's Vega-Lite once and then swap data) and the HTML report.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import altair as alt
import pandas as pd

from kvviz.core import spec
from kvviz.engine import race
from kvviz.live import captions, frames
from kvviz.viz import charts
from kvviz.core.events import StepEvent
from kvviz.core.meta import RunMeta

WEIGHTS_RULE_MAX = 4  # the weights' rule is left out beyond this x the reservation (caption says it)


def chart_data(meta: RunMeta, cached: list[StepEvent], recompute: list[StepEvent]) -> dict:
    """Each chart's DataFrame, from the events so far (at least one cached event); the block
    charts only when the run holds blocks (a cache)."""
    steps = frames.steps_frame(cached + recompute)
    paged = cached[-1].blocks is not None
    return {c.name: c.data(meta, cached, recompute, steps) for c in CHARTS if paged or not c.paged}


def reservation_data(meta: RunMeta, last: StepEvent) -> pd.DataFrame:
    """The blocks chart's frame (frames.reservation_frame) with each bar's "NN% unused" label made
    here, by captions.unused_label from captions.wasted_fractions: the caption says the same."""
    df = frames.reservation_frame(last.blocks, captions.held_bytes(meta, last))
    paged, contiguous = captions.wasted_fractions(meta, last)
    labels = {frames.LAYOUT_PAGED: captions.unused_label(paged),
              frames.LAYOUT_CONTIGUOUS: captions.unused_label(contiguous)}
    return df.assign(unused_label=df["layout"].map(labels))


RACE_COLUMNS = ("mode", "new_tokens", "elapsed_ms", "positions_total")  # of the steps frame: what the race charts read


def race_data(meta: RunMeta, cached: list[StepEvent], recompute: list[StepEvent],
              steps: pd.DataFrame) -> pd.DataFrame:
    """The race charts' frame: both runs' measured steps (RACE_COLUMNS, series "measured"), the
    steps the run without a cache did not make once the cached run has ended (series "modelled":
    its time from race.modelled_remainder_ms, which ends at the whole-run figure the headline
    quotes; its positions counted), and one "axis" row where the x axis ends: the run's token
    budget while it goes on, the last token written once it has ended (EOS or the budget).

    Built from column lists in one frame: it is redrawn every chart frame of a run, and pandas'
    assign and concat of three frames took most of its time."""
    budget = meta.setting("max_new_tokens", len(cached))
    ended = captions.run_ended(cached, budget)
    cols = {name: steps[name].tolist() for name in RACE_COLUMNS} | {"series": ["measured"] * len(steps)}
    x_end = len(cached) if ended else max(budget, len(cached))
    extra = [("recompute", *row, "modelled") for row in remainder_rows(cached, recompute)] if ended else []
    for row in extra + [("cached", x_end, 0.0, 0, "axis")]:
        for name, value in zip(cols, row):
            cols[name].append(value)
    return pd.DataFrame(cols)


def remainder_rows(cached: list[StepEvent], recompute: list[StepEvent]) -> list[tuple[int, float, int]]:
    """(new_tokens, elapsed_ms, positions_total) of the run without a cache from its last measured
    step to the cached run's last token: modelled time, counted positions; none when there is
    nothing to draw."""
    rest_ms = race.modelled_remainder_ms(cached, recompute)
    if not rest_ms:
        return []
    batch = len(recompute[0].token_ids)
    elapsed, positions = sum(e.step_ms for e in recompute), sum(e.positions for e in recompute)
    rows = [(len(recompute), elapsed, positions)]  # the last measured point: the dashed line joins it
    for event, ms in zip(cached[len(recompute):], rest_ms):
        elapsed, positions = elapsed + ms, positions + batch * (event.seq_len - 1)
        rows.append((event.step + 1, elapsed, positions))
    return rows


GROUP_COLUMNS = ["group", "kind", "kv_bytes", "tokens", "layers", "group_bytes", "cap_bytes", "cap_label"]


def layer_groups(meta: RunMeta) -> dict[str, list[int]]:
    """Layers grouped by their spec's label, in order of first appearance: {"10 layers · full": [0, 3, ...]}.

    One group for a uniform model ("all 30 layers · full"), so that it reads as one fact, not
    thirty identical bars.
    """
    by_label = spec.layer_groups(meta.specs)
    if len(by_label) == 1:
        (label, layers), = by_label.items()
        return {f"all {len(layers)} layers · {label}": layers}
    return {f"{len(layers)} layer{'s' if len(layers) > 1 else ''} · {label}": layers
            for label, layers in by_label.items()}


def _cap(layer: spec.CacheSpec, row: int, meta: RunMeta) -> tuple[float | None, str | None]:
    """Bytes tensor row `row` (0: K, 1: V) of a sliding or chunked layer holds once full (its
    window − 1 tokens, `CacheSpec.tensor_bytes`), and the cap's words; (None, None) for other layers."""
    if not layer.cap_label:
        return None, None
    return layer.tensor_bytes(layer.max_tokens_held, meta.elem_bytes, meta.batch)[row], layer.cap_label


def layer_groups_frame(meta: RunMeta, event: StepEvent) -> pd.DataFrame:
    """Bytes one layer of each group holds after `event`, per tensor (K, V, and state if any).

    Columns: GROUP_COLUMNS. kv_bytes / tokens: the group's largest layer; group_bytes: the sum
    over the group's layers; cap_bytes / cap_label: where a sliding or chunked layer stops growing.
    """
    specs, stats = meta.specs, {s.layer: s for s in event.layers}
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


def largest_tensor_bytes(meta: RunMeta) -> int:
    """The per-layer chart's y top: the largest one tensor (K, V or state) any layer can get in
    this run (`kvviz.core.spec.largest_tensor_bytes`: every layer's K, V and state at max_len
    positions, a sliding or chunked layer at its window − 1)."""
    top = spec.largest_tensor_bytes(meta.specs, meta.max_len, meta.elem_bytes, meta.batch)
    return max(top, 1)


def weights_on_scale(weight_bytes: int, contiguous_bytes: int) -> int:
    """The weights' rule, or 0 (left out) when it would flatten the cache to the floor."""
    return weight_bytes if weight_bytes <= WEIGHTS_RULE_MAX * contiguous_bytes else 0


def build_charts(meta: RunMeta, max_new_tokens: int, data: dict) -> dict[str, alt.TopLevelMixin]:
    """Every chart of `data`, with axes fixed to the run's maxima so marks grow in a still frame."""
    return {c.name: c.build(meta, max_new_tokens, data[c.name]) for c in CHARTS if c.name in data}


def contiguous_bytes(meta: RunMeta) -> int:
    """What a contiguous max-length reservation holds for the whole batch."""
    return meta.reserved_bytes


def _layers_chart(meta: RunMeta, max_new_tokens: int, df: pd.DataFrame) -> alt.TopLevelMixin:
    return charts.layer_groups_chart(df, largest_tensor_bytes(meta), list(layer_groups(meta)),
                                     tensors=tuple(dict.fromkeys(df["kind"])))


def _total_chart(meta: RunMeta, max_new_tokens: int, df: pd.DataFrame) -> alt.TopLevelMixin:
    contiguous = contiguous_bytes(meta)
    return charts.total_cache_chart(df, weights_on_scale(meta.weight_bytes, contiguous), contiguous,
                                    max_seq_len=meta.max_len)


# --- the registry: one entry per chart --------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class LiveChart:
    """One chart of the Live page and the run report: all that is known of it, in one entry.

    The page stacks a panel's charts in this order under the panel's title (PANELS) and draws the
    panel's caption (captions.chart_captions / race_captions) under them; the report gives each
    chart a section titled `report_title`, the panel's caption under the panel's last chart.
    """

    name: str  # its DataFrame's, chart's and placeholder's key
    panel: str  # the Live page panel it sits in (a key of PANELS)
    data: Callable[[RunMeta, list[StepEvent], list[StepEvent], pd.DataFrame], pd.DataFrame]  # (meta, cached
    # events, recompute events, both runs' steps frame)
    build: Callable[[dict, int, pd.DataFrame], alt.TopLevelMixin]  # (meta, max new tokens, its frame)
    report_title: str  # its section title in the HTML report
    height: int | None = None  # px on a screen; None: the chart sizes itself
    presenter_height: int | None = None  # px on stage, with chart text 1.5x as large
    paged: bool = False  # drawn only when the run holds blocks (a cache)
    race: bool = False  # drawn only when the run races a no-cache run


PANELS = {  # panel -> its title, in the page's order, two panels a row
    "layers": "Cache bytes per layer (K and V)",
    "total": "Whole cache vs the formula",
    "blocks": "Blocks: paged (modelled) vs contiguous",
    "timings": "Time per step and per layer",
    "race": "The race: time to write the same tokens",
    "positions": "Token positions processed: ≈ n²/2 without a cache vs n with it",
}
CHARTS = (
    LiveChart(name="layers", panel="layers", height=260, presenter_height=340,
              data=lambda meta, cached, recompute, steps: layer_groups_frame(meta, cached[-1]), build=_layers_chart,
              report_title="Cache bytes per layer, grouped by kind (K and V), at the last step"),
    LiveChart(name="total", panel="total", height=260, presenter_height=340,
              data=lambda meta, cached, recompute, steps: steps[steps["mode"] == "cached"], build=_total_chart,
              report_title="Whole cache vs the formula"),
    LiveChart(name="grid", panel="blocks", paged=True,
              data=lambda meta, cached, recompute, steps: frames.block_grid_frame(cached[-1].blocks, meta.batch),
              build=lambda meta, n, df: charts.block_grid_chart(df),
              report_title="Blocks: the paged pool (modelled), at the last step"),
    LiveChart(name="reservation", panel="blocks", paged=True,  # its rows set its height
              data=lambda meta, cached, recompute, steps: reservation_data(meta, cached[-1]),
              build=lambda meta, n, df: charts.reservation_chart(df, max_bytes=contiguous_bytes(meta)),
              report_title="Paged (modelled) vs a contiguous max-length reservation"),
    LiveChart(name="steps", panel="timings", height=240, presenter_height=320,
              data=lambda meta, cached, recompute, steps: steps,
              build=lambda meta, n, df: charts.step_time_chart(df, max_step=n),
              report_title="Time per step"),
    LiveChart(name="layer_times", panel="timings", height=200, presenter_height=280,
              data=lambda meta, cached, recompute, steps: frames.layer_times_frame(cached),
              build=lambda meta, n, df: charts.layer_time_chart(df, max_step=n),
              report_title="Time per layer and decode step (cached run)"),
    LiveChart(name="race", panel="race", race=True, height=220, presenter_height=320,
              data=race_data, build=lambda meta, n, df: charts.race_chart(df),
              report_title="With vs without a cache: time to generate"),
    LiveChart(name="positions", panel="positions", race=True, height=220, presenter_height=320,
              data=race_data, build=lambda meta, n, df: charts.positions_chart(df),
              report_title="Token positions processed: ≈ n²/2 without a cache vs n with it"),
)
RACE_PANELS = frozenset(key for c in CHARTS if c.race for key in (c.panel, c.name))  # panels and charts


def panel_rows(race: bool) -> tuple[tuple[tuple[str, list[str]], ...], ...]:
    """The panels drawn, two a row, each with its charts' names: ((panel, [chart, ...]), ...) rows."""
    panels = [p for p in PANELS if any(c.panel == p and c.race == race for c in CHARTS)]
    named = [(p, [c.name for c in CHARTS if c.panel == p]) for p in panels]
    return tuple(tuple(named[i:i + 2]) for i in range(0, len(named), 2))


def heights(presenting: bool) -> dict[str, int]:
    """Each chart's height in px that has one, on a screen or on stage."""
    return {c.name: c.presenter_height if presenting else c.height for c in CHARTS if c.height}


def panel_caption_charts() -> dict[str, str]:
    """panel -> the chart under which the report prints the panel's caption (its last chart)."""
    return {c.panel: c.name for c in CHARTS}
