"""A bounded load generator for a vLLM server: chat requests that share one long system prompt.

Each request asks about a different passage, so its own blocks differ while the system prompt's
blocks are shared; enough of them overflow a small pool and force evictions. Requests ask for
`kv_cache_report_mode=full`, so vLLM also reports the prefix blocks each request reused, and carry
a `session_id` (load-<i>), which vLLM puts on their KV events.

`--designed` first sends, one at a time, requests built to show each miss reason kvviz names
(`designed()`): a first request, another question under its system prompt (diverged), the exact
repeat (partial tail), the system prompt with one word changed (diverged in block 0), the repeat
with a cache salt (extra keys), fillers that overflow the pool, the first request again (evicted),
and one request without a session_id (grouped by its hash chain).
Stdlib only (it runs from the app's venv or any Python 3.10+).

Usage: python scripts/vllm_load.py --url http://127.0.0.1:8000 --requests 24 --concurrency 4
       python scripts/vllm_load.py --url http://127.0.0.1:8000 --designed --fillers 16 --requests 0
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
    return chat(model, SYSTEM, passage(i), max_tokens, session=f"load-{i}")


def chat(model: str, system: str, user: str, max_tokens: int, session: str | None = None,
         salt: str | None = None) -> dict:
    body = {"model": model, "max_tokens": max_tokens, "temperature": 0.0,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "vllm_xargs": {"kv_cache_report_mode": "full"}}
    if session is not None:
        body["session_id"] = session
    if salt is not None:
        body["cache_salt"] = salt
    return body


DESIGNED_SYSTEM = ("Session {tag} of the cache demo: you answer questions about how a serving engine "
                   "stores attention keys and values in fixed-size blocks, which later requests reuse "
                   "when they begin with the same tokens. Keep every answer short, plain and exact, "
                   "and say so when a question cannot be answered from what you were told. The "
                   "people asking run the engine in production and care about latency, memory and "
                   "cost, in that order, so mention whichever of the three an answer touches.")
QUESTION = ("Tell me {q}. Please explain it in two or three plain sentences that a new engineer on "
            "the team could follow without any background in machine learning or in serving systems.")


def designed(model: str, tag: str, fillers: int, max_tokens: int = 4) -> list[tuple[str | None, str, dict]]:
    """(session_id, intended reason, body) in sending order; `tag` keeps each run's prompts apart
    from earlier runs'. The reasons are kvviz.vllm.reasons' codes; "partial tail" holds for the
    repeat when its prompt does not end on a block boundary (else vLLM recomputes the last block)."""
    system = DESIGNED_SYSTEM.format(tag=tag)
    edited = system.replace("of the cache demo", "of the cache show")  # one word, inside block 0
    first_q, other_q, third_q = (
        QUESTION.format(q="what exactly one block holds, and for how many tokens"),
        QUESTION.format(q="why a later request can reuse the blocks of an earlier one"),
        QUESTION.format(q="how long a block stays cached when nobody asks for it"))
    sid = f"{tag}-"
    out = [(sid + "first", "first seen", chat(model, system, first_q, max_tokens, sid + "first")),
           (sid + "shared", "diverged", chat(model, system, other_q, max_tokens, sid + "shared")),
           (sid + "repeat", "partial tail", chat(model, system, first_q, max_tokens, sid + "repeat")),
           (sid + "edited", "diverged", chat(model, edited, first_q, max_tokens, sid + "edited")),
           (sid + "salted", "extra keys", chat(model, system, first_q, max_tokens, sid + "salted",
                                               salt=f"salt-{tag}"))]
    for k in range(fillers):  # distinct from the first token on: they push the above out of the pool
        out.append((f"{sid}filler-{k}", None, chat(model, f"{k} {tag} filler. " + passage(1000 + k), "Go on.",
                                                   max_tokens, f"{sid}filler-{k}")))
    out.append((sid + "evicted", "evicted", chat(model, system, first_q, max_tokens, sid + "evicted")))
    out.append((None, "diverged", chat(model, system, third_q, max_tokens)))
    return out


def run_designed(url: str, tag: str, fillers: int, timeout_s: float) -> list[tuple[str | None, str, dict]]:
    """Send designed() one at a time; (session_id, intended reason, the response's usage)."""
    model = served_model(url)
    return [(sid, reason, post(url, body, timeout_s)["usage"]) for sid, reason, body in designed(model, tag, fillers)]


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
    p.add_argument("--designed", action="store_true", help="first send the requests that show each miss reason")
    p.add_argument("--fillers", type=int, default=16, help="designed: filler requests that overflow the pool")
    p.add_argument("--tag", default=str(int(time.time()) % 100000), help="designed: keeps runs apart")
    args = p.parse_args()
    start = time.monotonic()
    try:
        if args.designed:
            for sid, reason, usage in run_designed(args.url.rstrip("/"), args.tag, args.fillers, args.timeout_s):
                cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
                print(f"{sid or '(no session_id)'}: {usage['prompt_tokens']} prompt tokens, {cached} cached"
                      + (f" (designed: {reason})" if reason else ""))
        out = run(args.url.rstrip("/"), args.requests, args.concurrency, args.max_tokens,
                  args.timeout_s, args.first, args.gap_s) if args.requests > 0 else []
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
