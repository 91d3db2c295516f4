"""Every attention family transformers 5.24 ships, on tiny random models: the live numbers hold.

For each architecture in `tiny.ARCHS` (full, GQA/MHA, sliding without layer_types, 5:1 and 3:1
default patterns, MLA latent, chunked, KV-shared, Mamba / Mamba-2 / gated-delta / short-conv
state layers, MiniMax's own cache), one recorded cached run and one recompute run (built once):

- per layer and per step, measured bytes (numel × element size, K + V + state) == the layout formula;
- cached == recompute == `model.generate` greedy tokens;
- storage pinned: never below the logical bytes, and never above what an uncapped layer holding
  every position seen would pin (plus its state); equal to the logical bytes except in
  sliding / chunked layers, whose tensors are views of a larger buffer;
- `layout.bytes_per_token(specs)` == the live growth of one decode step while no cap is reached.

Prompts are 2 tokens and 6 tokens are generated: windows and chunks of 6 (5 tokens held) are
crossed mid-run.
"""
from functools import lru_cache

import pytest
import torch

from kvviz.core.errors import UserError
from kvviz.engine import loop as engine
from kvviz.core import trace as trace_module
from kvviz.core import layout
from kvviz.core.config import RunConfig
from kvviz.core.trace import Trace
from tiny import ARCHS, STATE_ARCHS, WINDOW, arch_lm

NEW_TOKENS = 6


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tiny models on a shared 2-core machine: one intra-op thread is ~8x cheaper in CPU time
    (measured: 43 s -> 6 s for every recording below) than threads spinning against each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


PROMPTS = ("Hello there", "Attention reads")


def run_config() -> RunConfig:
    return RunConfig(prompts=PROMPTS, batch=2, max_new_tokens=NEW_TOKENS, chat_template=False,
                     stop_on_eos=False)


@lru_cache(maxsize=None)
def recorded(name: str) -> Trace:
    """One recorded run of `name` with the recompute contrast, as `kvviz record` writes it."""
    lm = arch_lm(name)
    trace = Trace(engine.run_meta(lm, run_config()))
    for mode in engine.MODES:
        for event in engine.generate(lm, run_config(), mode):
            trace.append(event)
    return Trace.from_json(trace.to_json())  # what a saved file holds


def hf_generate_tokens(name: str) -> list[tuple]:
    lm = arch_lm(name)
    plan = engine.plan_run(lm, run_config())
    with torch.inference_mode():
        out = lm.model.generate(plan.batch.ids, attention_mask=plan.batch.mask, do_sample=False,
                                max_new_tokens=NEW_TOKENS, eos_token_id=None,
                                pad_token_id=lm.tokenizer.pad_token_id)
    return [tuple(col) for col in out[:, plan.batch.prompt_len:].T.tolist()]


def specs_of(name: str):
    return layout.layer_specs(arch_lm(name).model.config)


NAMES = list(ARCHS)


def test_at_least_fourteen_architectures_cover_every_layer_kind():
    kinds = {s.kind for name in NAMES for s in specs_of(name)}
    assert len(NAMES) >= 14 and kinds == set(layout.KINDS)


@pytest.mark.parametrize("name", NAMES)
def test_measured_equals_formula_per_layer_every_step(name):
    specs = specs_of(name)
    events = recorded(name).events_of("cached")
    assert len(events) == NEW_TOKENS and all(e.cache_note == "" for e in events)
    for e in events:
        tokens = e.seq_len - 1  # the newest token is not cached yet
        for stat, spec in zip(e.layers, specs, strict=True):
            measured = stat.k_bytes + stat.v_bytes + stat.state_bytes
            expected = layout.layer_formula_bytes(spec, tokens, 2, 4)
            assert measured == stat.formula_bytes == expected, (e.step, stat.layer, spec.label())
            assert stat.tokens == layout.layer_tokens_held(spec, tokens)
        assert e.kv_bytes == e.formula_bytes == layout.formula_bytes(specs, tokens, 2, 4)


@pytest.mark.parametrize("name", NAMES)
def test_cached_recompute_and_generate_give_the_same_tokens(name):
    trace = recorded(name)
    cached = [e.token_ids for e in trace.events_of("cached")]
    recompute = [e.token_ids for e in trace.events_of("recompute")]
    assert cached == recompute == hf_generate_tokens(name)


@pytest.mark.parametrize("name", NAMES)
def test_storage_bytes_within_bound_of_logical(name):
    specs = specs_of(name)
    for e in recorded(name).events_of("cached"):
        seen = e.seq_len - 1
        for stat, spec in zip(e.layers, specs):
            logical = stat.k_bytes + stat.v_bytes + stat.state_bytes
            uncapped = spec.values_per_token * seen * 2 * 4 + stat.state_bytes
            assert logical <= stat.storage_bytes <= uncapped, (e.step, stat.layer)
            if spec.token_cap is None:
                assert stat.storage_bytes == logical, (e.step, stat.layer)
        assert e.storage_bytes == sum(s.storage_bytes for s in e.layers)


@pytest.mark.parametrize("name", NAMES)
def test_layout_bytes_per_token_equals_live_growth(name):
    specs = specs_of(name)
    first, second = recorded(name).events_of("cached")[:2]
    assert first.seq_len - 1 < WINDOW - 1  # no cap reached yet: every attention layer grows
    growth = (second.kv_bytes - first.kv_bytes) / 2  # per sequence of the batch
    assert growth == layout.bytes_per_token(specs, 4) == recorded(name).meta.bytes_per_token


@pytest.mark.parametrize("name", NAMES)
def test_trace_meta_names_each_layer_kind(name):
    meta, specs = recorded(name).meta, specs_of(name)
    read = meta.specs  # the trace's typed layer records, read back as specs
    assert [s.kind for s in read] == [s.kind for s in specs]
    assert [s.label() for s in read] == [s.label() for s in specs]
    assert meta.layout == layout.kinds_summary(specs)
    assert meta.attn_implementation in ("sdpa", "eager")


def test_caps_are_crossed_and_state_layers_stay_flat():
    """Gemma 3's local layers cap while its global layer grows; Qwen3-Next's state layers stay flat."""
    gemma = recorded("gemma3_text").events_of("cached")
    local = [e.layers[0].tokens for e in gemma]
    assert local[0] < WINDOW - 1 and local[-1] == WINDOW - 1
    assert gemma[-1].layers[5].tokens == gemma[-1].seq_len - 1 > WINDOW
    qwen = recorded("qwen3_next").events_of("cached")
    assert {e.layers[0].state_bytes for e in qwen} == {qwen[0].layers[0].state_bytes} != {0}
    assert qwen[-1].layers[3].k_bytes > qwen[0].layers[3].k_bytes


def test_sliding_views_pin_more_than_they_hold():
    """A sliding layer keeps W - 1 tokens of a freshly concatenated W-token buffer."""
    last = recorded("mistral").events_of("cached")[-1]
    for stat in last.layers:
        assert stat.storage_bytes > stat.k_bytes + stat.v_bytes


def test_gpt_oss_runs_with_eager_and_the_trace_says_so():
    assert recorded("gpt_oss").meta.attn_implementation == "eager"


@pytest.mark.parametrize("name", ["gemma3_text", "qwen3_next", "deepseek_v3"])
def test_meta_per_layer_bytes_rebuild_the_formula(name):
    """A reader of the trace alone (charts, replay) gets each layer's bytes from meta's specs."""
    meta = trace_module.Trace.from_json(recorded(name).to_json()).meta  # through the file format
    specs = meta.specs
    for e in recorded(name).events_of("cached"):
        tokens = e.seq_len - 1
        for stat, spec in zip(e.layers, specs, strict=True):
            assert stat.formula_bytes == spec.bytes_at(tokens, meta.elem_bytes, meta.batch)
            assert stat.tokens == spec.tokens_held(tokens)


def test_captions_name_a_mixed_layout():
    from kvviz.live import captions
    trace = recorded("gemma3_text")
    last = trace.events_of("cached")[-1]
    assert "Layers: 5 × sliding 6, 1 × full" in captions.layers_caption(trace.meta)
    assert "the per-layer formula" in captions.total_caption(trace.meta, last)
    label, value, help_text = captions.cache_figure(last)
    assert "they pin" in help_text  # sliding views pin more storage than they hold


STATE_NAMES = ["jamba", "bamba", "qwen3_next", "lfm2", "minimax", "falcon_h1", *STATE_ARCHS]


@pytest.mark.parametrize("name", STATE_NAMES)
def test_state_sizes_and_dtypes_of_state_space_families(name):
    """Conv states follow the model's dtype, SSM / delta-rule states stay float32: bf16 tells them
    apart (fp32 runs of the first six are in the tests above)."""
    lm = arch_lm(name, torch.bfloat16)
    specs, elem = layout.layer_specs(lm.model.config), 2
    cfg = RunConfig(prompts=PROMPTS, batch=2, max_new_tokens=2, chat_template=False, stop_on_eos=False)
    assert any(s.has_state for s in specs) and not layout.unknown_states(specs)
    for e in engine.generate(lm, cfg, "cached"):
        tokens = e.seq_len - 1
        for stat, spec in zip(e.layers, specs, strict=True):
            assert stat.k_bytes + stat.v_bytes + stat.state_bytes == layout.layer_formula_bytes(spec, tokens, 2, elem)
        assert e.kv_bytes == e.formula_bytes


@pytest.mark.parametrize("name", NAMES)
def test_planner_on_the_same_config_agrees_with_the_live_run(name):
    """The capacity planner reads the model's config.json; its bytes equal the live measurement."""
    from kvviz.planner import capacity
    from kvviz.planner import configs as plan_models
    model = plan_models.model_from_config(arch_lm(name).model.config.to_dict(), name, given_params=1)
    first, second, *_, last = recorded(name).events_of("cached")
    assert capacity.kv_bytes_per_token(model, "fp32") * 2 == second.kv_bytes - first.kv_bytes
    assert capacity.kv_bytes_for_context(model, last.seq_len - 1, "fp32", batch=2) == last.kv_bytes


def test_minimax_gets_its_own_cache_and_refuses_the_static_backend_clearly():
    from transformers.models.minimax.modeling_minimax import MiniMaxCache
    lm = arch_lm("minimax")
    assert type(engine.make_cache(lm.model, "dynamic", 16)) is MiniMaxCache
    with pytest.raises(UserError, match="keeps its own cache \\(MiniMaxCache\\).*choose the dynamic cache"):
        engine.make_cache(lm.model, "static", 16)
