"""The quality sweep (kvviz.shrink.sweep, task, peak) on a tiny model and a 2-item task, its file
and `kvviz shrink --sweep`; once on the default model (slow): the shipped task is answered right
at ratio 0, as scripts/make_shrink_task.py checked when it built it."""
import json

import pytest
import torch
from tiny import tiny_lm

from kvviz.core.trace import TraceError
from kvviz.shrink import compute as shrink
from kvviz.shrink import peak, sweep, task

NEW = 3
WANTED = [shrink.ShrinkMode(press="Knorm", ratio=0.5), shrink.ShrinkMode(press="Knorm", ratio=0.9),
          shrink.ShrinkMode(backend="quanto", nbits=4, residual_length=sweep.RESIDUAL)]


def short_items() -> list[task.TaskItem]:
    """Two items short enough for the tiny model's 256-token context."""
    return [task.TaskItem(f"The key value cache keeps the keys. The special magic number for {k} is: {n}.",
                          f"What is the special magic number for {k}?", "It is", str(n))
            for k, n in (("teal", 4821), ("amber", 1977))]


@pytest.fixture(scope="module")
def lm():
    return tiny_lm("llama")


@pytest.fixture(scope="module")
def answered(lm) -> list[task.TaskItem]:
    """The two items with the tiny model's own full-cache answers as the right ones (its numbers
    are noise), so the full cache scores 2 of 2 and the others can score less."""
    out = []
    for item in short_items():
        text = shrink.run(lm, sweep.item_ids(lm.tokenizer, item), NEW, shrink.ShrinkMode()).text
        out.append(task.TaskItem(item.context, item.question, item.answer_prefix, text.replace(",", "").strip()))
    assert all(i.answer for i in out)
    return out


@pytest.fixture(scope="module")
def result(lm, answered):
    seen = []
    done = sweep.run(lm, answered, WANTED, progress=seen.append, new_tokens=NEW, note="two items")
    return done, seen


def test_rows_accuracy_bytes_peaks_and_progress(lm, answered, result):
    done, seen = result
    assert [r.mode for r in done.rows] == [m.label() for m in [shrink.ShrinkMode()] + WANTED]
    full, half, most, quanto = done.rows
    assert (full.kind, full.accuracy, full.right, full.items) == ("full", 1.0, 2, 2)
    assert (full.step_ratio, full.step_ratio_lo, full.step_ratio_hi) == (1.0, 1.0, 1.0)  # itself, step by step
    c = lm.model.config
    per_token = c.num_hidden_layers * 2 * c.num_key_value_heads * (c.hidden_size // c.num_attention_heads) * 4
    lengths = [sweep.item_ids(lm.tokenizer, i).shape[1] for i in answered]
    assert full.bytes == round(sum(per_token * n for n in lengths) / 2)
    for r, ratio in ((half, 0.5), (most, 0.9)):
        assert r.ratio == ratio and r.kind == "press"
        assert r.bytes == round(sum(per_token * int(n * (1 - ratio)) for n in lengths) / 2)
        assert r.peak_bytes > r.bytes  # the prompt's forward held more than what was kept
    assert quanto.kind == "quantized" and quanto.ratio == round(1 - quanto.bytes / full.bytes, 4)
    assert all(r.peak_bytes >= r.bytes for r in done.rows) and done.complete
    assert [p.done for p in seen] == list(range(len(seen)))  # one line per run, then the last
    assert seen[-1].done == seen[-1].total == 2 * 4 and seen[-1].mode == "done"
    assert "item 1 of 2" in seen[0].line() and "(0m 0" in seen[0].line()


def test_the_file_round_trips_and_refuses_bad_rows(result):
    done, _ = result
    back = sweep.from_json(sweep.to_json(done))
    assert back.rows == done.rows and back.model == done.model and back.task == "two items"
    doc = json.loads(sweep.to_json(done))
    doc["rows"][0]["right"] = 5
    with pytest.raises(TraceError, match="more right answers than items"):
        sweep.from_json(json.dumps(doc))
    doc["rows"][0]["accuracy"] = 7
    with pytest.raises(TraceError, match="not a valid kvviz-shrink-sweep file"):
        sweep.from_json(json.dumps(doc))
    assert sweep.is_sweep(sweep.to_json(done)) and not sweep.is_sweep(b"[1]")


def test_a_stop_keeps_the_rows_measured_so_far(lm, answered):
    asked = []

    def stop_after_two():
        asked.append(1)
        return len(asked) > 2
    done = sweep.run(lm, answered, WANTED[:1], should_stop=stop_after_two, new_tokens=NEW)
    assert not done.complete and [r.items for r in done.rows] == [1, 1]


def test_the_tracker_counts_what_is_alive_at_once():
    tracker = peak.PeakTracker()
    with tracker.step(torch.device("cpu")) as memory:
        a = torch.ones(1000)  # 4,000 B
        b = a * 2  # + 4,000 B
        del a, b
        c = torch.zeros(500)  # 2,000 B, after both were freed
    assert memory["peak_bytes"] == 8000 and tracker.now == 2000
    with tracker.step(torch.device("cpu")) as memory:
        d = c[:10] + 1  # 40 B beside c's 2,000
    assert memory["peak_bytes"] == 2040 and d.numel() == 10


def test_a_task_file_is_checked(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text("{\"items\": [{\"context\": 1}]}")
    with pytest.raises(ValueError, match="is not a kvviz shrink task"):
        task.load(bad)
    bad.write_text(task.to_json([], "nothing"))
    with pytest.raises(ValueError, match="a task holds 1 to"):
        task.load(bad)
    items = task.candidates(1, 3)
    assert all(i.answer in i.context and i.is_right(f" {i.answer}.") and not i.is_right(" 12") for i in items)


def test_cli_sweep_writes_rows_and_a_progress_line(tiny_dir, tmp_path, capsys):
    from kvviz import cli
    path, out = tmp_path / "task.json", tmp_path / "sweep.json"
    path.write_text(task.to_json(short_items(), "test"))
    code = cli.main(["shrink", "--sweep", "--task", str(path), "--items", "1", "--model", str(tiny_dir),
                     "--max-new-tokens", "2", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    rows = sweep.from_json(out.read_bytes()).rows
    assert len(rows) == 1 + 5 * 4 + len(sweep.QUANT)  # every press and setting runs here
    assert {(r.kind, r.ratio) for r in rows if r.press == "SnapKV"} == {("press", x) for x in sweep.RATIOS}
    assert f"[  0/{len(rows)}] item 1 of 1: full cache" in captured.err
    assert "SnapKV press, evicting 90%" in captured.out and "written to" in captured.out


@pytest.mark.slow
def test_default_model_answers_the_shipped_task_at_ratio_0(default_lm):
    items = task.load()
    done = sweep.run(default_lm, items, [], new_tokens=sweep.NEW_TOKENS)
    assert [(r.kind, r.right, r.items) for r in done.rows] == [("full", len(items), len(items))]


def test_the_shipped_sweep_of_the_default_model():
    """kvviz/assets/shrink_sweep_smollm2.json (`kvviz shrink --sweep` on SmolLM2): every press at
    every ratio and every quantized setting; the full cache answers every item; the figures agree."""
    from kvviz.shrink import panel
    done = sweep.from_json(panel.SHIPPED_SWEEP.read_bytes())
    full = done.rows[0]
    assert done.complete and "SmolLM2" in done.model and (full.kind, full.accuracy) == ("full", 1.0)
    presses = {(r.press, r.ratio) for r in done.rows if r.kind == "press"}
    assert presses == {(p, x) for p in {r.press for r in done.rows if r.kind == "press"} for x in sweep.RATIOS}
    assert len(presses) == 5 * 4 and len([r for r in done.rows if r.kind == "quantized"]) == len(sweep.QUANT)
    for r in done.rows:
        assert r.peak_bytes > r.bytes and r.right == round(r.accuracy * r.items)
        if r.kind == "press":  # the kept share of the prompt, within one position per layer and head
            assert abs(r.bytes / full.bytes - (1 - r.ratio)) < 0.01
        if r.kind == "quantized":
            assert r.ratio == round(1 - r.bytes / full.bytes, 4)
