"""The cache map's frames (kvviz.live.cache_map, pure), the engine's attention rows and real runs' layer
kinds drawn from them (tiny models). Its charts: test_cache_map_charts.py; its panel: test_cache_map_panel.py."""
from __future__ import annotations


import pytest

from kvviz.core.errors import UserError
from kvviz.live import cache_map as cm
from kvviz.viz import charts
from kvviz.core.events import LayerStat, StepEvent
from metas import meta_of


def event(step: int, seq_len: int, tokens: list[int], text: str = "x", attention=None) -> StepEvent:
    layers = tuple(LayerStat(layer=i, k_bytes=8 * t, v_bytes=8 * t, tokens=t, forward_ms=0.1) for i,
                   t in enumerate(tokens))
    return StepEvent(mode="cached",
                     phase="prefill" if step == 0 else "decode",
                     step=step,
                     token_ids=(5,),
                     texts=(text,),
                     finished=(False,),
                     step_ms=1.0,
                     seq_len=seq_len,
                     positions=1,
                     kv_bytes=0,
                     formula_bytes=0,
                     layers=layers,
                     blocks=None,
                     attention=attention)


def run(meta, steps: int, cap: list[int | None]) -> list[StepEvent]:
    """A run of `steps` events over layers capped at `cap` (None: full)."""
    prompt = meta.prompt_tokens
    return [event(s, prompt + s + 1, [prompt + s if c is None else min(prompt + s, c) for c in cap],
                  text=f"<g{s}>") for s in range(steps)]


META_FIELDS = {"num_layers": 2, "prompt_tokens": 4, "max_len": 12, "windows": [None, 3],
        "prompt_pieces": [[None, "a", "b\n", "c"]]}
META = meta_of(META_FIELDS)


def spans(df, layer: int, row: int = 0) -> list[tuple]:
    part = df[(df.layer == layer) & (df.tensor_row == row)]
    return list(zip(part.status, part.pos_start, part.pos_end))


def test_full_layer_holds_every_written_position_split_at_the_prompt():
    events = run(META, 3, [None, 3])
    cells = cm.cells_frame(META, events[-1])
    # 3 steps: positions 0..5 are cached (the token sampled at step 2 is not yet); 0 is padding.
    assert spans(cells, 0) == [("padding", 0, 1), ("prompt", 1, 4), ("generated", 4, 6)]
    assert set(cells[cells.layer == 0].shade) == {"padding", "K", "V"}
    assert (cells.positions == cells.pos_end - cells.pos_start).all()


def test_sliding_layer_drops_its_oldest_positions_as_the_run_grows():
    events = run(META, 6, [None, 3])
    early = spans(cm.cells_frame(META, events[0]), 1)
    late = spans(cm.cells_frame(META, events[-1]), 1)
    assert early == [("dropped", 0, 1), ("prompt", 1, 4)]  # 4 written, 3 held
    assert late == [("dropped", 0, 6), ("generated", 6, 9)]  # 9 written, the newest 3 held
    dropped = cm.cells_frame(META, events[-1]).query("status == 'dropped'")
    assert set(dropped.shade) == {"dropped"} and set(dropped.layer) == {1}


def test_k_and_v_are_separate_rows_and_latent_state_shared_have_their_own_shades():
    meta = meta_of({**META_FIELDS, "num_layers": 4, "windows": [None] * 4,
                    "layer_kinds": ["full", "latent", "state", "shared"],
                    "layer_labels": ["full", "latent 512+64", "state", "shared ← 0"]})
    cells = cm.cells_frame(meta, event(2, 7, [6, 6, 0, 0]))
    shade = lambda layer, row: set(cells[(cells.layer == layer) & (cells.tensor_row == row)].shade)  # noqa: E731
    assert shade(0, 0) >= {"K"} and shade(0, 1) >= {"V"}
    assert shade(1, 0) >= {"latent (MLA)"} and shade(1, 1) >= {"rope key (MLA)"}
    assert spans(cells, 2) == [("state", 0, 6)]  # one band over everything written, whatever tokens says
    assert shade(3, 0) - {"padding"} == {"shared"}
    assert [k.label() for k in meta.specs] == ["full", "latent 512+64", "state", "shared ← 0"]
    v3 = meta_of(META, num_layers=4, layers=[{"kind": "full"}, {"kind": "latent", "values_per_token": 576,
                                                                "latent_rope": 64}, {"kind": "state"},
                                             {"kind": "shared", "shared_with": 0}])
    assert cm.cells_frame(v3, event(2, 7, [6, 6, 0, 0])).equals(cells)  # format 3 draws the same


def test_kinds_fall_back_to_windows_and_uniform_models_say_so():
    assert [k.label() for k in META.specs] == ["full", "sliding 3"]
    assert cm.uniform_label(META.specs) is None
    assert cm.uniform_label(meta_of({"num_layers": 30, "windows": [None] * 30}).specs) == "full"


def test_columns_carry_token_text_and_tell_prompt_from_generated():
    events = run(META, 3, [None, 3])
    cols = cm.columns_frame(META, events, width=1)
    assert list(cols.text) == ["", "a", "b⏎", "c", "<g0>", "<g1>"]  # untrusted text kept verbatim
    assert list(cols.part) == ["padding", "prompt", "prompt", "prompt", "generated", "generated"]
    meta = meta_of(META, prompt_pieces=[[None, "\x1c", "\ud800", "\t"]])
    assert list(cm.columns_frame(meta, events[:1], width=1).text) == ["", "\ufffd", "?", "\ufffd"]


def test_wide_runs_are_binned_to_at_most_max_columns():
    meta = meta_of({"num_layers": 30, "prompt_tokens": 500, "max_len": 1024, "windows": [None] * 30})
    events = run(meta, 40, [None] * 30)
    cols = cm.columns_frame(meta, events)
    width = cm.bin_width(1024)
    assert width == 7 and len(cols) <= cm.MAX_COLUMNS
    assert cols.positions.sum() == 539 and (cols.positions <= width).all()
    assert cols[cols.pos_start == 497].part.item() == "prompt + generated"
    assert len(cm.cells_frame(meta, events[-1])) == 30 * 2 * 2  # runs, not positions: prompt + generated
    assert cm.bin_width(100) == 1


def test_map_frame_holds_cells_and_columns_in_one_table():
    events = run(META, 3, [None, 3])
    df = cm.map_frame(META, events)
    assert set(df.row) == {"cell", "column"}
    assert len(df) == len(cm.cells_frame(META, events[-1])) + len(cm.columns_frame(META, events))
    assert list(cm.map_frame(META, []).columns) == ["row", *cm.MAP_COLUMNS]


def test_attention_frame_maps_rows_onto_the_newest_positions_and_sums_per_column():
    # 5 positions written after this event; layer 0 read all 5, the sliding layer its last 3.
    attention = (((0.5, 0.1, 0.1, 0.1, 0.2), (0.2, 0.3, 0.5)),)
    ev = event(1, 6, [5, 3], attention=attention)
    att = cm.attention_frame(META, [event(0, 5, [4, 3]), ev], width=2)
    layer0 = att[att.layer == 0]
    assert list(layer0.pos_start) == [0, 2, 4] and layer0.share.tolist() == pytest.approx([0.6, 0.2, 0.2])
    layer1 = att[att.layer == 1]
    assert list(layer1.pos_start) == [2, 4] and layer1.share.tolist() == pytest.approx([0.5, 0.5])
    assert cm.attention_frame(META, [event(0, 5, [4, 3])]).empty


# --- the engine's attention rows (tiny random models, eager attention) ---------------------------

def eager_lm(kind: str):
    from tiny import tiny_lm

    lm = tiny_lm(kind)
    lm.model.set_attn_implementation("eager")
    return lm


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["llama", "gpt2", "sliding"])
def test_attention_rows_sum_to_one_per_layer_and_end_at_the_newest_position(kind):
    from kvviz.engine import loop as engine
    from kvviz.core.config import RunConfig

    lm = eager_lm(kind)
    cfg = RunConfig(prompts=("Hello there", "The key value cache keeps"), max_new_tokens=12,
                    stop_on_eos=False, attention=True)
    events = list(engine.generate(lm, cfg))
    assert len(events) == 12
    for ev in events:
        assert len(ev.attention) == 2 and all(len(rows) == 2 for rows in ev.attention)  # [seq][layer]
        for seq_rows in ev.attention:
            for layer, row in enumerate(seq_rows):
                assert sum(row) == pytest.approx(1.0, abs=0.01)
                held = ev.layers[layer].tokens
                # a sliding layer reads its window (held + the newest) once the prompt is cached
                sliding = kind == "sliding" and ev.phase == "decode"
                assert len(row) == (min(cm.written(ev), held + 1) if sliding else cm.written(ev))
    padded = events[0].attention[0][0]  # sequence 0 is the shorter prompt: left padding
    pieces = engine.run_meta(lm, cfg).prompt_pieces
    assert pieces[0][0] is None and pieces[1][0] is not None
    assert padded[0] == 0.0  # padding is never attended to
    assert list(events) and list(engine.generate(lm, RunConfig(max_new_tokens=2)))[-1].attention is None


@pytest.mark.slow
def test_attention_is_cut_to_the_written_positions_of_a_static_cache():
    from kvviz.engine import loop as engine
    from kvviz.core.config import RunConfig

    cfg = RunConfig(max_new_tokens=4, stop_on_eos=False, attention=True, cache_backend="static")
    last = list(engine.generate(eager_lm("llama"), cfg))[-1]
    assert len(last.attention[0][0]) == cm.written(last)
    assert sum(last.attention[0][0]) == pytest.approx(1.0, abs=0.01)


def test_attention_needs_eager_and_says_so():
    from tiny import tiny_lm

    from kvviz.engine import loop as engine
    from kvviz.core.config import RunConfig

    with pytest.raises(UserError, match="eager attention"):
        engine.run_meta(tiny_lm("llama"), RunConfig(attention=True))


@pytest.mark.slow
def test_a_trace_with_attention_round_trips():
    from kvviz.engine import loop as engine
    from kvviz.core.config import RunConfig
    from kvviz.core.trace import Trace

    lm = eager_lm("llama")
    cfg = RunConfig(max_new_tokens=3, stop_on_eos=False, attention=True)
    trace = Trace(engine.run_meta(lm, cfg), list(engine.generate(lm, cfg)))
    again = Trace.from_json(trace.to_json())
    assert again.events[-1].attention == trace.events[-1].attention
    assert not cm.attention_frame(again.meta, again.events).empty
    from kvviz.live import report

    doc = report.html_report(again)
    for name in ("cache_map", "attention"):
        figure = doc.split(f'id="chart-{name}"', 1)[1].split("</figure>", 1)[0]
        assert "<svg" in figure and "could not be drawn" not in figure, name
    assert "eager" in doc.split('id="chart-cache_map"', 1)[1].split("</figure>", 1)[0]


@pytest.mark.slow
def test_the_cache_map_benchmark_has_the_right_shape():
    """Structure only, never speed: a tiny random Llama, a few steps."""
    from tiny import tiny_lm

    from bench import cache_map as bench
    from bench import command
    from bench.settings import Settings

    lm = tiny_lm()
    rows, method = bench.attention_cost(lm, Settings(reps=1, new_tokens=3))
    assert [r.op for r in rows] == ["<=", "<="] and all(r.ratio > 0 for r in rows)
    assert "eager" in method and "sdpa" in method
    assert lm.model.config._attn_implementation == "sdpa"  # put back as it was
    assert "cache-map" in command.BENCHES


# --- real cache kinds, from tiny models of each family -------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("arch, expect", [
    ("gemma3_text", {"dropped", "K", "V"}),  # 5 sliding : 1 full
    ("llama4_text", {"dropped", "K", "V"}),  # 3 chunked : 1 full
    ("deepseek_v3", {"latent (MLA)", "rope key (MLA)"}),
    ("qwen3_next", {"state", "K", "V"}),  # 3 gated-delta state : 1 full
    ("gemma3n_text", {"shared", "dropped"}),  # the last layers read earlier layers' KV
])
def test_real_runs_draw_each_layer_by_its_kind(arch, expect):
    from tiny import arch_lm

    from kvviz.engine import loop as engine
    from kvviz.core.config import RunConfig

    lm = arch_lm(arch)
    cfg = RunConfig(max_new_tokens=10, stop_on_eos=False)
    meta = engine.run_meta(lm, cfg)
    events = list(engine.generate(lm, cfg))
    cells = cm.cells_frame(meta, events[-1])
    assert expect <= set(cells.shade), set(cells.shade)
    kinds = meta.specs
    for layer, kind in enumerate(kinds):
        mine = cells[cells.layer == layer]
        covered = mine[mine.tensor_row == 0].positions.sum()
        assert covered == cm.written(events[-1]), (layer, kind)  # every written position drawn once
        if kind.kind in ("sliding", "chunked"):
            assert mine[mine.status != "dropped"].positions.max() <= kind.token_cap * 2
            assert (mine.status == "dropped").any()  # the run crossed the window / chunk
    from kvviz.live import charts as live_charts

    data = live_charts.chart_data(meta, events, [])
    groups = data["layers"]
    assert set(groups.group) == set(live_charts.layer_groups(meta))
    assert len(set(groups.group)) == len({k.label() for k in kinds})  # one group per kind label
    assert groups.kv_bytes.max() <= live_charts.largest_tensor_bytes(meta)  # the axis holds every bar
    assert charts.to_vega_lite(live_charts.build_charts(meta, 10, data)["layers"])


@pytest.mark.parametrize("name", ["live.cache_map", "live.cache_map_charts", "live.cache_map_panel"])
def test_the_cache_map_modules_import_no_torch_transformers_or_streamlit(name):
    from tests.test_imports import imported_roots, module_path

    assert not imported_roots(module_path(name)) & {"torch", "transformers", "streamlit"}


