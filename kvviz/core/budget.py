"""Device memory left for the KV cache once weights and a runtime overhead are set aside."""
from __future__ import annotations

import math

from kvviz.core.errors import UserError

DEFAULT_OVERHEAD_FRACTION = 0.1  # like vLLM's gpu_memory_utilization=0.9: 10 % for the rest


def runtime_overhead_bytes(gpu_bytes: int, overhead_fraction: float = DEFAULT_OVERHEAD_FRACTION,
                           overhead_bytes: int | None = None) -> int:
    """Memory set aside for activations, CUDA context and fragmentation: `overhead_bytes` when
    given, else `overhead_fraction` × GPU memory."""
    if overhead_bytes is not None:
        return overhead_bytes
    if not 0 <= overhead_fraction < 1:
        raise UserError("overhead_fraction must be in [0, 1)")
    return math.ceil(gpu_bytes * overhead_fraction)


def kv_budget_bytes(gpu_bytes: int, weight_bytes: int,
                    overhead_fraction: float = DEFAULT_OVERHEAD_FRACTION,
                    overhead_bytes: int | None = None) -> int:
    """GPU memory left for KV caches: gpu − weights − overhead, never negative."""
    overhead = runtime_overhead_bytes(gpu_bytes, overhead_fraction, overhead_bytes)
    return max(0, gpu_bytes - weight_bytes - overhead)
