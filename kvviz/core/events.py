"""Plain, frozen records the engine yields: scalars and tuples only, never tensors.

Column names here are the column names of every DataFrame and chart encoding downstream
(units live in the names: `*_bytes`, `*_ms`).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class LayerStat:
    """One decoder layer after one step."""

    layer: int  # index of the decoder layer, 0-based
    k_bytes: int  # bytes held by this layer's key tensor(s) (0 in recompute mode)
    v_bytes: int  # bytes held by this layer's value tensor(s)
    tokens: int  # token positions this layer's cache holds (capped at the window when sliding)
    forward_ms: float  # this layer's forward time within the step (forward hooks)
    state_bytes: int = 0  # conv / recurrent state tensors of a linear-attention or state-space layer
    storage_bytes: int | None = None  # allocations its tensors pin, each storage once (None: not recorded)
    formula_bytes: int | None = None  # what kvviz.core.layout predicts for this layer (None: not recorded)


@dataclass(frozen=True, kw_only=True)
class BlockStat:
    """Paged-block accounting of the cache after one step (modelled: HF caches are contiguous)."""

    block_size: int  # token slots per block
    num_blocks: int  # blocks in the pool: enough for every sequence at max_length
    num_used_blocks: int  # blocks holding at least one token, all sequences
    num_free_blocks: int  # num_blocks - num_used_blocks
    num_slots_in_last_block: int  # filled slots in each sequence's last block (block_size when full)
    paged_bytes: int  # bytes the used blocks reserve (whole blocks)
    contiguous_bytes: int  # bytes a contiguous max_length reservation holds for the batch
    contiguous_is_real: bool  # True with StaticCache, whose reservation really is allocated


@dataclass(frozen=True, kw_only=True)
class StepEvent:
    """One forward pass: the prefill, or one decode step."""

    mode: str  # "cached" or "recompute"
    phase: str  # "prefill" or "decode"
    step: int  # 0 for the prefill, then 1, 2, ... per decode step
    token_ids: tuple[int, ...]  # the token chosen for each sequence of the batch
    texts: tuple[str, ...]  # the text those tokens added to each sequence
    finished: tuple[bool, ...]  # whether each sequence has stopped (EOS)
    step_ms: float  # wall time of the forward pass and sampling (CUDA events on CUDA)
    seq_len: int  # tokens per sequence after this step (prompt + generated, padded)
    positions: int  # token positions the forward pass processed, whole batch
    kv_bytes: int  # cache bytes measured from the tensors after the step (numel x element size)
    formula_bytes: int  # kvviz.core.layout's formula: per layer, held tokens x values x batch x bytes + state
    layers: tuple[LayerStat, ...]  # per decoder layer
    blocks: BlockStat | None  # paged accounting (None in recompute mode: nothing is cached)
    cuda_allocated_bytes: int | None = None  # torch.cuda.memory_allocated after the step
    cuda_reserved_bytes: int | None = None  # torch.cuda.memory_reserved after the step
    storage_bytes: int | None = None  # allocations the cache pins, each storage once (None: not recorded)
    cache_note: str = ""  # why the cache could not be measured (e.g. an unknown layer class), else ""
    # [sequence][layer][position]: the newest token's attention over the positions each layer read,
    # averaged over heads; a row's last entry is the newest position (RunConfig.attention; else None)
    attention: tuple[tuple[tuple[float, ...], ...], ...] | None = None
