"""The run's contract, below every wing: cache specs and layout, run settings, events, the trace format, errors, units. No torch, no Streamlit."""
