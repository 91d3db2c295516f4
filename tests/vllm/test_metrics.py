"""vLLM's Prometheus metrics read per engine (kvviz.vllm.metrics) on real scrapes (tests/data/vllm):
idle, running, after a load and after a reset; text that is not vLLM's refused."""
import pytest

from kvviz.vllm.metrics import NotVllmMetrics, parse_metrics
from vllm_payloads import USABLE_BLOCKS, metrics_text


@pytest.mark.parametrize("name", ["idle", "running", "after_load", "after_reset"])
def test_metrics_parse_per_engine(name):
    (engine,) = parse_metrics(metrics_text(name)).values()
    assert engine.engine == "0" and engine.model_name == "SmolLM2-135M-Instruct"
    assert engine.num_gpu_blocks == 72 and engine.num_usable_blocks == USABLE_BLOCKS
    assert engine.cache_config["block_size"] == "32" and engine.cache_config["enable_prefix_caching"] == "True"
    hist = engine.histograms["ttft"]
    assert hist.le[-1] == "+Inf" and sum(hist.per_bucket()) == hist.count


def test_metrics_while_running_and_after():
    running = parse_metrics(metrics_text("running"))["0"]
    assert running.num_requests_running == 4 and running.kv_cache_usage > 0
    assert running.num_held_blocks == round(running.kv_cache_usage * USABLE_BLOCKS) > 0
    after = parse_metrics(metrics_text("after_load"))["0"]
    assert after.num_requests_running == 0 and after.kv_cache_usage == 0
    assert after.prompt_tokens == 331 + 8252 and after.generation_tokens == 16 + 1129
    assert after.hit_rate == pytest.approx(3840 / 8583)
    assert after.num_requests_success == 25 and after.histograms["ttft"].count == 25


def test_text_that_is_not_vllm_metrics_is_refused():
    with pytest.raises(NotVllmMetrics, match="no vllm: series"):
        parse_metrics("# HELP up whether up\n# TYPE up gauge\nup 1\n")
    with pytest.raises(NotVllmMetrics):
        parse_metrics("<html><body>hello</body></html>")
