"""The report's first section: the claim inventory of the two articles.

Every claim, code listing and recommendation (:data:`attnlab.experiments.claims.CLAIMS`)
with its verbatim quote, the experiments that decide it (linked to their sections), the
verdict computed from their results, in colour, and the numbers behind it; then attnlab's
own extensions. One table in English and one in Chinese (the page shows one at a time).

The experiments run once per build: their results (with figures, for the experiments'
sections further down) are kept in ``ctx.cache["experiments"]``, which the experiments'
part reads instead of running them again.
"""

from __future__ import annotations

from collections.abc import Sequence

from attnlab.experiments import Result, run_all
from attnlab.experiments._result import fmt_num
from attnlab.experiments.claims import (
    CLAIM_VERDICTS,
    ZH,
    ClaimVerdict,
    ExtensionVerdict,
    Measurement,
    counts,
    extension_verdicts,
    verdicts,
)
from attnlab.experiments.registry import EXPERIMENTS, catalog
from attnlab.i18n import merge, translate
from attnlab.report.html import ReportContext, Section, bilingual, escape, text

__all__ = ["build", "experiment_results", "section_for"]

#: Verdict -> text colour (the page's pass green and fail red, amber, muted grey).
COLOURS = {"holds": "#137a3a", "holds under stated conditions": "#3451b2",
           "holds by construction": "#3f6d5a", "depends on the reading": "#7a4fa0",
           "does not hold": "#a15c00", "not decided here": "#9a3b57",
           "not testable": "#5b6478"}

_INTRO_EN = ("Every claim, code listing and recommendation of the two articles, quoted "
             "verbatim, with the experiments whose numbers decide it. The verdicts are computed "
             "from those numbers: holds; holds under stated conditions (the claim needs "
             "assumptions it does not always meet); does not hold (the numbers refute it); not "
             "decided here (a null result without a positive control, an existence claim "
             "without a witness, or a measurement whose control passes too); not testable (no "
             "computation can decide it, and why).")
_INTRO_ZH = ("两篇文章中的每条论断、每段代码和每条建议，逐字引用原文，并列出判定它的实验。"
             "结论由这些实验的数值计算得出：成立；在所述条件下成立（论断依赖并非总能满足的假设）；"
             "不成立（数值否定了它）；此处未能判定（零结果缺少阳性对照、存在性论断没有找到实例，或对照同样通过检验）；"
             "无法检验（没有计算能判定它，并说明原因）。")


def experiment_results(ctx: ReportContext) -> list[Result]:
    """Every experiment's result for this build, computed once (with figures) and kept in
    ``ctx.cache["experiments"]`` for the other sections."""
    results = ctx.cache.get("experiments")
    if results is None:
        results = run_all(seed=ctx.seed, plot=True, progress=ctx.progress, quiet=ctx.quiet)
        ctx.cache["experiments"] = results
    return results


def _verdict_html(verdict: str, zh: bool) -> str:
    word = ZH[verdict] if zh else verdict
    return f'<strong style="color:{COLOURS[verdict]}">{escape(word)}</strong>'


def _experiments_html(names: Sequence[str]) -> str:
    return "<br>".join(f'<a href="#exp-{escape(n)}"><code>{escape(n)}</code></a>'
                       for n in names) or "—"


def _numbers_html(m: Measurement, zh: bool, *, name: bool = True) -> str:
    cat = merge(catalog(m.experiment)) if m.experiment in EXPERIMENTS else merge()
    items = []
    for q, q_zh, value, expected in zip(m.quantities, m.quantities_zh, m.values, m.expected):
        if zh:
            q = q_zh or translate(q, cat) or q
            expected = translate(expected, cat) or expected
            items.append(f"{text(q)}：{escape(fmt_num(value))}（理论 {text(expected)}）")
        else:
            items.append(f"{text(q)}: {escape(fmt_num(value))} (expected {text(expected)})")
    items += [text(m.control_text(c, zh)) for c in m.controls]
    if not name:
        return "; ".join(items)
    head = f"<code>{escape(m.experiment)}</code>"
    if m.against:
        head += " （反证）" if zh else " (against)"
    mark = "" if m.supports else " ✗"
    return f"{head}{mark}: " + "; ".join(items)


def _table(headers: Sequence[str], widths: Sequence[int], rows: Sequence[Sequence[str]]) -> str:
    """A full-width table of trusted cells with fixed column widths (percent)."""
    cols = "".join(f'<col style="width:{w}%">' for w in widths)
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{x}</td>" for x in row) + "</tr>" for row in rows)
    return (f'<table class="data" style="width:100%;table-layout:fixed;overflow-wrap:anywhere">'
            f"<colgroup>{cols}</colgroup><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>")


def _claims_table(vs: Sequence[ClaimVerdict], zh: bool) -> str:
    headers = (["编号", "原文与论断", "实验", "结论", "测得值 / 条件 / 原因"] if zh
               else ["id", "quote and claim", "experiments", "verdict",
                     "measured / conditions / reason"])
    rows = []
    for v in vs:
        c = v.claim
        notes = [_numbers_html(m, zh) for m in v.measurements]
        if c.reading_en:
            label = "<em>理解</em>：" if zh else "<em>reading</em>: "
            notes.insert(0, label + text(c.reading_zh if zh else c.reading_en))
        for r in v.readings:
            label = "<em>另一种理解</em>：" if zh else "<em>other reading</em>: "
            word = ZH["holds" if r.holds else "does not hold"] if zh else (
                "holds" if r.holds else "does not hold")
            notes.append(label + text(r.reading.zh if zh else r.reading.en) + f" — {escape(word)}: "
                         + "; ".join(_numbers_html(m, zh) for m in r.measurements))
        if c.conditions_en:
            label = "<em>条件</em>：" if zh else "<em>conditions</em>: "
            notes.append(label + text(c.conditions_zh if zh else c.conditions_en))
        if not c.testable:
            notes.append(text(c.not_testable_zh if zh else c.not_testable_en))
        kind = escape(ZH[c.kind] if zh else c.kind)
        article = f"文章 {c.article}" if zh else f"article {c.article}"
        rows.append([
            f'<code>{escape(c.id)}</code><br><span class="muted">{article} · {kind}</span>',
            f'<span class="muted" lang="zh">「{text(c.quote_zh)}」</span><br>'
            f"{text(c.claim_zh if zh else c.claim_en)}",
            _experiments_html(c.covered_by), _verdict_html(v.verdict, zh), "<br>".join(notes)])
    return _table(headers, (14, 36, 14, 10, 26), rows)


def _extensions_table(es: Sequence[ExtensionVerdict], zh: bool) -> str:
    headers = (["实验", "补充内容", "结论", "测得值"] if zh
               else ["experiment", "what it adds", "verdict", "measured"])
    rows = []
    for e in es:
        word = ZH[e.verdict] if zh else e.verdict
        colour = COLOURS["holds" if e.measurement.holds else "does not hold"]
        rows.append([_experiments_html([e.extension.experiment]),
                     text(e.extension.what_zh if zh else e.extension.what_en),
                     f'<strong style="color:{colour}">{escape(word)}</strong>',
                     _numbers_html(e.measurement, zh, name=False)])
    return _table(headers, (14, 40, 10, 36), rows)


def section_for(claim_verdicts: Sequence[ClaimVerdict],
                extensions: Sequence[ExtensionVerdict],
                results: Sequence[Result]) -> Section:
    """The inventory section; it fails only when some experiment gave a verdict other than
    the one it expected (a defect), never because a claim does not hold."""
    n = counts(claim_verdicts)
    summary_en = ", ".join(f"{n[v]} {v}" for v in CLAIM_VERDICTS)
    summary_zh = "，".join(f"{ZH[v]} {n[v]} 条" for v in CLAIM_VERDICTS)
    body = bilingual(_INTRO_EN, _INTRO_ZH)
    body += bilingual(f"{len(claim_verdicts)} items: {summary_en}.",
                      f"共 {len(claim_verdicts)} 条：{summary_zh}。", cls="claim")
    body += f'<div class="en">{_claims_table(claim_verdicts, False)}</div>'
    body += f'<div class="zh" lang="zh">{_claims_table(claim_verdicts, True)}</div>'
    if extensions:
        body += bilingual("attnlab's own extensions (not claims of the articles):",
                          "attnlab 自己的扩展（并非文章的论断）：", tag="h3")
        body += f'<div class="en">{_extensions_table(extensions, False)}</div>'
        body += f'<div class="zh" lang="zh">{_extensions_table(extensions, True)}</div>'
    defects = [r for r in results if not r.passed]
    if defects:
        body += bilingual(
            "Defects (a verdict other than the experiment expected): "
            + ", ".join(r.name for r in defects),
            "缺陷（结论与实验的预期不符）：" + "，".join(r.name for r in defects), cls="claim")
    rows: list[tuple[str, str, bool | None]] = [(v, str(n[v]), None) for v in CLAIM_VERDICTS]
    rows.append(("experiments as expected", f"{len(results) - len(defects)}/{len(results)}",
                 not defects))
    return Section("claims", "Claims of the articles", "文章论断清单", body, not defects, rows)


def build(ctx: ReportContext) -> Section:
    """The inventory from this build's experiment results (run here if no section has)."""
    results = experiment_results(ctx)
    return section_for(verdicts(results), extension_verdicts(results), results)
