"""The Live page's own words: what the page is, where its settings are, how much of the prompt shows
beside Generate (kvviz's text; a prompt is shown as plain text, never Markdown)."""
from __future__ import annotations

INTRO = ("A small language model writes the same answer twice, side by side: once with its KV cache "
         "(its memory of the text so far) and once without it. Press **Generate** to watch what the "
         "memory saves and what it costs.")
PROMPT_SHOWN_CHARS = 110  # the prompt beside Generate: one or two lines on a phone
SIDEBAR_WHERE = "(» at the top left opens it)"  # hosted, on a phone and on stage it starts closed


def prompt_shown(prompt: str) -> str:
    """The prompt Generate will use, its spaces folded and shortened to a line or two."""
    prompt = " ".join(prompt.split())
    if len(prompt) > PROMPT_SHOWN_CHARS:
        prompt = prompt[:PROMPT_SHOWN_CHARS - 1] + "…"
    return f"Prompt: {prompt or '(empty)'}"
