"""The leaderboard's protocol (kvviz.shrink.protocol) and the sweep's one-prefill shortcut
(kvviz.shrink.fanout) against kvpress's own `KVPressTextGenerationPipeline`, on the same weights
and token ids: every press kvviz's sweep offers, at the leaderboard's ratios, the question-aware
variant and the quantized caches. The reference run uses kvpress's pipeline with a 5.24 shim
written here (the two keyword names 5.24 renamed), not kvviz's adapter.

The tiny model has 128-wide heads: kvpress's head-wise presses (AdaKV, KVzip) mask a position with
a key no query can attend to, which it cannot find for narrow random heads and long questions (it raises there, in
its own pipeline as in kvviz)."""
import logging
import warnings

import pytest
import torch
from tiny import tiny_tokenizer
from transformers import LlamaConfig, LlamaForCausalLM

from kvviz.core.config import LoadConfig
from kvviz.engine.models import load_model
from kvviz.shrink import compute as shrink
from kvviz.shrink import fanout, presses, protocol, ruler, sweep

CONTEXT = "The key value cache keeps the keys and values of every past token. " * 6
QUESTION, PREFIX = "What is a KV cache?", " Answer:"
NEW = 8
logging.getLogger("kvpress").setLevel(logging.ERROR)


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """A tiny Llama (2 layers, 4 heads of 128, 2 KV heads) loaded from a folder, as KVzip needs."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tiny_tokenizer()), hidden_size=512, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, eos_token_id=0,
                         pad_token_id=1)
    folder = tmp_path_factory.mktemp("wide-llama")
    LlamaForCausalLM(config).eval().save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return load_model(LoadConfig(str(folder)))


def on_524(press):
    """kvpress 0.5.5's hook reads `past_key_values` and `cache_position`; 5.24 passes `cache`, no positions."""
    hook = press.forward_hook

    def forward_hook(module, args, kwargs, output):
        cache = kwargs["cache"]
        n, q = cache.layers[module.layer_idx].get_seq_length(), kwargs["hidden_states"].shape[1]
        return hook(module, args, {**kwargs, "past_key_values": cache, "cache_position": torch.arange(n - q, n)}, output)
    press.forward_hook = forward_hook
    return press


def kvpress_answer(lm, context, question, prefix, mode, new=NEW) -> str:
    """kvpress's own pipeline: its tokenization, its prefill under the press, its greedy answer."""
    from kvpress import KVPressTextGenerationPipeline
    from transformers import QuantizedCache
    pipe = KVPressTextGenerationPipeline(model=lm.model, tokenizer=lm.tokenizer)
    # After the answer kvpress trims it off the cache for the next question; hqq and fp8 keep their
    # packed values as tuples, which that trim cannot slice. One question: nothing to trim.
    pipe._remove_answer_from_cache = lambda cache, lengths: None
    press = cache = None
    if mode.backend:
        cache = QuantizedCache(backend=mode.backend, config=lm.model.config, **(
            {} if mode.backend == "fp8" else {"nbits": mode.nbits, "residual_length": mode.residual_length,
                                              "q_group_size": 64}))
    if mode.question_aware:
        context, question = context + question, ""
    if mode.press != presses.NONE and not mode.backend:  # kvviz's configuration of the press (its window
        # shrinks below 64 only for a context under 128 tokens), counted on kvpress's own tokens
        tokens = pipe.preprocess(context, [question], prefix, 10**9)["context_ids"].shape[1]
        press = on_524(presses.make_press(mode.press, mode.ratio, tokens))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = pipe(context, question=question, answer_prefix=prefix, press=press, max_new_tokens=new, cache=cache)
    protocol.clear_masks(lm.model)
    return out["answer"]


def every_setting() -> list[shrink.ShrinkMode]:
    return sweep.modes(list(presses.ALL_PRESSES), [("quanto", 4), ("hqq", 2), ("fp8", 8)],
                       question_aware=sorted(presses.QUESTION_AWARE))


def test_tokens_are_kvpress_pipelines(lm):
    from kvpress import KVPressTextGenerationPipeline
    pipe = KVPressTextGenerationPipeline(model=lm.model, tokenizer=lm.tokenizer)
    for aware in (False, True):
        ctx, q = (CONTEXT + QUESTION, "") if aware else (CONTEXT, QUESTION)
        want = pipe.preprocess(ctx, [q], PREFIX, 10**9)
        got = protocol.split(lm.tokenizer, CONTEXT, QUESTION, PREFIX, question_aware=aware)
        assert torch.equal(got.context_ids, want["context_ids"]) and torch.equal(got.question_ids, want["questions_ids"][0])
    plain = protocol.split(lm.tokenizer, CONTEXT, QUESTION, PREFIX)
    assert QUESTION not in lm.tokenizer.decode(plain.context_ids[0])  # the question is not compressed
    assert lm.tokenizer.decode(plain.question_ids[0]).startswith(QUESTION)


@pytest.mark.slow
@pytest.mark.parametrize("mode", every_setting(), ids=lambda m: m.label())
def test_each_setting_answers_as_kvpress_pipeline(lm, mode):
    """kvviz's own run of a setting and its one-prefill shortcut both give kvpress's answer."""
    prompt = protocol.split(lm.tokenizer, CONTEXT, QUESTION, PREFIX, question_aware=mode.question_aware)
    alone = protocol.answer(lm, prompt, mode, NEW, {0})
    cache, masks = fanout.cache_for(lm, fanout.record(lm, prompt), mode)
    size, share = protocol.cache_bytes(cache), protocol.kept_share(cache, masks, prompt.context_tokens)
    shared = list(protocol.steps(lm, cache, prompt, NEW, {0}, masks))
    assert alone.text == kvpress_answer(lm, CONTEXT, QUESTION, PREFIX, mode)
    assert [s.token_id for s in shared] == alone.tokens
    assert (size, share) == (alone.kv_bytes, alone.kept_share)
    assert not protocol.masks(lm.model)  # nothing left on the modules for the next run


def test_one_item_of_the_sweep_is_kvpress_pipelines_answer(lm):
    """One RULER item both ways: the sweep's answers (one prefill, every setting) are those of
    kvpress's pipeline run once per setting, and its rows score them."""
    count = lambda text: len(lm.tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    item = ruler.generate(1, 200, count, seed=3, tasks=("niah_single",))[0]
    wanted = [shrink.ShrinkMode(), shrink.ShrinkMode(press="SnapKV", ratio=0.5),
              shrink.ShrinkMode(press="SnapKV", ratio=0.5, question_aware=True),
              shrink.ShrinkMode(press="KVzip", ratio=0.75), shrink.ShrinkMode(press="AdaKV-ExpectedAttention", ratio=0.875),
              shrink.ShrinkMode(press="StreamingLLM", ratio=0.875), shrink.ShrinkMode(backend="quanto", nbits=2)]
    record = sweep.run_item(lm, 0, item, wanted, {0}, timed=True)
    for mode in wanted:
        want = kvpress_answer(lm, item.context, item.question, item.answer_prefix, mode, item.max_new_tokens)
        assert record.answers[mode.label()].text == want, mode.label()
    timed = [a.step_ratios for label, a in record.answers.items() if label != "full cache"]
    assert all(len(r) == a.new_tokens - 1 for r, a in zip(timed, list(record.answers.values())[1:]) if r)
    result = sweep.assemble([record], wanted)
    assert [r.answers[0] for r in result.rows] == [record.answers[m.label()].text for m in wanted]


@pytest.mark.slow
def test_default_model_answers_as_kvpress_pipeline(default_lm):
    """Once on the real default model: a RULER item of 400 tokens, presses that remove rows (the
    question-aware entry, KVzip), a head-wise one and a quantized cache. (Every press and setting
    kind is also checked against kvpress on the tiny model above, for a fraction of the time.)"""
    count = lambda text: len(default_lm.tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    item = ruler.generate(1, 400, count, seed=5, tasks=("niah_multikey",))[0]
    wanted = [shrink.ShrinkMode(),
              shrink.ShrinkMode(press="SnapKV", ratio=0.75, question_aware=True), shrink.ShrinkMode(press="KVzip", ratio=0.75),
              shrink.ShrinkMode(press="AdaKV-ExpectedAttention", ratio=0.5), shrink.ShrinkMode(backend="quanto", nbits=4)]
    record = sweep.run_item(default_lm, 0, item, wanted, shrink.stop_ids(default_lm), timed=False)
    for mode in wanted:
        want = kvpress_answer(default_lm, item.context, item.question, item.answer_prefix, mode, item.max_new_tokens)
        assert record.answers[mode.label()].text == want, mode.label()
