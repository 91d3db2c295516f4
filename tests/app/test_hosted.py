"""Hosted-mode policy (kvviz.app.hosted): allowlist with pinned revisions, caps, off by default;
and, still here, the Replay upload's refusals at load (kvviz.replay.panel.read_trace) under that policy."""
import pytest

from kvviz.core import assets
from kvviz.core.errors import UserError
from kvviz.app import hosted


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
    with pytest.raises(UserError, match="only runs"):
        p.check_model("/etc/passwd")
    assert p.cap("new_tokens", 500) == p.max_new_tokens and p.cap("batch", 2) == 2
    with pytest.raises(UserError, match="allows 1024"):
        p.check_prompt_tokens(5000)


@pytest.mark.parametrize("text, message", [("org/model", "pinned revision"), ("./local@x", "local path")])
def test_bad_allowlists_are_refused(text, message):
    with pytest.raises(UserError, match=message):
        hosted.parse_models(text)


def test_prompt_and_upload_caps_apply_only_when_hosted():
    on, off = hosted.policy_from_env({"KVVIZ_HOSTED": "1"}), hosted.policy_from_env({})
    assert on.cap("prompt_chars", 200_000) == 4000 and off.cap("prompt_chars", 200_000) == 200_000
    assert on.upload_limit_bytes(64 * 2**20) == 8 * 2**20 and off.upload_limit_bytes(64 * 2**20) == 64 * 2**20


# ---- uploads and trace meta: refused with a clear message, before any harm -------------------

class FakeUpload:
    """An uploaded file as Streamlit hands it over: its size is known before it is read."""

    def __init__(self, text: str, size: int | None = None):
        self.text, self.size, self.reads = text, len(text) if size is None else size, 0

    def getvalue(self) -> bytes:
        self.reads += 1
        return self.text.encode()


def test_upload_over_the_hosted_cap_is_refused_before_it_is_read(monkeypatch):
    from kvviz.replay import panel
    from kvviz.core.trace import TraceError
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    upload = FakeUpload("{}", size=9 * 2**20)
    with pytest.raises(TraceError, match="9.0 MiB; traces are limited to 8 MiB"):
        panel.read_trace(None, upload)
    assert upload.reads == 0
    monkeypatch.delenv("KVVIZ_HOSTED")
    with pytest.raises(TraceError):  # 9 MiB is fine on your own machine: read, then found invalid
        panel.read_trace(None, upload)
    assert upload.reads == 1


def example_doc() -> dict:
    import json
    path = sorted(assets.TRACES.glob("*.json"))[0]
    return json.loads(path.read_text())


@pytest.mark.parametrize("key, value, message", [
    ("num_layers", 0, "num_layers = 0; kvviz draws traces with num_layers from 1 to 4,096"),
    ("num_layers", 10**9, "num_layers = 1,000,000,000"),
    ("max_len", 0, "max_len = 0"),
    ("batch", 0, "batch = 0"),
    ("batch", 10**6, "batch = 1,000,000"),
    ("elem_bytes", 0, "elem_bytes = 0"),
    ("head_dim", 10**7, "head_dim = 10,000,000"),
    ("prompt_tokens", 10**9, "prompt_tokens"),
    ("weight_bytes", 2**60, "weight_bytes"),
])
def test_trace_meta_out_of_bounds_is_refused_at_load(key, value, message):
    import json

    from kvviz.replay import panel
    from kvviz.core.trace import TraceError
    doc = example_doc()
    doc["meta"][key] = value
    with pytest.raises(TraceError, match=message):
        panel.read_trace(None, FakeUpload(json.dumps(doc)))


def test_a_huge_step_time_is_refused_at_load():
    import json

    from kvviz.replay import panel
    from kvviz.core.trace import TraceError
    doc = example_doc()
    doc["events"][3]["step_ms"] = 1e12  # a replay would sleep for 31 years
    with pytest.raises(TraceError, match="event 3: step_ms = 1,000,000,000,000, more than the 10 minutes"):
        panel.read_trace(None, FakeUpload(json.dumps(doc)))
    doc["events"][3]["step_ms"] = 1234.5  # an ordinary slow step
    assert panel.read_trace(None, FakeUpload(json.dumps(doc))).events[3].step_ms == 1234.5
