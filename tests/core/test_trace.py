"""Trace: round trip, every bad-input path, replay pace, summary numbers."""
import dataclasses
import json
import math
import re

import pytest

from kvviz.core.errors import UserError
from kvviz.core import trace as tr
from kvviz.core.events import BlockStat, LayerStat, StepEvent
from kvviz.core.meta import LEGACY_KEYS, as_dict, legacy_specs, spec_record
from kvviz.core.trace import Trace, TraceError, format_summary, replay, summary


def layer(i, tokens=5, ms=0.5):
    return LayerStat(layer=i, k_bytes=tokens * 128, v_bytes=tokens * 128, tokens=tokens,
                     forward_ms=ms)


def event(mode="cached", step=0, step_ms=10.0, batch=2, blocks=True, **kw):
    seq = 4 + step + 1
    fields = dict(
        mode=mode, phase="prefill" if step == 0 else "decode", step=step,
        token_ids=tuple(range(100 + step, 100 + step + batch)), texts=(" a",) * batch,
        finished=(False,) * batch, step_ms=step_ms, seq_len=seq, positions=seq * batch,
        kv_bytes=2 * 256 * (seq - 1), formula_bytes=2 * 256 * (seq - 1),
        layers=(layer(0, seq - 1), layer(1, seq - 1, 0.75)),
        blocks=BlockStat(block_size=16, num_blocks=4, num_used_blocks=2, num_free_blocks=2,
                         num_slots_in_last_block=seq - 1, paged_bytes=8192, contiguous_bytes=16384,
                         contiguous_is_real=False) if blocks else None,
    )
    fields.update(kw)
    return StepEvent(**fields)


def sample_trace():
    t = Trace({"model": "tiny", "num_layers": 2, "windows": [None, None], "config": {"seed": 0}})
    for step, ms in enumerate([40.0, 10.0, 12.0]):
        t.append(event("cached", step, ms))
    for step, ms in enumerate([40.0, 30.0, 60.0]):
        t.append(event("recompute", step, ms, blocks=False, kv_bytes=0, formula_bytes=0,
                       cuda_allocated_bytes=1024, cuda_reserved_bytes=2048))
    return t


def doc():
    return json.loads(sample_trace().to_json())


def load_doc(d):
    return Trace.from_json(json.dumps(d))


def expect(text, fragment):
    with pytest.raises(TraceError) as info:
        Trace.from_json(text)
    assert fragment in str(info.value), str(info.value)
    return str(info.value)


# --- round trip ----------------------------------------------------------------------------------

def test_round_trip_save_load(tmp_path):
    t = sample_trace()
    path = tmp_path / "run.json"
    t.save(path)
    back = Trace.load(path)
    assert back == t
    assert back.events[0].blocks == t.events[0].blocks and back.events[3].blocks is None
    assert isinstance(back.events[0].layers[1], LayerStat)
    assert isinstance(back.events[0].token_ids, tuple)
    assert back.events[3].cuda_reserved_bytes == 2048 and back.events[0].cuda_reserved_bytes is None
    assert back.modes == ["cached", "recompute"]
    assert [e.step for e in back.events_of("recompute")] == [0, 1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temp file left behind


def test_file_shape_is_documented_and_one_event_per_line():
    text = sample_trace().to_json()
    d = json.loads(text)
    assert list(d) == ["format", "version", "meta", "events"]
    assert d["format"] == "kvviz-trace" and d["version"] == tr.VERSION == 3
    assert len(text.splitlines()) == 2 + 1 + len(d["events"]) + 1
    assert Trace.from_json(text.encode()) == Trace.from_json(text)


def test_int_accepted_where_float_expected():
    d = doc()
    d["events"][0]["step_ms"] = 7
    d["events"][0]["layers"][0]["forward_ms"] = 0
    t = load_doc(d)
    assert t.events[0].step_ms == 7.0 and isinstance(t.events[0].step_ms, float)


def test_unknown_meta_keys_are_left_out_and_empty_trace_loads():
    d = doc()
    d["meta"]["something_new"] = {"nested": [1, 2.5, None, True]}
    meta = load_doc(d).meta
    assert meta.model == d["meta"]["model"] and "something_new" not in as_dict(meta)
    assert Trace.from_json(Trace().to_json()) == Trace()


def test_save_replaces_atomically_and_cleans_up_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "run.json"
    sample_trace().save(path)
    before = path.read_bytes()

    def crash(src, dst):
        raise OSError("disk on fire")

    monkeypatch.setattr(tr.os, "replace", crash)
    with pytest.raises(TraceError, match="cannot write .*run.json: disk on fire"):
        Trace({"model": "other"}).save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_save_refuses_what_load_would_refuse(tmp_path):
    with pytest.raises(TraceError, match=r"event 0: field 'step_ms' must be a finite"):
        Trace({}, [event(step_ms=math.nan)]).save(tmp_path / "x.json")
    with pytest.raises(TraceError, match=r"meta.dtype: expected str \| null, got object"):
        Trace({"dtype": object()}).to_json()
    with pytest.raises(TraceError, match=r"meta.config.temperature must be a finite number, got nan"):
        Trace({"config": {"temperature": math.nan}}).to_json()
    assert not list(tmp_path.iterdir())


# --- bad input: the file as a whole --------------------------------------------------------------

def test_not_json():
    expect("hello, world", "the file is not JSON (it may be truncated)")


def test_truncated_file(tmp_path):
    path = tmp_path / "cut.json"
    text = sample_trace().to_json()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(TraceError, match=r"not JSON \(it may be truncated\)"):
        Trace.load(path)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.json"
    path.write_bytes(b"")
    with pytest.raises(TraceError, match="the file is empty"):
        Trace.load(path)


def test_not_utf8_and_not_a_trace():
    expect(b"\xff\xfe{}", "not UTF-8")
    expect("1" * 5000, "not a kvviz trace")
    expect("[" * 100_000 + "]" * 100_000, "not a kvviz trace")
    assert Trace.from_json(b"\xef\xbb\xbf" + Trace().to_json().encode()) == Trace()  # BOM


def test_save_into_missing_folder(tmp_path):
    with pytest.raises(TraceError, match="cannot write .*run.json"):
        Trace().save(tmp_path / "no" / "run.json")


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match="cannot read .*nope.json"):
        Trace.load(tmp_path / "nope.json")


def test_oversized_file_is_refused_before_reading(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    sample_trace().save(path)
    monkeypatch.setattr(tr, "MAX_TRACE_BYTES", 1000)
    monkeypatch.setattr("builtins.open", lambda *a, **k: pytest.fail("read an oversized file"))
    limited = r"the file is [\d,]+ bytes; traces are limited to 1,000 bytes"
    with pytest.raises(TraceError, match=limited):
        Trace.load(path)


def test_oversized_message_in_mib(monkeypatch):
    monkeypatch.setattr(tr, "MAX_TRACE_BYTES", 64 * 2**20)
    with pytest.raises(TraceError, match=r"the file is 80\.0 MiB; traces are limited to 64 MiB"):
        tr._check_size(80 * 2**20 + 1, "file")
    monkeypatch.setattr(tr, "MAX_TRACE_BYTES", 10)
    expect(sample_trace().to_json(), "traces are limited to 10 bytes")


def test_future_version():
    d = doc()
    d["version"] = 4
    msg = expect(json.dumps(d), "written by a newer kvviz (format version 4)")
    assert "this kvviz reads version 3" in msg


def test_bad_version():
    d = doc()
    d["version"] = True
    expect(json.dumps(d), "'version' must be a positive integer, got true")


def test_wrong_format_name():
    d = doc()
    d["format"] = "chrome-trace"
    expect(json.dumps(d), "not a kvviz trace: format \"chrome-trace\"")
    del d["format"]
    expect(json.dumps(d), "no 'format' field")
    expect("[1, 2]", "it holds a list, not a JSON object")


def test_meta_not_a_dict():
    d = doc()
    d["meta"] = ["model", "tiny"]
    expect(json.dumps(d), "'meta' must be an object, got a list")


def test_meta_nan():
    d = doc()
    d["meta"]["weight_bytes"] = math.nan
    expect(json.dumps(d), "meta.weight_bytes must be a finite number")


def test_unknown_and_missing_top_level_fields():
    d = doc()
    d["extra"] = 1
    expect(json.dumps(d), "the trace: unknown field(s) 'extra'")
    d = doc()
    del d["events"]
    expect(json.dumps(d), "the trace: missing field(s) 'events'")
    d = doc()
    d["events"] = {}
    expect(json.dumps(d), "'events' must be a list, got an object")


# --- bad input: one event ------------------------------------------------------------------------

def bad_event(mutate, fragment, index=4):
    d = doc()
    mutate(d["events"][index])
    return expect(json.dumps(d), f"event {index}: {fragment}")


def test_event_missing_field():
    bad_event(lambda e: e.pop("step_ms"), "missing field(s) 'step_ms'")


def test_event_missing_optional_field_takes_default():
    d = doc()
    del d["events"][0]["cuda_allocated_bytes"]
    assert load_doc(d).events[0].cuda_allocated_bytes is None


def test_event_bool_where_int():
    bad_event(lambda e: e.update(step=True), "field 'step' must be an integer, got true")
    bad_event(lambda e: e.update(kv_bytes=1.5), "field 'kv_bytes' must be an integer, got 1.5")


def test_event_string_where_float():
    bad_event(lambda e: e.update(step_ms="12"), "field 'step_ms' must be a number, got \"12\"")


def test_event_negative_and_nan_step_ms():
    bad_event(lambda e: e.update(step_ms=-1.0),
              "field 'step_ms' must be a finite, non-negative number, got -1.0")
    msg = bad_event(lambda e: e.update(step_ms=math.nan), "field 'step_ms' must be a finite")
    assert "NaN" in msg
    bad_event(lambda e: e.update(step_ms=math.inf), "field 'step_ms' must be a finite")


def test_event_extra_unknown_field():
    bad_event(lambda e: e.update(colour="red"), "unknown field(s) 'colour'")


def test_event_nested_fields():
    bad_event(lambda e: e["layers"][1].update(k_bytes=None),
              "field 'layers[1].k_bytes' must be an integer, got null")
    bad_event(lambda e: e["layers"][0].pop("tokens"), "missing field(s) 'layers[0].tokens'", 0)
    bad_event(lambda e: e["blocks"].update(contiguous_is_real=1),
              "field 'blocks.contiguous_is_real' must be true or false, got 1", 1)
    bad_event(lambda e: e.update(blocks=[1]), "field 'blocks' must be an object, got a list", 1)
    bad_event(lambda e: e.update(token_ids=5), "field 'token_ids' must be a list, got 5")
    bad_event(lambda e: e.update(texts=["a", 3]), "field 'texts[1]' must be a string, got 3")
    deep = [[[[]]]]
    for _ in range(500):
        deep = [deep]
    bad_event(lambda e: e.update(step_ms=deep), "field 'step_ms' must be a number, got a list")


def test_event_choices_and_batch_sizes():
    bad_event(lambda e: e.update(mode="lazy"), "field 'mode' must be one of 'cached', 'recompute'")
    bad_event(lambda e: e.update(phase="warmup"),
              "field 'phase' must be one of 'prefill', 'decode', got 'warmup'")
    bad_event(lambda e: e.update(finished=[True]),
              "'token_ids', 'texts' and 'finished' must have one entry per sequence, got 2, 2, 1")
    bad_event(lambda e: e.update(seq_len=-3), "field 'seq_len' must not be negative, got -3")


def test_event_not_an_object():
    d = doc()
    d["events"][2] = "step"
    expect(json.dumps(d), "event 2 must be an object, got a string")


# --- replay --------------------------------------------------------------------------------------

def play(events, speed):
    sleeps = []
    out = list(replay(events, speed=speed, sleep=sleeps.append))
    assert out == list(events)
    return sleeps


def test_replay_paces_by_step_ms():
    events = sample_trace().events_of("cached")
    assert play(events, 1.0) == pytest.approx([0.040, 0.010, 0.012])
    assert play(events, 2.0) == pytest.approx([0.020, 0.005, 0.006])
    assert play(events, 0) == []
    assert play(events, math.inf) == []


def test_replay_sleeps_before_each_event():
    log = []
    events = sample_trace().events_of("cached")
    for e in replay(events, sleep=lambda s: log.append(("sleep", s))):
        log.append(("event", e.step))
    assert [k for k, _ in log] == ["sleep", "event"] * 3


def test_replay_rejects_negative_speed():
    with pytest.raises(UserError):
        list(replay(sample_trace().events, speed=-1))


# --- summary -------------------------------------------------------------------------------------

def test_summary_numbers():
    t = Trace({})
    cached_ms = [50.0, 10.0, 20.0, 30.0, 40.0, 100.0]
    recompute_ms = [60.0, 30.0, 50.0, 70.0]  # cut short: 4 steps
    for step, ms in enumerate(cached_ms):
        t.append(event("cached", step, ms, batch=2))
    for step, ms in enumerate(recompute_ms):
        t.append(event("recompute", step, ms, batch=2, blocks=False, kv_bytes=0, formula_bytes=0))
    s = summary(t)
    c, r = s.modes["cached"], s.modes["recompute"]
    assert c.ttft_ms == 50.0
    # decode steps 10, 20, 30, 40, 100: median 30; p95 at position 4 * 0.95 = 3.8 → 40 + 0.8 * 60
    assert c.itl_median_ms == 30.0
    assert c.itl_p95_ms == pytest.approx(88.0)
    assert c.new_tokens == 6 and c.batch == 2
    assert c.total_ms == 250.0
    assert c.tokens_per_s == pytest.approx(6 * 2 / 0.250)  # 48 tok/s
    assert c.peak_kv_bytes == 2 * 256 * 9 and c.peak_formula_bytes == 2 * 256 * 9  # step 5
    # decode 30, 50, 70: median 50, p95 at 2 * 0.95 = 1.9 → 50 + 0.9 * 20
    assert r.itl_median_ms == 50.0 and r.itl_p95_ms == pytest.approx(68.0)
    assert r.peak_kv_bytes == 0 and r.total_ms == 210.0
    # common prefix of 4 steps: recompute 210 ms vs cached 50 + 10 + 20 + 30 = 110 ms
    assert s.speedup_steps == 4
    assert s.recompute_speedup == pytest.approx(210 / 110)


def test_summary_single_mode_and_edge_cases():
    t = Trace({}, [event("cached", 0, 25.0, batch=1)])
    s = summary(t)
    assert s.recompute_speedup is None and list(s.modes) == ["cached"]
    c = s.modes["cached"]
    assert c.ttft_ms == 25.0 and c.itl_median_ms is None and c.itl_p95_ms is None
    assert c.tokens_per_s == pytest.approx(40.0)
    assert summary(Trace()).modes == {}


def test_percentile_linear_interpolation():
    assert tr.percentile([], 50) is None
    assert tr.percentile([7.0], 95) == 7.0
    assert tr.percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert tr.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)


def test_format_summary_table():
    text = format_summary(summary(sample_trace()))
    lines = text.splitlines()
    assert lines[0].split() == ["cached", "recompute"]
    assert "40.0 ms" in lines[1] and "96.8 tok/s" in lines[4] and "3.00 KiB" in lines[6]
    assert "3 x 2" in text
    widths = {len(line) for line in lines[1:-1]}
    assert len(widths) == 1, text  # columns aligned (values right-aligned, same width)
    # recompute 40 + 30 + 60 = 130 ms vs cached 40 + 10 + 12 = 62 ms
    assert lines[-1] == "recompute is 2.10x slower than cached over the first 3 steps"
    assert tr._bytes_cell(5.8 * 2**20) == "5.80 MiB"
    single = format_summary(summary(Trace({}, [event()])))
    assert "n/a" in single and "slower" not in single


def test_module_imports_stay_light():
    import ast
    import pathlib
    tree = ast.parse(pathlib.Path(tr.__file__).read_text())
    nodes = list(ast.walk(tree))
    names = {a.name.split(".")[0] for n in nodes if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in nodes if isinstance(n, ast.ImportFrom)}
    assert not names & {"torch", "streamlit", "pandas", "numpy", "transformers"}


def test_dataclass_fields_all_checked():
    """Every StepEvent field is required or defaulted, and a removed one is always noticed."""
    d = doc()
    for f in dataclasses.fields(StepEvent):
        e = dict(d["events"][0])
        e.pop(f.name)
        ok = f.default is not dataclasses.MISSING
        try:
            tr._event_from_dict(e, 0)
            assert ok, f.name
        except TraceError as exc:
            assert not ok and f.name in str(exc)


# --- format 3: the cache layout as typed specs ---------------------------------------------------

from kvviz.core import spec as sp  # noqa: E402

V3_SPECS = (sp.FullSpec(kv_heads=2, values_per_token=64), sp.SlidingSpec(kv_heads=2, values_per_token=64,
                        token_cap=4),
            sp.LatentSpec(kv_heads=1, values_per_token=576, latent_rope=64),
            sp.StateSpec(state_values=30, state_float32_values=8, conv_values=30, conv_kernel=4,
                         state_family="mamba2", state_pinned=True),
            sp.SharedSpec(shared_with=1),
            sp.FullSpec(kv_heads=1, values_per_token=96, state_values=5, key_values_per_token=64))


def test_layers_round_trip_as_specs():
    t = Trace({"num_layers": len(V3_SPECS), "layers": [spec_record(s) for s in V3_SPECS]}, [event()])
    back = Trace.from_json(t.to_json())
    assert back == t and back.meta.specs == V3_SPECS
    assert as_dict(back.meta)["layers"][0] == {"kind": "full", "kv_heads": 2,
                   "values_per_token": 64}  # defaults left out


def test_version_2_meta_loads_as_specs():
    d = doc()
    d["version"] = 2
    d["meta"].update(num_layers=3, elem_bytes=2, num_kv_heads=2, head_dim=16, state_modelled=False,
                     windows=[None, 4, None], layer_kinds=["full", "sliding", "state"],
                     layer_labels=["full", "sliding 4", "state"], layer_bytes_per_token=[128, 128, 0],
                     layer_state_bytes=[0, 0, 500])
    meta = load_doc(d).meta
    assert not set(LEGACY_KEYS) & set(as_dict(meta)) and meta.state_modelled is False
    assert meta.specs == (sp.FullSpec(kv_heads=2, values_per_token=64),
                                    sp.SlidingSpec(kv_heads=2, values_per_token=64, token_cap=4),
                                    sp.StateSpec(state_values=250, state_known=False))
    junk = dict(d["meta"], layer_kinds=["moe", "sliding", 7], windows=[None, "x", None])
    assert [s.kind for s in legacy_specs(junk)] == ["full", "full", "full"]  # as the older views drew it


def test_version_1_trace_loads_as_specs():
    """A version-1 trace (no meta.layers): the shipped Replay example was one until it was
    re-recorded; its meta and first steps are kept in tests/data."""
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "data" / "trace-v1-smollm2-135m.json"
    assert "layers" not in json.loads(path.read_text())["meta"]
    meta = Trace.load(path).meta
    assert meta.specs == (sp.FullSpec(kv_heads=3, values_per_token=2 * 3 * 64),) * 30
    assert sp.bytes_per_token(meta.specs, meta.elem_bytes) == meta.bytes_per_token


@pytest.mark.parametrize("layer, fragment", [
    ({"kind": "sliding"}, "meta.layers[1]: a sliding layer needs a window of at least 1 token, got None"),
    ({"kind": "full", "kv_heads": -2}, "meta.layers[1].kv_heads: expected int >= 0"),
    ({"kind": "moe"}, "meta.layers[1].kind: invalid enum value 'moe'"),
    ({"kind": "full", "colour": 1}, "meta.layers[1]: object contains unknown field colour"),
    ({"kind": "full", "values_per_token": True}, "meta.layers[1].values_per_token: expected int, got bool"),
    ({"values_per_token": 3}, "meta.layers[1]: object missing required field kind"),
])
def test_bad_layer_records_are_named(layer, fragment):
    d = doc()
    d["meta"]["layers"] = [{"kind": "full"}, layer]
    expect(json.dumps(d), fragment)
    with pytest.raises(TraceError, match=re.escape(fragment)):
        Trace(d["meta"]).to_json()


def test_unmodelled_layouts_carry_no_layers_and_layer_counts_must_match():
    d = doc()
    d["version"] = 2
    d["meta"].update(num_layers=2, layout="not modelled: x: layer type 'moe' is not modelled by kvviz", windows=[])
    meta = load_doc(d).meta
    assert meta.layers is None and meta.specs == () and "windows" not in as_dict(meta)
    run = {"num_layers": 3, "num_kv_heads": 1, "head_dim": 4, "elem_bytes": 2, "bytes_per_token": 16,
           "weight_bytes": 1, "prompt_tokens": 4, "batch": 2, "max_len": 9, "layers": [{"kind": "full"}] * 2}
    with pytest.raises(TraceError, match="describes 2 layers in 'layers' but says num_layers = 3"):
        tr.check_run_meta(Trace(run, [event()]))
    tr.check_run_meta(Trace({**run, "num_layers": 2}, [event()]))
