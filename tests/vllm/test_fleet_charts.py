"""The fleet view's Altair charts (kvviz.vllm.fleet_charts) drawn from the real two-replica
capture's frames (tests/data/vllm/fleet/README.md): requests kept in sending order, one bar row
per replica and per policy, and the prefix map's digits legible on its darker cells."""
from kvviz.vllm import fleet_charts, fleet_frames


def test_the_charts_of_the_capture(fleet_capture):
    recording, view, states = fleet_capture
    replicas = fleet_frames.replicas_frame(recording, view, states)
    policies = fleet_frames.policies_frame(recording, view, states)
    given_up = fleet_charts.given_up_chart(fleet_frames.given_up_frame(view)).to_dict()
    assert given_up["encoding"]["x"]["sort"] == [r.name for r in view.requests]  # sent, not alphabetical
    assert given_up["encoding"]["color"]["scale"]["domain"] == fleet_charts.PARTS
    assert given_up["height"] == fleet_charts.PLOT_PX
    assert fleet_charts.replicas_chart(replicas).to_dict()["height"] == 2 * fleet_charts.BAR_PX
    assert fleet_charts.policies_chart(policies).to_dict()["height"] == len(policies) * fleet_charts.BAR_PX


def test_the_prefix_map_writes_white_on_the_darker_half(fleet_capture):
    recording, view, _ = fleet_capture
    df = fleet_frames.prefix_frame(recording, view)
    vega = fleet_charts.prefix_map_chart(df).to_dict()
    cells, text = vega["layer"]
    assert cells["mark"]["type"] == "rect" and text["mark"]["type"] == "text"
    condition = text["encoding"]["color"]["condition"]
    assert condition["value"] == "white" and condition["test"] == f"(datum.tokens > {df.tokens.max() / 2})"
    assert vega["height"] == fleet_charts.BAR_PX * df.prefix.nunique()
