"""The Shrink page's result panels, also drawn by Replay for a kvviz-shrink file: both answers
side by side, where they diverge, the measured bytes and step times, and the kept map; below, the
quality sweep: run it here (a progress bar), or show the one shipped with kvviz or an uploaded file
(accuracy with its 95 % interval per press and ratio, the quantized caches on their own axis,
accuracy per task format, each item's answer, what was dropped and why).

Answers, labels and token texts may come from an uploaded file: they are shown as code or plain
text, or Markdown-escaped with `ui.inert`, never rendered.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable

import streamlit as st

from kvviz.app import links, ui, uploads
from kvviz.core import assets
from kvviz.core.errors import UserError
from kvviz.core.units import fmt_bytes, fmt_ms
from kvviz.shrink import presses, quant_cache, support, sweep, sweep_charts, task, trace
from kvviz.shrink import charts
from kvviz.shrink import compute
from kvviz.shrink.compute import Comparison, ShrinkRun

DRAW_EVERY_S = 0.15  # redraw both answers at most this often while the runs take turns
PRESS, QUANT = "Press (evict positions)", "Quantized cache"
PROMPT = compute.DEFAULT_PROMPT  # a context and a question: long enough for SnapKV's scores to choose
URL = "query-params"  # settings are bound to the page's link (kvviz.app.links)


@dataclass
class Stage:
    """Where a comparison is drawn: a heading slot above two answer slots (full, shrunk)."""

    heading: st.delta_generator.DeltaGenerator
    slots: list

    @classmethod
    def make(cls) -> "Stage":
        return cls(st.empty(), [column.empty() for column in st.columns(2)])


def draw_answers(stage: Stage, runs: list[ShrinkRun], final: bool, texts: tuple[str, str] | None = None) -> None:
    """Each side's label, text so far (or `texts`: the marked ones) and measured figures, in its
    column's slot. No median before there is a decode step."""
    for i, (slot, run) in enumerate(zip(stage.slots, runs)):
        with slot.container():
            st.caption(ui.inert(run.label))
            st.code((texts[i] if texts else run.text) or " ", language=None, wrap_lines=True)
            if not run.steps:
                continue
            last = run.steps[-1]
            a, b = st.columns(2)
            a.metric("KV cache at the end (measured)" if final else "KV cache now (measured)", fmt_bytes(last.kv_bytes),
                     help=f"{last.kv_bytes:,} B read from the cache tensors")
            peak = max(s.peak_bytes for s in run.steps)
            if peak:
                b.metric("Peak during the run (tensors tracked)", fmt_bytes(peak),
                         help=f"{peak:,} B: the most bytes this run's own tensors held at once in any step "
                              "(activations, the cache before a press evicts, a quantized cache's copies)")
            if len(run.steps) > 1:
                a.metric("Decode step (median)", fmt_ms(run.decode_ms()))


def draw_result(stage: Stage, result: Comparison, prompt_pieces: list[str], per_head: bool, key: str,
                next_step: Callable[[], None] | None = None) -> None:
    """The finished comparison: heading, both answers (the first difference marked), bytes and
    peaks, the step-time ratio with its spread, `next_step` (the Shrink page's suggestion), charts,
    kept map."""
    stage.heading.subheader(ui.inert(result.caption()))
    draw_answers(stage, [result.full, result.shrunk], final=True, texts=result.first_difference_marked())
    if result.diverged_at is None:
        st.caption(identical_words(result, len(prompt_pieces)))
    if result.diverged_at is not None:
        st.caption(f"⟦ ⟧ marks token {result.diverged_at + 1}, the first where the two answers differ "
                   "(an empty ⟦⟧: that answer ended there).")
    last = result.shrunk.steps[-1]
    if last.payload_bytes:
        st.caption(f"Quantized cache: payload {fmt_bytes(last.payload_bytes)} + scales and zero points "
                   f"{fmt_bytes(last.scale_bytes)} + full-precision residual {fmt_bytes(last.residual_bytes)} "
                   f"({last.payload_bytes:,} + {last.scale_bytes:,} + {last.residual_bytes:,} B)")
    timing = result.timing_words()
    same_length = len(result.full.steps) == len(result.shrunk.steps)
    at = "" if same_length else f" (at step {result.common_step()}, the last both runs made)"
    st.caption(f"Shrunk ÷ full: bytes {result.bytes_ratio():.2f}{at}"
               + (f"; decode step time {timing}" if timing else "; no decode step yet"))
    if next_step is not None:
        next_step()
    frame = charts.steps_frame({"full": result.full.steps, "shrunk": result.shrunk.steps})
    a, b = st.columns(2)
    a.altair_chart(charts.steps_chart(frame, "kv_mib", "cache (MiB, measured)"), key=f"{key}_bytes")
    b.altair_chart(charts.steps_chart(frame, "step_ms", "step time (ms)"), key=f"{key}_ms")
    slow = [s for s in result.full.steps + result.shrunk.steps if s.step_ms > charts.time_cap(frame)]
    if slow:
        b.caption(f"{len(slow)} step(s) over {fmt_ms(charts.time_cap(frame))} (the slowest "
                  f"{fmt_ms(max(s.step_ms for s in slow))}) are drawn at the top edge; hover for their times.")
    if result.shrunk.kept:
        heads = next(iter(result.shrunk.kept.values()))
        n_heads, n_kept = (heads.shape[0], heads.shape[1]) if hasattr(heads, "shape") else (len(heads), len(heads[0]))
        st.caption("Which prompt positions each layer kept (hover a cell for its token). "
                   + (f"One row per layer and KV head: each head kept {n_kept} of {len(prompt_pieces)}."
                      if per_head else
                      f"A cell is kept when any of the layer's {n_heads} KV heads kept it (the union over heads): "
                      f"each head kept {n_kept} of {len(prompt_pieces)}, so a layer can show more. Turn on "
                      "'Kept map per KV head' for each head's own."))
        kept = charts.kept_map_frame(result.shrunk.kept, len(prompt_pieces), prompt_pieces, per_head)
        st.altair_chart(charts.kept_map_chart(kept), key=f"{key}_map")


def identical_words(result: Comparison, prompt_tokens: int) -> str:
    """Why two identical answers are no failure of the page: what the shrunk cache still held, and
    where to see one that changes the answer."""
    if result.shrunk.kept:
        kept = next(iter(result.shrunk.kept.values()))
        n_kept = kept.shape[-1] if hasattr(kept, "shape") else len(kept[0])
        held = (f"each KV head kept {n_kept} of the {prompt_tokens} prompt positions (the map below), and those "
                "were enough for every greedy choice of this answer")
    else:
        held = "its rounding changed none of the greedy choices of this answer"
    demo = compute.DEMO_MODE
    return (f"Why identical: {held}. A shrunk cache costs an answer only once it loses what the answer reads: "
            f"on the default model and question, {demo.press} evicting {demo.ratio:.0%} changes the answer.")


def suggestion(result: Comparison, mode: compute.ShrinkMode) -> tuple[str, compute.ShrinkMode] | None:
    """(button label, mode) of the one setting worth trying next, or None: after identical answers
    the demo setting (compute.DEMO_MODE), after StreamingLLM (which keeps by position) SnapKV at
    the same ratio (which keeps what the question attends to)."""
    if result.diverged_at is None and mode != compute.DEMO_MODE:
        return f"Try {compute.DEMO_MODE.press} evicting {compute.DEMO_MODE.ratio:.0%}", compute.DEMO_MODE
    if mode.press == "StreamingLLM" and not mode.backend:
        snap = compute.ShrinkMode(press="SnapKV", ratio=mode.ratio)
        return "Compare: SnapKV at the same ratio (keeps what the question attends to)", snap
    return None


def suggestion_button(result: Comparison, mode: compute.ShrinkMode) -> None:
    """The one-click next setting (`suggestion`), when its press can run here."""
    offer = suggestion(result, mode)
    if offer is not None and offer[1].press in presses.offered()[0]:
        st.button(offer[0], key="shrink_suggestion", on_click=use_mode, args=(offer[1],),
                  help="Sets the press and ratio in the sidebar; then press Run full and shrunk.")


def use_mode(mode: compute.ShrinkMode) -> None:
    """A button's callback: the sidebar's press and ratio become `mode` (nothing runs)."""
    st.session_state["shrink_kind"] = PRESS
    st.session_state["shrink_press"] = mode.press
    st.session_state["shrink_ratio"] = mode.ratio


def downloads(result: Comparison, prompt_pieces: list[str], model: str, key: str) -> None:
    """Both runs as a kvviz-shrink JSON file (Replay reads it) and as an HTML report."""
    from kvviz.shrink import report

    left, right = st.columns(2)
    left.download_button("Download both runs (JSON)", trace.to_json(result, prompt_pieces, model),
                         file_name="kvviz-shrink.json", mime="application/json", key=f"{key}_download")
    right.download_button("Report (HTML)", lambda: report.html_report(result, prompt_pieces, model),
                          file_name="kvviz-shrink-report.html", mime="text/html", key=f"{key}_report")


def read_record(path, upload) -> trace.ShrinkRecord | None:
    """A kvviz-shrink file from an example path or an upload; None when the file is another kind
    (or an upload over the cap, which the trace reader refuses with the size sentence).
    TraceError when it is a kvviz-shrink file but invalid."""
    if upload is not None:
        if upload.size > ui.upload_limit_bytes():
            return None
        data = upload.getvalue()
    elif path is not None:
        data = open(path, "rb").read()
    else:
        return None
    return trace.from_json(data) if trace.is_record(data) else None


def replay_page(rec: trace.ShrinkRecord) -> None:
    """Replay's controls for a kvviz-shrink file: a step scrubber and Play, then the panels."""
    result = rec.result
    steps = total_steps(result)
    st.caption(f"A shrink comparison{' of ' + ui.inert(rec.model) if rec.model else ''}: "
               f"{ui.inert(result.shrunk.label)} against the full cache, {steps_words(result)}.")
    upto = st.slider("Step", 1, steps, steps, key="replay_shrink_step", bind="query-params") if steps > 1 else 1
    speed = ui.SPEEDS[st.select_slider("Speed", list(ui.SPEEDS), value="1×", key="replay_shrink_speed", bind="query-params",
                                       help="How fast the recorded steps play back")]
    play = st.button("Play", type="primary", key="replay_shrink_play")
    per_head = st.toggle("Kept map per KV head", value=False, key="replay_shrink_per_head",
                         bind="query-params")
    stage = Stage.make()
    if play:
        play_steps(stage, result, speed)
        upto = steps
    draw_result(stage, result.upto(upto), rec.prompt_pieces, per_head, key="replay_shrink")
    downloads(result, rec.prompt_pieces, rec.model, key="replay_shrink")


def total_steps(result: Comparison) -> int:
    """Steps of the longer run (each run ends at its own end of answer)."""
    return max(len(result.full.steps), len(result.shrunk.steps))


def steps_words(result: Comparison) -> str:
    """"24 steps each", or "12 steps (full) and 24 (shrunk)" when one answer ended first."""
    full, shrunk = len(result.full.steps), len(result.shrunk.steps)
    return f"{full} steps each" if full == shrunk else f"{full} steps (full) and {shrunk} (shrunk)"


def play_steps(stage: Stage, result: Comparison, speed: float) -> None:
    """Both answers grow step by step, each step held for the time the runs took (÷ speed)."""
    steps = total_steps(result)
    for n in range(1, steps + 1):
        now = result.upto(n)
        stage.heading.caption(f"Step {n} of {steps}")
        draw_answers(stage, [now.full, now.shrunk], final=False)
        if speed:
            step_s = sum(run.steps[n - 1].step_ms for run in (result.full, result.shrunk) if n <= len(run.steps)) / 1000
            time.sleep(min(step_s / speed, 2.0))


@dataclass(frozen=True)
class Settings:
    """What the sidebar asked for: the shrink mode, the prompt, the new tokens, the map's view."""

    mode: compute.ShrinkMode
    prompt: str
    new_tokens: int
    per_head: bool
    refused: str = ""  # why the chosen kind does not run on this model ("" when it does)


def mode_settings(model) -> tuple[compute.ShrinkMode, str]:
    """The sidebar's press or quantized cache, with a sentence for each one not offered here;
    (mode, why this kind is not offered for `model`, or "")."""
    offered, refused = presses.offered()
    backends, refused_backends = quant_cache.available()
    st.sidebar.subheader("Shrink")
    kind = st.sidebar.radio("Shrink by", [PRESS, QUANT], key="shrink_kind", bind=URL)
    why = support.press_refusal(model) if kind == PRESS else support.quant_refusal(model)
    if why:
        what = "Presses are" if kind == PRESS else "A quantized cache is"
        st.sidebar.caption(f"{what} not offered for this model: {why}.")
        return compute.ShrinkMode(), f"{what} not offered for this model: {why}."
    if kind == PRESS:
        names = list(offered)
        first = names.index(compute.DEMO_MODE.press) if compute.DEMO_MODE.press in names else 0
        name = st.sidebar.selectbox("Press", names, index=first, key="shrink_press", bind=URL)
        ratio = st.sidebar.slider("Share of prompt positions evicted", 0.1, 0.9, compute.DEMO_MODE.ratio, 0.05,
                                  key="shrink_ratio", bind=URL)
        mode = compute.ShrinkMode(press=name, ratio=round(ratio, 2)) if name else compute.ShrinkMode()
        if name:
            st.sidebar.caption(offered[name])
        for why_name, why_not in refused.items():
            st.sidebar.caption(f"{why_name} is not offered: {why_not}")
        return mode, ""
    backend = st.sidebar.selectbox("Backend", list(backends), key="shrink_backend", bind=URL)
    nbits = st.sidebar.selectbox("Bits", backends[backend], index=len(backends[backend]) - 1,
                                 key="shrink_nbits", bind=URL)
    residual = st.sidebar.slider("Residual (newest tokens kept in full precision)", 1, 128, 16,
                                 key="shrink_residual", disabled=backend == "fp8", bind=URL)
    for why_name, why_not in refused_backends.items():
        st.sidebar.caption(f"{why_name} is not offered: {why_not}")
    return compute.ShrinkMode(backend=backend, nbits=nbits, residual_length=residual), ""


def settings(rules, model) -> Settings:
    """The Shrink sidebar: mode, prompt (carried by the link up to its length), tokens, map view."""
    mode, refused = mode_settings(model)
    chars = rules.cap("prompt_chars", ui.MAX_PROMPT_CHARS)
    with st.sidebar:  # a link's prompt (not bound: kvviz.app.links carries it up to its length)
        prompt = st.text_area("Prompt", ui.text_from_link("shrink_prompt", PROMPT, chars), max_chars=chars,
                              key="shrink_prompt")
    new_tokens = st.sidebar.slider("New tokens", 2, rules.cap("new_tokens", 64), 24, key="shrink_new", bind=URL)
    per_head = st.sidebar.toggle("Kept map per KV head", value=False, key="shrink_per_head", bind=URL)
    ui.share_link([links.Text("shrink_prompt", "prompt", prompt, PROMPT)])
    return Settings(mode, prompt, new_tokens, per_head, refused)


def run_both(lm, ids, asked: Settings, stage: Stage, deadline: float) -> Comparison:
    """The two runs taking turns, each side's column filled as its tokens arrive."""
    runs = compute.new_pair(asked.mode)
    drawn, started = 0.0, time.monotonic()
    turns = compute.take_turns(lm, ids, asked.new_tokens, asked.mode, should_stop=lambda: time.monotonic() > deadline)
    for turn in turns:
        compute.add_turn(runs, turn, lm.tokenizer)
        if turn.side == compute.SHRUNK and time.monotonic() - drawn > DRAW_EVERY_S:
            stage.heading.caption(progress_words(turn.step, asked.new_tokens, time.monotonic() - started))
            draw_answers(stage, [runs[compute.FULL], runs[compute.SHRUNK]], final=False)
            drawn = time.monotonic()
    return compute.comparison(runs)


def progress_words(step, steps: int, elapsed_s: float) -> str:
    """"Both runs take turns on the device: step 3 of 24…", with the elapsed time and the last
    step's time once either is over a second."""
    words = f"Both runs take turns on the device: step {step.step + 1} of {steps}…"
    if elapsed_s > 1:
        words += f" {elapsed_s:.0f} s so far"
    if step.step_ms > 1000:
        words += f"; that step took {step.step_ms / 1000:.1f} s"
    return words


def run_clicked(lm, rules, asked: Settings, stage: Stage, status, ran_with) -> None:
    """Check the request, run both sides in the device's turn, keep the result in the session."""
    try:
        ids = compute.prompt_ids(lm.tokenizer, asked.prompt)
        rules.check_prompt_tokens(ids.shape[1])
        st.session_state.pop("shrink", None)  # a new run: the old result is not this one's
        with ui.device_turn(status) if rules.enabled else nullcontext():
            deadline = time.monotonic() + rules.max_run_s if rules.enabled else float("inf")
            result = run_both(lm, ids, asked, stage, deadline)
        if time.monotonic() > deadline:
            status.warning(f"Stopped at this host's limit of {rules.max_run_s:.0f} s per run.")
        pieces = lm.tokenizer.batch_decode([[t] for t in ids[0].tolist()])
        st.session_state["shrink"] = (result, pieces, ran_with)
    except (UserError, ValueError) as exc:  # ValueError: the tokenizer's or a press's own refusal
        st.error(f"Cannot run: {ui.visitor_text(exc, 'shrink run')}")


def page() -> None:
    """The Shrink page: sidebar settings, the Run button, both runs, the finished comparison."""
    rules = ui.policy()
    load_config = ui.model_settings()
    st.title("Shrink the cache")
    st.caption("Both runs are greedy and measured here: bytes are read from the cache tensors after "
               "each step. A press evicts prompt positions once, after the prompt; a quantized cache "
               "stores older tokens in fewer bits and keeps the newest in full precision.")
    lm = ui.load_model_with_progress(load_config)
    if lm is None:
        st.stop()
    asked = settings(rules, lm.model)
    status = st.empty()
    clicked = st.button("Run full and shrunk", type="primary", key="shrink_run", disabled=bool(asked.refused))
    if asked.refused:
        st.warning(asked.refused)
    stage = Stage.make()
    ran_with = (load_config.name, asked.mode, asked.prompt, asked.new_tokens)
    if clicked:
        try:
            rules.check_limits(load_config.name, new_tokens=asked.new_tokens, prompt_chars=len(asked.prompt))
        except UserError as exc:
            st.error(f"Cannot run: {ui.visitor_text(exc, 'shrink run')}")
        else:
            run_clicked(lm, rules, asked, stage, status, ran_with)
    if "shrink" not in st.session_state:
        status.info("Pick a press or a quantized cache in the sidebar, then press **Run full and shrunk**.")
    else:
        result, prompt_pieces, was = st.session_state["shrink"]
        if was != ran_with:
            status.warning("These results are from the previous settings (model, shrink mode, prompt or "
                           "tokens changed since): press **Run full and shrunk** to run the current ones.")
        draw_result(stage, result, prompt_pieces, asked.per_head, key="shrink",
                    next_step=lambda: suggestion_button(result, was[1]))
        downloads(result, prompt_pieces, lm.label, key="shrink")
    sweep_section(lm, rules, load_config.name)


# ------------------------------------------------------------------ the quality sweep
SHIPPED_SWEEP = assets.FOLDER / "shrink_sweep_smollm2.json"  # scripts/shrink_sweep.py on the default model
HOSTED_ITEMS = 2
SWEEP_INTRO = ("RULER-style questions (a needle, four keys, four values, a chain of variables; every depth, none "
               "filtered) asked with the full cache and with each press at the kvpress leaderboard's ratios 0.25 / "
               "0.5 / 0.75 / 0.875, measured as the leaderboard measures: the context alone is compressed, then the "
               "question is fed. SnapKV with the question compressed too (its window sees it) is its own entry. "
               "Accuracy is right answers ÷ items with its 95 % Wilson interval; bytes are the cache after the "
               "context, measured.")


def sweep_settings(lm, rules, items: list) -> tuple[list, list, int]:
    """The sweep's settings, the dropped ones and the item count (hosted: a few, within the caps)."""
    names, dropped = support.sweep_presses(lm.model)
    quant_settings, dropped_quant = support.sweep_quant(lm.model)
    quant = {f"{b} {n}-bit": (b, n) for b, n in quant_settings}
    left, mid, right = st.columns([2, 2, 1])
    picked = left.multiselect("Presses", names, default=names[:1] if rules.enabled else names,
                              key="shrink_sweep_presses", bind=URL)
    chosen = mid.multiselect("Quantized settings", list(quant), default=list(quant)[:1] if rules.enabled else list(quant),
                             key="shrink_sweep_quant", bind=URL)
    n = right.number_input("Items", 1, len(items), min(len(items), HOSTED_ITEMS) if rules.enabled else len(items),
                           key="shrink_sweep_items", bind=URL)
    aware = [p for p in picked if p in presses.QUESTION_AWARE]
    return sweep.modes(picked, [quant[q] for q in chosen if q in quant], question_aware=aware), dropped + dropped_quant, int(n)


def sweep_section(lm, rules, model_name: str) -> None:
    """Run the quality sweep here (a progress bar, each item's elapsed time), or show a saved one."""
    st.divider()
    st.subheader("Quality sweep: accuracy against compression")
    st.caption(SWEEP_INTRO)
    items = task.load()
    modes, dropped, n = sweep_settings(lm, rules, items)
    upload = uploads.upload_box("Or show a saved sweep (kvviz-shrink-sweep JSON)", type=["json"],
                                key="shrink_sweep_upload", max_upload_size=ui.uploader_limit_mb(ui.upload_limit_bytes()))
    left, right = st.columns(2)
    clicked = left.button(f"Run the sweep ({n} items × {len(sweep.with_full_first(modes))} settings)",
                          key="shrink_sweep_run")
    shipped = right.button("Show the sweep measured on the default model", key="shrink_sweep_shipped",
                           disabled=not SHIPPED_SWEEP.exists())
    status = st.empty()
    if clicked:
        run_sweep(lm, rules, model_name, modes, dropped, items[:n], status)
    elif shipped:
        st.session_state["shrink_sweep"] = (sweep.from_json(SHIPPED_SWEEP.read_bytes()), "shipped")
    elif upload is not None:
        read_sweep_upload(upload, status)
    if "shrink_sweep" in st.session_state:
        draw_sweep(*st.session_state["shrink_sweep"])


def run_sweep(lm, rules, model_name: str, modes: list, dropped: list, items: list, status) -> None:
    """Every setting on every item in the device's turn; a progress bar with the elapsed time."""
    bar = st.progress(0.0, text="Starting the sweep…")

    def show(p: sweep.Progress) -> None:
        bar.progress(p.done / p.total if p.total else 1.0, text=p.line())
    try:
        rules.check_limits(model_name, new_tokens=max(i.max_new_tokens for i in items),
                           points=len(sweep.with_full_first(modes)) - 1)
        with ui.device_turn(status) if rules.enabled else nullcontext():
            deadline = time.monotonic() + rules.max_run_s if rules.enabled else float("inf")
            result = sweep.run(lm, items, modes, progress=show, should_stop=lambda: time.monotonic() > deadline,
                               note=f"the built-in task: {len(items)} items", dropped=dropped,
                               made_with="the Shrink page")
        st.session_state["shrink_sweep"] = (result, "run here")
        if not result.complete:
            status.warning(f"Stopped at this host's limit of {rules.max_run_s:.0f} s: the rows hold the "
                           "items measured so far.")
    except (UserError, ValueError) as exc:  # ValueError: the tokenizer's or a press's own refusal
        status.error(f"Cannot run the sweep: {ui.visitor_text(exc, 'shrink sweep')}")


def read_sweep_upload(upload, status) -> None:
    if upload.size > ui.upload_limit_bytes():
        status.error("That file is larger than this host accepts.")
        return
    try:
        st.session_state["shrink_sweep"] = (sweep.from_json(upload.getvalue()), "uploaded")
    except UserError as exc:
        status.error(f"Cannot show that file: {ui.visitor_text(exc, 'shrink sweep file')}")


def provenance(result: sweep.Sweep, origin: str) -> str:
    """Where the sweep comes from, what it measured and whether it is all of it."""
    where = {"shipped": "shipped with kvviz (scripts/shrink_sweep.py)", "uploaded": "from the uploaded file",
             "run here": "run here just now"}[origin]
    words = f"Sweep {where}: {ui.inert(result.model or 'a model')}, {ui.inert(result.task)}"
    if result.items:
        tokens = sorted(i.context_tokens for i in result.items)
        words += f", contexts of {tokens[0]:,}–{tokens[-1]:,} tokens"
    if not result.complete:
        words += f". Partial sweep: {result.so_far()} (every row counts those items; the intervals are theirs)"
        if result.items:
            words += f"; the items so far: {ui.inert(result.formats_so_far())}"
    return words + "."


def draw_sweep(result: sweep.Sweep, origin: str) -> None:
    """The sweep's accuracy panels, the quantized caches, the table, per task, each item's answer."""
    df = sweep_charts.sweep_frame(result.rows)
    title = f"Partial sweep: {result.so_far()}" if not result.complete else ""
    st.caption(provenance(result, origin))
    if result.made_with:
        st.caption(f"Made with: {ui.inert(result.made_with)}")
    st.caption("Protocol: " + (ui.inert(result.protocol) if result.protocol else
                               "not recorded (a version 1 file: the question was compressed with the context)") + ".")
    if (df["kind"] == "press").any():
        st.altair_chart(sweep_charts.press_accuracy_chart(df, title), key="shrink_sweep_accuracy")
        st.caption("A row per press, a line in it per share of the context evicted (darker: more); the dot is the "
                   "accuracy, the bar its 95 % Wilson interval; the grey band is the full cache's interval (none "
                   "evicted), the dashed line its accuracy. Two settings whose intervals overlap are not told apart "
                   "by these items.")
    if (df["kind"] == "quantized").any():
        st.altair_chart(sweep_charts.quant_accuracy_chart(df, title), key="shrink_sweep_quant_chart")
        st.caption(sweep_charts.QUANT_NOTE)
    for d in result.dropped:
        st.caption(f"Not in this sweep: {ui.inert(d.setting)}, because {ui.inert(d.why)}.")
    table = df.assign(noise=[("within noise" if lo <= 1 <= hi else "") if kind != "full" and timed else
                             ("reference" if kind == "full" else "not timed")
                             for kind, lo, hi, timed in zip(df["kind"], df["step_ratio_lo"], df["step_ratio_hi"],
                                                            df["timed_steps"])],
                      measured=[result.so_far() or str(n) for n in df["items"]])
    st.dataframe(table[["mode", "ratio", "accuracy", "lo", "hi", "right", "measured", "bytes_mib", "kept_share", "step_ratio",
                        "step_ratio_lo", "step_ratio_hi", "noise"]], hide_index=True, key="shrink_sweep_table",
                 column_config={"mode": st.column_config.TextColumn("setting"),
                                "ratio": st.column_config.NumberColumn("ratio", format="%.3f",
                                                                       help="press: share evicted; quantized: bytes saved"),
                                "accuracy": st.column_config.NumberColumn("accuracy", format="percent"),
                                "lo": st.column_config.NumberColumn("95% from", format="percent"),
                                "hi": st.column_config.NumberColumn("95% to", format="percent"),
                                "measured": st.column_config.TextColumn(
                                    "items", help="items behind each row; a partial sweep says how many of all"),
                                "bytes_mib": st.column_config.NumberColumn("cache after context (MiB)", format="%.3f"),
                                "kept_share": st.column_config.NumberColumn(
                                    "still attended", format="percent",
                                    help="share of (layer, head, context position) a query can still read; a head-wise "
                                         "press masks positions and keeps their bytes"),
                                "step_ratio": st.column_config.NumberColumn("step time ÷ full (median)", format="%.2f"),
                                "step_ratio_lo": st.column_config.NumberColumn("25th pct", format="%.2f"),
                                "step_ratio_hi": st.column_config.NumberColumn("75th pct", format="%.2f"),
                                "noise": st.column_config.TextColumn("step time")})
    st.caption(f"Step time ÷ full: each decode step over the full cache's same step on the same item, the two taking "
               f"turns step by step (first {result.timed_items} items); the median and the 25th–75th percentiles. "
               "Bytes of a head-wise press (AdaKV, KVzip) are the full cache's: kvpress masks the positions it drops.")
    if result.items:
        draw_items(result)
    st.download_button("Download the sweep (JSON)", sweep.to_json(result), file_name="kvviz-shrink-sweep.json",
                       mime="application/json", key="shrink_sweep_download")


def draw_items(result: sweep.Sweep) -> None:
    """Accuracy per task format, and each item's answer under a chosen setting."""
    with st.expander("Accuracy per task format"):
        st.dataframe(sweep_charts.task_table(result), hide_index=True, key="shrink_sweep_tasks")
    with st.expander("Each item's answer"):
        modes = [r.mode for r in result.rows]
        mode = st.selectbox("Setting", modes, index=min(1, len(modes) - 1), key="shrink_sweep_answers_mode")
        st.dataframe(sweep_charts.answers_frame(result, mode), hide_index=True, key="shrink_sweep_answers")

