"""convex-combination: each attention output is a weighted centroid of the value vectors.

Softmax weights are non-negative and each row sums to 1, so out_i = Σ_j w_ij v_j is a convex
combination of the values: every output lies in their convex hull, and in particular each
coordinate of out_i lies between the minimum and the maximum of that coordinate over the
values (article 000: attention "mixes", it never extrapolates).

All three are identities of the softmax (exp > 0, divided by its own sum): no input can break
them, so they hold by construction. Each is put beside its deliberately wrong variant, which
the same test must reject: for the hull, signed weights that still sum to 1
(:func:`signed_weights`: summing to 1 alone does not make a convex combination); for
non-negative weights and rows summing to 1, the raw scaled scores without the softmax
(:func:`raw_scores`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.core.functional import scaled_dot_product_attention

from ._common import check_le, new_figure, seeded
from ._result import Check, Control, Result

NAME = "convex-combination"
CLAIM = ("Attention weights are non-negative and each row sums to 1, so every output is a "
         "convex combination of the values: each coordinate lies between the values' min "
         "and max.")
CLAIM_ZH = ("注意力权重非负且每行之和为 1，因此每个输出都是值向量的凸组合："
            "输出的每个坐标都介于各值向量在该坐标上的最小值与最大值之间。")

ZH = {
    "most negative weight (as −w)": "最负的权重（取 −w）",
    "max |fused output − weights @ V|": "融合路径的输出与 权重 @ V 之差的最大绝对值",
    "max distance outside [min V, max V]": "超出 [V 的最小值, V 的最大值] 的最大距离",
    "Outputs are weighted centroids of the values": "输出是值向量的加权重心",
    "value dimension {}": "值向量第 {} 维",
    "convex hull of V": "V 的凸包",
    "values v_j": "值向量 v_j",
    "outputs Σ_j w_ij v_j": "输出 Σ_j w_ij v_j",
    "Weights w_ij ≥ {}, each row sums to {}": "权重 w_ij ≥ {}，每行之和为 {}",
    "key / value index j": "键 / 值的序号 j",
    "query index i": "查询的序号 i",
}

Attend = Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]


def attnlab_attend(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """attnlab's attention, returning (out, weights)."""
    return scaled_dot_product_attention(q, k, v, return_weights=True)


def raw_scores(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Wrong: the scaled scores q·k/√d as weights, without the softmax."""
    w = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return w @ v, w


def signed_weights(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Wrong: weights that sum to 1 but can be negative, 2·softmax − 1/N (each row sums to
    2 − 1 = 1)."""
    _, w = attnlab_attend(q, k, v)
    w = 2 * w - 1 / w.shape[-1]
    return w @ v, w


@dataclass(frozen=True)
class ConvexMeasurement:
    """The weights' sign and row sums, the fused path and the hull, each beside its control,
    and a 2-D example for the figure."""

    batch: int
    n: int
    d: int
    dv: int
    negative: float  # most negative weight (as −w)
    negative_control: float  # the same of the weight control
    row_sum: float  # max |row sum − 1|
    row_sum_control: float  # the same of the weight control
    fused_err: float  # max |fused output − weights @ V|
    outside: float  # max distance of an output coordinate outside [min V, max V]
    outside_control: float  # the same of the hull control
    values_2d: Tensor  # (7, 2) the example's values
    outputs_2d: Tensor  # (12, 2) its outputs
    weights_2d: Tensor  # (12, 7) its weights


def measure(
    seed: int = 0,
    *,
    batch: int = 64,
    n: int = 32,
    d: int = 16,
    dv: int = 8,
    attend: Attend = attnlab_attend,
    hull_control: Attend = signed_weights,
    weight_control: Attend = raw_scores,
) -> ConvexMeasurement:
    """Outputs, weights and controls on random q, k, v (arguments: see :func:`run`)."""
    with seeded(seed) as g:
        q = 3 * torch.randn(batch, n, d, generator=g, dtype=torch.float64)  # (B, N, d)
        k = torch.randn(batch, n, d, generator=g, dtype=torch.float64)
        v = torch.randn(batch, n, dv, generator=g, dtype=torch.float64)  # (B, N, dv)
        out, w = attend(q, k, v)  # (B, N, dv), (B, N, N)
        out_h, _ = hull_control(q, k, v)
        _, w_c = weight_control(q, k, v)
        fused = scaled_dot_product_attention(q, k, v)  # the fast path, no weights
        q2 = torch.randn(1, 12, 2, generator=g, dtype=torch.float64) * 2
        k2 = torch.randn(1, 7, 2, generator=g, dtype=torch.float64)
        v2 = torch.randn(1, 7, 2, generator=g, dtype=torch.float64)
        out2, w2 = attend(q2, k2, v2)
    lo, hi = v.min(dim=1, keepdim=True).values, v.max(dim=1, keepdim=True).values  # (B,1,dv)

    def negative(w_: Tensor) -> float:
        return float((-w_).clamp_min(0).max())

    def row_sum(w_: Tensor) -> float:
        return float((w_.sum(-1) - 1).abs().max())

    def outside(out_: Tensor) -> float:
        return float(torch.maximum(lo - out_, out_ - hi).clamp_min(0).max())

    return ConvexMeasurement(
        batch, n, d, dv, negative(w), negative(w_c), row_sum(w), row_sum(w_c),
        float((fused - out).abs().max()), outside(out), outside(out_h), v2[0], out2[0], w2[0])


NO_SOFTMAX = ("the raw scores q·k/√d as weights (no softmax)", "以原始分数 q·k/√d 作权重"
              "（不经 softmax）")


def headline_control(m: ConvexMeasurement) -> Control:
    """Signed weights that still sum to 1."""
    return Control("signed weights that still sum to 1 (2·softmax − 1/N)",
                   "有正有负但每行之和仍为 1 的权重（2·softmax − 1/N）", m.outside_control)


def checks(m: ConvexMeasurement) -> list[Check]:
    """The sign and the row sums (beside the raw scores), and the fused path."""
    return [
        check_le("most negative weight (as −w)", m.negative, 0.0, id="no-negative-weight",
                 by_construction=True, control=Control(*NO_SOFTMAX, m.negative_control)),
        check_le("max |row sum − 1|", m.row_sum, 1e-12, id="row-sum", by_construction=True,
                 control=Control(*NO_SOFTMAX, m.row_sum_control)),
        check_le("max |fused output − weights @ V|", m.fused_err, 1e-12, id="fused-output",
                 support=True),
    ]


def table(m: ConvexMeasurement) -> tuple[list[str], list[list]]:
    return (["quantity", "value (fp64)"],
            [["most negative weight (as −w)", m.negative], ["max |row sum − 1|", m.row_sum],
             ["max |fused output − weights @ V|", m.fused_err],
             ["max distance outside [min V, max V]", m.outside]])


BY_CONSTRUCTION = ("softmax weights are exp(s)/Σexp(s): positive and summing to 1 for any "
                   "scores, so every output is a convex combination of the values and "
                   "each coordinate lies between the values' min and max (fp64 rounding "
                   "only).")
BY_CONSTRUCTION_ZH = ("softmax 权重为 exp(s)/Σexp(s)：对任何分数都为正且每行之和为 1，"
                      "因此每个输出都是值向量的凸组合，每个坐标都介于各值向量在该坐标上的"
                      "最小值与最大值之间（只差 fp64 舍入）。")


def captions(m: ConvexMeasurement) -> tuple[str, str]:
    """The caption in English and in Chinese."""
    return (f"{m.batch} × {m.n} outputs of attnlab attention (fp64, d = {m.d}, dv = {m.dv}). "
            "Figure: 2-D values, their convex hull, and 12 outputs as weighted centroids.",
            f"attnlab 注意力的 {m.batch} × {m.n} 个输出（fp64，d = {m.d}，d_v = {m.dv}）。"
            "图：二维的值向量、它们的凸包，以及 12 个输出——每个都是值向量的加权重心。")


def run(
    seed: int = 0,
    *,
    batch: int = 64,
    n: int = 32,
    d: int = 16,
    dv: int = 8,
    attend: Attend = attnlab_attend,
    hull_control: Attend = signed_weights,
    weight_control: Attend = raw_scores,
    plot: bool = True,
) -> Result:
    """Random q, k, v (fp64, scores spread by a factor 3 to make rows peaked and flat).

    Wrong variant: ``attend`` returning the raw scores as weights (no softmax), whose
    outputs leave the hull. Controls: ``hull_control`` (default :func:`signed_weights`) for
    the hull, ``weight_control`` (default :func:`raw_scores`) for the sign and the row sums;
    handing attnlab's attention as a control makes it pass and the result not hold.
    """
    m = measure(seed, batch=batch, n=n, d=d, dv=dv, attend=attend, hull_control=hull_control,
                weight_control=weight_control)
    caption, caption_zh = captions(m)
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity="max distance of an output coordinate outside [min_j v_j, max_j v_j]",
        quantity_zh="输出坐标落在 [min_j v_j, max_j v_j] 之外的最大距离",
        measured=m.outside, expected=0.0, tolerance=1e-12, checks=checks(m),
        control=headline_control(m), by_construction=BY_CONSTRUCTION,
        by_construction_zh=BY_CONSTRUCTION_ZH, table=table(m),
        figure=figure(m) if plot else None, caption=caption, caption_zh=caption_zh)


def convex_hull(points: Tensor) -> Tensor:
    """(P, 2) points -> hull vertices in counter-clockwise order (monotone chain)."""
    pts = sorted(map(tuple, points.tolist()))

    def cross(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    lower: list = []
    upper: list = []
    for p in pts:
        while len(lower) >= 2 and cross(lower[-2], lower[-1], p) <= 0:
            lower.pop()
        lower.append(p)
    for p in reversed(pts):
        while len(upper) >= 2 and cross(upper[-2], upper[-1], p) <= 0:
            upper.pop()
        upper.append(p)
    return torch.tensor(lower[:-1] + upper[:-1])


def figure(m: ConvexMeasurement):
    """The 2-D example's values, hull and outputs, and its weights."""
    fig, (ax0, ax1) = new_figure(10, 4.2, ncols=2)
    hull = convex_hull(m.values_2d)
    closed = torch.cat([hull, hull[:1]]).numpy()
    v2, out2, w2 = m.values_2d.numpy(), m.outputs_2d.numpy(), m.weights_2d.numpy()
    ax0.fill(closed[:, 0], closed[:, 1], color="#3451b2", alpha=0.08, label="convex hull of V")
    ax0.plot(closed[:, 0], closed[:, 1], color="#3451b2", lw=1)
    ax0.scatter(v2[:, 0], v2[:, 1], s=60, color="#3451b2", zorder=3, label="values v_j")
    for j, (x, y) in enumerate(v2.tolist()):
        ax0.text(x, y, f"  v{j}", fontsize=8, color="#3451b2")
    for i in range(3):  # thin lines from a few outputs to the values they mix
        for j in range(v2.shape[0]):
            ax0.plot([out2[i, 0], v2[j, 0]], [out2[i, 1], v2[j, 1]], color="#b3261e",
                     lw=3 * float(w2[i, j]), alpha=0.5)
    ax0.scatter(out2[:, 0], out2[:, 1], s=25, marker="x", color="#b3261e", zorder=4,
                label="outputs Σ_j w_ij v_j")
    ax0.set_xlabel("value dimension 1")
    ax0.set_ylabel("value dimension 2")
    ax0.set_title("Outputs are weighted centroids of the values", fontsize=10)
    ax0.legend(fontsize=7, loc="best")
    ax0.set_aspect("equal", adjustable="datalim")
    im = ax1.imshow(w2, cmap="Blues", vmin=0, vmax=1, aspect="auto")
    ax1.set_xlabel("key / value index j")
    ax1.set_ylabel("query index i")
    ax1.set_title("Weights w_ij ≥ 0, each row sums to 1", fontsize=10)
    fig.colorbar(im, ax=ax1, label="attention weight")
    return fig
