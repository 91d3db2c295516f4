"""The Live page's own words (kvviz.live.words)."""
from kvviz.live import words


def test_the_prompt_beside_generate_is_one_or_two_lines_of_plain_text():
    assert words.prompt_shown("  What is\n a KV   cache? ") == "Prompt: What is a KV cache?"
    assert words.prompt_shown(" \n ") == "Prompt: (empty)"
    long = words.prompt_shown("word " * 100)
    assert len(long) == len("Prompt: ") + words.PROMPT_SHOWN_CHARS and long.endswith("…")
