"""Capacity planning from a config alone: bytes, parameters, parallelism, vLLM's blocks, the CLI."""
