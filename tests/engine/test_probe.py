"""Reading the Hugging Face cache object (kvviz.engine.probe): each layer's K and V bytes, tokens,
heads and window, storages pinned counted once (a sliding layer's view of a larger buffer), layer
classes it cannot read refused by name, state kept on a model's own modules found, counted and put
back; and DeepSeek-V4's compressed layers read at every length as CompressedSpec sizes them."""
from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from kvviz.core import layout
from kvviz.engine import probe
from tests.engine.test_model_types import sized_config
from tiny import tiny_model

F32 = 4


def read_after(kind: str, prompt: int) -> tuple[list[probe.LayerBytes], DynamicCache]:
    """A tiny model's cache read after a 2-sequence prefill of `prompt` tokens and one decode step."""
    model = tiny_model(kind)
    cache, ids = DynamicCache(config=model.config), torch.randint(3, 300, (2, prompt))
    with torch.inference_mode():
        model(input_ids=ids, cache=cache, use_cache=True)
        model(input_ids=ids[:, :1], cache=cache, use_cache=True)
    return probe.read_cache(cache, model.config.num_hidden_layers), cache


def test_a_full_layer_holds_every_token_of_every_sequence():
    read, _ = read_after("llama", 5)  # 2 KV heads of 64 / 4 = 16 values, fp32
    for r in read:
        assert (r.k_bytes, r.v_bytes, r.tokens, r.k_heads, r.window) == (2 * 2 * 6 * 16 * F32,) * 2 + (6, 2, None)
        assert sum(r.storages.values()) == r.k_bytes + r.v_bytes and r.index_bytes == r.state_bytes == 0
    assert probe.storage_bytes(read) == 2 * 2 * 1536
    assert probe.storage_bytes(read + read) == probe.storage_bytes(read)  # each storage once


def test_a_sliding_layer_holds_window_minus_one_tokens_in_a_larger_buffer():
    read, _ = read_after("sliding", 12)  # window 8, 1 KV head of 16 values
    for r in read:
        assert (r.k_bytes, r.tokens, r.window) == (2 * 1 * 7 * 16 * F32, 7, 8)
        assert sum(r.storages.values()) == 2 * (2 * 1 * 8 * 16 * F32)  # a view of the 8 concatenated tokens


def test_a_layer_class_it_cannot_read_is_refused_by_name():
    class QuantizedLayer(DynamicLayer):  # a subclass may keep its tensors elsewhere
        pass

    _, cache = read_after("llama", 3)
    cache.layers[1] = QuantizedLayer()
    with pytest.raises(probe.UnreadableCache, match="cache layers of class QuantizedLayer"):
        probe.read_cache(cache, 2)
    with pytest.raises(probe.UnreadableCache, match="no cache object"):
        probe.read_cache(None, 2)
    assert probe.tensor_bytes("not a tensor") == 0 and probe.tensor_bytes(torch.zeros(3, dtype=torch.int8)) == 3


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mix = torch.nn.Linear(2, 2)
        self.state = torch.zeros(3)  # a plain attribute: neither a parameter nor a buffer


def test_state_kept_on_a_module_is_found_counted_as_its_layer_s_and_put_back():
    layers = torch.nn.ModuleList([Block(), Block()])
    before = probe.module_tensors(layers)
    assert probe.changed_module_states(layers, before, layers) == ()
    layers[1].state = torch.ones(3)  # what a decode step does
    states = probe.changed_module_states(layers, before, layers)
    assert [(s.layer, s.module, s.attr) for s in states] == [(1, layers[1], "state")]
    read = probe.add_module_states([probe.LayerBytes(), probe.LayerBytes()], states)
    assert (read[0].state_bytes, read[1].state_bytes, read[1].state_float32_bytes) == (0, 3 * F32, 3 * F32)
    held = probe.held_module_states(states)
    layers[1].state = torch.full((5,), 7.0)  # the no-cache run's forward rewrites it
    probe.restore_module_states(states, held)
    assert layers[1].state is held[0]


def test_layer_stats_set_the_measured_bytes_beside_the_formula():
    read, _ = read_after("llama", 5)
    specs = (layout.CacheSpec(kind="full", kv_heads=2, values_per_token=2 * 2 * 16),) * 2  # K + V
    stats = probe.cache_layer_stats(read, specs, tokens=6, batch=2, elem_bytes=F32, forward_ms=[1.5])
    assert [(s.layer, s.k_bytes + s.v_bytes, s.formula_bytes, s.forward_ms) for s in stats] == [
        (0, 3072, 64 * 6 * 2 * F32, 1.5), (1, 3072, 3072, 0.0)]  # measured == formula; no time: 0
    assert [s.forward_ms for s in probe.empty_layer_stats([2.0, 3.0])] == [2.0, 3.0]


def compressed_config(dtype_rates=(4, 8)):
    """DeepSeek-V4 with one sliding, one CSA and two HCA layers, rates small enough to close windows."""
    csa, hca = dtype_rates
    from transformers import AutoConfig
    base = sized_config("deepseek_v4").to_dict()
    base.update(layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                             "heavily_compressed_attention"], compress_rates={"compressed_sparse_attention": csa,
                                                                               "heavily_compressed_attention": hca},
                sliding_window=6, head_dim=32, index_head_dim=16, q_lora_rank=32, o_lora_rank=16, index_n_heads=2)
    base.pop("model_type", None)
    return AutoConfig.for_model("deepseek_v4",
                                **{k: v for k, v in base.items() if k not in ("transformers_version",)})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_deepseek_v4_compressor_sized_from_its_code_at_every_length(dtype):
    """Fed 1 token at a time past two CSA and one HCA window and the sliding window, every layer's
    bytes (window K = V, compressed entries, buffered projections and gates, overlap halves) ==
    CompressedSpec.bytes_at, in fp32 and bf16; the keys are counted once (values is keys)."""
    config = compressed_config()
    torch.manual_seed(0)
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_config(config).to(dtype).eval()
    specs = layout.layer_specs(config)
    assert [s.label() for s in specs] == ["sliding 6", "sliding 6 + compressed ÷4", "sliding 6 + compressed ÷8",
                                          "sliding 6 + compressed ÷8"]
    elem, cache, ids = torch.finfo(dtype).bits // 8, DynamicCache(config=model.config), torch.randint(3, 300, (2, 17))
    with torch.inference_mode():
        model(input_ids=ids[:, :3], cache=cache, use_cache=True)
        for n in range(4, 18):
            model(input_ids=ids[:, n - 1:n], cache=cache, use_cache=True)
            read = probe.read_cache(cache, len(specs))
            measured = [r.k_bytes + r.v_bytes + r.state_bytes + r.compressor_bytes for r in read]
            assert measured == [s.bytes_at(n, elem, 2) for s in specs], n
    assert read[1].v_bytes == 0 and read[1].compressor_bytes > 0
