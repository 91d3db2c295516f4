"""A Live run's downloads (kvviz.live.downloads_panel), headless (AppTest of the function alone):
the trace is ready at once; the report and the CSV tables are built only when clicked."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from kvviz.live import report


def downloads_page():
    import kvviz.live.downloads_panel
    from tests.live.test_report import hand_trace

    kvviz.live.downloads_panel.downloads(hand_trace(), wall_tokens_per_s=7.5)


def test_the_trace_is_ready_and_the_report_and_tables_wait_for_a_click(monkeypatch):
    built = []
    monkeypatch.setattr(report, "html_report", lambda *a, **k: built.append("report"))
    monkeypatch.setattr(report, "csv_tables", lambda *a, **k: built.append("csv"))
    at = AppTest.from_function(downloads_page, default_timeout=30).run()
    assert not at.exception
    buttons = at.get("download_button")
    assert [b.proto.label for b in buttons] == ["Trace (JSON)", "Report (HTML)", "Steps (CSV)", "Layers (CSV)"]
    assert buttons[0].proto.url.endswith(".json")  # the trace is served as it is
    assert all(b.proto.deferred_file_id and not b.proto.url for b in buttons[1:])  # built on a click
    assert built == []
