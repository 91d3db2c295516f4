"""The quality sweep (kvviz.shrink.sweep) on a tiny model and a 2-item task: rows, intervals, bytes,
each item's answer, timing in turn with the full cache, resuming, the file (version 2, and version
1 still read), what support drops and why; and the shipped sweep's file (`kvviz shrink --sweep`:
test_cli.py)."""
import json
import math

import pytest
import torch
from tiny import tiny_lm

from kvviz.core.trace import TraceError
from kvviz.shrink import compute as shrink
from kvviz.shrink import protocol, support, sweep, task

WANTED = [shrink.ShrinkMode(press="Knorm", ratio=0.5), shrink.ShrinkMode(press="StreamingLLM", ratio=0.875),
          shrink.ShrinkMode(press="SnapKV", ratio=0.5, question_aware=True),
          shrink.ShrinkMode(backend="quanto", nbits=4, residual_length=sweep.RESIDUAL)]


def short_items() -> list[task.TaskItem]:
    """Two items short enough for the tiny model's 256-token context."""
    return [task.TaskItem(context=f"The key value cache keeps the keys. The special magic number for {k} is: {n}. " * 3,
                          question=f"What is the special magic number for {k}?", answer_prefix=" It is", answers=(str(n),),
                          max_new_tokens=4) for k, n in (("teal", 4821), ("amber", 1977))]


@pytest.fixture(scope="module")
def lm():
    return tiny_lm("llama")


@pytest.fixture(scope="module")
def answered(lm) -> list[task.TaskItem]:
    """The two items with the tiny model's own full-cache answers as the right ones (its numbers
    are noise), so the full cache scores 2 of 2 and the others can score less."""
    out = []
    for item in short_items():
        got = protocol.answer(lm, protocol.item_prompt(lm.tokenizer, item), shrink.ShrinkMode(), item.max_new_tokens,
                              shrink.stop_ids(lm))
        out.append(task.TaskItem(context=item.context, question=item.question, answer_prefix=item.answer_prefix,
                                 answers=(got.text.strip(),), max_new_tokens=item.max_new_tokens))
    assert all(i.answers[0] for i in out)
    return out


@pytest.fixture(scope="module")
def result(lm, answered):
    seen, logged = [], []
    done = sweep.run(lm, answered, WANTED, progress=seen.append, note="two items", on_item=logged.append, timed_items=1)
    return done, seen, logged


def test_wilson_interval():
    assert sweep.wilson(4, 6) == pytest.approx((0.300, 0.903), abs=1e-3)  # the 6-item sweep's "4/6"
    assert sweep.wilson(0, 50)[1] == pytest.approx(0.0714, abs=1e-4) and sweep.wilson(50, 50)[0] == pytest.approx(0.9286, abs=1e-4)
    assert sweep.wilson(0, 0) == (0.0, 0.0)
    assert all(sweep.wilson(n, n)[1] == 1.0 and sweep.wilson(0, n)[0] == 0.0 for n in range(1, 200))  # 9/9 gave 0.99…9


def test_rows_intervals_bytes_and_each_items_answer(lm, answered, result):
    done, seen, logged = result
    assert [r.mode for r in done.rows] == [m.label() for m in [shrink.ShrinkMode()] + WANTED]
    full, knorm, streaming, aware, quanto = done.rows
    assert (full.kind, full.right, full.items, full.interval) == ("full", 2, 2, sweep.wilson(2, 2))
    assert aware.question_aware and aware.mode.endswith("question in the window") and not knorm.question_aware
    c = lm.model.config
    per_token = c.num_hidden_layers * 2 * c.num_key_value_heads * (c.hidden_size // c.num_attention_heads) * 4
    context = [protocol.item_prompt(lm.tokenizer, i).context_tokens for i in answered]
    assert full.bytes == round(sum(per_token * n for n in context) / 2)
    assert knorm.bytes == round(sum(per_token * int(n * 0.5) for n in context) / 2) and knorm.kept_share < 0.51
    assert streaming.ratio == 0.875 and quanto.ratio == round(1 - quanto.bytes / full.bytes, 4)
    for r in done.rows:  # the answers are kept, one per item, and they are what is scored
        assert len(r.answers) == 2 and r.right == sum(i.is_right(a) for i, a in zip(answered, r.answers))
        assert r.answers == tuple(rec.answers[r.mode].text for rec in logged)
    assert [i.expected for i in done.items] == [i.answers for i in answered]
    assert [p.item for p in seen[:-1]] == [1, 2] and seen[-1].mode == "done" and done.complete


def test_steps_take_turns_with_the_full_cache_on_timed_items_only(result):
    done, _, logged = result
    first, second = logged
    assert all(a.step_ratios for label, a in first.answers.items() if label != "full cache" and a.new_tokens > 1)
    assert not any(a.step_ratios for a in second.answers.values())  # timed_items=1
    assert done.rows[0].timed_steps == 0 and done.timed_items == 1
    assert all(r.timed_steps == len(first.answers[r.mode].step_ratios) for r in done.rows[1:])


def test_taking_turns_gives_the_tokens_each_side_gives_alone():
    def steps(tokens):
        return iter([protocol.Step(t, 1.0) for t in tokens])
    mine, ref = sweep.in_turn(steps([1, 2]), steps([7, 8, 9]))
    assert [s.token_id for s in mine] == [1, 2] and [s.token_id for s in ref] == [7, 8, 9]


def test_a_stopped_sweep_resumes_where_it_stopped(lm, answered, result):
    done, _, logged = result
    asked = []
    stopped = sweep.run(lm, answered, WANTED, should_stop=lambda: bool(asked.append(1)) or len(asked) > 1, timed_items=1)
    assert not stopped.complete and [r.items for r in stopped.rows] == [1] * 5
    again = sweep.run(lm, answered, WANTED, done=[sweep.record_from_json(sweep.record_to_json(logged[0]))], timed_items=1)
    assert again.complete and [r.answers for r in again.rows] == [r.answers for r in done.rows]


def test_the_file_round_trips_and_refuses_answers_its_counts_do_not_hold(result):
    done, _, _ = result
    back = sweep.from_json(sweep.to_json(done))
    assert back.rows == done.rows and back.items == done.items and back.protocol == protocol.PROTOCOL
    doc = json.loads(sweep.to_json(done))
    doc["rows"][1]["right"] = (doc["rows"][1]["right"] + 1) % 3
    doc["rows"][1]["accuracy"] = doc["rows"][1]["right"] / 2
    with pytest.raises(TraceError, match="its answers hold"):
        sweep.from_json(json.dumps(doc))
    doc = json.loads(sweep.to_json(done))
    doc["rows"][0]["answers"] = doc["rows"][0]["answers"][:1]
    with pytest.raises(TraceError, match="holds 1 answers for 2 items"):
        sweep.from_json(json.dumps(doc))
    doc = json.loads(sweep.to_json(done))
    doc["protocol"] = "my own"
    with pytest.raises(TraceError, match="not a valid kvviz-shrink-sweep file"):
        sweep.from_json(json.dumps(doc))
    assert sweep.is_sweep(sweep.to_json(done)) and not sweep.is_sweep(b"[1]")


def test_a_version_1_file_is_still_read():
    row = {"mode": "full cache", "kind": "full", "press": "", "ratio": 0.0, "backend": "", "nbits": 0, "items": 6,
           "right": 4, "accuracy": 4 / 6, "bytes": 10, "peak_bytes": 20, "cuda_peak_bytes": 0, "step_ratio": 1.0,
           "step_ratio_lo": 1.0, "step_ratio_hi": 1.0}
    old = sweep.from_json(json.dumps({"format": "kvviz-shrink-sweep", "version": 1, "rows": [row]}))
    assert old.rows[0].interval == pytest.approx((0.300, 0.903), abs=1e-3) and old.protocol == "" and not old.items


def test_support_drops_settings_with_reasons(lm):
    names, dropped = support.sweep_presses(lm.model)
    assert "PyramidKV" not in names and {d.setting for d in dropped} >= {"PyramidKV", "KVzip"}
    assert "config.name_or_path" in next(d.why for d in dropped if d.setting == "KVzip")  # built in memory
    assert len(names) >= 8 and {"AdaKV-ExpectedAttention", "KeyDiff", "LagKV", "CUR"} <= set(names)


def test_the_shipped_sweep_of_the_default_model():
    """assets/shrink_sweep_smollm2.json (scripts/shrink_sweep.py on SmolLM2): the leaderboard's
    protocol and ratios, at least 8 presses, SnapKV's question-aware entry, the quantized caches,
    each item's answer in every row, at least 50 items asked (a partial file says so: "N of 52
    items so far"). Bytes: a press that removes positions keeps (1 - ratio) of the context's; the
    question-aware one compressed the question too, so it keeps more than that of the context's
    bytes but less than (1 - ratio) of the whole prompt's; a head-wise press masks, its bytes stay."""
    from kvviz.shrink import panel
    done = sweep.from_json(panel.SHIPPED_SWEEP.read_bytes())
    assert "SmolLM2" in done.model and done.protocol == protocol.PROTOCOL and done.items_total >= 50
    assert done.complete == (len(done.items) == done.items_total) and len(done.items) >= 1
    assert done.so_far() == ("" if done.complete else f"{len(done.items)} of {done.items_total} items so far")
    assert "--items 52" in done.made_with and done.items_total == 52
    presses = {r.press for r in done.rows if r.kind == "press"}
    assert len(presses) >= 8 and {"KVzip", "AdaKV-ExpectedAttention"} <= presses
    assert {(r.press, r.ratio) for r in done.rows if r.kind == "press" and not r.question_aware} == {
        (p, x) for p in presses for x in sweep.RATIOS}
    assert {r.ratio for r in done.rows if r.question_aware} == set(sweep.RATIOS)
    assert {(r.backend, r.nbits) for r in done.rows if r.kind == "quantized"} == set(sweep.QUANT)
    full = done.rows[0]
    context = sum(i.context_tokens for i in done.items) / len(done.items)
    prompt = sum(i.prompt_tokens for i in done.items) / len(done.items)
    for r in done.rows:
        assert len(r.answers) == len(done.items) and r.right == round(r.accuracy * r.items)
        if r.question_aware:
            assert 1 - r.ratio < r.bytes / full.bytes < (1 - r.ratio) * prompt / context
        elif r.kind == "press" and r.press not in ("KVzip", "AdaKV-ExpectedAttention"):  # rows removed
            assert abs(r.bytes / full.bytes - (1 - r.ratio)) < 0.01
        if r.press in ("KVzip", "AdaKV-ExpectedAttention"):  # masked, not removed: bytes stay
            assert r.bytes == full.bytes and math.isclose(r.kept_share, 1 - r.ratio, abs_tol=0.01)
    assert torch.tensor([i.depth for i in done.items]).max() <= 1


def test_a_partial_sweep_says_so_in_the_cli_table_and_the_script_shows_the_shipped_one(result, capsys):
    """A sweep stopped (or still being measured) is "N of M items so far" wherever it is printed:
    `kvviz shrink`'s table, and scripts/shrink_sweep.py --show on the shipped file, whose rows are
    the file's own."""
    import dataclasses
    import importlib.util
    from pathlib import Path

    from kvviz.shrink import cli, panel
    done, _, _ = result
    partial = dataclasses.replace(done, complete=False, items_total=52)
    assert cli.table(partial).splitlines()[0] == ("partial sweep: 2 of 52 items so far; every row counts those items "
                                                  "(2 custom)")
    assert "so far" not in cli.table(done)
    script = Path(__file__).resolve().parents[2] / "scripts" / "shrink_sweep.py"
    spec = importlib.util.spec_from_file_location("shrink_sweep_script", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--show", "--out", str(panel.SHIPPED_SWEEP)]) == 0
    shipped = sweep.from_json(panel.SHIPPED_SWEEP.read_bytes())
    lines = capsys.readouterr().out.splitlines()
    assert (lines[0] == f"partial sweep: {shipped.so_far()}; every row counts those items "
                       f"({shipped.formats_so_far()})") == (not shipped.complete)
    assert shipped.formats_so_far().startswith(f"{min(13, len(shipped.items))} niah_single")  # the task's order
    for r in shipped.rows:
        assert any(line.startswith(r.mode) and f"{r.right:>3}/{r.items:<3} {r.accuracy:>4.0%}" in line for line in lines)
    assert module.main(["--show", "--out", str(script.parent / "no-such-sweep.json")]) == 2
    assert "cannot show" in capsys.readouterr().err
