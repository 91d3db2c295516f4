"""The shared chart theme and number formatting."""
