"""The router of a small vLLM fleet, played by a client: a designed request stream sent one at a
time to the replica the plan names, each reply written to a request log (JSON lines) that kvviz
reads beside the servers' KV events (`kvviz watch URL URL --request-log PATH`).

The log is how kvviz learns of every request, also those that store no new block (an exact repeat
publishes no KV event unless the client asks for `kv_cache_report_mode=full`): one line per request
with the replica it went to, when it was sent and answered, vLLM's own
`usage.prompt_tokens_details.cached_tokens`, and the prompt's and the answer's token ids as vLLM
returned them (`return_token_ids`). A router knows all of this; a server alone does not know the
others.

The designed stream (`designed_stream`): two system prompts (A, B), the requests that show each
per-request reason on one server (first seen, shared prefix, exact repeat without a reuse report,
one word changed inside the first block), then a deliberately prefix-blind order across the two
replicas (A's prompt sent where only B is cached, and back), each blind request followed by the
same prompt sent to the replica that held it (a probe: vLLM's own figure for "what the best replica
had"; `probes()` pairs them), a multi-turn session whose turns hop between replicas, fillers that evict A from replica 0,
and A asked there again. Stdlib only.

Usage: python scripts/vllm_fleet_load.py --url http://127.0.0.1:8000 --url http://127.0.0.1:8001 \
           --log runs/fleet/requests.jsonl [--tag t1] [--reset]
"""
import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_load import post, served_model  # noqa: E402  (one client for both load scripts)

SYSTEM_A = ("You are a careful assistant in session {tag} of the fleet demo. You answer questions about "
            "how a serving engine stores attention keys and values in fixed-size blocks, which later "
            "requests reuse when they begin with the same tokens. Keep every answer short, plain and "
            "exact, and say so when a question cannot be answered from what you were told. The people "
            "asking run the engine in production and care about latency, memory and cost.")
SYSTEM_B = ("Session {tag} of the routing demo: you help an operator who runs several replicas of one "
            "model behind a router. Explain in plain words how a request's prompt decides which "
            "replica already holds its first blocks, what a router gains by sending it there, and what "
            "it costs when the router balances load instead. Answer in two sentences at most.")
QUESTION = ("Tell me {q}. Please explain it in two or three plain sentences that a new engineer on "
            "the team could follow without any background in machine learning or in serving systems.")
QUESTIONS = ["what exactly one block holds, and for how many tokens",
             "why a later request can reuse the blocks of an earlier one",
             "how long a block stays cached when nobody asks for it",
             "what a router should do when every replica is busy"]


def chat(model: str, messages: list[dict], session: str, max_tokens: int, full_report: bool = True) -> dict:
    body = {"model": model, "max_tokens": max_tokens, "temperature": 0.0, "messages": messages,
            "session_id": session, "return_token_ids": True}
    if full_report:
        body["vllm_xargs"] = {"kv_cache_report_mode": "full"}
    return body


def turn(system: str, *turns: str) -> list[dict]:
    """System prompt, then alternating user / assistant messages."""
    roles = ["user", "assistant"]
    return [{"role": "system", "content": system}] + [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)]


def designed_stream(model: str, tag: str, fillers: int = 3, max_tokens: int = 4) -> list[dict]:
    """[{name, replica (index), body, note}] in sending order."""
    a, b = SYSTEM_A.format(tag=tag), SYSTEM_B.format(tag=tag)
    edited = a.replace("careful", "cautious")  # one word, inside the first block of 32 tokens
    q = [QUESTION.format(q=x) for x in QUESTIONS]
    s = f"{tag}-"

    def req(name, replica, messages, note, full=True):
        return {"name": s + name, "replica": replica, "note": note,
                "body": chat(model, messages, s + name, max_tokens, full)}

    out = [req("a-first", 0, turn(a, q[0]), "first seen"),
           req("a-shared", 0, turn(a, q[1]), "shares A's system prompt"),
           req("a-repeat", 0, turn(a, q[0]), "exact repeat, no reuse report asked: no KV event", full=False),
           req("a-edited", 0, turn(edited, q[0]), "one word changed inside the first block"),
           req("b-first", 1, turn(b, q[0]), "first seen on replica 1"),
           req("a-blind", 1, turn(a, q[0]), "prefix-blind: A's prompt where only B is cached"),
           req("a-probe", 0, turn(a, q[0]), "probe: the same prompt on the replica that held it"),
           req("b-blind", 0, turn(b, q[1]), "prefix-blind: B's question where B was never sent"),
           req("b-probe", 1, turn(b, q[1]), "probe: the same prompt on the replica that held B"),
           req("chat-1", 1, turn(a, q[2]), "a session's first turn")]
    out.append({**req("chat-2", 0, [], "the session's second turn, sent elsewhere"), "follows": s + "chat-1",
                "then": q[3]})
    out.append({**req("chat-2-probe", 1, [], "probe: the second turn where the first was"), "follows": s + "chat-1",
                "then": q[3]})
    out.append({**req("chat-3", 0, [], "the third turn, where the second went"), "follows": s + "chat-2",
                "then": q[1]})
    for k in range(fillers):
        filler = f"{k} {tag} filler. " + " ".join(f"Line {i} of filler {k} says nothing at all." for i in range(22))
        out.append(req(f"filler-{k}", 0, turn(filler, "Go on."), "fills replica 0's pool"))
    out.append(req("a-evicted", 0, turn(a, q[0]), "A again on replica 0, after the fillers"))
    out.append(req("a-evicted-probe", 1, turn(a, q[0]), "probe: A where it was still cached"))
    return out


def probes(stream: list[dict]) -> dict[str, str]:
    """Probe name -> the request it checks (the one sent just before it with the same prompt)."""
    out = {}
    for before, item in zip(stream, stream[1:]):
        if item["name"].endswith("-probe"):
            out[item["name"]] = before["name"]
    return out


def reset(url: str, timeout_s: float = 30) -> None:
    """Clear the server's prefix cache (needs VLLM_SERVER_DEV_MODE=1, as scripts/vllm_serve.sh sets)."""
    req = urllib.request.Request(url + "/reset_prefix_cache", method="POST")
    with urllib.request.urlopen(req, timeout=timeout_s):
        pass


def log_line(name: str, url: str, sent_s: float, done_s: float, reply: dict, body: dict) -> dict:
    usage = reply["usage"]
    details = usage.get("prompt_tokens_details") or {}
    return {"name": name, "session_id": body.get("session_id"), "url": url, "sent_s": sent_s,
            "done_s": done_s, "prompt_tokens": usage["prompt_tokens"],
            "cached_tokens": details.get("cached_tokens"), "completion_tokens": usage["completion_tokens"],
            "prompt_token_ids": reply.get("prompt_token_ids"),
            "output_token_ids": reply["choices"][0].get("token_ids"),
            "full_report": "vllm_xargs" in body}


def send(urls: list[str], stream: list[dict], log_path: str, timeout_s: float) -> list[dict]:
    """Send each request to its replica in order; append each reply's line to the log (flushed,
    so a watching kvviz sees it at once); return the lines."""
    lines, answers = [], {}
    with open(log_path, "a", encoding="utf-8") as log:
        for item in stream:
            body = dict(item["body"])
            if "follows" in item:  # the previous turn, its answer, then the next question
                before = answers[item["follows"]]
                body["messages"] = before["messages"] + [{"role": "assistant", "content": before["answer"]},
                                                         {"role": "user", "content": item["then"]}]
            url = urls[item["replica"] % len(urls)]
            sent_s = time.time()
            reply = post(url, body, timeout_s)
            line = log_line(item["name"], url, sent_s, time.time(), reply, body)
            answers[item["name"]] = {"messages": body["messages"],
                                     "answer": reply["choices"][0]["message"]["content"] or ""}
            log.write(json.dumps(line) + "\n")
            log.flush()
            lines.append(line)
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", action="append", required=True, help="a replica's base URL (twice or more)")
    p.add_argument("--log", required=True, help="the request log to append to (JSON lines)")
    p.add_argument("--tag", default=str(int(time.time()) % 100000), help="keeps runs' prompts apart")
    p.add_argument("--fillers", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=4)
    p.add_argument("--reset", action="store_true", help="clear every replica's prefix cache first")
    p.add_argument("--timeout-s", type=float, default=600)
    args = p.parse_args()
    urls = [u.rstrip("/") for u in args.url]
    try:
        if args.reset:
            for url in urls:
                reset(url)
        stream = designed_stream(served_model(urls[0]), args.tag, args.fillers, args.max_tokens)
        lines = send(urls, stream, args.log, args.timeout_s)
    except OSError as exc:
        print(f"vllm_fleet_load: {exc}", file=sys.stderr)
        return 2
    for line in lines:
        print(f"{line['name']} → {line['url']}: {line['prompt_tokens']} prompt tokens, "
              f"{line['cached_tokens']} cached")
    return 0


if __name__ == "__main__":
    sys.exit(main())
