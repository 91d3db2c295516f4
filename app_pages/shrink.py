"""Shrink: the same prompt with the full KV cache and with a shrunk one (a kvpress press or
transformers' quantized cache), side by side: answers, where they diverge, bytes, step time, and
which prompt positions each layer kept. The page is kvviz.shrink.panel's; this file only calls it."""
from kvviz.shrink import panel

panel.page()
