"""Fuzz (hypothesis, bounded example counts): no exception but kvviz's own user errors escapes the
entry functions a visitor's input reaches: trace files (their meta above all), pasted configs and
URL parameters. A library's exception escaping one of these would end a visitor's page."""
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kvviz.app import links, ui
from kvviz.planner import frames as planner_frames
from kvviz.core import safe_input
from kvviz.core.errors import UserError
from kvviz.shrink import record as shrink_record
from kvviz.core.meta import LayerRecord
from kvviz.core.trace import Trace, TraceError, check_run_meta

EXAMPLE = json.loads(next(p for p in (Path(__file__).resolve().parent.parent / "kvviz" / "assets" / "traces").glob("*.json")
                          if not shrink_record.is_record(p.read_bytes())).read_text())  # a run trace
EXAMPLE["events"] = EXAMPLE["events"][:20]  # the meta is what varies: keep each example small
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

numbers = st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=True), st.booleans(), st.none(),
                    st.text(max_size=8), st.sampled_from([0, -1, 1, 10**12, "1e9", "٣"]))
json_values = st.recursive(st.one_of(numbers, st.text(max_size=20)),
                           lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                  st.dictionaries(st.text(max_size=8), kids, max_size=4)),
                           max_leaves=20)


def read_trace(data: bytes) -> None:
    """What the Replay page does with an upload: parse, check the meta, describe the run, read its layout."""
    trace = Trace.from_json(data)
    check_run_meta(trace)
    ui.trace_origin(trace)
    trace.meta.specs  # noqa: B018 - read as the views read it


@pytest.mark.slow
@FAST
@given(st.dictionaries(st.sampled_from(sorted(EXAMPLE["meta"]) + ["x"]), numbers, max_size=12))
def test_trace_meta(changes):
    doc = {**EXAMPLE, "meta": {**EXAMPLE["meta"], **changes}}
    try:
        read_trace(json.dumps(doc).encode())
    except TraceError:
        pass  # kvviz's own sentence, shown to the visitor


layer_records = st.lists(st.dictionaries(st.sampled_from(list(LayerRecord.__struct_fields__) + ["x"]),
                                         numbers | st.sampled_from(["full", "sliding", "state", "moe"]),
                                         max_size=5), max_size=4)


@pytest.mark.slow
@FAST
@given(st.one_of(layer_records, json_values))
def test_trace_layers(layers):
    """A format 3 file's typed layer records: anything a visitor edits in is kvviz's own sentence."""
    doc = {**EXAMPLE, "version": 3, "meta": {**EXAMPLE["meta"], "num_layers": 4, "layers": layers}}
    try:
        read_trace(json.dumps(doc).encode())
    except TraceError:
        pass


@pytest.mark.slow
@FAST
@given(st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode()),
                 st.sampled_from([b"[" * 5000, b'{"format": ' + b"9" * 5000 + b"}", b"\xef\xbb\xbf{}"])))
def test_trace_file(data):
    try:
        read_trace(data)
    except TraceError:
        pass


config_fields = st.dictionaries(
    st.sampled_from(["model_type", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                     "hidden_size", "head_dim", "intermediate_size", "vocab_size", "sliding_window",
                     "max_position_embeddings", "text_config", "rope_scaling"]),
    numbers | st.sampled_from(["llama", "gpt2", "qwen2", "nope"]), max_size=8)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(config_fields.map(json.dumps), json_values.map(json.dumps), st.text(max_size=40),
                 st.sampled_from(['{"a": ' + "1" * 5000 + "}", "[" * 50_000, '{"n": NaN}'])))
def test_pasted_config(text):
    try:
        planner_frames.model_from_pasted_config(text)
    except planner_frames.ConfigError as err:
        assert "\n" not in str(err)  # one sentence
    try:
        safe_input.loads(text, "the pasted config")
    except UserError:
        pass


@pytest.mark.slow
@FAST
@given(st.text(max_size=300), st.dictionaries(st.text(max_size=10),
                                              st.one_of(st.text(max_size=30), st.lists(st.text(max_size=10),
                                                                                       max_size=3)),
                                              max_size=6))
def test_url_parameters(query, params):
    pairs = links.decode(query)
    assert links.decode(links.encode(pairs)) == pairs  # what a link carries survives a round trip
    url = links.share_url("http://host/page", params, links.prompt_pairs(links.FREE_TEXT, "s", "p"))
    assert url.startswith("http://host/page") and "<" not in url and " " not in url
    free = links.free_text_from_link(dict(pairs), 50)
    assert set(free) == {"system", "prompt"} and all(len(v) <= 50 for v in free.values())
