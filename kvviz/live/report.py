"""A finished or replayed run as one self-contained HTML file, plus CSV tables. Pure; no streamlit.

`html_report(trace)` returns a single HTML document that opens offline in any browser: the run's
settings and facts, the headline figures, the generated text of each mode, the live page's charts
as inline SVG and the table of steps. It loads nothing: no scripts at all, no stylesheets, fonts or
images from elsewhere, and a Content-Security-Policy that would block them if any slipped in.

Everything that comes from the trace (model names, prompts, generated text, any meta value) is
untrusted — an uploaded trace can say anything — and reaches the page only through the
autoescaping Jinja2 template `templates/report.html.j2`: this module computes the sections as plain
data; only the SVG vl-convert drew and the steps table pandas escaped are passed as Markup.

Charts are the very builders of kvviz/viz/charts.py (picked in kvviz.live.report_charts), rendered to SVG by vl-convert-python (Vega-Lite
compiled and drawn in-process, bundled fonts, no browser, no network: external data URLs are
refused). Without that package the report still has every figure and table, and says so.
"""
from __future__ import annotations

import json
from collections.abc import Callable

import pandas as pd
from markupsafe import Markup

from kvviz.live import captions, frames
from kvviz.live import charts
from kvviz.live import report_charts
from kvviz.live import cache_map_panel
from kvviz.core.events import StepEvent
from kvviz.core.meta import RunMeta, as_dict
from kvviz.core.trace import VERSION, RunSummary, Trace, summary
from kvviz.viz import export
from kvviz.viz.report_page import CSP, CSS, inline_svg, template, utf8_safe
from kvviz.core.units import fmt_bytes, fmt_ms, fmt_ratio

MAX_VALUE_CHARS = 400  # a meta value longer than this is cut, with an ellipsis
MAP_TITLES = {  # the cache map's two sections; every other chart's title is its registry entry's
    "cache_map": "The cache, position by position, at the last step",
    "attention": "The newest token's attention over the cache (averaged over heads), at the last step",
}
FACTS = (  # (meta key, label, formatter) for the run's facts table
    ("model_label", "model", str),
    ("model", "model id or folder", str),
    ("device", "device", str),
    ("dtype", "dtype", str),
    ("num_layers", "decoder layers", str),
    ("num_kv_heads", "KV heads", str),
    ("head_dim", "head dimension", str),
    ("elem_bytes", "bytes per element", str),
    ("bytes_per_token", "KV bytes per token (one sequence)", lambda v: f"{fmt_bytes(v)} ({v:,} B)"),
    ("weight_bytes", "weights", lambda v: f"{fmt_bytes(v)} ({v:,} B)"),
    ("prompt_tokens", "prompt tokens (chat template included)", str),
    ("batch", "batch", str),
    ("max_len", "max length (prompt + new tokens)", str),
)
_NOT_SETTINGS = ("prompts", "system")  # config keys shown in the prompt section instead

Svg = Callable[[dict], str]  # a Vega-Lite dict -> an SVG document


# --- CSV -----------------------------------------------------------------------------------------

def layers_frame(events: list[StepEvent]) -> pd.DataFrame:
    """One row per (event, layer): mode, step, phase, layer, k_bytes, v_bytes, tokens, forward_ms."""
    df = frames.layer_times_frame(events)
    stats = [s for ev in events for s in ev.layers]  # the same (event, layer) order
    df.insert(4, "k_bytes", pd.Series([s.k_bytes for s in stats], dtype="int64"))
    df.insert(5, "v_bytes", pd.Series([s.v_bytes for s in stats], dtype="int64"))
    df.insert(6, "tokens", pd.Series([s.tokens for s in stats], dtype="int64"))
    return df


def csv_tables(trace: Trace) -> dict[str, str]:
    """{"steps": CSV, "layers": CSV}: frames.steps_frame and one row per (event, layer).

    Numbers only (mode and phase are fixed words), so no generated text reaches a spreadsheet.
    """
    return {"steps": frames.steps_frame(trace.events).to_csv(index=False),
            "layers": layers_frame(trace.events).to_csv(index=False)}


# --- charts (built in kvviz.live.report_charts) --------------------------------------------------------------------------------------

def section_title(name: str) -> str:
    return MAP_TITLES.get(name) or next(c.report_title for c in charts.CHARTS if c.name == name)


def _chart_captions(trace: Trace) -> dict[str, str]:
    """Each chart's plain-language caption, when the meta holds the facts they quote."""
    cached, recompute = trace.events_of("cached"), trace.events_of("recompute")
    out = {}
    if report_charts.drawable(trace):
        by_panel = captions.chart_captions(trace.meta, cached)
        out = {"cache_map": cache_map_panel.caption(trace.meta, cached[-1], 0, True, hover=False),
               **{chart: by_panel[panel] for panel, chart in charts.panel_caption_charts().items()
                  if panel in by_panel}}
    if cached and recompute:
        out |= captions.race_captions(cached, recompute, final=True)
    return out


def _charts(trace: Trace, svg: Svg | None) -> dict:
    """The charts section: each figure's name, title, inline SVG (Markup) or error, caption."""
    if svg is None:
        try:
            import vl_convert  # noqa: F401
            svg = export.svg
        except ImportError:
            return {"missing_renderer": True, "figures": [], "heatmap_cells": 0}
    notes = _chart_captions(trace)
    figures = []
    for i, (name, chart) in enumerate(report_charts.report_charts(trace).items()):
        drawing, error = None, None
        try:
            drawing = Markup(inline_svg(svg(report_charts.sized(name, chart)), f"c{i}"))
        except Exception as exc:  # a chart that cannot be drawn must not cost the whole report
            error = type(exc).__name__
        figures.append({"name": name, "title": section_title(name), "svg": drawing, "error": error,
                        "caption": notes.get(name)})
    cells = sum(len(ev.layers) for ev in trace.events_of("cached") if ev.phase == "decode")
    return {"missing_renderer": False, "figures": figures,
            "heatmap_cells": cells if cells > report_charts.MAX_HEATMAP_CELLS else 0}


# --- text sections -------------------------------------------------------------------------------

def _value(value) -> str:
    """A meta value as short plain text (escaped by the caller)."""
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS - 1] + "…"


def _facts(meta: RunMeta) -> list[tuple[str, str]]:
    said = as_dict(meta)  # what the file says, no more
    rows = [(label, fmt(said[key]) if isinstance(said[key], int) else _value(said[key]))
            for key, label, fmt in FACTS if key in said]
    windows = [s.token_cap for s in meta.specs]
    if windows:
        sliding = sorted({w for w in windows if w})
        rows.append(("attention window", "full attention in every layer" if not sliding else
                     f"sliding window of {', '.join(map(str, sliding))} tokens in "
                     f"{sum(bool(w) for w in windows)} of {len(windows)} layers"))
    if meta.versions:
        rows.append(("software", ", ".join(f"{k} {_value(v)}" for k, v in meta.versions.items())))
    known = {k for k, _, _ in FACTS} | {"layers", "versions", "config"}
    rows += [(k, _value(v)) for k, v in said.items() if k not in known]
    return rows


def _settings(meta: RunMeta) -> list[tuple[str, str]]:
    return [(k, _value(v)) for k, v in (meta.config or {}).items() if k not in _NOT_SETTINGS]


def _prompt(meta: RunMeta) -> dict:
    """The system prompt and each (title or "", text) prompt; prompts are never cut."""
    config = meta.config or {}
    system = config["system"] if isinstance(config.get("system"), str) else ""
    prompts = config.get("prompts") if isinstance(config.get("prompts"), list) else []
    titled = len(prompts) > 1 or bool(system)  # else the section's h2 says it
    def title(i: int) -> str:
        return ("Prompt" if len(prompts) == 1 else f"Prompt {i + 1}") if titled else ""
    return {"system": system,
            "prompts": [(title(i), prompt if isinstance(prompt, str) else _value(prompt))
                        for i, prompt in enumerate(prompts)]}


def texts_of(events: list[StepEvent]) -> list[str]:
    """The generated text of every sequence of the batch, in order."""
    if not events:
        return []
    return ["".join(ev.texts[i] for ev in events if i < len(ev.texts))
            for i in range(len(events[0].texts))]


MODE_TITLES = {"cached": "With the KV cache",
               "recompute": "Without a cache (the whole text recomputed every step)"}


def _outputs(trace: Trace) -> dict:
    """Each mode's (title, texts of the batch), and the parity line of the race when both ran."""
    modes = [(f"{MODE_TITLES.get(mode, mode)}: {len(trace.events_of(mode))} steps",
              texts_of(trace.events_of(mode))) for mode in trace.modes]
    cached, recompute = trace.events_of("cached"), trace.events_of("recompute")
    parity = captions.parity(cached, recompute, final=True) if cached and recompute else None
    return {"modes": modes, "parity": parity}


def _headline(trace: Trace, sums: dict, wall_tokens_per_s: float | None = None) -> list[tuple[str, str, str]]:
    """The page's headline figures, from the same function (captions.headline) and the same events."""
    cached = trace.events_of("cached")
    if not cached:
        return []
    meta = trace.meta.with_batch(len(cached[-1].token_ids))  # the events say it; meta may not
    return list(captions.headline(meta, sums, cached[-1], wall_tokens_per_s, cached, trace.events_of("recompute")))


SUMMARY_ROWS = (  # (label, formatter of one mode's numbers, a kvviz.core.trace.ModeSummary)
    ("time to first token", lambda n: fmt_ms(n.ttft_ms)),
    ("inter-token median", lambda n: fmt_ms(n.itl_median_ms)),
    ("inter-token p95", lambda n: fmt_ms(n.itl_p95_ms)),
    ("tokens/s", lambda n: "–" if n.tokens_per_s is None else f"{n.tokens_per_s:.1f}"),
    ("new tokens × batch", lambda n: f"{n.new_tokens} × {n.batch}"),
    ("peak KV cache", lambda n: fmt_bytes(n.peak_kv_bytes)),
    ("peak formula", lambda n: fmt_bytes(n.peak_formula_bytes)),
    ("total time", lambda n: fmt_ms(n.total_ms)),
)


def _summary(sums: RunSummary) -> dict:
    modes = sums.modes
    rows = [(label, [fmt(modes[m]) for m in modes]) for label, fmt in SUMMARY_ROWS] if modes else []
    speedup = ""
    if modes and sums.recompute_speedup is not None:
        speedup = (f'Recompute took {fmt_ratio(sums.recompute_speedup)} the cached time '
                   f'over the first {sums.speedup_steps} steps of both.')
    return {"modes": list(modes), "rows": rows, "speedup": speedup}


def _steps_table(trace: Trace) -> Markup | None:
    """Every step as an HTML table, escaped by pandas (hence Markup)."""
    if not trace.events:
        return None
    df = frames.steps_frame(trace.events)
    # the text each step added to sequence 0, quoted so whitespace shows (escaped by to_html)
    df["text"] = [utf8_safe(json.dumps(ev.texts[0] if ev.texts else "", ensure_ascii=False))
                  for ev in trace.events]
    return Markup(df.to_html(index=False, escape=True, na_rep="–", border=0, classes="steps",
                             float_format=lambda x: f"{x:,.1f}"))


# --- the document --------------------------------------------------------------------------------

def _model_name(meta: RunMeta) -> str:
    return meta.model_label or meta.model or "a recorded run"


def _subtitle(trace: Trace) -> str:
    meta = trace.meta
    bits = [f"on {_value(meta.device)}" if meta.device is not None else "",
            f"in {_value(meta.dtype)}" if meta.dtype is not None else ""]
    cached = trace.events_of("cached")
    if cached:
        bits.append(f"· {len(cached)} new tokens × batch {len(cached[-1].token_ids)}")
    bits.append("· with the no-cache race" if trace.events_of("recompute") else "")
    return "Recorded " + " ".join(b for b in bits if b) if any(bits) else ""


def html_report(trace: Trace, svg: Svg | None = None, wall_tokens_per_s: float | None = None) -> str:
    """The run as one self-contained HTML document (str); nothing in it loads anything.

    `svg` turns a Vega-Lite dict into an SVG document: vl-convert-python by default (when it
    is not installed, the report says so in place of the charts). `wall_tokens_per_s`: the rate
    the page measured for this run (the Live page's Tokens/s (wall clock)); a replayed or headless
    trace has none, and the report shows "–" as the page does.
    """
    sums = summary(trace)
    doc = template().render(
        csp=CSP, css=Markup(CSS), name=_model_name(trace.meta), subtitle=_subtitle(trace),
        headline=_headline(trace, sums, wall_tokens_per_s), prompt=_prompt(trace.meta), outputs=_outputs(trace),
        charts=_charts(trace, svg), summary=_summary(sums), facts=_facts(trace.meta),
        settings=_settings(trace.meta), steps_table=_steps_table(trace), version=VERSION)
    return utf8_safe(doc)  # a lone surrogate anywhere would break the caller's encode
