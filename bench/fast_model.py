"""A fast engine on this machine: a tiny random Llama with the default model's tokenizer.

On a GPU the default model (SmolLM2-135M) decodes a token in a few milliseconds; on a 2-core CPU
it takes 50-70 ms, so a page that costs the model a little there can still halve it on a GPU.
This model (4 layers, hidden 64, SmolLM2's tokenizer and chat template, random weights) decodes
in about 3 ms a step on one core: the GPU's regime, measured here. Its text is nonsense; its
shape (the same tokenizer, so the same prompt length and text pieces per token) is the point.

`fast_model_dir()` builds it once into the kvviz cache folder (a fixed seed: the same weights
every time) and returns the folder, which loads like any local model (`LoadConfig(name=folder)`,
`KVVIZ_MODEL=folder`, `?model=folder`).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

FOLDER = "bench-fast-llama-4x64-v2"  # a new name whenever what `build` writes changes
SEED = 0
SHAPE = dict(num_hidden_layers=4, hidden_size=64, intermediate_size=128, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=2048)  # head_dim 16, GQA 2:1
INIT_STD = 0.3  # weights' spread: at transformers' 0.02 greedy text is one token repeated ("\n\n\n…",
# which a page shows as blank); at 0.3 the default prompt gets 256 tokens of 234 different ones
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
MARKER = "bench-fast-model.json"  # written last: the folder is complete when it is there
LABEL = "fast model, 4 layers × hidden 64"  # in the names of the rows measured on it


def fast_model_dir(root: Path | None = None) -> Path:
    """The fast model's folder under `root` (default: kvviz's cache folder), built if missing."""
    from kvviz.engine import models
    folder = (root or models.cache_root()) / FOLDER
    if (folder / MARKER).is_file():
        return folder
    tokenizer_dir = models.convert_default_model()
    work = folder.with_name(folder.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    build(tokenizer_dir, work)
    shutil.rmtree(folder, ignore_errors=True)
    work.rename(folder)
    return folder


def build(tokenizer_dir: Path, out: Path) -> None:
    """The model's config and random weights from the default model's config, plus its tokenizer."""
    import torch
    from transformers import AutoConfig, LlamaForCausalLM
    base = AutoConfig.from_pretrained(tokenizer_dir)
    config = AutoConfig.for_model("llama", vocab_size=base.vocab_size, bos_token_id=base.bos_token_id,
                                  eos_token_id=base.eos_token_id, pad_token_id=base.pad_token_id,
                                  tie_word_embeddings=True, initializer_range=INIT_STD, **SHAPE)
    torch.manual_seed(SEED)
    LlamaForCausalLM(config).eval().save_pretrained(out)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copy2(tokenizer_dir / name, out / name)
    (out / MARKER).write_text(json.dumps({"shape": SHAPE, "seed": SEED, "init_std": INIT_STD,
                                          "tokenizer": str(tokenizer_dir)}))


if __name__ == "__main__":  # `python -m bench.fast_model`: build it and print its folder
    print(fast_model_dir())
