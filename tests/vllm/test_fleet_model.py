"""The fleet's routing model (kvviz.vllm.fleet_model): a replica's pool modelled block by block
(vLLM's free queue: least recently freed first, a request's tail first), routed as it really was
on the real two-replica capture (tests/data/vllm/fleet/README.md) it reproduces every request."""
import pytest

from kvviz.core.errors import UserError
from kvviz.vllm import fleet_frames, fleet_model
from kvviz.vllm.fleet_model import ModelPool
from kvviz.vllm.request_log import Reply


def test_the_model_routed_as_it_really_was_reproduces_every_request(fleet_capture):
    recording, view, states = fleet_capture
    df = fleet_frames.policies_frame(recording, view, states)
    rows = df.set_index("policy")
    assert rows.loc["as routed", "matches_real"] == rows.loc["as routed", "requests"] == 18
    assert rows.loc["as routed", "cached_tokens"] == 1056  # vLLM's own total
    assert rows.loc["longest-prefix", "cached_tokens"] >= rows.loc["as routed", "cached_tokens"]
    assert rows.loc["round-robin", "recomputed_tokens"] == rows.loc["round-robin", "prompt_tokens"] - \
        rows.loc["round-robin", "cached_tokens"]


def test_the_model_evicts_the_least_recently_freed_and_a_request_s_tail_first():
    pool = ModelPool(num_usable=4, block_size=2)
    assert pool.serve([1, 2, 3, 4, 5], [6]) == 0  # 5 computed tokens: 3 blocks, 2 cached ([1 2] [3 4])
    assert pool.serve([9, 9, 9], [9]) == 0  # 3 computed: 2 blocks, from the free queue's front
    # front then: block 4 (never used), then A's reversed blocks: [5], [3 4], [1 2] -> [5] and 4 taken
    assert pool.serve([1, 2, 3, 4, 0], [7]) == 4  # A's two cached blocks survived
    pool2 = ModelPool(num_usable=4, block_size=2)
    pool2.serve([1, 2, 3, 4, 5], [6])
    pool2.serve([8, 8, 8, 8, 8], [8])  # 3 blocks: the unused one, then A's tail [5], then [3 4]
    assert pool2.serve([1, 2, 3, 4, 0], [7]) == 2  # only A's first block is left


def test_the_model_refuses_what_it_cannot_queue_and_unknown_policies():
    with pytest.raises(UserError, match="needs 3 blocks, 2 free"):
        ModelPool(num_usable=2, block_size=2).serve([1, 2, 3, 4, 5], [6])
    reply = Reply(name="a", url="u", sent_s=1.0, done_s=2.0, prompt_tokens=2, prompt_token_ids=[1, 2])
    with pytest.raises(UserError, match="unknown routing policy"):
        fleet_model.replay([reply], ["u"], "random", [4], 2)
