"""The offline HTML page every kvviz report shares: its template, its CSS and Content Security
Policy (nothing in it loads anything), inline SVG charts and UTF-8-safe text. Pure; no Streamlit.
Used by the run report (kvviz.live.report) and the shrink report (kvviz.shrink.report)."""
from __future__ import annotations

import re
from functools import lru_cache

import jinja2

CHART_WIDTH = 520  # px; the SVGs scale down with the page (CSS max-width)

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'"
CSS = """
:root { --ink:#1f2933; --muted:#5f6b7a; --line:#e3e7ed; --soft:#f4f6f9; --accent:#4C78A8;
        --ok:#54A24B; --warn:#E45756; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: #fff; line-height: 1.45;
       font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 36px 0 10px; padding-bottom: 4px; border-bottom: 2px solid var(--accent); }
h3 { font-size: 15px; margin: 16px 0 6px; }
.sub, .note, .caption, .help, .seq { color: var(--muted); }
.caption { font-size: 13px; margin: 6px 0 0; }
.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: 10px; }
.figure { background: var(--soft); border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; }
.figure .label { font-size: 12px; color: var(--muted); }
.figure .value { font-size: 22px; font-weight: 600; margin: 2px 0; font-variant-numeric: tabular-nums; }
.figure .help { font-size: 11px; }
pre.text { white-space: pre-wrap; overflow-wrap: anywhere; background: var(--soft);
           border: 1px solid var(--line); border-left: 4px solid var(--accent); border-radius: 6px;
           padding: 10px 12px; margin: 0 0 10px; font: 13px/1.5 ui-monospace, Menlo, Consolas, monospace; }
.ok { color: #2f6b2a; } .warn { color: #a23a36; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(480px, 1fr)); gap: 18px; }
figure.chart { margin: 0; border: 1px solid var(--line); border-radius: 8px; padding: 12px; }
figure.chart figcaption { font-weight: 600; margin-bottom: 8px; }
figure.chart svg { display: block; max-width: 100%; height: auto; }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: left; vertical-align: top; }
table.summary td, table.steps td { text-align: right; }
table.steps th { position: sticky; top: 0; background: #fff; }
table.facts td { overflow-wrap: anywhere; }
.cols { display: grid; grid-template-columns: repeat(auto-fit, minmax(360px, 1fr)); gap: 24px; }
.scroll { overflow: auto; max-height: 70vh; border: 1px solid var(--line); border-radius: 6px; }
footer { margin-top: 40px; font-size: 12px; color: var(--muted); }
@media print { .scroll { max-height: none; overflow: visible; } figure.chart { break-inside: avoid; } }
"""


@lru_cache(maxsize=4)
def template(name: str = "report.html.j2") -> jinja2.Template:
    """A report template of kvviz/templates, autoescaping everything it is given."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("kvviz", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    return env.get_template(name)


def utf8_safe(text: str) -> str:
    """`text` with lone surrogates (valid in a JSON string, not in UTF-8) replaced by "?"."""
    return text.encode("utf-8", "replace").decode("utf-8")



def inline_svg(svg: str, prefix: str) -> str:
    """An SVG document made fit to sit inline in HTML among others.

    Drops the XML declaration and namespace declarations (an HTML parser supplies both
    namespaces), and prefixes every id and its references (`url(#…)`, `href="#…"`) so the
    clip paths and gradients of one chart never resolve to another chart's.
    """
    svg = re.sub(r"^\s*<\?xml[^>]*\?>\s*", "", svg)
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}-\1"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", svg)
    return re.sub(r'(href=")#([^"]+)"', rf'\1#{prefix}-\2"', svg)
