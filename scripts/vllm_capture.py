"""Record vLLM's raw KV-event messages (base64 frames, one JSON line each) for tests/data/vllm/.

Usage: python scripts/vllm_capture.py --bind tcp://127.0.0.1:5557 --out frames.jsonl --seconds 600
Binds the SUB socket (vLLM's publisher connects to a concrete tcp address); start it before the
server, or replay missed batches afterwards with --replay tcp://127.0.0.1:5558.
"""
import argparse
import base64
import json
import time

import zmq


def write(out, frames: list[bytes], source: str) -> None:
    out.write(json.dumps({"source": source, "frames": [base64.b64encode(f).decode() for f in frames]}) + "\n")
    out.flush()


def replay(ctx, endpoint: str, out) -> None:
    sock = ctx.socket(zmq.DEALER)
    sock.connect(endpoint)
    sock.send_multipart([b"", (0).to_bytes(8, "big")])
    while sock.poll(5000):
        frames = sock.recv_multipart()
        if frames[2] == (-1).to_bytes(8, "big", signed=True):
            break
        write(out, frames[1:], "replay")
    sock.close(linger=0)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bind", default="tcp://127.0.0.1:5557")
    p.add_argument("--replay", default="")
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=600)
    args = p.parse_args()
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.bind(args.bind)
    deadline = time.monotonic() + args.seconds
    with open(args.out, "a") as out:
        if args.replay:
            replay(ctx, args.replay, out)
        while time.monotonic() < deadline:
            if sub.poll(500):
                write(out, sub.recv_multipart(), "live")


if __name__ == "__main__":
    main()
