"""Captions and headline figures carry the right live numbers."""
from dataclasses import replace

from kvviz.live import captions
from kvviz.core.events import BlockStat, LayerStat, StepEvent
from kvviz.core.units import fmt_ms
from metas import meta_of

META = meta_of({"num_layers": 30, "num_kv_heads": 3, "head_dim": 64, "elem_bytes": 2, "bytes_per_token": 23_040,
        "weight_bytes": 269_030_016, "prompt_tokens": 31, "batch": 1, "max_len": 95})


def event(step, seq_len, ms, mode="cached", kv=None, blocks=True):
    tokens = seq_len - 1
    kv = 23_040 * tokens if kv is None else kv
    b = BlockStat(block_size=16, num_blocks=6, num_used_blocks=-(-tokens // 16), num_free_blocks=6 - -(-tokens // 16),
                  num_slots_in_last_block=tokens - 16 * (-(-tokens // 16) - 1),
                  paged_bytes=-(-tokens // 16) * 16 * 23_040, contiguous_bytes=95 * 23_040, contiguous_is_real=False) if blocks else None
    return StepEvent(mode=mode,
                     phase="prefill" if step == 0 else "decode",
                     step=step,
                     token_ids=(5,),
                     texts=("a",),
                     finished=(False,),
                     step_ms=ms,
                     seq_len=seq_len,
                     positions=31 if step == 0 else 1,
                     kv_bytes=kv,
                     formula_bytes=kv,
                     layers=(LayerStat(layer=0, k_bytes=1, v_bytes=1, tokens=tokens, forward_ms=1.0),),
                     blocks=b)


def test_layers_caption_states_bytes_per_token():
    assert "adds 22.5 KiB across 30 layers" in captions.layers_caption(META)


def test_wasted_fractions():
    paged, contiguous = captions.wasted_fractions(META, event(2, 34, 10.0))
    assert round(paged, 4) == round(1 - 33 / 48, 4) and round(contiguous, 4) == round(1 - 33 / 95, 4)
    assert [captions.fmt_share(x) for x in (0.125, 0.124, 0.135, 0.0, 1.0)] == ["13%", "12%", "14%", "0%", "100%"]


def test_parity_reports_first_divergence():
    cached = [event(i, 32 + i, 10.0) for i in range(3)]
    same = [event(i, 32 + i, 30.0, "recompute", blocks=False) for i in range(2)]
    assert captions.parity(cached, same) == (True,
                           "Same tokens: all 2 tokens recomputed so far match the cached run.")
    flipped = same[:1] + [StepEvent(**{**same[1].__dict__, "token_ids": (9,)})]
    ok, text = captions.parity(cached, flipped)
    assert not ok and "from step 1" in text


def test_achieved_bandwidth_is_bytes_over_time():
    assert captions.achieved_bandwidth_bytes_per_s(1_000_000_000, 0, 100.0) == 1e10  # 1 GB in 0.1 s


def test_race_caption_extrapolates_only_when_final_and_behind():
    cached = [event(i, 32 + i, 10.0) for i in range(6)]
    recompute = [event(i, 32 + i, 20.0 + i, "recompute", blocks=False) for i in range(3)]
    during, final = (captions.race_caption(cached, recompute, final=f) for f in (False, True))
    assert during.endswith(captions.ESTIMATE_TO_COME) and "≈" not in during  # the figures are to come
    assert "9 measured steps, 3 of them without a cache" in final
    # the same sentences, so the panel keeps its lines from the first step to the last
    assert abs(len(final) - len(during)) < 0.1 * len(final)


def test_headline_names_what_each_rate_times_and_shows_the_wall_clock_beside_it():
    from kvviz.core.trace import Trace, summary
    cached = [event(i, 32 + i, 100.0 if i == 0 else 50.0) for i in range(5)]
    recompute = [event(i, 32 + i, 120.0, "recompute", blocks=False) for i in range(3)]
    sums = summary(Trace(META, cached + recompute))
    figures = {label: (value, help_text) for label, value, help_text in
               captions.headline(META, sums, cached[-1], wall_tokens_per_s=12.34,
                                 cached=cached, recompute=recompute)}
    assert figures["Tokens/s (compute)"][0] == f"{5 / 0.3:.1f}"  # 5 tokens in 300 ms of steps
    assert "forward + sampling" in figures["Tokens/s (compute)"][1]
    assert figures["Tokens/s (wall clock)"][0] == "12.3" and "wall-clock" in figures["Tokens/s (wall clock)"][1]
    assert "forward pass and sampling" in figures["Decode step (median)"][1]
    assert figures["Formula (computed)"][1].startswith("computed from the model's config")
    step_value, step_help = figures[captions.LAST_STEP_LABEL]
    run_value, run_help = figures[captions.RUN_LABEL]
    cost = captions.no_cache_cost(cached, recompute)
    assert (cost.step, cost.step_ratio) == (2, 120 / 50)  # the last step both made, measured
    assert step_value == f"{120 / 50:.1f}×" and run_value == f"≈ {cost.run_ratio:.1f}×" and not cost.run_measured
    assert f"Step 2 took {fmt_ms(120)} without a cache" in step_help and f"{fmt_ms(50)} with it" in step_help
    assert f"Over the same 3 steps both runs made, the run without a cache took {360 / 200:.1f}×" in run_help
    no_wall = dict((label, value) for label, value, _ in captions.headline(META, sums, cached[-1]))
    assert no_wall["Tokens/s (wall clock)"] == "–"


def test_race_caption_names_its_extrapolated_figure_apart_from_the_headline():
    cached = [event(i, 32 + i, 10.0) for i in range(6)]
    recompute = [event(i, 32 + i, 20.0 + i, "recompute", blocks=False) for i in range(3)]
    text = captions.race_caption(cached, recompute, final=True)
    cost = captions.no_cache_cost(cached, recompute)
    assert f"{captions.fmt_run_ratio(cost)} the cached time for the whole run" in text
    assert f"step 2, took {cost.step_ratio:.1f}× as long without a cache (measured)" in text
    assert f"over all 3 steps both made it is only {(20 + 21 + 22) / 30:.1f}×" in text
    assert "still small" not in text


def test_contiguous_reservation_is_labelled_computed():
    last = event(2, 34, 10.0)
    assert "(computed, not allocated)" in captions.blocks_caption(META, last)
    assert "for 95 tokens (computed) holds" in captions.total_caption(META, last)


def test_durations_read_in_human_units():
    assert [captions.fmt_duration(ms) for ms in (850, 12_500, 150_000, 2_600_000, 12_513_850)] == [
        "850 ms", "12.50 s", "2.5 min", "43 min", "3.5 h"]


def test_the_no_cache_figure_waits_for_a_shared_decode_step_and_a_range_for_three():
    from kvviz.core.trace import Trace, summary
    cached = [event(i, 32 + i, 100.0 if i == 0 else 50.0) for i in range(5)]
    for shared, want in ((1, "–"), (2, "range"), (3, "one")):
        recompute = [event(i, 32 + i, 60.0, "recompute", blocks=False) for i in range(shared)]
        figures = {label: value for label, value, _ in
                   captions.headline(META, summary(Trace(META, cached + recompute)), cached[-1],
                                     cached=cached, recompute=recompute)}
        step, run = figures[captions.LAST_STEP_LABEL], figures[captions.RUN_LABEL]
        if want == "–":
            assert step == run == "–"
        else:
            cost = captions.no_cache_cost(cached, recompute)
            assert step == f"{60 / 50:.1f}×" and run == f"≈ {cost.run_ratio:.1f}×"
            assert bool(captions.fmt_run_range(cost)) is (want == "range")  # the help and caption's range
    no_events = {label: value for label, value, _ in captions.headline(META, summary(Trace(META, cached)), cached[-1])}
    assert no_events[captions.LAST_STEP_LABEL] == no_events[captions.RUN_LABEL] == "–"


def recompute_event(step, seq_len, ms):
    """A step without a cache: it reads the whole text (every position so far)."""
    return replace(event(step, seq_len, ms, "recompute", kv=0, blocks=False), positions=seq_len - 1, layers=())


def test_a_long_prompt_headline_states_the_last_step_not_the_diluted_same_steps_ratio():
    """A 2,000-token prompt: both runs share a 2 s prefill, so over the first steps the no-cache run
    is only a few times slower, while its last step is ~100x slower and the whole run far more than
    the same-steps ratio: the headline leads with the last step and the whole run."""
    from kvviz.core.trace import Trace, summary
    prompt = 2000
    cached = [event(0, prompt + 1, 2000.0)] + [event(i, prompt + 1 + i, 20.0) for i in range(1, 64)]
    recompute = [recompute_event(i, prompt + 1 + i, 2000.0 + i) for i in range(5)]
    sums = summary(Trace(META, cached + recompute))
    figures = {label: (v, h) for label, v, h in captions.headline(META, sums, cached[-1], cached=cached,
                                                                  recompute=recompute)}
    cost = captions.no_cache_cost(cached, recompute)
    assert cost.step_ratio == 2004.0 / 20.0
    assert cost.step_ratio > 10 * sums.recompute_speedup and cost.run_ratio > 5 * sums.recompute_speedup
    assert figures[captions.LAST_STEP_LABEL][0] == f"{cost.step_ratio:.1f}×"
    assert figures[captions.RUN_LABEL][0] == f"≈ {cost.run_ratio:.1f}×"
    help_text = figures[captions.RUN_LABEL][1]
    assert f"took {sums.recompute_speedup:.1f}× the cached time" in help_text and "dilutes" in help_text
    text = captions.race_caption(cached, recompute, final=True)
    assert f"≈ {cost.run_ratio:.1f}× the cached time for the whole run" in text
    assert "still small" not in text and "still small" not in captions.race_caption(cached, recompute, final=False)


def test_few_recompute_steps_give_a_range_in_minutes():
    cached = [event(i, 32 + i, 300.0 if i == 0 else 75.0) for i in range(160)]
    recompute = [event(0, 32, 300.0, "recompute", blocks=False), event(1, 33, 330.0, "recompute", blocks=False)]
    text = captions.race_caption(cached, recompute, final=True)
    assert "between ≈ " in text and " min" in text


def test_caption_and_headline_share_one_median():
    from kvviz.core.trace import Trace, summary
    cached = [event(0, 32, 100.0)] + [event(i, 32 + i, ms) for i, ms in enumerate([10.0, 40.0, 20.0, 30.0], 1)]
    median = captions.median_decode_ms(cached)
    assert median == 25.0  # the even count's midpoint, not the upper middle (30 ms)
    figures = {label: value for label, value, _ in captions.headline(META, summary(Trace(META, cached)), cached[-1])}
    assert figures["Decode step (median)"] == "25.0 ms"
    assert "median 25.0 ms" in captions.timings_caption(META, cached)


def test_race_captions_name_both_race_panels():
    cached = [event(i, 32 + i, 10.0) for i in range(6)]
    recompute = [event(i, 32 + i, 20.0 + i, "recompute", blocks=False) for i in range(3)]
    texts = captions.race_captions(cached, recompute, final=True)
    assert set(texts) == {"race", "positions"} and "token positions" in texts["positions"]


def test_no_cache_note_fits_a_stop_a_scrub_and_the_end():
    cached = [event(i, 32 + i, 10.0) for i in range(6)]
    recompute = [event(i, 32 + i, 20.0, "recompute", blocks=False) for i in range(3)]
    assert captions.run_ended(cached, 6) and not captions.run_ended(cached, 8)
    assert captions.race_stop_note(cached, recompute, ended=True).startswith("Stopped when the cached run finished")
    for ended, scrubbing in ((False, False), (True, True)):
        note = captions.race_stop_note(cached, recompute, ended, scrubbing)
        assert "cached run finished" not in note and "3 of 6 tokens" in note
    assert captions.race_stop_note(cached, recompute + recompute, ended=True).startswith("Finished")


def test_the_no_cache_note_never_says_same_time_beside_two_different_times():
    """The case on stage: a 1,984-token prompt, the cached run 38.73 s, the run without a cache
    53.77 s (its last step, begun while it was behind, ran on past the cached run's end), and
    the note beside the caption said "both runs get the same time". Its words now follow from
    the very figures the race caption opens with."""
    prompt = 1984
    cached = [event(0, prompt + 1, 36_000.0)] + [event(i, prompt + 1 + i, 2730.0 / 28) for i in range(1, 29)]
    recompute = [recompute_event(0, prompt + 1, 36_000.0), recompute_event(1, prompt + 2, 17_770.0)]
    note = captions.race_stop_note(cached, recompute, ended=True)
    caption = captions.race_caption(cached, recompute, final=True)
    assert "2 tokens in 53.77 s" in caption and "29 tokens in 38.73 s" in caption
    assert "same time" not in note and "53.77 s" in note and "38.73 s" in note and "ran past" in note
    close = [recompute_event(0, prompt + 1, 36_000.0), recompute_event(1, prompt + 2, 3_800.0)]  # 39.80 s
    assert "about the same time: 39.80 s and 38.73 s" in captions.race_stop_note(cached, close, ended=True)
    for scrubbing in (False, True):
        assert "same time" not in captions.race_stop_note(cached, recompute, False, scrubbing)


def test_wall_clock_help_names_the_no_cache_runs_turns():
    from kvviz.core.trace import Trace, summary
    cached = [event(i, 32 + i, 50.0) for i in range(3)]
    figures = {label: help_text for label, _, help_text in
               captions.headline(META, summary(Trace(META, cached)), cached[-1], wall_tokens_per_s=9.0)}
    assert "no-cache run takes" in figures["Tokens/s (wall clock)"]


def test_a_finished_race_caption_is_all_measured_and_as_long_as_the_estimate():
    cached = [event(i, 32 + i, 10.0) for i in range(6)]
    recompute = [event(i, 32 + i, 20.0 + i, "recompute", blocks=False) for i in range(6)]
    text = captions.race_caption(cached, recompute, final=True)
    cost = captions.no_cache_cost(cached, recompute)
    assert cost.run_measured and "modelled" in text and "nothing here is modelled" in text
    assert f"took {captions.fmt_ratio(cost.run_low)} the cached time (measured)" in text
    assert f"step {cost.step}, took {cost.step_ratio:.1f}× as long" in text
    assert "the whole run's figure is smaller" in text  # 20-25 ms steps against 10: the last is 2.5x
    behind = captions.race_caption(cached, recompute[:3], final=True)
    assert abs(len(text) - len(behind)) < 0.25 * len(behind)  # about as many lines as the estimate
    noisy = [event(i, 32 + i, 40.0 - 3 * i, "recompute", blocks=False) for i in range(6)]  # last step the cheapest
    assert "within the noise" in captions.race_caption(cached, noisy, final=True)


def test_a_race_without_a_decode_step_says_why_there_is_no_estimate():
    cached = [event(i, 32 + i, 10.0) for i in range(6)]
    text = captions.race_caption(cached, [event(0, 32, 20.0, "recompute", blocks=False)], final=True)
    assert text.endswith(captions.TOO_FEW_STEPS) and "≈" not in text


def test_the_longest_race_caption_is_longer_than_every_form_it_reserves_room_for():
    cached = [event(i, 32 + i, 10.0) for i in range(6)]
    forms = [captions.race_caption(cached, [event(i, 32 + i, 20.0 + i, "recompute", blocks=False)
                                            for i in range(n)], final=f)
             for n in (1, 3, 6) for f in (False, True)]
    assert all(len(captions.race_longest()) > len(form) for form in forms)


def test_the_figures_hidden_copy_has_every_label_of_the_headline_at_its_longest():
    """The page reserves the figures' height with a hidden copy (captions.widest_headline): it
    must carry the same labels as the headline (the longer KV cache label), and values at least
    as wide as a run shows, or the row grows when the figures arrive."""
    from kvviz.core.trace import Trace, summary
    cached = [event(i, 32 + i, 100.0 if i == 0 else 50.0) for i in range(5)]
    recompute = [event(i, 32 + i, 60.0, "recompute", blocks=False) for i in range(3)]
    shown = captions.headline(META, summary(Trace(META, cached + recompute)), cached[-1], 12.3, cached, recompute)
    widest = captions.widest_headline()
    assert [label for label, _, _ in widest] == [label.replace("(measured)", "(allocated)") for label, _, _ in shown]
    assert all(len(wide) >= len(value) for (_, wide, _), (_, value, _) in zip(widest, shown))
