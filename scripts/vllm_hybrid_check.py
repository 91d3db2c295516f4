"""What a real vLLM allocates for one model: run with .venv-vllm's python, never the app's.

    .venv-vllm/bin/python scripts/vllm_hybrid_check.py MODEL_DIR KV_BYTES BLOCK_SIZE MAX_LEN PREFIX DTYPE
    .venv-vllm/bin/python scripts/vllm_hybrid_check.py --many CASES.json

CASES.json: a JSON list of those six arguments per case. vLLM's LLM is imported once (about 15 s here)
and each case runs in a child forked from that process (its engine dies with it); the last stdout
line is then a JSON list, one object per case, {"error": ...} for a case whose child failed.

MODEL_DIR holds a config.json (no weights: vLLM's dummy loader fills random ones). The engine is
built in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) with exactly KV_BYTES of KV cache
(`--kv-cache-memory-bytes`), the given `--block-size`, `--max-model-len`, prefix caching on or off
(PREFIX = 1 / 0) and dtype; nothing is generated. The last stdout line is one JSON object: the
block size vLLM chose, its block count, "KV cache size" tokens, maximum concurrency, the Mamba
cache mode and padded state page, and each KV cache group's spec (kind, block size, page bytes,
layers). tests/planner/test_vllm_hybrid.py compares kvviz.planner.serving_plan with it.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path


def group_summary(group) -> dict:
    spec = group.kv_cache_spec
    return {"spec": type(spec).__name__, "block_size": spec.block_size, "page_bytes": spec.page_size_bytes,
            "layers": len(group.layer_names)}


def allocation(model_dir: str, kv_bytes: int, block_size: int, max_len: int, prefix: bool, dtype: str) -> dict:
    from vllm import LLM
    llm = LLM(model=model_dir, load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
              dtype=dtype, kv_cache_memory_bytes=kv_bytes, block_size=block_size, max_model_len=max_len,
              enable_prefix_caching=prefix, max_num_seqs=8, seed=0)
    engine = llm.llm_engine
    cache = engine.vllm_config.cache_config
    core = engine.engine_core.engine_core  # in-process: the EngineCore itself
    kv_config = core.scheduler.kv_cache_config
    return {"block_size": cache.block_size, "num_blocks": cache.num_gpu_blocks,
            "num_tokens": cache.kv_cache_size_tokens, "max_concurrency": cache.kv_cache_max_concurrency,
            "mamba_cache_mode": cache.mamba_cache_mode, "mamba_page_size_padded": cache.mamba_page_size_padded,
            "mamba_cache_dtype": cache.mamba_cache_dtype, "mamba_ssm_cache_dtype": cache.mamba_ssm_cache_dtype,
            "max_num_batched_tokens": engine.vllm_config.scheduler_config.max_num_batched_tokens,
            "async_scheduling": engine.vllm_config.scheduler_config.async_scheduling,
            "max_in_flight_tokens": engine.vllm_config.max_in_flight_tokens,
            "groups": [group_summary(g) for g in kv_config.kv_cache_groups],
            # where prefix-cache hits land: the scheduler's block (lcm of the groups') and the hashes'
            "scheduler_block_size": core.scheduler.block_size, "hash_block_size": core.scheduler.hash_block_size}


def allocation_of(args: list) -> dict:
    model_dir, kv_bytes, block_size, max_len, prefix, dtype = map(str, args)
    return allocation(model_dir, int(kv_bytes), int(block_size), int(max_len), prefix == "1", dtype)


def in_child(args: list, out: Path) -> dict:
    """`allocation_of(args)` in a child forked from this process (vLLM already imported)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            out.write_text(json.dumps(allocation_of(args)))
            code = 0
        except BaseException as exc:  # the parent reports it for this case
            out.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if out.exists():
        return json.loads(out.read_text())
    return {"error": f"the child ended with status {status} and wrote nothing"}


def many(cases_file: str) -> list[dict]:
    from vllm import LLM  # noqa: F401  (once, before the forks: `import vllm` alone defers it, ~5 s a child)
    cases = json.loads(Path(cases_file).read_text())
    with tempfile.TemporaryDirectory() as tmp:
        return [in_child(args, Path(tmp) / f"{i}.json") for i, args in enumerate(cases)]


def main(argv: list[str]) -> int:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if len(argv) == 2 and argv[0] == "--many":
        result = many(argv[1])
    elif len(argv) == 6:
        result = allocation_of(argv)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
