"""The Live page's view of one run (`LiveView`): its placeholders built once, then filled from a
growing list of events, at the pace kvviz.live.cadence allows.

Each chart's Vega-Lite dict is built once per run and only its data is swapped
(kvviz.viz.charts.vega_lite_with_data); a chart whose picture did not move, and a figure or caption
that reads the same, is not sent again (kvviz.app.slots). The headline cards, the text boxes and
the long pass's wait line are drawn here too; their stylesheets are kvviz.live.stylesheet's.
"""
from __future__ import annotations

import time

import streamlit as st

from kvviz.app import ui
from kvviz.live import cache_map_panel
from kvviz.live import captions
import kvviz.live.charts
from kvviz.live import frames
from kvviz.viz import charts
from kvviz.live import cadence
from kvviz.live import stylesheet
from kvviz.engine import cost
from kvviz.engine.pump import Running
from kvviz.app.slots import Slot
from kvviz.core.meta import RunMeta
from kvviz.core.trace import Trace, summary

WAIT_SHOWN_S = 1.0  # a forward pass running longer than this gets a progress line
LONG_PASS_S = 2.0  # and one modelled to take this long gets it from its start
TOKEN_MARK = "│"


def text_of(events, show_tokens: bool) -> str:
    """Sequence 0's generated text; token boundaries marked on demand."""
    pieces = [e.texts[0] for e in events]
    return TOKEN_MARK.join(pieces) if show_tokens else "".join(pieces)


class LiveView:
    """All panels of one run. Build it before the first event; call `update` after each."""

    def __init__(self, meta: RunMeta, max_new_tokens: int, race_on: bool, show_tokens: bool):
        self.meta, self.race_on, self.show_tokens = meta, race_on, show_tokens
        self.cadence = cadence.page_cadence()  # when the text, the figures and the charts may draw again
        self.every_step = False  # slow motion: every update draws the text and the figures
        self.measure_wall = False  # run_live: time the tokens' arrival for the wall-clock rate
        self.arrivals: list[float] = []  # monotonic seconds when each cached event arrived
        self.wall_rate: float | None = None  # show_result: the rate its run measured
        st.html(stylesheet.DIM_HOLDER_CSS)  # a fixed stylesheet, never user text
        with st.container(key="dim-styles"):  # hidden; DIM_CSS while a run's panels show the previous run
            self.dim_slots = {mode: Slot(st) for mode in ("cached", "recompute")}
        self.dimmed: set[str] = set()  # runs whose panels still show the previous run
        self.ghosted = False  # the text boxes hold the previous run's text, hidden, for their height
        presenting = ui.presenter_mode()  # on a screen: one line of figures here, the cards below the map
        self.figure_line = None if presenting else figure_line_slot()
        self.presenting = presenting
        self.metric_slots = metric_cards(stage=True) if presenting else []
        self.notes_slot = st.empty()  # why cache bytes are missing, which attention ran (layout facts)
        left, right, map_area = text_areas(race_on, presenting)
        which = f" · sequence 1 of {meta.batch}" if meta.batch > 1 else ""
        self.text_slot, cached_ghost, cached_box = titled_box(left, f"With the KV cache{which}", "cached-panel")
        self.ghosts = {"cached": cached_ghost}  # screen mode: the previous run's text, hidden (KEEP_HEIGHT_CSS)
        self.note_slot = (cached_box or left).empty()  # "prefilling N tokens" while the prompt is read
        self.waiting: dict[str, bool] = {}  # mode -> its wait line is shown (show_wait)
        self.work = None  # cost.ModelWork of the model, for the modelled time left (run_live)
        self.timed_pace: float | None = None  # seconds per flop from timed_pass, set by the worker
        if right is not None:
            self.race_slot, self.ghosts["recompute"], race_box = titled_box(
                right, f"Without a cache: the whole text recomputed every step{which}",
                                        "recompute-panel")
            self.race_wait_slot = (race_box or right).empty()
            right.html(stylesheet.RACE_NOTES_CSS)  # a fixed stylesheet, never user text
            notes = right.container(key="race-notes")  # RACE_NOTES_CSS: room for both lines' longest forms
            self.parity_slot, self.race_note_slot = Slot(notes), Slot(notes)
        self.cache_map = cache_map_panel.CacheMapPanel(map_area.container(border=True, key="cache-map-panel"),
                                                      meta, ui.chart_font_scale())
        if not presenting:
            self.metric_slots = metric_cards(stage=False)
        self.max_new_tokens = max_new_tokens
        self.tour = None  # kvviz.live.tour_panel.TourPanel when the guided tour is on: drawn with each update
        self.scrubbing = False  # replay: the scrubber, not the run's end, set where it stands
        self.vegas: dict | None = None  # built from the first data, then only re-fed
        self.drawn: dict = {}  # chart name -> what its last redraw showed (see needs_redraw)
        self.figure_updates = 0
        race_rows = kvviz.live.charts.panel_rows(race=True) if race_on else ()
        rows = kvviz.live.charts.panel_rows(race=False)  # on stage the race's verdict comes first, under the texts
        self.slots = chart_slots(race_rows + rows if presenting else rows + race_rows)

    def show_previous(self, previous: Trace | None) -> bool:
        """Draw the previous run, dimmed and labelled, where this run's panels are, so that the
        stage keeps its shape until each panel has new data (`undim`). False when it cannot
        (no previous run, or one of another shape)."""
        if previous is None or not previous.events or not same_stage(previous.meta, self.meta) or (
                self.race_on != ("recompute" in previous.modes)):
            return False
        self.update(previous, final=True)
        self.vegas, self.drawn, self.figure_updates, self.cadence = None, {}, 0, cadence.page_cadence()
        self.cache_map.draws = self.cache_map.drawn_steps = 0  # the new run draws its own map
        self.dimmed = {"cached", "recompute"} if self.race_on else {"cached"}
        for mode in self.dimmed:
            self.dim_slots[mode].html(stylesheet.DIM_CSS[mode])  # fixed stylesheets, never user text
            if self.ghosts.get(mode) is not None:  # its box keeps at least this height until the run ends
                self.ghosts[mode].code(text_of(previous.events_of(mode), self.show_tokens) or " ", language=None,
                                       wrap_lines=True)
                self.ghosted = True
        return True

    def undim(self, mode: str) -> None:
        if mode in self.dimmed:
            self.dimmed.discard(mode)
            self.dim_slots[mode].empty()

    def clear(self) -> None:
        """Blank text panels before a run's first token (the previous run's text must not linger).

        Charts and figures of a previous run that cannot stand in (another shape) stay, faded by
        Streamlit as stale, until this run redraws them: emptying a slot would leave an empty
        element that takes a gap (kvviz.app.slots)."""
        self.text_slot.code(" ", language=None)
        if self.race_on:
            self.race_slot.code(" ", language=None)
        for slot in self.dim_slots.values():  # a previous run stopped while still dimmed
            slot.empty()

    def show_wait(self, running: Running | None, trace: Trace, seconds_per_flop: float | None) -> None:
        """A forward pass that takes a while gets a line with its elapsed and modelled time left:
        from WAIT_SHOWN_S on, or at once when it is modelled to take LONG_PASS_S or more."""
        slots = {"cached": self.note_slot, "recompute": getattr(self, "race_wait_slot", None)}
        for mode, slot in slots.items():
            if slot is None:
                continue
            if running is not None and running.mode == TIMING and mode == "cached":
                self.show_timing(running, slot)  # the timed pass before the cached prefill
                continue
            ours = running is not None and running.mode == mode
            positions = self.meta.prompt_tokens + (running.step if ours and mode == "recompute" else 0)
            total_s = (seconds_per_flop * self.work.prefill_flops(positions, self.meta.batch)
                       if ours and seconds_per_flop and self.work is not None else None)
            if not ours or (running.elapsed_s() < WAIT_SHOWN_S and (total_s or 0) < LONG_PASS_S):
                if self.waiting.pop(mode, None):
                    slot.empty()
                continue
            self.waiting[mode] = True
            line = wait_line(mode, running, positions, self.meta.batch, total_s)
            fraction = min(running.elapsed_s() / total_s, 0.99) if total_s else None
            if fraction is None:
                slot.caption(line)
            else:
                slot.progress(fraction, text=line)

    def show_timing(self, running: Running, slot) -> None:
        """The line of the pass that times the device (timed_pass), once it takes WAIT_SHOWN_S."""
        if running.elapsed_s() < WAIT_SHOWN_S:
            return
        self.waiting["cached"] = True  # the prefill's own line, or nothing, replaces it
        slot.caption(f"Timing a {cost.calibration_tokens(self.meta.prompt_tokens)}-token pass, for the "
                     f"prefill's time left: {running.elapsed_s():.0f} s so far.")

    def update(self, trace: Trace, final: bool = False) -> None:
        cached, recompute = trace.events_of("cached"), trace.events_of("recompute")
        if cached:
            if self.race_on and "cached" in self.dimmed:
                self.race_note_slot.empty()  # the previous run's end note: this run has not ended
            self.undim("cached")
        if recompute:
            self.undim("recompute")
        now = time.monotonic()
        if self.measure_wall and len(cached) > len(self.arrivals):
            self.arrivals += [now] * (len(cached) - len(self.arrivals))
        if final or self.every_step or self.cadence.due("text", now):
            with self.cadence.drawing("text"):
                self.draw_texts(cached, recompute, final)
        headline = None
        if cached and (final or self.every_step or self.cadence.due("figures", now)):
            with self.cadence.drawing("figures"):  # the figures go with the text: never "1 × 1" beside a box of words
                headline = self.headline(trace, cached, recompute)
                self.draw_headline(*headline, cards=self.presenting)
                if self.race_on:
                    same, line = captions.parity(cached, recompute, final)
                    (self.parity_slot.success if same else self.parity_slot.warning)(line)
        if cached and not self.presenting and (final or self.every_step or self.cadence.due("cards", now)):
            with self.cadence.drawing("cards"):  # on a screen the line above the texts reads the same figures
                self.draw_headline(*(headline or self.headline(trace, cached, recompute)), cards=True)
        if cached and (final or self.cadence.due("charts", now)):
            with self.cadence.drawing("charts"):
                self.draw_figures(trace, cached, recompute, final)
        if self.tour is not None:
            self.tour.draw(trace, final, self.race_on)

    def draw_texts(self, cached, recompute, final: bool) -> None:
        """Both runs' texts so far; at the end the race's note, and the boxes their own height."""
        if "cached" not in self.dimmed:
            self.text_slot.code(text_of(cached, self.show_tokens) or " ", language=None, wrap_lines=True)
        if self.race_on and "recompute" not in self.dimmed:
            self.race_slot.code(text_of(recompute, self.show_tokens) or " ", language=None, wrap_lines=True)
            if final:
                ended = captions.run_ended(cached, self.max_new_tokens)
                self.race_note_slot.caption(captions.race_stop_note(cached, recompute, ended, self.scrubbing))
        if final and self.ghosted and not self.dimmed:  # this run's text is all there: its own height
            self.ghosted = False
            for ghost in self.ghosts.values():
                if ghost is not None:
                    ghost.empty()

    def wall_tokens_per_s(self) -> float | None:
        """Tokens × batch per wall-clock second from the first cached token to the latest."""
        if len(self.arrivals) < 2 or self.arrivals[-1] <= self.arrivals[0]:
            return self.wall_rate
        return (len(self.arrivals) - 1) * self.meta.batch / (self.arrivals[-1] - self.arrivals[0])

    def draw_notes(self, last) -> None:
        notes = run_notes(self.meta, last)
        if notes:  # the note quotes a model's layer class: escaped
            self.notes_slot.warning("  \n".join(ui.inert(n) for n in notes))

    def draw_figures(self, trace: Trace, cached, recompute, final: bool) -> None:
        self.figure_updates += 1
        if self.figure_updates == 1 or final:
            self.draw_notes(cached[-1])
        if self.vegas is None:
            self.vegas = build_vega_lite(self.meta, self.max_new_tokens, kvviz.live.charts.chart_data(self.meta, cached, recompute))
        for name, df in self.moved_charts(cached, recompute, final).items():
            self.slots[name].vega_lite_chart(charts.vega_lite_with_data(self.vegas[name], df))
        self.cache_map.draw(cached, final)
        texts = captions.chart_captions(self.meta, cached)
        if self.race_on:
            texts |= captions.race_captions(cached, recompute, final)
        for name, text in texts.items():
            if self.shows_this_run(name):
                self.slots[f"{name}_caption"].caption(text)

    def shows_this_run(self, panel: str) -> bool:
        """False for the race's panels while they still show the previous run: its first cached
        token must not draw into a panel labelled "previous run" (they wait for a recomputed one)."""
        return not ("recompute" in self.dimmed and panel in kvviz.live.charts.RACE_PANELS)

    def moved_charts(self, cached, recompute, final: bool) -> dict:
        """chart name -> its frame, for the charts of this page whose picture moved since their last
        redraw (`needs_redraw`); each frame built only for them, and a frame two charts share once."""
        steps, built, moved = None, {}, {}
        for chart in kvviz.live.charts.CHARTS:
            if (chart.name not in self.slots or (chart.paged and cached[-1].blocks is None)
                    or not self.shows_this_run(chart.name) or not self.needs_redraw(chart.name, cached, recompute, final)):
                continue
            if steps is None:
                steps = frames.steps_frame(cached + recompute)
            if chart.data not in built:  # the race's two charts draw one frame
                built[chart.data] = chart.data(self.meta, cached, recompute, steps)
            moved[chart.name] = built[chart.data]
        return moved

    def needs_redraw(self, name: str, cached, recompute, final: bool) -> bool:
        """Block charts change only when a block fills; the heatmap is redrawn at half rate; a
        chart of the cached run alone only when that run has a new step; the rest always."""
        last = cached[-1]
        if name in ("grid", "reservation"):
            key = (last.blocks, last.seq_len) if name == "reservation" else last.blocks
        elif final:
            return True
        elif name == "layer_times":
            key = self.figure_updates // 2
        elif name in CACHED_ONLY:
            key = len(cached)
        else:
            key = (len(cached), len(recompute))
        changed = self.drawn.get(name, object()) != key
        self.drawn[name] = key
        return changed

    def headline(self, trace: Trace, cached, recompute) -> tuple[list, str | None]:
        """(the headline figures, how the whole run's no-cache ratio was found) as they stand."""
        figures = captions.headline(self.meta, summary(trace), cached[-1], self.wall_tokens_per_s(), cached, recompute)
        return figures, captions.run_basis(captions.no_cache_cost(cached, recompute))

    def draw_headline(self, figures, basis: str | None, cards: bool) -> None:
        """On a screen the line of figures above the texts, or (`cards`) the cards below the map; on
        stage the cards at the top are the only place."""
        if cards:
            for slot, figure in zip(self.metric_slots, card_figures(figures, self.presenting)):
                draw_card(slot, *figure, basis)
        elif self.figure_line is not None:
            self.figure_line.caption(figure_line(figures, basis))


CACHED_ONLY = frozenset({"layers", "total"})  # charts drawn from the cached run's events alone


def draw_card(slot, label: str, value: str, help_text: str, basis: str | None) -> None:
    """One headline card; the whole run's no-cache ratio says under its figure whether it was
    measured or modelled (a grey line, no arrow: it is not a change)."""
    note = basis if label == captions.RUN_LABEL else None  # the row's hidden copy keeps its line's room
    slot.metric(label, value, note, delta_color="off", delta_arrow="off", help=help_text)


def metric_cards(stage: bool) -> list[Slot]:
    """The headline figures' cards, each with its explanation (card_figures: eight on a screen,
    seven on stage; a ninth wraps at 1280 px).

    The whole run's no-cache ratio, the figure to remember, comes last; on stage twice as wide,
    so that its label takes one line and "modelled" or "measured" sits beside the figure
    (RUN_CARD_CSS): under the figure, it made the row 30 px taller and pushed the no-cache text
    below a 1280 x 720 stage.
    A hidden copy of the row at its widest (captions.widest_headline) shares its grid cell
    (KEEP_HEIGHT_CSS), so the row is as tall before a run's first figure as after it: on a first
    run at 1280 x 720 in presenter mode every panel below jumped 69 px when the figures arrived."""
    st.html(stylesheet.KEEP_HEIGHT_CSS + stylesheet.RUN_CARD_CSS)  # fixed stylesheets, never user text
    count = len(card_figures(captions.widest_headline(), stage))
    stack = st.container(key="headline-figures-stack")
    with stack.container(key="headline-figures"):
        slots = card_slots(count, stage, "headline-run")
    with stack.container(key="headline-figures-ghost"):
        for slot, figure in zip(card_slots(count, stage, "headline-run-ghost"),
                                card_figures(captions.widest_headline(), stage)):
            draw_card(slot, *figure, "modelled")  # kvviz's own constant text
    return slots


def card_slots(count: int, stage: bool, run_key: str) -> list[Slot]:
    """A slot per headline card in one row; the last, the whole run's, in a container keyed
    `run_key` (RUN_CARD_CSS styles it) and, on stage, twice as wide as the others."""
    columns = st.columns([1] * (count - 1) + [2 if stage else 1])
    return [Slot(col) for col in columns[:-1]] + [Slot(columns[-1].container(key=run_key))]


def figure_line_slot() -> Slot:
    """The one line of figures above the texts and the map (on a screen), as tall from the start
    of a run as its widest form: its hidden copy shares the slot's grid cell (KEEP_HEIGHT_CSS)."""
    st.html(stylesheet.KEEP_HEIGHT_CSS)  # a fixed stylesheet, never user text
    stack = st.container(key="headline-line-stack")
    slot = Slot(stack.container(key="headline-line"))
    stack.container(key="headline-line-ghost").caption(figure_line(captions.widest_headline(), "modelled"))
    return slot


def card_figures(figures, stage: bool = False) -> list[tuple[str, str, str]]:
    """The figures as cards: eight fit a row at 1280 px (a ninth wraps and moves the stage), so
    the no-cache ratio of the last step both runs made goes into the help of the whole run's: the
    whole run is the figure to remember (the race caption, the tour and the figure line quote
    it), the last step a detail. On `stage` the computed formula goes into the measured cache's
    help as well (the whole run's card takes two places there)."""
    folded = {captions.LAST_STEP_LABEL: captions.RUN_LABEL}
    if stage:
        folded[captions.FORMULA_LABEL] = next(label for label, _, _ in figures if label.startswith("KV cache"))
    into = {host: " ".join(f"{label}: {value}. {h}" for label, value, h in figures if folded.get(label) == host)
            for host in folded.values()}
    return [(label, value, f"{h} {into[label]}" if label in into else h)
            for label, value, h in figures if label not in folded]


def figure_line(figures, basis: str | None = None) -> str:
    """The headline figures in one line of small text, above the texts and the map (kvviz's own
    labels and numbers, escaped all the same); the whole run's ratio says how it was found."""
    return " · ".join(f"{ui.inert(label)} **{ui.inert(value)}**"
                      + (f" ({basis})" if basis and label == captions.RUN_LABEL else "")
                      for label, value, _ in figures)


def same_stage(old: RunMeta, new: RunMeta) -> bool:
    """Two runs' panels have the same places and sizes (the previous one can stand in)."""
    return (all(getattr(old, k) == getattr(new, k) for k in (*VEGA_FACTS, "layers"))
            and old.setting("attention") == new.setting("attention"))


def run_notes(meta: RunMeta, last) -> list[str]:
    """What a reader must know to trust the figures: bytes kvviz could not measure, an attention
    implementation other than the one asked for, a state whose size the formula leaves out."""
    notes = [last.cache_note] if getattr(last, "cache_note", "") else []
    if meta.attn_fallback:
        notes.append(f"Attention ran as {meta.attn_implementation or '?'}: {meta.attn_fallback}.")
    if meta.state_modelled is False:
        notes.append("Some state layers have a size kvviz does not model: the formula leaves them out.")
    if meta.cache_caveat:
        notes.append(f"This model: {meta.cache_caveat}.")
    return notes


def text_areas(race_on: bool, presenting: bool):
    """(cached text column, no-cache text column or None, cache map area).

    Both texts and the map start on one line, so that a 1280 x 720 or 1920 x 1080 screen shows
    all three without scrolling: on stage the texts stacked (fixed-height boxes) beside the map; on
    a screen each text in its own column (they grow with the text), the map beside them. A phone
    stacks the columns: the texts first, then the map.
    """
    if presenting or not race_on:
        texts, map_area = st.columns([2, 3], gap="medium")
        return texts.container(), texts.container() if race_on else None, map_area
    left, right, map_area = st.columns([1, 1, 2], gap="medium")
    return left, right, map_area


PRESENTER_TEXT_PX = 150  # on stage a text box keeps this height and follows the newest text


def titled_box(column, title: str, key: str):
    """A bordered container with a fixed title; returns (the slot for its text, a ghost slot or
    None, the box a wait line goes in or None: below the box then).

    In presenter mode the text sits in a fixed-height box that scrolls to its newest line, so a
    long output never pushes the panels below it off the screen; a long pass's progress line goes
    in that box too, under the text (below it, it pushed the no-cache panel off a 1280 x 720 stage). On a screen the box grows with
    its text; the ghost, drawn in the same grid cell but hidden (KEEP_HEIGHT_CSS), holds the
    previous run's text during a second run, so the box does not shrink to the new run's first
    words and grow back, moving every panel below it (measured at 1280 x 720: 45 px).
    """
    with column:
        box = st.container(border=True, key=key)
        box.markdown(f"**{title}**")  # a constant title, never user text
        if not ui.presenter_mode():
            box.html(stylesheet.KEEP_HEIGHT_CSS)  # a fixed stylesheet, never user text
            stack = box.container(key=f"{key}-stack")
            return Slot(stack), Slot(stack.container(key=f"{key}-ghost")), None
        box.html(stylesheet.PRESENTER_TEXT_CSS)  # a fixed stylesheet, never user text
        text = box.container(height=PRESENTER_TEXT_PX, border=False, autoscroll=True, key=f"{key}-text")
        return Slot(text), None, text


VEGA_FACTS = ("num_layers", "num_kv_heads", "head_dim", "elem_bytes", "bytes_per_token",
              "weight_bytes", "batch", "max_len")  # all a chart depends on, besides the run length
VEGAS: dict[tuple, dict] = {}  # process-wide: a Vega-Lite dict holds no run's data once re-fed


def build_vega_lite(meta: RunMeta, max_new_tokens: int, data: dict) -> dict:
    """Every chart's Vega-Lite dict (see kvviz.live.charts); reused by later runs of the same shape.

    Building them costs ~150 ms, too much to pay inside every run's first token.
    """
    scale = ui.chart_font_scale()
    key = (*(getattr(meta, k) for k in VEGA_FACTS), max_new_tokens, "grid" in data, tuple(kvviz.live.charts.layer_groups(meta)), scale)
    if key not in VEGAS:
        if len(VEGAS) > 64:
            VEGAS.clear()
        built = kvviz.live.charts.build_charts(meta, max_new_tokens, data)
        heights = kvviz.live.charts.heights(presenting=scale != 1)
        VEGAS[key] = {name: charts.with_font_scale(sized(charts.to_vega_lite(chart), heights.get(name)), scale)
                      for name, chart in built.items()}
    return VEGAS[key]


def sized(vega: dict, height: int | None) -> dict:
    return {**vega, "height": height} if height else vega


def chart_slots(rows) -> dict:
    """Rows of two panels; each panel a title, its chart placeholders and a caption."""
    slots = {}
    for row in rows:
        for col, (panel, names) in zip(st.columns(2, gap="large"), row):
            with col.container(key=f"panel-{panel}"):
                st.markdown(f"**{kvviz.live.charts.PANELS[panel]}**")  # a constant title
                for name in names:
                    slots[name] = Slot(st)
                slots[f"{panel}_caption"] = race_caption_slot() if panel == "race" else Slot(st)
    return slots


def race_caption_slot() -> Slot:
    """The race caption's slot, as tall as the caption's longest form: a hidden copy of that form
    shares the slot's grid cell (KEEP_HEIGHT_CSS), so a caption that gains or loses sentences as
    the run goes never moves the panels below it (at 1280 x 720 it runs 5 to 8 lines)."""
    st.html(stylesheet.KEEP_HEIGHT_CSS)  # a fixed stylesheet, never user text
    stack = st.container(key="race-caption-stack")
    slot = Slot(stack)
    stack.container(key="race-caption-ghost").caption(captions.race_longest())  # constant text
    return slot


TIMING = "timing"  # the Running mode of timed_pass


def wait_line(mode: str, running: Running, positions: int, batch: int, total_s: float | None) -> str:
    """"Prefilling 2,322 prompt tokens without a cache: 5 s so far, ≈ 11 s left (an estimate …)"."""
    of_batch = f" × batch {batch}" if batch > 1 else ""
    if running.step == 0:
        what = f"Prefilling {positions:,} prompt tokens{of_batch}" + (" without a cache" if mode == "recompute" else "")
    else:
        what = f"Step {running.step + 1} without a cache reads all {positions:,} positions again{of_batch}"
    elapsed = running.elapsed_s()
    text = f"{what}: {elapsed:.0f} s so far"
    if total_s:
        left = max(total_s - elapsed, 0.0)
        when = f"{left:.0f} s" if left < 60 else captions.fmt_duration(left * 1000)  # an estimate: whole seconds
        text += (f", ≈ {when} left (an estimate from this device's pace)" if left > 0.5
                 else ", longer than the estimate")
    return text + "."


def prompt_and_view(rendered: str | None, meta: RunMeta, max_new_tokens: int, race_on: bool,
                    show_tokens: bool) -> LiveView:
    """The run's panels, then its prompt as the model read it (folded): the texts and the map
    come first (the Live page shows the prompt's first words beside Generate)."""
    view = LiveView(meta, max_new_tokens, race_on, show_tokens)
    show_prompt(rendered, meta)
    return view


def show_prompt(rendered: str | None, meta: RunMeta) -> None:
    text = rendered if rendered is not None else "\n\n".join(
        p for p in (meta.setting("system", ""), *meta.setting("prompts", [])) if p)
    with st.expander(f"Prompt: {meta.prompt_tokens} tokens × batch {meta.batch}"):
        st.text(text)  # untrusted: shown as plain text
