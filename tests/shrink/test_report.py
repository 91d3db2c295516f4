"""The Shrink run's HTML report (kvviz.shrink.report): the figures the page shows, hostile text inert,
and every figure even when a chart cannot be drawn (the session's tiny comparisons, conftest.py)."""
import json

import pytest

from kvviz.shrink import compute as shrink
from kvviz.shrink import report as shrink_report
from kvviz.shrink import trace
from tests.shrink.conftest import PIECES
from tests.shrink.test_trace import fake_svg


@pytest.fixture
def result(tiny_comparison) -> shrink.Comparison:
    return tiny_comparison


def test_report_shows_the_figures_the_page_shows(result):
    html = shrink_report.html_report(result, PIECES, "tiny llama", svg=fake_svg)
    assert result.caption() in html
    assert f"{result.bytes_ratio():.2f}" in html and f"{result.step_time_ratio():.2f}" in html
    assert f"{result.shrunk.steps[-1].kv_bytes:,} B" in html and f"{result.full.steps[-1].kv_bytes:,} B" in html
    assert html.count("<svg") == (3 if result.shrunk.kept else 2)
    assert "<script" not in html and 'content="default-src &#39;none&#39;' in html
    if result.shrunk.steps[-1].payload_bytes:
        assert f"{result.shrunk.steps[-1].scale_bytes:,} B" in html


def test_report_keeps_hostile_text_inert(result):
    doc = trace.as_record(result, ["<script>alert(1)</script>"] + PIECES[1:])
    doc["full"]["text"] = "<img src=x onerror=alert(2)>"
    doc["shrunk"]["label"] = "<b>bold</b>"
    back = trace.from_json(json.dumps(doc))
    html = shrink_report.html_report(back.result, back.prompt_pieces, "<i>m</i>", svg=fake_svg)
    for raw in ("<script>alert", "<img src=x", "<b>bold", "<i>m"):
        assert raw not in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html


def test_report_without_a_renderer_still_has_every_figure(result):
    html = shrink_report.html_report(result, PIECES, svg=lambda vega: (_ for _ in ()).throw(RuntimeError()))
    assert "could not be drawn (RuntimeError)" in html and result.caption() in html
