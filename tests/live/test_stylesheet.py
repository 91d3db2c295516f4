"""The Live page's fixed stylesheets (kvviz.live.stylesheet)."""
from kvviz.live import charts, stylesheet


def test_every_panel_of_the_chart_registry_is_dimmed_with_its_own_run():
    """A panel the registry adds is dimmed while it shows the previous run, with the run it draws
    (the race's with the run without a cache), and no panel with both: its keys come from
    kvviz.live.charts, not a list kept by hand."""
    dimmed = {mode: {p for p in charts.PANELS if f".st-key-panel-{p} " in css or f".st-key-panel-{p}," in css}
              for mode, css in stylesheet.DIM_CSS.items()}
    assert dimmed["recompute"] == {p for p in charts.PANELS if p in charts.RACE_PANELS} == {"race", "positions"}
    assert dimmed["cached"] == set(charts.PANELS) - dimmed["recompute"]
    for mode, box in (("cached", "cached-panel"), ("recompute", "recompute-panel")):
        assert f".st-key-{box}," in stylesheet.DIM_CSS[mode] and stylesheet.DIM_CSS[mode].endswith(stylesheet.KEEP_IN_PLACE)
