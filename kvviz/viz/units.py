"""Human-readable numbers with their units (binary prefixes for bytes)."""
from __future__ import annotations


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "–"
    for size, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}" if n / size < 100 else f"{n / size:,.0f} {unit}"
    return f"{n:,.0f} B"


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "–"
    return f"{ms / 1000:.2f} s" if ms >= 1000 else f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"


def fmt_ratio(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}×"
