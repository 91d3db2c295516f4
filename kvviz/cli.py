"""`kvviz record`, `kvviz plan`, `kvviz shrink`, `kvviz watch`: the headless side of kvviz.

`record`'s flags are derived from the run settings (kvviz.core.config's LoadConfig and RunConfig):
a field's type gives the flag's type (a Literal its choices, a bool --x/--no-x, a tuple a repeated
flag), its default the default and its comment the help, so a new field gets a flag unedited.
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
import typing

from kvviz.core.config import LoadConfig, RunConfig
from kvviz.planner import cli
import kvviz.shrink.cli
import kvviz.vllm.cli


# Fields whose flag has another name (the first is the flag; the rest are aliases kept working).
FLAG_NAMES = {"name": ("--model",), "prompts": ("--prompt",), "cache_backend": ("--cache", "--cache-backend")}
NOT_FLAGS = {"extra"}  # free-form notes, set by code, not typed on a command line


def field_comments(cls) -> dict[str, str]:
    """Each dataclass field's one-line comment, read from the class's source."""
    found = (re.match(r"\s+(\w+):.*?#\s*(.+)$", line) for line in inspect.getsource(cls).splitlines())
    return {m.group(1): m.group(2).strip() for m in found if m}


def flag_options(hint) -> dict:
    """argparse options for a field of type `hint`; TypeError for a type no flag can carry."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is typing.Literal:
        return {"choices": args, "type": type(args[0])}
    if hint is bool:
        return {"action": argparse.BooleanOptionalAction}
    if hint in (int, float, str):
        return {"type": hint}
    if args and type(None) in args and len(args) == 2:  # X | None
        return flag_options(next(a for a in args if a is not type(None)))
    if typing.get_origin(hint) is tuple and args[1:] == (Ellipsis,):  # repeat the flag
        return {"action": "append", "type": args[0], "default": None}
    raise TypeError(f"no command-line flag for a field of type {hint}")


def shown(default) -> str:
    """A default as help text shows it: strings quoted, a tuple as its items."""
    if isinstance(default, tuple):
        return ", ".join(map(shown, default))
    return repr(default) if isinstance(default, str) else str(default)


def config_flags(parser, cls) -> list[str]:
    """One flag per field of dataclass `cls` (its type, default and comment); the field names."""
    hints, comments, names = typing.get_type_hints(cls), field_comments(cls), []
    for f in dataclasses.fields(cls):
        if f.name in NOT_FLAGS:
            continue
        flags = FLAG_NAMES.get(f.name, ("--" + f.name.replace("_", "-"),))
        options = {"default": f.default, "dest": f.name, **flag_options(hints[f.name])}
        if "choices" not in options and options.get("action") is not argparse.BooleanOptionalAction:
            options["metavar"] = flags[0].removeprefix("--").replace("-", "_").upper()
        repeat = "; repeat the flag for several" if options.get("action") == "append" else ""
        help_text = f"{comments.get(f.name, '')}{repeat} (default: {shown(f.default)})"
        parser.add_argument(*flags, help=help_text.replace("%", "%%"), **options)
        names.append(f.name)
    return names


def values_of(args, cls, names: list[str]):
    """An instance of `cls` from the parsed flags `names` (a repeated flag's list as a tuple)."""
    values = {n: tuple(v) if isinstance(v, list) else v for n in names if (v := getattr(args, n)) is not None}
    return cls(**values)


def add_record(sub) -> None:
    p = sub.add_parser("record", help="run one generation and save its trace")
    model = p.add_argument_group("model (kvviz.core.config.LoadConfig)")
    run = p.add_argument_group("run (kvviz.core.config.RunConfig; the Live page's sidebar)")
    p.set_defaults(model_fields=config_flags(model, LoadConfig), run_fields=config_flags(run, RunConfig))
    p.add_argument("--recompute", action="store_true", help="also run without a cache, after")
    p.add_argument("--out", required=True, help="where to write the trace (JSON)")
    p.set_defaults(func=run_record)


def run_record(args) -> int:
    from kvviz.engine.loop import generate, run_meta
    from kvviz.engine.models import ModelLoadError, load_model
    from kvviz.core.errors import UserError
    from kvviz.core.trace import Trace, format_summary, summary

    try:
        cfg = values_of(args, RunConfig, args.run_fields)
        lm = load_model(values_of(args, LoadConfig, args.model_fields),
                        lambda msg, frac: print(f"[{frac:4.0%}] {msg}", file=sys.stderr))
        trace = Trace(run_meta(lm, cfg), [])
        for mode in ("cached", "recompute") if args.recompute else ("cached",):
            for event in generate(lm, cfg, mode):
                trace.append(event)
        trace.save(args.out)
    except (ModelLoadError, UserError, ValueError) as exc:  # ValueError: transformers' or torch's refusal
        print(f"kvviz record: error: {exc}", file=sys.stderr)
        return 2
    print(format_summary(summary(trace)))
    print(layout_lines(trace))
    print(f"trace written to {args.out}")
    return 0


def layout_lines(trace) -> str:
    """The cache layout, the attention used, and why any bytes could not be measured."""
    meta = trace.meta
    lines = [f"cache layout: {meta.layout or '?'}; attention: {meta.attn_implementation or '?'}"
             + (f" ({meta.attn_fallback})" if meta.attn_fallback else "")]
    notes = dict.fromkeys([*(e.cache_note for e in trace.events if e.cache_note),
                           *([f"this model: {meta.cache_caveat}"] if meta.cache_caveat else [])])
    return "\n".join(lines + [f"note: {n}" for n in notes])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kvviz", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_record(sub)
    cli.add_parser(sub)
    kvviz.shrink.cli.add_parser(sub)
    kvviz.vllm.cli.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
