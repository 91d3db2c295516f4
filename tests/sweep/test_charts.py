"""The sweep's charts (kvviz.sweep.charts): the cache chart's measured points, formula line, failures
and budget (or why it has none), the latency charts per batch, the heatmap and the bandwidth rule;
pure, on a hand-made frame of sweep rows."""
import pytest

from kvviz.core.errors import UserError
from kvviz.sweep import charts as sweep_charts
from kvviz.sweep import compute as sweep
from kvviz.sweep.compute import SweepRow
from tests.sweep.test_compute import TINY_BYTES_PER_TOKEN, ok_row


def sample_frame():
    rows = [ok_row(64, 1), ok_row(128, 1), SweepRow(prompt_tokens=256, batch=1, new_tokens=4, status="oom",
                   prefill_formula_bytes=9, end_formula_bytes=9, message="OOM"),
            SweepRow(prompt_tokens=512, batch=1, new_tokens=4, status="skipped", prefill_formula_bytes=9,
                     end_formula_bytes=9)]
    return sweep.rows_frame(rows, budget_bytes=TINY_BYTES_PER_TOKEN * 200)


def marks(vega: dict) -> list[str]:
    return [layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"]
            for layer in vega["layer"]]


@pytest.mark.slow
def test_cache_chart_draws_measured_points_formula_line_failures_and_budget():
    vega = sweep_charts.cache_bytes_chart(sample_frame(), budget_bytes=123_456).to_dict()
    assert marks(vega) == ["line", "point", "point", "rule", "text"]
    assert vega["layer"][0]["encoding"]["x"]["scale"] == {"type": "log", "base": 2}
    assert vega["layer"][2]["encoding"]["shape"]["scale"]["range"][0] == "cross"
    dash = vega["layer"][0]["encoding"]["strokeDash"]  # the formula lines have a legend entry
    assert dash["scale"]["domain"] == [sweep_charts.FORMULA_SERIES] and dash["legend"]["symbolType"] == "stroke"
    assert vega["resolve"]["scale"]["shape"] == "independent"
    (budget,) = [d for d in vega["datasets"].values() if d and "label" in d[0]]
    assert budget[0]["bytes"] == 123_456
    assert marks(sweep_charts.cache_bytes_chart(sample_frame()).to_dict()) == ["line", "point", "point"]


def test_without_a_memory_size_the_cache_chart_says_why_it_has_no_boundary():
    note = sweep_charts.no_boundary_note("cpu", None)
    assert note.startswith("No out-of-memory boundary") and "on cpu" in note and "only on CUDA" in note
    assert sweep_charts.no_boundary_note("NVIDIA H100 80GB HBM3", 70 * 2**30) == ""  # the budget's rule says it
    budget = [m for m in marks(sweep_charts.cache_bytes_chart(sample_frame(), None).to_dict())]
    assert "rule" not in budget  # indeed no boundary line without a budget


def test_latency_charts_plot_measured_points_per_batch():
    for chart, field in ((sweep_charts.ttft_chart, "ttft_ms"), (sweep_charts.itl_chart, "itl_median_ms")):
        vega = chart(sample_frame()).to_dict()
        assert vega["encoding"]["y"]["field"] == field
        assert vega["encoding"]["color"]["field"] == "batch"
        assert vega["transform"] == [{"filter": "(datum.status === 'ok')"}]


def test_heatmap_labels_cells_and_outlines_predicted_oom():
    vega = sweep_charts.heatmap_chart(sample_frame(), "ttft_ms").to_dict()
    assert marks(vega) == ["rect", "rect", "rect", "text"]
    assert vega["layer"][0]["encoding"]["color"]["field"] == "ttft_ms"
    assert "upper(datum.status)" in vega["transform"][0]["calculate"]
    with pytest.raises(UserError, match="unknown metric"):
        sweep_charts.heatmap_chart(sample_frame(), "nope")
    assert "peak_cuda_bytes" not in sweep_charts.metric_names(cuda=False)
    assert sweep_charts.metric_names(cuda=True) == list(sweep_charts.METRICS)


def test_bandwidth_chart_draws_the_peak_rule():
    vega = sweep_charts.bandwidth_chart(sample_frame(), 4.8e12, "H200").to_dict()
    assert marks(vega) == ["line", "rule", "text"]
    labels = [d[0]["label"] for d in vega["datasets"].values() if d and "label" in d[0]]
    assert labels == ["H200: 4,800 GB/s"]
    assert marks(sweep_charts.bandwidth_chart(sample_frame()).to_dict()) == ["line"]
