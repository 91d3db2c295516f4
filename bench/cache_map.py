"""What the cache map costs: attention capture per decode step, and a map redraw at full width."""
from __future__ import annotations

import time
from contextlib import nullcontext

from bench.engine_runs import BareDecodeLoop, bench_config
from bench.results import Result, interleaved, medians, spread
from bench.settings import Settings

ATTENTION_LIMIT = 1.25  # eager attention + hooks may cost at most a quarter more per decode step
REDRAW_LIMIT = 0.5  # re-feeding the built Vega-Lite must cost at most half of building a fresh chart


def attention_step_ms(loop, attention: bool) -> float:
    """One decode step of `loop` (engine_runs.BareDecodeLoop): eager with the attention hooks and
    the rows read as the engine reads them, or sdpa without; the switch is outside the clock."""
    from kvviz.engine.hooks import attention_rows

    loop.lm.model.set_attn_implementation("eager" if attention else "sdpa")
    with attention_rows(loop.layers) if attention else nullcontext() as rows:
        start = time.perf_counter()
        loop.step_ms(False)
        if rows is not None:
            rows.take(loop.batch.ids.shape[1], static=False)
        return (time.perf_counter() - start) * 1e3


def loops(s: Settings) -> int:
    """Decode loops per variant: at most 3 (≈ 30 s on a 2-core CPU), to keep `make bench` short."""
    return min(s.reps, 3)


def attention_cost(lm, s: Settings) -> tuple[list[Result], str]:
    """The capture's cost on the default model, and a map redraw."""
    row, note = attention_capture(lm, s)
    redraw, redraw_note = map_redraw(s)
    return [row, redraw], note + " " + redraw_note


def attention_capture(lm, s: Settings, label: str | None = None) -> tuple[Result, str]:
    """Eager attention + the capture hooks against sdpa, per decode step of `lm`; `label`: the
    model, in the row's name, when it is not the default model."""
    cfg = bench_config(2 * s.new_tokens + 2)
    samples: dict[str, list[float]] = {"attention": [], "sdpa": []}
    previous = lm.model.config._attn_implementation
    try:
        for _ in range(loops(s)):
            loop = BareDecodeLoop(lm, cfg)
            variants = {"attention": lambda: attention_step_ms(loop, True),
                        "sdpa": lambda: attention_step_ms(loop, False)}
            interleaved(variants, 1)  # warm-up pair, discarded
            for name, values in interleaved(variants, s.new_tokens).items():
                samples[name] += values
    finally:
        lm.model.set_attn_implementation(previous)
    m = medians(samples)
    row = Result(f"Attention over the cache: decode step, eager + capture / sdpa{f' ({label})' if label else ''}",
                 f"{m['attention']:.2f} ms", f"{m['sdpa']:.2f} ms", m["attention"] / m["sdpa"], "<=", ATTENTION_LIMIT)
    return row, (
        "The Live page's \"Attention over the cache\" toggle loads the model with eager attention "
        "(sdpa returns no weights) and hooks every layer's attention module to keep the newest "
        "token's weights, averaged over heads (`kvviz.engine.hooks.attention_rows`). A bare greedy loop "
        f"(`BareDecodeLoop`) on the {label or 'default model'} alternates its decode steps one by one between "
        "that (the rows read after each step, as the engine does) and sdpa without hooks, so both "
        f"see the same lengths and load; {loops(s)} loops of {s.new_tokens} steps per variant after "
        f"a discarded pair. With capture: {spread(samples['attention'])} ms; sdpa: "
        f"{spread(samples['sdpa'])} ms.")


def long_run(positions: int, layers: int):
    """Synthetic meta and events of a run with `positions` cached over `layers` full layers."""
    from kvviz.core.events import LayerStat, StepEvent
    from kvviz.core.meta import LayerRecord, RunMeta

    prompt = positions // 2
    meta = RunMeta(num_layers=layers, layers=[LayerRecord(kind="full")] * layers, prompt_tokens=prompt,
                   max_len=positions + 1, batch=1, prompt_pieces=[[f" p{i}" for i in range(prompt)]])
    events = [StepEvent(mode="cached",
                        phase="decode",
                        step=s,
                        token_ids=(1,),
                        texts=(f" t{s}",),
                        finished=(False,),
                        step_ms=1.0,
                        seq_len=prompt + s + 1,
                        positions=1,
                        kv_bytes=0,
                        formula_bytes=0,
                        layers=tuple(LayerStat(layer=i, k_bytes=0, v_bytes=0, tokens=prompt + s, forward_ms=0.1) for i in range(layers)),
                        blocks=None)
              for s in range(positions - prompt + 1)]
    return meta, events


def map_redraw(s: Settings, positions: int = 1024, layers: int = 30) -> tuple[Result, str]:
    """A redraw's data + Vega-Lite work, re-fed vs built fresh, at `positions` × `layers` (binned)."""
    from kvviz.live import cache_map
    from kvviz.viz import charts
    from kvviz.live import cache_map_charts as cc

    meta, events = long_run(positions, layers)
    kinds, vega = meta.specs, None

    def refed() -> float:
        start = time.perf_counter()
        charts.vega_lite_with_data(vega, cache_map.map_frame(meta, events))
        return (time.perf_counter() - start) * 1e3

    def fresh() -> float:
        start = time.perf_counter()
        chart = cc.cache_map_chart(cache_map.map_frame(meta, events), kinds, meta.max_len, meta.prompt_tokens)
        charts.to_vega_lite(chart)
        return (time.perf_counter() - start) * 1e3

    vega = charts.to_vega_lite(cc.cache_map_chart(cache_map.map_frame(meta, []), kinds, meta.max_len,
                                             meta.prompt_tokens))
    samples = interleaved({"refed": refed, "fresh": fresh}, 5 * s.reps)
    m = medians(samples)
    row = Result(f"Cache map redraw at {positions:,} positions × {layers} layers: re-fed / fresh chart",
                 f"{m['refed']:.2f} ms", f"{m['fresh']:.2f} ms", m["refed"] / m["fresh"], "<=", REDRAW_LIMIT)
    return row, (
        f"The map's redraw (its frame, binned to {cache_map.MAX_COLUMNS} columns, plus its Vega-Lite) at "
        f"{positions:,} cached positions × {layers} layers: re-feeding the Vega-Lite built once "
        f"(`charts.vega_lite_with_data`) {spread(samples['refed'])} ms against building a fresh chart "
        f"and its Vega-Lite {spread(samples['fresh'])} ms, {5 * s.reps} interleaved rounds.")
