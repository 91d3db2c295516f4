"""The HTML report and CSV tables: figures, one SVG per chart, hostile text inert, nothing external."""
import ast
from markupsafe import escape  # the template's own escaping (Jinja2 autoescape)
import io
import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from kvviz.core import assets
from kvviz.live import captions, frames
from kvviz.live import report
from kvviz.live import report_charts
from kvviz.viz import export
from kvviz.core.events import BlockStat, LayerStat, StepEvent
from kvviz.core.trace import Trace, TraceError, summary

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [p for p in sorted(assets.TRACES.glob("*.json"))
            if json.loads(p.read_text()).get("format") == "kvviz-trace"]  # run traces: a shrink file has its
# own report, a vLLM watch none

SCRIPT = '<script>alert("pwned")</script>'
MARKDOWN = "**bold** _it_ [click](https://evil.example/x) ![img](http://evil.example/i.png)"
BREAKOUT = "\n</pre></td></table><img src=x onerror=alert(1)><style>body{display:none}</style>"
ATTRIBUTE = '" onmouseover="alert(1)" x="'
HOSTILE = (SCRIPT, MARKDOWN, BREAKOUT, ATTRIBUTE)

# Every tag a report may hold: its own HTML and what Vega's SVG renderer draws.
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "main", "footer", "h1", "h2", "h3", "p",
    "div", "pre", "code", "table", "thead", "tbody", "tr", "th", "td", "figure", "figcaption",
    "svg", "g", "path", "rect", "line", "text", "defs", "clippath", "lineargradient", "stop",
    "circle", "tspan",
}


# --- a hand-built trace (the way tests/core/test_trace.py builds events), with full run meta ----------

LAYERS, KV_HEADS, HEAD_DIM, ELEM, BATCH, PROMPT = 2, 1, 16, 4, 2, 4
PER_TOKEN = 2 * LAYERS * KV_HEADS * HEAD_DIM * ELEM  # 256 B per token, one sequence


def layer(i, tokens, ms=0.5):
    nbytes = tokens * KV_HEADS * HEAD_DIM * ELEM * BATCH
    return LayerStat(layer=i, k_bytes=nbytes, v_bytes=nbytes, tokens=tokens, forward_ms=ms)


def event(mode, step, step_ms, texts, cached=True):
    seq = PROMPT + step + 1
    held = seq - 1 if cached else 0
    blocks = BlockStat(block_size=16, num_blocks=2, num_used_blocks=2, num_free_blocks=0,
                       num_slots_in_last_block=held, paged_bytes=2 * 16 * PER_TOKEN,
                       contiguous_bytes=8 * PER_TOKEN * BATCH, contiguous_is_real=False)
    return StepEvent(
        mode=mode, phase="prefill" if step == 0 else "decode", step=step,
        token_ids=tuple(range(100 + step, 100 + step + BATCH)), texts=texts,
        finished=(False,) * BATCH, step_ms=step_ms, seq_len=seq,
        positions=(PROMPT if step == 0 else 1) * BATCH if cached else (seq - 1) * BATCH,
        kv_bytes=held * PER_TOKEN * BATCH, formula_bytes=held * PER_TOKEN * BATCH,
        layers=(layer(0, held), layer(1, held, 0.75)), blocks=blocks if cached else None,
    )


STEP_TEXTS = [(SCRIPT, "plain"), (" " + MARKDOWN, " more"), (BREAKOUT, " end"), (ATTRIBUTE, ".")]


def hand_trace():
    meta = {
        "model": "tiny/<b>model</b>", "model_label": f"Tiny {SCRIPT}", "device": "cpu",
        "dtype": "float32", "num_layers": LAYERS, "num_kv_heads": KV_HEADS, "head_dim": HEAD_DIM,
        "windows": [None, None], "elem_bytes": ELEM, "bytes_per_token": PER_TOKEN,
        "weight_bytes": 12_345, "prompt_tokens": PROMPT, "batch": BATCH, "max_len": 8,
        "config": {"prompts": [f"Hi {SCRIPT}", MARKDOWN], "system": BREAKOUT, "batch": BATCH,
                   "max_new_tokens": 4, "temperature": 0.0, "cache_backend": ATTRIBUTE},
        "versions": {"torch": "2.13.0+cpu", "transformers": "5.24.0"},
        "cache_caveat": f"note {SCRIPT} {MARKDOWN}",
    }
    t = Trace(meta)
    for step, (ms, texts) in enumerate(zip([40.0, 10.0, 12.0, 11.0], STEP_TEXTS)):
        t.append(event("cached", step, ms, texts))
    for step, (ms, texts) in enumerate(zip([40.0, 30.0, 60.0], STEP_TEXTS)):
        t.append(event("recompute", step, ms, texts, cached=False))
    return t


@pytest.fixture(scope="module")
def hand():
    t = hand_trace()
    return t, report.html_report(t)


@pytest.fixture(scope="module", params=[p.name for p in EXAMPLES])
def example(request):
    t = Trace.load(assets.TRACES / request.param)
    return t, report.html_report(t)


# --- what a browser would load or run ------------------------------------------------------------

class Tags(HTMLParser):
    """Every start tag with its attributes, and the text of every <style>."""

    def __init__(self, doc):
        super().__init__(convert_charrefs=True)
        self.tags, self.styles, self._in_style = [], [], False
        self.feed(doc)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.styles.append(data)


def assert_loads_nothing(doc):
    """No script can run and nothing can be fetched, whatever text the report quotes."""
    assert "<script" not in doc.lower()
    parsed = Tags(doc)
    names = [t for t, _ in parsed.tags]
    assert set(names) <= ALLOWED_TAGS, set(names) - ALLOWED_TAGS
    assert names.count("style") == 1 and names.count("title") == 1
    for tag, attrs in parsed.tags:
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name)
            assert name not in ("src", "srcset", "action", "formaction", "background"), (tag, name)
            if name.endswith("href"):
                assert value.startswith("#"), (tag, name, value)
            if name == "style" or (value and "url(" in value):
                assert re.sub(r"url\(#[\w-]+\)", "", value or "").find("url(") < 0, (tag, value)
    metas = [a for t, a in parsed.tags if t == "meta" and a.get("http-equiv")]
    assert [m["http-equiv"] for m in metas] == ["Content-Security-Policy"]
    assert "default-src 'none'" in metas[0]["content"]
    css = "".join(parsed.styles)
    assert "url(" not in css and "@import" not in css and "http" not in css


def chart_names(t):
    return list(report_charts.report_charts(t))


# --- the example trace ---------------------------------------------------------------------------

def test_examples_are_shipped():
    assert EXAMPLES, "assets/traces/*.json: no example trace to report on"


def test_shipped_replay_example_answers_its_question_right():
    """The Replay example a room sees first: SmolLM2 asked why the sky is blue answers with
    Rayleigh scattering of the shorter (blue) wavelengths — right — in both runs (greedy, fp32).
    The example it replaced said a KV cache was a "KVM (Kernel-Vacuum Memory) cache"."""
    t = Trace.load(assets.TRACES / "smollm2-135m-cpu-fp32.json")
    assert t.meta.setting("prompts") == ["Why is the sky blue?"] and t.meta.dtype == "float32"
    answers = {mode: "".join(e.texts[0] for e in t.events_of(mode)) for mode in ("cached", "recompute")}
    assert answers["cached"] == answers["recompute"]
    assert "Rayleigh scattering" in answers["cached"] and "shorter wavelengths" in answers["cached"]
    assert "Kernel-Vacuum" not in answers["cached"]


@pytest.mark.slow
def test_example_report_has_figures_texts_and_settings(example):
    t, doc = example
    cached, recompute = t.events_of("cached"), t.events_of("recompute")
    for label, value, _ in captions.headline(t.meta, summary(t), cached[-1], None, cached, recompute):
        assert escape(label) in doc and escape(value) in doc, (label, value)
    assert escape(t.meta.model_label) in doc
    for mode in t.modes:
        text = "".join(e.texts[0] for e in t.events_of(mode))
        assert escape(text) in doc
    for prompt in t.meta.setting("prompts"):
        assert escape(prompt) in doc
    assert f"<th>max_new_tokens</th><td>{t.meta.setting('max_new_tokens')}</td>" in doc
    assert "Same tokens" in doc  # the recompute run matched


@pytest.mark.slow
def test_example_report_has_an_svg_per_chart(example):
    t, doc = example
    names = chart_names(t)
    assert {"cache_map", "layers", "total", "grid", "reservation", "steps", "layer_times", "race"} <= set(names)
    assert doc.count("<svg") == len(names)
    for name in names:
        figure = doc.split(f'id="chart-{name}"', 1)[1].split("</figure>", 1)[0]
        assert "<svg" in figure and "could not be drawn" not in figure, name
    ids = re.findall(r'\bid="([^"]+)"', doc)
    assert len(ids) == len(set(ids)), "SVG ids clash between charts"
    for ref in re.findall(r"url\(#([\w-]+)\)", doc):
        assert ref in ids


@pytest.mark.slow
def test_example_report_loads_nothing(example):
    _, doc = example
    assert_loads_nothing(doc)
    assert "http://" not in doc and "https://" not in doc  # not even a namespace URI


@pytest.mark.slow
def test_example_report_steps_table(example):
    t, doc = example
    table = doc.split('class="dataframe steps"', 1)[1].split("</table>", 1)[0]
    assert table.count("<tr") == len(t.events) + 1  # header + one row per step
    for column in frames.STEP_COLUMNS:
        assert f"<th>{column}</th>" in table


# --- the hand-built trace: hostile text everywhere ------------------------------------------------

@pytest.mark.slow
def test_hostile_text_is_escaped_everywhere(hand):
    t, doc = hand
    assert_loads_nothing(doc)
    for text in (SCRIPT, BREAKOUT, ATTRIBUTE):
        assert text not in doc  # never verbatim (MARKDOWN holds nothing HTML would read)
    for i in range(BATCH):
        for mode in t.modes:
            generated = "".join(e.texts[i] for e in t.events_of(mode))
            assert escape(generated) in doc
    for text in (*t.meta.setting("prompts"), t.meta.setting("system"), t.meta.model_label, ATTRIBUTE):
        assert escape(text) in doc
    assert "<title>kvviz report: Tiny &lt;script&gt;" in doc
    assert escape(f"note {SCRIPT}") in doc  # a meta string the facts table quotes
    # the markdown stays literal text: no <strong>, <em>, <a> or <img> appear
    assert "**bold** _it_ [click](https://evil.example/x)" in doc


@pytest.mark.slow
def test_hand_report_figures_and_charts(hand):
    t, doc = hand
    sums = summary(t)
    assert sums.recompute_speedup == pytest.approx(130 / 62)
    assert "2.1×" in doc  # vs recompute, over the 3 steps both modes have
    assert f"4 × {BATCH}" in doc  # tokens × batch
    assert "40.0 ms" in doc  # time to first token
    assert "4 KiB" in doc  # 4 tokens held × 256 B × batch 2 at the last cached step
    names = chart_names(t)
    assert set(names) == {"cache_map", "layers", "total", "grid", "reservation", "steps", "layer_times",
                          "race", "positions"}
    assert doc.count("<svg") == len(names)
    assert "sequence 1" in doc  # batch 2: both sequences' texts


@pytest.mark.slow
def test_report_of_lone_surrogates_encodes():
    t = hand_trace()
    t.events[0] = event("cached", 0, 40.0, ("bad \ud800 text", "ok"))
    doc = report.html_report(t, svg=lambda vega: "<svg></svg>")
    doc.encode("utf-8")  # a download would encode it
    assert "bad ? text" in doc


# --- degraded paths -------------------------------------------------------------------------------

def figures_of(doc):
    """(label, value) of every headline figure in a report, in order."""
    return re.findall(r'<div class="label">(.*?)</div><div class="value">(.*?)</div>', doc)


@pytest.mark.parametrize("wall", [7.46, None])
def test_report_shows_the_pages_headline_figures_and_its_wall_clock_rate(wall):
    """The Live page draws captions.headline(meta, summary, last, wall rate, cached, recompute)
    (kvviz.live.view_panel.LiveView.headline); the report shows the very same figures, the no-cache
    one and the wall-clock rate included (a dash only where the page measured none)."""
    t = hand_trace()
    cached, recompute = t.events_of("cached"), t.events_of("recompute")
    page = captions.headline(t.meta, summary(t), cached[-1], wall, cached, recompute)
    doc = report.html_report(t, svg=lambda vega: "<svg></svg>", wall_tokens_per_s=wall)
    assert figures_of(doc) == [(str(escape(label)), str(escape(value))) for label, value, _ in page]
    shown = dict(figures_of(doc))
    assert shown["Tokens/s (wall clock)"] == ("7.5" if wall else "–")
    cost = captions.no_cache_cost(cached, recompute)
    assert shown[captions.LAST_STEP_LABEL] == f"{60 / 12:.1f}×"  # step 2: 60 ms vs 12 ms
    assert shown[captions.RUN_LABEL] == f"≈ {cost.run_ratio:.1f}×"


def test_without_vl_convert_the_report_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "vl_convert", None)  # import fails
    doc = report.html_report(hand_trace())
    assert "<svg" not in doc and "vl-convert-python" in doc
    assert "Every step" in doc and "40.0 ms" in doc
    assert_loads_nothing(doc)


@pytest.mark.slow
def test_a_chart_that_fails_costs_only_itself():
    def flaky(vega):
        if vega.get("mark", {}) == {"type": "rect", "stroke": "white", "strokeWidth": 1}:
            raise RuntimeError("boom")  # the block grid
        return '<svg><g id="a"><rect clip-path="url(#a)"/></g></svg>'
    t = hand_trace()
    doc = report.html_report(t, svg=flaky)
    assert doc.count("could not be drawn") == 1 and doc.count("<svg") == len(chart_names(t)) - 1
    assert 'id="c0-a"' in doc and 'url(#c0-a)' in doc and 'id="c1-a"' in doc


def test_junk_meta_is_refused_with_the_field_named():
    with pytest.raises(TraceError, match=r"meta.batch: expected int \| null, got str"):
        Trace({"batch": "two", "max_len": -1, "config": "nope"})


@pytest.mark.parametrize("t", [
    Trace(),
    Trace({"model": "x"}, []),
    Trace({}, [event("cached", 0, 5.0, ("a", "b"))]),  # no run meta: data-driven axes
    Trace({"batch": 2, "config": {}}, [event("recompute", 0, 5.0, ("a", "b"), cached=False)]),
], ids=["empty", "no-events", "no-meta", "recompute-only"])
def test_sparse_traces_still_report(t):
    doc = report.html_report(t, svg=lambda vega: "<svg></svg>")
    assert doc.startswith("<!DOCTYPE html>") and doc.rstrip().endswith("</html>")
    assert_loads_nothing(doc)


def test_inline_svg_drops_namespaces_and_scopes_ids():
    svg = ('<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" '
           'xmlns:xlink="http://www.w3.org/1999/xlink"><defs><clipPath id="clip1"/></defs>'
           '<g clip-path="url(#clip1)"><use xlink:href="#clip1"/></g></svg>')
    out = report.inline_svg(svg, "c3")
    assert out == ('<svg><defs><clipPath id="c3-clip1"/></defs><g clip-path="url(#c3-clip1)">'
                   '<use xlink:href="#c3-clip1"/></g></svg>')


def test_vl_convert_fetches_nothing():
    pytest.importorskip("vl_convert")
    vega = {"data": {"url": "https://example.com/data.csv"}, "mark": "point",
            "encoding": {"x": {"field": "a", "type": "quantitative"}}}
    with pytest.raises(Exception, match="not allowed"):
        export.svg(vega)


# --- CSV -------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_csv_tables_parse_back(hand):
    t, _ = hand
    tables = report.csv_tables(t)
    assert set(tables) == {"steps", "layers"}
    steps = pd.read_csv(io.StringIO(tables["steps"]))
    assert list(steps.columns) == list(frames.STEP_COLUMNS)
    assert len(steps) == len(t.events)
    assert steps["step_ms"].tolist() == [e.step_ms for e in t.events]
    assert steps["kv_bytes"].tolist() == [e.kv_bytes for e in t.events]
    assert steps["num_used_blocks"].isna().tolist() == [e.blocks is None for e in t.events]
    layers = pd.read_csv(io.StringIO(tables["layers"]))
    assert list(layers.columns) == ["mode", "step", "phase", "layer", "k_bytes", "v_bytes",
                                    "tokens", "forward_ms"]
    assert len(layers) == len(t.events) * LAYERS
    first = layers.iloc[1]
    assert (first["layer"], first["k_bytes"], first["forward_ms"]) == (1, t.events[0].layers[1].k_bytes,
                                                                       0.75)
    assert not any(text in tables["steps"] + tables["layers"] for text in HOSTILE)


@pytest.mark.slow
def test_example_csv_tables_parse_back(example):
    t, _ = example
    tables = report.csv_tables(t)
    steps = pd.read_csv(io.StringIO(tables["steps"]))
    layers = pd.read_csv(io.StringIO(tables["layers"]))
    assert len(steps) == len(t.events)
    assert len(layers) == sum(len(e.layers) for e in t.events)
    assert steps["kv_bytes"].max() == summary(t).modes["cached"].peak_kv_bytes


def test_report_module_is_pure():
    tree = ast.parse((ROOT / "kvviz" / "live" / "report.py").read_text())
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree)
              if isinstance(n, ast.ImportFrom) and n.module}
    assert not roots & {"streamlit", "torch", "transformers"}
