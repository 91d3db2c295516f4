"""Sweep and Serving in hosted mode (KVVIZ_HOSTED=1): every cap held against crafted URL parameters
and widgets, with a clear message; the same Policy.check_limits the Live page's runs go through."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

pytestmark = pytest.mark.slow  # runs the hosted pages (Streamlit AppTest): make test, not make check

PAGES = Path(__file__).resolve().parents[2] / "app_pages"


@pytest.fixture(autouse=True)
def hosted_mode(monkeypatch, default_lm):  # default_lm: the model converted before a page loads it
    from streamlit import config
    before = config.get_option("client.showErrorDetails")
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    monkeypatch.delenv("KVVIZ_MODEL", raising=False)
    yield
    config.set_option("client.showErrorDetails", before)


def page(name: str, **params) -> AppTest:
    at = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=180)
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


def test_sweep_url_cannot_exceed_batch_tokens_or_points():
    at = page("sweep", sweep_batches=["1", "16"], sweep_new="100000",
              sweep_prompts=["16", "32", "64", "128", "256", "512", "1024", "2048", "4096"])
    assert not at.exception
    assert max(at.multiselect(key="sweep_batches").value, default=1) <= 4
    assert at.multiselect(key="sweep_batches").options and max(map(int, at.multiselect(key="sweep_batches").options)) <= 4
    assert at.slider(key="sweep_new").value <= 128 and at.slider(key="sweep_new").max == 128
    assert all(int(p) <= 1024 for p in at.multiselect(key="sweep_prompts").options)


def test_sweep_widgets_past_the_point_cap_get_a_message_and_no_run():
    at = page("sweep")
    prompts = at.multiselect(key="sweep_prompts")
    batches = at.multiselect(key="sweep_batches")
    prompts.set_value(prompts.options[:5])
    batches.set_value(batches.options[:2]).run()  # 5 × 2 = 10 points > 8
    assert not at.exception
    assert any("at most 8 points" in w.value for w in at.warning)
    assert at.button(key="sweep_run").disabled


def test_serving_requests_past_the_batch_cap_are_refused_in_a_sentence():
    at = page("serving")
    assert at.slider(key="srv_max_new").max == 128
    at.text_area(key="srv_requests").set_value("\n".join(f"request {i}" for i in range(6))).run()
    at.button(key="srv_run").click().run()
    assert not at.exception
    assert any("at most 4 requests" in e.value for e in at.error), [e.value for e in at.error]
