"""The Shrink page's result panels, also drawn by Replay for a kvviz-shrink file: both answers
side by side, where they diverge, the measured bytes and step times, and the kept map.

Answers, labels and token texts may come from an uploaded file: they are shown as code or plain
text, or Markdown-escaped with `ui.inert`, never rendered.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import streamlit as st

from kvviz.app import ui
from kvviz.shrink import record
from kvviz.shrink import charts as shrink_charts
from kvviz.shrink.compute import Comparison, ShrinkRun


@dataclass
class Stage:
    """Where a comparison is drawn: a heading slot above two answer slots (full, shrunk)."""

    heading: st.delta_generator.DeltaGenerator
    slots: list

    @classmethod
    def make(cls) -> "Stage":
        return cls(st.empty(), [column.empty() for column in st.columns(2)])


def draw_answers(stage: Stage, runs: list[ShrinkRun], final: bool) -> None:
    """Each side's label, text so far and measured figures, in its column's slot."""
    for slot, run in zip(stage.slots, runs):
        with slot.container():
            st.caption(ui.inert(run.label))
            st.code(run.text or " ", language=None, wrap_lines=True)
            if run.steps:
                st.metric("KV cache at the end (measured)" if final else "KV cache now (measured)",
                          f"{run.steps[-1].kv_bytes:,} B")
                st.metric("Decode step (median)", f"{run.decode_ms():.1f} ms")


def draw_result(stage: Stage, result: Comparison, prompt_pieces: list[str], per_head: bool, key: str) -> None:
    """The finished comparison: heading, both answers, the shared text, bytes, charts, kept map."""
    stage.heading.subheader(ui.inert(result.caption()))
    draw_answers(stage, [result.full, result.shrunk], final=True)
    if result.diverged_at is not None:
        st.caption(f"Shared text before the first difference (token {result.diverged_at + 1}):")
        st.text("".join(result.full.pieces[:result.diverged_at]) if result.full.pieces else "")
    last = result.shrunk.steps[-1]
    if last.payload_bytes:
        st.caption(f"Quantized cache: payload {last.payload_bytes:,} B + scales and zero points "
                   f"{last.scale_bytes:,} B + full-precision residual {last.residual_bytes:,} B")
    st.caption(f"Shrunk ÷ full: bytes {result.bytes_ratio():.2f}, decode step time {result.step_time_ratio():.2f}")
    frame = shrink_charts.steps_frame({"full": result.full.steps, "shrunk": result.shrunk.steps})
    a, b = st.columns(2)
    a.altair_chart(shrink_charts.steps_chart(frame, "kv_bytes", "cache bytes (measured)"), key=f"{key}_bytes")
    b.altair_chart(shrink_charts.steps_chart(frame, "step_ms", "step time (ms)"), key=f"{key}_ms")
    if result.shrunk.kept:
        st.caption("Which prompt positions each layer kept (hover a cell for its token)")
        kept = shrink_charts.kept_map_frame(result.shrunk.kept, len(prompt_pieces), prompt_pieces, per_head)
        st.altair_chart(shrink_charts.kept_map_chart(kept), key=f"{key}_map")


def downloads(result: Comparison, prompt_pieces: list[str], model: str, key: str) -> None:
    """Both runs as a kvviz-shrink JSON file (Replay reads it) and as an HTML report."""
    from kvviz.shrink import report as shrink_report

    left, right = st.columns(2)
    left.download_button("Download both runs (JSON)", record.to_json(result, prompt_pieces, model),
                         file_name="kvviz-shrink.json", mime="application/json", key=f"{key}_download")
    right.download_button("Report (HTML)", lambda: shrink_report.html_report(result, prompt_pieces, model),
                          file_name="kvviz-shrink-report.html", mime="text/html", key=f"{key}_report")


def read_record(path, upload) -> record.ShrinkRecord | None:
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
    return record.from_json(data) if record.is_record(data) else None


def replay_page(rec: record.ShrinkRecord) -> None:
    """Replay's controls for a kvviz-shrink file: a step scrubber and Play, then the panels."""
    result = rec.result
    st.caption(f"A shrink comparison{' of ' + ui.inert(rec.model) if rec.model else ''}: "
               f"{ui.inert(result.shrunk.label)} against the full cache, {len(result.full.steps)} steps each.")
    steps = len(result.full.steps)
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


def play_steps(stage: Stage, result: Comparison, speed: float) -> None:
    """Both answers grow step by step, each step held for the time the two runs took (÷ speed)."""
    for n in range(1, len(result.full.steps) + 1):
        now = result.upto(n)
        stage.heading.caption(f"Step {n} of {len(result.full.steps)}")
        draw_answers(stage, [now.full, now.shrunk], final=False)
        if speed:
            step_s = (now.full.steps[-1].step_ms + now.shrunk.steps[-1].step_ms) / 1000
            time.sleep(min(step_s / speed, 2.0))
