"""Serving: several requests share one real paged KV cache (transformers' continuous batching).

Widgets and placeholders only: the run is kvviz.serving's, the charts kvviz.serving_charts'.
A run records one snapshot per forward pass, then the page replays them into placeholders.
"""
import time

import streamlit as st

from kvviz import charts, serving, ui
from kvviz import serving_charts as sc

COLUMNS = 16  # blocks per row of the grid
DEFAULT_REQUESTS = "\n".join([
    "What is a KV cache?",
    "Why does my chatbot get slower and use more memory as the conversation gets longer?",
    "Explain, with an everyday example, how an operating system uses paging to share memory "
    "between programs, and why fixed-size pages avoid fragmentation.",
    "Hi!",
])
SYSTEM = ui.prompt_presets()["Chat with a long system prompt"]["system"]
rules = ui.policy()  # hosted caps (no-ops when not hosted)

spec = ui.model_settings()
st.title("Serving · many requests, one paged KV cache")
st.caption("Requests run through transformers' continuous batching (`generate_batch`'s manager and its "
           "`PagedAttentionCache`) with a deliberately small pool of blocks. The grid and counts are "
           "read from transformers' allocator after every step unless labelled modelled.")
lm = ui.load_model_with_progress(spec)

left, right = st.columns([3, 2])
prompts_text = left.text_area("Requests, one per line", DEFAULT_REQUESTS, height=150, key="srv_requests")
share = right.toggle("Shared system prompt", value=True, key="srv_share",
                     help="The same long system prompt before every request: a common prefix to reuse")
system = right.text_area("System prompt", SYSTEM, height=100, key="srv_system", disabled=not share)
c1, c2, c3, c4, c5 = st.columns(5)
num_blocks = c1.number_input("Pool size (blocks)", 4, 1024, 24, key="srv_blocks")
block_size = c2.select_slider("Block size (tokens)", [4, 8, 16, 32, 64], value=16, key="srv_block_size")
max_new = c3.slider("New tokens per request", 1, rules.cap("new_tokens", 128), 24, key="srv_max_new")
every = c4.slider("A new request every … steps", 0, 16, 2, key="srv_every",
                  help="0: all arrive at once (deduplicated after prefill, no prefill saved); later "
                       "arrivals find the prefix already cached and skip computing it")
delay_ms = c5.slider("Replay delay (ms per step)", 0, 1000, 150, 50, key="srv_delay")
run = st.button("Run", type="primary", disabled=lm is None, key="srv_run")
status = st.empty()


def execute() -> serving.ServingResult | None:
    """Run the requests on the device (one session at a time); None if refused."""
    cfg = serving.ServingConfig(block_size=block_size, num_blocks=int(num_blocks), max_new_tokens=max_new,
                                arrival_every=every, time_limit_s=rules.max_run_s if rules.enabled else None)
    try:
        prompts = serving.parse_requests(prompts_text, rules.cap("batch", serving.MAX_REQUESTS))
        ids = serving.encode_requests(lm.tokenizer, prompts, system if share else "")
        for row in ids:
            rules.check_prompt_tokens(len(row))
        serving.check_fits(ids, cfg)
        with ui.device_turn(status), st.spinner("Running the requests through continuous batching…"):
            result = serving.run_serving(lm, ids, cfg, on_step=lambda s: status.caption(
                f"step {s.step}: {s.num_used_blocks} of {s.num_blocks} blocks in use"))
        status.empty()
        return result
    except ValueError as exc:
        status.error(ui.inert(exc))
    except TimeoutError as exc:
        status.warning(f"Nothing to show: the run {exc}.")
    except RuntimeError as exc:
        status.error("Continuous batching failed" + ("." if rules.enabled else "; transformers said:"))
        if not rules.enabled:  # hosted visitors get no internals
            st.code(str(exc), language=None)
    return None


def show_metrics(result: serving.ServingResult) -> None:
    saved = result.prefill_ms_saved
    cols = st.columns(5)
    cols[0].metric("Steps (forward passes)", len(result.snapshots))
    cols[1].metric("Peak blocks in use", f"{result.peak_used_blocks} / {result.num_blocks}")
    cols[2].metric("Prefix blocks reused", result.prefix_blocks_reused,
                   help="Full prompt blocks a request took from the cache instead of computing")
    cols[3].metric("Prefill saved (estimate)", "–" if saved is None else f"{saved:,.0f} ms",
                   help="Modelled: reused tokens × this run's extra step time per computed token")
    cols[4].metric("Requests preempted", result.num_preempted,
                   help="Evicted when the pool was full; their blocks were freed and recomputed later")


def show_steps(result: serving.ServingResult, animate: bool) -> None:
    """The grid, usage and request lanes at one step; replayed step by step right after a run."""
    steps, specs = result.snapshots, step_specs(result)
    scrub, header = st.empty(), st.empty()
    grid_col, usage_col = st.columns([3, 2])
    with grid_col:
        st.subheader("The block pool")
        grid_slot = st.empty()
        st.caption("Each cell is one block of `block size` token slots. A number: the request holding it; "
                   "S: shared by several requests (a common prefix); c: no longer referenced but kept "
                   "cached for reuse until the pool needs it; blank: free."
                   + (" **Modelled** with kvviz.blocks (no sharing shown)." if result.source != "real" else ""))
        st.subheader("Requests")
        lanes_slot = st.empty()
    with usage_col:
        st.subheader("Pool usage over time")
        usage_slot = st.empty()
        st.caption("Blocks held by requests and kept cached, read from the allocator; dashed red: the "
                   "blocks the same requests would hold without prefix sharing (**modelled**: "
                   "⌈tokens ÷ block size⌉ each).")
    if animate:
        for snap in steps:
            draw(specs, snap, steps, header, grid_slot, usage_slot, lanes_slot)
            time.sleep(delay_ms / 1000)
    pick = scrub.slider("Step", 1, len(steps), len(steps), key=f"srv_step_{st.session_state['serving_run']}")
    draw(specs, steps[pick - 1], steps, header, grid_slot, usage_slot, lanes_slot)


def step_specs(result: serving.ServingResult) -> dict:
    """The three replayed charts' specs, built once per run with axes fixed to the run."""
    ids, steps = [r.request_id for r in result.requests], result.snapshots
    top = max([result.num_blocks] + [s.unshared_blocks for s in steps]) + 2
    grid = sc.pool_grid_chart(sc.grid_frame(steps[0], COLUMNS), ids, result.num_blocks, COLUMNS)
    usage = sc.usage_chart(sc.usage_frame([]), result.num_blocks, len(steps), top)
    lanes = sc.timeline_chart(sc.timeline_frame([]), ids, len(steps))
    return {"grid": charts.to_spec(grid), "usage": charts.to_spec(usage), "lanes": charts.to_spec(lanes)}


def draw(specs, snap, steps, header, grid_slot, usage_slot, lanes_slot) -> None:
    header.caption(f"Step {snap.step} · {snap.time_s:.2f} s · {snap.num_used_blocks} blocks held, "
                   f"{snap.num_shared_blocks} shared, {snap.num_cached_blocks} cached, "
                   f"{snap.num_free_blocks} free ({snap.source})")
    grid_slot.vega_lite_chart(charts.spec_with_data(specs["grid"], sc.grid_frame(snap, COLUMNS)))
    usage_slot.vega_lite_chart(charts.spec_with_data(specs["usage"], sc.usage_frame(steps[:snap.step])))
    lanes_slot.vega_lite_chart(charts.spec_with_data(specs["lanes"], sc.timeline_frame(steps[:snap.step])))


def show_requests(result: serving.ServingResult) -> None:
    st.subheader("Prefix reuse")
    st.altair_chart(sc.reuse_chart(sc.reuse_frame(result)), key="srv_reuse_chart")
    st.dataframe(sc.requests_frame(result), hide_index=True, key="srv_requests_table")
    st.caption("Times from the step clock: submitted → first step that computed the request (queued), "
               "→ end of the step that produced its first token (TTFT), → finished (total).")
    with st.expander("Outputs (model text, shown verbatim)"):
        for r in result.requests:
            st.text(f"{r.request_id} · {r.prompt_tokens} prompt tokens")
            st.code(r.text or " ", language=None, wrap_lines=True)


fresh = execute() if run and lm is not None else None
if fresh is not None:
    st.session_state["serving_result"] = fresh
    st.session_state["serving_run"] = st.session_state.get("serving_run", 0) + 1
if "serving_result" in st.session_state:
    result = st.session_state["serving_result"]
    if result.source != "real":
        st.warning("transformers' block tables could not be read here: the pool is modelled from the "
                   "scheduler's token counts.")
    show_metrics(result)
    show_steps(result, animate=fresh is not None)
    show_requests(result)
elif not run:
    status.info("Press **Run** to send the requests through one shared paged cache.")
