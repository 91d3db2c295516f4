"""The published vLLM start-ups of tests/planner/data/vllm_startups.json, planned by kvviz.

`plan_run` turns one published run into kvviz's Setup (the inputs its source states, vLLM's
defaults for the rest) and plans it; `figures` sets kvviz's budget and verdict beside vLLM's.
test_vllm_startups.py asserts the agreement; `python -m tests.planner.startups` prints the table
docs/planner.md carries.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from kvviz.core import catalog
from kvviz.planner import configs, deployment, parallel

GIB = 2**30
DATA = Path(__file__).resolve().parent / "data" / "vllm_startups.json"
# GPUs the published runs name that kvviz has no preset for: their architecture (MXFP4 layout) and
# whether their boards link GPUs peer to peer (consumer cards do not)
UNLISTED_GPUS = {"RTX 3090": ("ampere", False), "RTX 4060 (8 GB)": ("ada", False)}


def runs() -> list[dict]:
    return json.loads(DATA.read_text(encoding="utf-8"))["runs"]


def _gpu(run: dict) -> tuple[str, int, str | None, bool]:
    """(name, bytes as the device reports them, arch, p2p): the log's total when it prints one."""
    preset = catalog.find_gpu(run["gpu"]) if run.get("gpu") else None
    name = preset["name"] if preset else run["gpu_name"]
    arch, p2p = (preset["arch"], preset["p2p"]) if preset else UNLISTED_GPUS[name]
    if run.get("gpu_total_gib"):
        total = round(run["gpu_total_gib"] * GIB)
    elif run.get("gpu_usable_gib"):  # "total × utilization = usable", as the reporter quotes it
        total = round(run["gpu_usable_gib"] / run["gpu_memory_utilization"] * GIB)
    else:
        total = catalog.device_bytes(preset)
    return name, total, arch, p2p


def setup(run: dict) -> deployment.Setup:
    """kvviz's Setup for a published run: what its source states, vLLM's defaults for the rest."""
    name, total, arch, p2p = _gpu(run)
    weights = deployment.CHECKPOINT if run["weights"] == "checkpoint" else run["weights"]
    kv = "bf16" if run["kv_cache_dtype"] == "auto" else run["kv_cache_dtype"]
    length = run["max_model_len"]
    return deployment.Setup(
        gpu_name=name, gpu_bytes=total, gpu_arch=arch, gpu_p2p=p2p,
        par=parallel.Parallel(run["tp"], run["pp"], 1), kv_dtype=kv, weight_dtype=weights,
        context_tokens=min(2000, length or 2000), max_model_len=length,
        gpu_memory_utilization=run["gpu_memory_utilization"], max_num_seqs=run["max_num_seqs"],
        max_num_batched_tokens=run["max_num_batched_tokens"], vllm_version=run["vllm_version"])


def vllm_kv_gib(run: dict) -> tuple[float | None, str]:
    """vLLM's KV memory per GPU and where it comes from: the smallest worker's (what vLLM keeps)
    where the source gives it, else the figure its log prints, or, where the
    source prints the terms but not the sum, vLLM's own formula of them (requested − weights −
    activation peak − non-torch, gpu_worker.determine_available_memory)."""
    v = run["vllm"]
    if v.get("kv_gib_min_worker") is not None:  # vLLM keeps the smallest worker's blocks
        return v["kv_gib_min_worker"], "the smallest worker's, from its tokens"
    if v.get("kv_gib") is not None:
        return v["kv_gib"], "printed"
    terms = ("weights_gib", "activation_gib", "non_torch_gib")
    if run.get("gpu_total_gib") and all(v.get(t) is not None for t in terms):
        requested = math.ceil(run["gpu_total_gib"] * run["gpu_memory_utilization"] * 100) / 100
        return round(requested - sum(v[t] for t in terms), 2), "from its printed terms"
    if run.get("gpu_total_gib") and v.get("peak_torch_gib") is not None:  # 0.6.4's one-line form
        used = run["gpu_total_gib"] * run["gpu_memory_utilization"]
        return round(used - v["peak_torch_gib"] - v["non_torch_gib"], 2), "from its printed terms"
    return None, "not printed"


@dataclass(frozen=True)
class Figures:
    """One run: vLLM's figures beside kvviz's."""

    run_id: str
    version: str
    setup_words: str
    vllm_kv_gib: float | None
    kv_source: str
    kvviz_kv_gib: float
    error_pct: float | None  # (kvviz − vLLM) / vLLM, where vLLM's figure is positive
    vllm_weights_gib: float | None
    kvviz_weights_gib: float
    vllm_outcome: str
    kvviz_verdict: str  # starts / at risk / refused
    kvviz_reasons: tuple[str, ...]

    @property
    def vllm_started(self) -> bool:
        return self.vllm_outcome == "started"

    @property
    def agrees(self) -> bool:
        """vLLM started ↔ kvviz says it starts (at risk included); refused or failed ↔ refused."""
        return self.vllm_started == (self.kvviz_verdict != "refused")


def figures(run: dict) -> Figures:
    model = configs.catalog_model(run["catalog"])
    plan = deployment.plan_setup(model, setup(run))
    budget = plan.vllm_budget
    ours = (budget.kv_bytes_signed if budget else plan.per_gpu.kv_budget_bytes) / GIB
    theirs, source = vllm_kv_gib(run)
    error = (ours - theirs) / theirs * 100 if theirs is not None and theirs > 0 else None
    reasons = tuple(c.kind for c in plan.start.failures + plan.start.risks)
    words = f"{run['model']} · {run['tp']}×TP {run['pp']}×PP · {run.get('gpu') or run['gpu_name']}"
    return Figures(run["id"], run["vllm_version"], words, theirs, source, round(ours, 2),
                   None if error is None else round(error, 1), run["vllm"].get("weights_gib"),
                   round(plan.weights.bytes_per_gpu / GIB, 2), run["vllm"]["outcome"],
                   plan.start.word, reasons)


def summary(rows: list[Figures]) -> dict:
    errors = [abs(r.error_pct) for r in rows if r.error_pct is not None]
    return {"runs": len(rows), "kv_compared": len(errors), "median_abs_error_pct": statistics.median(errors),
            "worst_abs_error_pct": max(errors), "verdicts_agree": sum(r.agrees for r in rows),
            "versions": len({r.version for r in rows})}


def markdown(rows: list[Figures]) -> str:
    """The table docs/planner.md carries."""
    head = ("| run | vLLM | vLLM's KV GiB | kvviz | error | weights vLLM / kvviz | vLLM | kvviz |\n"
            "|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        theirs = "–" if r.vllm_kv_gib is None else f"{r.vllm_kv_gib:.2f}" + ("" if r.kv_source == "printed" else "*")
        error = "–" if r.error_pct is None else f"{r.error_pct:+.1f} %"
        weights = f"{'–' if r.vllm_weights_gib is None else f'{r.vllm_weights_gib:.2f}'} / {r.kvviz_weights_gib:.2f}"
        why = f" ({', '.join(r.kvviz_reasons)})" if r.kvviz_reasons else ""
        lines.append(f"| {r.run_id} | {r.version} | {theirs} | {r.kvviz_kv_gib:.2f} | {error} | {weights} | "
                     f"{r.vllm_outcome} | {r.kvviz_verdict}{why} |")
    return "\n".join(lines)


if __name__ == "__main__":
    table = [figures(r) for r in runs()]
    print(markdown(table))
    print(json.dumps(summary(table), indent=1), file=sys.stderr)
