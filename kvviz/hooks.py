"""Forward hooks that time each decoder layer; removed when the `with` block ends.

On CUDA the hooks record CUDA events (read after the step synchronises); elsewhere they read
`time.perf_counter`, which is exact for the synchronous CPU backend. Hooks break
`torch.compile` graphs, so the instrumented model is never compiled.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

import torch


def find_decoder_layers(model: torch.nn.Module, num_layers: int) -> torch.nn.ModuleList:
    """The ModuleList holding the model's decoder layers (Llama's `model.layers`, GPT-2's `h`)."""
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == num_layers:
            return module
    raise ValueError(f"no list of {num_layers} decoder layers found in {type(model).__name__}")


class LayerTimer:
    """Collects one (start, end) pair per layer per forward pass."""

    def __init__(self, num_layers: int, use_cuda_events: bool):
        self.num_layers = num_layers
        self.use_cuda_events = use_cuda_events
        self.starts: list = [None] * num_layers
        self.ends: list = [None] * num_layers

    def mark(self, marks: list, index: int) -> None:
        if self.use_cuda_events:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            marks[index] = event
        else:
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


@contextmanager
def timed_layers(layers: torch.nn.ModuleList, use_cuda_events: bool):
    """Install timing hooks on every layer for the duration of the block; yields the timer."""
    timer = LayerTimer(len(layers), use_cuda_events)
    handles = []
    for i, layer in enumerate(layers):
        handles.append(layer.register_forward_pre_hook(lambda *_, i=i: timer.mark(timer.starts, i)))
        handles.append(layer.register_forward_hook(lambda *_, i=i: timer.mark(timer.ends, i)))
    try:
        yield timer
    finally:
        for handle in handles:
            handle.remove()
