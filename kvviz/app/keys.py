"""A speaker's keys: the stage pages' keyboard shortcuts, and the list that "?" opens over the page.

The keys are Streamlit's own button shortcuts (`st.button(shortcut=...)`): the button shows its
key, and Streamlit ignores a plain key while the focus is in a text box, a slider or a radio (what
is typed there stays there). "?" is not a key Streamlit's shortcuts take (punctuation), so the list
opens in the browser alone: a fixed script toggles a fixed overlay, both kvviz's own text (no
text from anyone goes through them), with no rerun of the page, so it never interrupts a run.
"""
from __future__ import annotations

from html import escape

import streamlit as st

GENERATE, STOP, PACE = "G", "S", "P"
TOUR_NEXT, TOUR_BACK = "PageDown", "PageUp"  # what a presentation clicker sends for forward and back
PLAY, STEP_BACK, STEP_FORWARD = "K", "Left", "Right"
HELP = "?"
PACE_PRESSED = "pace_key_pressed"  # session state: P was pressed; the page redraws the pace it shows
PACE_HIDDEN_CSS = ("<style>.st-key-pace-key, [data-testid=stLayoutWrapper]:has(> [data-testid=stVerticalBlock] "
                   "> [data-testid=stLayoutWrapper] > .st-key-pace-key) { display: none; }</style>")
# the fragment's own wrapper too: a wrapper left shown takes the page's 1 rem gap

PAGE_KEYS = {  # a page's title (app.py's navigation) -> (key, what it does), in the order shown
    "Live": ((GENERATE, "Generate"), (STOP, "Stop the run"),
             (PACE, "Next pace: real time, slow motion ×4, ×10, ×30 (from the next run)"),
             (TOUR_NEXT, "Guided tour: next step (a presentation clicker's forward key)"),
             (TOUR_BACK, "Guided tour: step back")),
    "Replay": ((PLAY, "Play / Pause"), (STEP_BACK, "One step back"), (STEP_FORWARD, "One step forward")),
}
SHOWN_AS = {"Left": "←", "Right": "→"}
NOTE = ("Keys act while nothing is being typed in: click the page first if a text box or a slider "
        "has the focus. ? or Esc closes this list.")


def help_overlay(page_title: str) -> str:
    """The page's key list (hidden until "?"), its button in the header, and the script; "" for a
    page without keys. Kvviz's fixed text only."""
    rows = PAGE_KEYS.get(page_title)
    if not rows:
        return ""
    table = "".join(f"<tr><td><kbd>{escape(SHOWN_AS.get(key, key))}</kbd></td><td>{escape(what)}</td></tr>"
                    for key, what in ((*rows, (HELP, "This list"))))
    return (OVERLAY_CSS + f'<button id="kvviz-keys-button" type="button" title="Keyboard shortcuts (?)" '
            f'aria-haspopup="dialog">⌨ Keys <kbd>?</kbd></button>'
            f'<div id="kvviz-keys" role="dialog" aria-modal="true" aria-label="Keyboard shortcuts" hidden>'
            f'<div class="kvviz-keys-card"><p><b>Keys on the {escape(page_title)} page</b></p>'
            f'<table>{table}</table><p class="kvviz-keys-note">{escape(NOTE)}</p></div></div>' + TOGGLE_SCRIPT)


OVERLAY_CSS = """<style>
#kvviz-keys-button { position: fixed; top: 0.85rem; right: 4.25rem; z-index: 1000001; font: inherit;
  font-size: 0.85rem; color: #1F2933; background: #FFFFFF; border: 1px solid #E3E7ED; border-radius: 0.5rem;
  padding: 0.15rem 0.5rem; cursor: pointer; }
#kvviz-keys { position: fixed; inset: 0; z-index: 1000002; background: rgba(31, 41, 51, 0.35);
  display: flex; align-items: center; justify-content: center; }
#kvviz-keys[hidden] { display: none; }
.kvviz-keys-card { background: #FFFFFF; color: #1F2933; border-radius: 0.75rem; padding: 1rem 1.5rem;
  max-width: min(32rem, 92vw); max-height: 90vh; overflow: auto; box-shadow: 0 8px 32px rgba(0,0,0,0.25); }
.kvviz-keys-card table { border-collapse: collapse; }
.kvviz-keys-card td { padding: 0.3rem 0.75rem 0.3rem 0; vertical-align: top; }
.kvviz-keys-card kbd, #kvviz-keys-button kbd { font: inherit; font-weight: 600; border: 1px solid #BAB0AC;
  border-radius: 0.3rem; padding: 0 0.35rem; background: #F4F6F9; }
.kvviz-keys-note { color: #555; font-size: 0.85rem; margin-bottom: 0; }
@media (pointer: coarse) { #kvviz-keys-button { display: none; } }
</style>"""  # a touch screen has no keys to list

TOGGLE_SCRIPT = """<script>
(() => {
  const list = () => document.getElementById("kvviz-keys");
  const typing = (event) => event.composedPath().some((el) => el && el.tagName && (
    ["INPUT", "TEXTAREA", "SELECT"].includes(el.tagName) || el.isContentEditable));
  const show = (open) => { const el = list(); if (el) el.hidden = !open; };
  const button = document.getElementById("kvviz-keys-button");
  if (button) button.onclick = () => show(list() && list().hidden);
  const card = list();
  if (card) card.onclick = (event) => { if (event.target === card) show(false); };
  if (window.kvvizKeysListening) return;
  window.kvvizKeysListening = true;
  document.addEventListener("keydown", (event) => {
    if (!list()) return;
    if (event.key === "Escape" && !list().hidden) { show(false); return; }
    if (event.key !== "?" || event.ctrlKey || event.metaKey || event.altKey || typing(event)) return;
    event.preventDefault();
    show(list().hidden);
  }, true);
})();
</script>"""


def pace_key(paces: list[str], current: str, widget_keys: tuple[str, ...]) -> None:
    """P: the next of `paces` after `current`, set on the pace widgets (`widget_keys`). A hidden
    button in a fragment: pressed during a run it waits for the run's end, never stops it."""
    st.fragment(pace_button)(paces, current, widget_keys)


def pace_button(paces: list[str], current: str, widget_keys: tuple[str, ...]) -> None:
    if st.session_state.pop(PACE_PRESSED, False):
        st.rerun()  # the whole page, so the pace beside Generate and in the sidebar shows the new one
    with st.container(key="pace-key"):
        st.html(PACE_HIDDEN_CSS)  # a fixed stylesheet, never user text
        st.button("Next pace", key="pace-next", shortcut=PACE, on_click=next_pace, args=(paces, current, widget_keys))


def next_pace(paces: list[str], current: str, widget_keys: tuple[str, ...]) -> None:
    pace = paces[(paces.index(current) + 1) % len(paces)] if current in paces else paces[0]
    st.session_state.update({key: pace for key in widget_keys} | {PACE_PRESSED: True})
    st.toast(f"Pace: {pace} (from the next run)")
