"""Hooks on the decoder layers, removed when the `with` block ends: per-layer timing (a wrapped
`forward`) and (optionally) the newest token's attention over the cached positions (forward hooks).

On CUDA the hooks record CUDA events (read after the step synchronises); elsewhere they read
`time.perf_counter`, which is exact for the synchronous CPU backend. Hooks break
`torch.compile` graphs, so the instrumented model is never compiled.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager

import torch
from kvviz.core.errors import UserError


def find_decoder_layers(model: torch.nn.Module, num_layers: int) -> torch.nn.ModuleList:
    """The ModuleList holding the model's decoder layers (Llama's `model.layers`, GPT-2's `h`)."""
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == num_layers:
            return module
    raise UserError(f"no list of {num_layers} decoder layers found in {type(model).__name__}")


def device_sync(device: torch.device) -> Callable[[], None] | None:
    """What must run before a host clock is read on `device`, or None.

    MPS queues kernels asynchronously, as CUDA does, but kvviz has no timing events there: its
    clock reads wait for the device first. CPU runs synchronously; CUDA is timed with events.
    """
    return torch.mps.synchronize if device.type == "mps" else None


class LayerTimer:
    """Collects one (start, end) pair per layer per forward pass."""

    def __init__(self, num_layers: int, use_cuda_events: bool,
                 synchronize: Callable[[], None] | None = None):
        self.num_layers = num_layers
        self.use_cuda_events = use_cuda_events
        self.synchronize = synchronize  # see device_sync
        self.starts: list = [None] * num_layers
        self.ends: list = [None] * num_layers

    def mark(self, marks: list, index: int) -> None:
        if self.use_cuda_events:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            marks[index] = event
        else:
            if self.synchronize is not None:
                self.synchronize()
            marks[index] = time.perf_counter()

    def take_ms(self) -> list[float]:
        """Per-layer milliseconds of the last pass (call after the step has synchronised)."""
        pairs = zip(self.starts, self.ends)
        if self.use_cuda_events:
            ms = [s.elapsed_time(e) if s and e else 0.0 for s, e in pairs]
        else:
            ms = [(e - s) * 1e3 if s is not None and e is not None else 0.0 for s, e in pairs]
        self.starts, self.ends = [None] * self.num_layers, [None] * self.num_layers
        return ms


def timed_forward(forward: Callable, timer: LayerTimer, index: int) -> Callable:
    """`forward`, marking layer `index`'s start and end in `timer` around each call."""
    def timed(*args, **kwargs):
        timer.mark(timer.starts, index)
        out = forward(*args, **kwargs)
        timer.mark(timer.ends, index)
        return out
    return timed


@contextmanager
def timed_layers(layers: torch.nn.ModuleList, use_cuda_events: bool,
                 synchronize: Callable[[], None] | None = None):
    """Time every layer for the duration of the block; yields the timer.

    Each layer's `forward` is wrapped (an attribute of the instance, as accelerate's hooks do)
    rather than given forward hooks: a module with hooks takes torch's slow call path, which on a
    fast engine cost more than the clock reads themselves (`make bench`, hook overhead).
    """
    timer = LayerTimer(len(layers), use_cuda_events, synchronize)
    own = [layer.__dict__.get("forward") for layer in layers]  # a wrapper someone else installed
    for i, layer in enumerate(layers):
        layer.forward = timed_forward(layer.forward, timer, i)
    try:
        yield timer
    finally:
        for layer, forward in zip(layers, own):
            if forward is None:
                del layer.forward
            else:
                layer.forward = forward


ATTENTION_NAMES = ("self_attn", "attn", "attention", "self_attention")  # Llama/Qwen, GPT-2, others
ATTENTION_DECIMALS = 4  # weights are kept to 1e-4: enough to draw, small enough to save in a trace


def attention_module(layer: torch.nn.Module) -> torch.nn.Module | None:
    """A decoder layer's attention block, or None (a state-space / linear-attention layer)."""
    return next((getattr(layer, n) for n in ATTENTION_NAMES if isinstance(getattr(layer, n, None), torch.nn.Module)), None)


class AttentionRows:
    """The newest query's attention weights per layer, averaged over heads, from the last pass.

    Needs eager attention: its attention modules return their weights ([B, heads, q, kv]) as the
    second output; sdpa returns None there, so nothing is captured.
    """

    def __init__(self, num_layers: int):
        self.rows: list = [None] * num_layers  # per layer: (B, kv) float tensor, or None

    def capture(self, index: int, output) -> None:
        weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
        if isinstance(weights, torch.Tensor) and weights.dim() == 4:
            self.rows[index] = weights[:, :, -1, :].float().mean(dim=1).cpu()  # (B, kv)

    def take(self, written: int, static: bool) -> tuple[tuple[tuple[float, ...], ...], ...]:
        """[sequence][layer][position] of the last pass, rounded; then cleared.

        A row ends at the newest position; a static cache's rows cover its preallocated length,
        so they are cut to the `written` positions. A layer without attention gets an empty row.
        """
        batch = next((r.shape[0] for r in self.rows if r is not None), 0)
        per_layer = [rounded(r[:, :written] if static else r) if r is not None else None for r in self.rows]
        self.rows = [None] * len(self.rows)
        return tuple(tuple(tuple(r[b]) if r is not None else () for r in per_layer) for b in range(batch))


def rounded(row: torch.Tensor) -> list[list[float]]:
    """`row`'s values as Python's `round(x, ATTENTION_DECIMALS)` gives them, in one tensor pass
    rather than a call per value (0.29 ms of a fast engine's 2.1 ms step). The same floats
    bit for bit: a float32 value times 10**4 is exact in float64 (24 + 14 bits), so rounding it
    half to even picks the same last digit as Python's exact decimal rounding, and dividing that
    integer by 10**4 gives the float nearest the decimal, as Python's `round` returns."""
    scale = 10.0 ** ATTENTION_DECIMALS
    return (torch.round(row.float().double() * scale) / scale).tolist()


@contextmanager
def attention_rows(layers: torch.nn.ModuleList):
    """Capture each layer's attention of the newest token while the block runs; yields AttentionRows."""
    rows = AttentionRows(len(layers))
    handles = []
    for i, layer in enumerate(layers):
        module = attention_module(layer)
        if module is not None:
            handles.append(module.register_forward_hook(lambda _m, _a, out, i=i: rows.capture(i, out)))
    try:
        yield rows
    finally:
        for handle in handles:
            handle.remove()
