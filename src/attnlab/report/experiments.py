"""The experiments' part of the report: one section per experiment ``Result``.

Each section states the claim and whose it is, the measured number against the theory and
the verdict (the claim holds or does not, and whether that is the verdict the experiment
expected; a refuted claim expected so is a *finding*, with the reason stated in advance),
the secondary checks, the numbers behind them, and the figure as an inline PNG. Every
string is shown in English and in Chinese: the experiment's ``*_zh`` fields, and its
catalog (:func:`attnlab.experiments.registry.catalog`) for check names, table headers and
cells and the figure's texts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attnlab.experiments import Result, run_all
from attnlab.experiments._result import fmt_num
from attnlab.experiments.registry import EXPERIMENTS, catalog
from attnlab.i18n import merge, translate
from attnlab.report.html import BiText, ReportContext, Section, bilingual, both, figure, table

__all__ = ["build", "section_for", "ZH"]

FINDING = "Finding: the claim does not hold, as this experiment stated in advance. Why: {}"
EXPECTED_NOT = "This experiment expected the claim not to hold, because: {}"
BY_CONSTRUCTION = "Holds by construction: {}"

#: What this section itself writes around each experiment.
ZH: dict[str, str] = {
    "The articles' claim": "文章的论断",
    "attnlab's own addition (not a claim of the articles)": "attnlab 自己的补充（并非文章的论断）",
    "as expected": "与预期一致",
    "NOT as expected": "与预期不符",
    "decided by this machine's timing": "由本机的计时决定",
    FINDING: "发现：论断不成立，与本实验事先的预期一致。原因：{}",
    EXPECTED_NOT: "本实验事先预期论断不成立，理由：{}",
    "control": "对照",
    "control measured": "对照的测得值",
    "none": "无",
    "{} (control: {} = {}, {})": "{}（对照：{} = {}，{}）",
    "fails, as it should": "不满足，符合预期",
    "passes too: the measurement does not tell": "同样满足：该测量无法区分",
    BY_CONSTRUCTION: "按构造成立：{}",
}


def control_text(c, zh: bool = False) -> str:
    """A control's outcome in words: it must fail the test the measurement passes."""
    if c is None:
        return ZH["none"] if zh else "none"
    word = "fails, as it should" if not c.holds else "passes too: the measurement does not tell"
    if zh:
        return f"{c.what_zh} = {fmt_num(c.measured)}，{ZH[word]}"
    return f"{c.what} = {fmt_num(c.measured)}, {word}"


def _cell(x: Any) -> Any:
    return fmt_num(x) if isinstance(x, float) else x


def _catalog(name: str) -> dict[str, str]:
    """The experiment's catalog; an empty one for a Result made outside the registry."""
    return catalog(name) if name in EXPERIMENTS else {}


def _verdict(r: Result, cat: Mapping[str, str]) -> BiText:
    word = r.verdict
    return BiText(word, translate(word, cat) or word)


def section_for(result: Result, *, dpi: int = 100) -> Section:
    """One report section for one ``Result`` (renders its figure, then drops it)."""
    r = result
    cat = merge(_catalog(r.name), ZH)
    origin = ("The articles' claim" if r.origin == "article"
              else "attnlab's own addition (not a claim of the articles)")
    body = f'<p class="muted">{both(origin, cat[origin])}</p>'
    body += bilingual(r.claim, r.claim_zh, cls="claim")
    expectation = ("decided by this machine's timing" if r.timed and r.passed
                   else "as expected" if r.passed else "NOT as expected")
    verdict = _verdict(r, cat)
    body += table(
        ["measured quantity", "measured", "theory", "control", "verdict", "result"],
        [(BiText(r.quantity, r.quantity_zh), fmt_num(r.measured), r.expected_text,
          BiText(control_text(r.control), control_text(r.control, zh=True)),
          BiText(f"{verdict.en} ({expectation})", f"{verdict.zh}（{cat[expectation]}）"),
          r.passed)], passed_col=5, catalog=cat)
    if r.by_construction:
        body += bilingual(BY_CONSTRUCTION.replace("{}", r.by_construction),
                          ZH[BY_CONSTRUCTION].replace("{}", r.by_construction_zh), cls="muted")
    if not r.expect_holds:  # the reason stated in advance, in both languages
        why = FINDING if r.finding else EXPECTED_NOT
        body += bilingual(why.replace("{}", r.expect_why),
                          cat[why].replace("{}", r.expect_why_zh or r.expect_why), cls="claim")
    if r.checks:
        body += table(["check", "value", "theory", "control", "result"],
                      [(c.name, fmt_num(c.value), c.expected,
                        BiText(control_text(c.control), control_text(c.control, zh=True)),
                        c.passed) for c in r.checks],
                      passed_col=4, catalog=cat)
    if r.table is not None:
        headers, cells = r.table
        body += table(headers, [[_cell(x) for x in row] for row in cells], catalog=cat)
    if r.figure is not None:
        # experiment figures use constrained layout: no tight-bbox pass (it draws twice)
        body += figure(r.figure, r.caption, r.caption_zh, catalog=cat, dpi=dpi, tight=False,
                       alt=f"Figure for {r.name}: {r.quantity}",
                       alt_zh=f"{r.name} 的图：{r.quantity_zh}")
        r.figure = None  # free the figure's memory
    elif r.caption:
        body += bilingual(r.caption, r.caption_zh, cls="muted")
    took = f"computed in {r.seconds:.1f} s"
    body += f'<p class="muted">{both(took, translate(took, cat))}</p>'
    rows: list[tuple[str, str, bool | None]] = [(r.quantity, fmt_num(r.measured), r.passed)]
    rows += [(c.name, fmt_num(c.value), c.passed) for c in r.checks]
    return Section(f"exp-{r.name}", f"Experiment: {r.name}", f"实验：{r.name}", body,
                   r.passed, rows, finding=r.finding)


def build(ctx: ReportContext) -> list[Section]:
    """Run every experiment with its figure (or take the results another section of this
    build already ran, ``ctx.cache["experiments"]``); one section each, in registry order."""
    results = ctx.cache.get("experiments")
    if results is None:
        results = run_all(seed=ctx.seed, plot=True, progress=ctx.progress, quiet=ctx.quiet)
        ctx.cache["experiments"] = results
    return [section_for(r) for r in results]
