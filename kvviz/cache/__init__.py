"""What a cache holds, per layer: the layout resolved from a config, and paged-block accounting."""
