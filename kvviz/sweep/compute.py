"""Measured sweeps over prompt length × batch size on the loaded model, one row per point.

`run_sweep` runs the cached engine (`kvviz.engine.loop.generate`, chat template off, EOS ignored)
once per (prompt_tokens, batch) point on a prompt of exactly `prompt_tokens` tokens, and yields a
plain `SweepRow` as each point finishes, so a page can show progress and keep what was measured
if the user stops. A point that runs out of memory is recorded with status "oom", memory is
freed, and the sweep goes on; points that need at least as many tokens *and* sequences as one
that ran out are recorded as "skipped" without running.

The pure helpers below the runner need no model: default prompt lengths, the time-left estimate,
the achieved memory bandwidth of a decode step ("where the time goes") and the predicted
out-of-memory boundary from `kvviz.planner.capacity`.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Iterator

import pandas as pd
import torch

from kvviz.engine import loop
from kvviz.core import layout
from kvviz.core import spec
from kvviz.core.trace import achieved_bandwidth_bytes_per_s  # noqa: F401 - the sweep's own
from kvviz.core.config import RunConfig
from kvviz.core.events import StepEvent
from kvviz.engine.models import LoadedModel
from kvviz.core.trace import mode_summary, percentile
from kvviz.core.errors import UserError, out_of_memory
from kvviz.core import assets, budget, catalog
from kvviz.engine.cost import ModelWork, model_work  # noqa: F401 - the sweep's own

STATUSES = ("ok", "oom", "skipped", "error")
MIN_PROMPT_TOKENS = 64  # first default prompt length
OPTION_MIN_TOKENS = 16  # smallest prompt length offered
DEVICE_CAP_TOKENS = {"cpu": 2048, "mps": 8192, "cuda": 32768}  # default sweeps stay this short
DEFAULT_BATCHES = {"cpu": (1,), "mps": (1, 4), "cuda": (1, 8, 64)}
BATCH_OPTIONS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SOURCE_PRESET = "Long document"  # the assets/prompts.json text repeated into sweep prompts
UNKNOWN_CONTEXT_TOKENS = 131072  # options' ceiling when a config states no max positions

Point = tuple[int, int]  # (prompt_tokens, batch)


@dataclass(frozen=True)
class SweepSettings:
    prompt_tokens: tuple[int, ...]  # prompt lengths, tokens per sequence
    batches: tuple[int, ...]  # batch sizes (copies of the prompt)
    new_tokens: int = 16  # tokens generated per sequence and point (>= 2: one prefill, 1+ decode)

    def points(self) -> list[Point]:
        """Every (prompt_tokens, batch), batch-major, shortest prompt first."""
        return [(p, b) for b in sorted(set(self.batches)) for p in sorted(set(self.prompt_tokens))]


@dataclass(frozen=True, kw_only=True)
class SweepRow:
    """One measured point; the measured fields are None unless status is "ok"."""

    prompt_tokens: int  # tokens in each prompt (exactly; special tokens included)
    batch: int  # sequences run together
    new_tokens: int  # tokens asked for per sequence (prefill's token included)
    status: str  # "ok", "oom" (ran out of memory), "skipped" (a smaller point ran out), "error"
    prefill_formula_bytes: int  # 2 x layers x kv_heads x head_dim x prompt_tokens x batch x bytes
    end_formula_bytes: int  # the same at prompt_tokens + new_tokens - 1 cached tokens
    prefill_kv_bytes: int | None = None  # cache bytes measured after the prefill
    end_kv_bytes: int | None = None  # cache bytes measured after the last step
    ttft_ms: float | None = None  # time to first token: the prefill step
    itl_median_ms: float | None = None  # median inter-token latency over the decode steps
    tokens_per_s: float | None = None  # new_tokens x batch / total time
    decode_bandwidth_bytes_per_s: float | None = None  # median (weights + cache) / step time
    peak_cuda_bytes: int | None = None  # torch.cuda.max_memory_allocated over the point (CUDA)
    wall_s: float = 0.0  # wall time of the point, failures included
    message: str = ""  # why the point did not run (empty when ok)


# ---------------------------------------------------------------- prompts of exactly N tokens


def source_text() -> str:
    presets = json.loads((assets.FOLDER / "prompts.json").read_text(encoding="utf-8"))
    return presets[SOURCE_PRESET]["prompt"]


def count_tokens(tokenizer, text: str) -> int:
    """Tokens the engine will feed for `text` (chat template off: special tokens added)."""
    return len(tokenizer(text, add_special_tokens=True)["input_ids"])


def exact_prompt(tokenizer, num_tokens: int, text: str | None = None) -> str:
    """A prompt that tokenizes to exactly `num_tokens`: `text` repeated, cut by token ids.

    Decoding a cut and encoding it again may merge or split a token at the cut, so the cut moves
    until the count matches, from a few start offsets; UserError when none matches.
    """
    ids = tokenizer(text or source_text(), add_special_tokens=False)["input_ids"]
    ids = ids * (num_tokens // max(len(ids), 1) + 2)
    for start in range(8):
        found = _fit_cut(tokenizer, ids[start:], num_tokens)
        if found is not None:
            return found
    raise UserError(f"cannot build a prompt of exactly {num_tokens} tokens with this tokenizer")


def _fit_cut(tokenizer, ids: list[int], num_tokens: int) -> str | None:
    cut, tried = num_tokens - count_tokens(tokenizer, ""), set()
    while 0 < cut <= len(ids) and cut not in tried:
        tried.add(cut)
        text = tokenizer.decode(ids[:cut])
        miss = num_tokens - count_tokens(tokenizer, text)
        if miss == 0:
            return text
        cut += miss
    return None


def point_config(tokenizer, prompt_tokens: int, batch: int, new_tokens: int) -> RunConfig:
    """Greedy, no chat template, EOS ignored: every point runs exactly `new_tokens` steps."""
    return RunConfig(prompts=(exact_prompt(tokenizer, prompt_tokens),), batch=batch,
                     max_new_tokens=new_tokens, chat_template=False, stop_on_eos=False)


# ---------------------------------------------------------------- the runner


def run_sweep(lm: LoadedModel, settings: SweepSettings, done: Iterable[SweepRow] = (),
              should_stop: Callable[[], bool] | None = None,
              warmup: bool = True) -> Iterator[SweepRow]:
    """Yield one SweepRow per point of `settings` not in `done` (rows measured before with the
    same settings, e.g. by a cancelled sweep), in `SweepSettings.points` order.

    Stops early, without a row for the point in progress, once `should_stop()` is true.
    """
    if settings.new_tokens < 2:
        raise UserError("new tokens per point must be at least 2 (a prefill and a decode step)")
    done = list(done)
    failed = [(r.prompt_tokens, r.batch) for r in done if r.status == "oom"]
    points = pending_points(settings, done)
    if warmup and points:
        warm_up(lm)
    for point in points:
        if should_stop is not None and should_stop():
            return
        row = run_point(lm, point, settings.new_tokens, should_stop, failed)
        if row is None:
            return
        if row.status == "oom":
            failed.append(point)
        yield row


def warm_up(lm: LoadedModel) -> None:
    """One short unrecorded run, so one-time costs (kernel setup, allocator growth) stay out of
    the first point. A failure here is left for the points to record."""
    measure(lm, (16, 1), 2, None)


def run_point(lm: LoadedModel, point: Point, new_tokens: int,
              should_stop: Callable[[], bool] | None = None,
              failed: Iterable[Point] = ()) -> SweepRow | None:
    """Measure one point; None when stopped part-way."""
    prompt_tokens, batch = point
    base = dict(prompt_tokens=prompt_tokens, batch=batch, new_tokens=new_tokens,
                **formula_fields(lm, prompt_tokens, batch, new_tokens))
    blocker = next((f for f in failed if f[0] <= prompt_tokens and f[1] <= batch), None)
    if blocker is not None:
        return SweepRow(status="skipped", message=f"needs more memory than {blocker[0]} tokens × "
                                                  f"batch {blocker[1]}, which ran out", **base)
    started = time.perf_counter()
    events, status, message = measure(lm, point, new_tokens, should_stop)
    if status == "ok" and len(events) < new_tokens:
        return None
    wall_s = time.perf_counter() - started
    if status != "ok":
        return SweepRow(status=status, message=message, wall_s=wall_s, **base)
    return SweepRow(status="ok", wall_s=wall_s, peak_cuda_bytes=peak_cuda_bytes(lm.device),
                    **measured_fields(events, lm.weight_bytes), **base)


def measure(lm: LoadedModel, point: Point, new_tokens: int,
            should_stop: Callable[[], bool] | None) -> tuple[list[StepEvent], str, str]:
    """(events, status, message): runs the engine, turning out-of-memory into status "oom"."""
    events: list[StepEvent] = []
    status, message = "ok", ""
    reset_peak(lm.device)
    steps = None
    try:
        cfg = point_config(lm.tokenizer, point[0], point[1], new_tokens)
        steps = loop.generate(lm, cfg, "cached", should_stop)
        events.extend(steps)
    except Exception as exc:  # noqa: BLE001 - classified, re-raised unless expected
        status = failure_status(exc)
        if status is None:
            raise
        message = first_line(exc)
    finally:
        if steps is not None:
            steps.close()
    if status != "ok":
        events.clear()
        loop.free_device_memory(lm.device)  # collects first: the traceback held tensors
    return events, status, message


def failure_status(exc: BaseException) -> str | None:
    """"oom" for out-of-memory, "error" for a request kvviz refused (a UserError, in its own
    words), else None: anything else (a library's ValueError included) stops the sweep, and the
    page says so as it says any failure (kvviz.app.failures: no internals when hosted)."""
    if out_of_memory(exc):
        return "oom"
    return "error" if isinstance(exc, UserError) else None


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


def formula_fields(lm: LoadedModel, prompt_tokens: int, batch: int, new_tokens: int) -> dict:
    """Textbook bytes after the prefill and at the end (known even for points that fail)."""
    specs = layout.layer_specs(lm.model.config)
    elem_bytes = torch.finfo(lm.dtype).bits // 8
    return {"prefill_formula_bytes": spec.formula_bytes(specs, prompt_tokens, batch, elem_bytes),
            "end_formula_bytes": spec.formula_bytes(specs, prompt_tokens + new_tokens - 1, batch, elem_bytes)}


def measured_fields(events: list[StepEvent], weight_bytes: int) -> dict:
    """The measured SweepRow fields from one point's events (via trace.mode_summary)."""
    numbers = mode_summary(events)
    return {"prefill_kv_bytes": events[0].kv_bytes, "end_kv_bytes": events[-1].kv_bytes,
            "ttft_ms": numbers.ttft_ms, "itl_median_ms": numbers.itl_median_ms,
            "tokens_per_s": numbers.tokens_per_s,
            "decode_bandwidth_bytes_per_s": percentile(decode_bandwidths(events, weight_bytes), 50)}


# ---------------------------------------------------------------- the device


@dataclass(frozen=True, kw_only=True)
class DeviceFacts:
    """What the charts need to know about the device, read once per model."""

    name: str  # the CUDA device's name, else "cpu" / "mps"
    memory_bytes: int | None  # total CUDA memory; None elsewhere (no limit is predicted)
    preset: str | None  # the matching GPU preset of assets/gpus.json, if any
    peak_bandwidth_bytes_per_s: float | None  # the preset's peak memory bandwidth
    kv_budget_bytes: int | None  # memory - weights - overhead: where the cache must fit
    bytes_per_token: int  # cache bytes per token of one sequence, every layer
    specs: tuple = ()  # the model's cache specs (kvviz.core.spec), one per layer: every figure's formula
    elem_bytes: float = 4  # bytes per cached value in the run's dtype


def device_facts(lm: LoadedModel) -> DeviceFacts:
    name, memory = device_name(lm.device), device_memory_bytes(lm.device)
    preset = gpu_preset(name, memory) if lm.device.type == "cuda" else None
    return DeviceFacts(name=name, memory_bytes=memory, preset=preset and preset["name"],
                       peak_bandwidth_bytes_per_s=preset and preset["bandwidth_bytes_per_s"],
                       kv_budget_bytes=kv_budget_bytes(memory, lm.weight_bytes), bytes_per_token=bytes_per_token(lm),
                       specs=layout.layer_specs(lm.model.config), elem_bytes=torch.finfo(lm.dtype).bits // 8)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_cuda_bytes(device: torch.device) -> int | None:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def device_memory_bytes(device: torch.device) -> int | None:
    """Total memory of a CUDA device; None elsewhere (no meaningful limit to predict)."""
    if device.type != "cuda":
        return None
    return torch.cuda.get_device_properties(device).total_memory


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def max_positions(lm: LoadedModel) -> int | None:
    """The model's context limit (max_position_embeddings), when its config states one."""
    text = lm.model.config.get_text_config(decoder=True)
    return getattr(text, "max_position_embeddings", None)


def bytes_per_token(lm: LoadedModel) -> int:
    """Cache bytes one token of one sequence adds, every layer (windows ignored)."""
    return int(spec.bytes_per_token(layout.layer_specs(lm.model.config), torch.finfo(lm.dtype).bits // 8))


# ---------------------------------------------------------------- pure helpers


def prompt_length_options(max_positions: int | None,
                          max_prompt_tokens: int | None = None) -> list[int]:
    """Powers of two from OPTION_MIN_TOKENS below the model's context limit (and at most
    `max_prompt_tokens`, a host's cap, when given)."""
    top = (max_positions or UNKNOWN_CONTEXT_TOKENS) - 1
    top = top if max_prompt_tokens is None else min(top, max_prompt_tokens)
    options, n = [], OPTION_MIN_TOKENS
    while n <= top:
        options.append(n)
        n *= 2
    return options


def default_prompt_lengths(max_positions: int | None, device_type: str, new_tokens: int = 16,
                           max_prompt_tokens: int | None = None) -> list[int]:
    """Log-spaced (doubling) from 64 up to min(context limit - new_tokens, the device's cap,
    `max_prompt_tokens`)."""
    top = min((max_positions or UNKNOWN_CONTEXT_TOKENS) - new_tokens,
              DEVICE_CAP_TOKENS.get(device_type, DEVICE_CAP_TOKENS["cpu"]),
              max_prompt_tokens or UNKNOWN_CONTEXT_TOKENS)
    lengths = [n for n in prompt_length_options(max_positions) if MIN_PROMPT_TOKENS <= n <= top]
    return lengths or [max(1, min(top, MIN_PROMPT_TOKENS))]


def default_batches(device_type: str) -> list[int]:
    return list(DEFAULT_BATCHES.get(device_type, DEFAULT_BATCHES["cpu"]))


def pending_points(settings: SweepSettings, rows: Iterable[SweepRow]) -> list[Point]:
    """The points of `settings` that `rows` (measured with the same settings) do not cover yet."""
    done = {(r.prompt_tokens, r.batch) for r in rows}
    return [p for p in settings.points() if p not in done]


@dataclass(frozen=True)
class PointTimeModel:
    """What a point costs, fitted to the points measured so far (docs: see `eta_s`)."""

    seconds_per_flop: float  # prefill time / ModelWork.prefill_flops, least squares
    step_s: float  # a decode step reading no cache ...
    step_s_per_token: float  # ... plus this per cached token of the batch (>= 0)
    overhead_s: float  # per point: wall time outside model steps (building the prompt, freeing)
    work: ModelWork

    @classmethod
    def fit(cls, rows: Iterable[SweepRow], work: ModelWork) -> PointTimeModel | None:
        ok = [r for r in rows if r.status == "ok" and r.ttft_ms and r.itl_median_ms]
        if not ok:
            return None
        flops = [work.prefill_flops(r.prompt_tokens, r.batch) for r in ok]
        per_flop = sum(r.ttft_ms / 1000 * f for r, f in zip(ok, flops)) / sum(f * f for f in flops)
        step_s, per_token = fit_nonnegative_slope(
            [decode_context(r.prompt_tokens, r.batch, r.new_tokens) for r in ok],
            [r.itl_median_ms / 1000 for r in ok])
        overheads = sorted(max(r.wall_s - model_s(r), 0.0) for r in ok)
        return cls(per_flop, step_s, per_token, overheads[len(overheads) // 2], work)

    def predict_s(self, prompt_tokens: int, batch: int, new_tokens: int) -> float:
        prefill = self.seconds_per_flop * self.work.prefill_flops(prompt_tokens, batch)
        step = self.step_s + self.step_s_per_token * decode_context(prompt_tokens, batch, new_tokens)
        return prefill + (new_tokens - 1) * step + self.overhead_s


def fit_nonnegative_slope(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of y on x, the slope at least 0 (else: the mean, flat)."""
    if len(set(xs)) < 2:
        return sum(ys) / len(ys), 0.0
    fit = statistics.linear_regression(xs, ys)
    if fit.slope < 0 or fit.intercept < 0:
        return (sum(ys) / len(ys), 0.0) if fit.slope < 0 else (0.0, sum(ys) / sum(xs))
    return fit.intercept, fit.slope


def decode_context(prompt_tokens: int, batch: int, new_tokens: int) -> float:
    """Cache positions a median decode step reads (whole batch)."""
    return batch * (prompt_tokens + new_tokens / 2)


def model_s(row: SweepRow) -> float:
    """A measured point's time in model steps: its prefill and its decode steps (median each)."""
    return (row.ttft_ms + (row.new_tokens - 1) * row.itl_median_ms) / 1000


def eta_s(rows: Iterable[SweepRow], remaining: Iterable[Point], new_tokens: int,
          work: ModelWork) -> float | None:
    """Seconds left, None before any point was measured. Each remaining point is predicted from
    the points measured so far: its prefill in proportion to its arithmetic (ModelWork: linear
    in tokens, plus attention's quadratic part, which long prompts feel), its decode steps as a
    line in the cache they read, plus the median per-point overhead seen so far."""
    model = PointTimeModel.fit(rows, work)
    if model is None:
        return None
    return sum(model.predict_s(p, b, new_tokens) for p, b in remaining)


def decode_bandwidths(events: Iterable[StepEvent], weight_bytes: int) -> list[float]:
    """Achieved bandwidth of every decode step; the cache read is the step's cache (kv_bytes)."""
    values = (achieved_bandwidth_bytes_per_s(weight_bytes, e.kv_bytes, e.step_ms)
              for e in events if e.phase == "decode")
    return [v for v in values if v is not None]


def gpu_preset(name: str, memory_bytes: int | None = None) -> dict | None:
    """The GPU preset for a CUDA device name ("NVIDIA H100 80GB HBM3" -> "H100 SXM").

    An exact name or alias first (catalog.find_gpu); else the presets whose family (first word
    of the name), name or alias appears in the device name, the one closest in memory when
    `memory_bytes` is given ("A100-SXM4-40GB" -> "A100 40GB"), else the longest match.
    """
    exact = catalog.find_gpu(name)
    if exact is not None:
        return exact
    found = [(gpu, len(key)) for gpu in catalog.load_gpus() for key in _preset_keys(gpu)
             if key in _alnum(name)]
    if not found:
        return None
    if memory_bytes is not None:
        return min(found, key=lambda f: (abs(f[0]["memory_bytes"] - memory_bytes), -f[1]))[0]
    return max(found, key=lambda f: f[1])[0]


def _preset_keys(gpu: dict) -> set[str]:
    """Name, aliases and family ("A100"); a key without a digit ("RTX") names no model."""
    names = [gpu["name"], gpu["name"].split()[0], *gpu.get("aliases", [])]
    return {key for key in map(_alnum, names) if any(ch.isdigit() for ch in key)}


def _alnum(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def kv_budget_bytes(gpu_bytes: int | None, weight_bytes: int,
                    overhead_fraction: float = budget.DEFAULT_OVERHEAD_FRACTION) -> int | None:
    """Device memory left for the cache after weights and overhead (budget.kv_budget_bytes)."""
    if gpu_bytes is None:
        return None
    return budget.kv_budget_bytes(gpu_bytes, weight_bytes, overhead_fraction)


def predicted_max_prompt_tokens(budget_bytes: int, specs, elem_bytes: float, batch: int,
                                new_tokens: int, limit: int = 1 << 31) -> int | None:
    """Longest prompt whose end-of-run cache (spec.formula_bytes at prompt + new_tokens - 1
    tokens, whole batch) fits in the budget: the same formula as `end_formula_bytes`, so this
    boundary and the `predicted_oom` flag always agree. None when the cache stops growing (every
    layer sliding, chunked or state) and fits at `limit` tokens: no prompt length runs out."""
    def fits(prompt: int) -> bool:
        return spec.formula_bytes(specs, prompt + new_tokens - 1, batch, elem_bytes) <= budget_bytes
    if fits(limit):
        return None
    if not fits(1):
        return 0
    lo, hi = 1, limit  # invariant: fits(lo), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def boundary_rows(rows: Iterable[SweepRow], device: DeviceFacts, new_tokens: int) -> list[dict]:
    """Per batch: the predicted longest prompt that fits, and the shortest that really ran out."""
    rows = list(rows)
    table = []
    for batch in sorted({r.batch for r in rows}):
        oom = [r.prompt_tokens for r in rows if r.batch == batch and r.status == "oom"]
        table.append({"batch": batch,
                      "predicted_max_prompt_tokens": predicted_max_prompt_tokens(
                          device.kv_budget_bytes, device.specs, device.elem_bytes, batch, new_tokens),
                      "first_oom_prompt_tokens": min(oom) if oom else None})
    return table


def rows_frame(rows: Iterable[SweepRow], budget_bytes: int | None = None) -> pd.DataFrame:
    """One row per point, SweepRow's fields as columns, plus `predicted_oom`: True where the
    formula's end-of-run cache exceeds `budget_bytes` (always False without a budget)."""
    df = pd.DataFrame([asdict(r) for r in rows], columns=list(SweepRow.__dataclass_fields__))
    over = df["end_formula_bytes"] > budget_bytes if budget_bytes is not None else False
    return df.assign(predicted_oom=over)
