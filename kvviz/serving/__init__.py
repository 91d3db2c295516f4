"""Continuous batching on transformers' paged cache, and its charts."""
