"""Tensor, pipeline and data parallelism: what one GPU of a deployment holds.

The rules are vLLM's:

* **TP** (tensor parallel, `--tensor-parallel-size`): attention heads are split across the
  ranks. With at least as many KV heads as ranks each rank caches `kv_heads / tp` of them; with
  fewer, every KV head is replicated so each rank caches one (vLLM's
  `max(1, num_kv_heads // tp)`). An MLA latent is not split by head: every rank caches all of
  it. Recurrent states are split by head like attention (here: state values / tp, rounded up).
* **PP** (pipeline parallel): the layers are split into stages, `layers // pp` each, the
  remainder going one layer each to the stages just before the last (vLLM's `get_pp_indices`).
  The stage with the most cache per token bounds how many requests fit.
* **DP** (data parallel): independent replicas; requests add up.

Weights are taken as split evenly over the tp × pp GPUs of a replica (vLLM shards every large
matrix over TP and places layers by PP; small norms and biases are replicated): a modelled
figure, close for large models.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kvviz.core.layout import CHUNKED, FULL, SLIDING, CacheSpec
from kvviz.core.errors import UserError

_SPLIT_BY_HEAD = (FULL, SLIDING, CHUNKED)


@dataclass(frozen=True)
class Parallel:
    tp: int = 1  # tensor-parallel ranks per stage
    pp: int = 1  # pipeline stages per replica
    dp: int = 1  # independent replicas

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def label(self, gpu_name: str = "GPU") -> str:
        """"8×H100 SXM, TP 8", "16×H200, TP 8 · PP 2", "1×L4"."""
        parts = [f"{name} {n}" for name, n in (("TP", self.tp), ("PP", self.pp), ("DP", self.dp))
                 if n > 1]
        return f"{self.gpus}×{gpu_name}" + (f", {' · '.join(parts)}" if parts else "")


def check_parallel(par: Parallel, specs, num_attention_heads: int) -> None:
    """UserError, in plain words, for a split vLLM would refuse."""
    for name, value in (("TP", par.tp), ("PP", par.pp), ("DP", par.dp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"{name} must be a whole number ≥ 1 (got {value!r})")
    if num_attention_heads % par.tp:
        raise UserError(f"TP {par.tp} does not divide the model's {num_attention_heads} attention "
                         f"heads: pick a TP size that does")
    for kv_heads in sorted({s.kv_heads for s in specs if s.kind in _SPLIT_BY_HEAD and s.kv_heads}):
        if kv_heads >= par.tp and kv_heads % par.tp:
            raise UserError(f"TP {par.tp} does not divide the model's {kv_heads} KV heads")
        if kv_heads < par.tp and par.tp % kv_heads:
            raise UserError(f"TP {par.tp} is not a multiple of the model's {kv_heads} KV heads, "
                             f"so they cannot be replicated evenly")
    if par.pp > len(specs):
        raise UserError(f"PP {par.pp} asks for more stages than the model's {len(specs)} layers")


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    """KV heads one TP rank caches: kv_heads / tp, or 1 (replicated) when kv_heads < tp."""
    return max(1, kv_heads // tp)


def rank_spec(spec: CacheSpec, tp: int) -> CacheSpec:
    """What one TP rank caches for this layer."""
    state = dict(state_values=math.ceil(spec.state_values / tp),
                 state_float32_values=math.ceil(spec.state_float32_values / tp),
                 conv_values=math.ceil(spec.conv_values / tp))  # states are split by head / channel
    if spec.kind in _SPLIT_BY_HEAD and spec.kv_heads:
        head_values = spec.values_per_token // spec.kv_heads  # K and V of one head
        heads = kv_heads_per_rank(spec.kv_heads, tp)
        return replace(spec, kv_heads=heads, values_per_token=heads * head_values, **state)
    if not spec.has_state:
        return spec  # a latent (MLA) layer: every rank caches all of it
    return replace(spec, **state)


def pp_layer_counts(num_layers: int, pp: int) -> list[int]:
    """Layers per stage: num_layers // pp each, the remainder one each to the stages before the
    last (vLLM's get_pp_indices: the last stage also holds the LM head)."""
    counts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        counts[-i] += 1
    return counts


def stage_rank_specs(specs, par: Parallel) -> list[tuple[CacheSpec, ...]]:
    """For each pipeline stage, the specs one TP rank of that stage caches (contiguous layers)."""
    stages, start = [], 0
    for count in pp_layer_counts(len(specs), par.pp):
        stages.append(tuple(rank_spec(s, par.tp) for s in specs[start:start + count]))
        start += count
    return stages


def weight_bytes_per_gpu(weight_bytes: int, par: Parallel) -> int:
    """The replica's weights split evenly over its tp × pp GPUs (modelled)."""
    return math.ceil(weight_bytes / par.gpus_per_replica)
