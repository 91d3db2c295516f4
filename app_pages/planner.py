"""Capacity planner: how many requests of T tokens fit on a serving setup (kvviz.planner.panel)."""
from kvviz.planner import panel

panel.page()
