"""Serving: several requests share one real paged KV cache (transformers' continuous batching).
The page is kvviz.serving.panel's."""
from kvviz.serving import panel

panel.page()
