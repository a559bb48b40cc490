"""softmax-saturation: unscaled scores saturate the softmax as d_k grows; scaled ones don't.

For iid unit-variance q, k the raw scores have standard deviation √d_k. Softmax of logits
that far apart is nearly one-hot: the largest weight → 1, the entropy → 0, and its Jacobian

    ∂p/∂s = diag(p) − p pᵀ

→ 0, so almost no gradient reaches q and k (article 000). Dividing by √d_k keeps the
scores at unit variance, and the three quantities stay flat in d_k. The Jacobian formula is
checked against autograd through ``attnlab.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from attnlab.core.functional import default_scale, scaled_dot_product_attention

from ._common import check_le, entropy, label_axes, new_figure, seeded
from ._result import Result

NAME = "softmax-saturation"
CLAIM = ("Without the 1/√d_k scale, attention rows approach one-hot as d_k grows (max weight "
         "→ 1, entropy → 0) and the softmax Jacobian diag(p) − ppᵀ vanishes; with it, all "
         "three stay flat.")
CLAIM_ZH = ("不除以 √d_k 时，随着 d_k 增大，注意力行趋近 one-hot（最大权重 → 1，熵 → 0），"
            "softmax 的雅可比矩阵 diag(p) − ppᵀ 趋于 0（梯度消失）；缩放后三者都保持平稳。")


def softmax_jacobian(p: Tensor) -> Tensor:
    """(..., N) probabilities -> (..., N, N) Jacobian ∂p/∂s = diag(p) − p pᵀ."""
    return torch.diag_embed(p) - p[..., :, None] * p[..., None, :]


def run(
    seed: int = 0,
    *,
    dims: Sequence[int] = (4, 16, 64, 256, 1024, 4096),
    rows: int = 256,
    keys: int = 16,
    scale_fn: Callable[[int], float | None] = lambda d_k: None,
    jacobian_fn: Callable[[Tensor], Tensor] = softmax_jacobian,
    plot: bool = True,
) -> Result:
    """``rows`` queries against ``keys`` keys per d_k, scaled (``scale_fn``) and unscaled.

    Wrong variants: ``scale_fn=lambda d: 1.0`` (the "scaled" run is not scaled) or a wrong
    ``jacobian_fn`` (e.g. ``torch.diag_embed``) must fail.
    """
    table, stats = [], {"scaled": [], "unscaled": []}
    with seeded(seed) as g:
        for d_k in dims:
            q = torch.randn(rows, 1, d_k, generator=g, dtype=torch.float64)  # (R, 1, d)
            k = torch.randn(rows, keys, d_k, generator=g, dtype=torch.float64)  # (R, N, d)
            v = torch.zeros(rows, keys, 1, dtype=torch.float64)
            row = [d_k]
            for kind, scale in (("unscaled", 1.0), ("scaled", scale_fn(d_k))):
                _, w = scaled_dot_product_attention(q, k, v, scale=scale,
                                                            return_weights=True)
                p = w[:, 0]  # (R, N)
                jac = jacobian_fn(p)  # (R, N, N)
                s = (float(p.max(-1).values.mean()), float(entropy(p).mean()),
                     float(torch.linalg.matrix_norm(jac).mean()))
                stats[kind].append(s)
                row += list(s)
            table.append(row)
        # the Jacobian against autograd: d weights / d q = J_softmax · scale · K
        d_k = dims[len(dims) // 2]
        q = torch.randn(1, d_k, generator=g, dtype=torch.float64, requires_grad=True)
        k = torch.randn(keys, d_k, generator=g, dtype=torch.float64)
        scale = default_scale(d_k)  # what scaled_dot_product_attention applies

        def weights_of(q_: Tensor) -> Tensor:
            _, w_ = scaled_dot_product_attention(
                q_, k, torch.zeros(keys, 1, dtype=torch.float64), return_weights=True)
            return w_[0]  # (N,)

        auto = torch.autograd.functional.jacobian(weights_of, q)[:, 0]  # (N, d)
        p = weights_of(q).detach()
        analytic = jacobian_fn(p) @ (scale * k)  # (N, d)
        jac_err = float((auto - analytic).abs().max())

    un, sc = stats["unscaled"], stats["scaled"]
    flat = [max(x[i] for x in sc) - min(x[i] for x in sc) for i in range(3)]
    log_n = math.log(keys)
    checks = [
        check_le("unscaled entropy at the largest d_k (nats)", un[-1][1], 0.05 * log_n),
        check_le("unscaled Jacobian norm at largest d_k / at smallest", un[-1][2] / un[0][2],
                 0.2),
        check_le("scaled: spread of mean max weight over d_k", flat[0], 0.05),
        check_le("scaled: spread of mean entropy over d_k / log N", flat[1] / log_n, 0.05),
        check_le("scaled: spread of Jacobian norm over d_k / its mean", flat[2] /
                 (sum(x[2] for x in sc) / len(sc)), 0.1),
        check_le("max |diag(p) − ppᵀ − autograd| (fp64)", jac_err, 1e-12),
    ]
    fig = _figure(dims, un, sc, log_n) if plot else None
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity=f"mean max weight of unscaled rows at d_k = {dims[-1]} ({keys} keys)",
        quantity_zh=f"d_k = {dims[-1]} 时未缩放行的平均最大权重（{keys} 个键）",
        measured=un[-1][0], expected=1.0, tolerance=0.05, checks=checks,
        table=(["d_k", "max w (raw)", "entropy (raw)", "‖J‖ (raw)", "max w (scaled)",
                "entropy (scaled)", "‖J‖ (scaled)"], table),
        figure=fig,
        caption=f"{rows} query rows against {keys} keys per d_k; entropy in nats "
                f"(uniform = log {keys} = {log_n:.2f}); ‖J‖ is the Frobenius norm.",
        caption_zh=f"每个 d_k 取 {rows} 行查询、{keys} 个键；熵以 nat 为单位"
                   f"（均匀分布 = log {keys} = {log_n:.2f}）；‖J‖ 为 Frobenius 范数。",
    )


def _figure(dims, un, sc, log_n):
    from matplotlib.ticker import NullFormatter

    fig, axes = new_figure(10, 3.4, ncols=3)
    titles = ["Largest weight per row", "Row entropy", "Softmax Jacobian ‖diag(p) − ppᵀ‖_F"]
    ylabels = ["mean max weight", "mean entropy (nats)", "mean Frobenius norm"]
    for i, ax in enumerate(axes):
        ax.semilogx(dims, [x[i] for x in un], "o-", color="#b3261e", label="unscaled q·k")
        ax.semilogx(dims, [x[i] for x in sc], "s-", color="#3451b2", label="scaled q·k/√d_k")
        if i == 1:
            ax.axhline(log_n, color="k", ls=":", lw=1, label="uniform (log N)")
        ax.set_xticks(list(dims), [str(d) for d in dims])
        ax.xaxis.set_minor_formatter(NullFormatter())
        label_axes(ax, "head dimension d_k", ylabels[i], titles[i])
    return fig
