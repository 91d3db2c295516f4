"""One figure, one answer: where two paths of kvviz compute the same number, they agree.

For every catalog model (and the tiny models the live page runs): the cache bytes the planner
shows for a context (kvviz.planner.capacity) and the live page's formula at the same token count
(kvviz.core.layout.formula_bytes, also the Sweep's and the trace's) are the same number, in every
dtype the live page can run; and the Sweep's out-of-memory boundary agrees with its own
'predicted not to fit' flag. Below, every figure two views show (bytes at n tokens, bytes per token,
tokens held, caps, per-kind groups) is computed through every path that shows it, for every catalog
model and every tiny architecture of tests/engine/test_architectures.py, from the one cache spec per layer.
"""
import pytest

from catalog_cases import first_of_each_type
from kvviz.core.meta import RunMeta, as_dict, spec_record
from kvviz.planner import capacity
from kvviz.planner import configs as plan_models
from kvviz.core import layout

CATALOG = [e["name"] for e in capacity.load_catalog()]
CATALOG_PARAMS = first_of_each_type()  # make check: one model per model_type; make test: all
CONTEXTS = (1, 17, 500, 4096, 8000, 131_072)
LIVE_DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2}  # the dtypes a live run records, bytes per value


@pytest.mark.parametrize("name", CATALOG_PARAMS)
def test_planner_and_live_formula_agree_for_every_catalog_model(name):
    model = plan_models.catalog_model(name)
    for dtype, elem_bytes in LIVE_DTYPES.items():
        for tokens in CONTEXTS:
            planner = capacity.kv_bytes_for_context(model, tokens, dtype)
            live = layout.formula_bytes(model.specs, tokens, 1, elem_bytes)
            assert planner == live, (name, dtype, tokens, planner, live)
        assert capacity.kv_bytes_per_token(model, dtype) == layout.bytes_per_token(model.specs, elem_bytes)


@pytest.mark.parametrize("name", CATALOG_PARAMS)
def test_planner_specs_are_the_layout_of_the_catalog_config(name):
    """The planner's model is the layout of the very config the live page would load."""
    entry = capacity.find_catalog_entry(name)
    config, _ = plan_models.resolve_model_type(capacity.catalog_config(entry))  # Kimi K2: remote code
    specs = layout.layer_specs(layout.config_from_dict(config))
    assert plan_models.catalog_model(name).specs == specs


# --- every figure two views show, through every path that shows it (issue 17) ---------------------
#
# One cache spec per layer (kvviz.core.spec) is the source; the paths are what the pages draw:
# the live formula (engine: layout.formula_bytes per step, probe: per layer), the trace (the engine's
# meta written and read back as a file), the cache map (cells per layer), the per-layer chart
# (groups, window marks, y top), the sweep (its out-of-memory boundary), the planner (bytes per
# context and per token, tokens held, the kinds line).

import json  # noqa: E402

from kvviz.core import spec as sp  # noqa: E402
from kvviz.live import cache_map
from kvviz.engine import loop as engine
from kvviz.live import charts as live_charts  # noqa: E402
from kvviz.core import trace as tr  # noqa: E402
from kvviz.core.events import LayerStat, StepEvent  # noqa: E402
from kvviz.sweep import compute as sweep  # noqa: E402
from tiny import ARCHS, STATE_ARCHS, arch_config  # noqa: E402

TINY = sorted({**ARCHS, **STATE_ARCHS})
BATCH = 2


def catalog_specs(name):
    model = plan_models.catalog_model(name)
    return model, model.specs


def tiny_specs(name):
    specs = layout.layer_specs(arch_config(name))
    return capacity.ModelKV(name=name, specs=specs, num_attention_heads=1), specs


def saved_meta(specs, elem_bytes: int, max_len: int) -> RunMeta:
    """The meta the engine writes for these specs, saved and loaded as a trace file."""
    meta = {**engine.layout_meta(specs), "elem_bytes": elem_bytes, "batch": BATCH, "max_len": max_len,
            "prompt_tokens": 1, "bytes_per_token": int(layout.bytes_per_token(specs, elem_bytes))}
    return tr.Trace.from_json(tr.Trace(meta).to_json()).meta


def measured_event(specs, tokens: int, elem_bytes: int) -> StepEvent:
    """The step event a cache holding exactly what each spec says would give after `tokens` positions."""
    layers = []
    for i, s in enumerate(specs):
        k, v = s.tensor_bytes(tokens, elem_bytes, BATCH)
        layers.append(LayerStat(layer=i, k_bytes=int(k), v_bytes=int(v), tokens=s.tokens_held(tokens), forward_ms=0.0,
                                state_bytes=int(s.state_bytes(elem_bytes) * BATCH), formula_bytes=s.bytes_at(tokens,
                                                elem_bytes,
                                    BATCH)))
    total = sum(s.formula_bytes for s in layers)
    return StepEvent(mode="cached",
                     phase="decode",
                     step=tokens,
                     token_ids=(1,) * BATCH,
                     texts=("",) * BATCH,
                     finished=(False,) * BATCH,
                     step_ms=1.0,
                     seq_len=tokens + 1,
                     positions=BATCH,
                     kv_bytes=total,
                     formula_bytes=total,
                     layers=tuple(layers),
                     blocks=None)


def check_every_path(model, specs, elem_bytes: int, dtype: str, tokens: int) -> None:
    meta = saved_meta(specs, elem_bytes, max_len=tokens)
    read = meta.specs
    assert read == tuple(specs)  # the trace carries the very specs
    event = measured_event(read, tokens, elem_bytes)
    # bytes at n tokens: live formula (whole model, per layer), planner, the event's per-layer sum
    formula = sp.formula_bytes(specs, tokens, BATCH, elem_bytes)
    assert formula == layout.formula_bytes(specs, tokens, BATCH, elem_bytes) == event.formula_bytes
    assert formula == sum(layout.layer_formula_bytes(s, tokens, BATCH, elem_bytes) for s in specs)
    assert formula == capacity.kv_bytes_for_context(model, tokens, dtype, BATCH)
    assert event.kv_bytes == formula  # K + V + state of every layer: what the probe measures is the formula
    # bytes per token: planner, the meta the charts and captions read, the specs
    assert capacity.kv_bytes_per_token(model, dtype) == meta.bytes_per_token == sp.bytes_per_token(specs, elem_bytes)
    # tokens held: the planner's tokens, the cache map's held cells
    assert capacity.cached_layer_tokens(model,
                                        tokens) == sum(s.values_per_token * s.tokens_held(tokens) for s in specs)
    held, dropped, state = {}, {}, {}  # per layer, from the map's first tensor row
    for cell in cache_map.cell_rows(meta, event):
        layer, row, _, status, _, _, positions = cell
        if row == 0:
            bucket = {"dropped": dropped, "state": state, "padding": {}}.get(status, held)
            bucket[layer] = bucket.get(layer, 0) + positions
    for i, s in enumerate(read):
        if isinstance(s, sp.StateSpec):
            assert state.get(i) == tokens and i not in held, i
        elif not isinstance(s, sp.SharedSpec):
            assert held.get(i, 0) == s.tokens_held(tokens), (i, s.label())
            assert dropped.get(i, 0) == tokens - s.tokens_held(tokens), (i, s.label())
    # per-kind groups: the chart's groups, the cache map's labels, the kinds line (meta, planner)
    groups = sp.layer_groups(read)
    assert [g.split(" · ", 1)[1] for g in live_charts.layer_groups(meta)] == list(groups)
    assert [len(v) for v in live_charts.layer_groups(meta).values()] == [len(v) for v in groups.values()]
    assert [k.label() for k in meta.specs] == [s.label() for s in specs]
    assert meta.layout == model.kinds == sp.kinds_summary(specs)
    # caps: the chart's window mark is what the group's layers hold once full; the y top holds every bar
    frame = live_charts.layer_groups_frame(meta, event)
    assert frame.group_bytes.sum() == sum(s.k_bytes + s.v_bytes + s.state_bytes for s in event.layers)
    assert frame.kv_bytes.max() <= live_charts.largest_tensor_bytes(meta)
    for (group, layers), (_, rows) in zip(live_charts.layer_groups(meta).items(), frame.groupby("group", sort=False)):
        first = read[layers[0]]
        if first.cap_label:
            assert list(rows.cap_label[:2]) == [first.cap_label] * 2
            full = measured_event(read, first.token_cap * 2, elem_bytes)  # past the window
            top = {s.layer: s for s in full.layers}[layers[0]]
            assert list(rows.cap_bytes[:2]) == [top.k_bytes, top.v_bytes], group
            assert top.tokens == first.max_tokens_held == first.token_cap - 1
        else:
            assert rows.cap_bytes.isna().all()


FIGURE_TOKENS = (1, 17, 500, 4096, 131_072)


@pytest.mark.parametrize("name", CATALOG_PARAMS)
def test_every_view_agrees_on_every_catalog_model(name):
    model, specs = catalog_specs(name)
    for dtype, elem_bytes in (("fp32", 4), ("bf16", 2)):
        for tokens in FIGURE_TOKENS:
            check_every_path(model, specs, elem_bytes, dtype, tokens)


@pytest.mark.parametrize("name", TINY)
def test_every_view_agrees_on_every_tiny_architecture(name):
    model, specs = tiny_specs(name)
    for tokens in (1, 3, 5, 6, 7, 40):  # around the tiny models' window of 6
        check_every_path(model, specs, 4, "fp32", tokens)


def test_tiny_architectures_cover_every_kind_and_a_hybrid():
    kinds = {s.kind for name in TINY for s in tiny_specs(name)[1]}
    assert kinds == set(sp.KINDS)
    assert any(s.kind != sp.STATE and s.state_part is not None for name in TINY for s in tiny_specs(name)[1])


@pytest.mark.parametrize("name", ["Gemma-3-1B", "gpt-oss-120b", "Qwen3-Next-80B-A3B", "Llama-4-Scout"])
def test_sweep_boundary_is_the_formula_for_mixed_layouts(name):
    """The sweep's predicted longest prompt and its per-point 'predicted not to fit' flag are one formula."""
    entry = capacity.find_catalog_entry(name)
    if entry is None:
        pytest.fail(f"{name} left the catalog: pick another mixed-layout model")
    specs, new_tokens = plan_models.catalog_model(entry["name"]).specs, 64
    for prompt in (100, 9_000, 60_000):
        budget = sp.formula_bytes(specs, prompt + new_tokens - 1, BATCH, 2)
        longest = sweep.predicted_max_prompt_tokens(budget, specs, 2, BATCH, new_tokens)
        assert longest is not None and longest >= prompt
        over = sp.formula_bytes(specs, longest + new_tokens, BATCH, 2)  # one token longer
        assert over > budget
        rows = sweep.rows_frame([_row(prompt, specs, new_tokens), _row(longest + 1, specs, new_tokens)], budget)
        assert list(rows.predicted_oom) == [False, True]


def _row(prompt: int, specs, new_tokens: int):
    end = sp.formula_bytes(specs, prompt + new_tokens - 1, BATCH, 2)
    fields = {f: 0 for f in sweep.SweepRow.__dataclass_fields__}
    return sweep.SweepRow(**{**fields, "prompt_tokens": prompt, "batch": BATCH, "end_formula_bytes": end,
                             "status": "ok", "message": ""})


def test_meta_round_trip_is_json():
    _, specs = catalog_specs(CATALOG[0])
    layers = as_dict(saved_meta(specs, 2, 10))["layers"]
    assert json.loads(json.dumps(layers)) == [as_dict(spec_record(s)) for s in specs]


def test_the_planner_and_a_real_vllm_agree_where_a_prefix_hit_lands():
    """The planner's "a shared prefix shorter than N tokens never hits" (modelled) and the vLLM page's
    (from a real server's events: tests/data/vllm/fleet, SmolLM2-135M on vLLM's CPU backend, block 32)."""
    from pathlib import Path

    from kvviz.planner import deployment
    from kvviz.planner import frames as pf
    from kvviz.vllm import trace, views
    watch = trace.Recording.load(Path(__file__).parent / "data" / "vllm" / "fleet" / "watch.json")
    served = {views.hit_block(state) for state in trace.states_at(watch).values()}
    plan = pf.Plan(plan_models.catalog_model("SmolLM2-135M"),
                   deployment.Setup(gpu_bytes=8 * 2**30, platform="cpu", block_size=32, kv_dtype="fp32"))
    assert served == {(plan.result.vllm.hit_block, "events")} == {(32, "events")}
