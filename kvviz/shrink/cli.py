"""`kvviz shrink`: the Shrink page headless — the same prompt with the full cache and a shrunk one,
written as a kvviz-shrink file (Replay plays it) and, optionally, as an HTML report.

    kvviz shrink --press SnapKV --ratio 0.5 --out snapkv.json     (the Shrink page's default prompt)
    kvviz shrink --quant quanto --nbits 4 --residual 16 --prompt "..." --out q4.json --report q4.html

Bad input: one line on stderr, exit code 2.
"""
from __future__ import annotations

import sys

from kvviz.shrink import presses, quant_cache
from kvviz.core.errors import UserError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("shrink", help="run a prompt with the full and a shrunk cache; save both",
                              description=__doc__)
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--press", choices=list(presses.PRESSES), help="a kvpress press that evicts prompt positions")
    how.add_argument("--quant", choices=list(quant_cache.BACKENDS), help="transformers' quantized cache backend")
    p.add_argument("--ratio", type=float, default=0.5, help="share of prompt positions the press evicts")
    p.add_argument("--nbits", type=int, default=4, help="bits of the quantized cache (quanto, hqq)")
    p.add_argument("--residual", type=int, default=16, help="newest tokens a quantized cache keeps in full precision")
    p.add_argument("--prompt", default=None,
                   help="the prompt (default: the Shrink page's, a context and a question, "
                        "kvviz.shrink.compute.DEFAULT_PROMPT)")
    p.add_argument("--model", default="default", help="'default', a Hub id or a local folder")
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--no-chat-template", action="store_true")
    p.add_argument("--out", required=True, help="the kvviz-shrink file to write (JSON)")
    p.add_argument("--report", default=None, help="also write the HTML report here")
    p.set_defaults(func=run)


def run(args) -> int:
    from kvviz.core.files import write_atomic
    from kvviz.core.config import ModelSpec
    from kvviz.engine.models import ModelLoadError, load_model
    from kvviz.core.trace import TraceError
    from kvviz.shrink import record
    from kvviz.shrink import compute as shrink
    from kvviz.shrink import report as shrink_report

    prompt = shrink.DEFAULT_PROMPT if args.prompt is None else args.prompt
    mode = (shrink.ShrinkMode(press=args.press, ratio=args.ratio) if args.press else
            shrink.ShrinkMode(backend=args.quant, nbits=args.nbits, residual_length=args.residual))
    try:
        mode.check()
        if args.max_new_tokens < 1:
            raise UserError("--max-new-tokens must be at least 1")
        if not prompt.strip():
            raise UserError("the prompt is empty: type something for the model to continue")
        lm = load_model(ModelSpec(args.model), lambda msg, frac: print(f"[{frac:4.0%}] {msg}", file=sys.stderr))
        ids = shrink.prompt_ids(lm.tokenizer, prompt, chat=not args.no_chat_template)
        result = shrink.compare(lm, ids, args.max_new_tokens, mode)
        pieces = lm.tokenizer.batch_decode([[t] for t in ids[0].tolist()])
        write_atomic(args.out, record.to_json(result, pieces, lm.label))
        if args.report:
            write_atomic(args.report, shrink_report.html_report(result, pieces, lm.label))
    except (ModelLoadError, ValueError, TraceError, OSError) as exc:
        print(f"kvviz shrink: error: {exc}", file=sys.stderr)
        return 2
    print(result.caption())
    print(f"cache bytes at the end: full {result.full.steps[-1].kv_bytes:,} B, shrunk "
          f"{result.shrunk.steps[-1].kv_bytes:,} B (× {result.bytes_ratio():.2f}); "
          f"decode step time × {result.step_time_ratio():.2f}")
    print(f"written to {args.out}" + (f" and {args.report}" if args.report else ""))
    return 0
