"""A full-vs-shrunk comparison as one self-contained HTML file. Pure; no streamlit.

The same document rules as the run report (the page of kvviz/viz/report_page.py): nothing loads anything, every value
(answers, labels, token texts: an uploaded file can say anything) is escaped by the autoescaping
template `templates/shrink_report.html.j2`, and only the SVG vl-convert drew and the table pandas
escaped arrive as Markup. The figures are the Comparison's own (the Shrink page shows the same).
"""
from __future__ import annotations

import pandas as pd
from markupsafe import Markup

from kvviz.viz import report_page
import kvviz.shrink.charts
from kvviz.shrink.compute import Comparison
from kvviz.core.units import fmt_bytes


def figures(result: Comparison) -> list[tuple[str, str]]:
    """(label, value) of the headline figures, each measured or computed from measured steps."""
    full, shrunk = result.full.steps[-1], result.shrunk.steps[-1]
    rows = [("KV cache at the end, full (measured)", f"{fmt_bytes(full.kv_bytes)} ({full.kv_bytes:,} B)"),
            ("KV cache at the end, shrunk (measured)", f"{fmt_bytes(shrunk.kv_bytes)} ({shrunk.kv_bytes:,} B)"),
            ("Shrunk ÷ full bytes (at the last step both made)", f"{result.bytes_ratio():.2f}"),
            ("Median decode step, full / shrunk", f"{result.full.decode_ms():.1f} ms / {result.shrunk.decode_ms():.1f} ms"),
            ("Shrunk ÷ full decode step time (paired steps)", result.timing_words() or "no decode step")]
    peaks = [max(s.peak_bytes for s in run.steps) for run in (result.full, result.shrunk)]
    if all(peaks):
        rows.append(("Peak during the run, full / shrunk (tensors tracked)",
                     f"{fmt_bytes(peaks[0])} / {fmt_bytes(peaks[1])}"))
    if shrunk.payload_bytes:
        rows.append(("Quantized cache: payload + scales and zero points + residual",
                     f"{shrunk.payload_bytes:,} B + {shrunk.scale_bytes:,} B + {shrunk.residual_bytes:,} B"))
    return rows


def charts(result: Comparison, prompt_pieces: list[str], svg) -> list[dict]:
    """Each chart's title and inline SVG (Markup), or the error that kept it from being drawn."""
    frame = kvviz.shrink.charts.steps_frame({"full": result.full.steps, "shrunk": result.shrunk.steps})
    built = {"Cache bytes per step (measured)": kvviz.shrink.charts.steps_chart(frame, "kv_mib", "cache (MiB)"),
             "Time per step": kvviz.shrink.charts.steps_chart(frame, "step_ms", "step time (ms)")}
    if result.shrunk.kept:
        kept = kvviz.shrink.charts.kept_map_frame(result.shrunk.kept, len(prompt_pieces), prompt_pieces)
        built["Which prompt positions each layer kept"] = kvviz.shrink.charts.kept_map_chart(kept)
    out = []
    for i, (title, chart) in enumerate(built.items()):
        try:
            drawing, error = Markup(report_page.inline_svg(svg(chart.properties(width=report_page.CHART_WIDTH).to_dict()),
                                                      f"s{i}")), None
        except Exception as exc:  # a chart that cannot be drawn must not cost the whole report
            drawing, error = None, type(exc).__name__
        out.append({"title": title, "svg": drawing, "error": error})
    return out


def steps_table(result: Comparison) -> Markup:
    """Both runs step by step, side by side, escaped by pandas (hence Markup)."""
    def side(run, step: int, name: str) -> dict:  # blank where this run had already ended its answer
        if step >= len(run.steps):
            return {f"{name} token": "", f"{name} bytes": "", f"{name} ms": ""}
        s, piece = run.steps[step], run.pieces[step] if run.pieces else ""
        return {f"{name} token": report_page.utf8_safe(piece), f"{name} bytes": s.kv_bytes, f"{name} ms": f"{s.step_ms:,.1f}"}
    rows = [{"step": step, **side(result.full, step, "full"), **side(result.shrunk, step, "shrunk")}
            for step in range(max(len(result.full.steps), len(result.shrunk.steps)))]
    order = ["step", "full token", "shrunk token", "full bytes", "shrunk bytes", "full ms", "shrunk ms"]
    rows = [{k: r[k] for k in order} for r in rows]
    return Markup(pd.DataFrame(rows).to_html(index=False, escape=True, border=0, classes="steps"))


def html_report(result: Comparison, prompt_pieces: list[str], model: str = "", svg=None) -> str:
    """The comparison as one HTML document (str). `svg` draws a Vega-Lite dict (vl-convert by
    default; without it the report says so and keeps every figure and table)."""
    if svg is None:
        try:
            import vl_convert  # noqa: F401
            from kvviz.viz import export
            svg = export.svg
        except ImportError:
            svg = None
    doc = report_page.template("shrink_report.html.j2").render(
        csp=report_page.CSP, css=Markup(report_page.CSS), model=model or "a model", mode=result.shrunk.label,
        caption=result.caption(), figures=figures(result), full=result.full, shrunk=result.shrunk,
        prompt="".join(prompt_pieces), charts=charts(result, prompt_pieces, svg) if svg else None,
        steps_table=steps_table(result))
    return report_page.utf8_safe(doc)
