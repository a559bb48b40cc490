"""The report's parity section: attnlab's attention against PyTorch's, and the articles'
own demos (the numbers come from :mod:`attnlab.experiments.parity`; their names in Chinese
from its ``ZH`` catalog)."""

from __future__ import annotations

from attnlab.experiments import parity
from attnlab.experiments.parity import run_parity, seed_demos
from attnlab.report.html import ReportContext, Section, bilingual, table

__all__ = ["build", "catalog"]


def catalog() -> dict[str, str]:
    """The Chinese of the parity checks' names (:mod:`attnlab.experiments.parity`'s ``ZH``)."""
    return dict(getattr(parity, "ZH", {}))


def build(ctx: ReportContext) -> Section:
    """Every parity comparison and seed demo, one table each; fails if any check fails."""
    checks = run_parity(ctx.seed)
    demos = seed_demos(ctx.seed)
    passed = all(c.passed for c in checks) and all(ok for _, _, ok in demos)
    zh = catalog()
    body = bilingual(
        "attnlab's attention against PyTorch's on random inputs (max absolute error; "
        "fp32 unless noted). Where nn.MultiheadAttention returns NaN for a fully-masked "
        "row, attnlab returns 0.",
        "在随机输入上把 attnlab 的注意力与 PyTorch 对比（最大绝对误差；除注明外为 fp32）。"
        "对整行被遮蔽的情况，nn.MultiheadAttention 返回 NaN，attnlab 返回 0。",
    )
    body += table(["check", "max |error|", "tolerance", "result"],
                  [(c.name, c.max_error, c.tolerance, c.passed) for c in checks], passed_col=3,
                  catalog=zh)
    body += bilingual("The articles' own demos and debugging checks:",
                      "两篇文章自己的示例与调试检查：")
    body += table(["check", "value", "result"], demos, passed_col=2,
                  catalog=zh)
    rows: list[tuple[str, str, bool | None]] = [(c.name, f"{c.max_error:.1e}", c.passed)
                                                for c in checks]
    rows += [(n, v, ok) for n, v, ok in demos]
    return Section("parity", "Parity with PyTorch", "与 PyTorch 的一致性", body, passed, rows)
