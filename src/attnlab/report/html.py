"""The pieces every report section is made of: :class:`Section`, :class:`ReportContext`, and
small helpers for HTML fragments. Every string is escaped here.

>>> fmt(1.234e-7), fmt(0.98123), fmt(1024), fmt(True)
('1.23e-07', '0.981', '1024', 'True')
>>> html_table = table(["check", "result"], [("<b>", True)], passed_col=1)
>>> "<td>&lt;b&gt;</td>" in html_table, '<td class="ok">pass</td>' in html_table
(True, True)
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ReportContext", "Section", "table", "fmt", "figure", "figure_to_data_uri",
           "figure_to_svg", "bilingual", "escape"]

escape = html.escape


def fmt(x: Any, digits: int = 3) -> str:
    """Numbers for humans: 1.23e-07, 0.981, 1024, True."""
    if isinstance(x, bool) or x is None:
        return str(x)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if x == 0:
            return "0"
        if abs(x) < 1e-3 or abs(x) >= 1e5:
            return f"{x:.{digits - 1}e}"
        return f"{x:.{digits}g}" if abs(x) < 1 else f"{x:.{digits + 1}g}"
    return str(x)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]],
          passed_col: int | None = None) -> str:
    """An HTML table; ``passed_col`` (index) renders booleans as pass/FAIL cells."""
    head = "".join(f"<th>{escape(str(h))}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            if i == passed_col and isinstance(v, bool):
                cells.append(f'<td class="{"ok" if v else "bad"}">{"pass" if v else "FAIL"}</td>')
            else:
                cells.append(f"<td>{escape(fmt(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    rows_html = "".join(body)
    return f'<table class="data"><thead><tr>{head}</tr></thead><tbody>{rows_html}</tbody></table>'


def bilingual(en: str, zh: str, tag: str = "p", cls: str = "") -> str:
    """The same text in English and Chinese; the page shows one at a time."""
    c = f" {cls}" if cls else ""
    return (f'<{tag} class="en{c}">{escape(en)}</{tag}>'
            f'<{tag} class="zh{c}" lang="zh">{escape(zh)}</{tag}>')


def figure_to_data_uri(fig: Any, dpi: int = 110, *, tight: bool = True) -> str:
    """A matplotlib figure as a PNG data URI (``tight=False`` for figures that use
    constrained layout, which need no second, tight-bbox drawing pass)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight" if tight else None)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def figure_to_svg(fig: Any) -> str:
    """A matplotlib figure as an inline <svg> element (no XML prolog)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]


def figure(fig: Any, caption_en: str, caption_zh: str, *, alt: str | None = None,
           dpi: int = 90, svg: bool = False, tight: bool = True) -> str:
    """A ``<figure>`` with the figure inline (PNG data URI, or ``svg``) and a bilingual
    caption; the matplotlib figure is closed afterwards (its memory freed)."""
    import matplotlib.pyplot as plt

    try:
        if svg:
            inner = figure_to_svg(fig)
        else:
            uri = figure_to_data_uri(fig, dpi, tight=tight)
            inner = f'<img alt="{escape(alt if alt is not None else caption_en)}" src="{uri}">'
    finally:
        plt.close(fig)
    return (f"<figure>{inner}<figcaption>{bilingual(caption_en, caption_zh, tag='span')}"
            f"</figcaption></figure>")


@dataclass
class Section:
    """One part of the report.

    ``html`` is a trusted fragment built by attnlab (every user string inside it must have
    been escaped). ``passed`` is None for sections that only show things; ``finding`` marks
    a section whose claim does not hold, as its experiment expected (passed, shown apart).
    ``rows`` are the terminal summary: (check, value, passed-or-None).
    """

    id: str
    title: str
    title_zh: str
    html: str
    passed: bool | None = None
    rows: list[tuple[str, str, bool | None]] = field(default_factory=list)
    seconds: float = 0.0
    #: the section reports a claim the numbers refute, as expected: badge "FINDING"
    finding: bool = False


@dataclass
class ReportContext:
    """What every section builder receives: where the report goes, the seed, and where
    to say what it is doing."""

    out_dir: Path
    quiet: bool = False
    seed: int = 0
    progress: Any = None  # rich.progress.Progress or None
    #: results shared between the sections of one build (e.g. ``"experiments"``: the
    #: experiment results, computed once for the claim inventory and the experiments)
    cache: dict[str, Any] = field(default_factory=dict)

    def log(self, message: str) -> None:
        if self.progress is not None:
            self.progress.console.log(message)
