"""The guided tour's steps (kvviz.live.tour): every number is the run's own, the steps become
ready as the run reaches them, the tour moves on at a reading pace, and its links open the
Capacity planner and Shrink pages with settings those pages have."""
import ast
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from kvviz.core import catalog
from kvviz.core.events import LayerStat, StepEvent
from kvviz.core.units import fmt_bytes, fmt_ms
from kvviz.live import tour
from metas import meta_of

PAGES = Path(__file__).resolve().parents[2] / "app_pages"
PER_TOKEN = 46_080  # the default model in fp32: 2 × 30 layers × 3 KV heads × 64 × 4 bytes
META = meta_of({"model": "default", "num_layers": 30, "num_kv_heads": 3, "head_dim": 64, "elem_bytes": 4,
        "bytes_per_token": PER_TOKEN, "weight_bytes": 538_060_032, "prompt_tokens": 31, "batch": 1,
        "max_len": 95})


def event(step: int, ms: float, mode: str = "cached", per_token: int = PER_TOKEN, batch: int = 1) -> StepEvent:
    """The cached run's or the recompute run's step `step` after a 31-token prompt."""
    seq_len = 31 + step + 1
    held = seq_len - 1  # the newest token's keys and values go in at the next step
    kv = per_token * held * batch if mode == "cached" else 0
    positions = (31 if step == 0 else 1) if mode == "cached" else seq_len - 1
    return StepEvent(mode=mode, phase="prefill" if step == 0 else "decode", step=step, token_ids=(5,) * batch,
                     texts=("a",) * batch, finished=(False,) * batch, step_ms=ms, seq_len=seq_len,
                     positions=positions * batch, kv_bytes=kv, formula_bytes=kv,
                     layers=(LayerStat(layer=0, k_bytes=kv // 2, v_bytes=kv // 2, tokens=held,
                                       forward_ms=1.0),), blocks=None)


def run(cached_steps: int, recompute_steps: int | None, ended: bool = False, meta=META):
    cached = [event(i, 120.0 if i == 0 else 40.0 + i) for i in range(cached_steps)]
    recompute = (None if recompute_steps is None else
                 [event(i, 150.0 + 30 * i, "recompute") for i in range(recompute_steps)])
    return tour.steps(meta, cached, recompute, ended=ended), cached, recompute


def ready(steps) -> list[bool]:
    return [s.ready for s in steps]


def test_five_steps_ready_as_the_run_reaches_them():
    assert ready(run(0, 0)[0]) == [False] * 5
    assert ready(run(1, 1)[0]) == [True, False, False, False, False]  # the prefill
    assert ready(run(3, 1)[0]) == [True, True, False, False, False]  # tokens, no recomputed one yet
    assert ready(run(5, 2)[0]) == [True, True, True, False, False]  # the race has a step to compare
    assert ready(run(5, 2, ended=True)[0]) == [True] * 5
    assert len({s.title for s in run(5, 2)[0]}) == 5


def test_the_prefill_step_quotes_the_prompt_tokens_and_the_measured_prefill():
    steps, cached, _ = run(2, None)
    text = steps[0].text
    assert "31 tokens" in text and fmt_ms(cached[0].step_ms) in text and fmt_bytes(cached[0].kv_bytes) in text


def test_the_columns_step_measures_bytes_per_token_and_the_cache_now():
    steps, cached, _ = run(6, None)
    text = steps[1].text
    assert "30 layers" in text and f"{fmt_bytes(PER_TOKEN)} per token (measured" in text
    assert f"holds {fmt_bytes(cached[-1].kv_bytes)} for {cached[-1].seq_len} tokens" in text
    assert fmt_ms(cached[-1].step_ms) in text


def test_bytes_per_token_is_the_measured_growth_not_the_layout():
    cached = [event(i, 40.0, per_token=1000) for i in range(4)]  # the layout says 46,080: unused
    assert tour.bytes_per_token(META, cached) == (1000.0, True)
    flat = [event(i, 40.0, per_token=0) for i in range(4)]  # nothing measured: the layout, said so
    assert tour.bytes_per_token(META, flat) == (PER_TOKEN, False)
    assert "from the model's layout" in tour.columns_step(META, flat).text


def test_bytes_per_token_counts_one_sequence_of_a_batch():
    cached = [event(i, 40.0, batch=4) for i in range(3)]
    assert tour.bytes_per_token(meta_of(META, batch=4), cached) == (PER_TOKEN, True)


def test_the_race_step_quotes_the_pages_whole_run_figure():
    """The tour and the page quote one figure, computed in one place: the race step's only ratio
    is the headline's whole-run figure (captions.headline, the race caption), modelled while the
    run without a cache is behind, measured once it wrote every token; its token counts are the
    race caption's."""
    from kvviz.core.trace import Trace, summary
    from kvviz.live import captions
    for recompute_steps, basis in ((3, "modelled"), (8, "measured")):
        steps, cached, recompute = run(8, recompute_steps)
        text = steps[2].text
        figures = {label: value for label, value, _ in captions.headline(
            META, summary(Trace(META, cached + recompute)), cached[-1], cached=cached, recompute=recompute)}
        page = figures[captions.RUN_LABEL]
        assert page != "–" and f"takes {page} the time with the cache ({basis}" in text
        assert f"{page} the cached time" in captions.race_caption(cached, recompute, final=True)
        assert re.findall(r"[\d.]+×", text) == re.findall(r"[\d.]+×", page)  # no other ratio
        assert f"written {recompute_steps} tokens to the cached run's 8" in text
        assert (f"{recompute_steps} tokens in" in captions.race_caption(cached, recompute, final=True))
        assert f"read all {recompute[-1].positions} positions" in text


def test_the_race_step_on_a_long_prompt_quotes_the_whole_run_not_the_last_step():
    """A 1,984-token prompt cut short after two no-cache steps: the tour said "94.0× as long … the
    gap grows" from the last step while the page said "whole run ≈ 15.8×"; it now says the page's
    figure, with the range it is the middle of."""
    from dataclasses import replace

    from kvviz.live import captions
    cached = [replace(event(i, 2000.0 if i == 0 else 20.0), seq_len=1985 + i) for i in range(29)]
    recompute = [replace(event(i, 2000.0 + 40 * i, "recompute"), seq_len=1985 + i, positions=1984 + i)
                 for i in range(2)]
    text = tour.race_step(cached, recompute).text
    cost = captions.no_cache_cost(cached, recompute)
    assert cost.step_ratio > 90 and f"{cost.step_ratio:.1f}×" not in text
    assert f"takes {captions.fmt_run_ratio(cost)} the time with the cache (modelled" in text
    assert captions.fmt_run_range(cost) in text and "gap grows" not in text


def test_the_race_step_says_when_the_race_is_off():
    steps, _, _ = run(3, None)
    assert steps[2].ready and "race is off" in steps[2].text


def test_the_long_context_step_scales_the_measured_bytes_per_token():
    steps, _, _ = run(4, 2, ended=True)
    text = steps[3].text
    assert "131,072 tokens" in text and fmt_bytes(PER_TOKEN * 131_072) in text
    assert fmt_bytes(PER_TOKEN * 131_072 / 2) in text  # fp32 run: the bf16 figure beside it
    bf16 = tour.long_context_step(meta_of(META, elem_bytes=2), [event(i, 40.0, per_token=23_040) for i in range(3)],
                                  True).text
    assert fmt_bytes(23_040 * 131_072) in bf16 and "in bf16" not in bf16


def planner_settings() -> dict[str, str]:
    """The planner page's URL-bound widgets: key -> the widget's function name."""
    bound = {}
    for node in ast.walk(ast.parse((PAGES.parent / "kvviz" / "planner" / "panel.py").read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            words = {k.arg: k.value for k in node.keywords}
            key = words.get("key")
            if isinstance(key, ast.Constant) and "bind" in words:
                bound[key.value] = node.func.attr
    return bound


def test_the_planner_link_names_settings_the_planner_binds():
    label, url = tour.planner_link(META)
    parts = urlsplit(url)
    assert parts.path == "planner" and not parts.scheme and not parts.netloc  # relative: any base path
    params = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert params == {"plan_source": "Catalog", "plan_model": "SmolLM2-135M", "plan_gpu": "H100 SXM",
                      "plan_kv_dtype": "bf16", "plan_context": "131072"}
    assert set(params) <= set(planner_settings()), planner_settings()
    assert catalog.find_catalog_entry(params["plan_model"])["hf_id"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert catalog.find_gpu(params["plan_gpu"])["name"] == "H100 SXM"
    assert "SmolLM2-135M" in label and "128k" in label
    assert tour.steps(META, [], None)[3].link_url == url  # the link is there before the numbers


def test_a_model_outside_the_catalog_links_the_planner_without_a_model():
    label, url = tour.planner_link(meta_of(META, model="/tmp/my-tiny-model"))
    params = parse_qs(urlsplit(url).query)
    assert "plan_model" not in params and params["plan_context"] == ["131072"]


def test_the_shrink_step_links_the_shrink_page_and_halves_the_final_cache():
    steps, cached, _ = run(5, 2, ended=True)
    assert steps[4].link_url == "shrink" and (PAGES / "shrink.py").exists()
    assert fmt_bytes(cached[-1].kv_bytes) in steps[4].text and fmt_bytes(cached[-1].kv_bytes / 2) in steps[4].text


def test_the_tour_moves_on_one_step_at_a_time_at_a_reading_pace():
    steps, _, _ = run(8, 3)  # steps 1-3 ready, the run goes on
    assert tour.auto_index(steps, None, 0.0, False) == 0
    assert tour.auto_index(steps, 0, tour.MIN_READ_S - 0.1, False) == 0  # not read yet
    assert tour.auto_index(steps, 0, tour.MIN_READ_S, False) == 1  # one step, not the furthest
    assert tour.auto_index(steps, 2, 60.0, False) == 2  # the furthest ready: it waits there
    assert tour.auto_index(steps, 1, 60.0, True) == 1  # the run is over: Next walks on


def test_next_and_back_skip_steps_not_reached_and_stop_at_the_ends():
    steps, _, _ = run(8, 3)
    assert tour.moved(steps, 0, 1) == 1 and tour.moved(steps, 2, 1) == 2  # 4 and 5 wait for the end
    assert tour.moved(steps, 0, -1) == 0
    done, _, _ = run(8, 3, ended=True)
    assert tour.moved(done, 3, 1) == 4 and tour.moved(done, 4, 1) == 4 and tour.moved(done, 4, -1) == 3


@pytest.mark.parametrize("steps_run", [(0, 0), (1, None), (6, 3, True)])
def test_texts_are_sentences_without_markup(steps_run):
    for step in run(*steps_run)[0]:
        assert step.text.endswith(".") and "<" not in step.text and "**" not in step.text


@pytest.mark.slow
def test_the_planner_opens_at_the_link_s_settings():
    """The Capacity planner run with the link's query parameters plans that setting (AppTest)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(PAGES / "planner.py"), default_timeout=120)
    for key, values in parse_qs(urlsplit(tour.planner_link(META)[1]).query).items():
        at.query_params[key] = values[0]
    at.run()
    assert not at.exception and not at.error
    assert at.selectbox(key="plan_model").value == "SmolLM2-135M"
    assert at.selectbox(key="plan_gpu").value == "H100 SXM"
    assert at.selectbox(key="plan_kv_dtype").value == "bf16"
    assert at.number_input(key="plan_context").value == 131_072


