"""What a Result shows a reader, and which of it lacks Chinese in a catalog."""

from __future__ import annotations

from attnlab.experiments import Result
from attnlab.i18n import figure_texts, merge, missing


def untranslated(r: Result, *catalogs: dict[str, str]) -> list[str]:
    """Check names and expected values, table headers and string cells, figure texts of
    ``r`` that none of ``catalogs`` (over the common words) translates."""
    texts = [r.expected_text] + [t for c in r.checks for t in (c.name, c.expected)]
    if r.table is not None:
        headers, rows = r.table
        texts += [str(h) for h in headers]
        texts += [x for row in rows for x in row if isinstance(x, str)]
    if r.figure is not None:
        texts += figure_texts(r.figure)
    return missing(texts, merge(*catalogs))
