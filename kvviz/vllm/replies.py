"""Every request a row: the ledger's rows (from KV events) joined with the client's request log
(`kvviz.vllm.request_log`). Pure.

A reply is matched to the ledger's request of the same session_id (or, without one, of none)
whose first event fell between the reply's sending and its answer (give or take SLACK_S); the
earliest unmatched one wins. A matched row gains vLLM's own `cached_tokens` and the replica; a
reply no event named (an exact repeat that stored nothing new and asked for no reuse report, or
events the view never saw) becomes a row of its own, from the log alone, saying so.
"""
from __future__ import annotations

from kvviz.vllm import reasons
from kvviz.vllm.request_log import Reply
from kvviz.vllm.requests import Request, RequestLedger

SLACK_S = 1.0  # server batch times vs client times, on one machine
EVENTS, BOTH, LOG = "events", "events + request log", "request log"


def joined_rows(ledger: RequestLedger, replies: list[Reply], block_size: int | None) -> list[dict]:
    """The ledger's rows and the replies, one row per request, in time order. Each row has the
    ledger's columns plus `vllm_cached_tokens` (None without a reply), `url` and `source`."""
    t0 = ledger.t0 if ledger.t0 is not None else min((r.sent_s for r in replies), default=0.0)
    matched = match(list(ledger.requests), replies)
    rows = []
    for request in ledger.requests:
        reply = matched.get(request.number)
        rows.append({**request.row(t0), "vllm_cached_tokens": reply.cached_tokens if reply else None,
                     "url": reply.url if reply else None, "source": BOTH if reply else EVENTS})
    used = {id(r) for r in matched.values()}
    rows += [log_row(r, t0, block_size) for r in replies if id(r) not in used]
    return sorted(rows, key=lambda row: row["t_s"])


def match(requests: list[Request], replies: list[Reply]) -> dict[int, Reply]:
    """Request number -> its reply. Linear in requests plus replies per session (a session's
    requests come in time order)."""
    by_session: dict[str | None, list[Request]] = {}
    for request in requests:
        by_session.setdefault(request.session_id, []).append(request)
    cursor: dict[str | None, int] = {}
    out: dict[int, Reply] = {}
    for reply in sorted(replies, key=lambda r: r.sent_s):
        queue = by_session.get(reply.session_id, [])
        i = cursor.get(reply.session_id, 0)
        while i < len(queue) and queue[i].first_s < reply.sent_s - SLACK_S:
            i += 1  # an event row no reply names (sent by another client)
        if i < len(queue) and queue[i].first_s <= reply.done_s + SLACK_S:
            out[queue[i].number] = reply
            i += 1
        cursor[reply.session_id] = i
    return out


def log_row(reply: Reply, t0: float, block_size: int | None) -> dict:
    """A request only the log names: its counts are vLLM's (usage), its reason said from them."""
    cached = reply.cached_tokens
    whole = reply.prompt_tokens // block_size * block_size if block_size else None
    reason, words = no_event_reason(reply, block_size)
    return {"request": reply.name, "session_id": reply.session_id, "t_s": round(reply.sent_s - t0, 3),
            "prompt_tokens": whole, "cached_tokens": cached,
            "reused_blocks": cached // block_size if block_size and cached is not None else None,
            "stored_blocks": 0, "reason": reason, "miss_reason": words,
            "first_miss_token": cached, "reuse_source": LOG, "vllm_cached_tokens": cached,
            "url": reply.url, "source": LOG}


def no_event_reason(reply: Reply, block_size: int | None) -> tuple[str, str]:
    cached, n = reply.cached_tokens, reply.prompt_tokens
    said = f"vLLM's usage: {cached} of {n} prompt tokens cached" if cached is not None else \
        f"vLLM's usage gave no cached_tokens for its {n} prompt tokens (start vLLM with --enable-prompt-tokens-details)"
    if block_size and cached is not None and cached == (n - 1) // block_size * block_size and cached > 0:
        return reasons.PARTIAL_TAIL, (f"every whole block it could reuse came from the cache ({said}); it "
                                      "stored no new block and asked for no reuse report, so no KV event "
                                      "names it: this row is from the request log")
    return reasons.NO_EVENT, (f"no KV event names this request ({said}): it stored no new block, or "
                              "its events came before the view joined; this row is from the request log")
