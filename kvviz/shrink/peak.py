"""The peak memory of a run: the most bytes held at once by the tensors the run allocated.

A press removes positions only after the prompt's forward (kvpress issue 178), and a quantized
cache holds the full-precision tensors while it quantizes them, so the bytes a cache holds after a
step (its steady size) can be far below what the step needed. `PeakTracker` measures that:

- on every device: a torch dispatch mode sees every tensor an operator returns while the run's
  steps execute; each new storage's bytes are added when it appears and taken off when the last
  tensor on it is freed (a weakref finalizer), so `peak_bytes` is the most bytes alive at once
  among the tensors this run allocated: activations, the cache, quantization buffers. Weights and
  the prompt's ids, allocated before, are not counted. ("tensors tracked": the label says so.)
- on CUDA as well: the caching allocator's own peak for the step (torch.cuda.max_memory_allocated
  after a reset), whole process, the figure a GPU's out-of-memory error is about.
"""
from __future__ import annotations

import weakref
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

HOW = {"tracked": "peak of the tensors the run allocated (every operator's output tracked until freed)",
       "cuda": "CUDA caching allocator's peak during the step (whole process)"}


class _Track(TorchDispatchMode):
    """Counts the bytes of storages created by operators while active, until their last tensor dies."""

    def __init__(self, owner: "PeakTracker"):
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.owner.saw(t)
        return out


class PeakTracker:
    """Live and peak bytes of the tensors allocated inside `step()` blocks (see the module doc)."""

    def __init__(self):
        self.live: dict[int, list[int]] = {}  # storage data pointer -> [bytes, live tensors on it]
        self.now = 0
        self.peak = 0

    def saw(self, t: torch.Tensor) -> None:
        if t.device.type == "meta":
            return
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if not key:
            return
        entry = self.live.get(key)
        if entry is None:
            entry = self.live[key] = [storage.nbytes(), 0]
            self.now += entry[0]
            self.peak = max(self.peak, self.now)
        entry[1] += 1
        weakref.finalize(t, self.freed, key)

    def freed(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            self.now -= entry[0]
            del self.live[key]

    @contextmanager
    def step(self, device: torch.device):
        """Track one step; yields a dict that holds, after the block, "peak_bytes" (this step's
        tracked peak, counting what earlier steps left alive) and, on CUDA, "cuda_peak_bytes"."""
        out: dict[str, int] = {}
        self.peak = self.now
        cuda = torch.device(device).type == "cuda"
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        try:
            with _Track(self):
                yield out
        finally:
            out["peak_bytes"] = self.peak
            if cuda:
                torch.cuda.synchronize(device)
                out["cuda_peak_bytes"] = int(torch.cuda.max_memory_allocated(device))
