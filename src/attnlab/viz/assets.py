"""The explorer page's static assets: the text of ``viz/static/explorer.js`` and ``.css``."""

from __future__ import annotations

from functools import cache
from pathlib import Path

__all__ = ["static_asset"]

_STATIC = Path(__file__).with_name("static")


@cache
def static_asset(name: str) -> str:
    """The text of ``viz/static/NAME`` (the explorer's JS and CSS)."""
    if name not in ("explorer.js", "explorer.css"):
        raise ValueError(f"name must be 'explorer.js' or 'explorer.css', got {name!r}")
    return (_STATIC / name).read_text(encoding="utf-8")
