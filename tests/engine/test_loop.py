"""The engine on tiny random models: exact bytes, event shape, and greedy parity."""
import dataclasses
import math

import pytest
import torch

from kvviz.core.errors import UserError
from kvviz.engine import loop as engine
from kvviz.core import layout
from kvviz.core.config import RunConfig
from kvviz.core.events import BlockStat, LayerStat, StepEvent
from tiny import tiny_lm

KINDS = ["llama", "gpt2", "qwen2", "sliding"]
PROMPTS = [("Hello there, how are you?",), ("Hi", "What is a KV cache? Tell me a story.")]


def run(lm, mode="cached", **kw):
    cfg = RunConfig(**{"max_new_tokens": 12, "chat_template": False, "stop_on_eos": False, **kw})
    return list(engine.generate(lm, cfg, mode))


def hf_generate(lm, cfg):
    plan = engine.plan_run(lm, cfg)
    with torch.inference_mode():
        out = lm.model.generate(plan.batch.ids, attention_mask=plan.batch.mask, do_sample=False,
                                max_new_tokens=cfg.max_new_tokens, eos_token_id=None,
                                pad_token_id=lm.tokenizer.pad_token_id)
    return [tuple(col) for col in out[:, plan.batch.prompt_len:].T.tolist()]


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("prompts", PROMPTS)
def test_greedy_tokens_identical_cached_recompute_and_generate(kind, prompts):
    lm = tiny_lm(kind)
    cfg = RunConfig(prompts=prompts, batch=len(prompts), max_new_tokens=12, chat_template=False,
                    stop_on_eos=False)
    cached = [e.token_ids for e in engine.generate(lm, cfg, "cached")]
    recompute = [e.token_ids for e in engine.generate(lm, cfg, "recompute")]
    assert len(cached) == 12
    assert cached == recompute == hf_generate(lm, cfg)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_measured_layer_bytes_equal_formula_every_step(kind):
    lm = tiny_lm(kind)
    specs = layout.layer_specs(lm.model.config)
    events = run(lm, prompts=PROMPTS[1][:2], batch=2, max_new_tokens=16)
    for e in events:
        tokens = e.seq_len - 1  # the newest token is not cached yet
        for stat in e.layers:  # kv_heads x head_dim x tokens x batch 2 x 4 bytes (fp32)
            spec = specs[stat.layer]
            expected = spec.values_per_token // 2 * layout.layer_tokens_held(spec, tokens) * 2 * 4
            assert stat.k_bytes == stat.v_bytes == expected
            assert stat.k_bytes + stat.v_bytes == stat.formula_bytes
        assert e.kv_bytes == e.formula_bytes == sum(s.k_bytes + s.v_bytes for s in e.layers)


def test_sliding_window_caps_tokens_held():
    events = run(tiny_lm("sliding"), max_new_tokens=20)
    assert max(s.tokens for s in events[-1].layers) == 7  # window 8 keeps 7 past tokens
    assert events[-1].kv_bytes == events[-2].kv_bytes  # the window is full: no growth


@pytest.mark.slow
def test_one_prefill_then_decode_steps_and_positions():
    events = run(tiny_lm(), prompts=("Hi", "What is a KV cache?"), batch=2)
    prompt_len = events[0].seq_len - 1
    assert [e.phase for e in events] == ["prefill"] + ["decode"] * 11
    assert [e.step for e in events] == list(range(12))
    assert events[0].positions == 2 * prompt_len and {e.positions for e in events[1:]} == {2}
    recompute = run(tiny_lm(), "recompute", prompts=("Hi", "What is a KV cache?"), batch=2)
    assert [e.positions for e in recompute] == [2 * (prompt_len + i) for i in range(12)]
    assert all(e.kv_bytes == 0 and e.blocks is None for e in recompute)


def assert_plain(value):
    """Events hold scalars, strings, tuples and nested event records only."""
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            assert_plain(getattr(value, f.name))
    elif isinstance(value, tuple):
        for v in value:
            assert_plain(v)
    else:
        assert value is None or type(value) in (int, float, str, bool), type(value)


@pytest.mark.slow
def test_events_hold_no_tensors():
    for e in run(tiny_lm()) + run(tiny_lm(), "recompute"):
        assert isinstance(e, StepEvent) and all(isinstance(s, LayerStat) for s in e.layers)
        assert_plain(e)
        assert e.step_ms > 0 and all(s.forward_ms > 0 for s in e.layers)


@pytest.mark.slow
def test_block_accounting_follows_tokens():
    events = run(tiny_lm(), block_size=4, max_new_tokens=10)
    per_token = layout.bytes_per_token(layout.layer_specs(tiny_lm().model.config), 4)
    for e in events:
        b: BlockStat = e.blocks
        tokens = e.seq_len - 1
        assert b.num_used_blocks == math.ceil(tokens / 4)
        assert b.num_slots_in_last_block == tokens - 4 * (b.num_used_blocks - 1)
        assert b.num_used_blocks + b.num_free_blocks == b.num_blocks
        assert b.paged_bytes == b.num_used_blocks * 4 * per_token >= e.kv_bytes
        assert b.contiguous_bytes == (events[0].seq_len - 1 + 10) * per_token
        assert not b.contiguous_is_real


@pytest.mark.slow
def test_static_cache_reservation_is_real_and_tokens_match_dynamic():
    dynamic = run(tiny_lm(), max_new_tokens=8)
    static = run(tiny_lm(), cache_backend="static", max_new_tokens=8)
    assert [e.token_ids for e in static] == [e.token_ids for e in dynamic]
    reserved = static[0].kv_bytes
    assert all(e.kv_bytes == reserved == e.blocks.contiguous_bytes for e in static)
    assert static[0].blocks.contiguous_is_real and reserved == dynamic[0].blocks.contiguous_bytes
    assert [s.tokens for s in static[-1].layers] == [s.tokens for s in dynamic[-1].layers]


@pytest.mark.slow
def test_sampling_repeats_with_seed_and_differs_across_seeds():
    lm = tiny_lm()
    a = run(lm, temperature=1.5, top_k=50, top_p=0.9, seed=1, max_new_tokens=20)
    b = run(lm, temperature=1.5, top_k=50, top_p=0.9, seed=1, max_new_tokens=20)
    c = run(lm, temperature=1.5, top_k=50, top_p=0.9, seed=2, max_new_tokens=20)
    assert [e.token_ids for e in a] == [e.token_ids for e in b] != [e.token_ids for e in c]


@pytest.mark.slow
def test_top_k_one_is_greedy():
    lm = tiny_lm()
    assert [e.token_ids for e in run(lm, temperature=1.0, top_k=1)] == [e.token_ids for e in run(lm)]


def test_should_stop_ends_within_one_step_and_hooks_are_removed():
    lm = tiny_lm()
    seen = []
    events = list(engine.generate(lm, RunConfig(max_new_tokens=50, chat_template=False),
                                  should_stop=lambda: len(seen) >= 3 or seen.append(1)))
    assert len(events) == 3
    layers = lm.model.model.layers
    assert all(not layer._forward_hooks and not layer._forward_pre_hooks for layer in layers)


@pytest.mark.slow
def test_stop_on_eos_marks_finished_and_pads_afterwards():
    lm = tiny_lm()
    free = run(lm, max_new_tokens=6)
    eos = free[2].token_ids[0]  # pretend the 3rd token is EOS
    lm.model.generation_config.eos_token_id = eos
    events = run(lm, max_new_tokens=6, stop_on_eos=True)
    assert len(events) == 3 and events[-1].finished == (True,)


@pytest.mark.slow
def test_text_deltas_rebuild_the_decoded_output():
    lm = tiny_lm()
    events = run(lm, max_new_tokens=20)
    ids = [e.token_ids[0] for e in events]
    assert "".join(e.texts[0] for e in events) == lm.tokenizer.decode(ids, skip_special_tokens=True)


def test_chat_template_wraps_the_prompt():
    lm = tiny_lm()
    plain = engine.plan_run(lm, RunConfig(chat_template=False))
    chat = engine.plan_run(lm, RunConfig(chat_template=True))
    assert chat.batch.prompt_len > plain.batch.prompt_len


@pytest.mark.parametrize("cfg, message", [
    (RunConfig(prompts=("",)), "prompt is empty"),
    (RunConfig(prompts=("word " * 300,), chat_template=False), "exceeds this model's context of 256"),
    (RunConfig(max_new_tokens=0), "at least 1"),
    (RunConfig(prompts=("a", "b", "c"), batch=2), "batch=2 but 3 prompts"),
    (RunConfig(cache_backend="paged"), "unknown cache backend"),
])
def test_bad_requests_get_clear_errors(cfg, message):
    with pytest.raises(UserError, match=message):
        list(engine.generate(tiny_lm(), cfg))


def opaque_layer_class():
    from transformers.cache_utils import DynamicLayer

    class OpaqueLayer(DynamicLayer):
        """A layer class kvviz does not know (a model's own, say): it may keep tensors elsewhere."""

    return OpaqueLayer


@pytest.mark.slow
def test_unknown_cache_layer_class_is_named_and_the_run_goes_on(monkeypatch):
    from transformers import DynamicCache

    def opaque_cache(model, backend, max_len):
        cache = DynamicCache(config=model.config)
        cache.layers = [opaque_layer_class()() for _ in cache.layers]
        return cache

    monkeypatch.setattr(engine, "make_cache", opaque_cache)
    lm = tiny_lm()
    events = run(lm, max_new_tokens=6)
    plain = [e.token_ids for e in run(lm, "recompute", max_new_tokens=6)]
    assert [e.token_ids for e in events] == plain and all(e.step_ms > 0 for e in events)
    assert all(e.cache_note == "kvviz cannot read cache layers of class OpaqueLayer" for e in events)
    assert all(e.kv_bytes == 0 and e.storage_bytes is None and e.formula_bytes > 0 for e in events)
    assert all(s.forward_ms > 0 for s in events[-1].layers)


def test_a_layout_kvviz_cannot_model_is_named_and_the_run_goes_on(monkeypatch):
    def unknown(config):
        raise UserError("llama: layer type 'compressed_sparse_attention' is not modelled by kvviz")

    monkeypatch.setattr(layout, "layer_specs", unknown)
    lm = tiny_lm()
    meta = engine.run_meta(lm, RunConfig(max_new_tokens=4, chat_template=False))
    assert meta.num_layers == 2 and meta.layout.startswith("not modelled: llama: layer type")
    events = run(lm, max_new_tokens=4)
    assert len(events) == 4 and all(e.step_ms > 0 and e.kv_bytes == e.formula_bytes == 0 for e in events)
    assert events[0].cache_note == ("llama: layer type 'compressed_sparse_attention' is not modelled by kvviz: "
                                    "cache bytes not shown")
