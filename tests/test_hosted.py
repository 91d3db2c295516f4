"""Hosted-mode policy: allowlist with pinned revisions, caps, off by default."""
import pytest

from kvviz import hosted


def test_off_by_default_changes_nothing():
    p = hosted.policy_from_env({})
    assert not p.enabled and p.cap("new_tokens", 500) == 500
    assert p.check_model("any/model") is None
    p.check_prompt_tokens(10**6)


def test_on_allows_only_listed_models_at_pinned_revisions():
    p = hosted.policy_from_env({"KVVIZ_HOSTED": "1",
                                "KVVIZ_HOSTED_MODELS": "default, HuggingFaceTB/SmolLM2-360M-Instruct@abc123"})
    assert p.enabled and p.check_model("HuggingFaceTB/SmolLM2-360M-Instruct") == "abc123"
    assert p.check_model("default") is None
    with pytest.raises(ValueError, match="only runs"):
        p.check_model("/etc/passwd")
    assert p.cap("new_tokens", 500) == p.max_new_tokens and p.cap("batch", 2) == 2
    with pytest.raises(ValueError, match="allows 1024"):
        p.check_prompt_tokens(5000)


@pytest.mark.parametrize("spec, message", [("org/model", "pinned revision"), ("./local@x", "local path")])
def test_bad_allowlists_are_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        hosted.parse_models(spec)
