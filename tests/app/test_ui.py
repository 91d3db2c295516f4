"""The words kvviz.live.panel.explainer puts before a visitor: the explainer says where things are in
words that hold on every screen, and the glossary explains every term the run's captions use."""
from __future__ import annotations

import re

from kvviz.app import ui
from kvviz.core import assets
from kvviz.core.trace import Trace, summary
from kvviz.live import cache_map_panel, captions, view_panel

EXAMPLE = ui.example_traces()["smollm2-135m-cpu-fp32"]  # a real SmolLM2-135M run (kvviz record)
# Where a panel sits changes with the screen (a phone stacks them): the explainer names panels by
# their titles, never by their place.
PLACES = re.compile(r"\b(left|right|beside|above|below|top|bottom)\b", re.I)
# Jargon a stranger cannot be expected to know, as the captions spell it: each one a caption uses
# needs a glossary entry (the entry's term holds the word). Units, acronyms, code and symbols are
# found by pattern (TERM_PATTERNS) whatever this list says.
JARGON = ("prefill", "decode step", "KV cache", "layer", "K and V", "KV heads", "head_dim", "formula",
          "token", "prompt", "batch", "block", "slot", "paged", "contiguous reservation", "measured",
          "modelled", "computed", "weights", "heatmap", "achieved", "kernel launch", "framework overhead",
          "median", "position", "full attention", "sliding", "no cache", "recompute", "whole run", "last step",
          "Tokens/s", "wall clock", "time to first token", "argmax", "half precision", "device")
TERM_PATTERNS = (
    re.compile(r"\d\s?(B|KiB|MiB|GiB|GB/s|ms|s)\b"),  # units after a number
    re.compile(r"\b([A-Z]{2,}[a-z0-9]*)\b(?!/)"),  # acronyms: KV, GPU, GQA (not a unit: GB/s)
    re.compile(r"\b(\w+_\w+(?:=\w+)?)\b"),  # code: head_dim, use_cache=False
    re.compile(r"\b(fp\d+|bf\d+)\b"),  # number formats
    re.compile(r"([÷])"),  # a ratio's sign
)


def glossary_terms() -> list[str]:
    """The first cell of every row of the glossary's table, lower-cased."""
    rows = [line.split("|") for line in (assets.FOLDER / "glossary.md").read_text().splitlines() if line.startswith("|")]
    return [cells[1].strip().lower() for cells in rows[2:]]  # past the header and its rule


def run_captions() -> dict[str, str]:
    """Every caption and headline label of the Live page after the example run, as drawn."""
    trace = Trace.load(EXAMPLE)
    cached, recompute = trace.events_of("cached"), trace.events_of("recompute")
    texts = {**captions.chart_captions(trace.meta, cached), **captions.race_captions(cached, recompute, True)}
    texts["cache map"] = cache_map_panel.caption(trace.meta, cached[-1], 0, True)
    texts["parity"] = captions.parity(cached, recompute, True)[1]
    texts["figures"] = " · ".join(label for label, _, _ in captions.headline(
        trace.meta, summary(trace), cached[-1], None, cached, recompute))
    return texts


def terms_in(text: str) -> set[str]:
    found = {term for term in JARGON if re.search(rf"(?<!\w){re.escape(term)}", text, re.I)}
    for pattern in TERM_PATTERNS:
        found |= {m.group(1) for m in pattern.finditer(text)}
    return found


def covered(term: str, glossary: list[str]) -> bool:
    term = term.lower()
    return any(re.search(rf"(?<![\w/]){re.escape(term)}(?![\w/])", entry) for entry in glossary)


def test_every_term_a_run_s_captions_use_is_in_the_glossary():
    glossary, texts = glossary_terms(), run_captions()
    assert "GB/s" in texts["timings"] and "×" in texts["total"]  # the captions the issue quoted
    missing = {f"{term} ({name})" for name, text in texts.items() for term in terms_in(text)
               if not covered(term, glossary)}
    assert not missing, sorted(missing)


def test_the_term_finder_finds_what_a_stranger_would_ask_about():
    assert {"GB/s", "kernel launch", "framework overhead", "B", "KV", "head_dim", "÷"} <= terms_in(
        "≈ 1.5 GB/s achieved: per-kernel launch and framework overhead dominate; 2 × 30 × 64 × 4 B; "
        "KV heads, head_dim; No cache ÷ cache")
    assert not covered("GB/s", ["gb (a billion bytes)"]) and covered("gb/s", ["gb/s (achieved bandwidth)"])


def test_the_explainer_names_panels_by_their_titles_not_their_places():
    text = " ".join((assets.FOLDER / "explainer.md").read_text().split())
    assert not PLACES.findall(text), PLACES.findall(text)
    assert cache_map_panel.TITLE in text and "*With the KV cache*" in text and "*Without a cache*" in text
    assert view_panel.titled_box.__doc__  # the two text boxes' titles are drawn by titled_box (checked in Chromium)
