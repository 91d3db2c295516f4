"""Human-readable numbers with their units.

One policy for every page and the CLI: cache sizes in binary prefixes (KiB / MiB / GiB, as the
tensors are measured), GPU memory and weights in decimal ones (GB = 1e9 B, as GPU makers and
checkpoints state them), so a subtraction of memory is in one unit.
"""
from __future__ import annotations


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "–"
    for size, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}" if n / size < 100 else f"{n / size:,.0f} {unit}"
    return f"{n:,.0f} B"


def fmt_bytes_si(n: float) -> str:
    """Decimal units, like the GPU presets: 1 GB = 1e9 bytes (GPU memory, weights)."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "–"
    return f"{ms / 1000:.2f} s" if ms >= 1000 else f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"


def fmt_ratio(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}×"
