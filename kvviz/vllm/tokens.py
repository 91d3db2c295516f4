"""Token text for the blocks of a watched engine, from the served model's own tokenizer file.

Only when the server runs on this machine (a loopback URL) and reports a local model folder
(`/v1/models`' root) with a `tokenizer.json`: then that very file decodes the ids. Anything
else (a remote server, a Hub id) shows the token ids as they are.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from kvviz.vllm.client import is_loopback, url_host


@lru_cache(maxsize=4)
def _tokenizer(path: str):
    from tokenizers import Tokenizer  # installed with transformers; small and torch-free

    return Tokenizer.from_file(path)


def tokenizer_file(url: str, model_root: str) -> Path | None:
    if not model_root or not is_loopback(url_host(url)):
        return None
    path = Path(model_root) / "tokenizer.json"
    return path if path.is_file() else None


def block_text_fn(url: str, model_root: str):
    """A function token ids -> text, or None when ids must be shown as they are."""
    path = tokenizer_file(url, model_root)
    if path is None:
        return None
    try:
        tok = _tokenizer(str(path))
    except Exception:  # noqa: BLE001 - a tokenizer file kvviz cannot read: show ids instead
        return None
    return lambda ids: tok.decode(list(ids), skip_special_tokens=False)
