"""`kvviz record`, `kvviz plan`, `kvviz shrink`, `kvviz watch`: the headless side of kvviz."""
from __future__ import annotations

import argparse
import sys

from kvviz.planner import plan_cli
from kvviz.shrink import shrink_cli
from kvviz.vllm import cli as vllm_cli


def add_record(sub) -> None:
    p = sub.add_parser("record", help="run one generation and save its trace")
    p.add_argument("--prompt", required=True, help="the prompt (one sequence; see --batch)")
    p.add_argument("--system", default="", help="an optional system prompt")
    p.add_argument("--model", default="default", help="'default', a Hub id or a local folder")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--batch", type=int, default=1, help="copies of the prompt")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--cache", default="dynamic", choices=["dynamic", "static"])
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-chat-template", action="store_true")
    p.add_argument("--recompute", action="store_true", help="also run without a cache, after")
    p.add_argument("--out", required=True, help="where to write the trace (JSON)")
    p.set_defaults(func=run_record)


def run_record(args) -> int:
    from kvviz.live.config import ModelSpec, RunConfig
    from kvviz.live.engine import generate, run_meta
    from kvviz.live.models import ModelLoadError, load_model
    from kvviz.live.trace import Trace, TraceError, format_summary, summary

    cfg = RunConfig(prompts=(args.prompt,), batch=args.batch, max_new_tokens=args.max_new_tokens,
                    chat_template=not args.no_chat_template, system=args.system,
                    temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                    seed=args.seed, block_size=args.block_size, cache_backend=args.cache)
    try:
        lm = load_model(ModelSpec(args.model, args.device, args.dtype),
                        lambda msg, frac: print(f"[{frac:4.0%}] {msg}", file=sys.stderr))
        trace = Trace(run_meta(lm, cfg), [])
        for mode in ("cached", "recompute") if args.recompute else ("cached",):
            for event in generate(lm, cfg, mode):
                trace.append(event)
        trace.save(args.out)
    except (ModelLoadError, ValueError, TraceError) as exc:
        print(f"kvviz record: error: {exc}", file=sys.stderr)
        return 2
    print(format_summary(summary(trace)))
    print(layout_lines(trace))
    print(f"trace written to {args.out}")
    return 0


def layout_lines(trace) -> str:
    """The cache layout, the attention used, and why any bytes could not be measured."""
    meta = trace.meta
    lines = [f"cache layout: {meta.get('layout', '?')}; attention: {meta.get('attn_implementation', '?')}"
             + (f" ({meta['attn_fallback']})" if meta.get("attn_fallback") else "")]
    notes = dict.fromkeys([*(e.cache_note for e in trace.events if e.cache_note),
                           *([f"this model: {meta['cache_caveat']}"] if meta.get("cache_caveat") else [])])
    return "\n".join(lines + [f"note: {n}" for n in notes])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kvviz", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_record(sub)
    plan_cli.add_parser(sub)
    shrink_cli.add_parser(sub)
    vllm_cli.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
