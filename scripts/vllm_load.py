"""A bounded load generator for a vLLM server: chat requests that share one long system prompt.

Each request asks about a different passage, so its own blocks differ while the system prompt's
blocks are shared; enough of them overflow a small pool and force evictions. Requests ask for
`kv_cache_report_mode=full`, so vLLM also reports the prefix blocks each request reused.
Stdlib only (it runs from the app's venv or any Python 3.10+).

Usage: python scripts/vllm_load.py --url http://127.0.0.1:8000 --requests 24 --concurrency 4
"""
import argparse
import json
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

SYSTEM = (
    "You are a careful assistant for a team that runs language models in production. "
    "Answer in plain words, in at most three sentences, and never invent numbers. "
    "Context: a serving engine keeps the attention keys and values of every token it has seen in a "
    "pool of fixed-size blocks. Requests that begin with the same tokens can share the blocks of "
    "that common beginning, so a long system prompt like this one is computed once and reused by "
    "every later request, as long as its blocks have not been evicted to make room for others. "
    "When the pool is full, the least recently used cached blocks that no running request holds "
    "are evicted first. Preemption happens when even that is not enough for a running request. "
    "Metrics worth watching: time to first token, inter-token latency, cache usage, and hit rate."
)
TOPICS = ["tides", "volcanoes", "honeybees", "glaciers", "lighthouses", "coral reefs", "comets",
          "bridges", "deserts", "owls", "rivers", "clocks", "maple trees", "satellites", "salt",
          "thunderstorms", "bicycles", "whales", "paper", "mountains", "bread", "ants", "rain",
          "telescopes", "wind", "islands", "bats", "copper", "forests", "ice"]


def passage(i: int) -> str:
    """A distinct user message of roughly 120 tokens."""
    topic = TOPICS[i % len(TOPICS)]
    facts = " ".join(f"Point {k + 1} about {topic} in note {i}: it matters for reason {k + i}." for k in range(8))
    return f"Here are notes on {topic}. {facts} Summarize what these notes say about {topic}."


def request_body(model: str, i: int, max_tokens: int) -> dict:
    return {"model": model, "max_tokens": max_tokens, "temperature": 0.0,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": passage(i)}],
            "vllm_xargs": {"kv_cache_report_mode": "full"}}


def post(url: str, body: dict, timeout_s: float) -> dict:
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.load(resp)


def served_model(url: str, timeout_s: float = 10) -> str:
    with urllib.request.urlopen(url + "/v1/models", timeout=timeout_s) as resp:
        return json.load(resp)["data"][0]["id"]


def run(url: str, requests: int, concurrency: int, max_tokens: int, timeout_s: float,
        first: int = 0, gap_s: float = 0.0) -> list[dict]:
    model = served_model(url)

    def one(i: int) -> dict:
        time.sleep(gap_s * (i - first) / max(1, concurrency))
        return post(url, request_body(model, i, max_tokens), timeout_s)

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, range(first, first + requests)))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--requests", type=int, default=24)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--first", type=int, default=0, help="index of the first passage")
    p.add_argument("--gap-s", type=float, default=0.0, help="stagger arrivals by this much")
    p.add_argument("--timeout-s", type=float, default=600)
    args = p.parse_args()
    start = time.monotonic()
    try:
        out = run(args.url.rstrip("/"), args.requests, args.concurrency, args.max_tokens,
                  args.timeout_s, args.first, args.gap_s)
    except OSError as exc:
        print(f"vllm_load: {args.url}: {exc}", file=sys.stderr)
        return 2
    tokens = sum(r["usage"]["completion_tokens"] for r in out)
    prompt = sum(r["usage"]["prompt_tokens"] for r in out)
    print(f"{len(out)} requests, {prompt} prompt + {tokens} generated tokens in "
          f"{time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
