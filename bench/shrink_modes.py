"""Shrink modes vs the full cache on the default model: bytes, decode step time, where the answers
part; and the full-cache side checked against `model.generate`."""
from __future__ import annotations

import json

from bench.results import Result
from bench.settings import Settings

PRESET = "Long document"  # assets/prompts.json: ≈ 350 words ending in an instruction
PRESS_RATIO = 0.5  # share of prompt positions each press evicts
QUANT_SETTINGS = {"quanto": ((4, 16),), "hqq": ((8, 16), (4, 16)), "fp8": ((8, 16),)}  # (nbits, residual)


def preset_prompt(name: str = PRESET) -> str:
    from kvviz.core import assets
    return json.loads((assets.FOLDER / "prompts.json").read_text())[name]["prompt"]


def modes() -> tuple[list, list[str]]:
    """(every shrink mode that can run here, a sentence per press or backend that cannot)."""
    from kvviz.shrink import presses, quant_cache
    from kvviz.shrink.compute import ShrinkMode
    offered, refused = presses.offered()
    backends, refused_backends = quant_cache.available()
    out = [ShrinkMode(press=name, ratio=PRESS_RATIO) for name in offered]
    for backend, settings in QUANT_SETTINGS.items():
        if backend in backends:
            out += [ShrinkMode(backend=backend, nbits=nbits, residual_length=residual)
                    for nbits, residual in settings if nbits in backends[backend]]
    missing = [f"{name}: {why}" for name, why in {**refused, **refused_backends}.items()]
    return out, missing


def generate_tokens(lm, ids, new_tokens: int) -> list[int]:
    """`model.generate`, greedy, exactly `new_tokens` tokens, no EOS stop (the shrink runs have none)."""
    import torch
    ids = ids.to(lm.device)
    with torch.inference_mode():
        out = lm.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                max_new_tokens=new_tokens, eos_token_id=None,
                                pad_token_id=lm.tokenizer.pad_token_id or 0)
    return out[0, ids.shape[1]:].tolist()


def divergence(result) -> str:
    steps = len(result.full.steps)
    if result.diverged_at is None:
        return f"same {steps} tokens"
    return f"diverged at token {result.diverged_at + 1} of {steps}"


def shrink_modes(lm, s: Settings, prompt: str | None = None) -> tuple[list[Result], str]:
    from kvviz.shrink import compute as shrink
    ids = shrink.prompt_ids(lm.tokenizer, prompt if prompt is not None else preset_prompt())
    n, new = ids.shape[1], s.new_tokens
    every, missing = modes()
    rows, notes, full_tokens = [], [], []
    for mode in every:
        result = shrink.compare(lm, ids, new, mode, eos=set())  # a fixed length: EOS not a stop
        full, shrunk = result.full, result.shrunk
        full_tokens.append(full.tokens)
        label = mode.label()
        rows.append(Result(f"Shrink, {label}: cache bytes at the end, shrunk / full",
                           f"{shrunk.steps[-1].kv_bytes:,} B ({divergence(result)})",
                           f"{full.steps[-1].kv_bytes:,} B", result.bytes_ratio(), None, None))
        rows.append(Result(f"Shrink, {label}: decode step, shrunk / full", f"{shrunk.decode_ms():.2f} ms",
                           f"{full.decode_ms():.2f} ms", result.step_time_ratio(), None, None))
        notes.append(f"{label}: after the prompt {full.steps[0].kv_bytes:,} → {shrunk.steps[0].kv_bytes:,} B, "
                     f"at the end {full.steps[-1].kv_bytes:,} → {shrunk.steps[-1].kv_bytes:,} B "
                     f"(×{result.bytes_ratio():.3f}); {divergence(result)}; decode step "
                     f"{full.decode_ms():.2f} → {shrunk.decode_ms():.2f} ms (×{result.step_time_ratio():.2f})")
    reference = generate_tokens(lm, ids, new)
    agree = sum(tokens == reference for tokens in full_tokens)
    rows.append(Result("Shrink: full-cache runs whose tokens equal `model.generate`'s",
                       f"{agree} of {len(full_tokens)} runs", f"{new} greedy tokens",
                       agree / len(full_tokens) if full_tokens else 0.0, ">=", 1.0))
    refused = f" Not run here: {'; '.join(missing)}." if missing else ""
    return rows, (
        f"`kvviz.shrink.compute.compare` on the default model, one run per shrink mode: the "
        f"\"{PRESET}\" preset of `assets/prompts.json` through the chat template ({n} prompt "
        f"tokens), then {new} greedy tokens (prefill included, EOS not a stop) with the full dynamic "
        "cache and with the shrunk one, taking turns step by step so both sides see the same load. "
        f"Modes: every kvpress press offered, evicting {PRESS_RATIO:.0%} of the prompt's positions "
        "once after the prompt, and transformers' quantized cache for each backend installed. Bytes are "
        "measured from the cache tensors after the last step (the quantized ones: packed payload, scales "
        "and zero points, full-precision residual); the step time is the median decode step of that "
        "one run (prefill excluded), so a single run on a shared machine — read the step-time ratios "
        "as rough. The divergence is the first new token where the shrunk run's answer differs from "
        "the full run's. No size or speed target: these rows show the trade-off. The one target "
        f"checks the baseline itself: every full-cache run must give exactly `model.generate`'s {new} "
        "greedy tokens (no EOS stop) on the same ids. " + "; ".join(notes) + "." + refused)
