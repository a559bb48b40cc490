"""init-scale: small initial projections give near-uniform attention, large ones peaked rows.

The initial scores are q·k/√d_k with q = W_q x, k = W_k x. Scaling the Xavier init of the
projections by a gain g scales q and k by g, so the scores by g²: with g = 0.02 (article
001's tip) the scores are ~10⁻⁴ of their usual size and every row starts almost uniform
(entropy ≈ log N), so no token is favoured before training; a large gain starts with peaked,
saturated rows. Measured on ``attnlab.MultiHeadAttention(init_gain=g)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from attnlab.nn import MultiHeadAttention

from ._common import check_le, entropy, label_axes, new_figure, seeded
from ._result import Result

NAME = "init-scale"
CLAIM = ("Small initial projections (Xavier gain 0.02) give near-uniform initial attention; "
         "large ones give peaked rows: initial entropy falls as the gain grows.")
CLAIM_ZH = ("投影矩阵初始化很小（Xavier 增益 0.02）时，初始注意力几乎均匀；"
            "初始化很大时行分布尖锐：初始熵随增益增大而下降。")


def attnlab_init(embed_dim: int, heads: int, gain: float) -> MultiHeadAttention:
    return MultiHeadAttention(embed_dim, heads, init_gain=gain)


def run(
    seed: int = 0,
    *,
    gains: Sequence[float] = (0.02, 0.1, 0.3, 1.0, 3.0, 10.0),
    embed_dim: int = 64,
    heads: int = 4,
    n: int = 32,
    batch: int = 8,
    make: Callable[[int, int, float], MultiHeadAttention] = attnlab_init,
    plot: bool = True,
) -> Result:
    """Initial weights' entropy (normalised by log N) and max weight, per gain.

    Wrong variant: ``make`` that ignores the gain (always the default init).
    """
    rows, ent, mx = [], [], []
    with seeded(seed) as g:
        x = torch.randn(batch, n, embed_dim, generator=g)  # unit-variance inputs
        for gain in gains:
            torch.manual_seed(seed)  # the same directions, only the scale changes
            mha = make(embed_dim, heads, gain)
            with torch.no_grad():
                _, w = mha(x, need_weights=True)  # (B, H, N, N)
            e = float((entropy(w.double()) / math.log(n)).mean())
            m = float(w.max(-1).values.mean())
            ent.append(e)
            mx.append(m)
            rows.append([gain, e, m, 1 / n])
    small = ent[0]
    checks = [
        check_le(f"normalised entropy at gain {gains[-1]}", ent[-1], 0.5),
        check_le("entropy never rises with the gain (max increase)",
                 max([b - a for a, b in zip(ent, ent[1:])] + [0.0]), 1e-9),
    ]
    fig = _figure(gains, ent, mx, n) if plot else None
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity=f"mean initial row entropy / log N at gain {gains[0]} (N = {n})",
        quantity_zh=f"增益 {gains[0]} 时初始行熵 / log N 的平均值（N = {n}）",
        measured=small, expected=1.0, tolerance=1e-4, checks=checks,
        table=(["Xavier gain", "entropy / log N", "mean max weight", "uniform weight 1/N"],
               rows),
        figure=fig,
        caption=f"attnlab MultiHeadAttention(E = {embed_dim}, {heads} heads, init_gain = g) "
                f"at initialisation, on {batch} × {n} unit-variance random tokens.",
        caption_zh=f"初始化时的 attnlab MultiHeadAttention（E = {embed_dim}，{heads} 个头，"
                   f"init_gain = g），输入为 {batch} × {n} 个单位方差随机 token。",
    )


def _figure(gains, ent, mx, n):
    fig, (ax0, ax1) = new_figure(10, 3.6, ncols=2)
    ax0.semilogx(gains, ent, "o-", color="#3451b2", label="attnlab MultiHeadAttention")
    ax0.axhline(1.0, color="k", ls=":", lw=1, label="uniform rows")
    ax0.axvline(0.02, color="#137a3a", ls="--", lw=1, label="article 001's tip: 0.02")
    label_axes(ax0, "Xavier init gain g (log scale)", "initial entropy / log N",
               "Initial attention entropy vs init gain", log_grid=True)
    ax1.semilogx(gains, mx, "s-", color="#b3261e", label="mean max weight")
    ax1.axhline(1 / n, color="k", ls=":", lw=1, label=f"uniform 1/N = {1 / n:.3f}")
    label_axes(ax1, "Xavier init gain g (log scale)", "largest weight in a row",
               "Large init: peaked rows", log_grid=True)
    return fig
