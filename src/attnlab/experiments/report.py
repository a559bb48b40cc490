"""The experiments' part of the report: one section per experiment.

Each section states the claim (English and Chinese), the measured number against the
theory, the secondary checks, the numbers behind them, and the figure as an inline PNG.
"""

from __future__ import annotations

import base64
import io
from typing import Any

from ._result import Result, fmt_num
from .registry import run_all

__all__ = ["report_sections", "section_for"]


def _png_data_uri(fig: Any, dpi: int = 100) -> str:
    """The figure as a PNG data URI. Figures use constrained layout, so no tight-bbox pass
    (which would draw everything twice) is needed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _cell(x: Any) -> Any:
    return fmt_num(x) if isinstance(x, float) else x


def section_for(result: Result, *, dpi: int = 100) -> Any:
    """One report ``Section`` for one ``Result`` (renders and then drops its figure)."""
    from attnlab.viz.html import Section, bilingual, escape, table

    r = result
    body = bilingual(r.claim, r.claim_zh, cls="claim")
    body += table(
        ["measured quantity", "measured", "theory", "result"],
        [(f"{r.quantity}", fmt_num(r.measured), r.expected_text, r.passed)], passed_col=3)
    if r.checks:
        body += table(["check", "value", "theory", "result"],
                      [(c.name, fmt_num(c.value), c.expected, c.passed) for c in r.checks],
                      passed_col=3)
    if r.table is not None:
        headers, rows = r.table
        body += table(headers, [[_cell(x) for x in row] for row in rows])
    if r.figure is not None:
        uri = _png_data_uri(r.figure, dpi)
        alt = escape(f"Figure for {r.name}: {r.quantity}")
        body += (f'<figure><img src="{uri}" alt="{alt}">'
                 f"<figcaption>{bilingual(r.caption, r.caption_zh, tag='span')}"
                 f"</figcaption></figure>")
        r.figure = None  # free the figure's memory
    elif r.caption:
        body += bilingual(r.caption, r.caption_zh, cls="muted")
    body += f'<p class="muted">computed in {r.seconds:.1f} s</p>'
    rows = [(r.quantity, fmt_num(r.measured), r.passed)]
    rows += [(c.name, fmt_num(c.value), c.passed) for c in r.checks]
    return Section(f"exp-{r.name}", f"Experiment: {r.name}", f"实验：{r.name}", body,
                   r.passed, rows)


def report_sections(ctx: Any) -> list[Any]:
    """Report provider: run every experiment with its figure, one Section each."""
    results = run_all(seed=ctx.seed, plot=True, progress=ctx.progress, quiet=ctx.quiet)
    return [section_for(r) for r in results]
