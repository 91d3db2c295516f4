"""`kvviz plan`: how much KV cache a model needs, and how many requests fit on a GPU.

    kvviz plan Llama-3.1-8B --gpu H100 --context 500,2000,8000
    kvviz plan path/to/config.json --kv-dtype int4 --json
    kvviz plan --layers 30 --kv-heads 3 --head-dim 64 --heads 9 --gpu-gb 24

The model is, in order: explicit numbers (--layers --kv-heads --head-dim), a path to a
config.json or to a folder holding one, a catalog name (assets/models.json; see --list), or a
Hugging Face id already in the local cache (read with AutoConfig, local_files_only=True: this
command never downloads). All arithmetic is in kvviz.capacity. Bad input: one line on stderr,
exit code 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

from kvviz import capacity

DEFAULT_CONTEXTS = (500, 2000, 8000)
DEFAULT_GPU = "H100 SXM"


class PlanError(ValueError):
    """Bad input to `kvviz plan`; its message is the one line the user sees."""


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register `plan` on an argparse subparsers object; dispatch with `args.func(args)`."""
    p = subparsers.add_parser("plan", help="KV-cache capacity plan for a model on a GPU",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", help="catalog name, config.json, model folder, or cached Hub id")
    _add_shape_options(p)
    _add_plan_options(p)
    p.set_defaults(func=run)
    return p


def _add_shape_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("explicit model numbers (instead of MODEL)")
    g.add_argument("--layers", type=int, help="decoder layers")
    g.add_argument("--kv-heads", type=int, help="K/V heads per layer")
    g.add_argument("--head-dim", type=int, help="values per head")
    g.add_argument("--heads", type=int, help="attention (query) heads; default: --kv-heads")
    g.add_argument("--params", type=int, help="parameter count, for the weights' memory")


def _add_plan_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--context", action="append", metavar="T",
                   help="context tokens per request; repeatable or comma-separated "
                        f"(default {','.join(map(str, DEFAULT_CONTEXTS))})")
    p.add_argument("--batch", type=int, default=1, help="requests decoded together (default 1)")
    p.add_argument("--kv-dtype", default="bf16",
                   help=f"one of {', '.join(capacity.KV_DTYPES)} (default bf16)")
    p.add_argument("--weight-dtype", default="bf16", help="dtype of the weights (default bf16)")
    gpu = p.add_mutually_exclusive_group()
    gpu.add_argument("--gpu", help=f"GPU preset (default {DEFAULT_GPU}; see --list)")
    gpu.add_argument("--gpu-gb", type=float, metavar="M", help="custom GPU memory in GB (1e9 bytes)")
    p.add_argument("--bandwidth-gbs", type=float, metavar="B",
                   help="memory bandwidth in GB/s (overrides the preset's)")
    p.add_argument("--overhead", type=float, default=capacity.DEFAULT_OVERHEAD_FRACTION,
                   help="fraction of GPU memory kept for activations, CUDA context and "
                        "fragmentation (default 0.1, like vLLM's gpu_memory_utilization=0.9)")
    p.add_argument("--window", type=int, help="what-if: a sliding window of W tokens on every layer")
    p.add_argument("--attention", choices=capacity.ATTENTION_VARIANTS,
                   help="what-if: the same model as MHA, GQA (as configured) or MQA")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--list", action="store_true", help="list catalog models and GPU presets, then exit")


def run(args: argparse.Namespace) -> int:
    """Print the plan; 0 on success, 2 (with one line on stderr) on bad input."""
    try:
        if args.list:
            print(_listing())
            return 0
        plan = build_plan(args)
    except (PlanError, ValueError, OSError) as err:
        print(f"kvviz plan: error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(plan, indent=2) if args.json else format_plan(plan))
    return 0


# ---------------------------------------------------------------- resolving the model


def resolve_shape(args: argparse.Namespace) -> capacity.KVShape:
    """The model's KVShape from explicit numbers, a path, the catalog, or the local HF cache."""
    explicit = [args.layers, args.kv_heads, args.head_dim]
    if any(v is not None for v in explicit):
        return _explicit_shape(args)
    if not args.model:
        raise PlanError("give a model (catalog name, config.json, folder or Hub id) "
                        "or --layers, --kv-heads and --head-dim")
    path = Path(args.model).expanduser()
    if path.exists():
        return _shape_from_path(path)
    if capacity.find_catalog_entry(args.model):
        return capacity.catalog_shape(args.model)
    return _shape_from_hub_cache(args.model)


def _explicit_shape(args: argparse.Namespace) -> capacity.KVShape:
    if args.model:
        raise PlanError("give either a model or explicit numbers, not both")
    missing = [f"--{n}" for n, v in (("layers", args.layers), ("kv-heads", args.kv_heads),
                                     ("head-dim", args.head_dim)) if v is None]
    if missing:
        raise PlanError(f"explicit numbers need {', '.join(missing)} too")
    return capacity.KVShape(num_layers=args.layers, num_kv_heads=args.kv_heads,
                            head_dim=args.head_dim, num_attention_heads=args.heads or args.kv_heads,
                            name="custom")


def _shape_from_path(path: Path) -> capacity.KVShape:
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
    return _parse(cfg, name, str(file))


def _shape_from_hub_cache(model_id: str) -> capacity.KVShape:
    """Read a Hub model's config from the local cache only: this machine may have no Hub access."""
    try:
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(model_id, local_files_only=True, trust_remote_code=False)
    except Exception as err:  # noqa: BLE001 - any failure becomes one readable line
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise PlanError(f"{model_id!r} is not a catalog name (see --list), a path, or a model in the "
                        f"local Hugging Face cache (no download is attempted): {reason}") from None
    return _parse(cfg.to_dict(), model_id, model_id)


def _parse(cfg: dict, name: str, where: str) -> capacity.KVShape:
    try:
        return capacity.kv_shape_from_config(cfg, name=name)
    except (ValueError, TypeError) as err:  # TypeError: a field of the wrong JSON type
        raise PlanError(f"{where}: {err}") from None


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
    """{name, memory_bytes, bandwidth_bytes_per_s (or None)} from --gpu / --gpu-gb."""
    if args.gpu_gb is not None:
        if args.gpu_gb <= 0:
            raise PlanError("--gpu-gb must be > 0")
        gpu = {"name": f"custom {args.gpu_gb:g} GB", "memory_bytes": int(args.gpu_gb * 1e9),
               "bandwidth_bytes_per_s": None}
    else:
        gpu = capacity.find_gpu(args.gpu or DEFAULT_GPU)
        if gpu is None:
            names = ", ".join(g["name"] for g in capacity.load_gpus())
            raise PlanError(f"unknown GPU {args.gpu!r}; known: {names} (or use --gpu-gb)")
    if args.bandwidth_gbs is not None:
        if args.bandwidth_gbs <= 0:
            raise PlanError("--bandwidth-gbs must be > 0")
        gpu = {**gpu, "bandwidth_bytes_per_s": args.bandwidth_gbs * 1e9}
    return gpu


def _apply_what_ifs(shape: capacity.KVShape, args: argparse.Namespace) -> capacity.KVShape:
    if args.window is not None:
        if args.window < 1:
            raise PlanError("--window must be a positive number of tokens")
        shape = capacity.what_if_window(shape, args.window)
    if args.attention:
        shape = capacity.what_if_attention(shape, args.attention)
    if args.params is not None:
        if args.params < 0:
            raise PlanError("--params must be >= 0")
        shape = replace(shape, weight_params=args.params)
    return shape


def _check_numbers(args: argparse.Namespace) -> None:
    if args.batch < 1:
        raise PlanError("--batch must be >= 1")
    if not 0 <= args.overhead < 1:
        raise PlanError("--overhead is a fraction of GPU memory, in [0, 1)")
    capacity.normalize_dtype(args.kv_dtype)
    capacity.normalize_dtype(args.weight_dtype)


def build_plan(args: argparse.Namespace) -> dict:
    """Everything `kvviz plan` prints, as plain JSON-ready data."""
    _check_numbers(args)
    contexts = parse_contexts(args.context)
    shape = _apply_what_ifs(resolve_shape(args), args)
    gpu = resolve_gpu(args)
    weights = capacity.weight_bytes(shape.weight_params or 0, args.weight_dtype)
    rows = capacity.capacity_table(shape, contexts, gpu["memory_bytes"], weights, args.kv_dtype,
                                   args.overhead, None, gpu.get("bandwidth_bytes_per_s"), args.batch)
    return {
        "model": asdict(shape), "attention": shape.attention_kind,
        "kv_dtype": capacity.normalize_dtype(args.kv_dtype),
        "kv_bytes_per_element": capacity.kv_bytes_per_element(args.kv_dtype),
        "kv_bytes_per_token": capacity.kv_bytes_per_token(shape, args.kv_dtype),
        "weight_dtype": capacity.normalize_dtype(args.weight_dtype),
        "weight_params_known": shape.weight_params is not None, "weight_bytes": weights,
        "gpu": {k: gpu.get(k) for k in ("name", "memory_bytes", "bandwidth_bytes_per_s")},
        "overhead_fraction": args.overhead,
        "kv_budget_bytes": capacity.kv_budget_bytes(gpu["memory_bytes"], weights, args.overhead),
        "rows": rows,
    }


# ---------------------------------------------------------------- text output


def format_bytes(num_bytes: float) -> str:
    """Decimal units, like the GPU presets: 1 GB = 1e9 bytes."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(num_bytes) >= size:
            return f"{num_bytes / size:.2f} {unit}"
    return f"{num_bytes:.0f} B"


def _header_lines(plan: dict) -> list[str]:
    m, gpu = plan["model"], plan["gpu"]
    window = (f", sliding window {m['sliding_window']:,} on {m['num_sliding_layers']} of "
              f"{m['num_layers']} layers" if m["sliding_window"] else "")
    weights = (f"{m['weight_params']:,} params × {plan['weight_dtype']} = "
               f"{format_bytes(plan['weight_bytes'])}" if plan["weight_params_known"]
               else "parameter count unknown, counted as 0 (use --params)")
    return [
        f"model   {m['name'] or 'custom'}: {m['num_layers']} layers, {m['num_attention_heads']} heads, "
        f"{m['num_kv_heads']} KV heads ({plan['attention']}), head_dim {m['head_dim']}{window}",
        f"KV      {plan['kv_dtype']} ({plan['kv_bytes_per_element']:g} B/value): "
        f"{plan['kv_bytes_per_token']:,} B per token (2 × {m['num_layers']} × {m['num_kv_heads']} × "
        f"{m['head_dim']} × {plan['kv_bytes_per_element']:g})",
        f"weights {weights}",
        f"GPU     {gpu['name']}: {format_bytes(gpu['memory_bytes'])}, overhead "
        f"{plan['overhead_fraction']:.0%} → {format_bytes(plan['kv_budget_bytes'])} left for KV caches",
    ]


def _table_lines(plan: dict) -> list[str]:
    rows = plan["rows"]
    timed = "decode_step_floor_s" in rows[0]
    batch_label = f"KV/batch(B={rows[0]['batch']})"
    head = f"{'context':>9} {'KV/request':>11} {batch_label:>14} {'requests that fit':>18}"
    head += f" {'step ≥ ms':>9} {'tok/s/req ≤':>11} {'tok/s all ≤':>11}" if timed else ""
    lines = [head]
    for r in rows:
        line = (f"{r['context_tokens']:>9,} {format_bytes(r['kv_bytes_per_request']):>11} "
                f"{format_bytes(r['kv_bytes_for_batch']):>14} {r['max_concurrent_requests']:>18,}")
        if timed:
            line += (f" {r['decode_step_floor_s'] * 1e3:>9.2f}"
                     f" {r['tokens_per_s_per_request_ceiling']:>11,.0f}"
                     f" {r['tokens_per_s_aggregate_ceiling_at_max']:>11,.0f}")
        lines.append(line)
    if timed:
        lines.append("step ≥: (weights + batch's cache) / bandwidth; "
                     "tok/s all ≤: with every request that fits")
    return lines


def _note_lines(plan: dict) -> list[str]:
    notes = []
    if plan["kv_budget_bytes"] == 0:
        notes.append("note: weights and overhead fill the GPU, so no request fits")
    max_position = plan["model"]["max_position"]
    longer = [r["context_tokens"] for r in plan["rows"]
              if max_position and r["context_tokens"] > max_position]
    if longer:
        notes.append(f"note: {', '.join(f'{t:,}' for t in longer)} tokens exceed the model's "
                     f"max_position_embeddings ({max_position:,})")
    return notes


def format_plan(plan: dict) -> str:
    """The plan as a readable header, table and notes."""
    return "\n".join(_header_lines(plan) + [""] + _table_lines(plan) + _note_lines(plan))


def _listing() -> str:
    models = [f"  {e['name']:<16} {e['hf_id']}" for e in capacity.load_catalog()]
    gpus = [f"  {g['name']:<10} {g['memory_gb']:>4} GB  {g['bandwidth_gb_per_s']:>5,} GB/s"
            for g in capacity.load_gpus()]
    return "\n".join(["catalog models:", *models, "GPU presets (GB = 1e9 bytes):", *gpus])
