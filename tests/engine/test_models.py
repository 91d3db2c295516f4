"""Model loading: local folders, clear errors, device/dtype choice, the default model's cache folder."""
import json

import pytest
import torch
from transformers import BertConfig, T5Config

from kvviz.engine import models
from kvviz.core.config import LoadConfig


def test_local_folder_loads_in_eval_mode(tiny_dir):
    lm = models.load_model(LoadConfig(name=str(tiny_dir)))
    assert lm.label == tiny_dir.name and not lm.model.training
    assert lm.device == torch.device("cpu") and lm.dtype == torch.float32
    assert lm.weight_bytes == sum(p.numel() * 4 for p in lm.model.parameters())


def test_dtype_override(tiny_dir):
    lm = models.load_model(LoadConfig(name=str(tiny_dir), dtype="bfloat16"))
    assert next(lm.model.parameters()).dtype == torch.bfloat16


@pytest.mark.parametrize("config, message", [
    (BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32),
     "is not a decoder-only causal language model"),
    (T5Config(d_model=32, num_layers=1, num_heads=2, d_ff=32), "is not a decoder-only causal language model"),
])
def test_models_that_are_not_causal_lms_are_named(tmp_path, config, message):
    config.save_pretrained(tmp_path)
    with pytest.raises(models.ModelLoadError, match=message) as err:
        models.load_model(LoadConfig(name=str(tmp_path)))
    assert str(tmp_path) in str(err.value)


def test_remote_code_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "my-custom-arch", "auto_map": {"AutoConfig": "custom.MyConfig",
                                                     "AutoModelForCausalLM": "custom.MyModel"}}))
    (tmp_path / "custom.py").write_text("raise SystemExit('remote code ran')\n")
    with pytest.raises(models.ModelLoadError, match="remote code"):
        models.load_model(LoadConfig(name=str(tmp_path)))


def test_unknown_hub_id_is_named():
    with pytest.raises(models.ModelLoadError, match="no-such-org/no-such-model"):
        models.load_model(LoadConfig(name="no-such-org/no-such-model"))


def test_folder_without_config_is_refused(tmp_path):
    with pytest.raises(models.ModelLoadError, match="has no config.json"):
        models.load_model(LoadConfig(name=str(tmp_path)))


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


@pytest.mark.slow
def test_sdpa_refused_falls_back_to_eager_and_the_trace_records_it(tmp_path):
    from kvviz.engine import loop as engine
    from kvviz.core.config import RunConfig
    from tiny import save_arch
    lm = models.load_model(LoadConfig(name=str(save_arch(tmp_path, "gpt_oss"))))  # asks for sdpa
    assert lm.model.config._attn_implementation == "eager"
    assert lm.attn_fallback.startswith("sdpa → eager: ") and "scaled_dot_product_attention" in lm.attn_fallback
    meta = engine.run_meta(lm, RunConfig(max_new_tokens=2, chat_template=False))
    assert meta.attn_implementation == "eager" and meta.attn_fallback == lm.attn_fallback


@pytest.mark.slow
def test_record_prints_the_layout_and_the_attention_fallback(tmp_path, capsys):
    from kvviz import cli
    from tiny import save_arch
    folder = save_arch(tmp_path / "gpt-oss", "gpt_oss")
    rc = cli.main(["record", "--model", str(folder), "--prompt", "Hello there", "--max-new-tokens", "3",
                   "--no-chat-template", "--out", str(tmp_path / "run.json")])
    out = capsys.readouterr().out
    assert rc == 0 and "cache layout: 1 × sliding 6, 1 × full; attention: eager (sdpa → eager: " in out


def test_supported_sdpa_is_kept_without_a_fallback_note(tiny_dir):
    lm = models.load_model(LoadConfig(name=str(tiny_dir)))
    assert lm.model.config._attn_implementation == "sdpa" and lm.attn_fallback == ""


def test_without_a_chat_template_the_prompt_gets_bos_as_generate_callers_do():
    from kvviz.engine import loop as engine
    from kvviz.core.config import RunConfig
    from tiny import tiny_bos_tokenizer
    tok = tiny_bos_tokenizer()
    for chat in (True, False):  # no template: asking for one changes nothing
        batch = engine.encode_prompts(tok, RunConfig(prompts=("Hello there",), chat_template=chat),
                                      torch.device("cpu"))
        assert batch.ids[0].tolist() == tok("Hello there")["input_ids"]
        assert batch.ids[0, 0].item() == tok.bos_token_id == 2


def test_work_folders_a_killed_conversion_left_are_removed_but_not_a_running_one(tmp_path):
    import os
    from kvviz.engine.models import STALE_WORK_S, remove_stale_work
    old, young, other = tmp_path / ".convert-old", tmp_path / ".convert-young", tmp_path / "kept"
    for folder in (old, young, other):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"x")
    now = os.stat(young).st_mtime
    os.utime(old, (now - STALE_WORK_S - 1, now - STALE_WORK_S - 1))
    os.utime(other, (now - STALE_WORK_S - 1, now - STALE_WORK_S - 1))
    assert remove_stale_work(tmp_path, now=now) == [old]
    assert not old.exists() and young.exists() and other.exists()


def turn_tokenizer(template: str):
    """The tiny tokenizer with `<|end|>` as a special token and `template` as its chat template."""
    import copy
    from tiny import tiny_tokenizer
    tok = copy.deepcopy(tiny_tokenizer())
    tok.add_special_tokens({"additional_special_tokens": ["<|end|>"]})
    tok.chat_template = template
    return tok


def test_the_chat_templates_end_of_turn_token_is_a_stop():
    """A template that ends an assistant turn with a special token other than EOS (Llama 3's
    <|eot_id|>, Gemma's <end_of_turn>): that token stops an answer beside the configs' EOS."""
    from tiny import CHAT, tiny_lm, tiny_tokenizer
    tok, model = turn_tokenizer(CHAT), tiny_lm().model
    end = tok.convert_tokens_to_ids("<|end|>")
    assert models.end_of_turn_id(tok) == end and end != tok.eos_token_id
    assert models.stop_token_ids(model, tok) == {0, end}
    assert models.end_of_turn_id(tiny_tokenizer()) is None  # its "<|end|>" is plain text there
    model.generation_config.eos_token_id = [0, 7]
    assert models.stop_token_ids(model, tiny_tokenizer()) == {0, 7}
    refusing = turn_tokenizer("{{ raise_exception('user and assistant must alternate') }}")
    assert models.end_of_turn_id(refusing) is None


@pytest.mark.parametrize("pressed", [False, True])
def test_an_attention_twin_shares_the_weights_and_outlives_a_press_on_the_shared_model(tiny_dir, pressed):
    """The Live page's attention toggle builds an eager twin of the loaded model. A kvpress press
    (the Shrink page, on the same shared model) leaves `rotary_emb` on every attention module: the
    twin was built from paths it does not have ("LlamaAttention has no attribute rotary_emb")."""
    lm = models.load_model(LoadConfig(name=str(tiny_dir)))
    if pressed:
        for layer in lm.model.model.layers:  # what kvpress's BasePress.__call__ does
            layer.self_attn.rotary_emb = lm.model.model.rotary_emb
    twin = models.with_attention(lm, "eager")
    ids = torch.tensor([[1, 5, 9, 2, 7]])
    with torch.no_grad():
        assert torch.allclose(twin.model(ids).logits, lm.model(ids).logits, atol=1e-5)
    assert twin.model.config._attn_implementation == "eager" != lm.model.config._attn_implementation
    assert {p.data_ptr() for p in twin.model.parameters()} == {p.data_ptr() for p in lm.model.parameters()}
    assert twin.model.model.rotary_emb.inv_freq is lm.model.model.rotary_emb.inv_freq
