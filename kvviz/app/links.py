"""Share links that reproduce a page: its bound widgets plus the text boxes widgets cannot carry.

Streamlit's `bind="query-params"` writes a multiselect as repeated parameters
(`?sweep_prompts=64&sweep_prompts=128`); a link built from `st.query_params.items()` keeps only the
last of each, so a Sweep grid reopened as one point. Here every value of every key is kept.

Text boxes are not bound (a bound box would put any text, of any length, into the address bar
while it is typed): a page names its boxes as `Text`s, and the link carries each box whose text
differs from the box's default (a preset's own prompt, the page's example) as `key=text`, when
the carried texts together are at most `MAX_LINK_PROMPT_CHARS` characters; longer, none is
carried and the link's caption says so. Opening a link restores them (`linked_texts`, cut to the
box's cap) and never starts a run. Pure functions: no streamlit import.
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode

FREE_TEXT = "Free text"  # the Live sidebar's preset name for a prompt typed by hand
MAX_LINK_PROMPT_CHARS = 2_000  # text characters a link carries (URLs stay well under 16 KB)
PROMPT_KEYS = ("system", "prompt")  # the Live page's prompt boxes (keyed per preset: `prompt-<preset>`)
# Every page's text parameters: a link keeps only its own page's, as they are now (a parameter
# another page left in the address bar is not this page's setting).
TEXT_KEYS = (*PROMPT_KEYS, "shrink_prompt", "srv_requests", "srv_system", "plan_config", "plan_vllm_log")


@dataclass(frozen=True)
class Text:
    """A text box a link carries: its parameter, its words in the caption, now and by default."""

    key: str
    label: str
    value: str
    default: str = ""


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


def text_pairs(texts: list[Text]) -> list[tuple[str, str]]:
    """The boxes that differ from their default, as link fields (an emptied box as `key=`); []
    when they hold more than `MAX_LINK_PROMPT_CHARS` characters together."""
    changed = [(t.key, t.value) for t in texts if t.value != t.default]
    return changed if sum(len(v) for _, v in changed) <= MAX_LINK_PROMPT_CHARS else []


def left_out(texts: list[Text]) -> list[Text]:
    """The changed boxes a link cannot carry (all of them, or none)."""
    changed = [t for t in texts if t.value != t.default]
    return [] if text_pairs(texts) or not changed else changed


def prompt_texts(preset: str | None, defaults: dict, system: str, prompt: str) -> list[Text]:
    """The Live page's two boxes, against the preset's own text (`defaults`: {"system", "prompt"};
    "Free text" has none)."""
    return [Text(key, label, value, str((defaults or {}).get(key, "")))
            for key, label, value in (("system", "system prompt", system), ("prompt", "prompt", prompt))]


def prompt_pairs(preset: str | None, system: str, prompt: str, defaults: dict | None = None) -> list[tuple[str, str]]:
    """The Live prompt as link fields: whatever differs from the preset's own text (`defaults`)."""
    return text_pairs(prompt_texts(preset, defaults or {}, system, prompt))


def fits_link(system: str, prompt: str) -> bool:
    return len(system) + len(prompt) <= MAX_LINK_PROMPT_CHARS


def linked_texts(params, defaults: dict[str, str], max_chars: int) -> tuple[dict[str, str], list[str]]:
    """Each box's text as a link carried it (cut to `max_chars`), else its default; and the keys
    whose linked text was cut."""
    values, cut = {}, []
    for key, default in defaults.items():
        if key not in params:
            values[key] = default
            continue
        text = str(params.get(key) or "")
        values[key] = text[:max_chars]
        if len(text) > max_chars:
            cut.append(key)
    return values, cut


def free_text_from_link(params, max_chars: int) -> dict:
    """{"system", "prompt"} as a link carried them (each cut to `max_chars`), "" where absent."""
    return linked_texts(params, dict.fromkeys(PROMPT_KEYS, ""), max_chars)[0]


def share_url(base: str, params, extra: list[tuple[str, str]] = ()) -> str:
    """`base` with every bound parameter and `extra` (the page's text boxes as they are now, which
    replace any text parameter the address bar still holds)."""
    pairs = [p for p in query_pairs(params) if p[0] not in TEXT_KEYS] + list(extra)
    query = encode(pairs)
    return f"{base}?{query}" if query else base


def caption(settings: str, texts: list[Text], notes: list[str] = ()) -> str:
    """What the link holds, in the page's own words: `settings` ("these settings"), the page's
    text boxes by name (or, when too long, that they are left out), and `notes`."""
    words = [f"Link to {settings}"]
    if texts:
        names = _names([t.label for t in texts])
        together = " together" if len(texts) > 1 else ""
        words.append(f" and the {names} as typed (up to {MAX_LINK_PROMPT_CHARS:,} characters{together})")
    words.append(". Opening it never starts a run.")
    missing = left_out(texts)
    if missing:
        total = sum(len(t.value) for t in missing)
        verb = "is" if len(missing) == 1 else "are"
        words.append(f" The {_names([t.label for t in missing])} ({total:,} characters) {verb} longer "
                     f"than a link carries: not in this link.")
    words += [f" {note}" for note in notes]
    return "".join(words)


def _names(labels: list[str]) -> str:
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]
