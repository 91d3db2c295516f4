"""Charts as files: a Vega-Lite spec to SVG or PNG with vl-convert, which may fetch nothing."""
from __future__ import annotations

import altair as alt


def vl_version() -> str | None:
    """Altair's Vega-Lite version ("6.4") when vl-convert bundles it; else vl-convert's latest."""
    import vl_convert

    wanted = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return wanted if wanted in vl_convert.get_vegalite_versions() else None


def svg(spec: dict) -> str:
    """An SVG document of the spec (no base URLs: any data URL is refused)."""
    import vl_convert

    return vl_convert.vegalite_to_svg(spec, vl_version=vl_version(), allowed_base_urls=[])


def png(spec: dict, scale: float = 2.0) -> bytes:
    """A PNG image of the spec at `scale` × its CSS size (no base URLs)."""
    import vl_convert

    return vl_convert.vegalite_to_png(spec, vl_version=vl_version(), scale=scale, allowed_base_urls=[])
