"""Share links (kvviz.app.links): every value of a repeated parameter, and a free-text prompt."""
from kvviz.app import links


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


PRESET = {"system": "You are kind.", "prompt": "What is a KV cache?"}


def test_a_preset_is_named_by_its_key_and_only_its_edits_travel():
    assert links.prompt_pairs("Short", PRESET["system"], PRESET["prompt"], PRESET) == []
    assert links.prompt_pairs("Short", PRESET["system"], "Why?", PRESET) == [("prompt", "Why?")]
    assert links.prompt_pairs("Short", "", PRESET["prompt"], PRESET) == [("system", "")]  # emptied: carried


def test_text_boxes_travel_together_or_not_at_all_and_the_caption_says_which():
    long = links.Text("srv_requests", "requests", "r" * links.MAX_LINK_PROMPT_CHARS, "default")
    short = links.Text("srv_system", "system prompt", "s", "default")
    same = links.Text("plan_config", "pasted config.json", "{}", "{}")
    assert links.text_pairs([short, same]) == [("srv_system", "s")]
    assert links.text_pairs([long, short]) == [] and links.left_out([long, short]) == [long, short]
    assert links.left_out([short, same]) == [] and links.left_out([same]) == []
    words = links.caption("these settings", [long, short])
    assert "requests and system prompt as typed" in words and "longer than a link carries" in words
    assert f"{links.MAX_LINK_PROMPT_CHARS + 1:,} characters" in words
    assert links.caption("these settings", []) == "Link to these settings. Opening it never starts a run."
    assert "prompt" not in links.caption("this trace and how it plays", [], ["An uploaded file is not in a link."])


def test_a_link_text_is_restored_cut_to_the_box_and_absent_means_default():
    texts, cut = links.linked_texts({"a": "abcdef", "b": ""}, {"a": "A", "b": "B", "c": "C"}, 3)
    assert texts == {"a": "abc", "b": "", "c": "C"} and cut == ["a"]


def test_text_parameters_of_other_pages_never_ride_along():
    params = Params(prompt="from Live", srv_requests="from Serving", sweep_new="16")
    url = links.share_url("http://h/sweep", params)
    assert links.decode(url.split("?", 1)[1]) == [("sweep_new", "16")]
    url = links.share_url("http://h/shrink", params, [("shrink_prompt", "mine")])
    assert links.decode(url.split("?", 1)[1]) == [("sweep_new", "16"), ("shrink_prompt", "mine")]


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


def test_sweep_cache_axis_ticks_are_round_byte_values():
    """Powers of two bytes (1, 2, 4, 8 MiB), never 977 KiB / 4.77 MiB / 8.58 MiB."""
    import pandas as pd

    from kvviz.viz import charts
    from kvviz.sweep import charts as sweep_charts

    assert charts.power_of_two_ticks([1_000_000, 9_000_000]) == [2**19, 2**20, 2**21, 2**22, 2**23, 2**24]
    assert charts.power_of_two_ticks([0, None, float("nan")]) == []
    wide = charts.power_of_two_ticks([1_000, 10**10])
    assert len(wide) <= 7 and wide[0] <= 1_000 and wide[-1] >= 10**10
    assert all(t & (t - 1) == 0 for t in wide)  # each a power of two
    df = pd.DataFrame({"prompt_tokens": [64, 256], "batch": [1, 2], "status": ["ok", "ok"],
                       "prefill_kv_bytes": [1_474_560, 11_796_480], "prefill_formula_bytes": [1_474_560, 11_796_480]})
    vega = sweep_charts.cache_bytes_chart(df).to_dict()
    y = next(layer["encoding"]["y"] for layer in vega["layer"] if "y" in layer.get("encoding", {}))
    assert y["axis"]["values"] == [2**20, 2**21, 2**22, 2**23, 2**24] and y["scale"]["base"] == 2


def test_the_sweep_formula_legend_label_fits_a_half_width_chart():
    """At 1280 px the cache chart is ≈ 300 px wide: its dashed-line legend label must be short
    (the 64-character formula text was cut to "… × head_dim × tol")."""
    from kvviz.sweep import charts as sweep_charts

    assert len(sweep_charts.FORMULA_SERIES) <= 30
