"""Token text for the blocks of a watched engine, from the served model's own tokenizer file.

Live, on your own machine: when the server runs here (a loopback URL) and reports a local model
folder (`/v1/models`' root) with a `tokenizer.json`, that very file decodes the ids.
A watch file (Replay) or a hosted page never opens a path it was given: its tokenizer comes from
the allowlist, found by the served model's name in kvviz's own cache (today the embedded default
model, which `make vllm-demo` serves). Anything else shows the token ids as they are.
"""
from __future__ import annotations

import json
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


def allowlisted_tokenizer_file(model: str, allowlist: dict[str, Path]) -> Path | None:
    """The tokenizer file of a served model name on the allowlist (name -> kvviz's own model
    folder, built by the panel), else None."""
    folder = allowlist.get(model)
    path = folder / "tokenizer.json" if folder is not None else None
    return path if path is not None and path.is_file() else None


def block_text_fn(url: str, model_root: str):
    """A function token ids -> text, or None when ids must be shown as they are."""
    return decoder(tokenizer_file(url, model_root))


def allowlisted_text_fn(model: str, allowlist: dict[str, Path]):
    """The same, for a name a file or a hosted server gave: the allowlist's tokenizer or None."""
    return decoder(allowlisted_tokenizer_file(model, allowlist))


def decoder(path: Path | None):
    if path is None:
        return None
    try:
        tok = _tokenizer(str(path))
    except Exception:  # noqa: BLE001 - a tokenizer file kvviz cannot read: show ids instead
        return None
    def text(ids) -> str:
        try:
            return tok.decode(list(ids), skip_special_tokens=False)
        except Exception:  # noqa: BLE001 - ids past this vocabulary (a file's, a server's): shown as ids
            return " ".join(map(str, ids))
    return text


def chat_template(folder: Path) -> str | None:
    """The chat template shipped in a model folder (chat_template.jinja, else tokenizer_config.json)."""
    path = folder / "chat_template.jinja"
    if path.is_file():
        return path.read_text()
    try:
        template = json.loads((folder / "tokenizer_config.json").read_text()).get("chat_template")
    except (OSError, ValueError, AttributeError):
        return None
    return template if isinstance(template, str) else None


def has_chat_template(model: str, allowlist: dict[str, Path]) -> bool:
    path = allowlisted_tokenizer_file(model, allowlist)
    return path is not None and chat_template(path.parent) is not None


def chat_ids(model: str, system: str, user: str, allowlist: dict[str, Path]) -> list[int] | None:
    """The token ids vLLM's chat endpoint would compute for [system, user] with the generation
    prompt, for an allowlisted served model (its template rendered in Jinja's sandbox, its
    tokenizer without extra special tokens, as vLLM does for chat); None for any other model."""
    path = allowlisted_tokenizer_file(model, allowlist)
    template = chat_template(path.parent) if path is not None else None
    if template is None:
        return None
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    text = ImmutableSandboxedEnvironment().from_string(template).render(
        messages=messages, add_generation_prompt=True)
    return _tokenizer(str(path)).encode(text, add_special_tokens=False).ids
