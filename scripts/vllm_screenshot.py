"""Screenshot the vLLM engine page of a running `make vllm-demo` in Chromium (1600×1000).

Usage: .venv/bin/python scripts/vllm_screenshot.py --url http://localhost:8610/engine --out docs/vllm-engine.png
Waits until the page shows evicted blocks (so the picture has filling, sharing and evicting),
at most --wait-s seconds, then writes the screenshot. Also --full writes the whole page.
"""
import argparse
import re
import sys
import tempfile
import time

from playwright.sync_api import sync_playwright

from bench.app_server import chromium_context



def evicted(page) -> int:
    text = page.get_by_test_id("stMetric").filter(has_text="Stored / evicted").first.inner_text()
    found = re.findall(r"([\d,]+)\s*/\s*([\d,]+)", text)
    return int(found[-1][1].replace(",", "")) if found else 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="http://localhost:8610/engine")
    p.add_argument("--out", default="docs/vllm-engine.png")
    p.add_argument("--full", default="")
    p.add_argument("--wait-s", type=float, default=600)
    p.add_argument("--min-evicted", type=int, default=1)
    args = p.parse_args()
    with sync_playwright() as pw, tempfile.TemporaryDirectory() as profile:
        ctx = chromium_context(pw, profile, {"width": 1600, "height": 1000})
        page = ctx.new_page()
        page.goto(args.url, timeout=120_000)
        page.get_by_test_id("stMetric").first.wait_for(timeout=int(args.wait_s * 1000))
        deadline = time.monotonic() + args.wait_s
        while evicted(page) < args.min_evicted and time.monotonic() < deadline:
            time.sleep(2)
        time.sleep(3)
        print("evicted blocks shown:", evicted(page))
        page.screenshot(path=args.out)
        if args.full:
            height = page.evaluate("document.querySelector('[data-testid=stMain]').scrollHeight")
            page.set_viewport_size({"width": 1600, "height": min(max(int(height), 1000), 5000)})
            time.sleep(3)
            page.screenshot(path=args.full)
        ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
