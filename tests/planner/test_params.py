"""kvviz.planner.params: parameter counts from a config on the meta device, against published totals."""
from __future__ import annotations

import pytest

from catalog_cases import first_of_each_type
from kvviz.planner import capacity, params
from kvviz.planner import configs as plan_models


def rounded_like(count: int, published: int) -> int:
    """`count` rounded to as many significant digits as `published` shows (1.7e9 → 2 digits)."""
    digits = len(str(published).rstrip("0"))
    return round(count, digits - len(str(count)))


def test_rounded_like():
    assert rounded_like(1_720_574_976, 1_700_000_000) == 1_700_000_000
    assert rounded_like(1_026_408_209_408, 10**12) == 10**12
    assert rounded_like(1_760_000_000, 1_700_000_000) == 1_800_000_000  # would fail the check


@pytest.mark.parametrize("entry", first_of_each_type(lambda e: e))  # make test: all; check: one per type
def test_meta_count_matches_the_published_total(entry):
    """Within 1 % of the published total; where the only published total is a rounded figure
    ("1.7B", "3B", "24B", "1T"), the meta count must round to it."""
    cfg, _ = plan_models.resolve_model_type(capacity.catalog_config(entry))  # Kimi K2: remote code
    count = params.parameter_count(cfg)
    published = entry["num_parameters"]
    assert (count.total == pytest.approx(published, rel=0.01)
            or rounded_like(count.total, published) == published), (count.total, published)
    assert 0 < count.active <= count.total
    assert count.is_moe == ("num_active_parameters" in entry)


# Publishers count "active" two ways: Meta (Llama 4) and OpenAI (gpt-oss) leave the untied input
# embedding table out — kvviz's convention, what a decode step reads — Qwen counts it in.
# DeepSeek-V3's "37B" is within 2 % of both (36.63 B without, 37.55 B with), Qwen3-235B's "22B"
# too (21.57 B / 22.19 B); the other five tell the conventions apart.
WITH_TABLE = {"Qwen3-30B-A3B": True, "Qwen3-235B-A22B": True, "Llama-4-Scout": False,
              "Llama-4-Maverick": False, "gpt-oss-20b": False, "gpt-oss-120b": False, "DeepSeek-V3": False}


@pytest.mark.parametrize("name", list(WITH_TABLE))
def test_moe_active_count_matches_the_published_figure(name):
    entry = capacity.find_catalog_entry(name)
    count = params.parameter_count(capacity.catalog_config(entry))
    assert count.is_moe and count.lookup > 0
    ours = count.active + (count.lookup if WITH_TABLE[name] else 0)
    assert ours == pytest.approx(entry["num_active_parameters"], rel=0.02)
    other = count.active + (0 if WITH_TABLE[name] else count.lookup)
    if name not in ("DeepSeek-V3", "Qwen3-235B-A22B"):
        assert other != pytest.approx(entry["num_active_parameters"], rel=0.02)  # the convention matters


def test_a_tied_embedding_table_is_active():
    # SmolLM2 ties its head to the embedding table: the head reads all of it every step
    count = params.parameter_count(capacity.catalog_config(capacity.find_catalog_entry("SmolLM2-135M")))
    assert count.lookup == 0 and count.active == count.total


def test_tiny_real_models_count_as_on_meta():
    """A dense and a MoE model built for real: the meta count is their own numel, and the active
    count takes k / E of the routed experts (by hand: 2 layers × 4 experts × 3 × 32 × 16)."""
    import torch
    from transformers import Qwen3MoeConfig

    cfg = Qwen3MoeConfig(vocab_size=100, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         num_experts=4, num_experts_per_tok=2, head_dim=8).to_dict()
    count = params.parameter_count(cfg)
    from transformers import AutoModelForCausalLM
    from kvviz.core.layout import config_from_dict
    real = AutoModelForCausalLM.from_config(config_from_dict(cfg))
    assert count.total == sum(p.numel() for p in real.parameters())
    routed = 2 * 4 * 3 * 32 * 16
    assert count.lookup == 100 * 32  # the untied embedding table: one row read per token
    assert count.active == count.total - routed // 2 - count.lookup
    assert isinstance(next(real.parameters()), torch.Tensor)


def test_counts_are_cached_per_config():
    cfg = capacity.catalog_config(capacity.find_catalog_entry("Llama-3.1-8B"))
    assert params.parameter_count(cfg) is params.parameter_count(dict(cfg))


def test_unknown_architecture_asks_for_a_count():
    cfg = {"model_type": "no-such-arch", "num_hidden_layers": 4, "num_attention_heads": 8,
           "num_key_value_heads": 2, "hidden_size": 512}
    with pytest.raises(params.UnknownArchitecture):
        params.parameter_count(cfg)
    model = plan_models.model_from_config(cfg, "mystery")
    assert model.params_total is None and "does not know" in model.notes[0]
    assert capacity.kv_bytes_per_token(model) == 4 * 2 * 2 * 64 * 2  # read as full attention
    given = plan_models.model_from_config(cfg, "mystery", given_params=10**9)
    assert (given.params_total, given.params_active, given.params_source) == (10**9, 10**9, "given")


