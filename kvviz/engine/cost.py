"""What a forward pass costs in arithmetic: the prefill's flops, for the modelled time left of a
long pass (the Live page's progress line, the Sweep's estimate)."""
from __future__ import annotations

from dataclasses import dataclass

from kvviz.engine.models import LoadedModel


@dataclass(frozen=True)
class ModelWork:
    """The arithmetic of a prefill, for the time-left estimate: per sequence of T tokens,
    2 x params x T (every weight once per token) + 2 x attention_width x T^2 (causal QK^T and
    AV over the prompt). Compute-bound passes take time in proportion to it."""

    params: int  # weights of the model
    attention_width: int  # layers x query heads x head_dim

    def prefill_flops(self, prompt_tokens: int, batch: int) -> float:
        t = prompt_tokens
        return batch * (2 * self.params * t + 2 * self.attention_width * t * t)


def model_work(lm: LoadedModel) -> ModelWork:
    text = lm.model.config.get_text_config(decoder=True)
    heads = getattr(text, "num_attention_heads", 1) or 1
    head_dim = getattr(text, "head_dim", None) or getattr(text, "hidden_size", 0) // heads
    layers = getattr(text, "num_hidden_layers", 1) or 1
    return ModelWork(sum(p.numel() for p in lm.model.parameters()), layers * heads * head_dim)
