"""Charts and tables as files: a Vega-Lite dict to SVG or PNG with vl-convert, which may fetch
nothing; a table to CSV whose cells a spreadsheet never runs as formulas."""
from __future__ import annotations

import altair as alt
import pandas as pd

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # what makes a spreadsheet read a cell as a formula


def inert_cell(value):
    """A text cell that a spreadsheet would run as a formula ("=HYPERLINK(…)", "@SUM(…)", "+1-2")
    with an apostrophe first, as OWASP advises; numbers and other cells unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_text(df: pd.DataFrame) -> str:
    """`df` as CSV (no index), every text cell inert (`inert_cell`): request names, session ids and
    any other text that came from a file, a link or a server."""
    text_columns = [c for c in df.columns if not pd.api.types.is_numeric_dtype(df[c])]
    safe = df.assign(**{c: df[c].map(inert_cell) for c in text_columns}) if text_columns else df
    safe.columns = [inert_cell(str(c)) for c in safe.columns]
    return safe.to_csv(index=False)


def vl_version() -> str | None:
    """Altair's Vega-Lite version ("6.4") when vl-convert bundles it; else vl-convert's latest."""
    import vl_convert

    wanted = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return wanted if wanted in vl_convert.get_vegalite_versions() else None


def svg(vega: dict) -> str:
    """An SVG document of the chart `vega` (no base URLs: any data URL is refused)."""
    import vl_convert

    return vl_convert.vegalite_to_svg(vega, vl_version=vl_version(), allowed_base_urls=[])


def png(vega: dict, scale: float = 2.0) -> bytes:
    """A PNG image of the chart `vega` at `scale` × its CSS size (no base URLs)."""
    import vl_convert

    return vl_convert.vegalite_to_png(vega, vl_version=vl_version(), scale=scale, allowed_base_urls=[])
