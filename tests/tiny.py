"""Tiny randomly initialised models and a tiny tokenizer: test fixtures, no download."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                          PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM)

from kvviz.models import LoadedModel

CORPUS = [
    "The key value cache keeps the keys and values of every past token.",
    "Attention reads the cache instead of recomputing the whole prefix.",
    "Prompt length and batch size drive memory; decode is bound by bandwidth.",
    "Hello there, how are you? What is a KV cache? Tell me a story.",
]
CHAT = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@lru_cache(maxsize=1)
def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE of ~400 tokens with a chat template and an EOS token."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<eos>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")
    fast.chat_template = CHAT
    return fast


def tiny_config(kind: str):
    vocab = len(tiny_tokenizer())
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=256, eos_token_id=0, pad_token_id=1)
    if kind == "llama":  # GQA: 4 query heads share 2 KV heads
        return LlamaConfig(num_key_value_heads=2, **common)
    if kind == "qwen2":
        return Qwen2Config(num_key_value_heads=2, **common)
    if kind == "sliding":  # every layer keeps a window of 8 tokens
        return Qwen2Config(num_key_value_heads=1, use_sliding_window=True, sliding_window=8,
                           max_window_layers=0, **common)
    if kind == "gpt2":  # MHA
        return GPT2Config(vocab_size=vocab, n_embd=64, n_layer=2, n_head=4, n_positions=256,
                          eos_token_id=0, bos_token_id=0, pad_token_id=1)
    raise ValueError(kind)


def tiny_model(kind: str = "llama", seed: int = 0):
    torch.manual_seed(seed)
    classes = {"llama": LlamaForCausalLM, "qwen2": Qwen2ForCausalLM, "sliding": Qwen2ForCausalLM,
               "gpt2": GPT2LMHeadModel}
    return classes[kind](tiny_config(kind)).eval()


def tiny_lm(kind: str = "llama") -> LoadedModel:
    return LoadedModel(tiny_model(kind), tiny_tokenizer(), f"tiny-{kind}", f"tiny {kind}",
                       torch.device("cpu"), torch.float32, 0.0)


def save_tiny(folder: Path, kind: str = "llama") -> Path:
    """A loadable local model folder (config, weights, tokenizer)."""
    tiny_model(kind).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder
