"""Sweep: cache bytes and latency measured over prompt length × batch size on the loaded model.

Widgets and layout only: the runner and its arithmetic are kvviz.sweep.compute's, the charts
kvviz.sweep.charts'. Results live in st.session_state["sweeps"], keyed on (model, settings): a
stopped sweep keeps its points, and running the same settings again measures only what is missing.
Stop acts between points (Streamlit interrupts the script at its next call, after a point's row
is stored), so a long point finishes first. In hosted mode the host's caps (prompt tokens, batch,
new tokens, sweep points, seconds per run) apply. Settings are bound to the URL.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from kvviz.app import ui
from kvviz.app.failures import failure_message
from kvviz.app.tables import draw_altair, people_table
from kvviz.core import units
from kvviz.core.errors import UserError
from kvviz.core.budget import DEFAULT_OVERHEAD_FRACTION
from kvviz.engine.models import LoadedModel
from kvviz.sweep import charts
from kvviz.sweep import compute

URL = "query-params"
WHERE_TIME_GOES = (
    "A decode step must read every weight and the whole cache at least once, so (weights + cache) "
    "÷ step time is the memory bandwidth the step achieved; no step can beat the device's peak. "
    "A small model on a big GPU stays far below that line: its weights stream in microseconds, but "
    "each layer still launches a dozen or so kernels of a few microseconds each, plus Python "
    "between them, so the step is bound by kernel launches, not bandwidth. Large models, batches "
    "and contexts move the points up towards the peak.")

NO_PEAK = (" No peak line: kvviz knows the peak memory bandwidth of the GPUs in its presets "
           "(assets/gpus.json) only, and a CPU's depends on its memory channels, which it does not "
           "read. Type a peak in the sidebar (GB/s) to draw the line.")
RESULT_COLUMNS = {  # rows_frame column -> (label, kind) for panels.people_table
    "prompt_tokens": ("prompt tokens", "count"), "batch": ("batch", "count"), "status": ("status", "text"),
    "prefill_kv_bytes": ("KV cache after prefill", "bytes"), "prefill_formula_bytes": ("formula", "bytes"),
    "end_kv_bytes": ("KV cache at the end", "bytes"), "ttft_ms": ("time to first token", "ms"),
    "itl_median_ms": ("inter-token (median)", "ms"), "tokens_per_s": ("tokens/s", "number"),
    "decode_bandwidth_bytes_per_s": ("achieved bandwidth", "gbs_from_bytes"),
    "peak_cuda_bytes": ("peak CUDA memory", "bytes"), "predicted_oom": ("predicted not to fit", "flag"),
    "wall_s": ("wall time", "s"), "message": ("why not measured", "text")}
CUDA_ONLY = ("peak_cuda_bytes", "predicted_oom")
# The results as two tables of at most 8 columns, so neither needs scrolling beside the sidebar at
# 1280 px (one table of 14 cut its last columns): sizes and latencies, then rates and reasons.
SIZE_COLUMNS = ("prompt_tokens", "batch", "status", "prefill_kv_bytes", "prefill_formula_bytes",
                "end_kv_bytes", "ttft_ms", "itl_median_ms")
BOUNDARY_COLUMNS = {"batch": ("batch", "count"),
                    "predicted_max_prompt_tokens": ("longest prompt predicted to fit", "count"),
                    "first_oom_prompt_tokens": ("shortest prompt that ran out", "count")}


@dataclass
class Controls:
    """What the sidebar and the buttons asked for."""

    settings: compute.SweepSettings
    metric: str
    peak_gbs: float
    run: bool
    stopped: bool


def page() -> None:
    """The Sweep page: settings in the sidebar, Run / Stop, then the charts and tables."""
    rules = ui.policy()
    load_config = ui.model_settings()
    st.title("Sweep: prompt length × batch size")
    st.caption("Each point runs the cached engine once on a prompt of exactly that many tokens "
               "(chat template off, EOS ignored) and measures it. Formula lines are kvviz's layout "
               "formula: per layer, tokens held × K+V values per token × batch × bytes "
               "(2 × kv_heads × head_dim values for plain attention; windows, latents and states "
               "as the model's layers keep them).")
    lm = ui.load_model_with_progress(load_config)
    if lm is None:
        st.stop()
    device = compute.device_facts(lm)
    controls = sidebar(lm, device, rules)
    settings = controls.settings
    sweeps = st.session_state.setdefault("sweeps", {})  # (load config, settings) -> rows
    rows = sweeps.get((load_config, settings), [])
    total = len(settings.points())
    too_many = total > rules.cap("sweep_points", total)
    run_col, stop_col, info_col = st.columns([1.5, 1, 5], vertical_alignment="center")
    controls.run = run_col.button("Run sweep", type="primary", disabled=not total or too_many, key="sweep_run")
    controls.stopped = stop_col.button("Stop", key="sweep_stop")
    info_col.caption(f"{ui.inert(lm.label)} · {device.name} · {str(lm.dtype).removeprefix('torch.')} · "
                     f"{units.fmt_bytes(device.bytes_per_token)} of cache per token")
    status, progress = st.empty(), st.empty()
    results = st.container(key="sweep-results").empty()
    view = SweepView(lm, load_config.name, device, controls, results)
    if too_many:
        status.warning(f"This host measures at most {rules.max_sweep_points} points per sweep; "
                       f"these settings make {total}.")
    elif controls.run and len(rows) < total:
        sweeps[(load_config, settings)] = rows
        view.run_sweep(rows, rules, status, progress)
    elif controls.run:
        status.info(f"All {total} points were already measured with these settings: shown below. "
                    "Change a setting to measure other points.")
    elif controls.stopped and rows and len(rows) < total:
        status.info(f"Stopped after {len(rows)} of {total} points. **Run sweep** measures the rest.")
    elif not rows:
        status.info("Pick prompt lengths and batch sizes in the sidebar, then press **Run sweep**.")
    if rows:
        view.draw(rows)
        show_boundary_and_download(rows, device, settings.new_tokens)


def sidebar(lm: LoadedModel, device, rules) -> Controls:
    """The sweep's settings, bound to the URL, within this host's caps."""
    max_pos = compute.max_positions(lm)
    max_prompt = rules.max_prompt_tokens if rules.enabled else None
    max_batch = rules.cap("batch", compute.BATCH_OPTIONS[-1])
    st.sidebar.subheader("Sweep")
    prompts = st.sidebar.multiselect(
        "Prompt lengths (tokens)", compute.prompt_length_options(max_pos, max_prompt),
        default=compute.default_prompt_lengths(max_pos, lm.device.type, max_prompt_tokens=max_prompt),
        key="sweep_prompts", bind=URL)
    batches = st.sidebar.multiselect(
        "Batch sizes", [b for b in compute.BATCH_OPTIONS if b <= max_batch],
        default=compute.default_batches(lm.device.type)[:1 if rules.enabled else None],
        key="sweep_batches", bind=URL)
    new_tokens = st.sidebar.slider("New tokens per point", 2, rules.cap("new_tokens", 128), 16,
                                   key="sweep_new", bind=URL)
    metric = st.sidebar.selectbox("Heatmap shows", charts.metric_names(lm.device.type == "cuda"),
                                  format_func=lambda m: charts.METRICS[m][0],
                                  key="sweep_metric", bind=URL)
    peak_gbs = st.sidebar.number_input(
        "Peak memory bandwidth (GB/s, 0 = unknown)", 0.0, 100_000.0,
        (device.peak_bandwidth_bytes_per_s or 0) / 1e9, 10.0, key="sweep_peak_gbs", bind=URL,
        help=f"From the GPU presets ({device.preset})" if device.preset else
        "0: not known for this device. kvviz has the peak bandwidth of the GPUs in assets/gpus.json only; "
        "a CPU's depends on its memory channels, which kvviz does not read. Type one to draw the line.")
    ui.share_link()
    settings = compute.SweepSettings(tuple(sorted(prompts)), tuple(sorted(batches)), new_tokens)
    return Controls(settings, metric, peak_gbs, run=False, stopped=False)


class SweepView:
    """The results slot of one page run: redrawn after every measured point."""

    def __init__(self, lm: LoadedModel, model_name: str, device, controls: Controls, results) -> None:
        self.lm, self.model_name, self.device, self.controls, self.results = lm, model_name, device, controls, results
        self.total = len(controls.settings.points())

    def draw(self, rows: list) -> None:
        """Every chart and the table, into the results slot (no widgets: redrawn per point)."""
        device, peak_gbs = self.device, self.controls.peak_gbs
        df = compute.rows_frame(rows, device.kv_budget_bytes)
        with self.results.container():
            left, right = st.columns(2, gap="large")
            left.markdown("**KV cache vs prompt length**")
            draw_altair(left, charts.cache_bytes_chart(df, device.kv_budget_bytes))
            if device.kv_budget_bytes is None:
                left.caption(charts.no_boundary_note(device.name, device.kv_budget_bytes))
            right.markdown("**Time to first token (prefill)**")
            draw_altair(right, charts.ttft_chart(df))
            left, right = st.columns(2, gap="large")
            left.markdown("**Inter-token latency vs context**")
            draw_altair(left, charts.itl_chart(df))
            right.markdown("**Prompt × batch**")
            draw_altair(right, charts.heatmap_chart(df, self.controls.metric))
            st.markdown("**Where the time goes**")
            draw_altair(st, charts.bandwidth_chart(df, peak_gbs * 1e9, device.preset or "peak"))
            st.caption(WHERE_TIME_GOES + ("" if peak_gbs else NO_PEAK))
            shown = {k: v for k, v in RESULT_COLUMNS.items() if device.memory_bytes or k not in CUDA_ONLY}
            people_table(df, {k: v for k, v in shown.items() if k in SIZE_COLUMNS})
            people_table(df, {k: v for k, v in shown.items() if k in SIZE_COLUMNS[:2] or k not in SIZE_COLUMNS})

    def progress_text(self, rows: list) -> str:
        settings = self.controls.settings
        left = compute.pending_points(settings, rows)
        eta = compute.eta_s(rows, left, settings.new_tokens, compute.model_work(self.lm))
        when = f" · about {eta:,.0f} s left" if eta is not None else ""
        return f"Point {len(rows) + 1} of {self.total}: {left[0][0]:,} tokens × batch {left[0][1]}{when}"

    def run_sweep(self, rows: list, rules, status, progress) -> None:
        """Measure the missing points, redrawing after each; rows land in session state at once."""
        settings = self.controls.settings
        try:  # the hosted caps, on the server (widgets cap too, but a crafted request could not)
            rules.check_limits(self.model_name, batch=max(settings.batches), new_tokens=settings.new_tokens,
                               points=self.total, prompt_tokens=max(settings.prompt_tokens))
        except UserError as exc:
            status.error(f"Cannot run this sweep: {ui.visitor_text(exc)}")
            return
        bar = progress.progress(len(rows) / self.total, text=self.progress_text(rows))
        with ui.device_turn(status):
            deadline = time.monotonic() + rules.max_run_s if rules.enabled else float("inf")
            try:
                for row in compute.run_sweep(self.lm, settings, rows, lambda: time.monotonic() > deadline):
                    rows.append(row)
                    self.draw(rows)
                    if len(rows) < self.total:
                        bar.progress(len(rows) / self.total, text=self.progress_text(rows))
            except Exception as exc:  # keep what was measured; say what stopped it
                status.error(failure_message(exc, rules.enabled))
            if time.monotonic() > deadline and len(rows) < self.total:
                status.warning(f"Stopped at this host's limit of {rules.max_run_s:.0f} s per run; "
                               "**Run sweep** again measures the rest.")
        progress.empty()


def show_boundary_and_download(rows: list, device, new_tokens: int) -> None:
    if device.kv_budget_bytes is not None:
        st.markdown("**Predicted out-of-memory boundary vs where it failed**")
        st.caption(f"Predicted by kvviz.planner.capacity: the cache must fit in "
                   f"{units.fmt_bytes(device.kv_budget_bytes)} (device memory less the weights and "
                   f"{DEFAULT_OVERHEAD_FRACTION:.0%} overhead).")
        boundary = pd.DataFrame(compute.boundary_rows(rows, device, new_tokens))
        people_table(boundary, BOUNDARY_COLUMNS)
    st.download_button("Download results (CSV)", compute.rows_frame(rows).to_csv(index=False),
                       "kvviz-sweep.csv", "text/csv", key="sweep_csv")
