"""Share links (kvviz.links): every value of a repeated parameter, and a free-text prompt."""
from kvviz import links


class Params(dict):
    """Like st.query_params: a key maps to a str or a list; get_all returns every value."""

    def get_all(self, key):
        value = self[key]
        return value if isinstance(value, list) else [value]


def test_a_sweep_grid_round_trips_with_every_value():
    params = Params(sweep_prompts=["64", "128", "256"], sweep_batches=["1", "2"], sweep_new="16")
    url = links.share_url("http://h:1/sweep", params)
    query = url.split("?", 1)[1]
    assert query.count("sweep_prompts=") == 3 and query.count("sweep_batches=") == 2
    pairs = links.decode(query)
    assert [v for k, v in pairs if k == "sweep_prompts"] == ["64", "128", "256"]
    assert [v for k, v in pairs if k == "sweep_batches"] == ["1", "2"]


def test_encode_decode_round_trip_keeps_odd_text():
    pairs = [("prompt", "a & b = c?\nline two · 100% #1"), ("system", " "), ("empty", "")]
    assert links.decode(links.encode(pairs)) == pairs
    assert links.decode("?" + links.encode(pairs)) == pairs


def test_a_free_text_prompt_is_in_the_link_up_to_the_stated_length():
    assert links.prompt_pairs("Free text", "Be brief.", "Hi") == [("system", "Be brief."), ("prompt", "Hi")]
    assert links.prompt_pairs("Free text", "", "x" * links.MAX_LINK_PROMPT_CHARS) != []
    assert links.prompt_pairs("Free text", "s", "x" * links.MAX_LINK_PROMPT_CHARS) == []
    assert links.prompt_pairs("Short story", "", "Hi") == []  # a preset is named by its key


def test_the_current_prompt_replaces_the_one_the_link_came_with():
    params = Params(preset="Free text", prompt="old", show_tokens="true")
    url = links.share_url("http://h/", params, links.prompt_pairs("Free text", "", "new"))
    assert links.decode(url.split("?", 1)[1]) == [("preset", "Free text"), ("show_tokens", "true"),
                                                  ("prompt", "new")]


def test_reading_a_prompt_from_a_link_is_capped():
    assert links.free_text_from_link({"prompt": "abcdef"}, 3) == {"system": "", "prompt": "abc"}
    assert links.free_text_from_link({}, 10) == {"system": "", "prompt": ""}


def test_no_parameters_gives_the_bare_url():
    assert links.share_url("http://h/live", Params()) == "http://h/live"
