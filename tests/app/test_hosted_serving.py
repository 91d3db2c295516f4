"""The Serving page in hosted mode (KVVIZ_HOSTED=1), through the page (AppTest): every number a visitor
sets has a cap from the one policy, the text boxes a character cap checked before any tokenizing, and
a run at the caps stays within a stated memory bound (the server's resident memory sampled during it)."""
import re
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from kvviz.app import hosted
from kvviz.core.errors import UserError
from kvviz.serving import compute as serving
from kvviz.serving import panel

pytestmark = pytest.mark.slow  # AppTest pages with the real default model: make test, not make check

PAGE = str(Path(__file__).resolve().parents[2] / "app_pages" / "serving.py")
CAPS = hosted.Policy(enabled=True)
# A run at the caps adds the pool (4,096 token slots × 46,080 bytes per token of SmolLM2-135M in
# fp32 = 180 MiB) and a 256-token prefill chunk's activations: +251 MB measured; before the cap, 1,024
# blocks of 64 added 2,957 MB. The bound leaves room for the allocator's slack, not for a second pool.
PEAK_GROWTH_BOUND_MB = 450


@pytest.fixture(autouse=True)
def hosted_mode(monkeypatch, default_lm):  # default_lm: the model converted before the page loads it
    from streamlit import config
    before = config.get_option("client.showErrorDetails")
    monkeypatch.setenv("KVVIZ_HOSTED", "1")
    monkeypatch.delenv("KVVIZ_MODEL", raising=False)
    yield
    config.set_option("client.showErrorDetails", before)


@pytest.fixture
def no_tokenizing(monkeypatch):
    """Fails the test if the page tokenizes anything."""
    def refuse(*args, **kwargs):
        raise AssertionError("tokenized before the caps were checked")
    monkeypatch.setattr(serving, "encode_requests", refuse)


SETTINGS = panel.Settings(prompts_text="Hi", share=True, system="Be brief.", num_blocks=24, block_size=16,
                          max_new=24, every=2, delay_ms=0)


def page(**params) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=180)
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


def refusal(at: AppTest) -> str:
    assert not at.exception, at.exception
    assert not at.get("vega_lite_chart"), "no run, no charts"
    return " ".join(e.value for e in at.error).replace("\\", "")  # Markdown escapes (ui.inert) off


def test_the_caps_are_stated_beside_the_boxes():
    at = page()
    assert [c.value for c in at.sidebar.caption if c.value.startswith("At most")] == \
        ["At most 4,000 characters."] * 2
    assert "4,096 token slots" in at.number_input(key="srv_blocks").help
    assert at.slider(key="srv_every").max == 16 and at.slider(key="srv_delay").max == 1000


@pytest.mark.parametrize("box", ["srv_requests", "srv_system"])
def test_a_box_keeps_at_most_its_cap_whatever_the_browser_sends(box):
    at = page()
    at.text_area(key=box).set_value("Why? " * 2_000_000).run()  # 10 M characters, as a crafted client
    assert not at.exception
    assert len(at.text_area(key=box).value) == CAPS.max_prompt_chars  # cut by the server (max_chars)


@pytest.mark.parametrize("box", ["prompts_text", "system"])
def test_text_over_the_character_cap_is_refused_before_tokenizing(box):
    """The page's own check, for text that got past the widget (Streamlit cuts it today)."""
    settings = replace(SETTINGS, **{box: "Why? " * 2_000_000})
    with pytest.raises(UserError, match="is 10,000,000 characters; this hosted kvviz allows 4,000"):
        panel.check_settings(CAPS, "default", settings)  # raises before it parses or tokenizes a line


@pytest.mark.parametrize("blocks, block_size, said", [
    (1024, 64, "the pool (blocks × block size, in tokens) is 65,536; this hosted kvviz allows 4,096"),
    (257, 16, "is 4,112; this hosted kvviz allows 4,096")])
def test_a_pool_over_the_cap_is_refused_in_a_sentence(blocks, block_size, said, no_tokenizing):
    at = page(srv_blocks=str(blocks), srv_block_size=str(block_size))
    assert at.number_input(key="srv_blocks").value == blocks  # the link carried it; the run refuses it
    at.button(key="srv_run").click().run()
    assert said in refusal(at)


@pytest.mark.parametrize("field, value, said", [("delay_ms", 10**9, "the pause per step (ms) is 1,000,000,000"),
                                                ("every", 10**6, "the steps between arrivals is 1,000,000"),
                                                ("max_new", 10**6, "new tokens is 1,000,000")])
def test_every_number_past_its_cap_is_refused(field, value, said):
    with pytest.raises(UserError, match=re.escape(said)):
        panel.check_settings(CAPS, "default", replace(SETTINGS, **{field: value}))


def test_a_run_at_the_caps_stays_within_its_memory_bound():
    at = page()
    system = ("You are a patient teacher who explains computer memory with everyday examples. " * 40)[:3000]
    requests = "\n".join((f"Question {i}: why does a paged cache avoid fragmentation, and what does a "
                          "block table hold? " * 12)[:950] for i in range(CAPS.max_batch))
    at.text_area(key="srv_system").set_value(system)
    at.text_area(key="srv_requests").set_value(requests)
    at.number_input(key="srv_blocks").set_value(CAPS.max_pool_tokens // 64)
    at.select_slider(key="srv_block_size").set_value(64)
    at.slider(key="srv_max_new").set_value(16)
    at.slider(key="srv_delay").set_value(0)
    at.slider(key="srv_every").set_value(0)
    with RssSampler() as rss:
        at.button(key="srv_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Peak blocks in use"].endswith(f"/ {CAPS.max_pool_tokens // 64}")
    growth_mb = (rss.peak - rss.start) / 1e6
    print(f"serving at the caps: RSS {rss.start / 1e6:,.0f} MB -> peak {rss.peak / 1e6:,.0f} MB "
          f"(+{growth_mb:,.0f} MB)")
    assert growth_mb <= PEAK_GROWTH_BOUND_MB, (rss.start, rss.peak)


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


class RssSampler:
    """This process's resident memory every 20 ms while the block runs: start and peak, in bytes."""

    def __enter__(self):
        self.start = self.peak = rss_bytes()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()
        return self

    def sample(self) -> None:
        while not self.done.wait(0.02):
            self.peak = max(self.peak, rss_bytes())

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(timeout=5)
        self.peak = max(self.peak, rss_bytes())
