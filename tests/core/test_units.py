"""Numbers for people (kvviz.core.units): cache sizes in binary prefixes with three significant
digits (whole numbers from 100 up), memory and weights in decimal ones, times in ms or s, ratios
with one decimal, and "–" for a figure that is missing."""
from kvviz.core.units import fmt_bytes, fmt_bytes_si, fmt_ms, fmt_ratio


def test_cache_sizes_in_binary_prefixes():
    assert fmt_bytes(None) == "–" and fmt_bytes(0) == "0 B" and fmt_bytes(1023) == "1,023 B"
    assert fmt_bytes(1024) == "1 KiB" and fmt_bytes(1536) == "1.5 KiB" and fmt_bytes(12.34 * 2**20) == "12.3 MiB"
    assert fmt_bytes(150 * 2**20) == "150 MiB" and fmt_bytes(1234 * 2**30) == "1,234 GiB"
    assert fmt_bytes(-2048) == "-2 KiB"  # a difference keeps its sign and its unit


def test_memory_and_weights_in_decimal_prefixes():
    assert fmt_bytes_si(16.06e9) == "16.06 GB" and fmt_bytes_si(80 * 10**9) == "80.00 GB"
    assert fmt_bytes_si(1.5e12) == "1.50 TB" and fmt_bytes_si(2048) == "2.05 kB" and fmt_bytes_si(999) == "999 B"
    assert fmt_bytes_si(2**30) == "1.07 GB"  # a GiB is not a GB


def test_times_and_ratios():
    assert fmt_ms(None) == "–" and fmt_ms(12.34) == "12.3 ms" and fmt_ms(99.94) == "99.9 ms"
    assert fmt_ms(250.4) == "250 ms" and fmt_ms(1000) == "1.00 s" and fmt_ms(61_500) == "61.50 s"
    assert fmt_ratio(None) == "–" and fmt_ratio(2.26) == "2.3×" and fmt_ratio(1) == "1.0×"
