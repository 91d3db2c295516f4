"""The catalogs kvviz ships in assets/ (kvviz.core.assets): models (published configs) and GPU presets.

Read by the planner, the sweep's device facts and the pages; pure, stdlib only.
"""
from __future__ import annotations

import json

from kvviz.core import assets


def _read_asset(filename: str, key: str) -> list[dict]:
    with open(assets.FOLDER / filename, encoding="utf-8") as f:
        return json.load(f)[key]


def load_catalog() -> list[dict]:
    """Model entries of assets/models.json: name, hf_id, aliases, config (the published
    config.json fields), num_parameters, num_active_parameters (MoE) and a source."""
    return _read_asset("models.json", "models")


def catalog_config(entry: dict) -> dict:
    """The published config.json fields of a catalog entry."""
    return entry["config"] if isinstance(entry.get("config"), dict) else entry


def load_gpus() -> list[dict]:
    """GPU presets of assets/gpus.json: name, memory_bytes (marketed), device_bytes (what the
    device reports, with device_figure and device_source saying where that comes from),
    bandwidth_bytes_per_s (GB = 1e9 B)."""
    return _read_asset("gpus.json", "gpus")


def device_bytes(gpu: dict) -> int:
    """The memory a GPU preset's device reports (torch's total_memory, what vLLM budgets from);
    the marketed bytes for a custom GPU or a preset without a device figure."""
    return int(gpu.get("device_bytes") or gpu["memory_bytes"])


def device_note(gpu: dict) -> str:
    """Where a preset's device bytes come from, in a few words ("published torch figure", …)."""
    return {"published": "a published torch figure", "measured": "measured on the card",
            }.get(gpu.get("device_figure", ""), "marketed; no device figure found")


def _key(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def find_catalog_entry(name: str) -> dict | None:
    """The catalog entry whose name, hf_id or alias matches `name` (case and punctuation ignored)."""
    wanted = _key(name)
    for entry in load_catalog():
        keys = [entry["name"], entry.get("hf_id", ""), *entry.get("aliases", [])]
        if wanted in {_key(k) for k in keys if k}:
            return entry
    return None


def find_gpu(name: str) -> dict | None:
    """The GPU preset whose name or alias matches `name` (case and punctuation ignored)."""
    wanted = _key(name)
    for gpu in load_gpus():
        if wanted in {_key(k) for k in [gpu["name"], *gpu.get("aliases", [])]}:
            return gpu
    return None
