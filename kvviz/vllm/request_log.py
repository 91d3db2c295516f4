"""A client's request log: one line per request a router (or any client) sent to a vLLM server,
with vLLM's own answer about it. The third source beside KV events and `/metrics`.

Why a log: KV events name a request only through the blocks it stores (and, when the client asks
`kv_cache_report_mode="full"`, those it reused). A request that stores nothing new — an exact
repeat whose answer fills no block — publishes no event at all, and `/metrics` only counts it
inside totals shared with every other request of the same scrape interval. Its response does say
it: `usage.prompt_tokens_details.cached_tokens` (with `--enable-prompt-tokens-details`) is vLLM's
own per-request figure, and with `return_token_ids` the response carries the prompt's and the
answer's token ids. A router also knows what no server does: which replica it chose. So the client
writes one JSON object per line (`Reply`, scripts/vllm_fleet_load.py writes them) and kvviz reads
the file beside the events.

A line names its server by base URL; every line is checked as it is read (bounded numbers and
lengths) and a bad line is refused with its line number, never half-read.
"""
from __future__ import annotations

import os
from typing import Annotated

import msgspec

from kvviz.core.errors import UserError
from kvviz.core.wire import problem
from kvviz.vllm.events import EpochS, TokenId

MAX_LOG_BYTES = 64 * 2**20
MAX_REPLIES = 5000  # lines kept (the newest), like the ledger's requests
Count = Annotated[int, msgspec.Meta(ge=0, le=2**31)]
Name = Annotated[str, msgspec.Meta(max_length=200)]
Ids = Annotated[list[TokenId], msgspec.Meta(max_length=2**20)]


class Reply(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    """One request as its client saw it: where it went, when, and what vLLM answered."""

    name: Name  # the client's name for it (its session_id when it sent one)
    session_id: Name | None = None
    url: Annotated[str, msgspec.Meta(max_length=500)]  # the replica's base URL
    sent_s: EpochS  # epoch seconds, the client's clock (the servers' clock on one machine)
    done_s: EpochS
    prompt_tokens: Count
    cached_tokens: Count | None = None  # usage.prompt_tokens_details.cached_tokens (vLLM's own)
    completion_tokens: Count = 0
    prompt_token_ids: Ids | None = None  # as vLLM returned them (return_token_ids)
    output_token_ids: Ids | None = None
    full_report: bool = False  # it asked kv_cache_report_mode=full (its reuse is in the events)


class RequestLogError(UserError):
    """A request log that cannot be read; the message is fit to show a user."""


_DECODER = msgspec.json.Decoder(Reply)


def parse_lines(text: bytes | str, first_line: int = 1) -> list[Reply]:
    """Every non-blank line as a Reply, in file order; the first bad line is refused by number."""
    lines = text.splitlines() if isinstance(text, (bytes, str)) else []
    replies = []
    for number, line in enumerate(lines, first_line):
        if not line.strip():
            continue
        try:
            reply = _DECODER.decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
            raise RequestLogError(f"line {number} of the request log is not a request record: "
                                  f"{problem(exc) if not isinstance(exc, RecursionError) else 'nested too deeply'}") from None
        if reply.done_s < reply.sent_s:
            raise RequestLogError(f"line {number} of the request log was answered before it was sent")
        replies.append(reply)
    return replies[-MAX_REPLIES:]


def read_log(path: str | os.PathLike) -> list[Reply]:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_LOG_BYTES + 1)
    except OSError as exc:
        raise RequestLogError(f"cannot read {os.fspath(path)}: {exc.strerror or exc}") from None
    if len(data) > MAX_LOG_BYTES:
        raise RequestLogError(f"the request log is over {MAX_LOG_BYTES // 2**20} MiB")
    return parse_lines(data)


class LogTail:
    """Reads the lines appended to a request log since the last call (a client still writing it:
    a line without its newline yet waits for the next call)."""

    def __init__(self, path: str | os.PathLike):
        self.path, self.offset, self.lines_read = os.fspath(path), 0, 0

    def read_new(self) -> list[Reply]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(MAX_LOG_BYTES)
        except FileNotFoundError:
            return []  # not written yet
        except OSError as exc:
            raise RequestLogError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        whole = data[:data.rfind(b"\n") + 1]
        self.offset += len(whole)
        replies = parse_lines(whole, self.lines_read + 1)
        self.lines_read += whole.count(b"\n")
        return replies
