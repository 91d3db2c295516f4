"""Shrinking the cache: the full-vs-shrunk runs (kvviz.shrink.compute) on tiny random models of two
architectures, plus the default model once (slow): bytes against the formula, the full run against
`generate`, turns, divergence and captions. A press's own behaviour: test_presses.py; a quantized
cache's bytes: test_quant_cache.py."""
import pytest
import torch
from tiny import tiny_lm

from kvviz.core.errors import UserError
from kvviz.shrink import presses, quant_cache
from kvviz.shrink import compute as shrink

KINDS = ("llama", "qwen2")  # tiny: 2 layers, 2 KV heads, head_dim 16, fp32
PROMPT_TOKENS, NEW_TOKENS = 40, 12


def prompt(seed: int = 0) -> torch.Tensor:
    return torch.randint(2, 300, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(seed))


def kv_shape(lm) -> tuple[int, int, int]:
    """(layers, kv heads, head dim) from the config."""
    c = lm.model.config
    return c.num_hidden_layers, c.num_key_value_heads, c.hidden_size // c.num_attention_heads


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", list(presses.PRESSES))
def test_press_runs_keeps_half_and_bytes_equal_formula(kind, name):
    lm = tiny_lm(kind)
    layers, heads, head_dim = kv_shape(lm)
    out = shrink.run(lm, prompt(), NEW_TOKENS, shrink.ShrinkMode(press=name, ratio=0.5))
    kept = PROMPT_TOKENS // 2
    assert sorted(out.kept) == list(range(layers))
    for positions in out.kept.values():
        assert positions.shape == (heads, kept)
        assert all(len(set(row.tolist())) == kept for row in positions)  # distinct
        assert int(positions.min()) >= 0 and int(positions.max()) < PROMPT_TOKENS
    for s in out.steps:  # kept positions + one per decode step, × 2 (K, V) × heads × head_dim × 4 B
        assert s.kv_bytes == layers * 2 * heads * head_dim * 4 * (kept + s.step)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_full_cache_run_equals_generate(kind):
    lm, ids = tiny_lm(kind), prompt(1)
    out = shrink.run(lm, ids, NEW_TOKENS, shrink.ShrinkMode())
    with torch.inference_mode():
        ref = lm.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, pad_token_id=1)
    assert out.tokens == ref[0, PROMPT_TOKENS:].tolist()
    layers, heads, head_dim = kv_shape(lm)
    assert [s.kv_bytes for s in out.steps] == [layers * 2 * heads * head_dim * 4 * (PROMPT_TOKENS + i)
                                               for i in range(NEW_TOKENS)]


def test_bad_settings_get_plain_messages():
    with pytest.raises(UserError, match="compression ratio"):
        presses.make_press("Knorm", 1.0, 100)
    with pytest.raises(UserError, match="at least 8"):
        presses.make_press("SnapKV", 0.5, 3)
    with pytest.raises(UserError, match="offers 2, 4 bits"):
        quant_cache.make_cache(tiny_lm().model.config, "quanto", 8)
    with pytest.raises(UserError, match="unknown press"):
        presses.make_press("Magic", 0.5, 100)


@pytest.mark.slow
def test_divergence_and_caption():
    assert shrink.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert shrink.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert shrink.first_divergence([1, 2, 3], [1, 2]) == 2
    lm = tiny_lm("llama")
    cmp = shrink.compare(lm, prompt(), 6, shrink.ShrinkMode(press="StreamingLLM", ratio=0.75))
    assert cmp.diverged_at == shrink.first_divergence(cmp.full.tokens, cmp.shrunk.tokens)
    words = "identical" if cmp.diverged_at is None else f"diverged at token {cmp.diverged_at + 1}"
    assert cmp.caption().startswith(words)
    assert 0 < cmp.bytes_ratio() < 0.5 and cmp.step_time_ratio() > 0



def most_recent_only(kept: dict, n: int) -> bool:
    """Every head of every layer kept exactly the last positions of an n-token prompt."""
    return all(sorted(head) == list(range(n - len(head), n)) for positions in kept.values()
               for head in positions.tolist())


@pytest.mark.slow
def test_snapkv_scores_choose_on_the_default_prompt(default_lm):
    """The default prompt (a context and a question) is long enough that SnapKV's observation
    window is shorter than the half it keeps: its scores pick earlier positions in some layer,
    where the old 98-token default kept exactly the 49 most recent ones everywhere."""
    from kvpress.utils import compute_n_kept

    mode = shrink.ShrinkMode(press="SnapKV", ratio=0.5)
    ids = shrink.prompt_ids(default_lm.tokenizer, shrink.DEFAULT_PROMPT)
    n = ids.shape[1]
    window, kept = min(presses.SNAPKV_WINDOW, n // 2), compute_n_kept(n, 0.5)
    assert window < kept
    snap = shrink.run(default_lm, ids, 2, mode)
    assert all(positions.shape[-1] == kept for positions in snap.kept.values())
    assert not most_recent_only(snap.kept, n)
    assert all(set(range(n - window, n)) <= set(head) for positions in snap.kept.values()
               for head in positions.tolist())  # the window itself always stays
    short = shrink.prompt_ids(default_lm.tokenizer, "The lighthouse on Gull Rock was kept by Ada Morgan. " * 3
                              + "Question: who kept the lighthouse?")
    m = short.shape[1]
    assert min(presses.SNAPKV_WINDOW, m // 2) == compute_n_kept(m, 0.5)  # window = the half kept
    assert most_recent_only(shrink.run(default_lm, short, 2, mode).kept, m)  # the check can fail


@pytest.mark.slow
def test_default_model_press_and_quantized(default_lm):
    """On the real default model: full cache = prompt x 46,080 B (fp32); SnapKV at 0.5 keeps
    kvpress's own count (compute_n_kept: int(n x (1 - ratio)), an odd prompt keeps the smaller
    half) in all 30 layers; HQQ 8-bit holds under half the full cache."""
    from kvpress.utils import compute_n_kept

    ids = shrink.prompt_ids(default_lm.tokenizer, "The keeper of the lighthouse was named Ada. " * 12
                            + "What was the keeper's name?")
    n = ids.shape[1]
    full = shrink.run(default_lm, ids, 6, shrink.ShrinkMode())
    assert full.steps[0].kv_bytes == 46_080 * n  # 30 layers x 3 KV heads x 64 x 2 x fp32
    snap = shrink.run(default_lm, ids, 6, shrink.ShrinkMode(press="SnapKV", ratio=0.5))
    kept = compute_n_kept(n, 0.5)
    assert kept == int(n * 0.5)
    assert snap.steps[0].kv_bytes == 46_080 * kept and len(snap.kept) == 30
    assert all(positions.shape[-1] == kept for positions in snap.kept.values())
    quant = shrink.run(default_lm, ids, 6, shrink.ShrinkMode(backend="hqq", nbits=8, residual_length=16))
    assert quant.steps[0].kv_bytes < full.steps[0].kv_bytes / 2


@pytest.mark.slow
@pytest.mark.parametrize("mode", [shrink.ShrinkMode(press="SnapKV", ratio=0.5),
                                  shrink.ShrinkMode(backend="quanto", nbits=4, residual_length=4)])
def test_taking_turns_gives_each_side_the_tokens_and_bytes_it_gives_alone(mode):
    """full 0, shrunk 0, full 1, ...: interleaving changes neither side's tokens nor its bytes."""
    lm = tiny_lm("llama")
    turns = list(shrink.take_turns(lm, prompt(), NEW_TOKENS, mode))
    assert [t.side for t in turns] == [shrink.FULL, shrink.SHRUNK] * NEW_TOKENS
    assert [t.step.step for t in turns] == [i for i in range(NEW_TOKENS) for _ in (0, 1)]
    alone = {shrink.FULL: shrink.run(lm, prompt(), NEW_TOKENS, shrink.ShrinkMode()),
             shrink.SHRUNK: shrink.run(lm, prompt(), NEW_TOKENS, mode)}
    for side, run in alone.items():
        mine = [t.step for t in turns if t.side == side]
        assert [s.token_id for s in mine] == run.tokens
        assert [s.kv_bytes for s in mine] == [s.kv_bytes for s in run.steps]


def test_a_stop_ends_both_sides_after_the_same_step():
    lm = tiny_lm("llama")
    asked = []

    def stop_after_three():
        asked.append(1)
        return len(asked) >= 3
    result = shrink.compare(lm, prompt(), NEW_TOKENS, shrink.ShrinkMode(press="Knorm"), stop_after_three)
    assert len(result.full.steps) == len(result.shrunk.steps) == 3


def test_first_difference_marked_and_timing_spread():
    """⟦ ⟧ around the first differing token in both texts; the step-time ratio is the median of the
    paired decode steps with its middle half, "within noise" when that holds 1."""
    def run(pieces, times):
        steps = [shrink.StepRecord(step=i, token_id=hash(p) % 1000, kv_bytes=100, step_ms=ms) for i, (p,
                                   ms) in enumerate(zip(pieces, times))]
        return shrink.ShrinkRun("x", steps, {}, "".join(pieces), pieces)
    full = run(["The", " year", " 1952", "."], [500, 100, 100, 100])
    shrunk = run(["The", " year", " 1950", "."], [900, 90, 120, 105])
    cmp = shrink.Comparison(full, shrunk, 2)
    assert cmp.first_difference_marked() == ("The year⟦ 1952⟧.", "The year⟦ 1950⟧.")
    assert cmp.step_time_spread() == pytest.approx((1.05, 0.975, 1.125))  # 0.9, 1.05, 1.2: prefill not paired
    assert cmp.timing_words() == "1.05 (middle half 0.98–1.12 over 3 decode steps): within noise"
    slow = shrink.Comparison(full, run(full.pieces, [500, 200, 210, 190]), None)
    assert slow.first_difference_marked() == (full.text, full.text) and "noise" not in slow.timing_words()
    assert shrink.Comparison(run(["a"], [5]), run(["a"], [6]), None).timing_words() == ""


def test_one_slow_step_does_not_flatten_the_step_chart():
    """A 120,000 ms first step (a backend's first call) is drawn at the top edge of an axis that
    ends at 3 × the median decode step or just above the faster prompt; ordinary runs are not clipped."""
    import pandas as pd

    from kvviz.shrink import charts
    df = pd.DataFrame({"run": ["full"] * 4 + ["shrunk"] * 4, "step": [0, 1, 2, 3] * 2,
                       "step_ms": [2000, 80, 90, 85, 120_000, 82, 88, 90]})
    assert charts.time_cap(df) == 2200
    y = charts.steps_chart(df, "step_ms", "step time").to_dict()["encoding"]["y"]
    assert y["scale"] == {"domain": [0, 2200.0], "clamp": True} and "clipped at 2,200" in y["title"]
    calm = df.assign(step_ms=[2000, 80, 90, 85, 2100, 82, 88, 90])
    assert "scale" not in charts.steps_chart(calm, "step_ms", "step time").to_dict()["encoding"]["y"]


def test_progress_line_shows_elapsed_time_and_a_slow_step():
    from kvviz.shrink import panel
    quick = shrink.StepRecord(step=2, token_id=5, kv_bytes=100, step_ms=80.0)
    assert panel.progress_words(quick, 24, 0.5) == "Both runs take turns on the device: step 3 of 24…"
    slow = shrink.StepRecord(step=0, token_id=5, kv_bytes=100, step_ms=120_000.0)
    assert panel.progress_words(slow, 24,
                                121.0) == ("Both runs take turns on the device: step 1 of 24… 121 s so far; "
                                                     "that step took 120.0 s")


def test_identical_answers_say_why_and_offer_the_demo():
    from kvviz.shrink import panel

    def side(label, kept=None):
        return shrink.ShrinkRun(label, [shrink.StepRecord(step=0, token_id=5, kv_bytes=100, step_ms=1.0)], kept or {},
                                "x", ["x"])
    pressed = shrink.Comparison(side("full"), side("SnapKV", {0: torch.zeros(3, 54, dtype=torch.long)}), None)
    words = panel.identical_words(pressed, 219)
    assert words.startswith("Why identical: each KV head kept 54 of the 219 prompt positions")
    assert "StreamingLLM evicting 75% changes the answer" in words
    quant = shrink.Comparison(side("full"), side("quantized"), None)
    assert "rounding changed none of the greedy choices" in panel.identical_words(quant, 219)
    snap = shrink.ShrinkMode(press="SnapKV", ratio=0.5)
    assert panel.suggestion(pressed, snap) == ("Try StreamingLLM evicting 75%", shrink.DEMO_MODE)
    differs = shrink.Comparison(side("full"), side("s"), 0)
    assert panel.suggestion(differs, snap) is None
    label, mode = panel.suggestion(differs, shrink.DEMO_MODE)
    assert label.startswith("Compare: SnapKV") and mode == shrink.ShrinkMode(press="SnapKV", ratio=0.75)


@pytest.mark.slow
def test_the_default_demo_changes_the_answer_on_the_default_model(default_lm):
    """shrink.DEMO_MODE on DEFAULT_PROMPT: the full cache answers 1952 and stops at its turn; the
    press evicts "1952" from every layer and head and the answer changes. SnapKV at the same ratio
    keeps those positions in every layer (the comparison the page offers)."""
    ids = shrink.prompt_ids(default_lm.tokenizer, shrink.DEFAULT_PROMPT)
    pieces = default_lm.tokenizer.batch_decode([[t] for t in ids[0].tolist()])
    year = next(i for i in range(len(pieces)) if pieces[i:i + 4] == ["1", "9", "5", "2"])
    result = shrink.compare(default_lm, ids, 24, shrink.DEMO_MODE)
    assert result.diverged_at is not None and "1952" in result.full.text and "1952" not in result.shrunk.text
    held = {pos for positions in result.shrunk.kept.values() for head in positions.tolist() for pos in head}
    assert not held & set(range(year, year + 4))
    snap = shrink.run(default_lm, ids, 2, shrink.ShrinkMode(press="SnapKV", ratio=shrink.DEMO_MODE.ratio))
    assert all(any(set(range(year, year + 4)) <= set(head) for head in positions.tolist())
               for positions in snap.kept.values())
