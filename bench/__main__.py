"""`python -m bench [--quick] [--only ...] [--out docs/benchmarks.md]` (what `make bench` runs)."""
import sys

from bench.command import build_parser

args = build_parser().parse_args()
sys.exit(args.func(args))
