"""The live page in hosted mode (KVVIZ_HOSTED=1) on the real default model."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.core.errors import UserError
from kvviz.app import ui

pytestmark = pytest.mark.slow  # runs the hosted Live page (Streamlit AppTest) with model runs: make test, not make check

APP = str(Path(__file__).resolve().parents[2] / "app.py")


@pytest.fixture(autouse=True)
def error_details_restored():
    """Hosted mode sets Streamlit's process-wide `client.showErrorDetails`; put it back."""
    from streamlit import config
    before = config.get_option("client.showErrorDetails")
    yield
    config.set_option("client.showErrorDetails", before)


@pytest.fixture()
def hosted(monkeypatch, default_lm):  # default_lm: the model is converted before the page loads it
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    monkeypatch.delenv("KVVIZ_MODEL", raising=False)
    return AppTest.from_file(APP, default_timeout=180).run()


def test_hosted_sidebar_offers_only_the_allowlist_and_caps(hosted):
    at = hosted
    assert not at.exception
    assert at.selectbox(key="model").options == ["default"]
    assert not [w for w in at.text_input if w.key == "model"]  # no free-form model names
    assert not [w for w in at.selectbox if w.key in ("device", "dtype")]
    assert at.slider(key="max_new").max == 128 and at.slider(key="batch").max == 4
    assert at.expander[0].label == "What am I looking at?"


def test_hosted_generation_runs_and_long_prompts_are_refused(hosted):
    at = hosted
    at.slider(key="max_new").set_value(3).run()
    at.button(key="generate").click().run()
    assert not at.exception and not at.error
    assert {m.label: m.value for m in reversed(at.metric)}["Tokens"] == "3 × 1"
    at.selectbox(key="preset").set_value("Free text").run()
    at.text_area(key="prompt-Free text").set_value("x " * 1500).run()  # 3,000 characters
    at.button(key="generate").click().run()
    assert any("allows 1024" in e.value for e in at.error)  # tokens, counted on the server


def test_hosted_prompt_boxes_have_a_character_cap(hosted):
    at = hosted
    at.selectbox(key="preset").set_value("Free text").run()
    assert at.text_area(key="prompt-Free text").proto.max_chars == 4000
    assert at.text_area(key="system-Free text").proto.max_chars == 4000


def test_hosted_run_checks_allowlist_and_caps_where_it_starts():
    from kvviz.app import hosted
    from kvviz.core.config import RunConfig
    p = hosted.policy_from_env({"KVVIZ_HOSTED": "1"})
    p.check_run("default", RunConfig(max_new_tokens=128, batch=4))
    for name, cfg, message in (("evil/model", RunConfig(), "only runs"),
                               ("default", RunConfig(max_new_tokens=129), "new tokens is 129"),
                               ("default", RunConfig(batch=5), "batch is 5"),
                               ("default", RunConfig(prompts=("word " * 1000,)), "5,000 characters"),
                               ("default", RunConfig(system="s" * 4001), "allows 4,000")):
        with pytest.raises(UserError, match=message):
            p.check_run(name, cfg)


def _raise_after_configuring():
    from kvviz.app import ui
    ui.configure_server()
    raise ValueError("secret internal detail /srv/kvviz")


def test_hosted_mode_shows_visitors_no_error_details(monkeypatch):
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    at = AppTest.from_function(_raise_after_configuring, default_timeout=60).run()
    (shown,) = at.exception
    assert "secret" not in shown.message and "ValueError" not in shown.message
    assert not shown.stack_trace


def test_unhosted_errors_keep_their_details(monkeypatch):
    monkeypatch.delenv("KVVIZ_HOSTED", raising=False)
    at = AppTest.from_function(_raise_after_configuring, default_timeout=60).run()
    (shown,) = at.exception
    assert "secret internal detail" in shown.message and shown.stack_trace


def test_docker_image_hides_error_details():
    dockerfile = (Path(APP).parent / "Dockerfile").read_text()
    assert "ENV STREAMLIT_CLIENT_SHOW_ERROR_DETAILS=none" in dockerfile
    assert "ENV KVVIZ_HOSTED=1" in dockerfile


def test_a_link_naming_another_model_loads_nothing_until_asked(monkeypatch, tiny_dir):
    from kvviz.app import ui
    monkeypatch.delenv("KVVIZ_HOSTED", raising=False)
    monkeypatch.delenv("KVVIZ_MODEL", raising=False)
    store = ui.model_store()
    loads = store.num_loads
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["model"] = str(tiny_dir)
    at.run()
    assert not at.exception and store.num_loads == loads and store.get(ui.LoadConfig(str(tiny_dir))) is None
    assert at.button(key="generate").disabled
    assert at.button(key="load_model").label.startswith("Load ")
    at.button(key="load_model").click().run()
    assert not at.exception and not at.error and store.num_loads == loads + 1
    assert not at.button(key="generate").disabled
    at.slider(key="max_new").set_value(2).run()
    at.button(key="generate").click().run()  # the loaded model stays: no Load button again
    assert {m.label: m.value for m in reversed(at.metric)}["Tokens"] == "2 × 1"
    assert not [b for b in at.button if b.key == "load_model"] and store.num_loads == loads + 1


def test_hosted_load_waits_for_the_run_holding_the_device(monkeypatch, default_lm):
    """A run holds model A on the device; a visitor opening the page (default model) waits in
    line, and A stays loaded until that run releases the device."""
    import threading
    import time

    from kvviz.app import ui
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    store, queue, run = ui.model_store(), ui.device_queue(), object()
    store.load("model-a", lambda: "A")
    queue.join(run)
    assert queue.try_take(run)
    seen = []

    def finish_the_run():
        time.sleep(3)
        seen.append(store.loaded_key)  # still A: nothing replaced it under the run
        queue.release(run)

    releaser = threading.Thread(target=finish_the_run)
    releaser.start()
    try:
        at = AppTest.from_file(APP, default_timeout=180).run()
    finally:
        queue.release(run)
        releaser.join()
    assert seen == ["model-a"]
    assert not at.exception and not at.error
    assert store.get(ui.LoadConfig()) is not None and not at.button(key="generate").disabled


@pytest.mark.parametrize("hosted_on, cap", [(True, "8 MiB"), (False, "64 MiB")])
def test_uploader_label_states_the_cap_in_force(monkeypatch, hosted_on, cap):
    if hosted_on:
        monkeypatch.setenv("KVVIZ_HOSTED", "1")
    else:
        monkeypatch.delenv("KVVIZ_HOSTED", raising=False)
    at = AppTest.from_file(str(Path(APP).parent / "app_pages" / "replay.py"), default_timeout=120).run()
    at.radio(key="replay_source").set_value("Upload a file").run()
    (uploader,) = at.get("file_uploader")
    assert f"at most {cap}" in uploader.proto.label
    limit = ui.upload_limit_bytes()  # Streamlit's box limit above kvviz's cap, under the server's
    assert limit / 2**20 == int(cap.split()[0]) and f"{limit:,} bytes" in uploader.proto.label
    assert limit < uploader.proto.max_upload_size_mb * 1e6 and uploader.proto.max_upload_size_mb < ui.SERVER_MAX_UPLOAD_MIB - 1


def test_server_upload_limit_is_the_one_kvviz_plans_for():
    """Streamlit's server answers uploads over server.maxUploadSize with a bare 413: it must stay
    the value kvviz.app.ui sizes every upload box under."""
    import tomllib
    config = tomllib.loads((Path(APP).parent / ".streamlit" / "config.toml").read_text())
    assert config["server"]["maxUploadSize"] == ui.SERVER_MAX_UPLOAD_MIB
    for cap in (8 * 2**20, 64 * 2**20, 1):
        box_mb = ui.uploader_limit_mb(cap)
        assert cap < box_mb * 1e6 and box_mb * 2**20 + 2**20 < ui.SERVER_MAX_UPLOAD_MIB * 2**20
