"""The never-hits sentence against a SERVED tiny hybrid, watched through its KV events the way
kvviz's vLLM page watches a server. Run with the app's python (it imports kvviz); the server runs
from .venv-vllm:

    .venv/bin/python scripts/vllm_hybrid_served_check.py [--out tests/data/vllm/hybrid] [--url URL]

1. Writes a tiny random Qwen3-Next-style hybrid (8 layers: 3 Gated DeltaNet + 1 full attention,
   twice; SmolLM2's tokenizer so the OpenAI server starts; `--load-format dummy` weights) to a
   temporary folder.
2. Starts `python -m vllm.entrypoints.openai.api_server` on it (`vllm serve` fails in the CPU
   wheel, see /work/shared/notes/vllm.md) with `--block-size 32`, prefix caching (Mamba "align"
   mode), KV events over ZMQ, `--enable-prompt-tokens-details`; waits for /health at most
   --start-timeout-s and stops it by its process group in a `finally`, also when start-up fails.
   `--url` uses a server already running instead (started the same way; it is not stopped).
3. Watches it with `kvviz.vllm.watch.EngineWatch` (the SUB socket, replay from sequence 0,
   /metrics scrapes, the request log tailed), as `kvviz watch URL --request-log` does.
4. For each shared length L (default: just under, at and just over the planner's hit block N, and
   the same around 2N), sends two completions whose prompts (token ids) share their first L
   tokens and then differ (a 64-token tail each), one at a time, max_tokens 1, each reply's
   `usage.prompt_tokens_details.cached_tokens` written to the request log (the format
   scripts/vllm_fleet_load.py writes, kvviz.vllm.request_log.Reply).
5. Saves the capture to --out: watch.json (the recording, as `kvviz watch` writes it),
   requests.jsonl (the request log), config.json (the tiny model's config), and prints a table:
   shared tokens, vLLM's cached_tokens, what kvviz's event-derived accounting says the server held
   (kvviz.vllm.fleet: the prompt walked down the cache the events rebuilt), and what the sentence
   predicts (the hit block from the events; from the planner; ⌊L / N⌋ × N at most).

tests/vllm/test_hybrid_served.py checks the recorded capture without a server.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
TOKENIZER = Path.home() / ".cache" / "kvviz" / "SmolLM2-135M-Instruct"  # its tokenizer only
NAME = "tiny-qwen3-next"
BLOCK_ASKED, MAX_LEN, KV_BYTES = 32, 2048, 256 * 2**20
TAIL = 64


def tiny_qwen3_next():
    """vllm_hybrid_hits.py's hybrid (linear heads of 128: 32 fails in vLLM's CPU kernel), with
    SmolLM2's vocabulary so its tokenizer fits."""
    from transformers import Qwen3NextConfig
    layers = ["linear_attention"] * 3 + ["full_attention"]
    c = Qwen3NextConfig(vocab_size=49152, hidden_size=128, intermediate_size=256, num_hidden_layers=8,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16384,
                        layer_types=layers * 2, dtype="bfloat16", bos_token_id=1, eos_token_id=2, pad_token_id=2,
                        head_dim=64, linear_num_key_heads=2, linear_num_value_heads=4,
                        linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
                        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                        shared_expert_intermediate_size=64)
    c.architectures = ["Qwen3NextForCausalLM"]
    return c


def write_model(folder: Path) -> dict:
    config = tiny_qwen3_next()
    config.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / name, folder / name)
    return json.loads((folder / "config.json").read_text())


def planned_hit_block(config: dict) -> int:
    """kvviz's planner: the hit block (lcm of the cache groups' blocks) vLLM's CPU backend uses."""
    from kvviz.planner import configs as plan_models
    from kvviz.planner import serving_plan as sp
    model = plan_models.model_from_config(config, NAME)
    pages = sp.page_specs(model.specs, "bf16", BLOCK_ASKED, sp.CPU, True)
    return sp.allocate(pages, KV_BYTES, MAX_LEN).hit_block


def state_float32() -> bool:
    """Whether vLLM's CPU backend keeps the state in float32 here (AVX-512 BF16): it sets the blocks."""
    from kvviz.planner import serving_plan as sp
    return sp.CPU.state_float32()


def serve_command(model_dir: Path, port: int, events_port: int, replay_port: int) -> list[str]:
    events = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://127.0.0.1:{events_port}",
              "replay_endpoint": f"tcp://127.0.0.1:{replay_port}"}
    return [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
            "--served-model-name", NAME, "--host", "127.0.0.1", "--port", str(port), "--dtype", "bfloat16",
            "--load-format", "dummy", "--enforce-eager", "--max-model-len", str(MAX_LEN),
            "--enable-prefix-caching", "--block-size", str(BLOCK_ASKED), "--kv-cache-memory-bytes", str(KV_BYTES),
            "--max-num-seqs", "4", "--enable-prompt-tokens-details", "--kv-events-config", json.dumps(events)]


def serve_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}  # it overrides KV_BYTES
    env.update(HF_HUB_OFFLINE="1", VLLM_SERVER_DEV_MODE="1", VLLM_NO_USAGE_STATS="1", PYTHONHASHSEED="0",
               VLLM_CPU_OMP_THREADS_BIND=f"0-{os.cpu_count() - 1}", VLLM_CPU_NUM_OF_RESERVED_CPU="0",
               VLLM_CACHE_ROOT=str(Path.home() / ".cache" / "kvviz" / "vllm-cache"))
    return env


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} during start-up")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as resp:
                if resp.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(2)
    raise TimeoutError(f"the server did not answer /health within {timeout_s:.0f} s")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (API server, engine core, worker), then SIGKILL."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    except ProcessLookupError:
        pass


def prompts(shared: int, index: int) -> tuple[list[int], list[int]]:
    """Two prompts sharing their first `shared` tokens (a prefix no other length uses), then a
    different 64-token tail each."""
    base = [1000 + (index * 7919 + k * 31) % 40000 for k in range(shared)]
    return base + [300 + k for k in range(TAIL)], base + [700 + k for k in range(TAIL)]


def complete(url: str, ids: list[int], session: str, timeout_s: float) -> dict:
    body = {"model": NAME, "prompt": ids, "max_tokens": 1, "temperature": 0.0, "return_token_ids": True,
            "session_id": session}
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.load(resp)


def send(url: str, lengths: list[int], log_path: Path, timeout_s: float) -> list[dict]:
    lines = []
    with open(log_path, "a", encoding="utf-8") as log:
        for i, shared in enumerate(lengths):
            for which, ids in zip(("first", "second"), prompts(shared, i)):
                name = f"L{shared}-{which}"
                sent = time.time()
                reply = complete(url, ids, name, timeout_s)
                usage, choice = reply["usage"], reply["choices"][0]
                line = {"name": name, "session_id": name, "url": url, "sent_s": sent, "done_s": time.time(),
                        "prompt_tokens": usage["prompt_tokens"],
                        "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
                        "completion_tokens": usage["completion_tokens"],
                        "prompt_token_ids": choice.get("prompt_token_ids") or ids,
                        "output_token_ids": choice.get("token_ids"), "full_report": False}
                log.write(json.dumps(line) + "\n")
                log.flush()
                lines.append(line)
                time.sleep(0.3)  # the engine step's events reach the watch before the next request
    return lines


def table(recording, hit_planned: int) -> list[dict]:
    """Per request: shared tokens, vLLM's cached_tokens, kvviz's event-derived figure, the bound
    the sentence gives (⌊L / N⌋ × N with N from the events, 0 below N)."""
    from kvviz.vllm import fleet, views
    from kvviz.vllm.trace import states_at
    view = fleet.fleet_requests(recording)
    (state,) = states_at(recording).values()
    block, source = views.hit_block(state)
    rows = []
    for r in view.requests:
        shared = int(r.name.split("-")[0][1:]) if r.name.endswith("second") else 0
        usable = min(shared, r.prompt_tokens - 1)
        rows.append({"request": r.name, "shared": shared, "prompt": r.prompt_tokens, "vllm_cached": r.cached_tokens,
                     "kvviz_events": r.held[r.replica], "hit_block_events": block, "hit_block_planner": hit_planned,
                     "sentence_at_most": usable // block * block if block else None,
                     "never_hits": shared < block if block else None})
    return rows


def print_table(rows: list[dict], sentence: str | None) -> None:
    head = ["request", "shared", "prompt", "vllm_cached", "kvviz_events", "sentence_at_most", "never_hits"]
    print(" | ".join(head))
    for row in rows:
        print(" | ".join(str(row[k]) for k in head))
    print(f"hit block: events {rows[0]['hit_block_events']}, planner {rows[0]['hit_block_planner']}, "
          f"--block-size {BLOCK_ASKED}")
    print("sentence:", sentence)


def capture(url: str, out: Path, config: dict, lengths: list[int], hit_planned: int, timeout_s: float) -> int:
    from kvviz.vllm import views
    from kvviz.vllm.trace import states_at
    from kvviz.vllm.watch import EngineWatch
    log_path = out / "requests.jsonl"
    log_path.unlink(missing_ok=True)
    watch = EngineWatch([url], scrape_every_s=2.0, request_log=str(log_path)).start()
    try:
        time.sleep(3)  # subscribed (SUB bound) and replayed from 0 before the first request
        send(url, lengths, log_path, timeout_s)
        time.sleep(3)  # the last batches and the log's last lines
    finally:
        watch.stop()
    recording = watch.recording
    recording.meta["seconds"] = round(watch.now_s(), 3)
    recording.meta["hybrid_check"] = {"model": NAME, "block_size_asked": BLOCK_ASKED, "max_model_len": MAX_LEN,
                                      "kv_cache_memory_bytes": KV_BYTES, "shared_lengths": lengths,
                                      "hit_block_planned": hit_planned, "tail_tokens": TAIL,
                                      "state_float32": state_float32()}
    recording.save(out / "watch.json")
    (out / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")
    rows = table(recording, hit_planned)
    (state,) = states_at(recording).values()
    print_table(rows, views.never_hits_sentence(state))
    agree = all(r["vllm_cached"] == r["kvviz_events"] for r in rows)
    print("kvviz's event-derived figure equals vLLM's cached_tokens for every request:", agree)
    return 0 if agree else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "tests" / "data" / "vllm" / "hybrid"))
    p.add_argument("--url", help="a server already serving the tiny hybrid (not started nor stopped here)")
    p.add_argument("--port", type=int, default=18300)
    p.add_argument("--lengths", help="shared lengths, comma-separated (default: N-1, N, N+1, 2N-1, 2N, 2N+1)")
    p.add_argument("--start-timeout-s", type=float, default=300)
    p.add_argument("--server-log", default=os.path.join(tempfile.gettempdir(), "kvviz-hybrid-server.log"))
    p.add_argument("--timeout-s", type=float, default=120, help="per request")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="kvviz-hybrid-"))
    try:
        config = write_model(folder)
        n = planned_hit_block(config)
        lengths = ([int(x) for x in args.lengths.split(",")] if args.lengths
                   else [n - 1, n, n + 1, 2 * n - 1, 2 * n, 2 * n + 1])
        if args.url:
            return capture(args.url.rstrip("/"), out, config, lengths, n, args.timeout_s)
        url = f"http://127.0.0.1:{args.port}"
        command = serve_command(folder, args.port, args.port + 10, args.port + 20)
        print("$", " ".join(command), flush=True)
        with open(args.server_log, "w") as server_log:
            proc = subprocess.Popen(command, stdout=server_log, stderr=subprocess.STDOUT, env=serve_env(),
                                    start_new_session=True)
        try:
            wait_healthy(url, proc, args.start_timeout_s)
            return capture(url, out, config, lengths, n, args.timeout_s)
        finally:
            stop(proc)
    except (RuntimeError, TimeoutError, OSError) as exc:
        print(f"vllm_hybrid_served_check: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
