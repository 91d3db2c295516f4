"""`kvviz watch URL… --seconds N --out watch.json`: record what vLLM engines do, headless."""
from __future__ import annotations

import json
import sys
import time

from kvviz.core.trace import TraceError, write_atomic
from kvviz.vllm.client import EngineError
from kvviz.vllm.state import format_summary, request_rows, summary
from kvviz.vllm.watch import EngineWatch


def add_parser(sub) -> None:
    p = sub.add_parser("watch", help="record a running vLLM server's KV events and metrics")
    p.add_argument("urls", nargs="+", metavar="URL", help="vLLM base URL(s), e.g. http://127.0.0.1:8000")
    p.add_argument("--seconds", type=float, default=30.0, help="how long to watch")
    p.add_argument("--scrape-every", type=float, default=1.0, help="seconds between /metrics reads")
    p.add_argument("--out", required=True, help="where to write the watch (JSON, kvviz-vllm-watch)")
    p.add_argument("--request-log", metavar="PATH",
                   help="a client's request log to read beside the events (JSON lines: which replica "
                        "served each request and vLLM's own cached_tokens; scripts/vllm_fleet_load.py "
                        "writes one): every request gets a row, also those no KV event names")
    p.add_argument("--requests-json", metavar="PATH",
                   help="also write one object per request seen (prompt_tokens, cached_tokens, "
                        "reused_blocks, stored_blocks, miss_reason, ...) as a JSON array")
    p.set_defaults(func=run_watch)


def run_watch(args) -> int:
    try:
        watch = EngineWatch(args.urls, scrape_every_s=args.scrape_every, request_log=args.request_log)
    except EngineError as exc:
        print(f"kvviz watch: error: {exc}", file=sys.stderr)
        return 2
    watch.start()
    shown: dict[str, str] = {}
    deadline = time.monotonic() + max(0.0, args.seconds)
    try:
        while time.monotonic() < deadline:
            report_status(watch, shown)
            time.sleep(0.2)
    except KeyboardInterrupt:
        print("kvviz watch: interrupted; saving what was recorded", file=sys.stderr)
    watch.stop()
    report_status(watch, shown)
    return finish(watch, args.out, args.requests_json)


def report_status(watch: EngineWatch, shown: dict[str, str]) -> None:
    for conn in watch.connections:
        if shown.get(conn.url) != conn.status:
            shown[conn.url] = conn.status
            print(f"{conn.url}: {conn.status}", file=sys.stderr)


def finish(watch: EngineWatch, out: str, requests_json: str | None = None) -> int:
    recording = watch.recording
    recording.meta["seconds"] = round(watch.now_s(), 3)
    try:
        recording.save(out)
    except TraceError as exc:
        print(f"kvviz watch: error: {exc}", file=sys.stderr)
        return 2
    for state in watch.states.values():
        print(format_summary(summary(state)))
    if requests_json and write_requests(watch, requests_json) != 0:
        return 2
    if not recording.batches and not recording.scrapes:
        print(f"kvviz watch: nothing was recorded; {out} holds only the notes", file=sys.stderr)
        return 2
    print(f"watch written to {out}")
    return 0


def write_requests(watch: EngineWatch, path: str) -> int:
    """The per-request rows (the same the Replay page derives from the watch file) as JSON."""
    with watch.lock:
        rows = request_rows(watch.states)
    try:
        write_atomic(path, json.dumps(rows, indent=1) + "\n")
    except OSError as exc:
        print(f"kvviz watch: error: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"{len(rows)} requests written to {path}")
    return 0
