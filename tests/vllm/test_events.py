"""KV-event decoding (kvviz.vllm.events) on real captured payloads (tests/data/vllm): the schema,
every kind of event, the replay socket's frames, and payloads of another schema refused."""
import msgspec
import pytest

from kvviz.vllm.events import (AllBlocksCleared, BlockRemoved, BlockStored, SchemaMismatch,
                               decode_message, decode_payload)
from vllm_payloads import BLOCK_SIZE, frames, messages


def test_every_captured_message_decodes_in_order_with_all_three_kinds():
    msgs = messages()
    assert [m.seq for m in msgs] == list(range(len(msgs)))
    kinds = {type(e) for m in msgs for e in m.batch.events}
    assert kinds == {BlockStored, BlockRemoved, AllBlocksCleared}
    assert all(m.batch.data_parallel_rank == 0 for m in msgs)


def test_first_batch_is_the_first_request_s_ten_full_blocks():
    (event,) = messages()[0].batch.events
    assert isinstance(event, BlockStored)
    assert event.parent_block_hash is None and event.block_size == BLOCK_SIZE
    assert len(event.block_hashes) == 10 and len(event.token_ids) == 10 * BLOCK_SIZE  # (331+16-1)//32
    assert event.medium == "GPU" and event.kv_cache_spec_kind == "full_attention"
    assert all(isinstance(h, int) for h in event.block_hashes)


def test_a_payload_of_another_schema_is_a_schema_mismatch():
    payload = msgspec.msgpack.encode([1.0, [{"type": "BlockMoved", "block_hashes": [1]}], 0])
    with pytest.raises(SchemaMismatch, match="another vLLM version"):
        decode_payload(payload)
    with pytest.raises(SchemaMismatch, match="2 frames"):
        decode_message(frames()[0][:2])
    with pytest.raises(SchemaMismatch, match="sequence frame is 4 bytes"):
        decode_message([b"", b"\0\0\0\1", frames()[0][2]])


def test_replay_socket_frames_decode_and_end_with_the_marker():
    raw = frames("replay_from_64.jsonl")
    assert all(len(f) == 4 and f[0] == b"" for f in raw)
    assert int.from_bytes(raw[-1][2], "big", signed=True) == -1
    seqs = [decode_message(f[1:]).seq for f in raw[:-1]]
    assert seqs == list(range(64, 64 + len(seqs))) and seqs
