"""Where the tests find the two articles: ``$ATTNLAB_ARTICLES`` (CI sets it), else a
``shared/seeds`` folder beside the checkout. The articles are not part of the repository:
the tests that compare verbatim quotes and listings with them skip, saying so, without
them; the product never reads them unless ``ATTNLAB_ARTICLES`` is set."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP_WHY = ("the articles are not here (they are not in the repository): set "
            "ATTNLAB_ARTICLES to the folder holding 000_*.txt and 001_*.txt")


def articles_dir() -> Path | None:
    raw = os.environ.get("ATTNLAB_ARTICLES", "").strip()
    for d in [Path(raw)] if raw else [ROOT.parent / "shared" / "seeds"]:
        if d.is_dir() and any(d.glob("*.txt")):
            return d
    return None


def article_text(number: str) -> str | None:
    """The text of article ``number`` ("000", "001"), or None when it is not here."""
    d = articles_dir()
    found = sorted(d.glob(f"{number}_*.txt")) if d is not None else []
    return found[0].read_text(encoding="utf-8") if found else None
