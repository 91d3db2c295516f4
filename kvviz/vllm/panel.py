"""Streamlit panels of watched vLLM engines, shared by the Engine page (live) and Replay.

The only module of kvviz.vllm that imports streamlit. Engines are drawn side by side, each from
its `EngineState`, then, for two servers or more or a request log, the fleet (`kvviz.vllm.fleet`);
every label says whether a number comes from events, metrics, or is derived.
"""
from __future__ import annotations

import copy
import os
import time
from pathlib import Path

import streamlit as st

from kvviz.app import ui
from kvviz.vllm import charts, fleet, fleet_charts, fleet_frames, lifetimes, request_charts, request_views, tokens
from kvviz.vllm import views, would_hit
from kvviz.vllm.trace import FORMAT, Recording, peek_format, replay_frames
from kvviz.vllm.state import EngineState
from kvviz.vllm.watch import EngineWatch

MAX_SIDE_BY_SIDE = 3
MAX_PLAY_FRAMES = 40  # frames drawn when a watch is played
MAX_FRAME_WAIT_S = 2.0  # a played frame waits at most this long: a play lasts minutes at most


@st.cache_resource(show_spinner=False, max_entries=16)
def watch_for(url: str) -> EngineWatch:
    """One watch per server URL per process: vLLM's publisher feeds one subscriber, so every
    session looking at the same server shares it. It reads the request log the host names in
    KVVIZ_VLLM_REQUEST_LOG (`make vllm-fleet-demo` sets it), its lines for this server only; a
    visitor never names a path."""
    return EngineWatch([url], request_log=os.environ.get("KVVIZ_VLLM_REQUEST_LOG") or None).start()


def snapshot(watches: list[EngineWatch]):
    """(states, meta, notes) of all watches, copied under their locks so drawing never races the
    watch threads."""
    states, meta, notes = {}, {"servers": {}}, []
    for watch in watches:
        with watch.lock:
            states.update(copy.deepcopy(watch.states))
            meta["servers"].update(copy.deepcopy(watch.recording.meta.get("servers", {})))
            notes.extend(watch.recording.notes[-20:])
    return states, meta, sorted(notes, key=lambda n: n.t_s)


DEMO_ENDED = ("The vLLM demo has ended: `make vllm-demo` stopped its load first, then its server. "
              "The picture below is the last one seen; download the watch to replay it.")


def demo_ended(env: dict | None = None) -> bool:
    """True once `make vllm-demo` has ended its demo: the state file it names in
    KVVIZ_DEMO_STATE reads "ended" (it writes that after stopping the load, then the server)."""
    path = (os.environ if env is None else env).get("KVVIZ_DEMO_STATE", "")
    try:
        return bool(path) and Path(path).read_text().startswith("ended")
    except OSError:
        return False


def show_status(watch: EngineWatch) -> None:
    """One line per server: connected (green) or what is wrong and that kvviz keeps retrying."""
    for conn in watch.connections:
        line = f"{conn.url}: {conn.status}"
        if conn.ok:
            st.caption(":material/link: " + ui.inert(line))
        elif conn.status == "connecting…":
            st.info(ui.inert(line), icon=":material/hourglass_top:")
        else:
            st.warning(ui.inert(line), icon=":material/link_off:")


def download(watches: list[EngineWatch]) -> None:
    """A download of each watch so far (kvviz-vllm-watch JSON; Replay plays it)."""
    for i, watch in enumerate(watches):
        def data(watch=watch) -> bytes:
            with watch.lock:
                recording = copy.deepcopy(watch.recording)
            recording.meta["seconds"] = round(watch.now_s(), 3)
            return recording.to_json()
        st.download_button(f"Download the watch of {watch.urls[0]} (for Replay)", data,
                           file_name="vllm-watch.json", mime="application/json",
                           on_click="ignore", key=f"engine_download_{i}")


def tokenizer_allowlist() -> dict[str, Path]:
    """Served model name -> kvviz's own folder of that model, for the models whose tokenizer a
    watch file or a hosted page may use: the embedded default model (`make vllm-demo` serves it
    under its folder name), once converted."""
    from kvviz.engine import models  # torch: loaded only when a tokenizer is looked up

    folder = models.default_model_dir()
    return {models.DEFAULT_FOLDER: folder} if models.is_complete(folder) else {}


def text_fns(meta: dict, from_file: bool = False) -> dict:
    """URL -> token-ids-to-text function for servers whose tokenizer is readable here. A watch
    file's (`from_file`) or a hosted page's servers get only the allowlist's tokenizers, by the
    served model's name: a path they name is never opened."""
    out = {}
    allowlist_only = from_file or ui.policy().enabled
    servers = meta.get("servers")
    for url, server in (servers.items() if isinstance(servers, dict) else ()):
        if not isinstance(server, dict):
            continue
        fn = (tokens.allowlisted_text_fn(str(server.get("model", "")), tokenizer_allowlist()) if allowlist_only
              else tokens.block_text_fn(url, str(server.get("model_root", ""))))
        if fn is not None:
            out[url] = fn
    return out


def show_engines(states: dict[str, EngineState], texts: dict, key: str, meta: dict | None = None) -> None:
    """Every engine's panels, side by side (a row of at most MAX_SIDE_BY_SIDE); with `meta` (the
    servers' descriptions) each also offers "Would this prompt hit now?"."""
    if not states:
        st.info("No engine has reported yet.")
        return
    items = sorted(states.items())
    for start in range(0, len(items), MAX_SIDE_BY_SIDE):
        row = items[start:start + MAX_SIDE_BY_SIDE]
        # one engine: no column around it, so its own columns are the page's and stack on a phone
        columns = st.columns(len(row)) if len(row) > 1 else [st.container()]
        for column, (name, state) in zip(columns, row):
            with column:
                show_engine(state, texts.get(url_of(name)), f"{key}-{start}-{name}", alone=len(items) == 1)
                if meta is not None:
                    show_would_hit(state, served_model(meta, url_of(name)), f"{key}-{start}-{name}")


def served_model(meta: dict, url: str) -> str:
    servers = meta.get("servers")
    server = servers.get(url) if isinstance(servers, dict) else None
    return str(server.get("model", "")) if isinstance(server, dict) else ""


def show_would_hit(state: EngineState, model: str, key: str) -> None:
    """Paste a prompt: how many of its tokens the cache holds now, and where the match stops."""
    with st.expander("Would this prompt hit now? (derived from events)"):
        size = state.pool.block_size
        if not tokens.has_chat_template(model, tokenizer_allowlist()):
            st.caption("Needs the served model's tokenizer and chat template from kvviz's allowlist "
                       "(the embedded default model, as `make vllm-demo` serves it); this server's "
                       "model is not on it.")
            return
        if size is None:
            st.caption("Appears with the first KV event (it tells the block size).")
            return
        cap = ui.policy().max_prompt_chars
        st.caption(f"The chat request's system prompt and user message, at most {cap:,} characters "
                   "each, tokenized with the served model's tokenizer and chat template and walked "
                   "block by block down the cached prefix tree (tokens compared: a LoRA or cache "
                   "salt is not seen here).")
        left, right = st.columns(2)
        system = left.text_area("System prompt", key=f"hit_system_{key}", height=100)
        user = right.text_area("User message", key=f"hit_user_{key}", height=100)
        if not user.strip():
            return
        if len(system) > cap or len(user) > cap:
            st.error(f"Each box holds at most {cap:,} characters; this one has "
                     f"{max(len(system), len(user)):,}.")
            return
        ids = tokens.chat_ids(model, system, user, tokenizer_allowlist())
        if ids is not None:
            st.text(would_hit.check(state.pool, ids, size).sentence())


def url_of(engine_key: str) -> str:
    host = engine_key.split(" · ", 1)[0]
    return host if "://" in host else "http://" + host


def show_engine(state: EngineState, text_fn, key: str, alone: bool = False) -> None:
    """One engine's panels; `alone` (the only engine) lays them out in two columns (beside other
    engines they stack: Streamlit never stacks columns nested in columns, even on a phone)."""
    st.subheader(ui.inert(state.key), divider="gray")  # from a server URL or a watch file: inert
    left, right = st.columns(2, gap="large") if alone else (st.container(), st.container())
    with left:
        show_numbers(state)
        show_pool(state)
        st.altair_chart(charts.lines_chart(views.history_frame(state), "blocks", views.OVER_TIME, "blocks"),
                        width="stretch")  # its plot's height is the chart's own (charts.lines_chart)
    with right:
        show_tree(state, text_fn)
        st.altair_chart(charts.lines_chart(views.requests_frame(state), "requests", views.REQUEST_COLORS,
                                          "requests", plot_px=120), width="stretch")
    left, right = st.columns(2) if alone else (st.container(), st.container())
    with left:
        st.altair_chart(charts.histogram_chart(views.histogram_frame(state, "ttft"),
                                              "time to first token (metrics)"), width="stretch", height=220)
    with right:
        st.altair_chart(charts.histogram_chart(views.histogram_frame(state, "itl"),
                                              "inter-token latency (metrics)"), width="stretch", height=220)
    with st.expander("Cache config (metrics: vllm:cache_config_info)"):
        st.dataframe(views.config_frame(state), hide_index=True, width="stretch")
    show_requests(state, key)
    show_lifetimes(state)


def show_requests(state: EngineState, key: str) -> None:
    """The per-request table (sortable: click a header), its CSV, and the reasons counted."""
    df = request_views.requests_frame(state)
    st.markdown("**Requests: what each reused from the prefix cache, and why the rest missed**")
    st.caption("Derived from the events, one row per request (grouped by session_id, else by the hash "
               "chains). cached_tokens = reused blocks × block size, vLLM's own count of prompt tokens "
               "served from the cache; prompt_tokens counts the prompt's whole blocks (a partial last "
               "block is never cached, so never in an event). Needs requests sent with "
               "kv_cache_report_mode=full, else reuse is inferred from the chains. Where a client's request "
               "log was read (`kvviz watch --request-log`), vllm_cached_tokens is vLLM's own figure from "
               "each response, and a request no event names (an exact repeat that stored nothing new) "
               "gets a row from the log (source).")
    if df.empty:
        st.info("No request has stored or reused a whole block yet.")
        return
    left, right = st.columns([3, 1])
    with left:
        st.dataframe(df, hide_index=True, width="stretch", height=260,
                     column_config={"miss_reason": st.column_config.TextColumn("miss_reason", width="large")})
    with right:
        st.altair_chart(request_charts.reasons_chart(request_views.reasons_frame(df)), width="stretch",
                        height=240)
    st.download_button("Download the requests (CSV)", request_views.csv_bytes(df),
                       file_name="vllm-requests.csv", mime="text/csv", on_click="ignore",
                       key=f"requests_csv_{key}")


def show_lifetimes(state: EngineState) -> None:
    """Block residency histograms and the capacity planner's sentence (events; derived)."""
    st.markdown("**Block lifetimes (events; derived)**")
    sentence = lifetimes.capacity_sentence(state.ledger.log)
    st.caption(("Derived from the events' batch times: " + sentence) if sentence else
               "No block has been evicted yet: lifetimes and idle times appear with the first eviction.")
    frames = request_views.lifetime_frames(state)
    columns = [*st.columns(2), *st.columns(2)]
    for column, (name, title) in zip(columns, request_views.LIFETIME_CHARTS.items()):
        df = frames[name].dropna()
        with column:
            if df.empty:
                st.caption(f"{title}: none yet")
            else:
                st.altair_chart(request_charts.value_histogram(df, name, title), width="stretch", height=200)


def show_pool(state: EngineState) -> None:
    counts = views.pool_counts(state)
    if counts is None:
        st.info("The pool appears with the first /metrics read.")
        return
    st.caption("Block pool now: held (metrics: usage × usable blocks); cached and free to evict "
               "(derived: cached blocks from events less the full blocks running requests hold)")
    st.altair_chart(charts.pool_chart(views.pool_frame(state), state.metrics.num_usable_blocks),
                    width="stretch")


def show_numbers(state: EngineState) -> None:
    pool, m = state.pool, state.metrics
    a, b, c, d = st.columns(4)
    a.metric("Cached (events)", f"{pool.num_cached_blocks:,}")
    b.metric("Stored / evicted (events)", f"{pool.counts.num_stored:,} / {pool.counts.num_removed:,}",
             help="Blocks newly cached / evicted since the server started (what replay still holds)")
    rate = m.hit_rate if m else None
    c.metric("Hit rate (metrics)", f"{rate:.1%}" if rate is not None else "–",
             help="vllm:prefix_cache_hits / queries, in tokens, since the server started")
    d.metric("Running / waiting (metrics)",
             f"{m.num_requests_running:.0f} / {m.num_requests_waiting:.0f}" if m else "–")
    e, f, g, h = st.columns(4)
    e.metric("Held (metrics)", f"{m.num_held_blocks} / {m.num_usable_blocks}"
             if m and m.num_usable_blocks else "–", help="Blocks held by running requests, of the usable pool")
    f.metric("Reuse reported (events)", f"{pool.counts.num_reused:,}",
             help="Prefix hits vLLM reports for requests sent with kv_cache_report_mode=full")
    g.metric("Preemptions (metrics)", f"{m.num_preemptions:.0f}" if m else "–")
    h.metric("Cleared / restarts (events)", f"{pool.counts.num_cleared} / {pool.counts.num_restarts}")
    never = views.never_hits_sentence(state)
    if never:
        st.caption(never)


def show_tree(state: EngineState, text_fn) -> None:
    text = text_fn or views.ids_text
    df = views.tree_frame(state.pool, text)
    st.caption(f"Prefix tree (events): each row is a cached token sequence (the {views.MAX_SEQUENCES} "
               f"latest, their first {views.MAX_POSITIONS} blocks), each cell a block; the "
               "colour counts the sequences sharing that block. "
               + ("Token text decoded with the served model's tokenizer." if text_fn else
                  "Token ids shown: the served model's tokenizer is not readable here."))
    if df.empty:
        st.info("No cached blocks yet: vLLM caches only full blocks.")
        return
    st.altair_chart(charts.tree_chart(df), width="stretch")
    with st.expander("Cached blocks, in tree order (events)"):
        st.dataframe(views.blocks_table(state.pool, text), hide_index=True, width="stretch")


def show_notes(notes, limit: int = 6) -> None:
    """The latest notes (disconnects, restarts, replay gaps), as plain text."""
    if notes:
        st.caption("Notes")
        st.text("\n".join(f"{n.t_s:8.1f} s  {n.url}: {n.text}" for n in notes[-limit:]))


def replay(recording: Recording, speed: float, upto_s: float | None) -> None:
    """A recorded watch through the same panels: at `upto_s`, or played from the start at
    `speed` × the recorded pace (0: straight to the end). The replay draws its progress as it
    goes, so a visitor who leaves (or moves a control) stops it at once."""
    texts = text_fns(recording.meta, from_file=True)
    slot, bar = st.empty(), st.empty()
    progress = replay_progress(bar)
    if upto_s is not None:
        states = dict(replay_frames(recording, [upto_s], progress))[upto_s]
        bar.empty()
        with slot.container():
            show_engines(states, texts, "replay", meta=recording.meta)
            if fleet.wanted(recording):
                show_fleet(fleet.cut(recording, upto_s), states, "replay")
        show_notes([n for n in recording.notes if n.t_s <= upto_s])
        return
    step_s = max(1.0, recording.duration_s / MAX_PLAY_FRAMES)
    count = int(recording.duration_s / step_s) + 1
    times = [recording.duration_s] if speed <= 0 else [min(i * step_s, recording.duration_s) for i in range(count + 1)]
    for t_s, states in replay_frames(recording, times, progress):
        bar.empty()
        started = time.monotonic()
        with slot.container():
            st.caption(f"t = {t_s:.1f} s of {recording.duration_s:.1f} s")
            show_engines(states, texts, f"replay-{t_s}")
        if speed > 0:  # the recorded pace, scaled (a long watch faster); drawing time counts against it
            time.sleep(min(MAX_FRAME_WAIT_S, max(0.0, step_s / speed - (time.monotonic() - started))))


def replay_progress(bar):
    """A `replay_frames` progress callback that draws into `bar` (each call is a point where
    Streamlit can stop the script)."""
    def progress(done: int, total: int) -> None:
        bar.progress(min(1.0, done / max(1, total)), text=f"Replaying the watch: {done:,} of {total:,} events")
    return progress


def read_watch(path, upload) -> Recording | None:
    """A vLLM watch from an example path or an upload; None when the file is another trace kind.
    TraceError when it is a watch but invalid."""
    if upload is not None:
        if upload.size > ui.upload_limit_bytes():
            return None  # the trace reader refuses it with the size message
        data = upload.getvalue()
    elif path is not None:
        data = open(path, "rb").read()
    else:
        return None
    if peek_format(data) != FORMAT:
        return None
    return Recording.from_json(data)


def replay_page(recording: Recording) -> None:
    """The Replay page's controls for a vLLM watch, then the same panels as the Engine page."""
    named = recording.meta.get("servers") or recording.meta.get("urls") or []
    servers = ", ".join(map(str, named)) if isinstance(named, (dict, list)) else str(named)
    st.caption(f"A vLLM watch of {ui.inert(servers) or 'unknown servers'}, "
               f"{recording.duration_s:.0f} s, {len(recording.batches)} event batches, "
               f"{len(recording.scrapes)} metrics scrapes, {len(recording.replies)} request-log lines "
               "(recorded with `kvviz watch` or the Engine page)")
    speed_col, time_col, play_col = st.columns([2, 4, 1], vertical_alignment="bottom")
    speed = speed_col.select_slider("Speed", list(ui.SPEEDS), value="4×", key="watch_speed", bind="query-params")
    end = max(1.0, recording.duration_s)
    upto = time_col.slider("Time (s)", 0.0, end, end, key="watch_time", bind="query-params")
    play = play_col.button("Play", type="primary", key="watch_play")
    replay(recording, ui.SPEEDS[speed], None if play else upto)


# --- the fleet: several replicas, and per request what the routing gave up -----------------------
def show_fleet(recording: Recording, states: dict[str, EngineState], key: str) -> None:
    st.subheader("The fleet: which replica held what, and what the routing gave up", divider="gray")
    view = fleet.fleet_requests(recording)
    st.caption("Replicas " + ", ".join(f"{name} = {ui.inert(url)}" for url, name in view.names.items())
               + ". Per replica: pool and usage (metrics), cached blocks (events), hit rate since the server "
               "started (metrics) and over the logged requests (vLLM's own cached_tokens).")
    replicas = fleet_frames.replicas_frame(recording, view, states)
    left, right = st.columns([3, 2])
    left.dataframe(replicas, hide_index=True, width="stretch")
    if replicas["hit_rate_requests"].notna().any():
        right.altair_chart(fleet_charts.replicas_chart(replicas), width="stretch")
    prefixes = fleet_frames.prefix_frame(recording, view)
    if not prefixes.empty:
        st.markdown("**Which replica holds which prefix** (the caches as they stand: events; families merged "
                    "by their first block's hash, named by the first logged request that began so)")
        st.altair_chart(fleet_charts.prefix_map_chart(prefixes), width="stretch")
    if not view.requests:
        st.info("Per request, this needs a client's request log (`kvviz watch URL URL --request-log PATH`, or "
                "KVVIZ_VLLM_REQUEST_LOG for this page; scripts/vllm_fleet_load.py writes one): KV events and "
                "metrics do not say which replica served which request.")
        return
    if len(recording.replies) > fleet.MAX_FLEET_REQUESTS:
        st.caption(f"The request log holds {len(recording.replies):,} lines; the fleet view analyses the newest "
                   f"{fleet.MAX_FLEET_REQUESTS} (each walks every replica's cache).")
    show_fleet_requests(view, key)
    show_policies(recording, view, states)
    if key == "live":
        st.download_button("Download the fleet's watch: every server and the request log, one file (for Replay)",
                           recording.to_json, file_name="vllm-fleet-watch.json", mime="application/json",
                           on_click="ignore", key="fleet_download")


def show_fleet_requests(view: fleet.Fleet, key: str) -> None:
    st.markdown("**Per request: where it went, what was cached there, and what the best replica held**")
    st.text(fleet_frames.totals_sentence(fleet.totals(view.requests)))
    incomplete = [r.name for r in view.requests if not r.complete]
    st.caption("cached_tokens: vLLM's own figure (the response's usage). held_there / best_tokens: the "
               "prompt's token ids walked down each replica's cache as its KV events had rebuilt it when the "
               "request was sent (derived). given_up = best − cached. "
               + (f"{len(incomplete)} rows rest on a view that missed part of a replica's event stream "
                  "(complete = False): joined late, a gap or a restart." if incomplete else
                  "Every replica's event stream was seen whole from its first batch (complete)."))
    df = fleet_frames.requests_frame(view)
    st.dataframe(df, hide_index=True, width="stretch", height=300,
                 column_config={"reason": st.column_config.TextColumn("reason", width="large")})
    st.caption("Per request: blue, vLLM's cached tokens where it went; red, what the replica holding the most "
               "of its prompt held beyond that (derived).")
    st.altair_chart(fleet_charts.given_up_chart(fleet_frames.given_up_frame(view)), width="stretch")


def show_policies(recording: Recording, view: fleet.Fleet, states: dict[str, EngineState]) -> None:
    st.markdown("**What-if routing (modelled)**")
    df = fleet_frames.policies_frame(recording, view, states)
    if isinstance(df, str):
        st.caption(f"The routing model cannot run on this stream: {ui.inert(df)}.")
        return
    real = df[df.policy == "as routed"].iloc[0]
    st.caption("The logged requests replayed, one at a time in the order sent, through a model of each "
               "replica's pool with vLLM's eviction order (kvviz.vllm.fleet_model). Its check: routed as "
               f"they really were, it gives {real.matches_real} of {real.requests} requests vLLM's own "
               "cached_tokens.")
    left, right = st.columns([3, 2])
    left.dataframe(df, hide_index=True, width="stretch")
    right.altair_chart(fleet_charts.policies_chart(df), width="stretch")
