"""vLLM's KV-cache event schema, mirrored as msgspec structs, and the decoding of one ZMQ message.

vLLM (0.32) publishes each engine step's cache changes as a `KVEventBatch`: msgpack of an array
`[ts, events, data_parallel_rank]`, where every event is a map tagged by `"type"` (`BlockStored`,
`BlockRemoved`, `AllBlocksCleared`) with default-valued fields left out. A message on the wire is
three frames: topic, sequence number (8-byte big-endian), payload. The structs below mirror
`vllm/distributed/kv_events.py` field for field so that msgspec rejects anything else: a payload
that does not decode means a vLLM whose event schema differs, reported as `SchemaMismatch`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Union

import msgspec
from kvviz.core.errors import UserError
from kvviz.core.wire import problem

# A block hash: the low 64 bits of a sha256 as an int by default, raw bytes in some configurations.
BlockHash = Union[int, bytes]
# Every number an event carries is bounded as it is decoded (a server's or a file's): a block of
# 2**64 tokens or a time of 1e308 s is refused in a sentence, never drawn.
TokenId = Annotated[int, msgspec.Meta(ge=0, lt=2**32)]
BlockSize = Annotated[int, msgspec.Meta(ge=1, le=2**16)]
Small = Annotated[int, msgspec.Meta(ge=-1, le=2**31)]  # LoRA ids, group indexes, ranks, windows
EpochS = Annotated[float, msgspec.Meta(ge=0, le=1e11)]  # server time: epoch seconds (year 5138)
END_SEQ = -1  # the replay endpoint's end-of-stream marker


class KVCacheEvent(msgspec.Struct, omit_defaults=True, tag=True):
    """Base of the three event kinds; the tag is the class name."""


class BlockStored(KVCacheEvent):
    """Full blocks newly cached (or, with kv_cache_report_mode="full", reported as reused)."""

    block_hashes: list[BlockHash]
    parent_block_hash: BlockHash | None  # the block before the first one: the prefix-tree edge
    token_ids: list[TokenId]  # block_size × len(block_hashes) tokens
    block_size: BlockSize
    lora_id: Small | None
    medium: str | None  # "GPU" even on the CPU backend
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: Small | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: Small | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None


class BlockRemoved(KVCacheEvent):
    """Cached blocks evicted (their hash forgotten; the memory is reused)."""

    block_hashes: list[BlockHash]
    medium: str | None
    group_idx: Small | None = None
    locality: str | None = None
    ownership: str | None = None


class AllBlocksCleared(KVCacheEvent):
    """The whole prefix cache was reset (`/reset_prefix_cache`)."""


Event = Union[BlockStored, BlockRemoved, AllBlocksCleared]


class KVEventBatch(msgspec.Struct, array_like=True, omit_defaults=True):
    """One engine step's events; `data_parallel_rank` tells DP ranks apart."""

    ts: EpochS  # epoch seconds on the server
    events: list[Event]
    data_parallel_rank: Small | None = None


class SchemaMismatch(UserError):
    """A payload that is not vLLM 0.32's KV event schema; the message is fit to show a user."""


@dataclass(frozen=True)
class Message:
    """One published batch with its sequence number (restarts at 0 when the server restarts)."""

    seq: int
    batch: KVEventBatch


_DECODER = msgspec.msgpack.Decoder(KVEventBatch)


def decode_payload(payload: bytes) -> KVEventBatch:
    try:
        return _DECODER.decode(payload)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise SchemaMismatch(f"a KV event payload does not match vLLM 0.32's event schema "
                             f"({problem(exc)}); is this server another vLLM version?") from None


def decode_seq(frame: bytes) -> int:
    if len(frame) != 8:
        raise SchemaMismatch(f"a KV event sequence frame is {len(frame)} bytes, expected 8")
    return int.from_bytes(frame, "big", signed=True)


def decode_message(frames: list[bytes]) -> Message:
    """[topic, seq, payload] as published (the replay socket's leading empty frame removed)."""
    if len(frames) != 3:
        raise SchemaMismatch(f"a KV event message has {len(frames)} frames, expected 3 "
                             "(topic, sequence, payload)")
    return Message(decode_seq(frames[1]), decode_payload(frames[2]))
