"""Fuzz (hypothesis, bounded example counts): no exception but kvviz's own user errors escapes the
entry functions a visitor's input reaches: trace files (their meta above all), pasted configs and
URL parameters. A library's exception escaping one of these would end a visitor's page."""
import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import kvviz.replay.panel
from kvviz.app import links
from kvviz.planner import frames as planner_frames
from kvviz.core import assets, safe_input
from kvviz.core.errors import UserError
from kvviz.shrink import trace as shrink_trace
from kvviz.core.meta import LayerRecord
from kvviz.core.trace import Trace, TraceError, check_run_meta

EXAMPLE = json.loads(next(p for p in sorted(assets.TRACES.glob("*.json"))
                          if json.loads(p.read_text()).get("format") == "kvviz-trace").read_text())  # a run trace
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
    kvviz.replay.panel.trace_origin(trace)
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


# ---------------------------------------------------------------- Shrink's inputs (issue 28)
SHRINK_EXAMPLE = json.loads(next(p for p in assets.TRACES
                                 .glob("*.json") if shrink_trace.is_record(p.read_bytes())).read_text())
for _side in ("full", "shrunk"):  # keep each example small: what varies is the structure
    SHRINK_EXAMPLE[_side]["steps"] = SHRINK_EXAMPLE[_side]["steps"][:4]
    SHRINK_EXAMPLE[_side]["pieces"] = SHRINK_EXAMPLE[_side]["pieces"][:4]
    SHRINK_EXAMPLE[_side]["kept"] = dict(list(SHRINK_EXAMPLE[_side]["kept"].items())[:2])


def show_shrink_file(data: bytes) -> None:
    """What Replay and the Shrink page do with a kvviz-shrink file: read it, then every figure and frame."""
    from kvviz.shrink import charts as shrink_charts
    rec = shrink_trace.from_json(data)
    result = rec.result
    result.caption(), result.bytes_ratio(), result.timing_words(), result.first_difference_marked()
    result.upto(2)
    if result.shrunk.kept:
        shrink_charts.kept_map_frame(result.shrunk.kept, len(rec.prompt_pieces), rec.prompt_pieces, per_head=True)
    shrink_charts.steps_chart(shrink_charts.steps_frame({"full": result.full.steps, "shrunk": result.shrunk.steps}),
                              "step_ms", "t").to_dict()


@pytest.mark.slow
@FAST
@given(st.sampled_from(["full", "shrunk"]),
       st.dictionaries(st.sampled_from(["label", "text", "steps", "kept", "pieces", "x"]), json_values, max_size=3),
       st.dictionaries(st.sampled_from(["prompt_tokens", "diverged_at", "model", "mode", "version", "x"]),
                       json_values, max_size=2))
def test_shrink_file(side, side_changes, doc_changes):
    doc = {**SHRINK_EXAMPLE, **doc_changes, side: {**SHRINK_EXAMPLE[side], **side_changes}}
    try:
        show_shrink_file(json.dumps(doc).encode())
    except TraceError:
        pass  # kvviz's own sentence


def sweep_example() -> dict:
    row = {"mode": "SnapKV press, evicting 50%", "kind": "press", "press": "SnapKV", "ratio": 0.5, "backend": "",
           "nbits": 0, "items": 6, "right": 5, "accuracy": 5 / 6, "bytes": 4_000_000, "peak_bytes": 9_000_000,
           "cuda_peak_bytes": 0, "step_ratio": 1.02, "step_ratio_lo": 0.9, "step_ratio_hi": 1.1}
    full = {**row, "mode": "full cache", "kind": "full", "press": "", "ratio": 0.0, "right": 6, "accuracy": 1.0}
    return {"format": "kvviz-shrink-sweep", "version": 1, "model": "m", "task": "t", "rows": [full, row]}


@pytest.mark.slow
@FAST
@given(st.dictionaries(st.sampled_from(list(sweep_example()["rows"][1]) + ["x"]), numbers | st.text(max_size=12),
                       max_size=5),
       st.dictionaries(st.sampled_from(["format", "version", "model", "task", "new_tokens", "peak_how", "complete",
                                        "rows", "x"]), json_values, max_size=2))
def test_shrink_sweep_file(row_changes, doc_changes):
    from kvviz.shrink import sweep, sweep_charts
    doc = sweep_example()
    doc["rows"][1].update(row_changes)
    doc.update(doc_changes)
    try:
        result = sweep.from_json(json.dumps(doc).encode())
    except TraceError:
        return
    frame = sweep_charts.sweep_frame(result.rows)
    sweep_charts.press_accuracy_chart(frame, result.so_far()).to_dict()
    sweep_charts.quant_accuracy_chart(frame, result.so_far()).to_dict()


@FAST
@given(st.one_of(st.sampled_from(["SnapKV", "Knorm", "none", ""]), st.text(max_size=12)),
       st.one_of(st.floats(allow_nan=True), st.integers(-5, 5)),
       st.one_of(st.sampled_from(["", "quanto", "hqq", "fp8"]), st.text(max_size=8)),
       st.integers(-2**40, 2**40), st.integers(-2**40, 2**40))
def test_shrink_settings_from_a_link(press, ratio, backend, nbits, residual):
    """A link's press, ratio, backend, bits and residual: a mode kvviz runs, or one sentence."""
    from kvviz.shrink.compute import ShrinkMode
    try:
        ShrinkMode(press=press or "none", ratio=ratio, backend=backend, nbits=nbits, residual_length=residual).check()
    except UserError as err:
        assert "\n" not in str(err)


# ---------------------------------------------------------------- Serving (a hosted visitor's inputs)

serving_numbers = st.one_of(st.integers(-2**63, 2**63), st.sampled_from([0, -1, 1, 3, 4, 64, 4096, 4097, 10**9]))
serving_text = st.one_of(st.text(max_size=60), st.sampled_from(["", "\n\n", " \n ", "x" * 4001, "Hi\n" * 11,
                                                                 "a\u2028b\u0085c", "**bold** [link](http://x)"]))


@FAST
@given(serving_text, st.booleans(), serving_text, serving_numbers, serving_numbers, serving_numbers,
       serving_numbers, serving_numbers)
def test_serving_settings_hosted(prompts, share, system, blocks, block_size, max_new, every, delay_ms):
    """Every number and text the Serving page takes, checked before any tokenizing: requests within
    the hosted caps, or one sentence."""
    from kvviz.app import hosted
    from kvviz.serving import panel as serving_panel
    caps = hosted.Policy(enabled=True)
    settings_ = serving_panel.Settings(prompts_text=prompts, share=share, system=system, num_blocks=blocks,
                                       block_size=block_size, max_new=max_new, every=every, delay_ms=delay_ms)
    try:
        requests = serving_panel.check_settings(caps, "default", settings_)
    except UserError as err:
        assert "\n" not in str(err)
        return
    assert 1 <= len(requests) <= caps.max_batch and all(r.strip() for r in requests)
    assert blocks * block_size <= caps.max_pool_tokens and max_new <= caps.max_new_tokens
    assert max(len(prompts), len(system)) <= caps.max_prompt_chars
    assert every <= caps.max_arrival_every and delay_ms <= caps.max_step_delay_ms


@FAST
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=5), serving_numbers, serving_numbers, serving_numbers)
def test_serving_pool_fit(lengths, blocks, block_size, max_new):
    """Requests of any length against any pool: they fit, or one sentence (never a library error,
    a division by zero or a scheduler that would stall)."""
    from kvviz.serving import compute as serving
    cfg = serving.ServingConfig(block_size=block_size, num_blocks=blocks, max_new_tokens=max_new)
    ids = [[1] * n for n in lengths]
    try:
        serving.check_fits(ids, cfg)
    except UserError as err:
        assert "\n" not in str(err)
        return
    assert serving.expected_steps(ids, cfg) >= 1 and serving.unshared_blocks_bound(ids, cfg) <= 1 + blocks * len(ids)
