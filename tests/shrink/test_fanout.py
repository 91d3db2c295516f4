"""The sweep's one-prefill shortcut (kvviz.shrink.fanout) on its own, on the tiny Llama: the recorded
prefill hands out fresh copies of its cache, and each setting's cache is built from the one record
(StreamingLLM's sinks and recent window, a quantized cache of every position). Its answers against
kvpress's pipeline, setting by setting: test_protocol.py."""
import pytest
import torch
from tiny import tiny_lm

from kvviz.shrink import compute as shrink
from kvviz.shrink import fanout, protocol, quant_cache

CONTEXT = "The key value cache keeps the keys and values of every past token. " * 3


@pytest.fixture(scope="module")
def recorded():
    lm = tiny_lm("llama")
    return lm, fanout.record(lm, protocol.split(lm.tokenizer, CONTEXT, "What is kept?", " Answer:"))


def test_the_record_holds_every_layer_and_hands_out_copies(recorded):
    lm, rec = recorded
    n = rec.context_tokens
    assert n == rec.prompt.context_ids.shape[1] and len(rec.kwargs) == lm.model.config.num_hidden_layers
    assert all(kw is not None and "hidden_states" in kw for kw in rec.kwargs)  # every hook fired
    full, _ = fanout.cache_for(lm, rec, shrink.ShrinkMode())
    assert full.get_seq_length() == n and full is not rec.cache
    assert all(torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
               for a, b in zip(full.layers, rec.cache.layers))
    full.layers[0].keys.zero_()  # a setting that writes into its cache leaves the record as it was
    assert rec.cache.layers[0].keys.abs().sum() > 0


def test_streaming_llm_keeps_the_four_sinks_and_the_newest_positions(recorded):
    """kvpress's StreamingLLM keeps n_sink = 4 first positions and the newest, int(n × (1 − ratio))
    in all (the cache holds them in score order: compared as sets of rows, head by head)."""
    lm, rec = recorded
    n = rec.context_tokens
    cache, masks = fanout.cache_for(lm, rec, shrink.ShrinkMode(press="StreamingLLM", ratio=0.5))
    kept = int(n * 0.5)
    assert masks == {} and cache.get_seq_length() == kept
    for got, full in zip(cache.layers, rec.cache.layers):
        want = torch.cat([full.keys[:, :, :4], full.keys[:, :, n - (kept - 4):]], dim=2)
        match = (got.keys[0, :, :, None, :] == want[0, :, None, :, :]).all(-1)  # (head, cache row, wanted row)
        assert got.keys.shape == want.shape and match.any(2).all() and match.any(1).all()


def test_a_quantized_setting_gets_every_position_of_the_record(recorded):
    lm, rec = recorded
    cache, masks = fanout.cache_for(lm, rec, shrink.ShrinkMode(backend="quanto", nbits=4, residual_length=4))
    assert masks == {} and cache.get_seq_length() == rec.context_tokens
    assert quant_cache.measure(cache).payload_bytes > 0  # quantized, not held at full precision
