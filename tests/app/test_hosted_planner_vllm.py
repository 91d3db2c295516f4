"""The Planner and vLLM engine pages in hosted mode (KVVIZ_HOSTED=1): every cap tried from each
page through URL parameters and through widgets; the visitor reads one clear sentence, the page
raises nothing, and the same Policy.check_limits holds it as on the Live, Sweep and Serving pages."""
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.core.errors import UserError
from kvviz.app import hosted
from kvviz.vllm import panel as panels

pytestmark = pytest.mark.slow  # runs the Planner and engine pages (Streamlit AppTest): make test, not make check

PAGES = Path(__file__).resolve().parents[2] / "app_pages"
POLICY = hosted.policy_from_env({"KVVIZ_HOSTED": "1"})
TOKENS, REQUESTS, GPUS = POLICY.max_plan_tokens, POLICY.max_plan_requests, POLICY.max_plan_gpus
ALLOWED = ("http://127.0.0.1:9", "http://127.0.0.1:10", "http://127.0.0.1:11", "http://127.0.0.1:12",
           "http://127.0.0.1:13")  # nothing listens there: watches retry, the page still draws
EVIL = "http://169.254.169.254"
WATCH_FOR = panels.watch_for  # the cached one (a test wraps it)


@pytest.fixture(autouse=True)
def hosted_mode(monkeypatch):
    from streamlit import config
    before = config.get_option("client.showErrorDetails")
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    monkeypatch.setenv("KVVIZ_ENGINE_URLS", ",".join(ALLOWED))
    yield
    config.set_option("client.showErrorDetails", before)
    for url in ALLOWED:
        WATCH_FOR(url).stop()
    WATCH_FOR.clear()


def page(name: str, **params) -> AppTest:
    at = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=120)
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


def one_sentence(at: AppTest, *words: str) -> str:
    """The page's only error, containing `words`; no exception anywhere."""
    assert not at.exception, at.exception
    errors = [re.sub(r"\\(.)", r"\1", e.value) for e in at.error]  # as read: Markdown escapes off
    assert len(errors) == 1, errors
    (text,) = errors
    assert all(w in text for w in words), text
    assert text.count(". ") == 0 and text.endswith("."), text  # one sentence
    return text


# ---------------------------------------------------------------- the planner
PLAN_CAPS = [  # URL parameter, a value over the cap, what the sentence names
    ("plan_context", TOKENS + 1, "context T"),
    ("plan_max_model_len", TOKENS + 1, "max_model_len"),
    ("plan_batch", REQUESTS + 1, "the batch"),
    ("plan_dp", GPUS + 1, "TP × PP × DP"),
    ("plan_window", TOKENS * 4, "the what-if window"),
]


def test_planner_in_caps_plans_and_states_the_caps():
    at = page("planner", plan_context=str(TOKENS), plan_batch=str(REQUESTS))
    assert not at.exception and not at.error
    assert any(f"{TOKENS:,} tokens" in c.value for c in at.caption)


@pytest.mark.parametrize("key, value, named", PLAN_CAPS)
def test_planner_url_over_a_cap_gets_one_sentence(key, value, named):
    at = page("planner", **{key: str(value)})
    text = one_sentence(at, named, f"{value:,}", "this hosted kvviz allows")
    assert "Cannot plan this here" in text


def test_planner_url_prefix_and_gpus_over_their_caps():
    at = page("planner", plan_context="1000", plan_prefix=str(TOKENS + 5))
    one_sentence(at, "the shared prompt S", f"{TOKENS + 5:,}")
    at = page("planner", plan_tp="8", plan_pp="8", plan_dp="9")  # 576 GPUs, each within its widget
    one_sentence(at, "TP × PP × DP is 576", f"allows {GPUS:,}")

BACK = {"plan_context": 4096, "plan_max_model_len": 0, "plan_batch": 8, "plan_dp": 2, "plan_window": 4096}


@pytest.mark.parametrize("key, value, named", PLAN_CAPS)
def test_planner_widget_over_a_cap_gets_one_sentence(key, value, named):
    at = page("planner")
    assert not at.exception and not at.error
    at.number_input(key=key).set_value(value).run()
    one_sentence(at, named, f"{value:,}")
    at.number_input(key=key).set_value(BACK[key]).run()  # back in range: the page plans again
    assert not at.exception and not at.error


def test_planner_has_no_caps_on_your_own_machine(monkeypatch):
    monkeypatch.delenv("KVVIZ_HOSTED")
    at = page("planner", plan_context=str(TOKENS * 4), plan_batch=str(REQUESTS * 2))
    assert not at.exception and not at.error


# ---------------------------------------------------------------- the vLLM engine page
def test_engine_link_naming_an_unlisted_server_is_refused_in_a_sentence(monkeypatch):
    watched, watch_for = [], panels.watch_for
    monkeypatch.setattr(panels, "watch_for", lambda url: watched.append(url) or watch_for(url))
    at = page("engine", engine_urls_hosted=[EVIL, ALLOWED[0]])
    text = one_sentence(at, "only watches the vLLM servers its host lists", "never contacted")
    assert EVIL not in text
    assert at.multiselect(key="engine_urls_hosted").value == [ALLOWED[0]]
    assert watched and EVIL not in watched


def test_engine_link_with_the_unhosted_box_parameter_is_refused_too():
    at = page("engine", engine_urls=EVIL)
    one_sentence(at, "only watches the vLLM servers its host lists")
    assert not at.text_area  # the free-form box never appears in hosted mode


def test_engine_link_over_the_server_count_cap_gets_one_sentence():
    at = page("engine", engine_urls_hosted=list(ALLOWED))
    one_sentence(at, f"the number of vLLM servers is {len(ALLOWED)}", f"allows {POLICY.max_engines}")


def test_engine_widget_over_the_server_count_cap_gets_one_sentence():
    at = page("engine")
    assert not at.exception and not at.error
    at.multiselect(key="engine_urls_hosted").set_value(list(ALLOWED)).run()
    one_sentence(at, "the number of vLLM servers is 5")
    at.multiselect(key="engine_urls_hosted").set_value(list(ALLOWED[:2])).run()
    assert not at.exception and not at.error


def test_engine_widget_cannot_choose_an_unlisted_server():
    at = page("engine")
    at.multiselect(key="engine_urls_hosted").set_value([EVIL]).run()  # Streamlit drops it
    assert not at.exception
    assert at.multiselect(key="engine_urls_hosted").value == []
    assert any("Enter the base URL" in i.value for i in at.info)


def test_engine_visitors_cannot_disconnect_shared_watches():
    at = page("engine")
    assert not at.exception
    assert not [b for b in at.button if b.key == "engine_disconnect"]


def test_policy_check_limits_holds_every_planner_and_engine_cap():
    rules = hosted.Policy(enabled=True, engine_urls=ALLOWED[:1])
    rules.check_limits(None, plan_tokens={"context T": TOKENS}, plan_requests=REQUESTS, plan_gpus=GPUS,
                       engine_urls=ALLOWED[:1])
    for call, message in (
            (lambda: rules.check_limits(None, plan_tokens={"context T": TOKENS + 1}), "context T is"),
            (lambda: rules.check_limits(None, plan_requests=REQUESTS + 1), "the batch is"),
            (lambda: rules.check_limits(None, plan_gpus=GPUS + 1), "TP × PP × DP is"),
            (lambda: rules.check_limits(None, engine_urls=[EVIL]), "never contacted"),
            (lambda: rules.check_limits(None, engine_urls=ALLOWED[:1] * 5), "vLLM servers is 5")):
        with pytest.raises(hosted.UserError, match=message):
            call()
    hosted.Policy().check_limits(None, plan_tokens={"context T": 10**9}, engine_urls=[EVIL])  # not hosted


def test_hosted_run_limit_comes_from_the_environment():
    assert hosted.policy_from_env({"KVVIZ_HOSTED": "1", "KVVIZ_HOSTED_MAX_RUN_S": "2.5"}).max_run_s == 2.5
    assert hosted.policy_from_env({"KVVIZ_HOSTED": "1"}).max_run_s == 60.0
    for bad in ("soon", "0", "-3", "1e9"):
        with pytest.raises(UserError, match="KVVIZ_HOSTED_MAX_RUN_S"):
            hosted.policy_from_env({"KVVIZ_HOSTED": "1", "KVVIZ_HOSTED_MAX_RUN_S": bad})
