"""The shared chart theme, chart builders and chart export."""
