"""What a forward pass costs in arithmetic: the prefill's flops, for the modelled time left of a
long pass (the Live page's progress line, the Sweep's estimate), and the device's pace on it."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from kvviz.core.config import RunConfig
from kvviz.engine.loop import Batch, StepClock, encode_prompts, recompute_step
from kvviz.engine.models import LoadedModel

CALIBRATE_FROM_TOKENS = 128  # a prompt this long, on a device of unknown pace, gets a timed pass first
# (SmolLM2-135M prefills 128 tokens in 0.6 s on a 2-core CPU: longer prompts, or larger models, wait)
CALIBRATION_SHARE = 8  # that pass reads 1/8 of the prompt (at least CALIBRATION_MIN, at most
CALIBRATION_MIN, CALIBRATION_MAX = 32, 128  # CALIBRATION_MAX tokens): ≤ 1/8 of a long prefill's time


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


def calibration_tokens(prompt_tokens: int) -> int:
    """Tokens of the timed pass before a prefill of `prompt_tokens` (0: too short to need one)."""
    if prompt_tokens < CALIBRATE_FROM_TOKENS:
        return 0
    return max(CALIBRATION_MIN, min(CALIBRATION_MAX, prompt_tokens // CALIBRATION_SHARE))


def calibrated_seconds_per_flop(lm: LoadedModel, cfg: RunConfig, work: ModelWork,
                                prompt_tokens: int) -> float | None:
    """Seconds per ModelWork flop on this device, from one timed forward over the prompt's first
    `calibration_tokens` tokens, keeping no cache: the pace for the first prefill's time left when
    nothing was measured before (None: the prompt is short, no pass). An estimate, no better than
    the flop model: SmolLM2 in fp32 on a 2-core CPU (one torch thread, other work running), a
    128-token pass predicted 22.3 s for a 1,931-token prefill that took 28.5 s, and a 32-token
    pass 3.1 s for 183 tokens that took 1.9 s (fixed overhead weighs more in a short pass)."""
    n = calibration_tokens(prompt_tokens)
    if not n:
        return None
    whole = encode_prompts(lm.tokenizer, cfg, lm.device)
    start = whole.prompt_len - prompt_tokens  # past the first sequence's left padding, if any
    part = Batch(ids=whole.ids[:1, start:start + n], mask=whole.mask[:1, start:start + n], prompt_len=n)
    with torch.inference_mode(), StepClock(lm.device) as clock:  # every call: Streamlit reruns use new threads
        recompute_step(lm.model, part)  # the no-cache pass the decode loop runs, over n tokens
    return clock.ms / 1000 / work.prefill_flops(n, 1)
