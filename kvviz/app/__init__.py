"""The dashboard's Streamlit side: shell, sidebar, panels, hosted policy, links, the device queue."""
