"""The layout corrected from what the model's own code keeps (kvviz.engine.layout_probe), on hand-made
probe reads (two tokens, then three) so every expected size is derived here: K and V per token from
the growth, heads from the keys tensor, positions the code adds, the window the layer object keeps,
state in its own dtype, layers past the decoder count, and the caveats; a probe that fails or finds
no cache leaves the field-name layout with the reason. (Real models: tests/engine/test_model_types.py.)"""
from __future__ import annotations

from kvviz.core import layout
from kvviz.engine import layout_probe
from kvviz.engine.layout_probe import NO_CACHE, PREFILL_TOKENS, ProbeRun, measured_specs
from kvviz.engine.probe import LayerBytes, UnreadableCache

BF16 = 2
CONFIG_FULL = layout.CacheSpec(kind=layout.FULL, kv_heads=8, values_per_token=2 * 8 * 64)  # what the fields say


def kv(tokens: int, k: int, v: int, heads: int = 1, window: int | None = None, **more) -> LayerBytes:
    """One layer holding `tokens` tokens of `k` key and `v` value elements each, in bf16."""
    return LayerBytes(k_bytes=tokens * k * BF16, v_bytes=tokens * v * BF16, tokens=tokens, k_heads=heads,
                      window=window, **more)


def probed(one: list, two: list, specs=(CONFIG_FULL,), **run) -> layout_probe.Probed:
    return measured_specs(specs, lambda: ProbeRun(one=one, two=two, decoder_layers=len(specs), **run), BF16)


def test_sizes_come_from_the_growth_between_the_two_reads_not_the_field_names():
    got = probed([kv(2, 64, 64, heads=1)], [kv(3, 64, 64, heads=1)])  # multi-query: 1 head, not 8
    assert got.note == "" and got.caveat == ""
    assert got.specs == (layout.CacheSpec(kind=layout.FULL, kv_heads=1, values_per_token=128),)


def test_keys_and_values_of_different_sizes_and_positions_the_code_adds():
    got = probed([kv(PREFILL_TOKENS + 32, 96, 32)], [kv(PREFILL_TOKENS + 33, 96, 32)])
    spec = got.specs[0]
    assert (spec.values_per_token, spec.key_values_per_token, spec.fixed_tokens) == (128, 96, 32)
    assert got.caveat == "its own code adds 32 positions to every sequence's cache"


def test_the_window_is_the_one_the_layer_object_keeps():
    sliding = layout.CacheSpec(kind=layout.SLIDING, kv_heads=1, values_per_token=128, token_cap=4096)
    got = probed([kv(2, 64, 64), kv(2, 64, 64, window=8)], [kv(3, 64, 64), kv(3, 64, 64, window=8)],
                 specs=(sliding, CONFIG_FULL))
    assert [(s.kind, s.token_cap) for s in got.specs] == [(layout.FULL, None), (layout.SLIDING, 8)]


def test_a_state_is_split_into_the_model_s_dtype_and_float32():
    state = layout.CacheSpec(kind=layout.STATE, state_values=1, state_known=False)
    read = LayerBytes(state_bytes=10 * BF16 + 6 * 4, state_float32_bytes=6 * 4)
    got = probed([read], [read], specs=(state,))
    assert (got.specs[0].state_values, got.specs[0].state_float32_values, got.specs[0].state_known) == (10, 6, True)


def test_cache_layers_past_the_decoder_count_are_sized_and_said():
    one, two = [kv(2, 64, 64)] * 2, [kv(3, 64, 64)] * 2
    got = measured_specs((CONFIG_FULL,), lambda: ProbeRun(one=one, two=two, decoder_layers=1), BF16)
    assert len(got.specs) == 2 and got.specs[1].values_per_token == 128
    assert got.caveat.startswith("its cache holds 1 layers beyond its 1 decoder layers") and "layers 1–1" in got.caveat


def test_cached_steps_that_compute_something_else_get_a_caveat_above_the_dtype_s_noise():
    quiet = probed([kv(2, 64, 64)], [kv(3, 64, 64)], drift=0.05)  # bf16 noise: under 0.1
    loud = probed([kv(2, 64, 64)], [kv(3, 64, 64)], drift=0.25)
    assert quiet.caveat == "" and "differ from a full forward's by 25% of the largest" in loud.caveat


def test_a_failed_or_empty_probe_keeps_the_field_name_layout_and_says_why():
    def unreadable():
        raise UnreadableCache("kvviz cannot read cache layers of class OddLayer")

    def broken():
        raise RuntimeError("shape mismatch")

    for run, note in ((unreadable, "sizes from config fields (kvviz cannot read cache layers of class OddLayer)"),
                      (broken, "sizes from config fields (probe forward failed: RuntimeError: shape mismatch)")):
        got = measured_specs((CONFIG_FULL,), run, BF16)
        assert got.specs == (CONFIG_FULL,) and got.note == note
    assert probed([LayerBytes()], [LayerBytes()]).note == NO_CACHE
