"""vLLM's release families (kvviz.planner.vllm_versions): a version read into its family, and the
defaults `vllm serve` picks per family, GPU and platform (pure; the figures are the module's own
sourced rules, read from its docstring)."""
from __future__ import annotations

import pytest

from kvviz.core.errors import UserError
from kvviz.planner import vllm_versions

GIB = 2**30


@pytest.mark.parametrize("text, key", [("0.19.0", (0, 19, 0)), ("v0.11", (0, 11, 0)),
                                       ("0.7.3.dev233+gabc", (0, 7, 3)), (" 1.2 ", (1, 2, 0))])
def test_versions_are_read_up_to_their_patch(text, key):
    assert vllm_versions.parse_version(text) == key


@pytest.mark.parametrize("text, words", [("latest", "give it as 0.19"), ("0.5.9", "from 0.6 on")])
def test_an_unknown_or_older_version_is_one_sentence(text, words):
    with pytest.raises(UserError, match=words):
        vllm_versions.parse_version(text)


def test_a_version_falls_in_the_last_family_it_reaches():
    name = lambda v, engine=None: vllm_versions.release_for(v, engine).name  # noqa: E731
    assert name(None) == name(vllm_versions.LATEST) == "V1 0.21 on"
    assert (name("0.6.4"), name("0.6.5"), name("0.7.3"), name("0.8.0")) == (
        "V0 0.6.0–0.6.4", "V0 0.6.5–0.6.6", "V0 0.7", "V1 0.8–0.16")
    assert (name("0.16.9"), name("0.17"), name("0.20"), name("0.21")) == (
        "V1 0.8–0.16", "V1 0.17", "V1 0.18–0.20", "V1 0.21 on")
    assert name("0.10.1", vllm_versions.V0) == "V0 0.7" and name("0.7.3", vllm_versions.V0) == "V0 0.7"
    firsts = [r.first for r in vllm_versions.RELEASES]
    assert firsts == sorted(firsts) and len(set(firsts)) == len(firsts)  # the lookup needs them ordered
    assert all(vllm_versions.release_for(v) for v in vllm_versions.PAGE_VERSIONS)  # every offered one reads


def test_the_serve_defaults_follow_the_family_the_gpu_and_the_platform():
    limits = lambda v, gib, gpu, platform="cuda": vllm_versions.default_limits(  # noqa: E731
        vllm_versions.release_for(v), v, gib * GIB, gpu, platform)
    assert limits("0.32", 80, "H100 SXM", "cpu") == (128, 2048)
    assert limits("0.7", 80, "H100 SXM") == (256, None)  # V0: the tokens follow max_model_len
    assert limits("0.8.4", 80, "H100 SXM") == (256, 8192) and limits("0.8.4", 141, "H200") == (256, 8192)
    assert limits("0.8.4", 80, "A100 80GB") == (256, 2048)
    assert limits("0.8.5", 192, "B200") == (1024, 16384)
    assert limits("0.8.5", 80, "H100 SXM") == (1024, 8192)
    assert limits("0.8.5", 80, "A100 80GB") == (256, 2048)  # an A100 keeps the small defaults
    assert limits("0.8.5", 24, "RTX 4090") == (256, 2048)


def test_v0_profiles_max_model_len_or_its_chunked_batch():
    v06, v07 = vllm_versions.release_for("0.6.4"), vllm_versions.release_for("0.7")
    assert vllm_versions.v0_profile_tokens(v06, 1024, None) == 2048  # at least 2,048
    assert vllm_versions.v0_profile_tokens(v06, 32768, None) == 32768
    assert vllm_versions.v0_profile_tokens(v06, 32769, None) == 512  # chunked prefill on
    assert vllm_versions.v0_profile_tokens(v07, 131072, None) == 2048
    assert vllm_versions.v0_profile_tokens(v07, 131072, 4096) == 4096  # a given batch wins
