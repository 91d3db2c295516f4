import pytest

from tests.planner import test_vllm_hybrid as hybrid
from tests.planner import test_vllm_sliding as sliding
from tests.planner import vllm_real


@pytest.fixture(scope="session")
def real_allocations(tmp_path_factory) -> dict:
    """What the real vLLM allocated for every case of the hybrid and sliding checks, keyed
    ("hybrid" | "sliding", *case): every engine built in one vLLM process (tests/planner/vllm_real.py)."""
    cases = {("hybrid", *c): (hybrid.CONFIGS[c[0]](), c[1], c[2]) for c in hybrid.MEASURED}
    cases |= {("sliding", *c): (sliding.CONFIGS[c[0]](), c[1], True) for c in sliding.MEASURED}
    return vllm_real.allocations(cases, hybrid.KV_BYTES, hybrid.MAX_LEN, tmp_path_factory.mktemp("vllm-configs"))
