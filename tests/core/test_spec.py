"""The cache spec classes (kvviz.core.spec): each kind builds its own class, refuses what it cannot
be, and owns its arithmetic (tokens held, K and V per token, bytes at n tokens with the state in its
own dtype, a compressor's entries), and the model figures read from a tuple of specs. The specs a
transformers config gives: tests/core/test_layout.py."""
import copy
import pickle
from dataclasses import replace

import pytest

from kvviz.core import layout
from kvviz.core import spec as sp
from kvviz.core.errors import UserError
from kvviz.core.spec import FULL, SLIDING

def test_each_kind_builds_its_own_class_and_replace_changes_class_with_kind():
    assert type(layout.CacheSpec(kind=FULL, kv_heads=8, values_per_token=2048)) is sp.FullSpec
    assert type(sp.CacheSpec(kind=SLIDING, kv_heads=8, values_per_token=2048, token_cap=128)) is sp.SlidingSpec
    window = sp.SlidingSpec(kv_heads=8, values_per_token=2048, token_cap=128)
    assert window.kind == SLIDING and window == layout.CacheSpec(kind=SLIDING, kv_heads=8, values_per_token=2048,
                                                                 token_cap=128)
    full = replace(window, kind=FULL, token_cap=None)  # what the planner's what-if does
    assert type(full) is sp.FullSpec and full.tokens_held(10_000) == 10_000
    back = replace(full, kind=SLIDING, token_cap=64)
    assert type(back) is sp.SlidingSpec and back.tokens_held(10_000) == 63


@pytest.mark.parametrize("kind, cap, message", [
    ("sliding", None, "a sliding layer needs a window of at least 1 token, got None"),
    ("chunked", 0, "a chunked layer needs a chunk of at least 1 token, got 0"),
    ("full", 128, "a full layer has no token cap, got 128"),
    ("moe", None, "unknown cache kind 'moe'"),
])
def test_specs_refuse_what_their_kind_cannot_be(kind, cap, message):
    with pytest.raises(UserError, match=message):
        sp.CacheSpec(kind=kind, kv_heads=8, values_per_token=2048, token_cap=cap)


def test_k_and_v_are_halves_unless_latent_indexed_or_measured():
    assert (sp.FullSpec(kv_heads=2, values_per_token=64).k_values_per_token,
            sp.FullSpec(kv_heads=2, values_per_token=64).v_values_per_token) == (32, 32)
    mla = sp.LatentSpec(kv_heads=1, values_per_token=576, latent_rope=64)
    assert (mla.k_values_per_token, mla.v_values_per_token) == (512, 64)
    dsa = replace(mla, values_per_token=704, index_values=128)  # indexer keys count as keys
    assert (dsa.k_values_per_token, dsa.v_values_per_token) == (640, 64)
    measured = sp.FullSpec(kv_heads=1, values_per_token=96, key_values_per_token=64)
    assert (measured.k_values_per_token, measured.v_values_per_token) == (64, 32)
    assert measured.tensor_bytes(10, 2) == (64 * 10 * 2, 32 * 10 * 2)


def test_bytes_at_n_tokens_hold_the_cap_and_the_state_in_its_own_dtype():
    hybrid = sp.SlidingSpec(kv_heads=1, values_per_token=8, token_cap=5, state_values=10,
                            state_float32_values=3)
    assert hybrid.label() == "sliding 5 + state" and hybrid.cap_label == "window 5"
    assert hybrid.state_part == sp.StateSpec(state_values=10, state_float32_values=3)
    assert hybrid.bytes_at(0, 2) == 0
    assert hybrid.bytes_at(3, 2, batch=2) == 8 * 3 * 2 * 2 + (10 * 2 + 3 * 4) * 2
    assert hybrid.bytes_at(100, 2) == 8 * 4 * 2 + 10 * 2 + 3 * 4  # window 5 holds 4 tokens
    assert hybrid.max_tokens_held == 4 and sp.FullSpec().max_tokens_held is None
    assert hybrid.max_tensor_bytes(100, 2) == 10 * 2 + 3 * 4  # the state outgrows K (4 × 4 × 2)
    assert sp.SharedSpec(shared_with=3).bytes_at(100, 2) == 0 and sp.StateSpec().max_tokens_held == 0


def test_model_figures_from_specs():
    specs = (sp.FullSpec(kv_heads=2, values_per_token=64), sp.SlidingSpec(kv_heads=2, values_per_token=64,
             token_cap=4), sp.LatentSpec(kv_heads=1, values_per_token=96,
                                         latent_rope=32), sp.SharedSpec(shared_with=0))
    assert sp.layer_groups(specs) == {"full": [0], "sliding 4": [1], "latent 64+32": [2], "shared ← 0": [3]}
    assert sp.kinds_summary(specs + specs[:1]) == "2 × full, 1 × sliding 4, 1 × latent 64+32, 1 × shared"
    assert sp.widest(specs) == (1, 96) and sp.widest(specs[:2]) == (2, 16) and sp.widest(()) == (0, 0)
    assert sp.largest_tensor_bytes(specs, 10, 2) == 64 * 10 * 2  # the latent's 64 values × 10 tokens
    assert not sp.is_uniform_full(specs) and sp.is_uniform_full(specs[:1] * 3)


def test_specs_survive_pickle_and_copy_as_their_own_class():
    hybrid = sp.SlidingSpec(kv_heads=2, values_per_token=8, token_cap=4, state_values=3)
    for twin in (pickle.loads(pickle.dumps(hybrid)), copy.deepcopy(hybrid)):
        assert twin == hybrid and type(twin) is sp.SlidingSpec and hash(twin) == hash(hybrid)


def test_a_compressed_layer_holds_its_window_and_its_entries_at_long_context():
    """At 131,072 tokens a CSA layer (rate 4, head_dim 512, index_head_dim 128, window 128) holds
    127 window tokens of 512 + 32,768 entries of 640 + its overlap halves (2 × 4 × 640); an HCA
    layer (rate 128) 127 × 512 + 1,024 entries of 512 (no tokens buffered at a multiple of 128)."""
    csa = sp.CompressedSpec(kv_heads=1, values_per_token=512, key_values_per_token=512, token_cap=128, compress_rate=4,
                         compressed_values=640, buffer_values=2560, overlap_values=5120)
    hca = sp.CompressedSpec(kv_heads=1, values_per_token=512, key_values_per_token=512, token_cap=128,
                         compress_rate=128, compressed_values=512, buffer_values=1024)
    assert csa.values_held(131_072) == 127 * 512 + 32_768 * 640 + 5120
    assert hca.values_held(131_072) == 127 * 512 + 1_024 * 512
    assert hca.values_held(131_073) == hca.values_held(131_072) + 1024  # one token buffered
    assert csa.bytes_at(131_072, 2, 3) == csa.values_held(131_072) * 2 * 3
    assert csa.on_file().label() == "sliding 128" and csa.label() == "sliding 128 + compressed ÷4"
