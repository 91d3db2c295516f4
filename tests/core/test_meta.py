"""The run's typed metadata (kvviz.core.meta.RunMeta): old files re-save byte for byte, every
number's range is checked when a file loads, and what is in range can be drawn."""
import json
from pathlib import Path

import pytest

from kvviz.core import assets
from kvviz.core.meta import MAX_RESERVED_BYTES, RUN_BOUNDS, RUN_FACTS, RunMeta, as_dict
from kvviz.core.trace import Trace, TraceError, check_run_meta
from kvviz.live import captions, report
from kvviz.live import charts as live_charts

TRACES = sorted(assets.TRACES.glob("*.json"))
RUN_TRACE = next(p for p in TRACES if '"format": "kvviz-trace"' in p.read_text()[:200])
SHORT = {**json.loads(RUN_TRACE.read_text()), "events": json.loads(RUN_TRACE.read_text())["events"][:6]}


def loaded(**meta) -> Trace:
    return Trace.from_json(json.dumps({**SHORT, "meta": {**SHORT["meta"], **meta}}))


def test_the_shipped_run_trace_re_saves_byte_for_byte():
    assert Trace.load(RUN_TRACE).to_json() == RUN_TRACE.read_text()


def test_a_version_1_file_upgrades_and_its_meta_is_typed():
    old = Trace.load(Path(__file__).resolve().parents[1] / "data" / "trace-v1-smollm2-135m.json")
    assert isinstance(old.meta, RunMeta) and len(old.meta.specs) == old.meta.num_layers == 30
    assert Trace.from_json(old.to_json()) == old  # saved as format 3, read back the same


@pytest.mark.parametrize("name", sorted(RUN_BOUNDS))
def test_each_number_out_of_its_range_is_refused_naming_the_field(name):
    low, high = RUN_BOUNDS[name]
    for bad in (high + 1, low - 1):
        with pytest.raises(TraceError, match=f"meta says {name} = {bad:,}; kvviz draws traces with "
                                             f"{name} from {low:,} to {high:,}"):
            loaded(**{name: bad})
    with pytest.raises(TraceError, match=f"meta.{name}: expected int \\| null, got str"):
        loaded(**{name: "7"})
    assert getattr(loaded(**{name: high if name != "batch" else 1}).meta, name) in (high, 1)


def test_a_missing_fact_is_named_before_anything_is_drawn():
    meta = {k: v for k, v in SHORT["meta"].items() if k not in ("batch", "head_dim")}
    trace = Trace.from_json(json.dumps({**SHORT, "meta": meta}))
    assert trace.meta.missing_run_facts() == ["head_dim", "batch"] and set(RUN_FACTS) >= {"batch", "head_dim"}
    with pytest.raises(TraceError, match="lacks whole numbers for head_dim, batch"):
        check_run_meta(trace)


def test_values_each_in_range_but_overflowing_together_are_refused_in_a_sentence():
    """bytes_per_token 2⁴⁰ × batch 4096 × max_len 10⁷ (issue 28): each allowed, together 4.5 × 10²³ B."""
    with pytest.raises(TraceError, match=r"bytes_per_token × max_len × batch = 45,035,996,273,704,960,000,000"):
        loaded(bytes_per_token=2**40, batch=4096, max_len=10**7)
    assert loaded(bytes_per_token=MAX_RESERVED_BYTES // 10**7, max_len=10**7, batch=1).meta.reserved_bytes <= MAX_RESERVED_BYTES


@pytest.mark.slow
@pytest.mark.parametrize("extreme", [
    dict(bytes_per_token=MAX_RESERVED_BYTES // (4096 * 10**7), batch=4096, max_len=10**7),
    dict(bytes_per_token=2**40, batch=1, max_len=1024, weight_bytes=2**50),
    dict(prompt_tokens=10**7, max_len=10**7, state_bytes=2**50, batch=4096, bytes_per_token=16),
], ids=["reservation-at-the-cap", "huge-token-and-weights", "huge-prompt-and-state"])
def test_what_is_in_range_draws_every_chart_caption_and_the_report(extreme):
    trace = loaded(**extreme)
    check_run_meta(trace)
    cached, recompute = trace.events_of("cached"), trace.events_of("recompute")
    data = live_charts.chart_data(trace.meta, cached, recompute)
    vegas = [chart.to_dict() for chart in live_charts.build_charts(trace.meta, len(cached), data).values()]
    assert vegas and all(captions.chart_captions(trace.meta, cached).values())
    assert report.html_report(trace, svg=lambda vega: "<svg></svg>").rstrip().endswith("</html>")


def test_a_file_s_layout_words_never_reach_a_caption():
    """Captions name the layer kinds from the checked specs, not from the file's `layout` text."""
    hostile = "[click](https://evil.example) **bold** $x$"
    layers = [{"kind": "sliding", "kv_heads": 3, "values_per_token": 384, "token_cap": 8}] * 30
    trace = loaded(layout=hostile, layers=layers)
    texts = captions.chart_captions(trace.meta, trace.events_of("cached"))
    assert "30 × sliding 8" in texts["layers"] and not any("evil" in t for t in texts.values())
    assert as_dict(trace.meta)["layout"] == hostile  # kept as the file said, shown only as escaped HTML
