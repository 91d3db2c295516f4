"""Compute the shipped quality sweep (assets/shrink_sweep_smollm2.json), resumably.

Every press kvpress 0.5.5 offers here at the leaderboard's ratios, SnapKV with the question in its
window (its own entry), and every quantized cache, on every item of the task, by the leaderboard's
protocol (kvviz.shrink.sweep). After each item its record is appended to the log (one JSON line,
flushed) and the sweep file is rewritten from the whole log (`"complete": false` until the last
item). Stopped (Ctrl-C, a kill, a reboot), the same command resumes after the last item logged.

    nice -n 15 .venv/bin/python scripts/shrink_sweep.py                 # the shipped sweep
    .venv/bin/python scripts/shrink_sweep.py --estimate 1               # time one item, print the total
    .venv/bin/python scripts/shrink_sweep.py --show                     # the sweep file's table, as it stands
    .venv/bin/python scripts/shrink_sweep.py --model DIR --task T --out O --log L   # another

A log written with other settings or another task is refused (start it again with a new --log).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvviz.core import assets  # noqa: E402
from kvviz.core.config import LoadConfig  # noqa: E402
from kvviz.core.errors import UserError  # noqa: E402
from kvviz.core.files import write_atomic  # noqa: E402
from kvviz.engine.models import load_model  # noqa: E402
from kvviz.shrink import presses, support, sweep, task  # noqa: E402

OUT = assets.FOLDER / "shrink_sweep_smollm2.json"
LOG = assets.FOLDER / "shrink_sweep_smollm2.items.jsonl"
TIMED_ITEMS = 4  # items (spread evenly: one per task format) whose decode steps take turns with the full cache's


def settings(lm) -> tuple[list, list]:
    """(the settings this model runs, the dropped ones with why): kvviz.shrink.support decides."""
    names, dropped = support.sweep_presses(lm.model)
    quant, dropped_quant = support.sweep_quant(lm.model)
    aware = [n for n in names if n in presses.QUESTION_AWARE]
    return sweep.modes(names, quant, question_aware=aware), dropped + dropped_quant


def read_log(path: Path, labels: list[str]) -> list[sweep.ItemRecord]:
    if not path.exists():
        return []
    records = [sweep.record_from_json(line) for line in path.read_bytes().splitlines() if line.strip()]
    for r in records:
        if sorted(r.answers) != sorted(labels):
            raise SystemExit(f"{path} was written with other settings; give another --log to start again")
    return records


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="default")
    p.add_argument("--task", default=str(task.ASSET))
    p.add_argument("--items", type=int, default=None, help="only the first N items")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--log", default=str(LOG))
    p.add_argument("--timed-items", type=int, default=TIMED_ITEMS)
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1: one core)")
    p.add_argument("--estimate", type=int, default=0, help="run N items, print the time per item and the total; write nothing")
    p.add_argument("--show", action="store_true", help="print the --out file's table (partial or not) and exit; runs nothing")
    args = p.parse_args(argv)
    if args.show:
        return show(Path(args.out))
    logging.getLogger("kvpress").setLevel(logging.ERROR)
    import torch
    torch.set_num_threads(args.threads)
    lm = load_model(LoadConfig(args.model))
    items = task.load(args.task)[: args.items]
    wanted, dropped = settings(lm)
    labels = [m.label() for m in sweep.with_full_first(wanted)]
    made_with = (f"scripts/shrink_sweep.py --model {args.model} --task {os.path.relpath(args.task, ROOT)} "
                 f"--items {len(items)} --timed-items {args.timed_items} --threads {args.threads}; "
                 f"task: {task.made_with(args.task)}")
    note = f"{os.path.basename(args.task)}: {len(items)} RULER-style items"
    if args.estimate:
        return estimate(lm, items, wanted, args)
    log = Path(args.log)
    done = read_log(log, labels)
    print(f"{len(done)} of {len(items)} items already in {log}; {len(labels)} settings; dropped: "
          + ("; ".join(f"{d.setting} ({d.why})" for d in dropped) or "none"), flush=True)

    def save(record: sweep.ItemRecord) -> None:
        with open(log, "ab") as f:
            f.write(sweep.record_to_json(record) + b"\n")
            f.flush()
            os.fsync(f.fileno())
        done.append(record)
        result = sweep.assemble(done, sweep.with_full_first(wanted), model=lm.label, task=note,
                                new_tokens=max(i.max_new_tokens for i in items), complete=len(done) == len(items),
                                items_total=len(items), dropped=dropped, made_with=made_with,
                                timed_items=min(args.timed_items, len(items)))
        write_atomic(args.out, sweep.to_json(result))
        print(f"item {record.index + 1} of {len(items)} ({record.task}, depth {record.depth:.2f}, "
              f"{record.context_tokens} context tokens): {record.cpu_seconds:.0f} s of CPU, {record.seconds:.0f} s "
              f"wall; {len(done)} done", flush=True)

    sweep.run(lm, items, wanted, done=list(done), on_item=save, timed_items=args.timed_items, dropped=dropped,
              made_with=made_with, note=note)
    return 0


def show(path: Path) -> int:
    """The sweep file's rows as `kvviz shrink --sweep` prints them (a partial sweep says so first)."""
    from kvviz.shrink import cli
    try:
        result = sweep.from_json(path.read_bytes())
    except (OSError, UserError) as exc:
        print(f"shrink_sweep: cannot show {path}: {exc}", file=sys.stderr)
        return 2
    print(cli.table(result))
    return 0


def estimate(lm, items, wanted, args) -> int:
    """Time `args.estimate` items (one timed, as the real run's first items are) and extrapolate."""
    cpu0, wall0 = time.process_time(), time.monotonic()
    timed = sweep.spaced(len(items), args.timed_items)
    for index in range(args.estimate):
        sweep.run_item(lm, index, items[index], sweep.with_full_first(wanted), sweep.shrink.stop_ids(lm),
                       timed=index in timed)
    cpu, wall = (time.process_time() - cpu0) / args.estimate, (time.monotonic() - wall0) / args.estimate
    print(f"{len(sweep.with_full_first(wanted))} settings; per item: {cpu:.0f} s of CPU, {wall:.0f} s wall "
          f"({args.threads} thread(s)); {len(items)} items: about {cpu * len(items) / 3600:.2f} h of CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
