"""What one decoder layer caches: one small frozen class per kind, each owning its own arithmetic.

| class        | kind    | vLLM spec                  | tokens held after n     | per token per sequence  |
|--------------|---------|----------------------------|-------------------------|-------------------------|
| FullSpec     | full    | FullAttentionSpec          | n                       | K + V: 2 × heads × dim  |
| SlidingSpec  | sliding | SlidingWindowSpec          | min(n, window − 1)      | same                    |
| ChunkedSpec  | chunked | ChunkedLocalAttentionSpec  | min(n, chunk − 1)       | same                    |
| CompressedSpec | sliding | SlidingWindowSpec (kvviz: DeepSeek-V4) | min(n, window − 1) | same + compressor values |
| LatentSpec   | latent  | MLAAttentionSpec           | n                       | rank + rope (one "head")|
| StateSpec    | state   | MambaSpec                  | 0                       | 0: a fixed state        |
| SharedSpec   | shared  | (KV sharing)               | 0 (held by its source)  | 0                       |

A hybrid layer (attention and a recurrent state in one layer, e.g. Falcon-H1) is an attention spec
whose state fields are set: its `state_part` is the StateSpec of that state, and its bytes are the
attention's plus the state's. Everything that sizes a layer (the live formula, the cache map, the
per-layer chart's groups and caps, the sweep, the trace, the planner) calls the methods here, so each
rule is written once. Values are elements: multiply by the cache's element size (the model's dtype);
`state_float32_values` stay float32 whatever the dtype (the SSM states of the Mamba families).

The field names are the trace's (docs/trace-format.md, format 3) and the planner's. `kind` stays a
field so that `CacheSpec("sliding", ...)` and `dataclasses.replace(spec, kind="full", token_cap=None)`
build the class of the kind asked for. Pure Python: no torch, no transformers, no pandas.
"""
from __future__ import annotations

from collections import Counter
import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from kvviz.core.errors import UserError

FULL, SLIDING, CHUNKED, LATENT, STATE, SHARED = "full", "sliding", "chunked", "latent", "state", "shared"
KINDS = (FULL, SLIDING, CHUNKED, LATENT, STATE, SHARED)
FLOAT32_BYTES = 4


@dataclass(frozen=True, kw_only=True)
class CacheSpec:
    """One decoder layer's cache. Build it by kind (`CacheSpec(kind="full", kv_heads=8, values_per_token=2048)`) or by class
    (`FullSpec(kv_heads=8, values_per_token=2048)`); the instance is always its kind's class."""

    kind: str = ""  # one of KINDS; empty = the class's own kind
    kv_heads: int = 0  # heads cached per token (1 for latent; 0 for state/shared)
    values_per_token: int = 0  # K+V values one token of one sequence adds (0 for state/shared)
    token_cap: int | None = None  # sliding window / chunk size; None = grows without bound
    state_values: int = 0  # fixed values per sequence in the model's dtype, else 0
    shared_with: int | None = None  # shared: the layer whose KV it reuses
    state_float32_values: int = 0  # fixed values per sequence kept in float32 whatever the dtype
    state_known: bool = True  # False: a state of a family whose size kvviz does not know
    latent_rope: int = 0  # latent: the rope-key part of values_per_token (the rest is kv_lora_rank)
    index_values: int = 0  # sparse-attention indexer keys per token, part of values_per_token (DSA)
    conv_values: int = 0  # of state_values, a convolution window of conv_kernel columns
    conv_kernel: int = 0
    state_family: str = ""  # the state's mixer in vLLM's terms (mamba1, mamba2, gated_delta, …)
    state_pinned: bool = False  # the config pins the float32 state's dtype (else vLLM uses the model's)
    key_values_per_token: int | None = None  # of values_per_token, K's part when K and V differ (measured)
    fixed_tokens: int = 0  # positions the model's own code adds to every sequence (CPM-Ant's prompt; measured)

    KIND: ClassVar[str] = ""
    TENSORS: ClassVar[tuple[str, str]] = ("K", "V")  # what its two tensor rows hold (cache map)

    def __new__(cls, *, kind: str = "", **kwargs):
        target = _CLASSES.get(kind or cls.KIND)
        if target is None:
            raise UserError(f"unknown cache kind {kind!r}: kvviz knows {', '.join(KINDS)}")
        if issubclass(cls, target):  # a kind's refinement (CompressedSpec): keep it
            return object.__new__(cls)
        if not issubclass(target, cls):  # replace(sliding, kind="full"): build the other class
            return target(kind=kind, **kwargs)
        return object.__new__(target)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", self.KIND)
        self._check()

    def _check(self) -> None:
        if self.token_cap is not None:
            raise UserError(f"a {self.kind} layer has no token cap, got {self.token_cap}")

    # --- tokens ---------------------------------------------------------------------------------

    def tokens_held(self, tokens: int) -> int:
        """Tokens transformers' dynamic cache holds for this layer after `tokens` positions."""
        return tokens + self.fixed_tokens if tokens > 0 else 0

    @property
    def max_tokens_held(self) -> int | None:
        """The most tokens this layer ever holds: None when it grows with every token."""
        return None

    @property
    def cap_label(self) -> str:
        """"window 4,096" / "chunk 8,192" where the layer stops growing, else ""."""
        return ""

    # --- values and bytes -----------------------------------------------------------------------

    @property
    def k_values_per_token(self) -> int:
        """Values one token adds to the first tensor row (K; indexer keys count as keys)."""
        if self.key_values_per_token is not None:
            return self.key_values_per_token
        kv = self.values_per_token - self.index_values
        return kv // 2 + self.index_values

    @property
    def v_values_per_token(self) -> int:
        return self.values_per_token - self.k_values_per_token

    def bytes_per_token(self, elem_bytes: float) -> float:
        """Bytes one token of one sequence adds to this layer, caps ignored."""
        return self.values_per_token * elem_bytes

    def token_bytes(self, tokens: int, elem_bytes: float, batch: int = 1) -> float:
        """The K and V (or latent) bytes held after `tokens` positions, whole batch."""
        return self.values_per_token * self.tokens_held(tokens) * batch * elem_bytes

    def tensor_bytes(self, tokens: int, elem_bytes: float, batch: int = 1) -> tuple[float, float]:
        """(first row, second row) bytes after `tokens` positions: K and V, latent and rope key."""
        held = self.tokens_held(tokens) * batch * elem_bytes
        return self.k_values_per_token * held, self.v_values_per_token * held

    @property
    def has_state(self) -> bool:
        return self.state_values > 0 or self.state_float32_values > 0

    @property
    def state_part(self) -> StateSpec | None:
        """The recurrent state this layer keeps besides its tokens (a hybrid layer's), else None."""
        if not (self.has_state or not self.state_known):
            return None
        return StateSpec(state_values=self.state_values, state_float32_values=self.state_float32_values,
                         state_known=self.state_known, conv_values=self.conv_values,
                         conv_kernel=self.conv_kernel, state_family=self.state_family,
                         state_pinned=self.state_pinned)

    def state_bytes(self, elem_bytes: float) -> float:
        """Fixed bytes per sequence: the state's plain values in the model's dtype + its float32 part."""
        return self.state_values * elem_bytes + self.state_float32_values * FLOAT32_BYTES

    def bytes_at(self, tokens: int, elem_bytes: float, batch: int = 1) -> int:
        """This layer's cache after `tokens` positions: tokens held × values × batch × bytes, plus
        the state × batch once a token was seen, plus what a compressor keeps (CompressedSpec).
        The live formula, per layer."""
        state = self.state_bytes(elem_bytes) * batch if tokens > 0 else 0
        extra = self.compressor_values(tokens) * elem_bytes * batch
        return int(self.token_bytes(tokens, elem_bytes, batch) + state + extra)

    def compressor_values(self, tokens: int) -> int:
        """Values per sequence a compressor keeps besides the tokens held (0: no compressor)."""
        return 0

    def values_held(self, tokens: int) -> int:
        """Values one sequence holds in this layer after `tokens` positions, its fixed state aside:
        the tokens held × values per token, plus a compressor's (the planner's per-layer count)."""
        return self.values_per_token * self.tokens_held(tokens) + self.compressor_values(tokens)

    def on_file(self) -> CacheSpec:
        """The spec as a trace's layer record holds it (a CompressedSpec: its window layer)."""
        return self

    def max_tensor_bytes(self, max_len: int, elem_bytes: float, batch: int = 1) -> int:
        """The largest one tensor (K, V or state) of this layer gets in a run of `max_len` positions."""
        k, v = self.tensor_bytes(max_len, elem_bytes, batch)
        return int(max(k, v, self.state_bytes(elem_bytes) * batch))

    # --- words ----------------------------------------------------------------------------------

    def label(self) -> str:
        """"full", "sliding 4096", "chunked 8192", "latent 512+64", "state", "shared ← 18"."""
        index = f" + index {self.index_values}" if self.index_values else ""
        return self._base_label(index) + (" + state" if self.state_part is not None else "")

    def _base_label(self, index: str) -> str:
        return self.kind + index


class _Windowed(CacheSpec):
    """A layer that keeps only the last `token_cap` − 1 tokens (with the next token, the window)."""

    CAP_WORD: ClassVar[str] = ""

    def _check(self) -> None:
        if not isinstance(self.token_cap, int) or self.token_cap < 1:
            raise UserError(f"a {self.kind} layer needs a {self.CAP_WORD} of at least 1 token, "
                            f"got {self.token_cap}")

    def tokens_held(self, tokens: int) -> int:
        return min(tokens + self.fixed_tokens, self.token_cap - 1) if tokens > 0 else 0

    @property
    def max_tokens_held(self) -> int:
        return self.token_cap - 1

    @property
    def cap_label(self) -> str:
        return f"{self.CAP_WORD} {self.token_cap:,}"

    def _base_label(self, index: str) -> str:
        return f"{self.kind} {self.token_cap}"


@dataclass(frozen=True)
class FullSpec(CacheSpec):
    KIND: ClassVar[str] = FULL


@dataclass(frozen=True)
class SlidingSpec(_Windowed):
    KIND: ClassVar[str] = SLIDING
    CAP_WORD: ClassVar[str] = "window"


@dataclass(frozen=True)
class ChunkedSpec(_Windowed):
    KIND: ClassVar[str] = CHUNKED
    CAP_WORD: ClassVar[str] = "chunk"


@dataclass(frozen=True)
class CompressedSpec(SlidingSpec):
    """DeepSeek-V4's compressed attention (transformers' DeepseekV4HCACache / DeepseekV4CSACache): a
    sliding window of K (= V, one tensor) plus a compressor that turns every `compress_rate` tokens
    into one entry of `compressed_values`, buffering the tokens of the unfinished window
    (`buffer_values` each: the projections and their gates) and, for the overlapping CSA windows,
    keeping the last window's first half once one closed (`overlap_values`). All in the model's dtype.
    After n tokens: n // rate entries, n % rate buffered tokens, the overlap once n >= rate."""

    compress_rate: int = 0
    compressed_values: int = 0
    buffer_values: int = 0
    overlap_values: int = 0

    def _check(self) -> None:
        super()._check()
        if not isinstance(self.compress_rate, int) or self.compress_rate < 1:
            raise UserError(f"a compressed layer needs a compress rate of at least 1, got {self.compress_rate}")

    def compressor_values(self, tokens: int) -> int:
        if tokens <= 0:
            return 0
        entries, buffered = divmod(tokens, self.compress_rate)
        overlap = self.overlap_values if entries else 0
        return entries * self.compressed_values + buffered * self.buffer_values + overlap

    def on_file(self) -> CacheSpec:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(SlidingSpec)}
        return SlidingSpec(**fields)

    def _base_label(self, index: str) -> str:
        return f"{super()._base_label(index)} + compressed ÷{self.compress_rate}"


@dataclass(frozen=True)
class LatentSpec(CacheSpec):
    """MLA: the latent (kv_lora_rank, plus any indexer keys) as "keys", the rope key as "values"."""

    KIND: ClassVar[str] = LATENT
    TENSORS: ClassVar[tuple[str, str]] = ("latent (MLA)", "rope key (MLA)")

    def _check(self) -> None:
        super()._check()
        if self.latent_rope + self.index_values > self.values_per_token:
            raise UserError(f"a latent layer's rope key ({self.latent_rope}) and indexer keys "
                            f"({self.index_values}) exceed its {self.values_per_token} values per token")

    @property
    def k_values_per_token(self) -> int:
        return self.values_per_token - self.latent_rope

    def _base_label(self, index: str) -> str:
        rank = self.values_per_token - self.latent_rope - self.index_values
        return f"latent {rank}+{self.latent_rope}{index}"


@dataclass(frozen=True)
class StateSpec(CacheSpec):
    """A fixed-size recurrent state (Mamba, DeltaNet, short conv): no tokens, the same bytes at any length."""

    KIND: ClassVar[str] = STATE
    TENSORS: ClassVar[tuple[str, str]] = ("state", "state")

    def tokens_held(self, tokens: int) -> int:
        return 0

    @property
    def max_tokens_held(self) -> int:
        return 0

    @property
    def state_part(self) -> StateSpec:
        return self

    def label(self) -> str:
        return STATE


@dataclass(frozen=True)
class SharedSpec(CacheSpec):
    """A layer that reads another layer's KV (Gemma 3n): it holds nothing of its own."""

    KIND: ClassVar[str] = SHARED
    TENSORS: ClassVar[tuple[str, str]] = ("shared", "shared")

    def tokens_held(self, tokens: int) -> int:
        return 0

    @property
    def max_tokens_held(self) -> int:
        return 0

    def label(self) -> str:
        return f"shared ← {self.shared_with}"


_CLASSES: dict[str, type[CacheSpec]] = {c.KIND: c for c in (FullSpec, SlidingSpec, ChunkedSpec, LatentSpec,
                                                             StateSpec, SharedSpec)}


# --- a model's layers ----------------------------------------------------------------------------

def formula_bytes(specs, tokens: int, batch: int, elem_bytes: float) -> int:
    """The live formula: every layer's `bytes_at`, summed."""
    return sum(s.bytes_at(tokens, elem_bytes, batch) for s in specs)


def bytes_per_token(specs, elem_bytes: float) -> float:
    """Cache growth per token per sequence across all layers, ignoring caps."""
    return sum(s.values_per_token for s in specs) * elem_bytes


def state_bytes(specs, elem_bytes: float) -> float:
    """Fixed bytes per sequence that do not grow with tokens (recurrent / conv states)."""
    return sum(s.state_bytes(elem_bytes) for s in specs)


def group_label(spec: CacheSpec) -> str:
    """The label layers are counted under: a shared layer's source is left out ("shared")."""
    return SHARED if spec.kind == SHARED else spec.label()


def kinds_summary(specs) -> str:
    """"30 × full", "52 × sliding 1024, 10 × full": layer counts per label, most common first."""
    counts = Counter(group_label(s) for s in specs)
    return ", ".join(f"{n} × {label}" for label, n in counts.most_common())


def layer_groups(specs) -> dict[str, list[int]]:
    """Layer indices per label, in order of first appearance: {"sliding 4": [1, 2], "full": [0]}."""
    groups: dict[str, list[int]] = {}
    for i, spec in enumerate(specs):
        groups.setdefault(spec.label(), []).append(i)
    return groups


def unknown_states(specs) -> bool:
    """Whether some state's size is not modelled (its bytes are missing from the formula)."""
    return any(not s.state_known for s in specs)


def is_uniform_full(specs) -> bool:
    """Every layer a plain full-attention layer (no window, latent, state or sharing)."""
    return all(s.kind == FULL and s.state_part is None for s in specs)


def widest(specs) -> tuple[int, int]:
    """(KV heads, values per head) of the layer adding the most values per token: for a latent
    layer 1 head of rank + rope values, for attention K's head dimension; (0, 0) without one."""
    top = max(specs, key=lambda s: s.values_per_token, default=None)
    if top is None or not top.kv_heads:
        return 0, 0
    values = top.values_per_token - top.index_values
    return top.kv_heads, values if top.kind == LATENT else values // (2 * top.kv_heads)


def largest_tensor_bytes(specs, max_len: int, elem_bytes: float, batch: int = 1) -> int:
    """The largest one tensor (K, V or state) any layer gets in a run of `max_len` positions."""
    return max((s.max_tensor_bytes(max_len, elem_bytes, batch) for s in specs), default=0)
