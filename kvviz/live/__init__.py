"""The Live page: its frames, charts, captions, the cache map, the panel and the run report."""
