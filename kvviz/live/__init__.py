"""One run on the loaded model: loading, hooks, the engine, the race, events, traces, the cache map."""
