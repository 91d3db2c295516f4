"""`kvviz shrink`: the Shrink page headless — the same prompt with the full cache and a shrunk one,
written as a kvviz-shrink file (Replay plays it) and, optionally, as an HTML report.

    kvviz shrink --press SnapKV --ratio 0.5 --out snapkv.json     (the Shrink page's default prompt)
    kvviz shrink --quant quanto --nbits 4 --residual 16 --prompt "..." --out q4.json --report q4.html
    kvviz shrink --sweep --out sweep.json      (accuracy against ratio on the built-in RULER-style task,
                                                the kvpress leaderboard's protocol, every press and
                                                quantized setting that runs here: kvviz.shrink.sweep;
                                                the ones that cannot are named, with why)

Bad input: one line on stderr, exit code 2.
"""
from __future__ import annotations

import sys

from kvviz.shrink import presses, quant_cache, support
from kvviz.core.errors import UserError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("shrink", help="run a prompt with the full and a shrunk cache; save both",
                              description=__doc__)
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--press", choices=list(presses.PRESSES), help="a kvpress press that evicts prompt positions")
    how.add_argument("--quant", choices=list(quant_cache.BACKENDS), help="transformers' quantized cache backend")
    how.add_argument("--sweep", action="store_true",
                     help="the quality sweep: every press at the kvpress leaderboard's ratios 0.25 / 0.5 / 0.75 / "
                          "0.875 (SnapKV also with the question in its window) and every quantized setting on the "
                          "built-in RULER-style task, context compressed alone, then the question; --out gets the "
                          "rows (accuracy with its 95%% interval, bytes, step-time ratio) and every item's answers")
    p.add_argument("--task", default=None, help="--sweep: a kvviz-shrink-task file (default: the built-in task)")
    p.add_argument("--items", type=int, default=None, help="--sweep: only the first N items of the task")
    p.add_argument("--presses", default=None,
                   help="--sweep: only these presses (comma-separated names; default: every one that runs here)")
    p.add_argument("--timed-items", type=int, default=None,
                   help="--sweep: time only the first N items against the full cache, step by step (default: all)")
    p.add_argument("--ratio", type=float, default=0.5, help="share of prompt positions the press evicts")
    p.add_argument("--nbits", type=int, default=None, help="bits of the quantized cache (quanto, hqq; default 4)")
    p.add_argument("--residual", type=int, default=None,
                   help="newest tokens a quantized cache keeps in full precision (quanto, hqq; default 16)")
    p.add_argument("--prompt", default=None,
                   help="the prompt (default: the Shrink page's, a context and a question, "
                        "kvviz.shrink.compute.DEFAULT_PROMPT)")
    p.add_argument("--model", default="default", help="'default', a Hub id or a local folder")
    p.add_argument("--max-new-tokens", type=int, default=None, help="default 24 (--sweep: each item's own)")
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
    if args.sweep:
        return run_sweep(args)
    return run_pair(args)


def run_sweep(args) -> int:
    """`--sweep`: every setting on every item of the task, a progress line per item on stderr, the
    dropped settings named with why, the rows written to --out and printed as a table. Exit 2
    (one sentence) when nothing but the full cache could run."""
    from kvviz.core.config import LoadConfig
    from kvviz.core.files import write_atomic
    from kvviz.engine.models import ModelLoadError, load_model
    from kvviz.shrink import sweep, task

    try:
        if args.max_new_tokens is not None:
            raise UserError("--max-new-tokens does not apply to --sweep: each item gives its own")
        if args.items is not None and args.items < 1:
            raise UserError("--items must be at least 1")
        check_out(args.out)
        items = task.load(args.task) if args.task else task.load()
        items = items[:args.items] if args.items else items
        lm = load_model(LoadConfig(args.model), lambda msg, frac: print(f"[{frac:4.0%}] {msg}", file=sys.stderr))
        wanted, dropped = sweep_settings(lm, args.presses)
        for d in dropped:
            print(f"kvviz shrink: dropped {d.setting}: {d.why}", file=sys.stderr)
        if len(wanted) <= 1:
            raise UserError("nothing to compare on this model: every press and quantized setting was dropped "
                            "(each reason above)")
        result = sweep.run(lm, items, wanted, progress=lambda p: print(p.line(), file=sys.stderr, flush=True),
                           note=f"{args.task or 'the built-in task'}: {len(items)} items", dropped=dropped,
                           timed_items=args.timed_items, made_with="kvviz shrink --sweep")
        write_atomic(args.out, sweep.to_json(result))
    except (ModelLoadError, UserError, ValueError, OSError) as exc:  # ValueError: a library's refusal
        print(f"kvviz shrink: error: {exc}", file=sys.stderr)
        return 2
    print(table(result))
    print(f"written to {args.out}")
    return 0


def sweep_settings(lm, asked: str | None) -> tuple[list, list]:
    """(the settings to run, the dropped ones): every press and quantized setting that runs on
    this model (kvviz.shrink.support), or only the presses `asked` names."""
    from kvviz.shrink import sweep
    names, dropped = support.sweep_presses(lm.model)
    quant, dropped_quant = support.sweep_quant(lm.model)
    if asked is not None:
        picked = [n.strip() for n in asked.split(",") if n.strip()]
        unknown = [n for n in picked if n not in presses.ALL_PRESSES]
        if unknown:
            raise UserError(f"unknown press {unknown[0]!r}: pick from {', '.join(presses.ALL_PRESSES)}")
        names = [n for n in names if n in picked]
    aware = [n for n in names if n in presses.QUESTION_AWARE]
    return sweep.modes(names, quant, question_aware=aware), dropped + dropped_quant


def table(result) -> str:
    """The sweep's rows as a plain-text table, then what was dropped and why; a partial sweep
    (stopped, or still being measured) says so first: "partial sweep: 5 of 52 items so far"."""
    from kvviz.core.units import fmt_bytes
    lines = [f"partial sweep: {result.so_far()}; every row counts those items"
             + (f" ({result.formats_so_far()})" if result.items else "")] if not result.complete else []
    lines += [f"{'setting':<58} {'ratio':>5} {'accuracy (95% interval)':>26} {'bytes kept':>10} {'step time ÷ full':>22}"]
    for r in result.rows:
        lo, hi = r.interval
        spread = f"{r.step_ratio:.2f} ({r.step_ratio_lo:.2f}–{r.step_ratio_hi:.2f})" if r.timed_steps else "not timed"
        lines.append(f"{r.mode:<58} {r.ratio:>5.3f} {r.right:>3}/{r.items:<3} {r.accuracy:>4.0%} ({lo:.0%}–{hi:.0%})"
                     f"{'':>3}{fmt_bytes(r.bytes):>10} {spread:>17}"
                     f"{'  within noise' if r.within_noise and r.kind != 'full' and r.timed_steps else ''}")
    lines.append(f"protocol: {result.protocol}; ratio of a quantized cache: bytes saved (measured)")
    lines += [f"dropped {d.setting}: {d.why}" for d in result.dropped]
    return "\n".join(lines)


def run_pair(args) -> int:
    from kvviz.core.files import write_atomic
    from kvviz.core.config import LoadConfig
    from kvviz.engine.models import ModelLoadError, load_model
    from kvviz.shrink import trace
    from kvviz.shrink import compute
    from kvviz.shrink import report

    prompt = compute.DEFAULT_PROMPT if args.prompt is None else args.prompt
    try:
        mode = compute.ShrinkMode(press=args.press, ratio=args.ratio) if args.press else quant_mode(args)
        mode.check()
        new_tokens = 24 if args.max_new_tokens is None else args.max_new_tokens
        if new_tokens < 1:
            raise UserError("--max-new-tokens must be at least 1")
        if not prompt.strip():
            raise UserError("the prompt is empty: type something for the model to continue")
        check_out(args.out)
        if args.report:
            check_out(args.report, "--report")
        lm = load_model(LoadConfig(args.model), lambda msg, frac: print(f"[{frac:4.0%}] {msg}", file=sys.stderr))
        ids = compute.prompt_ids(lm.tokenizer, prompt, chat=not args.no_chat_template)
        result = compute.compare(lm, ids, new_tokens, mode)
        pieces = lm.tokenizer.batch_decode([[t] for t in ids[0].tolist()])
        write_atomic(args.out, trace.to_json(result, pieces, lm.label))
        if args.report:
            write_atomic(args.report, report.html_report(result, pieces, lm.label))
    except (ModelLoadError, UserError, ValueError, OSError) as exc:  # ValueError: a library's refusal
        print(f"kvviz shrink: error: {exc}", file=sys.stderr)
        return 2
    print(result.caption())
    print(f"cache bytes at the end: full {result.full.steps[-1].kv_bytes:,} B, shrunk "
          f"{result.shrunk.steps[-1].kv_bytes:,} B (× {result.bytes_ratio():.2f}); "
          f"decode step time × {result.step_time_ratio():.2f}")
    print(f"written to {args.out}" + (f" and {args.report}" if args.report else ""))
    return 0
