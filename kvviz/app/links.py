"""Share links that reproduce a page: its bound widgets plus what widgets cannot carry.

Streamlit's `bind="query-params"` writes a multiselect as repeated parameters
(`?sweep_prompts=64&sweep_prompts=128`); a link built from `st.query_params.items()` keeps only the
last of each, so a Sweep grid reopened as one point. Here every value of every key is kept.

A free-text prompt is not a bound widget (its text box is keyed per preset), so the link carries
it as `system=` / `prompt=` when the preset is "Free text" and the two together are at most
`MAX_LINK_PROMPT_CHARS` characters; longer prompts stay out of the link, and the caption says so.
Opening a link never starts a run. Pure functions: no streamlit import.
"""
from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlencode

FREE_TEXT = "Free text"  # the Live sidebar's preset name for a prompt typed by hand
MAX_LINK_PROMPT_CHARS = 2_000  # system + prompt characters a link carries (URLs stay well under 16 KB)
PROMPT_KEYS = ("system", "prompt")


def query_pairs(params) -> list[tuple[str, str]]:
    """Every (key, value) of `st.query_params` (or a dict of str / list), repeated keys kept."""
    pairs = []
    for key in params:
        values = params.get_all(key) if hasattr(params, "get_all") else params[key]
        pairs += [(key, str(v)) for v in ([values] if isinstance(values, str) else values)]
    return pairs


def encode(pairs: list[tuple[str, str]]) -> str:
    """A query string (no leading ?), spaces as %20."""
    return urlencode(pairs, quote_via=quote)


def decode(query: str) -> list[tuple[str, str]]:
    """The (key, value) pairs of a query string, in order, blanks kept."""
    return parse_qsl(query.removeprefix("?"), keep_blank_values=True)


def prompt_pairs(preset: str | None, system: str, prompt: str) -> list[tuple[str, str]]:
    """The free-text prompt as link fields; [] for a preset or a prompt too long for a link."""
    if preset != FREE_TEXT or not fits_link(system, prompt):
        return []
    return [(k, v) for k, v in (("system", system), ("prompt", prompt)) if v]


def fits_link(system: str, prompt: str) -> bool:
    return len(system) + len(prompt) <= MAX_LINK_PROMPT_CHARS


def free_text_from_link(params, max_chars: int) -> dict:
    """{"system", "prompt"} as a link carried them (each cut to `max_chars`), "" where absent."""
    return {k: str(params.get(k) or "")[:max_chars] for k in PROMPT_KEYS}


def share_url(base: str, params, extra: list[tuple[str, str]] = ()) -> str:
    """`base` with every bound parameter and `extra` (which replaces the link's own prompt)."""
    pairs = [p for p in query_pairs(params) if p[0] not in PROMPT_KEYS] + list(extra)
    query = encode(pairs)
    return f"{base}?{query}" if query else base
