"""Hosted-mode policy: allowlist with pinned revisions, caps, off by default."""
import pytest

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


@pytest.mark.parametrize("spec, message", [("org/model", "pinned revision"), ("./local@x", "local path")])
def test_bad_allowlists_are_refused(spec, message):
    with pytest.raises(UserError, match=message):
        hosted.parse_models(spec)


def test_prompt_and_upload_caps_apply_only_when_hosted():
    on, off = hosted.policy_from_env({"KVVIZ_HOSTED": "1"}), hosted.policy_from_env({})
    assert on.cap("prompt_chars", 200_000) == 4000 and off.cap("prompt_chars", 200_000) == 200_000
    assert on.upload_limit_bytes(64 * 2**20) == 8 * 2**20 and off.upload_limit_bytes(64 * 2**20) == 64 * 2**20


# ---- torch's thread policy (kvviz.app.threads) ----------------------------------------------------

@pytest.mark.parametrize("cores, default, env, expected", [
    (2, 2, {}, 1), (1, 1, {}, 1), (4, 4, {}, 3), (16, 8, {}, 8),  # all cores but one, ≤ torch's
    (2, 2, {"KVVIZ_TORCH_THREADS": "2"}, 2), (2, 2, {"KVVIZ_TORCH_THREADS": "0"}, 2),
    (8, 8, {"KVVIZ_TORCH_THREADS": " 3 "}, 3),
])
def test_torch_thread_policy(cores, default, env, expected):
    from kvviz.app.threads import torch_threads
    assert torch_threads(cores, default, env) == expected


@pytest.mark.parametrize("value", ["-1", "two", "1.5"])
def test_torch_thread_setting_must_be_a_whole_number(value):
    from kvviz.app.threads import torch_threads
    with pytest.raises(UserError, match="KVVIZ_TORCH_THREADS"):
        torch_threads(2, 2, {"KVVIZ_TORCH_THREADS": value})


def test_thread_policy_reaches_threads_started_later(monkeypatch):
    """Streamlit runs every script run on a fresh thread: the setting must reach them."""
    import threading

    import torch

    from kvviz.app import threads
    before = torch.get_num_threads()
    monkeypatch.setenv("KVVIZ_TORCH_THREADS", "1")
    seen = []
    try:
        setter = threading.Thread(target=threads.apply_torch_threads)
        setter.start()
        setter.join()
        reader = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
        reader.start()
        reader.join()
    finally:
        torch.set_num_threads(before)
    assert seen == [1]


# ---- the model store: loads never replace a model under a run -------------------------------

def test_model_store_get_never_loads_and_load_replaces():
    from kvviz.app.model_store import ModelStore
    store, loads = ModelStore(), []
    assert store.get("a") is None
    assert store.load("a", lambda: loads.append("a") or "A") == "A"
    assert store.load("a", lambda: loads.append("again") or "X") == "A"  # already loaded
    assert store.get("a") == "A" and store.get("b") is None
    assert store.load("b", lambda: loads.append("b") or "B") == "B"
    assert store.get("a") is None and loads == ["a", "b"] and store.num_loads == 2


def test_a_failed_load_leaves_nothing_held():
    from kvviz.app.model_store import ModelStore
    store = ModelStore()
    store.load("a", lambda: "A")

    def fail():
        raise RuntimeError("no such model")

    with pytest.raises(RuntimeError):
        store.load("b", fail)
    assert store.get("a") is None and store.get("b") is None and store.loaded_key is None


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
    from pathlib import Path
    path = sorted((Path(__file__).resolve().parents[2] / "kvviz" / "assets" / "traces").glob("*.json"))[0]
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
