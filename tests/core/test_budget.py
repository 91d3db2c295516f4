"""Device memory left for the KV cache (kvviz.core.budget): memory less weights less a runtime
overhead (10 % of the memory, as vLLM's gpu_memory_utilization=0.9 leaves, or a byte count given),
never negative; an overhead fraction outside [0, 1) refused in words."""
import pytest

from kvviz.core.budget import DEFAULT_OVERHEAD_FRACTION, kv_budget_bytes, runtime_overhead_bytes
from kvviz.core.errors import UserError

GB = 10**9


def test_the_budget_is_memory_less_weights_less_a_tenth():
    assert DEFAULT_OVERHEAD_FRACTION == 0.1
    assert kv_budget_bytes(80 * GB, 16 * GB) == 80 * GB - 16 * GB - 8 * GB
    assert kv_budget_bytes(80 * GB, 16 * GB, overhead_fraction=0) == 64 * GB
    assert kv_budget_bytes(80 * GB, 16 * GB, overhead_bytes=2 * GB) == 62 * GB  # a count given wins
    assert kv_budget_bytes(24 * GB, 140 * GB) == 0  # weights that do not fit leave nothing, not less


def test_the_overhead_rounds_up_to_whole_bytes_and_a_bad_fraction_is_refused():
    assert runtime_overhead_bytes(10, 0.15) == 2 and runtime_overhead_bytes(10, 0.15, overhead_bytes=0) == 0
    for fraction in (1, 1.5, -0.1):
        with pytest.raises(UserError, match=r"overhead_fraction must be in \[0, 1\)"):
            kv_budget_bytes(80 * GB, 1, overhead_fraction=fraction)
