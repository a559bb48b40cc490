"""Small helpers for the report's HTML fragments. Every string is escaped here."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ReportContext", "Section", "table", "fmt", "figure_to_data_uri", "figure_to_svg",
           "bilingual", "escape"]

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
    c = f" {cls}" if cls else ""
    return (f'<{tag} class="en{c}">{escape(en)}</{tag}>'
            f'<{tag} class="zh{c}" lang="zh">{escape(zh)}</{tag}>')


def figure_to_data_uri(fig: Any, dpi: int = 110) -> str:
    """A matplotlib figure as a PNG data URI."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def figure_to_svg(fig: Any) -> str:
    """A matplotlib figure as an inline <svg> element (no XML prolog)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]


@dataclass
class Section:
    """One part of the report.

    ``html`` is a trusted fragment built by attnlab (every user string inside it must have
    been escaped). ``passed`` is None for sections that only show things. ``rows`` are the
    terminal summary: (check, value, passed-or-None).
    """

    id: str
    title: str
    title_zh: str
    html: str
    passed: bool | None = None
    rows: list[tuple[str, str, bool | None]] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class ReportContext:
    out_dir: Path
    quiet: bool = False
    seed: int = 0
    progress: Any = None  # rich.progress.Progress or None

    def log(self, message: str) -> None:
        if self.progress is not None:
            self.progress.console.log(message)
