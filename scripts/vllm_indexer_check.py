"""vLLM's own KV-cache arithmetic for DeepSeek-V3.2-style layers: run with .venv-vllm's python.

    .venv-vllm/bin/python scripts/vllm_indexer_check.py LAYERS BLOCK_SIZE KV_BYTES MAX_LEN [CACHE_DTYPE ...]

CACHE_DTYPE: auto (the default) or fp8_ds_mla; several are checked in one run (vLLM imported once).

Each layer gives vLLM's two specs, as its DeepSeek-V3.2 model code registers them: the MLA latent
(576 values in bf16; with fp8_ds_mla, the spec vLLM's MLA layer gives for that cache dtype: a
656-byte uint8 row per token) and the sparse-attention indexer's key cache (128 fp8 values + one
float32 scale = 132 bytes, uint8). vLLM 0.32's `get_kv_cache_groups`, `get_kv_cache_config_from_groups`
and `get_kv_cache_capacity` (a stand-in config carries only the fields they read) print one JSON
line, an object keyed by cache dtype: groups, blocks, "KV cache size" tokens, maximum concurrency. tests/planner/test_vllm_hybrid.py
compares kvviz.planner.serving_plan with it.
"""
from __future__ import annotations

import json
import sys
from unittest import mock


def stand_in_config(max_len: int):
    cfg = mock.MagicMock()
    cfg.model_config.max_model_len = max_len
    cfg.scheduler_config.disable_hybrid_kv_cache_manager = False
    cfg.scheduler_config.max_num_batched_tokens = 8192
    cfg.parallel_config.decode_context_parallel_size = 1
    cfg.parallel_config.prefill_context_parallel_size = 1
    cfg.cache_config.num_gpu_blocks_override = None
    cfg.cache_config.kv_cache_memory_bytes = None
    cfg.attention_config.hisparse_config = None
    return cfg


def _latent_spec(block: int, cache_dtype: str):
    import torch
    from vllm.v1.kv_cache_interface import MLAAttentionSpec
    if cache_dtype == "fp8_ds_mla":  # as MLAAttention.get_kv_cache_spec builds it
        return MLAAttentionSpec(block_size=block, num_kv_heads=1, head_size=576, dtype=torch.uint8,
                                cache_dtype_str="fp8_ds_mla", state_content_bytes=656)
    return MLAAttentionSpec(block_size=block, num_kv_heads=1, head_size=576, dtype=torch.bfloat16)


def allocation(layers: int, block: int, kv_bytes: int, max_len: int, cache_dtype: str = "auto") -> dict:
    import torch
    from vllm.v1.core import kv_cache_utils as ku
    from vllm.v1.kv_cache_interface import MLAAttentionSpec, SparseCacheRole
    specs = {}
    for i in range(layers):
        specs[f"layers.{i}.attn"] = _latent_spec(block, cache_dtype)
        specs[f"layers.{i}.indexer.k_cache"] = MLAAttentionSpec(
            block_size=block, num_kv_heads=1, head_size=128 + 128 // 128 * 4, dtype=torch.uint8,
            cache_role=SparseCacheRole.INDEXER)
    cfg = stand_in_config(max_len)
    groups = ku.get_kv_cache_groups(cfg, specs)
    config = ku.get_kv_cache_config_from_groups(cfg, groups, kv_bytes)
    tokens, concurrency = ku.get_kv_cache_capacity(cfg, config)
    return {"pages": sorted({s.page_size_bytes for s in specs.values()}),
            "groups": [[type(g.kv_cache_spec).__name__, len(g.layer_names)] for g in groups],
            "num_blocks": config.num_blocks, "num_tokens": tokens, "max_concurrency": concurrency}


if __name__ == "__main__":
    if len(sys.argv) < 5:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sizes = list(map(int, sys.argv[1:5]))
    print(json.dumps({dtype: allocation(*sizes, dtype) for dtype in sys.argv[5:] or ["auto"]}), flush=True)
