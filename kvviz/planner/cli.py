"""`kvviz plan`: how much KV cache a model needs, and how many requests fit on a GPU.

    kvviz plan Llama-3.1-8B --gpu H100 --context 500,2000,8000
    kvviz plan Llama-3.1-70B --gpu H100 --tp 8 --max-model-len 32768
    kvviz plan path/to/config.json --kv-dtype fp8 --json
    kvviz plan --layers 30 --kv-heads 3 --head-dim 64 --heads 9 --gpu-gb 24

The model is, in order: explicit numbers (--layers --kv-heads --head-dim), a path to a
config.json or to a folder holding one, a catalog name (assets/models.json; see --list), or a
Hugging Face id already in the local cache (read with AutoConfig, local_files_only=True: this
command never downloads). Its layers come from kvviz.core.layout, its parameter count from the
architecture built on the meta device (kvviz.planner.params; --params for an unknown architecture).
Beside the plain figures it prints what vLLM would allocate (blocks, tokens, concurrency) with
the same memory budget (--overhead = 1 − gpu_memory_utilization). Arithmetic: kvviz.planner.capacity,
kvviz.planner.parallel, kvviz.planner.serving_plan, gathered by kvviz.planner.deployment into typed results
(kvviz.planner.results; --json is their dataclasses.asdict); the sentences shared with the Capacity
planner page are kvviz.planner.words'. The settings are checked once, by deployment.validated_setup,
in this command's flags. Bad input: one line on stderr, exit code 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from kvviz.planner import (capacity, deployment, log_compare, parallel, results, serving_plan, vllm_log,
                           vllm_versions, will_start, words)
from kvviz.planner import configs
from kvviz.core.errors import UserError
from kvviz.core import catalog, units

DEFAULT_CONTEXTS = (500, 2000, 8000)
DEFAULT_GPU = "H100 SXM"
# deployment.validated_setup's messages name each setting by its flag here
FLAGS = {"context_tokens": "--context", "batch": "--batch", "block_size": "--block-size",
         "max_num_batched_tokens": "--max-num-batched-tokens", "max_model_len": "--max-model-len",
         "overhead_fraction": "--overhead", "prefix_tokens": "--prefix-tokens (the shared prefix)",
         "offload_bytes": "--offload-gb", "tp": "--tp", "pp": "--pp", "dp": "--dp",
         "gpu_memory_utilization": "--gpu-memory-utilization",
         "kv_cache_memory_bytes": "--kv-cache-memory-bytes", "max_num_seqs": "--max-num-seqs",
         "vllm_version": "--vllm-version"}
PARAMS_REMEDY = "Give it with --params."


class PlanError(UserError):
    """Bad input to `kvviz plan`; its message is the one line the user sees."""


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register `plan` on an argparse subparsers object; dispatch with `args.func(args)`."""
    p = subparsers.add_parser("plan", help="KV-cache capacity plan for a model on GPUs",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", help="catalog name, config.json, model folder, or cached Hub id")
    _add_shape_options(p)
    _add_plan_options(p)
    _add_serving_options(p)
    p.set_defaults(func=run)
    return p


def _add_shape_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("explicit model numbers (instead of MODEL)")
    g.add_argument("--layers", type=int, help="decoder layers")
    g.add_argument("--kv-heads", type=int, help="K/V heads per layer")
    g.add_argument("--head-dim", type=int, help="values per head")
    g.add_argument("--heads", type=int, help="attention (query) heads; default: --kv-heads")
    g.add_argument("--params", type=int,
                   help="parameter count (replaces the meta-device count; needed for an "
                        "architecture transformers does not know)")


def _add_plan_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--context", action="append", metavar="T",
                   help="context tokens per request; repeatable or comma-separated "
                        f"(default {','.join(map(str, DEFAULT_CONTEXTS))})")
    p.add_argument("--batch", type=int, default=1, help="requests decoded together (default 1)")
    p.add_argument("--kv-dtype", default="bf16",
                   help=f"one of {', '.join(capacity.KV_DTYPES)} (default bf16)")
    p.add_argument("--weight-dtype", default=None,
                   help="dtype of every weight, overriding the checkpoint's own format (default: "
                        "as the checkpoint stores them, from its quantization_config; bf16 without one)")
    gpu = p.add_mutually_exclusive_group()
    gpu.add_argument("--gpu", help=f"GPU preset (default {DEFAULT_GPU}; see --list)")
    gpu.add_argument("--gpu-gb", type=float, metavar="M", help="custom GPU memory in GB (1e9 bytes)")
    p.add_argument("--bandwidth-gbs", type=float, metavar="B",
                   help="memory bandwidth in GB/s (overrides the preset's)")
    p.add_argument("--overhead", type=float, default=None,
                   help="fraction of GPU memory kept for activations, CUDA context and "
                        "fragmentation (default 0.1, like vLLM's gpu_memory_utilization=0.9)")
    p.add_argument("--window", type=int, help="what-if: a sliding window of W tokens on every layer")
    p.add_argument("--attention", choices=capacity.ATTENTION_VARIANTS,
                   help="what-if: the same model as MHA, GQA (as configured) or MQA")
    p.add_argument("--vllm-log", metavar="FILE",
                   help=f"a vLLM start-up log (up to {vllm_log.MAX_LOG_CHARS:,} characters): its KV "
                        "figures beside kvviz's for the same model and flags")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--list", action="store_true", help="list catalog models and GPU presets, then exit")


def _add_serving_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("serving setup (vLLM's arithmetic)")
    g.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs per stage (default 1)")
    g.add_argument("--pp", type=int, default=1, help="pipeline-parallel stages (default 1)")
    g.add_argument("--dp", type=int, default=1, help="data-parallel replicas (default 1)")
    g.add_argument("--block-size", type=int, default=serving_plan.DEFAULT_BLOCK_SIZE,
                   help=f"tokens per KV block (default {serving_plan.DEFAULT_BLOCK_SIZE}, vLLM's on CUDA)")
    g.add_argument("--max-model-len", type=int,
                   help="longest request vLLM admits (default: the model's max position)")
    g.add_argument("--max-num-batched-tokens", type=int,
                   help="tokens per scheduled batch (default: vLLM's for the GPU and release: 8,192 "
                        "at ≥ 70 GiB except A100, 2,048 below); it sizes the profile run, and sliding / "
                        "chunked layers reserve for every batch in flight: two with CUDA's asynchronous "
                        "scheduling, one per stage with PP or on CPU")
    g.add_argument("--vllm-version", metavar="V",
                   help=f"the vLLM release planned for, 0.6 or later (default {vllm_versions.LATEST}): its "
                        "budget rules and defaults; with --vllm-log, the version the log prints")
    g.add_argument("--gpu-memory-utilization", type=float, metavar="U",
                   help="as vLLM's flag (default 0.92 from 0.21, 0.9 before): the budget becomes "
                        "vLLM's, ceil(GPU memory × U) − weights − the profile run's activation peak − "
                        "non-torch memory (− CUDA graphs from 0.21), each modelled; replaces --overhead")
    g.add_argument("--enforce-eager", action="store_true",
                   help="as vLLM's flag: no CUDA graphs (none to capture or budget for)")
    g.add_argument("--kv-cache-memory-bytes", type=int, metavar="N",
                   help="as vLLM's flag: N bytes of KV cache per GPU, ignoring "
                        "--gpu-memory-utilization (as in vLLM)")
    g.add_argument("--max-num-seqs", type=int, metavar="N",
                   help="as vLLM's flag: requests scheduled at once; sizes the sampler's share of "
                        "the profile run and its warm-up (default: vLLM's for the GPU and release: "
                        "1,024 at ≥ 70 GiB except A100 from 0.8.5, 256 below, 128 on CPU)")
    g.add_argument("--platform", choices=sorted(serving_plan.PLATFORMS), default="cuda",
                   help="vLLM's platform (default cuda): hybrids' block alignment and state dtype")
    g.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false",
                   help="as `vllm serve --no-enable-prefix-caching` (a Mamba hybrid then holds one "
                        "state page per request, not its 'align' mode's two or three)")
    g.add_argument("--prefix-tokens", type=int, default=0,
                   help="what-if: every request starts with the same S-token system prompt")
    g.add_argument("--offload-gb", type=float, default=0.0,
                   help="what-if: a CPU tier of M GB per replica holding evicted KV blocks")


def run(args: argparse.Namespace) -> int:
    """Print the plan; 0 on success, 2 (with one line on stderr) on bad input."""
    try:
        if args.list:
            print(_listing())
            return 0
        plan = build_plan(args)
    except (UserError, ValueError, OSError) as err:  # ValueError: int() of a NaN flag, a library's refusal
        print(f"kvviz plan: error: {_one_line(err)}", file=sys.stderr)
        return 2
    print(json.dumps(plan.to_json(), indent=2) if args.json else format_plan(plan))
    return 0


def _one_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


# ---------------------------------------------------------------- resolving the model


def resolve_model(args: argparse.Namespace) -> capacity.ModelKV:
    """The model from explicit numbers, a path, the catalog, or the local HF cache."""
    explicit = [args.layers, args.kv_heads, args.head_dim]
    if any(v is not None for v in explicit):
        return _explicit_model(args)
    if not args.model:
        raise PlanError("give a model (catalog name, config.json, folder or Hub id) "
                        "or --layers, --kv-heads and --head-dim")
    path = Path(args.model).expanduser()
    if path.exists():
        return _model_from_path(path, args.params)
    entry = capacity.find_catalog_entry(args.model)
    if entry:
        return _parse(capacity.catalog_config(entry), entry["name"], entry["name"], args.params, measured=False)
    return _model_from_hub_cache(args.model, args.params)


def _explicit_model(args: argparse.Namespace) -> capacity.ModelKV:
    if args.model:
        raise PlanError("give either a model or explicit numbers, not both")
    missing = [f"--{n}" for n, v in (("layers", args.layers), ("kv-heads", args.kv_heads),
                                     ("head-dim", args.head_dim)) if v is None]
    if missing:
        raise PlanError(f"explicit numbers need {', '.join(missing)} too")
    return capacity.uniform_model(args.layers, args.kv_heads, args.head_dim,
                                  args.heads or args.kv_heads, "custom", args.params)


def _model_from_path(path: Path, params: int | None) -> capacity.ModelKV:
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise PlanError(f"{path} has no config.json")
    try:
        cfg = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PlanError(f"{file} is not valid JSON ({err})") from None
    if not isinstance(cfg, dict):
        raise PlanError(f"{file} is not a JSON object")
    name = path.name if path.is_dir() else path.parent.name or file.name
    return _parse(cfg, name, str(file), params)


def _model_from_hub_cache(model_id: str, params: int | None) -> capacity.ModelKV:
    """Read a Hub model's config from the local cache only: this machine may have no Hub access."""
    try:
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(model_id, local_files_only=True, trust_remote_code=False)
    except Exception as err:  # noqa: BLE001 - any failure becomes one readable line
        reason = _one_line(err)
        raise PlanError(f"{model_id!r} is not a catalog name (see --list), a path, or a model in the "
                        f"local Hugging Face cache (no download is attempted): {reason}") from None
    return _parse(cfg.to_dict(), model_id, model_id, params)


def _parse(cfg: dict, name: str, where: str, params: int | None, measured: bool = True) -> capacity.ModelKV:
    """A config's ModelKV; a local or cached config's layers measured by its own code (the catalog's
    are checked against hand counts, and the page plans them the same way)."""
    try:
        return configs.model_from_config(cfg, name=name, given_params=params, measured=measured)
    except (UserError, ValueError, TypeError, KeyError, AttributeError) as err:  # a config transformers refuses
        raise PlanError(f"{where}: {_one_line(err)}") from None


# ---------------------------------------------------------------- the plan


def parse_contexts(values: list[str] | None) -> list[int]:
    """['500,2000', '8000'] → [500, 2000, 8000]; PlanError on anything but positive integers."""
    if not values:
        return list(DEFAULT_CONTEXTS)
    contexts = []
    for item in ",".join(values).split(","):
        text = item.strip().replace("_", "")
        if not text.isdigit() or int(text) < 1:
            raise PlanError(f"--context wants positive integers, got {item.strip()!r}")
        contexts.append(int(text))
    return contexts


def resolve_gpu(args: argparse.Namespace) -> dict:
    """{name, memory_bytes, bandwidth_bytes_per_s (or None)} from --gpu / --gpu-gb; a preset's
    memory_bytes are the bytes its device reports (catalog.device_bytes), not the marketed GB."""
    if args.gpu_gb is not None:
        if args.gpu_gb <= 0:
            raise PlanError("--gpu-gb must be > 0")
        gpu = {"name": f"custom {args.gpu_gb:g} GB", "memory_bytes": int(args.gpu_gb * 1e9),
               "bandwidth_bytes_per_s": None, "arch": None, "p2p": False}
    else:
        gpu = capacity.find_gpu(args.gpu or DEFAULT_GPU)
        if gpu is None:
            names = ", ".join(g["name"] for g in capacity.load_gpus())
            raise PlanError(f"unknown GPU {args.gpu!r}; known: {names} (or use --gpu-gb)")
        gpu = {"name": gpu["name"], "memory_bytes": catalog.device_bytes(gpu),
               "bandwidth_bytes_per_s": gpu["bandwidth_bytes_per_s"], "memory_source": catalog.device_note(gpu),
               "arch": gpu.get("arch"), "p2p": bool(gpu.get("p2p"))}
    if args.bandwidth_gbs is not None:
        if args.bandwidth_gbs <= 0:
            raise PlanError("--bandwidth-gbs must be > 0")
        gpu = {**gpu, "bandwidth_bytes_per_s": args.bandwidth_gbs * 1e9}
    return gpu


def _apply_what_ifs(model: capacity.ModelKV, args: argparse.Namespace) -> capacity.ModelKV:
    if args.window is not None:
        model = capacity.what_if_window(model, args.window, name="--window")
    if args.attention:
        model = capacity.what_if_attention(model, args.attention)
    return model


def _check_params(args: argparse.Namespace) -> None:
    if args.params is not None and args.params < 1:
        raise PlanError(f"--params must be a positive parameter count (got {args.params}); leave "
                        "it out to count the architecture's parameters on the meta device")


def _setup(args: argparse.Namespace, gpu: dict, context: int) -> deployment.Setup:
    """The settings as given (deployment.validated_setup checks and normalizes them)."""
    return deployment.Setup(gpu_name=gpu["name"],
                            gpu_bytes=gpu["memory_bytes"],
                            bandwidth_bytes_per_s=gpu.get("bandwidth_bytes_per_s"),
                            par=parallel.Parallel(args.tp, args.pp, args.dp),
                            kv_dtype=args.kv_dtype,
                            weight_dtype=deployment.CHECKPOINT if args.weight_dtype is None else args.weight_dtype,
                            overhead_fraction=_overhead(args),
                            context_tokens=context,
                            batch=args.batch,
                            block_size=args.block_size,
                            max_model_len=args.max_model_len,
                            max_num_batched_tokens=args.max_num_batched_tokens,
                            prefix_tokens=args.prefix_tokens,
                            offload_bytes=int(args.offload_gb * 1e9),
                            platform=args.platform,
                            prefix_caching=args.prefix_caching,
                            gpu_memory_utilization=args.gpu_memory_utilization,
                            kv_cache_memory_bytes=args.kv_cache_memory_bytes,
                            max_num_seqs=args.max_num_seqs,
                            vllm_version=args.vllm_version,
                            gpu_arch=gpu.get("arch"), gpu_p2p=bool(gpu.get("p2p")),
                            enforce_eager=args.enforce_eager)


def _overhead(args: argparse.Namespace) -> float:
    if args.overhead is not None and (args.gpu_memory_utilization is not None or args.kv_cache_memory_bytes):
        raise PlanError("--overhead is kvviz's simple budget; --gpu-memory-utilization and "
                        "--kv-cache-memory-bytes are vLLM's: give one or the other")
    return capacity.DEFAULT_OVERHEAD_FRACTION if args.overhead is None else args.overhead


@dataclass(frozen=True, kw_only=True)
class ModelSummary:
    """The model as `kvviz plan` describes it (its layers at the chosen KV dtype)."""

    name: str
    num_layers: int
    layer_kinds: str
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    max_position: int | None
    bytes_per_token_by_kind: dict[str, int]
    state_bytes_per_request: int
    notes: list[str]

    @classmethod
    def of(cls, model: capacity.ModelKV, kv_dtype: str) -> "ModelSummary":
        return cls(name=model.name, num_layers=model.num_layers, layer_kinds=model.kinds,
                   num_attention_heads=model.num_attention_heads, num_kv_heads=model.kv_heads,
                   head_dim=model.head_dim, max_position=model.max_position,
                   bytes_per_token_by_kind=capacity.layer_kind_bytes_per_token(model, kv_dtype),
                   state_bytes_per_request=capacity.state_bytes_per_request(model, kv_dtype), notes=list(model.notes))


@dataclass(frozen=True)
class GpuSummary:
    name: str
    memory_bytes: int  # what the device reports (a preset's device_bytes), or --gpu-gb
    bandwidth_bytes_per_s: float | None
    memory_source: str = "given with --gpu-gb"


@dataclass(frozen=True, kw_only=True)
class CliPlan:
    """Everything `kvviz plan` prints: the model, the GPU, a row per context and the deployment
    planned at the longest context (with its what-ifs)."""

    model: ModelSummary
    attention: str
    kv_dtype: str
    kv_bytes_per_element: float
    kv_bytes_per_token: int
    gpu: GpuSummary
    overhead_fraction: float
    rows: list[results.ContextRow]
    deployment: results.SetupPlan
    fit_advice: str  # words.fit_advice_sentence when vLLM would refuse to start, else ""
    setup: deployment.Setup  # as asked, at the longest context (not in the JSON: its figures are)
    log_rows: tuple[log_compare.Row, ...] = ()  # --vllm-log: vLLM's figures beside kvviz's
    refusals: tuple[will_start.Refusal, ...] = ()  # start-up failures vLLM would hit
    serve_command: str = ""  # the `vllm serve` line of the plan
    risks: tuple[will_start.Risk, ...] = ()  # thin margins (the verdict "at risk")

    def to_json(self) -> dict:
        """JSON-ready data, keys as `kvviz plan --json` has always given them."""
        w = self.deployment.weights
        return {"model": asdict(self.model), "attention": self.attention, "kv_dtype": self.kv_dtype,
                "kv_bytes_per_element": self.kv_bytes_per_element,
                "kv_bytes_per_token": self.kv_bytes_per_token, "weight_dtype": w.weight_dtype,
                "weight_params_known": w.params_known, "weight_params": w.params_total,
                "active_params": w.params_active, "params_source": w.params_source,
                "weight_bytes": w.bytes_total, "active_weight_bytes": w.bytes_active,
                "gpu": asdict(self.gpu), "overhead_fraction": self.overhead_fraction,
                "kv_budget_bytes": self.deployment.per_gpu.kv_budget_bytes,
                "rows": [results.row_json(r) for r in self.rows],
                "deployment": results.plan_json(self.deployment), "fit_advice": self.fit_advice,
                "refusals": [asdict(r) for r in self.refusals], "risks": [asdict(r) for r in self.risks],
                "start": self.deployment.start.word, "vllm_version": self.setup.vllm_version or vllm_versions.LATEST,
                "vllm_release": deployment.release(self.setup).name, "serve_command": self.serve_command,
                **({"vllm_log": [asdict(r) for r in self.log_rows]} if self.log_rows else {})}


def build_plan(args: argparse.Namespace) -> CliPlan:
    """Everything `kvviz plan` prints, typed."""
    _check_params(args)
    contexts = parse_contexts(args.context)
    model = _apply_what_ifs(resolve_model(args), args)
    gpu = resolve_gpu(args)
    setup = _setup(args, gpu, max(contexts))  # the what-ifs are planned at the longest context
    facts = _read_log(args.vllm_log) if args.vllm_log else None
    if facts is not None and not args.vllm_version:  # plan for the release the log prints
        setup = log_compare.with_log_release(facts, setup)
    try:
        deployed = deployment.plan_setup(model, setup, FLAGS)
        rows = deployment.context_rows(model, setup, contexts, FLAGS)
    except UserError as err:
        raise PlanError(_one_line(err)) from None
    kv_dtype = capacity.normalize_dtype(args.kv_dtype)  # checked by plan_setup above
    log_rows = tuple(_log_rows(facts, model, setup)) if facts is not None else ()
    advice = deployment.fit_advice(model, setup) if deployment.refused(deployed) else ""
    return CliPlan(model=ModelSummary.of(model, kv_dtype), attention=model.attention_kind, kv_dtype=kv_dtype,
                   kv_bytes_per_element=capacity.kv_bytes_per_element(kv_dtype),
                   kv_bytes_per_token=capacity.kv_bytes_per_token(model, kv_dtype),
                   gpu=GpuSummary(gpu["name"], gpu["memory_bytes"], gpu.get("bandwidth_bytes_per_s"),
                              gpu.get("memory_source", "given with --gpu-gb")),
                   overhead_fraction=setup.overhead_fraction, rows=rows, deployment=deployed,
                   fit_advice=advice, setup=setup, log_rows=log_rows,
                   refusals=tuple(will_start.refusals(deployed, setup, advice, model=model)),
                   serve_command=will_start.serve_command(model_id(args, model), setup, deployed),
                   risks=tuple(will_start.risks(deployed)))


def model_id(args: argparse.Namespace, model: capacity.ModelKV) -> str:
    """What `vllm serve` would be given: the catalog's Hub id, the path or id typed, else a placeholder."""
    if args.model:
        entry = capacity.find_catalog_entry(args.model)
        return entry.get("hf_id") or args.model if entry else args.model
    return "<your model>"


def _read_log(path: str) -> vllm_log.LogFacts:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(vllm_log.MAX_LOG_CHARS + 1)
        return vllm_log.parse_log(text)
    except OSError as err:
        raise PlanError(f"--vllm-log: cannot read {path} ({err.strerror or type(err).__name__})") from None
    except UserError as err:
        raise PlanError(f"--vllm-log: {_one_line(err)}") from None


def _log_rows(facts: vllm_log.LogFacts, model: capacity.ModelKV, setup: deployment.Setup) -> list[log_compare.Row]:
    try:
        return log_compare.compare(facts, model, setup, FLAGS)
    except UserError as err:
        raise PlanError(f"--vllm-log: {_one_line(err)}") from None


# ---------------------------------------------------------------- text output


def _weights_line(plan: CliPlan) -> str:
    w = plan.deployment.weights
    if not w.params_known:
        return "weights " + words.params_unknown_sentence(PARAMS_REMEDY)
    return "weights " + words.weights_sentence(w)


def _header_lines(plan: CliPlan) -> list[str]:
    m, d = plan.model, plan.deployment
    kinds = ", ".join(f"{kind} {units.fmt_bytes(b)}" for kind, b in m.bytes_per_token_by_kind.items())
    return [
        f"model   {m.name or 'custom'}: {m.num_layers} layers ({m.layer_kinds}), "
        f"{m.num_attention_heads} heads, {m.num_kv_heads} KV heads ({plan.attention}), "
        f"head_dim {m.head_dim}",
        f"KV      {plan.kv_dtype} ({plan.kv_bytes_per_element:g} B/value): "
        f"{plan.kv_bytes_per_token:,} B per token ({kinds})"
        + (f" + {m.state_bytes_per_request:,} B of state per request" if m.state_bytes_per_request else ""),
        _weights_line(plan),
        f"setup   {d.label}, planned for vLLM {plan.setup.vllm_version or vllm_versions.LATEST} "
        f"({deployment.release(plan.setup).name} rules){_overhead_words(plan)}. {words.budget_sentence(d)} "
        f"(GPU memory {plan.gpu.memory_bytes:,} B: {plan.gpu.memory_source})",
    ]


def _overhead_words(plan: CliPlan) -> str:
    return "" if plan.deployment.vllm_budget else f", overhead {plan.overhead_fraction:.0%}"


def _table_lines(plan: CliPlan) -> list[str]:
    rows = plan.rows
    timed = rows[0].bandwidth is not None and plan.deployment.start.starts  # no speed for what cannot start
    head = (f"{'context':>9} {'KV/request/GPU':>15} {'requests that fit':>18} "
            f"{'as vLLM (blocks)':>17} {'in all':>8}")
    head += f" {'step ≥ ms':>9} {'tok/s/req ≤':>11} {'tok/s all ≤':>11}" if timed else ""
    lines = [head]
    known = plan.deployment.weights.params_known  # without the weights no count is a fit
    for r in rows:
        vllm = r.vllm_requests_per_replica if known else None
        fit, total = (f"{r.max_concurrent_requests:,}", f"{r.requests_total:,}") if known else ("–", "–")
        line = (f"{r.context_tokens:>9,} {units.fmt_bytes(r.kv_bytes_per_request):>15} "
                f"{fit:>18} {'–' if vllm is None else f'{vllm:,}':>17} "
                f"{total:>8}")
        if timed and known:
            line += (f" {r.bandwidth.decode_step_floor_s * 1e3:>9.2f}"
                     f" {r.bandwidth.tokens_per_s_per_request_ceiling:>11,.0f}"
                     f" {r.bandwidth.tokens_per_s_aggregate_ceiling_at_max:>11,.0f}")
        elif timed:
            line += f" {'–':>9} {'–':>11} {'–':>11}"
        lines.append(line)
    lines.append("requests that fit: per replica, floor(KV budget / KV per request); as vLLM: "
                 "whole blocks; in all: × DP replicas")
    if timed:
        lines.append("step ≥: (active weights + batch's cache) / bandwidth; "
                     "tok/s all ≤: with every request that fits")
    elif rows[0].bandwidth is not None:
        lines.append("no decode-speed bounds: vLLM would not start this deployment (see 'will it start')")
    return lines


def _vllm_lines(plan: CliPlan) -> list[str]:
    v = plan.deployment.vllm
    if not plan.deployment.weights.params_known:
        return [f"as vLLM would allocate it: – ({words.params_unknown_sentence(PARAMS_REMEDY)})",
                *_start_lines(plan)]
    if v.error:
        return [f"as vLLM would allocate it: {words.vllm_unavailable_sentence(v.error)}"]
    return [
        f"as vLLM would allocate it on {v.platform} (gpu_memory_utilization "
        f"{v.gpu_memory_utilization:g}, block size {v.block_size}, max_model_len "
        f"{v.max_model_len:,}, prefix caching {'on' if v.prefix_caching else 'off'}):",
        f"  {v.num_blocks:,} blocks per GPU ({v.layout}, {v.num_groups} KV cache "
        f"group(s) of {v.group_size} layers) → KV cache size {v.num_tokens:,} tokens; "
        f"maximum concurrency for {v.max_model_len:,} tokens per request: "
        f"{v.max_concurrency:.3f}×",
    ] + (["  " + words.refusal_sentence(v,
                                        plan.fit_advice)] if _blocks_refused(plan) else []) + _in_flight_lines(plan) \
        + _start_lines(plan)


def _blocks_refused(plan: CliPlan) -> bool:
    """vLLM's first failure is too few blocks for one request (not, say, weights that do not load)."""
    failures = plan.deployment.start.failures
    return bool(failures) and failures[0].kind == "kv_too_small"


def _in_flight_lines(plan: CliPlan) -> list[str]:
    windowed = any(k.startswith(("sliding", "chunked")) for k in plan.model.bytes_per_token_by_kind)
    note = words.in_flight_sentence(plan.deployment.vllm, plan.deployment.plain.requests_per_replica, windowed)
    return [f"  {note}"] if note else []


def _start_lines(plan: CliPlan) -> list[str]:
    if not plan.deployment.weights.params_known:
        return ["will it start: – (the weights are unknown; give --params)"]
    release = deployment.release(plan.setup).name
    if plan.refusals:
        lines = [f"will it start ({release} rules): no, vLLM would fail:"]
        for r in plan.refusals:
            lines += [f"  vLLM: {r.message}", f"  smallest change: {r.fix}"]
    elif plan.risks:
        lines = [f"will it start ({release} rules): at risk:"] + [f"  {r.sentence}" for r in plan.risks]
    else:
        lines = [f"will it start ({release} rules): no failure kvviz foresees (not foreseen: {will_start.NOT_FORESEEN})"]
    return lines + [f"command: {plan.serve_command}"]


def _note_lines(plan: CliPlan) -> list[str]:
    notes = [f"note: {n}" for n in plan.model.notes]
    if plan.deployment.per_gpu.kv_budget_bytes == 0:
        notes.append(f"note: {words.nothing_fits_sentence()}")
    max_position = plan.model.max_position
    longer = [r.context_tokens for r in plan.rows if max_position and r.context_tokens > max_position]
    if longer:
        notes.append(f"note: {words.longer_than_trained_sentence(longer, max_position)}")
    return notes


def format_plan(plan: CliPlan) -> str:
    """The plan as a readable header, table, vLLM's figures, what-ifs and notes."""
    what_ifs = words.what_if_sentences(plan.deployment)
    hits = [words.prefix_hit_sentence(plan.deployment.vllm)] if isinstance(plan.deployment.vllm, results.VllmPlan) else []
    return "\n".join(_header_lines(plan) + [""] + _table_lines(plan) + [""] + _vllm_lines(plan)
                     + hits + what_ifs + _note_lines(plan) + _log_lines(plan.log_rows))


def _log_lines(rows) -> list[str]:
    if not rows:
        return []
    head = f"{'figure':<40} {'vLLM log':>20} {'kvviz':>34}  difference"
    return ["", "vLLM's start-up log beside kvviz (kvviz's allocation planned with the log's KV memory):",
            head] + [f"{r.figure:<40} {r.vllm:>20} {r.kvviz:>34}  {r.verdict}" for r in rows]


def _listing() -> str:
    models = [f"  {e['name']:<24} {e.get('hf_id', '')}" for e in capacity.load_catalog()]
    gpus = [f"  {g['name']:<16} {g['memory_gb']:>5,} GB marketed  {catalog.device_bytes(g) / 1e9:>8.2f} GB "
            f"as the device reports ({catalog.device_note(g)})  {g['bandwidth_gb_per_s']:>6,} GB/s"
            for g in capacity.load_gpus()]
    return "\n".join(["catalog models:", *models, "GPU presets (GB = 1e9 bytes; plans use the device's "
                       "figure, torch's total_memory, as vLLM does):", *gpus])
