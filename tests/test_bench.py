"""kvviz bench: the pure helpers on fake numbers, and one tiny measurement for its structure only."""
import argparse
import itertools

import pytest

from kvviz import bench
from kvviz.bench import Result


def test_interleaved_runs_variants_in_turn_and_keeps_every_sample():
    calls = []
    clock = itertools.count(1)

    def variant(name):
        def measure():
            calls.append(name)
            return float(next(clock))
        return measure

    samples = bench.interleaved({"a": variant("a"), "b": variant("b")}, reps=3)
    assert calls == ["a", "b", "a", "b", "a", "b"]
    assert samples == {"a": [1.0, 3.0, 5.0], "b": [2.0, 4.0, 6.0]}


def test_medians_of_interleaved_samples_ignore_an_outlier_round():
    samples = {"hooked": [10.2, 10.1, 55.0, 10.3, 10.2], "bare": [10.0, 40.0, 10.1, 9.9, 10.0]}
    assert bench.medians(samples) == {"hooked": 10.2, "bare": 10.0}
    assert bench.medians({"a": [1.0, 3.0]}) == {"a": 2.0}  # an even count averages the middle two


def test_spread_shows_median_range_and_count():
    assert bench.spread([3.0, 1.0, 2.0]) == "2 (1–3, n=3)"


@pytest.mark.parametrize("ratio, op, limit, verdict", [
    (1.02, "<=", 1.03, "PASS"), (1.03, "<=", 1.03, "PASS"), (1.031, "<=", 1.03, "FAIL"),
    (0.95, ">=", 0.95, "PASS"), (0.94, ">=", 0.95, "FAIL"),
    (3.0, ">", 3.0, "FAIL"), (3.1, ">", 3.0, "PASS"),
    (14.0, None, None, "info"),
])
def test_result_checks_the_ratio_against_its_target(ratio, op, limit, verdict):
    row = Result("x", "1 s", "2 s", ratio, op, limit)
    assert row.verdict == verdict
    assert row.passed is {"PASS": True, "FAIL": False, "info": None}[verdict]


def test_result_target_text():
    assert Result("x", "", "", 1.0, "<=", 1.03).target == "≤ 1.03"
    assert Result("x", "", "", 1.0, ">=", 0.8).target == "≥ 0.8"
    assert Result("x", "", "", 1.0, None, None).target == "—"


FAKE = [Result("Hook overhead", "76.00 ms/token", "75.00 ms/token", 76 / 75, "<=", 1.03),
        Result("Live page / headless", "9.00 tok/s", "12.00 tok/s", 0.75, ">=", 0.8),
        Result("First run / warm", "45.0 s", "3.00 s", 15.0, None, None)]


def test_render_table_is_a_markdown_table_with_one_row_per_result():
    lines = bench.render_table(FAKE).splitlines()
    assert lines[0] == "| Benchmark | Measured | Baseline | Ratio | Target | Result |"
    assert lines[1] == "|---|---|---|---|---|---|"
    assert lines[2] == "| Hook overhead | 76.00 ms/token | 75.00 ms/token | 1.013 | ≤ 1.03 | PASS |"
    assert lines[3].endswith("| 0.750 | ≥ 0.8 | FAIL |")
    assert lines[4].endswith("| 15.000 | — | info |")
    assert len(lines) == 2 + len(FAKE)


def test_render_doc_holds_machine_date_command_table_and_methods():
    machine = {"CPU": "Fake CPU, 2 cores", "Software": "torch 0, transformers 0"}
    doc = bench.render_doc(machine, "python -m kvviz.cli bench --out x.md", "2026-01-01 12:00 UTC",
                           FAKE, [("Hook overhead", "How it was measured."), ("Caveats", "Noisy.")])
    assert doc.startswith("# Benchmarks\n")
    for piece in ("**Date:** 2026-01-01 12:00 UTC", "`python -m kvviz.cli bench --out x.md`",
                  "**CPU:** Fake CPU, 2 cores", "**Software:** torch 0", bench.render_table(FAKE),
                  "### Hook overhead\n\nHow it was measured.", "### Caveats\n\nNoisy."):
        assert piece in doc
    assert doc.index("## Results") < doc.index("## Method")


def test_command_line_repeats_the_flags():
    args = argparse.Namespace(quick=True, reps=2, out="docs/benchmarks.md")
    assert bench.command_line(args) == "python -m kvviz.cli bench --quick --reps 2 --out docs/benchmarks.md"
    assert bench.command_line(argparse.Namespace(quick=False, reps=None, out=None)) == "python -m kvviz.cli bench"


def test_cli_has_a_bench_subcommand():
    from kvviz.cli import build_parser
    args = build_parser().parse_args(["bench", "--quick", "--out", "b.md"])
    assert args.func is bench.run and args.quick and args.out == "b.md" and args.reps is None


def test_tiny_model_measurements_have_the_right_shape():
    """Structure only, never speed: a tiny random Llama, a few tokens, two rounds."""
    from tiny import tiny_lm
    lm, s = tiny_lm(), bench.Settings(reps=2, new_tokens=4, recompute_lengths=(2, 4), recompute_reps=1)
    rows = []
    for measure in (bench.hook_overhead, bench.engine_vs_generate, bench.recompute_vs_cached):
        results, method = measure(lm, s)
        assert isinstance(method, str) and method
        rows += results
    assert [r.op for r in rows] == ["<=", ">=", ">", ">", ">"]  # hooks, generate, 2 lengths, growth
    assert rows[4].ratio == pytest.approx(rows[3].ratio / rows[2].ratio)
    for row in rows:
        assert row.ratio > 0 and row.verdict in ("PASS", "FAIL")
    assert len(bench.render_table(rows).splitlines()) == 2 + len(rows)


def test_live_page_measurement_on_a_tiny_model(tiny_dir, monkeypatch):
    """The real page in AppTest, a tiny local model: one row, and the page's timing notes."""
    for name in ("KVVIZ_MODEL", "KVVIZ_PRESENT", "KVVIZ_HOSTED"):
        monkeypatch.setenv(name, "")  # so that monkeypatch restores it: the bench sets KVVIZ_MODEL
        monkeypatch.delenv(name)
    from kvviz import engine, panels
    real = engine.generate, panels.LiveView.update, panels.LiveView.draw_figures
    rows, method = bench.live_page_vs_headless(bench.Settings(reps=1, new_tokens=4), str(tiny_dir))
    assert (engine.generate, panels.LiveView.update, panels.LiveView.draw_figures) == real  # unpatched
    assert [r.op for r in rows] == [">="] and rows[0].ratio > 0
    assert "chart redraws" in method and "tok/s" in method
