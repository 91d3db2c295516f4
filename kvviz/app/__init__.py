"""The Streamlit shell every page and panel stands on: sidebar, cached model, device queue, hosted policy, links, slots."""
