"""The cache map panel: the map, the attention map when recorded, a caption, a batch-row picker.

Fills a container the page hands it (a Streamlit container; this module imports no streamlit).
Each chart's Vega-Lite dict is built once per run shape and then only re-fed with data (~2-4 ms a redraw,
against ~25 ms for a fresh chart); the page calls `draw` at its chart rate (kvviz.live.cadence.Cadence:
at most 2 Hz).
"""
from __future__ import annotations

from kvviz.live import cache_map
from kvviz.live import cache_map_charts
from kvviz.viz import charts
from kvviz.core.events import StepEvent
from kvviz.core.meta import RunMeta
from kvviz.app.slots import Slot

TITLE = "The cache, position by position"
VEGAS: dict[tuple, dict] = {}  # process-wide: (kinds, max_len, prompt_len) -> Vega-Lite dicts, holding no data
ROW_KEY = "cache_map_row"  # session-state key of the batch-row picker


def map_vega_lite(meta: RunMeta) -> dict[str, dict]:
    """The map's and the attention map's Vega-Lite dicts for this run shape, built once per process."""
    kinds = meta.specs
    padded = (meta.batch or 1) > 1
    key = (tuple(kinds), int(meta.max_len), cache_map.prompt_len(meta), padded)
    if key not in VEGAS:
        if len(VEGAS) > 32:
            VEGAS.clear()
        args = (kinds, key[1], key[2])
        VEGAS[key] = {"map": charts.to_vega_lite(cache_map_charts.cache_map_chart(cache_map.map_frame(meta, []), *args, padded=padded)),
                      "attention": charts.to_vega_lite(cache_map_charts.attention_chart(cache_map.attention_frame(meta, []), *args))}
    return VEGAS[key]


def attention_recorded(meta: RunMeta) -> bool:
    return meta.setting("attention") is True


class CacheMapPanel:
    """One run's cache map. Build it before the first event; call `draw` with the cached events."""

    def __init__(self, container, meta: RunMeta, font_scale: float = 1.0):
        self.meta, self.batch = meta, (meta.batch or 1)
        self.font_scale = font_scale  # chart text size (presenter mode: charts.with_font_scale)
        self.attention = attention_recorded(meta)
        container.markdown(f"**{TITLE}**")  # a constant title, never user text
        self.picker_slot = container.empty() if self.batch > 1 else None
        self.map_slot = Slot(container)  # keeps the previous run's map until redrawn (kvviz.app.slots)
        self.attention_slot = Slot(container) if self.attention else None
        self.caption_slot = Slot(container)
        self.seq, self.draws, self.picked = 0, 0, False
        self.drawn_steps = 0  # cached events the map last showed
        self.vegas: dict | None = None  # the two charts' dicts at this font size, built at the first draw

    def draw(self, cached: list[StepEvent], final: bool) -> None:
        """Redraw from the cached events so far; the attention map at half rate until the end.
        Nothing is sent while the run has no new step (a race's no-cache steps, between)."""
        if not cached or (not final and len(cached) == self.drawn_steps):
            return
        self.draws, self.drawn_steps = self.draws + 1, len(cached)
        if final:
            self.pick_row()
        if self.vegas is None:  # once per run: the same dicts every frame (charts.columns_read keeps to them)
            self.vegas = {name: charts.with_font_scale(vega, self.font_scale) for name, vega in map_vega_lite(self.meta).items()}
        vegas = self.vegas
        self.map_slot.vega_lite_chart(charts.vega_lite_with_data(vegas["map"], cache_map.map_frame(self.meta, cached, self.seq)))
        if self.attention_slot is not None and (final or self.draws % 2):
            frame = cache_map.attention_frame(self.meta, cached, self.seq)
            self.attention_slot.vega_lite_chart(charts.vega_lite_with_data(vegas["attention"], frame))
        self.caption_slot.caption(caption(self.meta, cached[-1], self.seq, final))

    def pick_row(self) -> None:
        """Once the run is over, a picker for which sequence of the batch to draw (once per script run)."""
        if self.picker_slot is None or self.picked:
            return
        self.picked = True
        self.seq = self.picker_slot.selectbox(
            "Batch row", range(self.batch), format_func=lambda i: f"sequence {i + 1} of {self.batch}",
            key=f"{ROW_KEY}-{self.batch}", help="The cache holds the same positions for every sequence; their text, "
                              "padding and attention differ.") or 0
        self.seq = min(int(self.seq), self.batch - 1)


def caption(meta: RunMeta, last: StepEvent, seq: int, final: bool, hover: bool = True) -> str:
    """What the map shows, in words: kinds, dropped positions, binning, batch row, attention cost."""
    kinds = meta.specs
    held = cache_map.written(last)
    parts = [f"{held:,} positions cached after step {last.step}; each layer is two thin rows, "
             "K above V (paler: the prompt)."]
    if last.cache_note:
        parts = [f"{held:,} positions written after step {last.step}, but kvviz could not read this "
                 "cache, so the map shows no cells (the run's note says why)."]
    parts.append(kinds_sentence(kinds))
    width = cache_map.bin_width(int(meta.max_len))
    if width > 1:
        parts.append(f"Columns of {width} positions (more than {cache_map.MAX_COLUMNS} would not stay smooth)"
                     + ("; tap or hover one for its text." if hover else "."))
    elif hover:
        parts.append("Tap or hover a column for its token.")
    if (meta.batch or 1) > 1:
        parts.append(f"Showing sequence {seq + 1} of {meta.batch}"
                     + ("." if final else "; pick another when the run ends."))
    if attention_recorded(meta):
        parts.append(ATTENTION_NOTE)
    return " ".join(parts)


ATTENTION_NOTE = ("Below: the newest token's attention over the cached positions, averaged over heads, "
                  "each layer's row summing to 100 %. Recording it needs eager attention (sdpa returns "
                  "no weights), so this run's model uses attn_implementation='eager' plus a hook per "
                  "layer: its timings include that cost (measured by `python -m bench`, "
                  "see docs/benchmarks.md).")


def kinds_sentence(kinds) -> str:
    """The layers' kinds in words (`kinds`: the run's cache specs, RunMeta.specs)."""
    uniform = cache_map.uniform_label(kinds)
    if uniform == "full":
        return f"All {len(kinds)} layers are full attention: every layer keeps every position."
    if uniform is not None:
        return " ".join([f"All {len(kinds)} layers are {uniform}.", *[n for k, n in KIND_NOTES.items() if k == kinds[0].kind.replace("chunked", "sliding")]])
    counts: dict[str, int] = {}
    for kind in kinds:
        counts[kind.label()] = counts.get(kind.label(), 0) + 1
    listed = ", ".join(f"{n} × {label}" for label, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    present = {"sliding" if k.kind == "chunked" else k.kind for k in kinds}  # one note for both
    notes = [KIND_NOTES[kind] for kind in KIND_NOTES if kind in present]
    return " ".join([f"Layers: {listed}.", *notes])


KIND_NOTES = {  # what each kind's cells mean, said once when the model has such layers
    "sliding": "Sliding / chunked layers keep only their newest positions: grey cells are dropped.",
    "latent": "Latent (MLA) layers cache one compressed vector and a rope key per position.",
    "state": "State layers (green) keep one fixed-size state that sums up every position: it does not grow.",
    "shared": "Shared layers hold nothing of their own: they read an earlier layer's K and V.",
}


ATTENTION_HELP = ("Records, for the cache map, how much the newest token attends to each cached "
                  "position (averaged over heads, per layer). Needs eager attention (sdpa returns no "
                  "weights): the run uses an eager variant of the loaded model, sharing its weights, "
                  "which makes each step slower; docs/benchmarks.md has the measured cost. Off by default.")
