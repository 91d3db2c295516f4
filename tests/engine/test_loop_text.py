"""The streamed text (kvviz.engine.loop.TextStream): decoding only the tokens since the last piece
handed out yields exactly the pieces that decoding the whole sequence every step yields."""
import copy
import random
from dataclasses import replace

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from kvviz.core.config import RunConfig
from kvviz.engine import loop
from tiny import CORPUS, tiny_bos_tokenizer, tiny_lm, tiny_tokenizer

TEXT = ("Hello, wörld! naïve café, déjà vu. 日本語のテキスト 🎉🎉 emoji 👩‍👩‍👧 and ∑ maths ≤ ∞; "
        "Ελληνικά, русский, עברית, العربية.\n\n  spaces\tand tabs … — “quotes” «guillemets» ")


def whole_decode_pieces(tokenizer, ids: list[int], ends: int) -> list[str]:
    """The specification: the pieces of kvviz's streaming before TextStream, which decoded the
    whole sequence every step and held a piece back while it ended in U+FFFD (not at `ends`, the
    step the sequence ended on)."""
    emitted, pieces = "", []
    for n in range(1, ends + 1):
        full = tokenizer.decode(ids[:n], skip_special_tokens=True)
        if full.endswith("\ufffd") and n != ends:
            pieces.append("")
            continue
        pieces.append(full[len(emitted):] if full.startswith(emitted) else full)
        emitted = full
    return pieces


def streamed_pieces(tokenizer, ids: list[int], ends: int) -> list[str]:
    stream = loop.TextStream(tokenizer, loop.decodes_in_pieces(tokenizer))
    return [stream.new_text(ids[:n], final=n == ends) for n in range(1, ends + 1)]


def metaspace_tokenizer() -> PreTrainedTokenizerFast:
    """A SentencePiece-style BPE: its decoder strips the space of a text's first token."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    tok.train_from_iterator(CORPUS * 4, trainers.BpeTrainer(vocab_size=300, special_tokens=["<eos>", "<pad>"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")


def byte_ids(tokenizer) -> list[int]:
    """The ids of the single-byte tokens of bytes 0x80-0xFF (pieces of multi-byte characters)."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    ids = [tokenizer.convert_tokens_to_ids(c) for c in alphabet]
    return [i for i, c in zip(ids, alphabet) if i is not None and i != tokenizer.unk_token_id and ord(c) > 0x7F]


def sequences(tokenizer, seed: int) -> list[list[int]]:
    """Long outputs: real text (with special tokens inside), and random ids weighted towards lone
    bytes of multi-byte characters and special tokens."""
    rng = random.Random(seed)
    real = tokenizer(TEXT * 3, add_special_tokens=False)["input_ids"]
    special = list(tokenizer.all_special_ids)
    with_specials = list(real)
    for at in sorted(rng.sample(range(len(real)), 12), reverse=True):
        with_specials.insert(at, rng.choice(special))
    bytes_ = byte_ids(tokenizer) or list(range(len(tokenizer)))
    randoms = [[rng.choice(bytes_) if r < 0.5 else rng.choice(special) if r < 0.6 else rng.randrange(len(tokenizer))
                for r in (rng.random() for _ in range(400))] for _ in range(2)]
    return [real, with_specials, *randoms]


def tokenizer_named(request, name: str):
    if name == "default model's":  # the real default model: a slow test
        return request.getfixturevalue("default_lm").tokenizer
    return {"tiny": tiny_tokenizer, "tiny with BOS": tiny_bos_tokenizer, "metaspace": metaspace_tokenizer}[name]()


IN_PIECES = {"tiny": True, "tiny with BOS": True, "default model's": True, "metaspace": False}


@pytest.mark.parametrize("name", ["tiny", "tiny with BOS", pytest.param("default model's", marks=pytest.mark.slow),
                                  "metaspace"])
def test_streamed_pieces_are_the_whole_decodes(request, name):
    """Every tokenizer the tests have, over long real and random outputs, ended at the last token
    (the run's last step) and early (an EOS): the same pieces, step by step, as decoding the whole
    sequence; some pieces were held back (a multi-byte character cut) and released later. The
    byte-level BPEs decode in pieces, the SentencePiece-style one the whole sequence."""
    tokenizer = tokenizer_named(request, name)
    assert loop.decodes_in_pieces(tokenizer) == IN_PIECES[name]
    held = 0
    for seed, ids in enumerate(sequences(tokenizer, seed=len(name))):
        for ends in (len(ids), random.Random(seed).randrange(len(ids) // 2, len(ids))):
            expected = whole_decode_pieces(tokenizer, ids, ends)
            assert streamed_pieces(tokenizer, ids, ends) == expected, (name, seed, ends)
            assert "".join(expected) == tokenizer.decode(ids[:ends], skip_special_tokens=True)
            held += sum(1 for a, b in zip(expected, expected[1:]) if a == "" and b)
    assert held > 10


def test_rewriting_decoders_decode_the_whole_sequence():
    """For a SentencePiece-style decoder and for a decode that cleans up spaces, a piece's decode is
    not what the whole decode adds (shown here): they decode the whole sequence every step."""
    meta = metaspace_tokenizer()
    ids = meta("the cat sat on the mat", add_special_tokens=False)["input_ids"]
    assert any(meta.decode(ids[:k]) + meta.decode(ids[k:]) != meta.decode(ids) for k in range(1, len(ids)))
    assert not loop.decodes_in_pieces(meta)
    cleaning = copy.deepcopy(tiny_tokenizer())
    cleaning.clean_up_tokenization_spaces = True
    assert loop.decodes_in_pieces(tiny_tokenizer()) and not loop.decodes_in_pieces(cleaning)


class DecodeSpy:
    """Records the length of every id list a tokenizer decodes (an instance attribute, so the
    tokenizer's class and `decodes_in_pieces` are unchanged)."""

    def __init__(self, tokenizer):
        self.lengths, self.decode = [], tokenizer.decode
        tokenizer.decode = self

    def __call__(self, ids, **kwargs):
        self.lengths.append(len(ids))
        return self.decode(ids, **kwargs)


def test_a_run_decodes_only_the_newest_tokens():
    """A 64-token run of a byte-level tokenizer decodes a few tokens a step, not the whole answer
    (which made the engine's work between steps grow with the answer: O(n²) a run)."""
    lm = tiny_lm()
    tokenizer = copy.deepcopy(lm.tokenizer)
    spy = DecodeSpy(tokenizer)
    cfg = RunConfig(prompts=("the cat",), max_new_tokens=64, stop_on_eos=False, temperature=2.0)
    events = list(loop.generate(replace(lm, tokenizer=tokenizer), cfg))
    assert len(events) == 64 and len(spy.lengths) == 64
    assert max(spy.lengths) <= 8
    ids = [e.token_ids[0] for e in events]
    assert [e.texts[0] for e in events] == whole_decode_pieces(lm.tokenizer, ids, len(ids))


def test_a_batch_of_two_streams_each_sequence_as_its_whole_decode():
    """Batch of 2 through `append_tokens`: one sequence ends on EOS right after a cut character
    (flushed as U+FFFD, then pad tokens and no text), the other runs to the last step, which
    flushes its own cut character."""
    tokenizer = tiny_tokenizer()
    batch = loop.encode_prompts(tokenizer, RunConfig(prompts=("the cat", "a dog sat")), torch.device("cpu"))
    cut = tokenizer("é", add_special_tokens=False)["input_ids"][:1]
    assert tokenizer.decode(cut).endswith("\ufffd")
    text = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    rows = [text[:20] + cut + [eos], text + cut]
    steps = len(rows[1])
    out = [loop.append_tokens(batch, torch.tensor([r[n] if n < len(r) else 5 for r in rows]), tokenizer, {eos},
                              last=n == steps - 1) for n in range(steps)]
    pieces = [[texts[i] for _, texts in out] for i in range(2)]
    assert pieces[0] == whole_decode_pieces(tokenizer, rows[0], len(rows[0])) + [""] * (steps - len(rows[0]))
    assert pieces[1] == whole_decode_pieces(tokenizer, rows[1], steps)
    assert pieces[0][len(rows[0]) - 1] == "\ufffd" and pieces[1][-1].endswith("\ufffd")
    assert [tokens[0] for tokens, _ in out][len(rows[0]):] == [tokenizer.pad_token_id] * (steps - len(rows[0]))
    assert batch.finished == [True, False]


@pytest.mark.slow  # loads the real default model
def test_the_default_model_streams_its_whole_decode(default_lm):
    """A real answer of the default model (accents and CJK asked for): the same pieces."""
    cfg = RunConfig(prompts=("Écris « déjà vu » et 日本語 trois fois:",), max_new_tokens=24, stop_on_eos=True)
    events = list(loop.generate(default_lm, cfg))
    ids = [e.token_ids[0] for e in events]
    assert [e.texts[0] for e in events] == whole_decode_pieces(default_lm.tokenizer, ids, len(ids))
    assert any(ord(c) > 0x7F for c in "".join(e.texts[0] for e in events))
