"""One Streamlit server per kind for the whole browser session, and one Chromium.

A test gets a fresh Streamlit session by opening its own browser context (`chromium.new_context`),
not a fresh server: starting `streamlit run` and its first page costs 10–40 s on two cores. A module
that needs a server set up its own way (another model, another environment) keeps its own fixture.
"""
from __future__ import annotations

import pytest
from browser_kit import launched_chromium, served_app, served_hosted_tiny, served_tiny_app


@pytest.fixture(scope="session")
def tiny_app(tmp_path_factory) -> str:
    """URL of `streamlit run app.py` whose host model is the tiny random Llama (not hosted)."""
    yield from served_tiny_app(tmp_path_factory, "session-tiny", range(8700, 8720))


@pytest.fixture(scope="session")
def hosted_app(tmp_path_factory) -> str:
    """URL of a hosted kvviz (KVVIZ_HOSTED=1) whose only model, "the default", is the tiny Llama."""
    for served in served_hosted_tiny(tmp_path_factory, "session-hosted", range(8720, 8740)):
        yield served.url


@pytest.fixture(scope="session")
def default_app() -> str:
    """URL of `streamlit run app.py` on the embedded default model (SmolLM2-135M), not hosted: for
    the tests that need a real model's text, 30 layers or its speed (the Live page, the cache map,
    the stage on a long prompt)."""
    yield from served_app("session-default-streamlit.log", ports=range(8760, 8780))


@pytest.fixture(scope="session")
def chromium():
    """Debian's Chromium through playwright, shared by every browser test of the session."""
    yield from launched_chromium()
