"""The Serving page: several requests share one real paged KV cache (transformers' continuous batching).

Widgets and placeholders only: the run is kvviz.serving.compute's, the charts kvviz.serving.charts'.
Each forward pass's snapshot is drawn as transformers' loop produces it (slow motion pauses the
loop itself after each step); a finished run can be scrubbed step by step. `app_pages/serving.py`
calls `page()`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import streamlit as st

from kvviz.app import hosted, links, tables, ui
from kvviz.core.errors import UserError
from kvviz.engine.models import LoadedModel
import kvviz.serving.charts
from kvviz.serving import compute
from kvviz.viz import charts

COLUMNS = 16  # blocks per row of the grid
LIVE_INTERVAL_S = 0.1  # without slow motion, redraw at most ten times a second while running
DEFAULT_REQUESTS = "\n".join([
    "What is a KV cache?",
    "Why does my chatbot get slower and use more memory as the conversation gets longer?",
    "Explain, with an everyday example, how an operating system uses paging to share memory "
    "between programs, and why fixed-size pages avoid fragmentation.",
    "Hi!",
])
REQUEST_COLUMNS = {"request_id": ("request", "text"), "prompt_tokens": ("prompt tokens", "count"),
                   "reused_tokens": ("reused tokens", "count"), "new_tokens": ("new tokens", "count"),
                   "queued_ms": ("queued", "ms"), "ttft_ms": ("time to first token", "ms"),
                   "total_ms": ("total", "ms")}
URL = "query-params"  # settings are bound to the page's link; the two text boxes travel as kvviz.app.links texts


def default_system() -> str:
    return ui.prompt_presets()["Chat with a long system prompt"]["system"]


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What the visitor set in the sidebar."""
    prompts_text: str
    share: bool
    system: str
    num_blocks: int
    block_size: int
    max_new: int
    every: int
    delay_ms: int

    def config(self, rules: hosted.Policy) -> compute.ServingConfig:
        return compute.ServingConfig(block_size=self.block_size, num_blocks=self.num_blocks,
                                     max_new_tokens=self.max_new, arrival_every=self.every,
                                     step_delay_ms=self.delay_ms,
                                     time_limit_s=rules.max_run_s if rules.enabled else None)

    def shared_system(self) -> str:
        return self.system if self.share else ""


@dataclass(frozen=True)
class Slots:
    """The page's placeholders, top to bottom."""
    status: object
    metrics: object
    scrub: object
    header: object


def page() -> None:
    """The whole Serving page."""
    rules = ui.policy()  # hosted caps (no-ops when not hosted)
    load_config = ui.model_settings()
    st.title("Serving · many requests, one paged KV cache")
    st.caption("Requests run through transformers' continuous batching (`generate_batch`'s manager and its "
               "`PagedAttentionCache`) with a deliberately small pool of blocks. The grid and counts are "
               "read from transformers' allocator after every step unless labelled modelled.")
    lm = ui.load_model_with_progress(load_config)
    settings = sidebar_settings(rules)
    ui.share_link([links.Text("srv_requests", "requests", settings.prompts_text, DEFAULT_REQUESTS),
                   links.Text("srv_system", "system prompt", settings.system, default_system())])
    st.caption(summary(settings))
    run_col, stop_col, _ = st.columns([1, 1, 8], vertical_alignment="center")
    run = run_col.button("Run", type="primary", disabled=lm is None, key="srv_run")
    stopped = stop_col.button("Stop", key="srv_stop", help="Ends a run between two steps (its steps are not kept)")
    slots = Slots(st.empty(), st.empty(), st.empty(), st.empty())
    show_page(rules, load_config.name, lm, settings, slots, run, stopped)


def sidebar_settings(rules: hosted.Policy) -> Settings:
    """The settings sit in the sidebar (closed on stage), so the run's figures and the pool's grid
    start on the first screen at 1280 x 720."""
    chars = rules.cap("prompt_chars", ui.MAX_PROMPT_CHARS)
    with st.sidebar:
        st.subheader("Requests")
        prompts_text = st.text_area("Requests, one per line",
                                    ui.text_from_link("srv_requests", DEFAULT_REQUESTS, chars),
                                    height=150, max_chars=chars, key="srv_requests")
        st.caption(f"At most {chars:,} characters.")
        share = st.toggle("Shared system prompt", value=True, key="srv_share", bind=URL,
                          help="The same long system prompt before every request: a common prefix to reuse")
        system = st.text_area("System prompt", ui.text_from_link("srv_system", default_system(), chars),
                              height=100, max_chars=chars, key="srv_system", disabled=not share)
        st.caption(f"At most {chars:,} characters.")
        num_blocks = st.number_input("Pool size (blocks)", 4, 1024, 24, key="srv_blocks", bind=URL,
                                     help=pool_help(rules))
        block_size = st.select_slider("Block size (tokens)", [4, 8, 16, 32, 64], value=16,
                                      key="srv_block_size", bind=URL)
        max_new = st.slider("New tokens per request", 1, rules.cap("new_tokens", 128), 24, key="srv_max_new",
                            bind=URL)
        every = st.slider("A new request every … steps", 0, rules.cap("arrival_every", 16), 2, key="srv_every",
                          bind=URL, help="0: all arrive at once (deduplicated after prefill, no prefill saved); "
                                         "later arrivals find the prefix already cached and skip computing it")
        delay_ms = st.slider("Slow motion (ms pause per step)", 0, rules.cap("step_delay_ms", 1000), 150, 50,
                             key="srv_delay", bind=URL,
                             help="Holds the batching loop after every step so each one can be followed; "
                                  "pauses are left out of every time shown")
    return Settings(prompts_text=prompts_text, share=share, system=system, num_blocks=int(num_blocks),
                    block_size=block_size, max_new=max_new, every=every, delay_ms=delay_ms)


def pool_help(rules: hosted.Policy) -> str | None:
    if not rules.enabled:
        return None
    return (f"This hosted kvviz allows a pool of at most {rules.max_pool_tokens:,} token slots (blocks × "
            f"block size), e.g. {rules.max_pool_tokens // 16:,} blocks of 16 tokens")


def check_settings(rules: hosted.Policy, model: str, settings: Settings) -> list[str]:
    """The hosted caps on everything the visitor set, checked before any text is tokenized
    (UserError); the requests, one per line."""
    rules.check_limits(model, new_tokens=settings.max_new,
                       prompt_chars=max(len(settings.prompts_text), len(settings.system)),
                       pool_tokens=settings.num_blocks * settings.block_size,
                       step_delay_ms=settings.delay_ms, arrival_every=settings.every)
    prompts = compute.parse_requests(settings.prompts_text, rules.cap("batch", compute.MAX_REQUESTS))
    rules.check_limits(model, batch=len(prompts))
    return prompts


def summary(settings: Settings) -> str:
    requests = sum(1 for line in settings.prompts_text.splitlines() if line.strip())
    return (f"{requests} requests · pool of {settings.num_blocks} blocks of {settings.block_size} tokens · "
            f"{settings.max_new} new tokens each · requests and settings in the sidebar")


def show_page(rules: hosted.Policy, model: str, lm: LoadedModel | None, settings: Settings, slots: Slots,
              run: bool, stopped: bool) -> None:
    """Run when asked, then the last finished run (or what to press)."""
    has_result = "serving_result" in st.session_state
    view = StepView(settings, slots) if (run and lm is not None) or has_result else None  # no empty panels
    requests_slot = st.container()
    fresh = execute(rules, model, lm, settings, slots.status, view) if view is not None and run else None
    if fresh is not None:
        st.session_state["serving_result"] = fresh
        st.session_state["serving_run"] = st.session_state.get("serving_run", 0) + 1
    if view is not None and "serving_result" in st.session_state and not (run and fresh is None):
        show_last_run(st.session_state["serving_result"], view, slots, requests_slot, stopped)
    elif stopped:
        slots.status.info("Stopped. Press **Run** to send the requests again.")
    elif not run:
        slots.status.info("Press **Run** to send the requests through one shared paged cache.")


def show_last_run(result: compute.ServingResult, view: StepView, slots: Slots, requests_slot,
                  stopped: bool) -> None:
    if result.source != "real":
        slots.status.warning("transformers' block tables could not be read here: the pool is modelled from "
                             "the scheduler's token counts.")
    elif stopped:
        slots.status.info("Stopped. Below: the last run that finished.")
    show_metrics(result, slots.metrics)
    view.show_result(result)
    with requests_slot:
        show_requests(result)


def execute(rules: hosted.Policy, model: str, lm: LoadedModel, settings: Settings, status,
            view: StepView) -> compute.ServingResult | None:
    """Run the requests on the device (one session at a time), drawing every step as it happens."""
    cfg = settings.config(rules)
    try:
        prompts = check_settings(rules, model, settings)  # hosted caps, server side, before tokenizing
        ids = compute.encode_requests(lm.tokenizer, prompts, settings.shared_system())
        for row in ids:
            rules.check_prompt_tokens(len(row))
        compute.check_fits(ids, cfg)
        view.expect(compute.request_ids(len(ids)), compute.expected_steps(ids, cfg),
                    compute.unshared_blocks_bound(ids, cfg))
        with ui.device_turn(status):
            status.caption("Running the requests through continuous batching…")
            result = stream(compute.serve(lm, ids, cfg), view)
        status.empty()
        return result
    except compute.RunTimeLimit as exc:  # a UserError too, so first
        status.warning(f"Stopped: the run {exc}. Steps drawn so far stay above.")
    except (UserError, ValueError) as exc:  # ValueError: the tokenizer's or transformers' refusal
        status.error(ui.visitor_text(exc, "serving run"))
    except RuntimeError as exc:
        status.error("Continuous batching failed" + ("." if rules.enabled else "; transformers said:"))
        if not rules.enabled:  # hosted visitors get no internals
            st.code(str(exc), language=None)
    return None


def stream(steps, view: StepView) -> compute.ServingResult:
    """Draw each snapshot as transformers' loop produces it; the run's result at the end."""
    try:
        while True:
            view.draw_live(next(steps))
    except StopIteration as done:
        return done.value
    finally:
        steps.close()  # a Stop click lands here: the manager is stopped and destroyed


def show_metrics(result: compute.ServingResult, slot) -> None:
    saved = result.prefill_ms_saved
    cols = slot.container().columns(5)
    cols[0].metric("Steps (forward passes)", len(result.snapshots))
    cols[1].metric("Peak blocks in use", f"{result.peak_used_blocks} / {result.num_blocks}")
    cols[2].metric("Prefix blocks reused", result.prefix_blocks_reused,
                   help="Full prompt blocks a request took from the cache instead of computing")
    cols[3].metric("Prefill saved (estimate)", "–" if saved is None else f"{saved:,.0f} ms",
                   help="Modelled: reused tokens × this run's extra step time per computed token")
    cols[4].metric("Requests preempted", result.num_preempted,
                   help="Evicted when the pool was full; their blocks were freed and recomputed later")


class StepView:
    """The grid, usage and request lanes at one step: drawn live during a run, scrubbed after.

    The Vega-Lite dicts are built once per shape (pool size, requests, step axis) and only their data swapped;
    the step axis starts at an estimate of the run's length and widens if the run goes past it.
    """

    def __init__(self, settings: Settings, slots: Slots):
        self.delay_ms, self.block_size, self.slots = settings.delay_ms, settings.block_size, slots
        grid_col, usage_col = st.columns([3, 2], gap="large")
        with grid_col:
            st.subheader("The block pool")
            self.grid_slot, self.grid_caption = st.empty(), st.empty()
            st.subheader("Requests")
            self.lanes_slot = st.empty()
        with usage_col:
            st.subheader("Pool usage over time")
            self.usage_slot = st.empty()
            st.caption("Blocks held by requests and kept cached, read from the allocator; dashed red: the "
                       "blocks the same requests would hold without prefix sharing (**modelled**: "
                       "⌈tokens ÷ block size⌉ each).")
        self.ids, self.max_step, self.top_blocks, self.vegas, self.shown = [], 2, 0, None, []
        self.last_draw_s = 0.0

    def expect(self, ids: list[str], steps: int, top_blocks: int) -> None:
        """Before a run: its requests, estimated steps and most blocks any series can reach."""
        self.ids, self.max_step, self.top_blocks, self.vegas = ids, max(steps, 2), top_blocks, None

    def draw_live(self, snap) -> None:
        """One more step of a running run (redrawn at most every LIVE_INTERVAL_S)."""
        self.shown.append(snap)
        now = time.monotonic()
        if now - self.last_draw_s >= LIVE_INTERVAL_S or self.delay_ms > 0:
            self.last_draw_s = now
            self.draw(snap, self.shown, self.block_size)

    def draw(self, snap, steps, size: int) -> None:
        if snap.step > self.max_step:
            self.max_step, self.vegas = int(snap.step * 1.5), None
        if self.vegas is None:
            top = max([snap.num_blocks, self.top_blocks] + [s.unshared_blocks for s in steps]) + 2
            self.vegas = step_vega_lite(self.ids, snap, self.max_step, top)
        self.slots.header.caption(f"Step {snap.step} · {snap.time_s:.2f} s · {snap.num_used_blocks} blocks held, "
                                  f"{snap.num_shared_blocks} shared, {snap.num_cached_blocks} cached, "
                                  f"{snap.num_free_blocks} free ({snap.source})")
        self.grid_caption.caption(grid_caption(size, snap.source))
        self.grid_slot.vega_lite_chart(charts.vega_lite_with_data(self.vegas["grid"], kvviz.serving.charts.grid_frame(snap, COLUMNS)))
        upto = [s for s in steps if s.step <= snap.step]
        self.usage_slot.vega_lite_chart(charts.vega_lite_with_data(self.vegas["usage"], kvviz.serving.charts.usage_frame(upto)))
        self.lanes_slot.vega_lite_chart(charts.vega_lite_with_data(self.vegas["lanes"], kvviz.serving.charts.timeline_frame(upto)))

    def show_result(self, result: compute.ServingResult) -> None:
        """The finished run, with a scrubber over its steps."""
        steps = result.snapshots
        self.ids, self.max_step, self.vegas = [r.request_id for r in result.requests], len(steps), None
        self.top_blocks = 0
        pick = self.slots.scrub.slider("Step", 1, len(steps), len(steps),
                                       key=f"srv_step_{st.session_state['serving_run']}")
        self.draw(steps[pick - 1], steps, result.config.block_size)


def grid_caption(size: int, source: str) -> str:
    return (f"Each cell is one block of {size} token slots. A number: the request holding it; "
            "S: shared by several requests (a common prefix); c: no longer referenced but kept "
            "cached for reuse until the pool needs it; blank: free."
            + (" **Modelled** with kvviz.core.blocks (no sharing shown)." if source != "real" else ""))


def step_vega_lite(ids: list[str], snap, max_step: int, top_blocks: int) -> dict:
    """The three step charts' Vega-Lite dicts, with axes fixed to the run (or to its estimated length)."""
    grid = kvviz.serving.charts.pool_grid_chart(kvviz.serving.charts.grid_frame(snap, COLUMNS), ids, snap.num_blocks, COLUMNS)
    usage = kvviz.serving.charts.usage_chart(kvviz.serving.charts.usage_frame([]), snap.num_blocks, max_step, top_blocks)
    lanes = kvviz.serving.charts.timeline_chart(kvviz.serving.charts.timeline_frame([]), ids, max_step)
    scale = ui.chart_font_scale()
    return {name: charts.with_font_scale(charts.to_vega_lite(chart), scale)
            for name, chart in (("grid", grid), ("usage", usage), ("lanes", lanes))}


def show_requests(result: compute.ServingResult) -> None:
    st.subheader("Prefix reuse")
    tables.draw_altair(st, kvviz.serving.charts.reuse_chart(kvviz.serving.charts.reuse_frame(result)), key="srv_reuse_chart")
    tables.people_table(kvviz.serving.charts.requests_frame(result), REQUEST_COLUMNS, key="srv_requests_table")
    st.caption("Times from the step clock: submitted → first step that computed the request (queued), "
               "→ end of the step that produced its first token (TTFT), → finished (total).")
    with st.expander("Outputs (model text, shown verbatim)"):
        for r in result.requests:
            st.text(f"{r.request_id} · {r.prompt_tokens} prompt tokens")
            st.code(r.text or " ", language=None, wrap_lines=True)
