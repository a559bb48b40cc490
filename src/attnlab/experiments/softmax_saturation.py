"""softmax-saturation: unscaled scores saturate the softmax as d_k grows; the gradient
through it to the scores vanishes, the gradient reaching W_q grows (the explosion);
scaled scores don't saturate.

When saturation happens: softmax of a row of scores is nearly one-hot once the gap between
its largest and second-largest score is large against 1. For queries and keys with
independent unit-variance components the raw scores of a row have standard deviation
√d_k, so with a fixed number N of keys the gaps grow like √d_k and the rows saturate as d_k
grows: the largest weight → 1, the entropy → 0, and the Jacobian

    ∂p/∂s = diag(p) − p pᵀ

→ 0. Dividing by √d_k keeps the scores at unit variance and the three quantities flat in
d_k. The Jacobian formula is checked against autograd through
``attnlab.scaled_dot_product_attention``.

The gradient, measured (article 000 says it vanishes; article 001 titles the same
situation 「梯度爆炸问题」, gradient explosion): each row's output is read by a random
linear readout u (loss L = Σ_rows u·out), and autograd through attnlab's attention gives
∂L/∂s (through a zero additive mask) and ∂L/∂q. With q = x W_q for an orthogonal W_q
(so q keeps independent unit-variance components, and |x| = |q|), a row's gradient with
respect to W_q is x ∂L/∂qᵀ, of norm |q|·|∂L/∂q|, and the batch gradient is Σ_r x_r ∂L/∂q_rᵀ,
of squared norm Σ_{r,r'} (q_r·q_r')(∂L/∂q_r·∂L/∂q_r') (checked against autograd).

The explosion, measured: relative to the weight (‖W_q‖_F = √d_k), the RMS over rows of
‖∂L/∂W_q‖ / ‖W_q‖. Scaled, every row passes an O(1) gradient and it is flat in d_k (the
control). Unscaled, a row stays unsaturated with probability ~ d_k^(−½) and then passes a
gradient √d_k times the scaled one, so the RMS grows ~ d_k^¼ (and the largest row's
~ d_k^½): the explosion lives in the rare unsaturated rows, while the median row vanishes.
Its largest value over d_k (the last d_k is noisy: few rows are left unsaturated) against
the smallest d_k decides the article's 「梯度爆炸」.

The controls are the same rows the other way: every "unscaled saturates / vanishes / grows"
measurement is repeated on the scaled rows (same queries and keys), which must not
saturate, vanish or grow, and every "scaled stays flat" one on the unscaled rows, which must
not stay flat. "No explosion through the softmax" has for control the same statistic on the
gradient reaching W_q (which does grow), the saturated rows' share of that gradient the
share they would carry if every row carried the same (their fraction of the rows). The two
formulas (the softmax Jacobian, the batch W_q gradient) hold by construction; their
controls are the wrong formulas (without −ppᵀ, without the cross terms r ≠ r').
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.core.functional import default_scale, scaled_dot_product_attention

from ._common import check_ge, check_le, entropy, label_axes, new_figure, seeded
from ._result import Check, Control, Result

NAME = "softmax-saturation"
CLAIM = ("With N = 16 keys per row and raw scores q·k of standard deviation √d_k (independent "
         "unit-variance components), unscaled attention rows approach one-hot as d_k grows "
         "(max weight → 1, entropy → 0) and the softmax Jacobian diag(p) − ppᵀ vanishes, so "
         "the typical row passes a vanishing gradient to its scores and to W_q, and no row's "
         "gradient to its scores grows; yet the gradient reaching W_q does grow, the "
         "explosion article 001's heading 「梯度爆炸问题」 names: the RMS over rows of "
         "‖∂L/∂W_q‖ / ‖W_q‖ rises several-fold with d_k, carried by the few rows not yet "
         "saturated; with the 1/√d_k scale all of these stay flat in d_k.")
CLAIM_ZH = ("每行 N = 16 个键、未缩放分数 q·k 的标准差为 √d_k（各分量独立、方差为 1）时，"
            "随着 d_k 增大，不缩放时每一行注意力权重都趋近 one-hot 分布"
            "（最大权重 → 1，熵 → 0），softmax 的雅可比矩阵 diag(p) − ppᵀ 趋于 0，"
            "一般的一行传给分数和 W_q 的梯度随之消失，任何一行传给分数的梯度都不增大；"
            "但到达 W_q 的梯度确实增大，即文章 001 标题所说的「梯度爆炸问题」："
            "各行 ‖∂L/∂W_q‖ / ‖W_q‖ 的均方根随 d_k 增大数倍，由少数尚未饱和的行承载；"
            "按 1/√d_k 缩放后，这些量都不随 d_k 变化。")

#: A row counts as saturated when its largest weight exceeds this.
SATURATED = 0.99
#: 「梯度爆炸」, measured: unscaled, the RMS over rows of ‖∂L/∂W_q‖ / ‖W_q‖_F must grow by
#: at least this factor from the smallest d_k to the largest (theory: ∝ d_k^¼ at large
#: d_k, carried by the rows not yet saturated) ...
WQ_GROWTH = 4.0
#: ... while scaled (the control) its largest and smallest over d_k stay within this factor.
WQ_FLAT = 2.0

ZH: dict[str, str] = {
    # checks
    "unscaled entropy at the largest d_k (nats)": "最大 d_k 处未缩放行的熵（奈特）",
    "unscaled Jacobian norm at largest d_k / at smallest": "未缩放：最大 d_k 处的雅可比范数 / "
                                                           "最小 d_k 处的",
    "scaled: spread of mean max weight over d_k": "缩放：各 d_k 间平均最大权重的极差",
    "scaled: spread of mean entropy over d_k / log N": "缩放：各 d_k 间平均熵的极差 / log N",
    "scaled: spread of Jacobian norm over d_k / its mean": "缩放：各 d_k 间雅可比范数的极差 / "
                                                           "其均值",
    "max |diag(p) − ppᵀ − autograd| (fp64)": "|diag(p) − ppᵀ − autograd| 的最大值（fp64）",
    "unscaled gradient vanishes: median row ‖∂L/∂s‖ at largest d_k / at smallest":
        "未缩放时梯度消失：最大 d_k 处每行 ‖∂L/∂s‖ 的中位数 / 最小 d_k 处的",
    "unscaled gradient vanishes: median row ‖∂L/∂W_q‖ at largest d_k / at smallest":
        "未缩放时梯度消失：最大 d_k 处每行 ‖∂L/∂W_q‖ 的中位数 / 最小 d_k 处的",
    "no explosion through the softmax: largest row ‖∂L/∂s‖ at largest d_k / at smallest, "
    "unscaled": "softmax 处没有梯度爆炸：未缩放时最大 d_k 处每行 ‖∂L/∂s‖ 的最大值 / "
                "最小 d_k 处的",
    "saturated rows' share of the unscaled W_q gradient at the largest d_k":
        "最大 d_k 处饱和行在未缩放 W_q 梯度中所占的份额",
    "gradient explosion, unscaled: largest RMS row ‖∂L/∂W_q‖ / ‖W_q‖ over d_k / at the "
    "smallest d_k": "梯度爆炸（未缩放）：各 d_k 中每行 ‖∂L/∂W_q‖ / ‖W_q‖ 均方根的最大值 / 最小 "
                    "d_k 处的值",
    "scaled (control): largest / smallest RMS row ‖∂L/∂W_q‖ / ‖W_q‖ over d_k":
        "缩放（对照）：各 d_k 间每行 ‖∂L/∂W_q‖ / ‖W_q‖ 均方根的最大值 / 最小值",
    "RMS row ‖∂L/∂W_q‖ / ‖W_q‖ (raw)": "每行 ‖∂L/∂W_q‖ / ‖W_q‖ 均方根（未缩放）",
    "RMS row ‖∂L/∂W_q‖ / ‖W_q‖ (scaled)": "每行 ‖∂L/∂W_q‖ / ‖W_q‖ 均方根（缩放）",
    "batch ‖∂L/∂W_q‖ from Σ (q_r·q_r')(g_r·g_r') vs autograd, relative (fp64)":
        "由 Σ (q_r·q_r')(g_r·g_r') 得到的批量 ‖∂L/∂W_q‖ 与 autograd 的相对差（fp64）",
    # table
    "max w (raw)": "最大权重（未缩放）",
    "entropy (raw)": "熵（未缩放）",
    "‖J‖ (raw)": "‖J‖（未缩放）",
    "max w (scaled)": "最大权重（缩放）",
    "entropy (scaled)": "熵（缩放）",
    "‖J‖ (scaled)": "‖J‖（缩放）",
    "median row ‖∂L/∂s‖ (raw)": "每行 ‖∂L/∂s‖ 中位数（未缩放）",
    "median row ‖∂L/∂s‖ (scaled)": "每行 ‖∂L/∂s‖ 中位数（缩放）",
    "median row ‖∂L/∂W_q‖ (raw)": "每行 ‖∂L/∂W_q‖ 中位数（未缩放）",
    "median row ‖∂L/∂W_q‖ (scaled)": "每行 ‖∂L/∂W_q‖ 中位数（缩放）",
    "batch ‖∂L/∂W_q‖ (raw)": "批量 ‖∂L/∂W_q‖（未缩放）",
    "batch ‖∂L/∂W_q‖ (scaled)": "批量 ‖∂L/∂W_q‖（缩放）",
    "saturated rows (raw)": "饱和行比例（未缩放）",
    # figure
    "Largest weight per row": "每行的最大权重",
    "Row entropy": "行熵",
    "Softmax Jacobian ‖diag(p) − ppᵀ‖_F": "softmax 雅可比矩阵 ‖diag(p) − ppᵀ‖_F",
    "mean entropy (nats)": "平均熵（奈特）",
    "mean Frobenius norm": "平均 Frobenius 范数",
    "unscaled q·k": "未缩放的 q·k",
    "scaled q·k/√d_k": "缩放后的 q·k/√d_k",
    "uniform (log N)": "均匀分布（log N）",
    "Gradient to the scores, per row": "每行传给分数的梯度",
    "‖∂L/∂s‖ (log scale)": "‖∂L/∂s‖（对数坐标）",
    "median, unscaled": "中位数，未缩放",
    "largest, unscaled": "最大值，未缩放",
    "median, scaled": "中位数，缩放",
    "largest, scaled": "最大值，缩放",
    "Gradient to W_q": "传给 W_q 的梯度",
    "‖∂L/∂W_q‖ (log scale)": "‖∂L/∂W_q‖（对数坐标）",
    "median row, unscaled": "每行中位数，未缩放",
    "median row, scaled": "每行中位数，缩放",
    "whole batch, unscaled": "整批，未缩放",
    "whole batch, scaled": "整批，缩放",
    "Unscaled: who carries the W_q gradient": "未缩放：W_q 的梯度由谁承载",
    "fraction": "比例",
    "rows saturated (max w > {})": "饱和行（最大权重 > {}）所占比例",
    "their share of Σ_r ‖∂L/∂W_q,r‖": "它们在 Σ_r ‖∂L/∂W_q,r‖ 中的份额",
}


def softmax_jacobian(p: Tensor) -> Tensor:
    """(..., N) probabilities -> (..., N, N) Jacobian ∂p/∂s = diag(p) − p pᵀ."""
    return torch.diag_embed(p) - p[..., :, None] * p[..., None, :]


def _gradients(q: Tensor, k: Tensor, v: Tensor, u: Tensor, scale: float | None
               ) -> tuple[Tensor, Tensor, Tensor]:
    """Weights (R, N), ∂L/∂s (R, N), ∂L/∂q (R, d) for L = Σ_r u_r·out_r, all through attnlab.

    ∂L/∂s is the gradient with respect to a zero additive mask, which enters the softmax
    exactly where the scores do.
    """
    q = q.detach().requires_grad_(True)
    bias = torch.zeros(q.shape[0], 1, k.shape[-2], dtype=q.dtype, requires_grad=True)
    out, w = scaled_dot_product_attention(q, k, v, bias, scale=scale, return_weights=True)
    g_q, g_s = torch.autograd.grad((out * u).sum(), (q, bias))
    return w[:, 0].detach(), g_s[:, 0], g_q[:, 0]


def _batch_wq_norm(q: Tensor, g_q: Tensor) -> float:
    """‖Σ_r x_r ∂L/∂q_rᵀ‖_F for q = x W_q with W_q orthogonal (x·x' = q·q'), via Gram
    matrices: R²·d operations instead of R·d²."""
    return float(((q @ q.T) * (g_q @ g_q.T)).sum().clamp_min(0).sqrt())


@dataclass(frozen=True)
class RowStats:
    """What one batch of rows (one d_k, scaled or unscaled) shows, means over the rows."""

    max_weight: float
    entropy: float  # nats
    jacobian_norm: float  # Frobenius norm of diag(p) − ppᵀ
    grad_s_median: float  # median row ‖∂L/∂s‖
    grad_s_max: float  # largest row ‖∂L/∂s‖
    grad_wq_median: float  # median row ‖∂L/∂W_q‖
    grad_wq_batch: float  # ‖∂L/∂W_q‖ of the whole batch
    grad_wq_rms: float  # RMS row ‖∂L/∂W_q‖ / ‖W_q‖
    grad_wq_max: float  # largest row ‖∂L/∂W_q‖ / ‖W_q‖
    saturated: float  # fraction of rows whose largest weight exceeds SATURATED
    saturated_share: float  # their share of Σ_r ‖∂L/∂W_q,r‖


@dataclass(frozen=True)
class SaturationRow:
    """One d_k: the same queries and keys, unscaled and scaled."""

    d_k: int
    unscaled: RowStats
    scaled: RowStats

    def cells(self) -> list:
        u, s = self.unscaled, self.scaled
        return [self.d_k, u.max_weight, u.entropy, u.jacobian_norm, s.max_weight, s.entropy,
                s.jacobian_norm, u.grad_s_median, s.grad_s_median, u.grad_wq_median,
                s.grad_wq_median, u.grad_wq_batch, s.grad_wq_batch, u.grad_wq_rms,
                s.grad_wq_rms, u.saturated]


@dataclass(frozen=True)
class SoftmaxSaturationMeasurement:
    """Every d_k, scaled and unscaled, and the two formulas against autograd (with the
    wrong formulas as their controls)."""

    rows: int
    keys: int
    per_dim: tuple[SaturationRow, ...]
    jacobian_error: float  # max |diag(p) − ppᵀ − autograd|
    jacobian_error_wrong: float  # the same without −ppᵀ
    wq_formula_error: float  # batch ‖∂L/∂W_q‖ by Gram matrices vs autograd, relative
    wq_formula_error_wrong: float  # the same without the cross terms

    @property
    def dims(self) -> list[int]:
        return [r.d_k for r in self.per_dim]

    @property
    def unscaled(self) -> list[RowStats]:
        return [r.unscaled for r in self.per_dim]

    @property
    def scaled(self) -> list[RowStats]:
        return [r.scaled for r in self.per_dim]

    @property
    def log_n(self) -> float:
        return math.log(self.keys)


def _row_stats(q: Tensor, k: Tensor, v: Tensor, u: Tensor, scale: float | None, d_k: int,
               jacobian_fn: Callable[[Tensor], Tensor]) -> RowStats:
    """Weights, Jacobian and gradients of (R, 1, d) queries against (R, N, d) keys."""
    p, g_s, g_q = _gradients(q, k, v, u, scale)  # (R, N), (R, N), (R, d)
    jac = jacobian_fn(p)  # (R, N, N)
    gs_row = g_s.norm(dim=-1)  # (R,)
    gw_row = q[:, 0].norm(dim=-1) * g_q.norm(dim=-1)  # (R,) |x||∂L/∂q|
    sat = p.max(-1).values > SATURATED
    return RowStats(
        float(p.max(-1).values.mean()), float(entropy(p).mean()),
        float(torch.linalg.matrix_norm(jac).mean()),
        grad_s_median=float(gs_row.median()), grad_s_max=float(gs_row.max()),
        grad_wq_median=float(gw_row.median()), grad_wq_batch=_batch_wq_norm(q[:, 0], g_q),
        grad_wq_rms=float(gw_row.square().mean().sqrt()) / math.sqrt(d_k),
        grad_wq_max=float(gw_row.max()) / math.sqrt(d_k),
        saturated=float(sat.double().mean()),
        saturated_share=float(gw_row[sat].sum() / gw_row.sum()))


def _jacobian_errors(g: torch.Generator, d_k: int, keys: int,
                     jacobian_fn: Callable[[Tensor], Tensor]) -> tuple[float, float]:
    """The Jacobian against autograd (d weights / d q = J_softmax · scale · K): the error of
    ``jacobian_fn`` and of the wrong formula without −ppᵀ (the control)."""
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
    return (float((auto - analytic).abs().max()),
            float((auto - torch.diag_embed(p) @ (scale * k)).abs().max()))  # no −ppᵀ


def measure(
    seed: int = 0,
    *,
    dims: Sequence[int] = (4, 16, 64, 256, 1024, 4096),
    rows: int = 256,
    keys: int = 16,
    scale_fn: Callable[[int], float | None] = lambda d_k: None,
    jacobian_fn: Callable[[Tensor], Tensor] = softmax_jacobian,
) -> SoftmaxSaturationMeasurement:
    """``rows`` queries against ``keys`` keys per d_k, unscaled and scaled (``scale_fn``),
    then the two formulas against autograd."""
    per_dim = []
    with seeded(seed) as g:
        for d_k in dims:
            q = torch.randn(rows, 1, d_k, generator=g, dtype=torch.float64)  # (R, 1, d)
            k = torch.randn(rows, keys, d_k, generator=g, dtype=torch.float64)  # (R, N, d)
            v = torch.randn(rows, keys, 1, generator=g, dtype=torch.float64)  # (R, N, 1)
            u = torch.randn(rows, 1, 1, generator=g, dtype=torch.float64)  # readout
            per_dim.append(SaturationRow(
                d_k, _row_stats(q, k, v, u, 1.0, d_k, jacobian_fn),
                _row_stats(q, k, v, u, scale_fn(d_k), d_k, jacobian_fn)))
        d_k = dims[len(dims) // 2]
        jac_err, jac_wrong = _jacobian_errors(g, d_k, keys, jacobian_fn)
        # the identities' controls: the wrong formulas the same tests must reject
        wq_err, wq_wrong = _check_batch_formula(g, d_k, keys)
    return SoftmaxSaturationMeasurement(rows, keys, tuple(per_dim), jac_err, jac_wrong,
                                        wq_err, wq_wrong)


def _spread(xs: list[float]) -> float:
    return max(xs) - min(xs)


def _unscaled(value: float) -> Control:  # the control of a "scaled rows stay flat" check
    return Control("the unscaled rows (same queries and keys)",
                   "未缩放的行（相同的查询与键）", value)


def _scaled(value: float) -> Control:  # the control of an "unscaled rows ..." check
    return Control("the scaled rows q·k/√d_k (same queries and keys)",
                   "缩放后的行 q·k/√d_k（相同的查询与键）", value)


def headline_control(m: SoftmaxSaturationMeasurement) -> Control:
    """The scaled rows' mean max weight at the largest d_k."""
    d_top = m.dims[-1]
    return Control(f"the scaled rows q·k/√d_k (same queries and keys), d_k = {d_top}",
                   f"缩放后的行 q·k/√d_k（相同的查询与键），d_k = {d_top}",
                   m.scaled[-1].max_weight)


def _saturation_checks(m: SoftmaxSaturationMeasurement) -> list[Check]:
    """Unscaled rows saturate, scaled rows stay flat; the Jacobian formula."""
    un, sc, log_n = m.unscaled, m.scaled, m.log_n
    return [
        check_le("unscaled entropy at the largest d_k (nats)", un[-1].entropy, 0.05 * log_n,
                 id="unscaled-entropy", control=Control(
                     f"the scaled rows q·k/√d_k (same queries and keys), d_k = {m.dims[-1]}",
                     f"缩放后的行 q·k/√d_k（相同的查询与键），d_k = {m.dims[-1]}",
                     sc[-1].entropy)),
        check_le("unscaled Jacobian norm at largest d_k / at smallest",
                 un[-1].jacobian_norm / un[0].jacobian_norm, 0.2, id="unscaled-jacobian",
                 control=_scaled(sc[-1].jacobian_norm / sc[0].jacobian_norm)),
        check_le("scaled: spread of mean max weight over d_k",
                 _spread([x.max_weight for x in sc]), 0.05, id="scaled-max-weight-flat",
                 control=_unscaled(_spread([x.max_weight for x in un]))),
        check_le("scaled: spread of mean entropy over d_k / log N",
                 _spread([x.entropy for x in sc]) / log_n, 0.05, id="scaled-entropy-flat",
                 control=_unscaled(_spread([x.entropy for x in un]) / log_n)),
        check_le("scaled: spread of Jacobian norm over d_k / its mean",
                 _spread([x.jacobian_norm for x in sc])
                 / (sum(x.jacobian_norm for x in sc) / len(sc)), 0.1,
                 id="scaled-jacobian-flat",
                 control=_unscaled(_spread([x.jacobian_norm for x in un])
                                   / (sum(x.jacobian_norm for x in un) / len(un)))),
        check_le("max |diag(p) − ppᵀ − autograd| (fp64)", m.jacobian_error, 1e-12,
                 id="jacobian-formula", by_construction=True,
                 control=Control("the Jacobian without its −ppᵀ term (diag(p))",
                                 "去掉 −ppᵀ 项的雅可比矩阵（diag(p)）", m.jacobian_error_wrong)),
    ]


def _gradient_checks(m: SoftmaxSaturationMeasurement) -> list[Check]:
    """The gradient vanishes at the scores, grows at W_q unscaled; the batch formula."""
    gu, gsc = m.unscaled, m.scaled
    w_rel_u = [x.grad_wq_rms for x in gu]
    w_rel_s = [x.grad_wq_rms for x in gsc]
    w_max = [x.grad_wq_max for x in gu]
    return [
        check_le("unscaled gradient vanishes: median row ‖∂L/∂s‖ at largest d_k / at smallest",
                 gu[-1].grad_s_median / gu[0].grad_s_median, 1e-2,
                 id="gradient-vanishes-scores",
                 control=_scaled(gsc[-1].grad_s_median / gsc[0].grad_s_median)),
        check_le("unscaled gradient vanishes: median row ‖∂L/∂W_q‖ at largest d_k / at "
                 "smallest", gu[-1].grad_wq_median / gu[0].grad_wq_median, 1e-2,
                 id="gradient-vanishes-wq",
                 control=_scaled(gsc[-1].grad_wq_median / gsc[0].grad_wq_median)),
        check_le("no explosion through the softmax: largest row ‖∂L/∂s‖ at largest d_k / at "
                 "smallest, unscaled", gu[-1].grad_s_max / gu[0].grad_s_max, 2.0,
                 id="no-explosion",
                 control=Control("the same rows' gradient reaching W_q: largest row "
                                 "‖∂L/∂W_q‖ / ‖W_q‖ over d_k / at the smallest, unscaled",
                                 "同样这些行到达 W_q 的梯度：未缩放时各 d_k 中每行 "
                                 "‖∂L/∂W_q‖ / ‖W_q‖ 的最大值 / 最小 d_k 处的值",
                                 max(w_max) / w_max[0])),
        check_ge("gradient explosion, unscaled: largest RMS row ‖∂L/∂W_q‖ / ‖W_q‖ over d_k / "
                 "at the smallest d_k", max(w_rel_u) / w_rel_u[0], WQ_GROWTH,
                 id="wq-gradient-grows-unscaled", control=_scaled(max(w_rel_s) / w_rel_s[0])),
        check_le("scaled (control): largest / smallest RMS row ‖∂L/∂W_q‖ / ‖W_q‖ over d_k",
                 max(w_rel_s) / min(w_rel_s), WQ_FLAT, id="wq-gradient-flat-scaled",
                 control=_unscaled(max(w_rel_u) / min(w_rel_u))),
        check_le("saturated rows' share of the unscaled W_q gradient at the largest d_k",
                 gu[-1].saturated_share, 0.2, id="saturated-share",
                 control=Control("every row carrying the same gradient: the saturated rows' "
                                 "share would be their fraction of the rows",
                                 "若每行承载相同的梯度：饱和行的份额即它们在各行中所占的比例",
                                 gu[-1].saturated)),
        check_le("batch ‖∂L/∂W_q‖ from Σ (q_r·q_r')(g_r·g_r') vs autograd, relative (fp64)",
                 m.wq_formula_error, 1e-12, id="wq-gradient-formula", by_construction=True,
                 control=Control("the batch norm without the cross terms r ≠ r' "
                                 "(√Σ_r |q_r|²|g_r|²)", "去掉 r ≠ r' 交叉项的批量范数"
                                 "（√Σ_r |q_r|²|g_r|²）", m.wq_formula_error_wrong)),
    ]


def checks(m: SoftmaxSaturationMeasurement) -> list[Check]:
    """Every check, each with its control (the same rows the other way, or the wrong
    formula)."""
    return _saturation_checks(m) + _gradient_checks(m)


def table(m: SoftmaxSaturationMeasurement) -> tuple[list[str], list[list]]:
    return (["d_k", "max w (raw)", "entropy (raw)", "‖J‖ (raw)", "max w (scaled)",
             "entropy (scaled)", "‖J‖ (scaled)", "median row ‖∂L/∂s‖ (raw)",
             "median row ‖∂L/∂s‖ (scaled)", "median row ‖∂L/∂W_q‖ (raw)",
             "median row ‖∂L/∂W_q‖ (scaled)", "batch ‖∂L/∂W_q‖ (raw)",
             "batch ‖∂L/∂W_q‖ (scaled)", "RMS row ‖∂L/∂W_q‖ / ‖W_q‖ (raw)",
             "RMS row ‖∂L/∂W_q‖ / ‖W_q‖ (scaled)", "saturated rows (raw)"],
            [r.cells() for r in m.per_dim])


def captions(m: SoftmaxSaturationMeasurement) -> tuple[str, str]:
    """The caption in English and in Chinese: the setting and the gradients, unscaled."""
    rows, keys, log_n, dims, gu, gsc = m.rows, m.keys, m.log_n, m.dims, m.unscaled, m.scaled
    growth = gu[-1].grad_wq_batch / gsc[-1].grad_wq_batch
    s_top = max(x.grad_s_max for x in gu)
    rise = max(x.grad_wq_rms for x in gu) / gu[0].grad_wq_rms
    within = max(x.grad_wq_rms for x in gsc) / min(x.grad_wq_rms for x in gsc)
    en = (f"{rows} query rows against {keys} keys per d_k; entropy in nats "
          f"(uniform = log {keys} = {log_n:.2f}); ‖J‖ is the Frobenius norm; L = Σ u·out "
          f"with a random readout u; a row is saturated when its largest weight exceeds "
          f"{SATURATED}. Unscaled, the median row's ‖∂L/∂s‖ falls from "
          f"{gu[0].grad_s_median:.3g} (d_k = {dims[0]}) to {gu[-1].grad_s_median:.3g} "
          f"(d_k = {dims[-1]}) and no row's exceeds {s_top:.3g}: "
          f"the gradient to the scores vanishes, it does not explode. What does grow "
          f"(the explosion) is the gradient reaching W_q: the RMS row ‖∂L/∂W_q‖ / ‖W_q‖ "
          f"rises up to {rise:.3g}× its value "
          f"at d_k = {dims[0]} unscaled, and stays within "
          f"{within:.3g}× scaled; "
          f"the batch "
          f"gradient with respect to W_q ({growth:.3g}× the scaled one at d_k = "
          f"{dims[-1]}): it comes from the few rows not saturated (the saturated "
          f"{gu[-1].saturated:.0%} carry {gu[-1].saturated_share:.1%} of it), whose scores are "
          f"√d_k times more sensitive to q without the scale.")
    zh = (f"每个 d_k 取 {rows} 行查询、{keys} 个键；熵以 nat 为单位"
          f"（均匀分布 = log {keys} = {log_n:.2f}）；‖J‖ 为 Frobenius 范数；"
          f"L = Σ u·out，u 为随机读出向量；最大权重超过 {SATURATED} 的行记为饱和。"
          f"不缩放时，每行 ‖∂L/∂s‖ 的中位数从 {gu[0].grad_s_median:.3g}（d_k = {dims[0]}）"
          f"降到 {gu[-1].grad_s_median:.3g}（d_k = {dims[-1]}），任何一行都不超过 "
          f"{s_top:.3g}：传给分数的梯度是消失，而不是爆炸。"
          f"确实增大（即梯度爆炸）的是到达 W_q 的梯度：不缩放时每行 ‖∂L/∂W_q‖ / ‖W_q‖ "
          f"的均方根最多增至 d_k = {dims[0]} 时的 "
          f"{rise:.3g} 倍，"
          f"缩放时各 d_k 间相差"
          f"不超过 {within:.3g} "
          f"倍；对 W_q 的整批梯度（d_k = {dims[-1]} 时为缩放情形的 {growth:.3g} 倍）："
          f"它来自"
          f"少数未饱和的行（占 {gu[-1].saturated:.0%} 的饱和行只贡献其中的 "
          f"{gu[-1].saturated_share:.1%}），不缩放时这些行的分数对 q 的敏感度高出 √d_k 倍。")
    return en, zh


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
    m = measure(seed, dims=dims, rows=rows, keys=keys, scale_fn=scale_fn,
                jacobian_fn=jacobian_fn)
    caption, caption_zh = captions(m)
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity=f"mean max weight of unscaled rows at d_k = {dims[-1]} ({keys} keys)",
        quantity_zh=f"d_k = {dims[-1]} 时未缩放行的平均最大权重（{keys} 个键）",
        measured=m.unscaled[-1].max_weight, expected=1.0, tolerance=0.05, checks=checks(m),
        control=headline_control(m), table=table(m), figure=figure(m) if plot else None,
        caption=caption, caption_zh=caption_zh)


def _check_batch_formula(g: torch.Generator, d_k: int, keys: int, rows: int = 8
                         ) -> tuple[float, float]:
    """Relative differences from autograd through an explicit orthogonal (signed
    permutation) W_q, unscaled scores, of the Gram-matrix batch ‖∂L/∂W_q‖ and of the wrong
    formula without the cross terms r ≠ r' (the control the same test must reject)."""
    x = torch.randn(rows, 1, d_k, generator=g, dtype=torch.float64)
    perm = torch.randperm(d_k, generator=g)
    sign = torch.randint(0, 2, (d_k,), generator=g).double() * 2 - 1
    w_q = (torch.eye(d_k, dtype=torch.float64)[perm] * sign[:, None]).requires_grad_(True)
    k = torch.randn(rows, keys, d_k, generator=g, dtype=torch.float64)
    v = torch.randn(rows, keys, 1, generator=g, dtype=torch.float64)
    u = torch.randn(rows, 1, 1, generator=g, dtype=torch.float64)
    out = scaled_dot_product_attention(x @ w_q, k, v, scale=1.0)
    (auto,) = torch.autograd.grad((out * u).sum(), (w_q,))
    _, _, g_q = _gradients((x @ w_q).detach(), k, v, u, 1.0)
    q = (x @ w_q).detach()[:, 0]
    formula = _batch_wq_norm(q, g_q)
    no_cross = float((q.square().sum(-1) * g_q.square().sum(-1)).sum().sqrt())
    norm = float(auto.norm())
    return abs(formula - norm) / norm, abs(no_cross - norm) / norm


def figure(m: SoftmaxSaturationMeasurement):
    """Max weight, entropy, Jacobian; the gradients to the scores and to W_q; who carries
    the W_q gradient unscaled."""
    from matplotlib.ticker import NullFormatter

    dims, un, sc, log_n = m.dims, m.unscaled, m.scaled, m.log_n
    fig, axes = new_figure(12, 6.8, ncols=3, nrows=2)
    titles = ["Largest weight per row", "Row entropy", "Softmax Jacobian ‖diag(p) − ppᵀ‖_F"]
    ylabels = ["mean max weight", "mean entropy (nats)", "mean Frobenius norm"]
    red, blue = "#b3261e", "#3451b2"
    for i, (ax, field) in enumerate(zip(axes[:3], ("max_weight", "entropy", "jacobian_norm"))):
        ax.semilogx(dims, [getattr(x, field) for x in un], "o-", color=red, label="unscaled q·k")
        ax.semilogx(dims, [getattr(x, field) for x in sc], "s-", color=blue,
                    label="scaled q·k/√d_k")
        if i == 1:
            ax.axhline(log_n, color="k", ls=":", lw=1, label="uniform (log N)")
    panels = (("grad_s_median", "grad_s_max", "median", "largest",
               "Gradient to the scores, per row", "‖∂L/∂s‖ (log scale)"),
              ("grad_wq_median", "grad_wq_batch", "median row", "whole batch", "Gradient to W_q",
               "‖∂L/∂W_q‖ (log scale)"))
    for ax, (mid, top, mid_label, top_label, title, ylabel) in zip(axes[3:5], panels):
        for runs, marker, color, kind in ((un, "o", red, "unscaled"), (sc, "s", blue, "scaled")):
            ax.loglog(dims, [getattr(x, mid) for x in runs], f"{marker}-", color=color,
                      label=f"{mid_label}, {kind}")
            ax.loglog(dims, [getattr(x, top) for x in runs], f"{marker}--", color=color,
                      alpha=0.6, label=f"{top_label}, {kind}")
        titles.append(title)
        ylabels.append(ylabel)
    ax = axes[5]
    ax.semilogx(dims, [x.saturated for x in un], "o-", color=red,
                label=f"rows saturated (max w > {SATURATED})")
    ax.semilogx(dims, [x.saturated_share for x in un], "^--", color="#137a3a",
                label="their share of Σ_r ‖∂L/∂W_q,r‖")
    titles.append("Unscaled: who carries the W_q gradient")
    ylabels.append("fraction")
    for i, ax in enumerate(axes):
        ax.set_xticks(list(dims), [str(d) for d in dims])
        ax.xaxis.set_minor_formatter(NullFormatter())
        label_axes(ax, "head dimension d_k", ylabels[i], titles[i], log_grid=i in (3, 4))
    return fig
