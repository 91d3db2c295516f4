"""The offline page every kvviz report shares (kvviz.viz.report_page): templates that escape all
they are given and refuse a missing value, a Content Security Policy and stylesheet that load
nothing, and text made safe to encode as UTF-8. (SVGs made fit to sit inline, through the run
report's name for it: tests/live/test_report.py.)"""
import jinja2
import pytest

from kvviz.viz import report_page


def test_templates_escape_everything_and_refuse_a_missing_value():
    page = report_page.template()
    assert page.name == "report.html.j2" and report_page.template() is page  # loaded once
    render = page.environment.from_string("<p>{{ text }}</p>").render
    assert render(text='<script>alert("x")</script>') == "<p>&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;</p>"
    with pytest.raises(jinja2.UndefinedError):
        page.render(csp=report_page.CSP, css=report_page.CSS)  # the rest of the report missing
    assert report_page.template("shrink_report.html.j2") is not page


def test_the_page_loads_nothing():
    directives = dict(d.strip().split(" ", 1) for d in report_page.CSP.split(";"))
    assert directives["default-src"] == "'none'" and "script-src" not in directives  # no script runs
    assert directives["img-src"] == "data:" and directives["form-action"] == "'none'"
    assert "url(" not in report_page.CSS and "@import" not in report_page.CSS


def test_lone_surrogates_become_question_marks_and_the_rest_is_kept():
    text = "KV \ud800 cache ✓ \udfff"
    safe = report_page.utf8_safe(text)
    assert safe == "KV ? cache ✓ ?" and safe.encode("utf-8")
    assert report_page.utf8_safe("plain ✓") == "plain ✓"
