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
    p.add_argument("--nbits", type=int, default=None, help="bits of the quantized cache (quanto, hqq; default 4)")
    p.add_argument("--residual", type=int, default=None,
                   help="newest tokens a quantized cache keeps in full precision (quanto, hqq; default 16)")
    p.add_argument("--prompt", default=None,
                   help="the prompt (default: the Shrink page's, a context and a question, "
                        "kvviz.shrink.compute.DEFAULT_PROMPT)")
    p.add_argument("--model", default="default", help="'default', a Hub id or a local folder")
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--no-chat-template", action="store_true")
    p.add_argument("--out", required=True, help="the kvviz-shrink file to write (JSON)")
    p.add_argument("--report", default=None, help="also write the HTML report here")
    p.set_defaults(func=run)


def quant_mode(args):
    """The quantized-cache mode the flags ask for; UserError for flags fp8 cannot honour."""
    from kvviz.shrink.compute import ShrinkMode
    if args.quant == "fp8":
        if args.nbits not in (None, 8):
            raise UserError(f"fp8 stores 8 bits per value; --nbits {args.nbits} does not apply to it "
                            "(quanto and hqq offer 2 or 4 bits)")
        if args.residual is not None:
            raise UserError("fp8 quantizes every token and keeps no full-precision residual; drop --residual")
        return ShrinkMode(backend="fp8", nbits=8)
    return ShrinkMode(backend=args.quant, nbits=4 if args.nbits is None else args.nbits,
                      residual_length=16 if args.residual is None else args.residual)


def check_out(path: str, flag: str = "--out") -> None:
    """UserError before any work when `path` cannot be written: a folder, or a missing or
    read-only parent folder."""
    import os
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UserError(f"{flag} {path} is a folder; name a file in it")
    if not os.path.isdir(folder):
        raise UserError(f"{flag} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UserError(f"{flag} {path}: kvviz may not write there")


def run(args) -> int:
    from kvviz.core.files import write_atomic
    from kvviz.core.config import ModelSpec
    from kvviz.engine.models import ModelLoadError, load_model
    from kvviz.core.trace import TraceError
    from kvviz.shrink import record
    from kvviz.shrink import compute as shrink
    from kvviz.shrink import report as shrink_report

    prompt = shrink.DEFAULT_PROMPT if args.prompt is None else args.prompt
    try:
        mode = shrink.ShrinkMode(press=args.press, ratio=args.ratio) if args.press else quant_mode(args)
        mode.check()
        if args.max_new_tokens < 1:
            raise UserError("--max-new-tokens must be at least 1")
        if not prompt.strip():
            raise UserError("the prompt is empty: type something for the model to continue")
        check_out(args.out)
        if args.report:
            check_out(args.report, "--report")
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
