"""vLLM's release families: what each one deducts from the KV budget, and its defaults.

The budget's arithmetic is the same shape in every release since 0.6 (kvviz.planner.vllm_memory):
`total × gpu_memory_utilization − weights − activation peak − non-torch memory [− CUDA graphs]`.
What changes from family to family is how big each measured term comes out and which defaults
size the profile run. Each figure below is either vLLM's source (a file and line) or a published
start-up log (tests/planner/data/vllm_startups.json, docs/planner.md "vLLM's budget, release by
release"); the ones fitted to logs are labelled so.

* **V0, 0.6.0–0.6.4** — the profile run is a forward pass of `max_num_batched_tokens`, which is
  `max(max_model_len, 2048)` unless chunked prefill is on; the API server turns chunked prefill on
  above 32,768 tokens, with 512 tokens per batch ("Chunked prefill is enabled with
  max_num_batched_tokens=512", a 0.6.4 log). 256 sequences. Non-torch memory ≈ 0.35 GiB
  (vllm-project/vllm#10517, RTX 3090). The sampler pass adds nothing measurable (same issue:
  20k → 29k tokens adds 110 kB per token and nothing else).
* **V0, 0.6.5–0.6.6** — vllm-project/vllm#10511 measured non-torch memory as everything CUDA holds
  beyond torch's allocations: 1.79 GiB per GPU at TP 1, 3.58 at TP 2 (its own H100 sanity checks),
  until #11809 (0.7.0) measured it against torch's reserved memory instead.
* **V0, 0.7** — as 0.6, with 2,048 tokens per chunked batch; non-torch ≈ 0.2 GiB at TP 1
  (vllm-project/vllm#13882: 0.03; #13061: 0.25 with TP 2 on two RTX 4090).
* **V1, 0.8–0.16** — the profile run is a forward pass of `max_num_batched_tokens` and then one
  sampler pass over `max_num_seqs` rows of logits (v1/worker/gpu_model_runner.py profile_run);
  the two peaks do not add (the forward's activations are freed first), so the peak is the larger.
  The sampler pass costs ≈ 39 bytes per logit: Qwen3-14B 5.64 GiB at 1,024 × 151,936 (v0.15 and
  v0.16, llm-d-planner's version table), gpt-oss-120b 7.5 GiB at 1,024 × 201,088 (#27508).
  Non-torch memory 0.13 GiB at TP 1 (the same table).
* **V1, 0.17–0.20** — the sampler pass costs ≈ 15 bytes per logit (0.32's `_dummy_sampler_run`
  warms `forward_native` without a `.clone()` of the logits, "[which] only inflates peak memory
  during profile_run"): Qwen3-14B 2.23 GiB at v0.17; v0.19 Llama-3.1-8B 1.89, Qwen2.5-7B 2.21,
  gpt-oss-20b 2.87, Gemma-2-27B 3.66 GiB. Non-torch 0.13 GiB at 0.17, 0.25 from 0.18. CUDA
  graphs are estimated ("Estimated CUDA graph memory: 0.84 GiB total") but not deducted.
* **V1, 0.21 on** — CUDA graph memory is deducted before the KV budget ("CUDA graph memory
  profiling is enabled (default since v0.21.0)", v1/worker/gpu_worker.py:775 in 0.32);
  `gpu_memory_utilization` defaults to 0.92 (config/cache.py:102 in 0.32).

From 0.8.5 the API server's defaults follow the GPU (PR #17073; 0.32's engine/arg_utils.py
2923–2951): ≥ 160 GiB 16,384 tokens and 1,024 sequences; ≥ 70 GiB and not an A100 8,192 and 1,024;
else 2,048 and 256. Before, V1 gave H100 / H200 8,192 tokens and every other GPU 2,048 (PR #12369,
0.7.1), with 256 sequences.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from kvviz.core.errors import UserError

GIB = 2**30
LATEST = "0.32"  # the release kvviz's allocator rules are checked against (.venv-vllm)
V0, V1 = "V0", "V1"


@dataclass(frozen=True, kw_only=True)
class Release:
    """One family of vLLM releases that budget the KV cache the same way."""

    name: str  # "V1 0.18–0.20"
    first: tuple[int, int, int]
    engine: str  # V0 or V1
    default_gpu_memory_utilization: float
    sampler_bytes_per_logit: float  # the profile run's sampler pass (0: not measurable)
    non_torch_tp1_bytes: int  # CUDA runtime, cuBLAS workspaces, … at TP 1
    non_torch_scales_with_tp: bool  # 0.6.5–0.6.6 measured every worker's neighbours too
    chunked_prefill_tokens: int  # V0: the batch size when the API server turns chunked prefill on
    deducts_cuda_graphs: bool
    warms_sampler_after_kv: bool  # V1 runs a sampler pass again after allocating the KV cache
    sources: tuple[str, ...]

    @property
    def v0(self) -> bool:
        return self.engine == V0


def _gib(x: float) -> int:
    return round(x * GIB)


RELEASES = (
    Release(name="V0 0.6.0–0.6.4", first=(0, 6, 0), engine=V0, default_gpu_memory_utilization=0.9,
            sampler_bytes_per_logit=0.0, non_torch_tp1_bytes=_gib(0.35), non_torch_scales_with_tp=False,
            chunked_prefill_tokens=512, deducts_cuda_graphs=False, warms_sampler_after_kv=False,
            sources=("vllm-project/vllm#10517: RTX 3090, non_torch_memory=0.35GiB, 20k/29k/35k profiles",
             "a 0.6.4.dev log: 'Chunked prefill is enabled with max_num_batched_tokens=512'")),
    Release(name="V0 0.6.5–0.6.6", first=(0, 6, 5), engine=V0, default_gpu_memory_utilization=0.9,
            sampler_bytes_per_logit=39.0, non_torch_tp1_bytes=_gib(1.79), non_torch_scales_with_tp=True,
            chunked_prefill_tokens=512, deducts_cuda_graphs=False, warms_sampler_after_kv=False,
            sources=("vllm-project/vllm#10511 sanity checks: H100, non_torch_memory 1.79 GiB (TP 1), 3.58 (TP 2); "
             "activation 1.26 GiB at TP 1 and TP 2 alike: the sampler's 256 × 128,256 logits, not the forward",
             "vllm-project/vllm#11809 (0.7.0): non-torch measured against torch's reserved memory")),
    Release(name="V0 0.7", first=(0, 7, 0), engine=V0, default_gpu_memory_utilization=0.9,
            sampler_bytes_per_logit=39.0, non_torch_tp1_bytes=_gib(0.2), non_torch_scales_with_tp=False,
            chunked_prefill_tokens=2048, deducts_cuda_graphs=False, warms_sampler_after_kv=False,
            sources=("vllm-project/vllm#13882 (0.7.3): non_torch_memory 0.03 GiB; activation 1.42 GiB = the sampler's "
             "256 × 152,064 logits × 39 B on the driver", "vllm-project/vllm#13061: 0.25 GiB, activation 0.19 GiB "
             "for 2,048 tokens of a 14B model on the TP-2 worker without the sampler; the driver kept "
             "1.23 GiB less (81,536 tokens), the same 1.42 GiB sampler pass")),
    Release(name="V1 0.8–0.16", first=(0, 8, 0), engine=V1, default_gpu_memory_utilization=0.9,
            sampler_bytes_per_logit=39.0, non_torch_tp1_bytes=_gib(0.13), non_torch_scales_with_tp=False,
            chunked_prefill_tokens=0, deducts_cuda_graphs=False, warms_sampler_after_kv=True,
            sources=("llm-d-planner accuracy_report.md, vLLM version table: Qwen3-14B activation 5.64 GiB, "
             "non-torch 0.13 GiB (v0.15, v0.16)", "vllm-project/vllm#27508: gpt-oss-120b 1.71 GiB of KV at 0.95")),
    Release(name="V1 0.17", first=(0, 17, 0), engine=V1, default_gpu_memory_utilization=0.9,
            sampler_bytes_per_logit=15.0, non_torch_tp1_bytes=_gib(0.13), non_torch_scales_with_tp=False,
            chunked_prefill_tokens=0, deducts_cuda_graphs=False, warms_sampler_after_kv=True,
            sources=("llm-d-planner accuracy_report.md: Qwen3-14B activation 2.23 GiB, non-torch 0.13 GiB (v0.17)",)),
    Release(name="V1 0.18–0.20", first=(0, 18, 0), engine=V1, default_gpu_memory_utilization=0.9,
            sampler_bytes_per_logit=15.0, non_torch_tp1_bytes=_gib(0.25), non_torch_scales_with_tp=False,
            chunked_prefill_tokens=0, deducts_cuda_graphs=False, warms_sampler_after_kv=True,
            sources=("llm-d-planner v0.19.0 logs: non-torch forward increase 0.25 GiB; 'In v0.19, CUDA graph memory "
             "profiling will be enabled by default' (not yet deducted)",)),
    Release(name="V1 0.21 on", first=(0, 21, 0), engine=V1, default_gpu_memory_utilization=0.92,
            sampler_bytes_per_logit=15.0, non_torch_tp1_bytes=_gib(0.25), non_torch_scales_with_tp=False,
            chunked_prefill_tokens=0, deducts_cuda_graphs=True, warms_sampler_after_kv=True,
            sources=("vllm 0.32 v1/worker/gpu_worker.py:700-744: cudagraph_memory_estimate deducted when "
             "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS (default 1, envs.py:2221)",
             "vllm 0.32 config/cache.py:102: gpu_memory_utilization default 0.92")),
)
FAMILY_NAMES = tuple(r.name for r in RELEASES)
# the releases the page offers: one per family, and 0.13 / 0.14 either side of Hopper's MXFP4 layout
# (Marlin, then Triton: checkpoint_weights.mxfp4_kernel)
PAGE_VERSIONS = (LATEST, "0.21", "0.19", "0.17", "0.16", "0.14", "0.13", "0.11", "0.8", "0.7", "0.6.5", "0.6.4")
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, int, int]:
    """'0.19.0' / 'v0.11' / '0.7.3.dev233+g…' → (0, 19, 0); UserError for anything else."""
    match = _VERSION.match(str(text).strip())
    if not match:
        raise UserError(f"unknown vLLM version {text!r}; give it as 0.19 or 0.19.0")
    major, minor, patch = (int(g) if g else 0 for g in match.groups())
    if (major, minor) < (0, 6):
        raise UserError(f"kvviz models vLLM from 0.6 on; {text!r} is older")
    return major, minor, patch


def release_for(version: str | None, engine: str | None = None) -> Release:
    """The family a version belongs to (None: the latest, LATEST). `engine` "V0" picks V0's rules
    for a 0.8–0.10 release run with VLLM_USE_V1=0 (a log says 'Initializing a V0 LLM engine')."""
    key = parse_version(version or LATEST)
    if engine == V0 and key >= (0, 8, 0):
        return next(r for r in RELEASES if r.name == "V0 0.7")
    return [r for r in RELEASES if key >= r.first][-1]


def default_limits(release: Release, version: str | None, total_bytes: int, gpu_name: str,
                   platform: str) -> tuple[int, int | None]:
    """(max_num_seqs, max_num_batched_tokens) that `vllm serve` picks when they are not given.
    None tokens: V0's, which depend on max_model_len (`v0_profile_tokens`)."""
    if platform == "cpu":
        return 128, 2048  # 0.32's CPU defaults for the API server
    if release.v0:
        return 256, None
    key = parse_version(version or LATEST)
    name = gpu_name.lower()
    if key < (0, 8, 5):  # PR #12369: H100 / H200 only
        return 256, (8192 if ("h100" in name or "h200" in name) else 2048)
    if total_bytes >= 160 * GIB:
        return 1024, 16384
    if total_bytes >= 70 * GIB and "a100" not in name:
        return 1024, 8192
    return 256, 2048


def v0_profile_tokens(release: Release, max_model_len: int, given: int | None) -> int:
    """V0's profile run: max(max_model_len, 2048) tokens, or the chunked-prefill batch when the API
    server turns chunked prefill on (max_model_len over 32,768)."""
    if given:
        return given
    if max_model_len > 32768:
        return release.chunked_prefill_tokens
    return max(max_model_len, 2048)
