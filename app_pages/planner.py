"""Capacity planner: how many requests of T tokens fit on a GPU, and what bounds a decode step.

Widgets and layout only: the arithmetic is kvviz.capacity's, the tables kvviz.planner_frames',
the charts kvviz.planner_charts'. Every widget but the pasted config is bound to the URL
(`bind="query-params"`, the key is the parameter name), so a link reproduces the view; the
config text is left out of the URL (long, and not ours to echo).
"""
import streamlit as st

from kvviz import capacity, planner_charts, planner_frames, units

CATALOG = {e["name"]: e for e in capacity.load_catalog()}
GPUS = {g["name"]: g for g in capacity.load_gpus()}
CUSTOM_GPU = "Custom"
SOURCES = ("Catalog", "Paste config.json")
URL = "query-params"
BOUND_TEXT = {
    "kernel launches": "Here launching takes longer than reading: the step is likely bound by "
                       "**kernel launches**, not bandwidth.",
    "memory bandwidth": "Here reading takes longer than launching: the step is likely bound by "
                        "**memory bandwidth**, and the floor is a fair guide.",
    "both": "Here the two are within a factor of two: **both** matter, and which one wins "
            "depends on the software stack.",
}

st.title("Capacity planner")
st.caption("How many concurrent requests fit on one GPU, and how fast decode can possibly be. "
           "Computed from the model's config (kvviz.capacity, shared with `kvviz plan`), not measured.")

# ---------------------------------------------------------------- inputs
model_col, gpu_col, dtype_col, load_col = st.columns(4)
with model_col:
    source = st.radio("Model from", SOURCES, horizontal=True, key="plan_source", bind=URL)
    if source == SOURCES[0]:
        name = st.selectbox("Model", list(CATALOG), index=list(CATALOG).index("Llama-3.1-8B"),
                            key="plan_model", bind=URL)
        st.caption(f"[{CATALOG[name]['hf_id']}](https://huggingface.co/{CATALOG[name]['hf_id']}) · "
                   f"{CATALOG[name]['num_parameters'] / 1e9:.2f} B parameters")
    else:
        pasted = st.text_area("config.json", height=160, key="plan_config",
                              placeholder='{"num_hidden_layers": 32, "num_attention_heads": 32, …}')
        params_b = st.number_input("Parameters (billions; config.json does not say)", 0.0, 10_000.0,
                                   0.0, 0.1, format="%.3f", key="plan_params_b", bind=URL)
with gpu_col:
    gpu_name = st.selectbox("GPU", [*GPUS, CUSTOM_GPU], index=list(GPUS).index("H100 SXM"),
                            key="plan_gpu", bind=URL)
    if gpu_name == CUSTOM_GPU:
        gpu_gb = st.number_input("Memory (GB = 1e9 B)", 1.0, 10_000.0, 80.0, 1.0,
                                 key="plan_gpu_gb", bind=URL)
        bandwidth_gbs = st.number_input("Bandwidth (GB/s; 0 = unknown)", 0.0, 100_000.0, 2000.0,
                                        100.0, key="plan_bandwidth_gbs", bind=URL)
        gpu_bytes, bandwidth = int(gpu_gb * 1e9), bandwidth_gbs * 1e9
    else:
        gpu = GPUS[gpu_name]
        gpu_bytes, bandwidth = gpu["memory_bytes"], gpu["bandwidth_bytes_per_s"]
        st.caption(f"{gpu['memory_gb']:,} GB · {gpu['bandwidth_gb_per_s']:,} GB/s peak")
with dtype_col:
    weight_dtype = st.selectbox("Weight dtype", planner_frames.PLANNER_KV_DTYPES, index=1,
                                key="plan_weight_dtype", bind=URL)
    kv_dtype = st.selectbox("KV dtype", planner_frames.PLANNER_KV_DTYPES, index=1,
                            key="plan_kv_dtype", bind=URL)
    st.caption(f"int8 and int4 count one fp16 scale and one fp16 zero point per "
               f"{capacity.QUANT_GROUP_SIZE} values (+{capacity.QUANT_GROUP_OVERHEAD_BYTES} B per "
               f"group), as transformers' QuantizedCache stores them; fp8 has none.")
with load_col:
    overhead = st.slider("Runtime overhead (fraction of GPU memory)", 0.0, 0.9,
                         capacity.DEFAULT_OVERHEAD_FRACTION, 0.01, key="plan_overhead", bind=URL,
                         help="Activations, CUDA context, fragmentation. 0.1 is like vLLM's "
                              "gpu_memory_utilization=0.9.")
    context = st.number_input("Context per request, T (tokens)", 1, 10_000_000, 2000, 500,
                              key="plan_context", bind=URL)
    batch = st.number_input("Batch (requests decoded together)", 1, 1_000_000, 1, 1,
                            key="plan_batch", bind=URL)

# ---------------------------------------------------------------- the model
if source == SOURCES[0]:
    shape = capacity.catalog_shape(name)
elif not pasted.strip():
    st.info("Paste the contents of a model's config.json above.")
    st.stop()
else:
    try:
        shape = planner_frames.shape_from_pasted_config(pasted, params=int(params_b * 1e9))
    except planner_frames.ConfigError as err:
        st.error(str(err))  # plain text built by kvviz; never the pasted text
        st.stop()
plan = planner_frames.Plan(shape, gpu_bytes, bandwidth or None, weight_dtype, kv_dtype, overhead,
                           int(context), int(batch))

window = (f", sliding window {shape.sliding_window:,} on {shape.num_sliding_layers} of "
          f"{shape.num_layers} layers" if shape.num_sliding_layers else "")
st.caption(f"**{shape.name}**: {shape.num_layers} layers, {shape.num_attention_heads} heads, "
           f"{shape.num_kv_heads} KV heads ({shape.attention_kind}), head_dim {shape.head_dim}{window}"
           + (f", trained up to {shape.max_position:,} tokens" if shape.max_position else ""))

# ---------------------------------------------------------------- headline figures
metrics = planner_frames.headline_metrics(plan, units.fmt_bytes)
for row in (metrics[:3], metrics[3:]):  # memory, then bandwidth bounds (when known)
    for col, m in zip(st.columns(len(row)) if row else [], row):
        col.metric(m.label, m.value, help=m.help, border=True)
st.caption(f"GPU {gpu_bytes / 1e9:,.0f} GB ({units.fmt_bytes(gpu_bytes)}) − weights {units.fmt_bytes(plan.weight_bytes)} "
           f"({weight_dtype}) − overhead {units.fmt_bytes(plan.overhead_bytes)} → "
           f"**{units.fmt_bytes(plan.kv_budget_bytes)} for KV caches**.")
if not shape.weight_params:
    st.warning("Parameter count unknown: the weights are counted as 0 bytes. "
               "Enter it above to include them.")
if plan.kv_budget_bytes == 0:
    st.warning("The weights and overhead fill the GPU: no request fits.")
if shape.max_position and plan.context_tokens > shape.max_position:
    st.warning(f"T = {plan.context_tokens:,} is longer than the model was trained for "
               f"({shape.max_position:,} tokens).")
if not bandwidth:
    st.info("No bandwidth given: decode-time bounds are left out.")

# ---------------------------------------------------------------- requests vs context
curve_col, table_col = st.columns([3, 2])
with curve_col:
    top = planner_frames.curve_max_context(plan)
    st.altair_chart(planner_charts.fit_curve_chart(
        planner_frames.fit_curve_frame(plan, top), plan.context_tokens,
        planner_frames.CURVE_MIN_TOKENS, top), key="plan_curve_chart")
with table_col:
    table = planner_frames.context_table_frame(plan)
    st.subheader(planner_frames.context_sentence(table))
    shown = table.assign(kv_bytes_per_request=table["kv_bytes_per_request"].map(units.fmt_bytes))
    st.dataframe(shown, hide_index=True, key="plan_context_table", column_config={
        "context_tokens": st.column_config.NumberColumn("context", format="localized"),
        "kv_bytes_per_request": st.column_config.TextColumn("KV / request"),
        "max_concurrent_requests": st.column_config.NumberColumn("fit", format="localized"),
        "decode_step_floor_ms": st.column_config.NumberColumn(
            "step ≥ ms", format="%.2f", help=f"decode step floor, batch {plan.batch}"),
        "tokens_per_s_per_request_ceiling": st.column_config.NumberColumn(
            "tok/s/req ≤", format="%.0f", help="ceiling per request"),
        "tokens_per_s_aggregate_ceiling_at_max": st.column_config.NumberColumn(
            "tok/s all ≤", format="%.0f", help="ceiling, every request that fits decoding"),
    })
    st.caption("Each request is assumed to hold its whole context (no prefix sharing). "
               "Times are lower bounds, rates ceilings, from peak bandwidth.")

# ---------------------------------------------------------------- what-ifs
st.subheader("What if…")
what_window = st.number_input("Sliding window for the what-if (tokens)", 1, 10_000_000, 4096, 512,
                              key="plan_window", bind=URL)
what_ifs = planner_frames.what_if_frame(plan, int(what_window))
st.altair_chart(planner_charts.what_if_chart(what_ifs, plan.context_tokens), key="plan_what_if_chart")
with st.expander("What-ifs as a table"):
    st.dataframe(what_ifs.drop(columns=["order"]), hide_index=True, key="plan_what_if_table")
st.caption("Solid bars: the model as configured. KV per token is the same with or without a "
           "window; the window caps how many tokens each sliding layer keeps.")

# ---------------------------------------------------------------- where the time goes
st.subheader("Where the time goes")
bound = planner_frames.launch_bound(plan)
if bound is None:
    st.write("Give the GPU's bandwidth to see the decode-step bound.")
else:
    st.markdown(
        f"A decode step must read every weight and every cached byte at least once, so it takes "
        f"**at least {planner_frames.fmt_seconds(bound['decode_step_floor_s'])}** here "
        f"(weights + the batch's cache, divided by peak bandwidth). That is a *lower bound*, "
        f"not a prediction.\n\n"
        f"The GPU also has to be told what to do: one step is roughly {bound['num_kernels']:,} "
        f"small GPU programs (kernels: ~{planner_frames.KERNELS_PER_LAYER} per layer × "
        f"{shape.num_layers} layers), each launched by the CPU. At an assumed "
        f"~{planner_frames.LAUNCH_S * 1e6:.0f} µs per launch that is "
        f"**≈ {planner_frames.fmt_seconds(bound['launch_s'])}** of launching per step "
        f"(a rough estimate, not measured). {BOUND_TEXT[bound['bound']]}\n\n"
        "A small model on a big GPU reads its few hundred megabytes in microseconds, far less "
        "time than it takes to launch the kernels, so the GPU sits idle between them: the step "
        "time stays flat as the context grows and the achieved bandwidth is a small fraction "
        "of peak. Only large models, long contexts or big batches move enough bytes to reach "
        "the bandwidth floor. CUDA graphs and `torch.compile` cut launch overhead.")
