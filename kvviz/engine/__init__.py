"""Everything that runs a model: loading, probes, hooks, the decode loop, the race, the worker pump."""
