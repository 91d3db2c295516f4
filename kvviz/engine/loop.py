"""The generation loop: `prefill` -> `decode_step` ... with `sample` in between.

`generate` yields one tensor-free `StepEvent` per forward pass. In "cached" mode the prompt is
run once and each decode step feeds one token per sequence plus the cache; in "recompute"
mode (`use_cache=False`) every step runs the whole sequence again, which is what the cache
saves. With greedy decoding both modes produce the same tokens.
"""
from __future__ import annotations

import gc
import inspect as pyinspect
import sys
import threading
import time
import weakref
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterator

import tokenizers
import torch
import transformers
from transformers import DynamicCache, StaticCache

from kvviz.core import layout
from kvviz.core import spec
from kvviz.engine import layout_probe
from kvviz.engine import own_cache
from kvviz.engine import probe
from kvviz.core.meta import RunMeta, as_dict, read_meta, spec_record
from kvviz.core.blocks import BlockPool, cdiv
from kvviz.core.config import RunConfig
from kvviz.core.events import BlockStat, StepEvent
from kvviz.engine.hooks import attention_rows, device_sync, find_decoder_layers, timed_layers
from kvviz.engine.models import LoadedModel, stop_token_ids
from kvviz.core.errors import UserError

MODES = ("cached", "recompute")


@dataclass(kw_only=True)
class Batch:
    """Token ids and mask of the running batch, grown by one column per step."""

    ids: torch.Tensor  # (B, T) left-padded prompt + generated tokens
    mask: torch.Tensor  # (B, T) 1 for real tokens, 0 for left padding
    prompt_len: int  # T of the padded prompt
    generated: list[list[int]] = field(default_factory=list)  # per sequence
    streams: list[TextStream] = field(default_factory=list)  # the text yielded so far, per sequence
    finished: list[bool] = field(default_factory=list)


@dataclass
class TextStream:
    """One sequence's text, handed out as its tokens come: the pieces join to the tokenizer's
    decode of all of them (skip_special_tokens), and a piece is held back while that decode ends
    inside a multi-byte character (U+FFFD last), until the character completes or the sequence ends.

    With a tokenizer that `decodes_in_pieces`, each step decodes only the tokens since the last
    piece handed out (O(1) a step, as vLLM's and HF's TextStreamer's incremental detokenizers);
    with any other, the whole sequence every step (O(n) a step), which is exact for every decoder.
    """

    tokenizer: object
    in_pieces: bool  # decode only the tokens since the last piece handed out
    start: int = 0  # in_pieces: tokens whose text has been handed out
    emitted: str = ""  # whole-sequence mode: the text handed out so far

    def new_text(self, tokens: list[int], final: bool) -> str:
        """The text `tokens` (the whole sequence so far) add to what was handed out; `final` flushes
        a partial character (the sequence ended, or the run's last step)."""
        if self.in_pieces:
            piece = self.tokenizer.decode(tokens[self.start:], skip_special_tokens=True)
            if piece.endswith("\ufffd") and not final:
                return ""
            self.start = len(tokens)
            return piece
        full = self.tokenizer.decode(tokens, skip_special_tokens=True)
        if full.endswith("\ufffd") and not final:
            return ""
        delta = full[len(self.emitted):] if full.startswith(self.emitted) else full
        self.emitted = full
        return delta


def decodes_in_pieces(tokenizer) -> bool:
    """Whether decoding the tokens since the last piece handed out gives exactly what decoding the
    whole sequence would add. True for a fast tokenizer whose decoder is byte-level alone (each
    token's bytes joined, then read as UTF-8 with each cut or bad sequence as U+FFFD; added tokens
    as written) and whose decode cleans up no spaces: there the decode of tokens [0, n) is that of
    [0, k) followed by that of [k, n) whenever the first ends on a whole character (not U+FFFD),
    which is where a piece is handed out. Other decoders (SentencePiece's Metaspace strips the
    first token's space, WordPiece joins words) and the clean-up can rewrite text across tokens."""
    fast = transformers.PreTrainedTokenizerFast
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    return (isinstance(tokenizer, fast) and type(decoder) is tokenizers.decoders.ByteLevel
            and type(tokenizer).decode is fast.decode and type(tokenizer)._decode is fast._decode
            and not getattr(tokenizer, "clean_up_tokenization_spaces", True))


def uses_chat_template(tokenizer, cfg: RunConfig) -> bool:
    """Whether the prompts go through the tokenizer's chat template (asked for and available)."""
    return bool(cfg.chat_template and getattr(tokenizer, "chat_template", None))


def render_prompts(tokenizer, cfg: RunConfig) -> list[str]:
    """Each prompt as the model will read it (chat template applied when asked and available)."""
    prompts = cfg.prompt_list()
    if not uses_chat_template(tokenizer, cfg):
        return [f"{cfg.system}\n\n{p}" if cfg.system else p for p in prompts]
    system = [{"role": "system", "content": cfg.system}] if cfg.system else []
    return [tokenizer.apply_chat_template(system + [{"role": "user", "content": p}], tokenize=False,
                                          add_generation_prompt=True) for p in prompts]


def encode_prompts(tokenizer, cfg: RunConfig, device: torch.device) -> Batch:
    """Tokenize the batch's prompts, left-padded to one length."""
    if any(not p.strip() for p in cfg.prompt_list()):
        raise UserError("the prompt is empty: type something for the model to continue")
    texts = render_prompts(tokenizer, cfg)
    # A chat template writes its own special tokens; plain text gets the tokenizer's (BOS), as
    # `model.generate` callers' `tokenizer(text)` would.
    special = not uses_chat_template(tokenizer, cfg)
    rows = [tokenizer(t, add_special_tokens=special)["input_ids"] for t in texts]
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
    n = len(rows)
    in_pieces = decodes_in_pieces(tokenizer)
    return Batch(ids=ids, mask=mask, prompt_len=width, generated=[[] for _ in range(n)],
                 streams=[TextStream(tokenizer, in_pieces) for _ in range(n)], finished=[False] * n)


def position_ids(mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding: 0 at each sequence's first real token."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def run_cache(model, backend: str, max_len: int, batch: int):
    """The model's own state object when it keeps one (xLSTM's `xLSTMCache`, RWKV's state list:
    kvviz.engine.own_cache), built for `batch` sequences; else `make_cache`."""
    state = own_cache.make(model, batch)
    if state is not None and backend == "static":
        raise UserError(f"{type(model).__name__} keeps its state in an object of its own; the static "
                        "backend cannot replace it: choose the dynamic cache")
    return state if state is not None else make_cache(model, backend, max_len)


def make_cache(model, backend: str, max_len: int):
    """The cache the model's forward expects: its own class when its module ships one (MiniMax's
    `MiniMaxCache`), else a DynamicCache laid out from the config (sliding, shared, linear layers)."""
    if backend not in ("dynamic", "static"):
        raise UserError(f"unknown cache backend {backend!r}: use 'dynamic' or 'static'")
    own = model_cache_class(model)
    if backend == "static" and own is not None:
        raise UserError(f"{type(model).__name__} keeps its own cache ({own.__name__}); the static "
                         "backend cannot replace it: choose the dynamic cache")
    if backend == "static":
        return StaticCache(config=model.config, max_cache_len=max_len)
    return own() if own is not None else DynamicCache(config=model.config)


def model_cache_class(model):
    """A DynamicCache subclass defined by the model's own modeling module, if any."""
    module = sys.modules.get(type(model).__module__)
    for value in vars(module).values() if module else ():
        if (isinstance(value, type) and issubclass(value, DynamicCache) and value is not DynamicCache
                and value.__module__ == module.__name__):
            return value
    return None


def forward(model, ids, mask, positions, cache) -> torch.Tensor:
    """One forward pass; returns the last position's logits (B, vocab)."""
    with torch.inference_mode():  # every call, since Streamlit reruns use new threads
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache,
                    use_cache=cache is not None, logits_to_keep=1)
    return out.logits[:, -1, :]


def generation_inputs(model, batch: Batch, cache, first: bool) -> dict | None:
    """The forward's inputs as the model's own generation prepares them
    (`prepare_inputs_for_generation`): e.g. Mamba drops the attention mask on decode steps, XLM
    appends its mask token. `cache` None prepares a no-cache step (`generate(use_cache=False)`:
    the whole sequence every step). None when the model's preparation fails (then kvviz's plain
    inputs are used)."""
    prepare = getattr(model, "prepare_inputs_for_generation", None)
    if prepare is None:
        return None
    keep = cache is not None
    try:
        inputs = prepare(batch.ids, next_sequence_length=None if first or not keep else 1,
                         **own_cache.inputs(cache), attention_mask=batch.mask, position_ids=position_ids(batch.mask),
                         use_cache=keep, is_first_iteration=first)
    except Exception:  # noqa: BLE001 - a model's own preparation; fall back to plain inputs
        return None
    inputs = dict(inputs)
    inputs.pop("cache_position", None)
    inputs["use_cache"] = keep
    if not keep:
        inputs.pop("cache", None)
    return inputs


def forward_prepared(model, batch: Batch, cache, first: bool) -> torch.Tensor:
    """A step with the inputs `model.generate` would pass (with or without a cache)."""
    inputs = generation_inputs(model, batch, cache, first)
    if isinstance(cache, own_cache.StateList):  # RWKV: `state=` in, `out.state` kept
        fed = slice(None) if first else slice(-1, None)
        return own_cache.state_forward(model, inputs or {"input_ids": batch.ids[:, fed]}, cache)[:, -1, :]
    if inputs is None:
        fed = slice(None) if first or cache is None else slice(-1, None)
        return forward(model, batch.ids[:, fed], batch.mask, position_ids(batch.mask)[:, fed], cache)
    with torch.inference_mode():
        try:
            out = model(**inputs, logits_to_keep=1)
        except TypeError:  # a forward without logits_to_keep
            out = model(**inputs)
    return out.logits[:, -1, :]


def prefill(model, batch: Batch, cache) -> torch.Tensor:
    """Run the whole prompt once, filling the cache."""
    return forward_prepared(model, batch, cache, first=True)


def decode_step(model, batch: Batch, cache) -> torch.Tensor:
    """Feed only the newest token of each sequence; the cache supplies the rest."""
    return forward_prepared(model, batch, cache, first=False)


def recompute_step(model, batch: Batch) -> torch.Tensor:
    """Run the whole sequence again, keeping nothing (`use_cache=False`)."""
    return forward_prepared(model, batch, None, first=True)


def sample(logits: torch.Tensor, cfg: RunConfig, generator: torch.Generator) -> torch.Tensor:
    """Next token per sequence: argmax when greedy, else temperature / top-k / top-p sampling."""
    if cfg.greedy:
        return logits.argmax(dim=-1)
    logits = logits.float().cpu() / cfg.temperature
    if cfg.top_k > 0:
        kth = torch.topk(logits, min(cfg.top_k, logits.shape[-1])).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum - sorted_logits.softmax(-1) > cfg.top_p  # keep the token that crosses top_p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    choice = torch.multinomial(logits.softmax(-1), 1, generator=generator)[:, 0]
    return choice.to(logits.device)


class StepClock:
    """Times one step: CUDA events on CUDA, perf_counter elsewhere (after an MPS device sync)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.sync = device_sync(device)

    def __enter__(self):
        if self.cuda:
            self.start, self.end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            self.start.record()
        else:
            if self.sync is not None:
                self.sync()  # MPS: work queued before the step is not the step's
            self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self.end.record()
            self.end.synchronize()
            self.ms = self.start.elapsed_time(self.end)
        else:
            if self.sync is not None:
                self.sync()  # MPS: the step's kernels have finished, not only been queued
            self.ms = (time.perf_counter() - self.t0) * 1e3
        return False


def append_tokens(batch: Batch, next_ids: torch.Tensor, tokenizer, eos_ids: set[int],
                  last: bool) -> tuple[tuple, tuple]:
    """Add one token per sequence; returns (token ids, new text per sequence).

    A finished sequence keeps receiving the pad token (as `model.generate` does) and adds no text.
    On the `last` step any held-back partial character is flushed.
    """
    pad = tokenizer.pad_token_id
    tokens = [pad if done else t for t, done in zip(next_ids.tolist(), batch.finished)]
    texts = []
    for i, token in enumerate(tokens):
        if batch.finished[i]:
            texts.append("")
            continue
        batch.generated[i].append(token)
        batch.finished[i] = token in eos_ids
        texts.append(batch.streams[i].new_text(batch.generated[i], final=batch.finished[i] or last))
    column = torch.tensor(tokens, device=batch.ids.device)[:, None]
    batch.ids = torch.cat([batch.ids, column], dim=1)
    batch.mask = torch.cat([batch.mask, torch.ones_like(column)], dim=1)
    return tuple(tokens), tuple(texts)


def eos_token_ids(lm: LoadedModel) -> set[int]:
    """The ids that end an answer (kvviz.engine.models.stop_token_ids): the generation config's and
    the tokenizer's EOS and the chat template's end-of-turn token."""
    return set(stop_token_ids(lm.model, lm.tokenizer))


def block_stat(pool: BlockPool, seq_len: int, batch: int, bytes_per_token: int,
               max_len: int, static_bytes: int | None) -> BlockStat:
    """Grow the modelled paged pool to `seq_len` tokens per sequence and read it."""
    for seq in range(batch):
        pool.grow(seq, seq_len)
    used = pool.get_num_used_blocks()
    contiguous = static_bytes if static_bytes is not None else batch * max_len * bytes_per_token
    return BlockStat(block_size=pool.block_size, num_blocks=pool.num_blocks, num_used_blocks=used,
                     num_free_blocks=pool.num_free_blocks,
                     num_slots_in_last_block=pool.get_slots_in_last_block(0), paged_bytes=used * pool.block_size * bytes_per_token,
                     contiguous_bytes=contiguous, contiguous_is_real=static_bytes is not None)


def cuda_memory(device: torch.device) -> tuple[int | None, int | None]:
    if device.type != "cuda":
        return None, None
    return torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)


@dataclass(kw_only=True)
class RunPlan:
    """What a run needs before its first step; also the trace's metadata."""

    batch: Batch
    specs: tuple[layout.CacheSpec, ...]  # what each decoder layer caches (kvviz.core.layout); () if unknown
    elem_bytes: int  # bytes per cached element (the model's dtype)
    max_len: int  # prompt + max_new_tokens: what a contiguous reservation holds
    num_layers: int = 0  # decoder layers
    layout_note: str = ""  # why kvviz cannot model this cache layout (then specs is ()), else ""
    recompute_only: bool = False  # the model keeps no cache kvviz can hold: "cached" runs recompute
    caveat: str = ""  # what the model's own code does beyond a plain cache (layout_probe), else ""
    module_states: tuple = ()  # probe.ModuleState: state the model keeps on its modules, read every step

    @property
    def bytes_per_token(self) -> int:
        """Cache growth per token per sequence, all layers, caps ignored."""
        return int(layout.bytes_per_token(self.specs, self.elem_bytes))

    def meta(self, lm: LoadedModel, cfg: RunConfig) -> RunMeta:
        return read_meta({"model": lm.name, "model_label": lm.label, "device": str(lm.device),
                "dtype": str(lm.dtype).removeprefix("torch."),
                **(layout_meta(self.specs) if self.specs else unknown_layout_meta(self)),
                "elem_bytes": self.elem_bytes, "bytes_per_token": self.bytes_per_token,
                "state_bytes": int(layout.state_bytes(self.specs, self.elem_bytes)),
                "attn_implementation": attention_implementation(lm.model),
                **({"attn_fallback": lm.attn_fallback} if lm.attn_fallback else {}),
                **({"cache_caveat": self.caveat} if self.caveat else {}),
                "weight_bytes": lm.weight_bytes, "prompt_tokens": self.batch.prompt_len,
                "batch": len(self.batch.generated), "max_len": self.max_len,
                "prompt_pieces": prompt_pieces(lm.tokenizer, self.batch),
                "config": {k: v for k, v in asdict(cfg).items() if k != "extra"},
                "versions": {"torch": str(torch.__version__), "transformers": transformers.__version__}})


def layout_meta(specs) -> dict:
    """The trace's description of the cache layout (format 3): `layers`, each layer's spec as a
    typed record (kvviz.core.meta.spec_record), which every view reads back as spec objects.

    num_kv_heads / head_dim describe the widest attention layer (a latent layer: 1 head of
    rank + rope values: kvviz.core.spec.widest); layout counts the kinds for captions.
    """
    heads, head_dim = spec.widest(specs)
    return {"num_layers": len(specs), "num_kv_heads": heads, "head_dim": head_dim,
            "layers": [as_dict(spec_record(s.on_file())) for s in specs], "layout": layout.kinds_summary(specs),
            "state_modelled": not layout.unknown_states(specs)}


def prompt_pieces(tokenizer, batch: Batch) -> list[list[str | None]]:
    """Each prompt position's text, per sequence (None where left padding sits): the cache map's hover."""
    ids, mask = batch.ids[:, :batch.prompt_len].tolist(), batch.mask[:, :batch.prompt_len].tolist()
    decoded: dict[tuple, list[str]] = {}  # batch rows are often copies of one prompt
    for row in ids:
        if tuple(row) not in decoded:
            decoded[tuple(row)] = tokenizer.batch_decode([[t] for t in row])
    return [[text if real else None for text, real in zip(decoded[tuple(row)], keep)]
            for row, keep in zip(ids, mask)]


def unknown_layout_meta(plan: RunPlan) -> dict:
    """Meta for a model whose layer kinds kvviz cannot model: the run is shown without cache bytes."""
    return {"num_layers": plan.num_layers, "num_kv_heads": 0, "head_dim": 0,
            "layout": f"not modelled: {plan.layout_note}"}


def plan_layout(config) -> tuple[tuple, int, str]:
    """(specs, decoder layers, note): the layout, or () and why kvviz cannot model it."""
    try:
        specs = layout.layer_specs(config)
        return specs, len(specs), ""
    except UserError as exc:
        return (), config.get_text_config(decoder=True).num_hidden_layers, str(exc)


def attention_implementation(model) -> str:
    return str(getattr(model.config, "_attn_implementation", None) or "unknown")


def plan_run(lm: LoadedModel, cfg: RunConfig) -> RunPlan:
    """Tokenize and check the request against the model's limits."""
    if cfg.max_new_tokens < 1:
        raise UserError("max new tokens must be at least 1")
    batch = encode_prompts(lm.tokenizer, cfg, lm.device)
    max_len = batch.prompt_len + cfg.max_new_tokens
    limit = getattr(lm.model.config.get_text_config(decoder=True), "max_position_embeddings", None)
    if limit and max_len > limit:
        raise UserError(f"prompt ({batch.prompt_len} tokens) + max new tokens ({cfg.max_new_tokens})"
                         f" = {max_len} exceeds this model's context of {limit} tokens")
    if cfg.attention and attention_implementation(lm.model) != "eager":
        raise UserError("attention over the cache needs the model loaded with eager attention; this "
                         f"one uses {attention_implementation(lm.model)}, which returns no weights")
    elem = torch.finfo(lm.dtype).bits // 8
    specs, num_layers, note = plan_layout(lm.model.config)
    if not takes_cache(lm.model):
        note = (f"{type(lm.model).__name__}.forward takes no cache argument: kvviz cannot keep its "
                "state, so the cached run recomputes every step")
        return RunPlan(batch=batch, specs=(), elem_bytes=elem, max_len=max_len, num_layers=num_layers,
                       layout_note=note, recompute_only=True)
    if not specs:
        return RunPlan(batch=batch, specs=specs, elem_bytes=elem, max_len=max_len, num_layers=num_layers,
                       layout_note=note)
    probed = probed_layout(lm.model, specs, elem, probe_run(lm.model, batch, num_layers))
    if probed.note == layout_probe.NO_CACHE:
        return RunPlan(batch=batch, specs=(), elem_bytes=elem, max_len=max_len, num_layers=num_layers,
                       layout_note=probed.note, recompute_only=True)
    return RunPlan(batch=batch, specs=probed.specs, elem_bytes=elem, max_len=max_len, num_layers=num_layers,
                   caveat=probed.caveat or probed.note,
                   module_states=probed.module_states)


_PROBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {(specs, elem): Probed}
_PROBED_LOCK = threading.Lock()


def probed_layout(model, specs: tuple, elem: int, run: Callable[[], layout_probe.ProbeRun]) -> layout_probe.Probed:
    """layout_probe.measured_specs of `model`, probed once per model and field-name layout: the
    sizes a cache takes per token do not depend on which tokens, so later runs reuse the first
    probe's. The probe is three short forwards, each as long as a decode step: on the default
    model at one CPU thread the Live page's click waited ~1 s for them before its first token
    (once for the page's plan, again as each run started). A probe that failed is tried again."""
    key = (specs, elem)
    with _PROBED_LOCK:
        known = _PROBED.get(model, {}).get(key)
    if known is None:
        known = layout_probe.measured_specs(specs, run, elem)
        if known.note in ("", layout_probe.NO_CACHE):
            with _PROBED_LOCK:
                _PROBED.setdefault(model, {})[key] = known
    return known


def takes_cache(model) -> bool:
    """Whether the model's forward accepts a transformers cache (`cache` / `past_key_values`)."""
    try:
        params = pyinspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return True
    return "cache" in params or "past_key_values" in params or own_cache.keeps_state(model)


def probe_run(model, batch: Batch, num_layers: int) -> Callable[[], layout_probe.ProbeRun]:
    """For layout_probe: a prefill of PREFILL_TOKENS copies of the first prompt's last token, then
    one decode step, batch 1, every cache layer read after each; module tensors the decode step
    rewrote; its logits against a full forward. (Two prefill tokens, not one: RecurrentGemma takes a
    one-token prefill for a decode step and reads the state an earlier run left on its modules.)
    On the meta device (a config without weights) there are shapes but no values: the reads only."""
    def run() -> layout_probe.ProbeRun:
        ids = probe_tokens(batch)
        probed = Batch(ids=ids, mask=torch.ones_like(ids), prompt_len=ids.shape[1])
        cache = run_cache(model, "dynamic", layout_probe.PREFILL_TOKENS + 2, 1)
        if ids.is_meta:  # the model's plain forward: its input preparation may read values
            return meta_probe(model, ids, cache, num_layers)
        prefill(model, probed, cache)
        first = probe.read_cache(cache, num_layers, beyond=True)
        before = probe.module_tensors(model)
        cached = decode_step(model, grown(probed), cache).float()
        states = probe.changed_module_states(model, before, decoder_layers(model, num_layers))
        first = probe.add_module_states(first, states)  # fixed-size: as held after the decode step
        second = probe.add_module_states(probe.read_cache(cache, num_layers, beyond=True), states)
        drift = (cached - recompute_step(model, probed).float()).abs().max() / cached.abs().max().clamp(min=1e-9)
        return layout_probe.ProbeRun(first, second, num_layers, states, float(drift))
    return run


def probe_tokens(batch: Batch) -> torch.Tensor:
    """The probe's prefill (1, PREFILL_TOKENS): the first prompt's last tokens (never padding: the
    left padding sits before them), its last token repeated where the prompt is shorter."""
    n = layout_probe.PREFILL_TOKENS
    last = batch.ids[:1, -n:]
    return last if last.shape[1] == n and bool(batch.mask[:1, -n:].all()) else batch.ids[:1, -1:].repeat(1, n)


def meta_probe(model, ids: torch.Tensor, cache, num_layers: int) -> layout_probe.ProbeRun:
    """The probe's two steps on the meta device, as plain forwards (shapes only)."""
    reads = []
    for fed in (ids, ids[:, :1]):
        with torch.inference_mode():
            if isinstance(cache, own_cache.StateList):
                own_cache.state_forward(model, {"input_ids": fed}, cache)
            else:
                model(input_ids=fed, cache=cache, use_cache=True)
        reads.append(probe.read_cache(cache, num_layers, beyond=True))
    seen = ids.shape[1]
    if any(r.tokens not in (0, n) for n, read in ((seen, reads[0]), (seen + 1, reads[1])) for r in read):
        raise probe.UnreadableCache("its code adds positions of its own (it reads token values, which meta tensors lack)")
    return layout_probe.ProbeRun(reads[0], reads[1], num_layers)


def grown(batch: Batch) -> Batch:
    """The probe batch with one more token (a copy of its last), in place."""
    batch.ids, batch.mask = torch.cat([batch.ids, batch.ids[:, -1:]], 1), torch.cat([batch.mask, batch.mask[:, -1:]],
                                      1)
    return batch


def run_step(model, batch: Batch, cache, step: int) -> torch.Tensor:
    if cache is None:
        return recompute_step(model, batch)
    return prefill(model, batch, cache) if step == 0 else decode_step(model, batch, cache)


@dataclass
class Measured:
    """The cache after one step: per-layer stats and totals (all zero / None without a cache)."""

    layers: tuple
    kv_bytes: int = 0  # logical bytes: numel x element size, K + V + state
    formula_bytes: int = 0
    storage_bytes: int | None = None  # allocations pinned, each storage once
    note: str = ""  # why the cache could not be read, else ""


def measure_cache(cache, plan: RunPlan, forward_ms: list[float]) -> Measured:
    """Read the cache after a step and put the layout's formula beside it.

    A cache kvviz cannot read yields a note naming its class and zero bytes: the run goes on.
    """
    if cache is None:
        return Measured(probe.empty_layer_stats(forward_ms))
    if plan.layout_note:
        return Measured(probe.empty_layer_stats(forward_ms), note=f"{plan.layout_note}: cache bytes not shown")
    tokens = plan.batch.ids.shape[1] - 1  # the newest token is not in the cache yet
    size = len(plan.batch.generated)
    try:
        read = probe.add_module_states(probe.read_cache(cache, len(plan.specs)), plan.module_states)
    except probe.UnreadableCache as exc:
        formula = layout.formula_bytes(plan.specs, tokens, size, plan.elem_bytes)
        return Measured(probe.empty_layer_stats(forward_ms), 0, formula, None, str(exc))
    layers = probe.cache_layer_stats(read, plan.specs, tokens, size, plan.elem_bytes, forward_ms)
    kv_bytes = sum(s.k_bytes + s.v_bytes + s.state_bytes for s in layers)
    formula = sum(s.formula_bytes for s in layers)  # layout.formula_bytes: each spec's bytes_at, summed
    return Measured(layers, kv_bytes, formula, probe.storage_bytes(read))


def generate(lm: LoadedModel, cfg: RunConfig, mode: str = "cached",
             should_stop: Callable[[], bool] | None = None,
             inspect: Callable[[object], None] | None = None) -> Iterator[StepEvent]:
    """Yield one StepEvent per forward pass until max_new_tokens, EOS everywhere, or should_stop().

    `inspect`, if given, is called with the live cache object (None in recompute mode) after each
    step, before its event is yielded: tests walk it to count storage independently of the probe.
    """
    if mode not in MODES:
        raise UserError(f"unknown mode {mode!r}: use one of {MODES}")
    plan = plan_run(lm, cfg)
    model, batch, size = lm.model, plan.batch, len(plan.batch.generated)
    keeps_cache = mode == "cached" and not plan.recompute_only
    cache = run_cache(model, cfg.cache_backend, plan.max_len, size) if keeps_cache else None
    pool = BlockPool(num_blocks=size * cdiv(plan.max_len, cfg.block_size), block_size=cfg.block_size)
    generator = torch.Generator().manual_seed(cfg.seed)
    eos = eos_token_ids(lm) if cfg.stop_on_eos else set()
    per_token = plan.bytes_per_token
    layers = decoder_layers(model, plan.num_layers)
    capture = attention_rows(layers) if cfg.attention and cache is not None else nullcontext()
    held = probe.held_module_states(plan.module_states)  # as the prefill will find them
    with timed_layers(layers, lm.device.type == "cuda", device_sync(lm.device)) as timer, capture as attention:
        for step in range(cfg.max_new_tokens):
            if should_stop is not None and should_stop():
                return
            fed = batch.ids.shape[1] if (step == 0 or cache is None) else 1
            if cache is not None:  # a race's no-cache run rewrites state kept on modules
                probe.restore_module_states(plan.module_states, held)
            with StepClock(lm.device) as clock:
                next_ids = sample(run_step(model, batch, cache, step), cfg, generator)
            held = probe.held_module_states(plan.module_states)
            tokens, texts = append_tokens(batch, next_ids, lm.tokenizer, eos,
                                          last=step == cfg.max_new_tokens - 1)
            m = measure_cache(cache, plan, timer.take_ms())
            if mode == "cached" and cache is None:
                m.note = plan.layout_note  # recompute only: say so on every step
            if inspect is not None:
                inspect(cache)
            blocks = None
            if cache is not None:
                static = m.kv_bytes if probe.is_static(cache) else None
                blocks = block_stat(pool, batch.ids.shape[1] - 1, size, per_token, plan.max_len, static)
            allocated, reserved = cuda_memory(lm.device)
            yield StepEvent(mode=mode, phase="prefill" if step == 0 else "decode", step=step,
                            token_ids=tokens, texts=texts, finished=tuple(batch.finished), step_ms=clock.ms,
                            seq_len=batch.ids.shape[1], positions=fed * size, kv_bytes=m.kv_bytes,
                            formula_bytes=m.formula_bytes, layers=m.layers, blocks=blocks,
                            cuda_allocated_bytes=allocated, cuda_reserved_bytes=reserved,
                            storage_bytes=m.storage_bytes, cache_note=m.note,
                            attention=attention and attention.take(batch.ids.shape[1] - 1, probe.is_static(cache)))
            if all(batch.finished):
                return


def decoder_layers(model, num_layers: int) -> torch.nn.ModuleList:
    """The decoder layers to time, or none (no per-layer times) when the model's layers are not one
    list of the decoder count (looped layers, two attention sublayers per decoder layer)."""
    try:
        return find_decoder_layers(model, num_layers)
    except UserError:
        return torch.nn.ModuleList()


def free_device_memory(device: torch.device) -> None:
    """Return cached allocator blocks after a run (matters after an out-of-memory error)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def run_meta(lm: LoadedModel, cfg: RunConfig) -> RunMeta:
    """The facts a trace records about a run, computed without running it."""
    return plan_run(lm, cfg).meta(lm, cfg)
