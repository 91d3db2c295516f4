"""Tiny randomly initialised models and a tiny tokenizer: test fixtures, no download."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tokenizers import processors
from transformers import (AutoConfig, AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM)

from kvviz.engine.models import LoadedModel

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
    if kind == "llama-wide":  # a decode step of ~8 ms on one thread (2.3 ms for "llama"): a run in slow
        # motion holds the device for half a minute on any machine (tests/browser/test_visitors.py)
        return LlamaConfig(**{**common, "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 6,
                              "num_attention_heads": 8}, num_key_value_heads=4)
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
    classes = {"llama": LlamaForCausalLM, "llama-wide": LlamaForCausalLM, "qwen2": Qwen2ForCausalLM, "sliding": Qwen2ForCausalLM,
               "gpt2": GPT2LMHeadModel}
    return classes[kind](tiny_config(kind)).eval()


def tiny_lm(kind: str = "llama") -> LoadedModel:
    return LoadedModel(model=tiny_model(kind), tokenizer=tiny_tokenizer(), name=f"tiny-{kind}", label=f"tiny {kind}",
                       device=torch.device("cpu"), dtype=torch.float32, load_s=0.0)


def save_tiny(folder: Path, kind: str = "llama") -> Path:
    """A loadable local model folder (config, weights, tokenizer)."""
    tiny_model(kind).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


@lru_cache(maxsize=1)
def tiny_bos_tokenizer() -> PreTrainedTokenizerFast:
    """Like `tiny_tokenizer`, but with a BOS token its post-processor adds, and no chat template."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<eos>", "<pad>", "<bos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                       special_tokens=[("<bos>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>")


# --- one tiny model per attention family -------------------------------------------------------
# Sizes are tiny (hidden 64, 2-6 layers); windows and chunks are 6 tokens, so that a short prompt
# plus a few new tokens crosses them. Each entry: (model_type, config fields over ARCH_COMMON).
ARCH_COMMON = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=256, eos_token_id=0, pad_token_id=1,
                   bos_token_id=0, tie_word_embeddings=False)
WINDOW = 6
ARCHS = {
    "llama": ("llama", {}),  # GQA, full attention
    "qwen3": ("qwen3", dict(head_dim=16)),
    "qwen3_moe": ("qwen3_moe", dict(head_dim=16, num_experts=4, num_experts_per_tok=2,
                                    moe_intermediate_size=32)),
    "mistral": ("mistral", dict(sliding_window=WINDOW)),  # a window on every layer, no layer_types
    "phi3": ("phi3", dict(sliding_window=WINDOW)),  # likewise (Phi-3-mini: 2047)
    "gemma3_text": ("gemma3_text", dict(num_hidden_layers=6, head_dim=16, sliding_window=WINDOW)),  # 5:1 default
    "cohere2": ("cohere2", dict(num_hidden_layers=4, sliding_window=WINDOW)),  # 3:1 default
    "gpt_oss": ("gpt_oss", dict(head_dim=16, sliding_window=WINDOW, num_local_experts=4,
                                num_experts_per_tok=2)),  # sliding/full alternating; sdpa refused
    "deepseek_v3": ("deepseek_v3", dict(num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=32,
                                        qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                                        n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
                                        moe_intermediate_size=32, first_k_dense_replace=1)),  # MLA
    "deepseek_v32": ("deepseek_v32", dict(num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=32,
                                          qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                                          n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
                                          moe_intermediate_size=32, first_k_dense_replace=1, index_head_dim=16,
                                          index_n_heads=2, index_topk=4)),  # MLA + sparse-attention indexer
    "llama4_text": ("llama4_text", dict(num_hidden_layers=4, head_dim=16, attention_chunk_size=WINDOW,
                                        num_local_experts=2, intermediate_size_mlp=128)),  # 3 chunked : 1 full
    "qwen3_next": ("qwen3_next", dict(num_hidden_layers=4, head_dim=16, linear_key_head_dim=8,
                                      linear_value_head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4,
                                      num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                      shared_expert_intermediate_size=32)),  # 3 gated-delta : 1 full
    "lfm2": ("lfm2", dict(num_hidden_layers=3, layer_types=["conv", "full_attention", "conv"])),
    "jamba": ("jamba", dict(attn_layer_period=2, attn_layer_offset=1, num_experts=2, expert_layer_period=2,
                            expert_layer_offset=1, mamba_d_state=8)),  # Mamba + attention
    "bamba": ("bamba", dict(attn_layer_indices=[1], mamba_n_heads=4, mamba_d_head=32, mamba_d_state=8,
                            mamba_chunk_size=8)),  # Mamba-2 + attention
    "gemma3n_text": ("gemma3n_text", dict(num_hidden_layers=4, head_dim=16, sliding_window=WINDOW,
                                          num_kv_shared_layers=2, hidden_size_per_layer_input=8,
                                          layer_types=["sliding_attention", "full_attention"] * 2,
                                          laurel_rank=4, altup_num_inputs=2, intermediate_size=[128] * 4,
                                          activation_sparsity_pattern=[0.0] * 4)),  # KV sharing
    "gpt2": ("gpt2", {}),  # MHA
    "minimax": ("minimax", dict(head_dim=16, num_local_experts=2, num_experts_per_tok=1,
                                block_size=4)),  # lightning attention: MiniMaxCache
    "falcon_h1": ("falcon_h1", dict(head_dim=16, mamba_n_heads=4, mamba_d_head=32, mamba_d_state=8,
                                    mamba_d_ssm=None, mamba_chunk_size=8)),  # hybrid: attention and Mamba-2 in every layer
}
# More state-space families, checked for state size only (one prefill and one decode step).
STATE_ARCHS = {
    "granitemoehybrid": ("granitemoehybrid", dict(layer_types=["mamba", "attention"], mamba_n_heads=4,
                                                  mamba_d_head=32, mamba_d_state=8, mamba_chunk_size=8,
                                                  num_local_experts=2, num_experts_per_tok=1,
                                                  shared_intermediate_size=64)),
    "nemotron_h": ("nemotron_h", dict(layer_types=["linear_attention", "full_attention"], mamba_num_heads=4,
                                      mamba_head_dim=16, ssm_state_size=8, n_groups=2, head_dim=16,
                                      chunk_size=8)),
    "mamba2": ("mamba2", dict(num_heads=8, head_dim=16, state_size=8, n_groups=2, chunk_size=8)),
    "qwen3_5_text": ("qwen3_5_text", dict(layer_types=["linear_attention", "full_attention"], head_dim=16,
                                          linear_key_head_dim=8, linear_value_head_dim=8,
                                          linear_num_key_heads=2, linear_num_value_heads=4)),
    "olmo_hybrid": ("olmo_hybrid", dict(layer_types=["linear_attention", "full_attention"], head_dim=16,
                                        linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2,
                                        linear_num_value_heads=4)),
    "mamba": ("mamba", dict(state_size=8)),
    "falcon_mamba": ("falcon_mamba", dict(state_size=8)),
}


def arch_config(name: str):
    model_type, fields = ARCHS[name] if name in ARCHS else STATE_ARCHS[name]
    vocab = len(tiny_tokenizer())
    if model_type == "gpt2":
        return GPT2Config(vocab_size=vocab, n_embd=64, n_layer=2, n_head=4, n_positions=256,
                          eos_token_id=0, bos_token_id=0, pad_token_id=1)
    extra = {"vocab_size_per_layer_input": vocab} if model_type == "gemma3n_text" else {}
    return AutoConfig.for_model(model_type, vocab_size=vocab, **{**ARCH_COMMON, **extra, **fields})


@lru_cache(maxsize=None)
def arch_lm(name: str, dtype: torch.dtype = torch.float32) -> LoadedModel:
    """A tiny random model of architecture `name` (built once per session), sdpa or eager."""
    torch.manual_seed(0)
    config = arch_config(name)
    try:
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=dtype)
    except ValueError:  # e.g. gpt-oss refuses sdpa
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=dtype)
    return LoadedModel(model=model.eval(), tokenizer=tiny_tokenizer(), name=f"tiny-{name}", label=f"tiny {name}",
                       device=torch.device("cpu"), dtype=dtype, load_s=0.0)


def save_arch(folder: Path, name: str) -> Path:
    """A loadable local folder of architecture `name` (config, weights, tokenizer)."""
    arch_lm(name).model.save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder
