"""The experiments' part of the report: one section per experiment ``Result``.

Each section states the claim (English and Chinese), the measured number against the
theory, the secondary checks, the numbers behind them, and the figure as an inline PNG.
"""

from __future__ import annotations

from typing import Any

from attnlab.experiments import Result, run_all
from attnlab.experiments._result import fmt_num
from attnlab.report.html import ReportContext, Section, bilingual, figure, table

__all__ = ["build", "section_for"]


def _cell(x: Any) -> Any:
    return fmt_num(x) if isinstance(x, float) else x


def section_for(result: Result, *, dpi: int = 100) -> Section:
    """One report section for one ``Result`` (renders its figure, then drops it)."""
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
        # experiment figures use constrained layout: no tight-bbox pass (it draws twice)
        body += figure(r.figure, r.caption, r.caption_zh, dpi=dpi, tight=False,
                       alt=f"Figure for {r.name}: {r.quantity}")
        r.figure = None  # free the figure's memory
    elif r.caption:
        body += bilingual(r.caption, r.caption_zh, cls="muted")
    body += f'<p class="muted">computed in {r.seconds:.1f} s</p>'
    rows = [(r.quantity, fmt_num(r.measured), r.passed)]
    rows += [(c.name, fmt_num(c.value), c.passed) for c in r.checks]
    return Section(f"exp-{r.name}", f"Experiment: {r.name}", f"实验：{r.name}", body,
                   r.passed, rows, finding=r.finding)


def build(ctx: ReportContext) -> list[Section]:
    """Run every experiment with its figure; one section each, in registry order."""
    results = run_all(seed=ctx.seed, plot=True, progress=ctx.progress, quiet=ctx.quiet)
    return [section_for(r) for r in results]
