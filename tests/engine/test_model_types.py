"""Every causal-LM model type transformers ships, as a tiny random model: kvviz reconciles or says why.

`MODEL_FOR_CAUSAL_LM_MAPPING_NAMES` is enumerated; each type's config class is built from its own
defaults plus small sizes (hidden 64, 4 layers, a 400-token vocab, few experts) where the class has
those fields. A type that cannot be built that way, or whose own `model.generate` fails at those
sizes, is recorded as skipped with a reason from SKIP_REASONS (data, asserted; never pytest.skip).
Every other type must, over a 2-sequence batch and 4 greedy tokens:

1. measured cache bytes == kvviz's formula (layout bytes at n tokens), every step;
2. storage pinned, counted here by walking every tensor the cache object holds (storages by data
   pointer), == kvviz's probe storage;
   (the cache object plus every tensor kept as a plain attribute of the model's modules);
3. cached tokens == `model.generate` tokens, recompute tokens == `model.generate(use_cache=False)`
   tokens (greedy, no logits processors); the two are equal, or the model's own cache changes its
   tokens (CPM-Ant) and the trace's caveat says so;

or be *labelled*: the run completes, and every event carries a note saying why bytes are not shown
(layout not modelled, or no cache support: recompute only). KNOWN_GAPS lists what still fails, by
cause; a gap that stops failing fails its test, so the list only shrinks.
"""
from __future__ import annotations

import time
from functools import lru_cache

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from kvviz.engine import loop as engine
from kvviz.core.config import RunConfig
from kvviz.engine.models import LoadedModel
from tiny import tiny_tokenizer

pytestmark = pytest.mark.slow  # ~1 minute for every type on 2 cores; `make test`, not `make check`

NEW_TOKENS = 4
MAX_PARAMS = 30_000_000  # a type whose defaults (plus small sizes) still build more is skipped
SIZES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, eos_token_id=0, pad_token_id=1,
             bos_token_id=0, decoder_layers=4, decoder_attention_heads=4, decoder_ffn_dim=128,
             num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2,
             moe_intermediate_size=32, shared_expert_intermediate_size=32, rotary_dim=16,
             tie_word_embeddings=False, n_input_layers=1, n_output_layers=1)

# Sizes a type needs beyond SIZES to build tiny: xLSTM's config rounds its qk width up to a
# multiple of 64 while its layers do not (at hidden 64 its own generate fails: 'matC_old has wrong
# shape'); MiniMax-M3's default layer types are all full, so half its layers are made sparse.
TYPE_SIZES = {"xlstm": dict(hidden_size=128),
              # The default Mamba-2 mixers and gated linear attention (a 1,024 to 8,192-wide state,
              # chunks of 128-256) run transformers' reference scans for up to a minute each on 2
              # cores without the CUDA kernels; small ones run the same code in seconds.
              "falcon_h1": dict(mamba_d_ssm=64, mamba_n_heads=8, mamba_d_head=8, mamba_d_state=16,
                                mamba_chunk_size=16),
              "nemotron_h": dict(mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16, n_groups=2,
                                 chunk_size=16, head_dim=16),
              "qwen3_next": dict(linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
                                 linear_num_value_heads=4, head_dim=16),
              "minimax_m3_vl_text": dict(layer_types=["full_attention", "minimax_m3_sparse"] * 2,
                                         index_head_dim=16, index_n_heads=2, index_block_size=4)}

SKIP_REASONS = ("too large at defaults", "config refuses small sizes", "needs a package",
                "the model's own generate fails at small sizes", "composite config")


class Skip(Exception):
    """Why a type is not tried; str starts with one of SKIP_REASONS."""


def sized_config(model_type: str):
    """The type's config: its class defaults, with each SIZES field its defaults have."""
    base = AutoConfig.for_model(model_type)
    if type(base.get_text_config(decoder=True)) is not type(base):
        raise Skip(f"composite config: sizes live in {type(base.get_text_config(decoder=True)).__name__}")
    fields = {k: v for k, v in SIZES.items() if hasattr(base, k)}
    fields["vocab_size"] = len(tiny_tokenizer())
    if getattr(base, "kv_lora_rank", None):  # MLA code expects as many KV heads as query heads
        fields["num_key_value_heads"] = fields["num_attention_heads"]
    types = getattr(base, "layer_types", None)
    tries = [fields]
    if isinstance(types, list) and types:
        tries = [{**fields, "layer_types": types[:4]}, fields, {**fields, "num_hidden_layers": len(types)}]
    tries = [{**attempt, **TYPE_SIZES.get(model_type, {})} for attempt in tries]
    for i, attempt in enumerate(tries):
        try:
            return type(base)(**attempt)
        except Exception as exc:  # noqa: BLE001 - config validators raise many types
            if i == len(tries) - 1:
                raise Skip(f"config refuses small sizes: {type(exc).__name__}: "
                           f"{str(exc).strip().splitlines()[-1][:120]}") from None


def build(config):
    """Meta first (counts parameters without memory), then a real one in fp32, sdpa or eager."""
    for attn in ("sdpa", "eager"):
        try:
            with torch.device("meta"):
                meta = AutoModelForCausalLM.from_config(config, attn_implementation=attn)
            break
        except ValueError:
            continue
    params = sum(p.numel() for p in meta.parameters())
    if params > MAX_PARAMS:
        raise Skip(f"too large at defaults: {params:,} parameters")
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, attn_implementation=attn).eval()


def run_config() -> RunConfig:
    return RunConfig(prompts=("Hello there", "Attention reads"), batch=2, max_new_tokens=NEW_TOKENS,
                     chat_template=False, stop_on_eos=False)


# Types whose own batched generate with a cache computes something else than at batch 1
# (transformers 5.24; kvviz.engine.own_cache says why): their reference is generate one padded row
# at a time. test_rwkv_generate_is_wrong_only_batched keeps this list honest.
ROW_BY_ROW = {"rwkv": "its one-token step broadcasts a (batch, hidden) state against (batch, 1, hidden)"}


def hf_tokens(lm: LoadedModel, use_cache: bool = True, rows: bool = False) -> list[tuple]:
    """`model.generate` with greedy decoding and no logits processors (no forced BOS/EOS); with
    `rows`, each padded row of the batch on its own."""
    batch = engine.encode_prompts(lm.tokenizer, run_config(), lm.device)
    # The model's own defaults (Bart's forced EOS, ...) would be merged into any config passed in.
    lm.model.generation_config = GenerationConfig(pad_token_id=1)
    parts = [slice(b, b + 1) for b in range(batch.ids.shape[0])] if rows else [slice(None)]
    with torch.inference_mode():
        out = torch.cat([lm.model.generate(batch.ids[p], attention_mask=batch.mask[p], do_sample=False,
                                           max_new_tokens=NEW_TOKENS, eos_token_id=None, use_cache=use_cache)
                         for p in parts])
    return [tuple(col) for col in out[:, batch.prompt_len:].T.tolist()]


def module_storages(model) -> dict[int, int]:
    """Tensors kept as plain attributes of the model's modules (state outside the cache object)."""
    out: dict[int, int] = {}
    for module in model.modules():
        for value in module.__dict__.values():
            if isinstance(value, torch.Tensor) and value.numel():
                out[value.untyped_storage().data_ptr()] = value.untyped_storage().nbytes()
    return out


def cache_storages(obj, seen: set | None = None, out: dict | None = None) -> dict[int, int]:
    """Every tensor reachable from the cache object (attributes, lists, dicts), storages by pointer."""
    seen, out = (set() if seen is None else seen), ({} if out is None else out)
    if id(obj) in seen:
        return out
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        if obj.numel():
            out[obj.untyped_storage().data_ptr()] = obj.untyped_storage().nbytes()
    elif isinstance(obj, (list, tuple, set)):
        for item in obj:
            cache_storages(item, seen, out)
    elif isinstance(obj, dict):
        for item in obj.values():
            cache_storages(item, seen, out)
    elif hasattr(obj, "__dict__") and not isinstance(obj, (type, torch.nn.Module)):
        for item in vars(obj).values():
            cache_storages(item, seen, out)
    return out


@lru_cache(maxsize=None)
def outcome(model_type: str) -> dict:
    """What happened to one type: {"skip": reason} or the checks' results."""
    try:
        lm = LoadedModel(model=build(sized_config(model_type)), tokenizer=tiny_tokenizer(), name=model_type,
                         label=model_type,
                         device=torch.device("cpu"), dtype=torch.float32, load_s=0.0)
    except Skip as why:
        return {"skip": str(why)}
    except ImportError as exc:
        return {"skip": f"needs a package: {str(exc).strip()[:100]}"}
    except Exception as exc:  # noqa: BLE001 - a model class refusing its own defaults
        return {"skip": f"config refuses small sizes: {type(exc).__name__}: {str(exc)[:100]}"}
    try:
        generated = hf_tokens(lm, rows=model_type in ROW_BY_ROW)
        generated_without = hf_tokens(lm, use_cache=False)
    except Exception as exc:  # noqa: BLE001
        return {"skip": f"the model's own generate fails at small sizes: {type(exc).__name__}: {str(exc)[:100]}"}
    walked: list = []  # storage counted here, at each step

    def walk(cache):
        pinned = {**cache_storages(cache), **module_storages(lm.model)} if cache is not None else None
        walked.append(sum(pinned.values()) if pinned is not None else None)

    t0 = time.perf_counter()
    try:
        events = list(engine.generate(lm, run_config(), "cached", inspect=walk))
        recompute = [e.token_ids for e in engine.generate(lm, run_config(), "recompute")]
        caveat = caveat_of(engine.run_meta(lm, run_config()))
        run_layout = sizes(engine.plan_run(lm, run_config()).specs)
        plan_layout, plan_note = planner_layout(lm.model.config)
    except Exception as exc:  # noqa: BLE001 - a crash is what this test exists to catch
        return {"crash": f"{type(exc).__name__}: {str(exc)[:160]}"}
    return {"notes": sorted({e.cache_note for e in events} - {""}), "caveat": caveat,
            "run_layout": run_layout, "plan_layout": plan_layout, "plan_note": plan_note,
            "generate_without_cache": generated_without,
            "labelled": bool(events) and all(e.cache_note for e in events),
            "bytes": [(e.kv_bytes, e.formula_bytes) for e in events],
            "storage": [(w, e.storage_bytes) for w, e in zip(walked, events)],
            "cached": [e.token_ids for e in events], "recompute": recompute, "generate": generated,
            "run_s": time.perf_counter() - t0}


def caveat_of(meta) -> str:
    """The run's cache caveat, from the trace's meta (a dict, or a record with that field)."""
    return (meta.get("cache_caveat") if isinstance(meta, dict) else getattr(meta, "cache_caveat", None)) or ""


def sizes(specs) -> list[tuple]:
    """What sizes an attention layer (state layers keep the config's sizes in the planner); a
    compressor's part as the values it keeps after 1,000 tokens."""
    return [(s.kind, s.values_per_token, s.key_values_per_token, s.index_values, s.latent_rope, s.token_cap,
             s.fixed_tokens, s.compressor_values(1000)) for s in specs if s.kind != "state"]


def planner_layout(config) -> tuple[list[tuple], str]:
    """The layer sizes the planner gives this config when pasted (measured on the meta device)."""
    from kvviz.core import layout
    from kvviz.core.errors import UserError
    from kvviz.engine import config_probe
    try:
        specs = layout.layer_specs(config)
    except UserError as exc:
        return [], str(exc)
    measured, note = config_probe.measured_layout(config, specs)
    return sizes(measured), note


def problems(result: dict) -> list[str]:
    """Which of the checks fail ([] = reconciled or labelled)."""
    if "skip" in result:
        return []
    if "crash" in result:
        return [f"crash: {result['crash']}"]
    found = token_problems(result)
    if result["labelled"]:
        return found
    if result["notes"]:
        found.append(f"some steps unlabelled: {result['notes']}")
    if any(measured != formula for measured, formula in result["bytes"]):
        found.append(f"bytes: measured != formula {result['bytes'][-1]}")
    if any(not storage_close(walked, probed) for walked, probed in result["storage"]):
        found.append(f"storage: walked != probe {result['storage'][-1]}")
    return found


def token_problems(result: dict) -> list[str]:
    """kvviz's cached run == the model's own generate with its cache, kvviz's recompute run == its
    own generate without one; where those two differ (the model's own cached steps compute
    something else), kvviz must say so in the trace (the caveat) or run recompute-only."""
    found = []
    recompute_only = any("recomputes every step" in note for note in result["notes"])
    if result["recompute"] != result["generate_without_cache"]:
        found.append("tokens: recompute != generate(use_cache=False)")
    if not recompute_only and result["cached"] != result["generate"]:
        found.append("tokens: cached != generate")
    unequal = result["generate"] != result["generate_without_cache"]
    if unequal and not recompute_only and "not the same computation" not in result["caveat"]:
        found.append("tokens: the model's own cache changes its tokens and kvviz does not say so")
    return found


def storage_close(walked: int | None, probed: int | None) -> bool:
    """The walk also finds the cache's bookkeeping tensors (a sliding layer's int64 counters): at
    most 64 bytes more than the probe's K/V/state storages, never less."""
    if walked is None or probed is None:
        return walked == probed
    return 0 <= walked - probed <= 64 * 8


# What still fails, by cause (issue 18). A type listed here must still fail; fixed ones come off.
# Empty since the layout is measured from each model's own code (layout_probe): hy_v4's shared
# indexers, CPM-Ant's 32 prompt positions, XLM's mask token, Dory's looped cache layers, RWKV
# (recompute-only, equal to its own generate without a cache).
KNOWN_GAPS: dict[str, str] = {}

TYPES = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("model_type", TYPES)
def test_type_reconciles_or_is_labelled(model_type):
    result = outcome(model_type)
    if "skip" in result:
        assert result["skip"].startswith(SKIP_REASONS), result["skip"]
        return
    found = problems(result)
    if model_type in KNOWN_GAPS:
        assert found, f"{model_type} now reconciles: remove it from KNOWN_GAPS"
    else:
        assert not found, found


def test_no_type_that_builds_tiny_is_left_unmodelled_or_crashes():
    """Issue 29: every type that builds tiny is measured and sized; the only labelled runs are
    models that keep no cache at all (their forward stores nothing: recompute only)."""
    results = {t: outcome(t) for t in TYPES}
    crashed = {t: r["crash"] for t, r in results.items() if "crash" in r}
    unmodelled = {t: r["notes"] for t, r in results.items() if any("not modelled" in n for n in r.get("notes", []))}
    labelled = {t: r["notes"] for t, r in results.items() if r.get("labelled")}
    assert not crashed and not unmodelled, (crashed, unmodelled)
    assert all("recomputes every step" in note for notes in labelled.values() for note in notes), labelled
    assert {"xlstm", "rwkv", "deepseek_v4", "minimax_m3_vl_text"} <= {
        t for t, r in results.items() if "skip" not in r and not problems(r) and not r["labelled"]}


def test_most_types_are_tried_and_reconcile():
    results = {t: outcome(t) for t in TYPES}
    tried = [t for t, r in results.items() if "skip" not in r]
    clean = [t for t in tried if not problems(results[t]) and not results[t]["labelled"]]
    assert len(TYPES) >= 150 and len(tried) >= 100 and len(clean) >= 90, (len(tried), len(clean))


@pytest.mark.parametrize("model_type", ["falcon", "rwkv"])
def test_kvviz_record_on_falcon_and_rwkv_writes_a_trace(model_type, tmp_path, capsys):
    """Falcon (num_kv_heads / multi_query) measured == formula; RWKV (no attention-head fields, its
    state carried through `state=`) measured == formula too: five state tensors per layer."""
    from kvviz import cli
    from kvviz.core.trace import Trace
    build(sized_config(model_type)).save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    out = tmp_path / "trace.json"
    rc = cli.main(["record", "--prompt", "Hello there", "--model", str(tmp_path), "--max-new-tokens", "3",
                   "--no-chat-template", "--out", str(out)])
    assert rc == 0
    events = Trace.load(out).events_of("cached")
    assert len(events) == 3
    assert all(e.kv_bytes == e.formula_bytes > 0 and not e.cache_note for e in events)
    if model_type == "rwkv":  # 4 layers × (2 × 64 fp32 shift + 3 × 64 fp32 WKV values) × 4 bytes
        assert events[-1].kv_bytes == 4 * 5 * 64 * 4
        assert "recomputes every step" not in capsys.readouterr().out


@pytest.mark.parametrize("model_type, words", [
    ("cpmant", "not the same computation"), ("xlm", "adds 1 positions"),
    ("dory", "2 layers beyond its 4 decoder layers"), ("recurrent_gemma", "state on its own modules")])
def test_what_a_models_own_code_does_is_said_in_the_trace_and_on_the_page(model_type, words):
    """The caveat the probe measured reaches the trace's meta, the CLI's notes and the Live page's notes."""
    from kvviz.live.view_panel import run_notes
    from kvviz.cli import layout_lines
    from kvviz.core.trace import Trace
    lm = LoadedModel(model=build(sized_config(model_type)), tokenizer=tiny_tokenizer(), name=model_type,
                     label=model_type,
                     device=torch.device("cpu"), dtype=torch.float32, load_s=0.0)
    meta = engine.run_meta(lm, run_config())
    assert words in caveat_of(meta)
    events = list(engine.generate(lm, run_config(), "cached"))
    assert any(words in note for note in run_notes(meta, events[-1]))
    assert words in layout_lines(Trace(meta, events))


def test_state_kept_on_modules_survives_a_race():
    """RecurrentGemma keeps its conv and recurrent states on its modules; the no-cache run's forwards
    reset them. Taking turns with the cached run ahead (as on the page), the cached run still holds,
    after every step, the very states it holds alone, makes the same tokens, and its bytes (module
    states included) equal the formula."""
    lm = LoadedModel(model=build(sized_config("recurrent_gemma")), tokenizer=tiny_tokenizer(), name="recurrent_gemma",
                     label="recurrent_gemma", device=torch.device("cpu"), dtype=torch.float32, load_s=0.0)

    def states_into(seen: list):
        return lambda cache: seen.append([v.clone() for _, v in sorted(module_storages_named(lm.model))])

    alone_states: list = []
    alone = [e.token_ids for e in engine.generate(lm, run_config(), "cached", inspect=states_into(alone_states))]
    raced_states: list = []
    runs = {"c": (engine.generate(lm, run_config(), "cached", inspect=states_into(raced_states)), []),
            "r": (engine.generate(lm, run_config(), "recompute"), [])}
    for who in "ccrcrcrr":
        runs[who][1].append(next(runs[who][0]))
    ahead, behind = runs["c"][1], runs["r"][1]
    assert len(alone_states[0]) == 6  # conv and recurrent state of 3 recurrent layers
    assert all(torch.equal(a, b) for step_a, step_b in zip(alone_states, raced_states) for a,
               b in zip(step_a, step_b))
    assert [e.token_ids for e in ahead] == alone == [e.token_ids for e in behind]
    assert all(e.kv_bytes == e.formula_bytes > 0 for e in ahead)
    assert ahead[0].kv_bytes > sum(s.k_bytes + s.v_bytes for s in ahead[0].layers)  # states counted


def module_storages_named(model) -> list[tuple[str, torch.Tensor]]:
    return [(f"{name}.{attr}", value) for name, module in model.named_modules()
            for attr, value in module.__dict__.items() if isinstance(value, torch.Tensor)]


def test_the_planner_sizes_a_pasted_config_as_a_run_measures_it():
    """For every type a run measures, the planner's layout of its config (the architecture's code on
    the meta device) has the same per-layer sizes, or says it fell back to config fields."""
    results = {t: outcome(t) for t in TYPES}
    measured = {t: r for t, r in results.items() if r.get("run_layout")}
    agree = [t for t, r in measured.items() if r["plan_layout"] == r["run_layout"]]
    fell_back = {t: r["plan_note"] for t, r in measured.items() if t not in agree}
    assert all(note.startswith("sizes from config fields") for note in fell_back.values()), fell_back
    assert len(agree) >= 130 and len(fell_back) <= 3, (len(agree), fell_back)
