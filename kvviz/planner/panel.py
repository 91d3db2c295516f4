"""The capacity planner page: how many requests of T tokens fit on a serving setup, and what
bounds a step. `page()` draws it; importing this module draws nothing.

Widgets and layout only: the arithmetic is kvviz.planner.deployment's (capacity, parallel,
serving_plan), the tables kvviz.planner.frames', the charts kvviz.planner.charts',
and every sentence `kvviz plan` also prints is kvviz.planner.words'. Every widget
but the pasted config is bound to the URL (`bind="query-params"`, the key is the parameter
name), so a link reproduces the view; the pasted config travels in the page's share link as
`plan_config=` up to kvviz.app.links' length (longer: the link's caption says it is left out),
never in the address bar while it is typed. In hosted mode every size goes through
`Policy.check_limits` (token counts, requests, GPUs; kvviz.app.hosted says why these caps): the
widgets keep their full ranges, so a size over a cap, typed or carried by a link, is answered in
one sentence, not silently dropped.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from kvviz.app import links, ui
from kvviz.app.tables import draw_altair, people_table
from kvviz.app.ui import inert
from kvviz.core import catalog, units
from kvviz.core.errors import UserError
from kvviz.planner import (capacity, deployment, log_compare, parallel, vllm_log, vllm_versions,
                           will_start, words)
from kvviz.planner import charts
from kvviz.planner import configs
from kvviz.planner import frames

CATALOG = {e["name"]: e for e in capacity.load_catalog()}
GPUS = {g["name"]: g for g in capacity.load_gpus()}
CUSTOM_GPU = "Custom"
SOURCES = ("Catalog", "Paste config.json")
URL = "query-params"
AS_LOG = "as the pasted log says"  # the vLLM version option that follows a pasted log (else the latest)
# vLLM's flags a link may carry: any of them turns "Budget as vLLM computes it" on, never ignored
VLLM_FLAG_PARAMS = ("plan_gpu_memory_utilization", "plan_kv_cache_gib", "plan_max_num_seqs", "plan_enforce_eager")
MAX_CONFIG_CHARS = 200_000  # a config.json box (the largest real ones are ~20 KB)
WHY_TEXT = {  # chosen by this model's own bound, not always the small-model story
    "kernel launches": (
        "This model's bytes are read in less time than its kernels take to launch, so the GPU "
        "sits idle between them: the step time stays flat as the context grows and the achieved "
        "bandwidth is a small fraction of peak. CUDA graphs and `torch.compile` cut launch "
        "overhead."),
    "memory bandwidth": (
        "This model moves enough bytes per step (active weights plus caches) that reading them "
        "dominates: longer contexts and bigger batches lengthen the step, and smaller weight or "
        "KV formats shorten it."),
    "both": (
        "Reading and launching take similar time here: CUDA graphs help the launching part, "
        "smaller weight or KV formats the reading part."),
}
BOUND_TEXT = {
    "kernel launches": "Here launching takes longer than reading: the step is likely bound by "
                       "**kernel launches**, not bandwidth.",
    "memory bandwidth": "Here reading takes longer than launching: the step is likely bound by "
                        "**memory bandwidth**, and the floor is a fair guide.",
    "both": "Here the two are within a factor of two: **both** matter, and which one wins "
            "depends on the software stack.",
}

@dataclass
class Choice:
    """What the visitor picked: the model's source and the setup's widgets, as plain values."""

    source: str
    name: str | None
    pasted: str
    setup: deployment.Setup
    what_window: int = 0


def page() -> None:
    """The whole planner page, top to bottom."""
    rules = ui.policy()
    header(rules)
    log = pasted_log()
    choice = inputs(log)
    texts = [links.Text("plan_config", "pasted config.json", choice.pasted)] if choice.source == SOURCES[1] else []
    ui.share_link(texts + ([links.Text("plan_vllm_log", "pasted vLLM log", log)] if log else []))
    within_caps(rules, plan_tokens={"context T": choice.setup.context_tokens,
                                    "max_model_len": choice.setup.max_model_len or 0,
                                    "the shared prompt S": choice.setup.prefix_tokens},
                plan_requests=choice.setup.batch, plan_gpus=choice.setup.par.gpus)
    model = chosen_model(choice)
    plan = frames.Plan(model, choice.setup)
    try:
        result = plan.result
    except UserError as err:
        st.error(ui.visitor_text(err, "planner"))
        st.stop()
    model_caption(model, result)
    headline(plan, result)
    if not result.weights.params_known:  # nothing shown as a fit: the weights would count as 0 B
        st.info("Give the parameter count above to see what fits: without the weights kvviz cannot "
                "say how much memory is left for the KV cache.")
        kinds_section(plan)
        return
    vllm_section(plan, result)
    start_section(plan, result, CATALOG[choice.name]["hf_id"] if choice.name else "<your model>")
    log_section(plan)
    speed_section(plan)
    curve_section(plan)
    table_section(plan)
    kinds_section(plan)
    what_if_section(rules, plan)
    time_section(plan)


# ---------------------------------------------------------------- helpers
def metric_row(metrics: list) -> None:
    """Metrics side by side, each with its plain-words explanation under it."""
    if not metrics:
        return
    for col, m in zip(st.columns(len(metrics)), metrics):
        with col:
            st.metric(m.label, m.value, border=True)
            st.caption(inert(m.help))  # may quote a pasted config's quant_method: plain text


def downloads(key: str, chart=None, table=None) -> None:
    """PNG / SVG of a chart (rendered when clicked) and CSV of its raw table."""
    cols = st.columns(3)
    if chart is not None:
        cols[0].download_button("PNG", lambda: charts.chart_png(chart), f"{key}.png",
                                "image/png", key=f"{key}_png", on_click="ignore", icon=":material/image:")
        cols[1].download_button("SVG", lambda: charts.chart_svg(chart), f"{key}.svg",
                                "image/svg+xml", key=f"{key}_svg", on_click="ignore",
                                icon=":material/image:")
    if table is not None:
        cols[2].download_button("CSV", table.to_csv(index=False), f"{key}.csv", "text/csv",
                                key=f"{key}_csv", on_click="ignore", icon=":material/table:")


def within_caps(rules, **sizes) -> None:
    """The hosted policy's check (a no-op on your own machine); its sentence and a stop if over."""
    try:
        rules.check_limits(None, **sizes)
    except UserError as exc:
        st.error(f"Cannot plan this here: {inert(exc)}.")
        st.stop()


# ---------------------------------------------------------------- inputs
def header(rules) -> None:
    st.title("Capacity planner")
    st.caption("How many concurrent requests fit on a serving setup, as plain bytes and as vLLM would "
               "allocate them, and how fast decode can possibly be. Computed from the model's config "
               "(shared with `kvviz plan`), not measured.")
    if rules.enabled:
        st.caption(f"This hosted kvviz plans up to {rules.max_plan_tokens:,} tokens per request, "
                   f"{rules.max_plan_requests:,} requests at once and {rules.max_plan_gpus:,} GPUs.")


def inputs(log: str = "") -> Choice:
    """The four columns of inputs and the serving-setup expander (`log`: the pasted vLLM log,
    whose release the plan follows when the version is left to it)."""
    model_col, gpu_col, dtype_col, load_col = st.columns(4)
    with model_col:
        source, name, pasted = model_inputs()
    with gpu_col:
        gpu_name, gpu_bytes, bandwidth = gpu_inputs()
    with dtype_col:
        weight_dtype, kv_dtype = dtype_inputs()
    with load_col:
        overhead, context, batch = load_inputs()
    with st.expander("Serving setup: parallelism, vLLM's settings, what-ifs", expanded=True):
        serving = serving_inputs(log)
    gpu = GPUS.get(gpu_name, {})  # a custom GPU: its MXFP4 layout unknown, no peer-to-peer assumed
    setup = deployment.Setup(gpu_name=gpu_name, gpu_bytes=gpu_bytes, gpu_arch=gpu.get("arch"),
                             gpu_p2p=bool(gpu.get("p2p")),
                             bandwidth_bytes_per_s=bandwidth or None, kv_dtype=kv_dtype,
                             weight_dtype=weight_dtype, overhead_fraction=overhead,
                             context_tokens=int(context), batch=int(batch), **serving)
    return Choice(source, name, pasted, setup)


def model_inputs() -> tuple[str, str | None, str]:
    source = st.radio("Model from", SOURCES, horizontal=True, key="plan_source", bind=URL)
    if source == SOURCES[0]:
        name = st.selectbox("Model", list(CATALOG), index=list(CATALOG).index("Llama-3.1-8B"),
                            key="plan_model", bind=URL)
        entry = CATALOG[name]
        st.caption(f"[{entry['hf_id']}](https://huggingface.co/{entry['hf_id']}) · published "
                   f"{entry['num_parameters'] / 1e9:,.2f} B parameters")
        return source, name, ""
    pasted = st.text_area("config.json", ui.text_from_link("plan_config", "", MAX_CONFIG_CHARS), height=160,
                          max_chars=MAX_CONFIG_CHARS, key="plan_config",
                          placeholder='{"model_type": "llama", "num_hidden_layers": 32, …}')
    return source, None, pasted


def gpu_inputs() -> tuple[str, int, float]:
    gpu_name = st.selectbox("GPU", [*GPUS, CUSTOM_GPU], index=list(GPUS).index("H100 SXM"),
                            key="plan_gpu", bind=URL)
    if gpu_name == CUSTOM_GPU:
        gpu_gb = st.number_input("Memory (GB = 1e9 B)", 1.0, 10_000.0, 80.0, 1.0,
                                 key="plan_gpu_gb", bind=URL)
        bandwidth_gbs = st.number_input("Bandwidth (GB/s; 0 = unknown)", 0.0, 100_000.0, 2000.0,
                                        100.0, key="plan_bandwidth_gbs", bind=URL)
        return gpu_name, int(gpu_gb * 1e9), bandwidth_gbs * 1e9
    gpu = GPUS[gpu_name]
    device = catalog.device_bytes(gpu)
    st.caption(f"{gpu['memory_gb']:,} GB marketed; planned at {device / 1e9:,.2f} GB ({device:,} B), "
               f"what the device reports ({catalog.device_note(gpu)}) · "
               f"{gpu['bandwidth_gb_per_s']:,} GB/s peak", help=gpu.get("device_source"))
    return gpu_name, device, gpu["bandwidth_bytes_per_s"]


def dtype_inputs() -> tuple[str, str]:
    weight_dtype = st.selectbox("Weight dtype", (deployment.CHECKPOINT, *frames.PLANNER_KV_DTYPES),
                                index=0, key="plan_weight_dtype", bind=URL,
                                help="checkpoint: as the checkpoint stores them (its quantization_config)")
    kv_dtype = st.selectbox("KV dtype", frames.PLANNER_KV_DTYPES, index=1,
                            key="plan_kv_dtype", bind=URL)
    st.caption(f"int8 and int4 count one fp16 scale and zero point per "
               f"{capacity.QUANT_GROUP_SIZE} values; fp8 has none. vLLM has no int4 KV cache.")
    return weight_dtype, kv_dtype


def load_inputs() -> tuple[float, int, int]:
    overhead = st.slider("Runtime overhead (fraction of GPU memory)", 0.0, 0.9,
                         capacity.DEFAULT_OVERHEAD_FRACTION, 0.01, key="plan_overhead", bind=URL,
                         help="Activations, CUDA context, fragmentation: 1 − vLLM's "
                              "gpu_memory_utilization (0.1 ↔ 0.9).")
    context = st.number_input("Context per request, T (tokens)", 1, 10_000_000, 2000, 500,
                              key="plan_context", bind=URL)
    batch = st.number_input("Batch (requests decoded together)", 1, 1_000_000, 1, 1,
                            key="plan_batch", bind=URL)
    return overhead, context, batch


def serving_inputs(log: str = "") -> dict:
    """Parallelism, vLLM's block size / max_model_len / platform / prefix caching, the what-ifs."""
    tp_col, pp_col, dp_col, block_col, len_col, prefix_col, offload_col = st.columns(7)
    tp = tp_col.number_input("TP (GPUs per stage)", 1, 64, 1, key="plan_tp", bind=URL)
    pp = pp_col.number_input("PP (stages)", 1, 64, 1, key="plan_pp", bind=URL)
    dp = dp_col.number_input("DP (replicas)", 1, 1024, 1, key="plan_dp", bind=URL)
    block_size = block_col.selectbox("Block size", (16, 32, 64, 128), key="plan_block_size",
                                     bind=URL, help="vLLM's default is 16 on CUDA, 128 on CPU.")
    max_len = len_col.number_input("max_model_len (0 = model's)", 0, 10_000_000, 0, 1024,
                                   key="plan_max_model_len", bind=URL)
    prefix = prefix_col.number_input("Shared prompt S (tokens)", 0, 10_000_000, 0, 256,
                                     key="plan_prefix", bind=URL,
                                     help="What-if: every request starts with the same S tokens.")
    offload_gb = offload_col.number_input("CPU tier M (GB)", 0.0, 100_000.0, 0.0, 64.0,
                                          key="plan_offload_gb", bind=URL,
                                          help="What-if: M GB of host memory per replica holds "
                                               "evicted KV blocks.")
    platform_col, caching_col, _ = st.columns([2, 2, 3])
    platform = platform_col.radio("vLLM platform", ("cuda", "cpu"), horizontal=True, key="plan_platform",
                                  bind=URL, format_func=str.upper,
                                  help="A Mamba hybrid's block alignment (CUDA 16, CPU 32 tokens) and "
                                       "its recurrent state's dtype (CUDA: the model's; CPU: float32).")
    prefix_caching = caching_col.toggle("Prefix caching", True, key="plan_prefix_caching",
                                        bind=URL, help="vLLM's default. On, a Mamba hybrid holds 2–3 state pages per "
                                                       "request (vLLM's 'align' mode); off, one.")
    return dict(par=parallel.Parallel(int(tp), int(pp), int(dp)), block_size=int(block_size),
                max_model_len=int(max_len) or None, prefix_tokens=int(prefix),
                offload_bytes=int(offload_gb * 1e9), platform=platform,
                prefix_caching=bool(prefix_caching), **vllm_flag_inputs(log))


def log_release(log: str) -> tuple[str | None, str | None]:
    """(version, engine) a pasted log prints, where it prints a version kvviz models."""
    try:
        facts = vllm_log.parse_log(log) if log.strip() else None
        if facts and facts.vllm_version:
            vllm_versions.parse_version(facts.vllm_version)
            return facts.vllm_version, facts.vllm_engine
    except UserError:  # an unreadable log is said so in its own section
        pass
    return None, None


def vllm_flag_inputs(log: str = "") -> dict:
    """The vLLM release planned for, and vLLM's own flags by vLLM's names and defaults; the flags
    off: the overhead slider's simple budget. A link carrying any flag turns them on."""
    # the version column holds "as the pasted log says" whole at 1280 px (at 3 of 13 its box cut it)
    version_col, on_col, util_col, kv_col, seqs_col, eager_col = st.columns([4, 2, 2, 2, 2, 2])
    choice = version_col.selectbox(
        "vLLM version", (AS_LOG, *vllm_versions.PAGE_VERSIONS), key="plan_vllm_version", bind=URL,
        help=f"Each release family budgets the KV cache by its own rules (docs/planner.md). “{AS_LOG}”: "
             f"the release a pasted start-up log prints, else {vllm_versions.LATEST}.")
    version, engine = log_release(log) if choice == AS_LOG else (choice, None)
    release = vllm_versions.release_for(version, engine)
    version_col.caption(f"Planned for vLLM {version or vllm_versions.LATEST}"
                        + (" (the pasted log's)" if choice == AS_LOG and version else "")
                        + f": {release.name} rules.")
    linked = any(k in st.query_params for k in VLLM_FLAG_PARAMS)
    on = on_col.toggle("Budget as vLLM computes it", linked, key="plan_vllm_budget", bind=URL,
                       help="ceil(GPU memory × gpu_memory_utilization) − weights − the profile run's "
                            "activation peak and sampler − non-torch memory (− CUDA graphs from 0.21), "
                            "all modelled, instead of the overhead slider.")
    out = dict(vllm_version=version, vllm_engine=engine)
    if not on:
        return out
    util = util_col.number_input("--gpu-memory-utilization", 0.01, 1.0, release.default_gpu_memory_utilization,
                                 0.01, key="plan_gpu_memory_utilization", bind=URL,
                                 help=f"vLLM's default in this release: {release.default_gpu_memory_utilization}")
    kv_gib = kv_col.number_input("--kv-cache-memory-bytes (GiB; 0 = not set)", 0.0, 100_000.0, 0.0, 1.0,
                                 key="plan_kv_cache_gib", bind=URL,
                                 help="Set: vLLM takes this many bytes of KV cache per GPU and ignores "
                                      "gpu_memory_utilization (the page then plans without it too).")
    seqs = seqs_col.number_input("--max-num-seqs (0 = vLLM's default)", 0, 100_000, 0, 64,
                                 key="plan_max_num_seqs", bind=URL,
                                 help="V1 from 0.8.5: 1,024 on a GPU of ≥ 70 GiB (not A100), 256 below, "
                                      "128 on CPU; V0 and earlier V1: 256. It sizes the sampler's warm-up.")
    eager = eager_col.toggle("--enforce-eager", False, key="plan_enforce_eager", bind=URL,
                             help="No CUDA graphs: nothing captured, nothing deducted for them.")
    return dict(out, gpu_memory_utilization=float(util), kv_cache_memory_bytes=int(kv_gib * 2**30) or None,
                max_num_seqs=int(seqs) or None, enforce_eager=bool(eager))


# ---------------------------------------------------------------- the model
def chosen_model(choice: Choice):
    """The catalog entry, or the pasted config (asking for the parameter count when unknown)."""
    if choice.source == SOURCES[0]:
        return configs.catalog_model(choice.name)
    if not choice.pasted.strip():
        st.info("Paste the contents of a model's config.json above.")
        st.stop()
    try:
        model = frames.model_from_pasted_config(choice.pasted)
        if model.params_total is None:
            params_b = st.number_input(
                "Parameters (billions): transformers does not know this architecture, so "
                "its weights cannot be counted from the config", 0.0, 100_000.0, 0.0, 0.1,
                format="%.3f", key="plan_params_b", bind=URL)
            if params_b:
                model = frames.model_from_pasted_config(choice.pasted, int(params_b * 1e9))
    except frames.ConfigError as err:
        st.error(ui.visitor_text(err, "planner"))  # plain text built by kvviz; never the pasted text
        st.stop()
    return model


def model_caption(model, result) -> None:
    st.caption(inert(
        f"{model.name}: {model.num_layers} layers ({model.kinds}), {model.num_attention_heads} heads, "
        f"{model.kv_heads} KV heads ({model.attention_kind}), head_dim {model.head_dim}"
        + (f", trained up to {model.max_position:,} tokens" if model.max_position else "")
        + f" · {result.label}"))
    for note in model.notes:
        st.caption(inert(f"Note: {note}."))


# ---------------------------------------------------------------- figures
def headline(plan, result) -> None:
    metric_row(frames.memory_metrics(plan, units.fmt_bytes))
    st.caption(inert(words.budget_sentence(result)))  # GB (1e9 B), as the CLI and the GPU presets
    if not result.weights.params_known:
        st.warning(words.params_unknown_sentence(frames.PARAMS_REMEDY))
    if result.per_gpu.kv_budget_bytes == 0:
        st.warning(words.nothing_fits_sentence())
    model = plan.model
    if model.max_position and plan.context_tokens > model.max_position:
        st.warning(words.longer_than_trained_sentence([plan.context_tokens], model.max_position))


def vllm_section(plan, result) -> None:
    st.subheader("As vLLM would allocate it")
    if result.vllm.error:
        st.info(inert(words.vllm_unavailable_sentence(result.vllm.error)))
    else:
        st.caption("vLLM hands out memory in whole blocks of `block size` tokens per layer, grouped "
                   "by layer kind (kvviz.planner.serving_plan follows its kv_cache_utils). Same budget as above"
                   + ("." if result.vllm_budget else
                      "; vLLM also subtracts the activation peak it measures at start-up: turn on "
                      "“Budget as vLLM computes it” (serving setup) for its deductions, modelled."))
        metric_row(frames.vllm_metrics(plan))
        st.caption(words.prefix_hit_sentence(result.vllm))  # kvviz's own words and numbers
        if any(spec.has_state for spec in plan.model.specs):
            st.caption(inert(f"Recurrent-state (Mamba-style) layers on {result.vllm.platform}: vLLM's "
                             "state page (conv kernel − 1 columns), block alignment and, with prefix "
                             "caching, its 2–3 state pages per request — checked against a real vLLM "
                             "0.32 on tiny Granite-4, Qwen3-Next and LFM2 hybrids (docs/planner.md)."))
        if deployment.blocks_refused(result):  # other failures: "Will it start?" below says which
            st.warning(words.refusal_sentence(result.vllm, deployment.fit_advice(plan.model, plan.setup)))
        if note := frames.in_flight_note(plan):
            st.info(note)
        with st.expander("vLLM's figures as a table"):
            vllm_table = frames.vllm_frame(plan)
            st.dataframe(vllm_table, hide_index=True, key="plan_vllm_table")
            downloads("kvviz-vllm-allocation", table=vllm_table)
    for sentence in words.what_if_sentences(result):
        st.info(sentence)


def start_section(plan, result, model_id: str) -> None:
    """Will it start? vLLM's own refusals foreseen, the smallest change, and the command line."""
    st.subheader("Will it start?")
    release = deployment.release(plan.setup).name
    advice = deployment.fit_advice(plan.model, plan.setup) if deployment.refused(result) else ""
    found = will_start.refusals(result, plan.setup, advice, model=plan.model)
    for refusal in found:
        st.error(f"vLLM would not start ({release} rules). In its words:")
        st.code(refusal.message, language=None, wrap_lines=True)
        st.caption(inert(f"Smallest change that starts it: {refusal.fix}"))
    risks = [] if found else will_start.risks(result)
    for risk in risks:
        st.warning(inert(f"At risk ({release} rules): {risk.sentence}"))
    if not found and not risks:
        st.success(f"No start-up failure kvviz foresees for these settings ({release} rules).")
    st.caption(inert(f"Not foreseen: {will_start.NOT_FORESEEN}."))
    st.code(will_start.serve_command(model_id, plan.setup, result), language="bash", wrap_lines=True)


def pasted_log() -> str:
    """The log box below as of this rerun; on a page's first run (the box not drawn yet), the text
    its link carried, so the share link keeps it."""
    log = st.session_state.get("plan_vllm_log")
    if log is None:
        log = links.linked_texts(st.query_params, {"plan_vllm_log": ""}, vllm_log.MAX_LOG_CHARS)[0]["plan_vllm_log"]
    return log


def log_section(plan) -> None:
    """A pasted vLLM start-up log: its KV figures beside kvviz's for this model and these settings."""
    with st.expander("Compare with vLLM's start-up log"):
        text = st.text_area(f"vLLM start-up log (up to {vllm_log.MAX_LOG_CHARS:,} characters; only "
                            "the numbers it prints are read)",
                            ui.text_from_link("plan_vllm_log", "", vllm_log.MAX_LOG_CHARS), height=140,
                            max_chars=vllm_log.MAX_LOG_CHARS, key="plan_vllm_log",
                            placeholder="… Available KV cache memory: 53.57 GiB\n… GPU KV cache size: "
                                        "438,880 tokens, Maximum concurrency for 131,072 tokens per request: 3.35x")
        if not text.strip():
            st.caption("Paste the lines vLLM prints at start-up (any release from 0.6, several workers, a "
                       "failed start-up): kvviz reads its release, settings, memory terms, KV memory, KV "
                       "cache size, concurrency, blocks and how it ended.")
            return
        try:
            rows = log_compare.compare(vllm_log.parse_log(text), plan.model, plan.setup)
        except UserError as err:  # kvviz's own sentences: numbers only, never the pasted text
            st.warning(inert(f"Cannot compare: {err}."))
            return
        # st.table wraps its cells: the "difference" sentences are read whole, never cut
        st.table(pd.DataFrame([vars(r) for r in rows]).rename(columns={
            "figure": "figure", "vllm": "vLLM's log", "kvviz": "kvviz", "verdict": "difference"}).set_index("figure"))
        st.caption("Start-up, KV memory and its terms: kvviz's plan with every setting the log states "
                   "(release, max_model_len, TP/PP, gpu_memory_utilization, …), vLLM's budget rules. "
                   "Tokens, concurrency and blocks: kvviz planned with the KV memory the log printed "
                   "(± its 0.01 GiB rounding), so they test the block arithmetic alone.")


def speed_section(plan) -> None:
    if plan.result.bandwidth and not plan.result.start.starts:
        st.info("No decode-speed bounds: vLLM would not start this deployment (see “Will it start?”).")
        return
    speed = frames.speed_metrics(plan)
    if speed:
        st.subheader("Decode speed bounds")
        metric_row(speed)
    else:
        st.info("No bandwidth given: decode-time bounds are left out.")


# ---------------------------------------------------------------- requests vs context
def curve_section(plan) -> None:
    # one above the other: side by side, at 1280 px the chart's legend and the table were cut
    with st.container():
        top = frames.curve_max_context(plan)
        curve = frames.fit_curve_frame(plan, top)
        curve_chart = charts.fit_curve_chart(curve, plan.context_tokens,
                                                     frames.CURVE_MIN_TOKENS, top)
        draw_altair(st, curve_chart, key="plan_curve_chart")
        downloads("kvviz-requests-vs-context", curve_chart, curve)


def table_section(plan) -> None:
    with st.container():
        table = frames.context_table_frame(plan)
        st.subheader(frames.context_sentence(table))
        people_table(table, {c: frames.TABLE_COLUMNS[c] for c in table.columns},
                     key="plan_context_table")
        downloads("kvviz-capacity-table", table=table)
        st.caption("fit / replica: KV budget per GPU ÷ KV per request, rounded down; as vLLM: the "
                   "same in whole blocks; in all: × DP replicas. Each request holds its whole context "
                   f"(no prefix sharing). Step ≥: the decode-step floor for a batch of "
                   f"{plan.setup.batch}; tok/s: ceilings, from peak bandwidth.")


def kinds_section(plan) -> None:
    st.subheader("Where the bytes per token come from")
    kinds = frames.layer_kinds_frame(plan)
    people_table(kinds, {"layer_kind": ("layer kind", "text"), "layers": ("layers", "count"),
                         "kv_bytes_per_token": ("KV per token", "bytes"),
                         "kv_bytes_per_request": (f"KV per request at {plan.context_tokens:,}",
                                                  "bytes")}, key="plan_kinds_table")
    downloads("kvviz-layer-kinds", table=kinds)
    st.caption("Full layers keep every token; sliding and chunked layers only their window; latent "
               "(MLA) layers one compressed vector per token; state layers a fixed state per request; "
               "shared layers reuse another layer's cache. Whole model, before any TP split.")


# ---------------------------------------------------------------- what-ifs
def what_if_section(rules, plan) -> None:
    st.subheader("What if…")
    what_window = st.number_input("Sliding window for the what-if (tokens)", 2, 10_000_000, 4096, 512,
                                  key="plan_window", bind=URL)
    within_caps(rules, plan_tokens={"the what-if window": int(what_window)})
    what_ifs = frames.what_if_frame(plan, int(what_window))
    for part, chart in zip(("bytes", "fit"), charts.what_if_charts(what_ifs, plan.context_tokens)):
        draw_altair(st, chart, key=f"plan_what_if_{part}")  # two charts: each refits a narrowed window
    what_if_chart = charts.what_if_chart(what_ifs, plan.context_tokens)  # both, for the downloads
    downloads("kvviz-what-ifs", what_if_chart, what_ifs.drop(columns=["order"]))
    with st.expander("What-ifs as a table"):
        people_table(what_ifs, {c: frames.TABLE_COLUMNS[c] for c in what_ifs.columns
                                if c in frames.TABLE_COLUMNS}, key="plan_what_if_table")
    st.caption("Solid bars: the model as configured. KV per token is the same with or without a "
               "window; the window caps how many tokens each sliding layer keeps. Figures per GPU "
               "and per replica of the setup above.")


# ---------------------------------------------------------------- where the time goes
def time_section(plan) -> None:
    st.subheader("Where the time goes")
    bound = frames.launch_bound(plan)
    if bound is not None and not plan.result.start.starts:
        st.write("vLLM would not start this deployment, so there is no decode step to bound.")
        return
    if bound is None:
        st.write("Give the GPU's bandwidth to see the decode-step bound.")
        return
    st.markdown(
        f"A decode step must read every active weight and every cached byte at least once, so it "
        f"takes **at least {frames.fmt_seconds(bound['decode_step_floor_s'])}** here "
        f"(active weights + the batch's cache, divided by peak bandwidth). That is a *lower "
        f"bound*, not a prediction.\n\n"
        f"The GPU also has to be told what to do: one step is roughly {bound['num_kernels']:,} "
        f"small GPU programs (kernels: ~{frames.KERNELS_PER_LAYER} per layer × "
        f"{plan.model.num_layers} layers), each launched by the CPU. At an assumed "
        f"~{frames.LAUNCH_S * 1e6:.0f} µs per launch that is "
        f"**≈ {frames.fmt_seconds(bound['launch_s'])}** of launching per step "
        f"(a rough estimate, not measured). {BOUND_TEXT[bound['bound']]}\n\n"
        + WHY_TEXT[bound["bound"]])
