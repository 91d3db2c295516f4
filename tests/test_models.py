"""Model loading: local folders, clear errors, device/dtype choice, the default model's cache folder."""
import json

import pytest
import torch
from transformers import BertConfig, T5Config

from kvviz import models
from kvviz.config import ModelSpec


def test_local_folder_loads_in_eval_mode(tiny_dir):
    lm = models.load_model(ModelSpec(name=str(tiny_dir)))
    assert lm.label == tiny_dir.name and not lm.model.training
    assert lm.device == torch.device("cpu") and lm.dtype == torch.float32
    assert lm.weight_bytes == sum(p.numel() * 4 for p in lm.model.parameters())


def test_dtype_override(tiny_dir):
    lm = models.load_model(ModelSpec(name=str(tiny_dir), dtype="bfloat16"))
    assert next(lm.model.parameters()).dtype == torch.bfloat16


@pytest.mark.parametrize("config, message", [
    (BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32),
     "is not a decoder-only causal language model"),
    (T5Config(d_model=32, num_layers=1, num_heads=2, d_ff=32), "is not a decoder-only causal language model"),
])
def test_models_that_are_not_causal_lms_are_named(tmp_path, config, message):
    config.save_pretrained(tmp_path)
    with pytest.raises(models.ModelLoadError, match=message) as err:
        models.load_model(ModelSpec(name=str(tmp_path)))
    assert str(tmp_path) in str(err.value)


def test_remote_code_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "my-custom-arch", "auto_map": {"AutoConfig": "custom.MyConfig",
                                                     "AutoModelForCausalLM": "custom.MyModel"}}))
    (tmp_path / "custom.py").write_text("raise SystemExit('remote code ran')\n")
    with pytest.raises(models.ModelLoadError, match="remote code"):
        models.load_model(ModelSpec(name=str(tmp_path)))


def test_unknown_hub_id_is_named():
    with pytest.raises(models.ModelLoadError, match="no-such-org/no-such-model"):
        models.load_model(ModelSpec(name="no-such-org/no-such-model"))


def test_folder_without_config_is_refused(tmp_path):
    with pytest.raises(models.ModelLoadError, match="has no config.json"):
        models.load_model(ModelSpec(name=str(tmp_path)))


def test_device_and_dtype_choice():
    assert models.pick_device("cpu") == torch.device("cpu")
    assert models.pick_dtype("auto", torch.device("cpu")) == torch.float32
    assert models.pick_dtype("auto", torch.device("cuda")) == torch.bfloat16
    with pytest.raises(models.ModelLoadError, match="unknown dtype"):
        models.pick_dtype("float8", torch.device("cpu"))
    if not torch.cuda.is_available():
        with pytest.raises(models.ModelLoadError, match="CUDA is not available"):
            models.pick_device("cuda")


def test_is_complete_needs_every_recorded_size(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"12345")
    assert not models.is_complete(tmp_path)  # no marker: half-written
    (tmp_path / models.MARKER).write_text(json.dumps({"sizes": {"a.bin": 5}}))
    assert models.is_complete(tmp_path)
    (tmp_path / "a.bin").write_bytes(b"12")  # truncated
    assert not models.is_complete(tmp_path)
    (tmp_path / models.MARKER).write_text("{not json")
    assert not models.is_complete(tmp_path)
