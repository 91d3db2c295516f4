"""Pages read their state back from a link (headless AppTest): the vLLM engine URLs, the Live
page's free-text prompt and token boundaries. Hosted mode never takes an engine URL from a link
that the host did not list."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.vllm import panel as panels

pytestmark = pytest.mark.slow  # runs every page from a link (Streamlit AppTest): make test, not make check

ROOT = Path(__file__).resolve().parents[2]
ENGINE = str(ROOT / "app_pages" / "engine.py")
UNLISTED = "http://10.9.8.7:8000"


@pytest.fixture(autouse=True)
def stop_watches():
    yield
    for url in ("http://127.0.0.1:8850", "http://127.0.0.1:9"):
        panels.watch_for(url).stop()
    panels.watch_for.clear()


def engine_page(**params) -> AppTest:
    at = AppTest.from_file(ENGINE, default_timeout=60)
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


def test_the_engine_urls_come_back_from_a_link(monkeypatch):
    monkeypatch.delenv("KVVIZ_HOSTED", raising=False)
    at = engine_page(engine_urls="http://127.0.0.1:9")
    assert not at.exception
    assert at.text_area(key="engine_urls").value == "http://127.0.0.1:9"


def test_the_engine_box_starts_at_the_demo_server(monkeypatch):
    monkeypatch.delenv("KVVIZ_HOSTED", raising=False)
    monkeypatch.setenv("KVVIZ_VLLM_URL", "http://127.0.0.1:8850")
    at = engine_page()
    assert at.text_area(key="engine_urls").value == "http://127.0.0.1:8850"


def test_hosted_mode_ignores_an_unlisted_engine_url_in_a_link(monkeypatch):
    watched, watch_for = [], panels.watch_for
    monkeypatch.setattr(panels, "watch_for", lambda url: watched.append(url) or watch_for(url))
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    monkeypatch.setenv("KVVIZ_ENGINE_URLS", "http://127.0.0.1:9")
    at = engine_page(engine_urls_hosted=UNLISTED)
    assert not at.exception
    assert UNLISTED not in at.multiselect(key="engine_urls_hosted").value
    assert watched and UNLISTED not in watched  # the listed server is watched, never the link's


APP = str(ROOT / "app.py")


def live_page(tiny_dir, monkeypatch, **params) -> AppTest:
    monkeypatch.setenv("KVVIZ_MODEL", str(tiny_dir))
    for name in ("KVVIZ_PRESENT", "KVVIZ_HOSTED", "KVVIZ_HOSTED_MODELS"):
        monkeypatch.delenv(name, raising=False)
    at = AppTest.from_file(APP, default_timeout=60)
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


def share_code(at: AppTest) -> str:
    return next(c.value for c in at.sidebar.code if c.value.startswith(("http", "?", "/")) or "=" in c.value)


def test_a_free_text_prompt_and_token_boundaries_come_back_from_a_link(tiny_dir, monkeypatch):
    at = live_page(tiny_dir, monkeypatch, preset="Free text", prompt="Why is the sky blue?",
                   system="One line.", show_tokens="true")
    assert not at.exception
    assert at.text_area(key="prompt-Free text").value == "Why is the sky blue?"
    assert at.text_area(key="system-Free text").value == "One line."
    assert at.toggle(key="show_tokens").value is True
    link = share_code(at)
    assert "prompt=Why%20is%20the%20sky%20blue%3F" in link and "system=One%20line." in link


def test_a_prompt_longer_than_a_link_holds_stays_out_of_it(tiny_dir, monkeypatch):
    from kvviz.app import links

    at = live_page(tiny_dir, monkeypatch, preset="Free text", prompt="short")
    at.text_area(key="prompt-Free text").set_value("y" * (links.MAX_LINK_PROMPT_CHARS + 1)).run()
    assert not at.exception
    assert "prompt=" not in share_code(at) and "preset=Free%20text" in share_code(at)
