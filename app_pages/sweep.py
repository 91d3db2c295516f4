"""Sweep: cache bytes and latency over prompt length × batch size (kvviz/sweep/panel.py)."""
from kvviz.sweep import panel

panel.page()
