"""vLLM's Prometheus `/metrics` text, parsed with prometheus_client into one record per engine.

Every vLLM series carries an `engine` label (the data-parallel rank's engine index) and
`model_name`. Counters are cumulative since the server started; gauges are refreshed once per
engine step (so a step of several seconds leaves them stale for that long). Units follow vLLM:
`kv_cache_usage` is a fraction of the usable blocks (all but vLLM's null block) held by
running requests; prefix-cache queries and hits count tokens.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Annotated

import msgspec
from prometheus_client.parser import text_string_to_metric_families
from kvviz.core.errors import UserError

PREFIX = "vllm:"
SCALARS = {  # field -> sample name
    "kv_cache_usage": "vllm:kv_cache_usage_perc",
    "num_requests_running": "vllm:num_requests_running",
    "num_requests_waiting": "vllm:num_requests_waiting",
    "num_preemptions": "vllm:num_preemptions_total",
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "num_requests_success": "vllm:request_success_total",
}
HISTOGRAMS = {"ttft": "vllm:time_to_first_token_seconds", "itl": "vllm:inter_token_latency_seconds",
              "e2e": "vllm:e2e_request_latency_seconds"}


MAX_VALUE = 1e15  # a counter of tokens or requests past this is no server's: refused, never drawn
# Every number a scrape carries, read from a server or a watch file, is finite and in [0, MAX_VALUE].
Value = Annotated[float, msgspec.Meta(ge=0, le=MAX_VALUE)]
Label = Annotated[str, msgspec.Meta(max_length=200)]


class NotVllmMetrics(UserError):
    """Text that is not Prometheus, or has no vllm: series; the message is fit to show a user."""


@dataclass
class Histogram:
    """Cumulative bucket counts by upper bound (seconds), as Prometheus keeps them."""

    le: list[Annotated[str, msgspec.Meta(max_length=40)]] = field(default_factory=list)  # upper bounds in
    # seconds as labelled: ascending, last "+Inf"
    cumulative: list[Value] = field(default_factory=list)
    sum_s: Value = 0.0
    count: Value = 0.0

    def per_bucket(self) -> list[float]:
        """Observations that fell in each bucket (not cumulative)."""
        return [c - (self.cumulative[i - 1] if i else 0.0) for i, c in enumerate(self.cumulative)]


@dataclass(kw_only=True)
class EngineMetrics:
    """One engine's series at one scrape. Missing series stay at 0."""

    engine: Label
    model_name: Label = ""
    kv_cache_usage: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.0
    num_requests_running: Value = 0.0
    num_requests_waiting: Value = 0.0
    num_preemptions: Value = 0.0
    prefix_cache_queries: Value = 0.0
    prefix_cache_hits: Value = 0.0
    prompt_tokens: Value = 0.0
    generation_tokens: Value = 0.0
    num_requests_success: Value = 0.0  # summed over finish reasons
    cache_config: dict[Label, Label] = field(default_factory=dict)  # vllm:cache_config_info labels
    histograms: dict[str, Histogram] = field(default_factory=dict)  # "ttft", "itl", "e2e"

    @property
    def num_gpu_blocks(self) -> int | None:
        """Blocks in the pool, vLLM's null block included (from vllm:cache_config_info)."""
        value = self.cache_config.get("num_gpu_blocks", "")
        return int(value) if re.fullmatch(r"[0-9]{1,12}", value) else None

    @property
    def num_usable_blocks(self) -> int | None:
        """Blocks requests can use: the pool less vLLM's null block (kv_cache_usage's denominator)."""
        total = self.num_gpu_blocks
        return total - 1 if total else None

    @property
    def num_held_blocks(self) -> int | None:
        """Blocks held by running requests: usage × usable blocks, rounded."""
        usable = self.num_usable_blocks
        return round(self.kv_cache_usage * usable) if usable else None

    @property
    def hit_rate(self) -> float | None:
        """Prefix-cache hits / queries (tokens) since the server started."""
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else None


def parse_metrics(text: str) -> dict[str, EngineMetrics]:
    """`/metrics` text -> {engine label: EngineMetrics}; NotVllmMetrics if there is no vllm: series."""
    engines: dict[str, EngineMetrics] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError):  # the parser's text quotes the server's: not shown
        raise NotVllmMetrics("the /metrics text is not Prometheus text") from None
    for family in families:
        for sample in family.samples:
            if sample.name.startswith(PREFIX):
                add_sample(engines, sample.name, sample.labels, sample.value)
    if not engines:
        raise NotVllmMetrics("the server answers /metrics but reports no vllm: series; "
                             "is it a vLLM server?")
    return engines


def add_sample(engines: dict[str, EngineMetrics], name: str, labels: dict, value: float) -> None:
    if not (math.isfinite(value) and 0 <= value <= MAX_VALUE):
        raise NotVllmMetrics(f"the server's /metrics gives a {name[:80]} sample outside 0 to {MAX_VALUE:g}; "
                             "kvviz reads only finite, non-negative figures")
    if name == "vllm:kv_cache_usage_perc" and value > 1:
        raise NotVllmMetrics("the server's /metrics gives a KV cache usage above 100 %")
    if any(len(str(v)) > 200 for v in labels.values()):
        raise NotVllmMetrics(f"the server's /metrics gives a {name[:80]} label over 200 characters")
    engine = str(labels.get("engine", "0"))
    metrics = engines.setdefault(engine, EngineMetrics(engine=engine))
    metrics.model_name = labels.get("model_name", metrics.model_name)
    if name == "vllm:cache_config_info":
        metrics.cache_config = {k: v for k, v in labels.items() if k != "engine"}
        return
    for key, sample in SCALARS.items():
        if name == sample:
            setattr(metrics, key, getattr(metrics, key) + value)
            return
    for key, base in HISTOGRAMS.items():
        if name.startswith(base):
            add_histogram_sample(metrics.histograms.setdefault(key, Histogram()),
                                 name[len(base):], labels, value)


def add_histogram_sample(hist: Histogram, suffix: str, labels: dict, value: float) -> None:
    if suffix == "_bucket":
        hist.le.append(str(labels["le"]))
        hist.cumulative.append(value)
    elif suffix == "_sum":
        hist.sum_s = value
    elif suffix == "_count":
        hist.count = value
