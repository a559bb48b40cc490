"""qk-variance: Var(q·k) = d_k for iid unit-variance q, k; dividing by √d_k brings it to 1.

With q_i, k_i iid, mean 0, variance 1, the products q_i k_i are independent with mean 0 and
variance E[q_i²]E[k_i²] = 1, so Var(q·k) = Σ_i Var(q_i k_i) = d_k, and
Var(q·k / √d_k) = 1 whatever d_k is (article 000, "why divide by √d_k").

The scaled scores are read back from ``attnlab.scaled_dot_product_attention`` itself (its
default scale), so the experiment checks attnlab's scaling, not a formula typed here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ._common import new_figure, scores_via_attnlab, seeded
from ._result import Result

NAME = "qk-variance"
CLAIM = ("For iid unit-variance q and k, Var(q·k) = d_k; after attnlab divides by √d_k the "
         "score variance is 1 for every d_k.")
CLAIM_ZH = ("当 q、k 各分量独立且方差为 1 时，Var(q·k) = d_k；attnlab 除以 √d_k 之后，"
            "无论 d_k 多大，分数的方差都是 1。")


def run(
    seed: int = 0,
    *,
    dims: Sequence[int] = (16, 64, 256, 1024),
    pairs: int = 2_097_152,
    m: int = 256,
    scale_fn: Callable[[int], float | None] = lambda d_k: None,
    plot: bool = True,
) -> Result:
    """Score blocks of ``m`` queries against ``m`` keys per d_k (all pairs).

    ``scale_fn(d_k)`` is the scale handed to attnlab (None = attnlab's default 1/√d_k);
    a wrong one (e.g. ``lambda d: 1.0``) must fail.

    The tolerance comes from the sampling error of the variance estimate: over all m² pairs
    of a block, Var(Ŝ)/d_k² ≈ 2/m² + 4/(d_k m) (pairs sharing a query or a key are
    correlated through |q|², |k|²), divided by the number of blocks G; six standard errors
    of the worst d_k. Small d_k are cheap, so they get ``pairs / m²`` blocks; large d_k,
    whose pairs are nearly independent, get fewer (G ≥ 4).
    """
    rows, raw_rel, scaled_rel, std_errs = [], [], [], []
    with seeded(seed) as g:
        for d_k in dims:
            groups = max(4, pairs // (m * m) * min(dims) // d_k)
            std_errs.append(((2 / m**2 + 4 / (d_k * m)) / groups) ** 0.5)
            q = torch.randn(groups, m, d_k, generator=g, dtype=torch.float64)  # (G, m, d)
            k = torch.randn(groups, m, d_k, generator=g, dtype=torch.float64)  # (G, m, d)
            raw = q @ k.transpose(-2, -1)  # (G, m, m)
            scaled = scores_via_attnlab(q, k, scale_fn(d_k))  # (G, m, m)
            var_raw = float(raw.pow(2).mean())  # the mean is 0 by symmetry: E[q·k] = 0
            var_scaled = float(scaled.pow(2).mean())
            raw_rel.append(abs(var_raw / d_k - 1))
            scaled_rel.append(abs(var_scaled - 1))
            rows.append([d_k, groups * m * m, var_raw, var_raw / d_k, var_scaled])
    measured = max(raw_rel + scaled_rel)
    tolerance = 6 * max(std_errs)
    fig = _figure(dims, rows) if plot else None
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity="max relative error of Var(q·k)/d_k and Var(q·k/√d_k) against 1",
        quantity_zh="Var(q·k)/d_k 与 Var(q·k/√d_k) 相对 1 的最大相对误差",
        measured=measured, expected=0.0, tolerance=tolerance,
        table=(["d_k", "pairs", "Var(q·k) (theory d_k)", "Var(q·k)/d_k", "Var(q·k/√d_k)"], rows),
        figure=fig,
        caption="fp64 (q, k) pairs, all pairs of blocks of m queries × m keys; the scaled "
                "scores are attnlab's own; tolerance = 6 standard errors of the variance "
                "estimate.",
        caption_zh="fp64 (q, k)：每块 m 个查询 × m 个键的全部配对；缩放后的分数取自 attnlab "
                   "本身；容差为方差估计标准误差的 6 倍。",
    )


def _figure(dims: Sequence[int], rows: list[list[float]]):
    from matplotlib.ticker import NullFormatter

    fig, (ax,) = new_figure(6.4, 3.8)
    d = [r[0] for r in rows]
    ax.loglog(d, d, "k--", lw=1, label="theory: Var = d_k")
    ax.loglog(d, [1.0] * len(d), "k:", lw=1, label="theory: Var = 1")
    ax.loglog(d, [r[2] for r in rows], "o-", color="#b3261e", label="raw q·k")
    ax.loglog(d, [r[4] for r in rows], "s-", color="#3451b2", label="attnlab score q·k/√d_k")
    ax.set_xlabel("head dimension d_k")
    ax.set_ylabel("variance of the score")
    ax.set_title("Score variance grows with d_k unless scaled by 1/√d_k")
    ax.set_xticks(list(dims), [str(x) for x in dims])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return fig
