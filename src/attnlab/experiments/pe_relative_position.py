"""pe-relative-position: the sinusoidal table encodes offsets as rotations.

For PE[pos, 2i] = sin(ω_i pos), PE[pos, 2i+1] = cos(ω_i pos) with ω_i = 10000^(−2i/d):

* PE[pos + k] = M_k · PE[pos] with one block-diagonal rotation M_k for every pos
  (angle-sum formulas; ``attnlab.positional.relative_rotation``);
* PE[p] · PE[p + k] = Σ_i cos(ω_i k) depends only on the offset k, not on p;
* the wavelengths 2π/ω_i grow geometrically, by the factor 10000^(2/d), from 2π (i = 0)
  to 2π·10000^(1−2/d) (i = d/2 − 1): just short of 10000·2π, which the last pair would
  reach only if i ran to d/2 (article 001's 10000^(2i/d_model)).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from attnlab.core import positional

from ._common import check_le, label_axes, new_figure
from ._result import Result

NAME = "pe-relative-position"
CLAIM = ("For the sinusoidal table, PE[pos+k] = M_k·PE[pos] with one rotation M_k for all "
         "pos; PE[p]·PE[p+k] depends only on k; the wavelengths grow geometrically, by "
         "10000^(2/d) per pair, from 2π to 2π·10000^(1−2/d) (just under 10000·2π).")
CLAIM_ZH = ("对正弦位置编码表，PE[pos+k] = M_k·PE[pos]，同一个旋转矩阵 M_k 适用于所有 pos；"
            "PE[p]·PE[p+k] 只与 k 有关；波长构成等比数列：每往后一对维度乘以 10000^(2/d)，"
            "从 2π 增长到 2π·10000^(1−2/d)（略小于 10000·2π）。")

ZH: dict[str, str] = {
    # checks
    "max over k of (max_p PE[p]·PE[p+k] − min_p …)":
        "各 k 上 (max_p PE[p]·PE[p+k] − min_p …) 的最大值",
    "|first wavelength − 2π|": "|最短波长 − 2π|",
    "max relative deviation of wavelength ratio from 10000^(2/d)":
        "相邻波长之比相对 10000^(2/d) 的最大相对偏差",
    "|last wavelength / (2π·10000^(1−2/d)) − 1|": "|最长波长 / (2π·10000^(1−2/d)) − 1|",
    # table
    "offset k": "偏移 k",
    "max |PE[p+k] − M_k PE[p]|": "|PE[p+k] − M_k PE[p]| 的最大值",
    "mean PE[p]·PE[p+k]": "PE[p]·PE[p+k] 的均值",
    "theory Σ cos(ω_i k)": "理论值 Σ cos(ω_i k)",
    "spread over p": "随 p 的极差",
    # figure
    "position pos": "位置 pos",
    "embedding dimension": "嵌入维度",
    "Sinusoidal table PE (first 128 positions)": "正弦位置编码表 PE（前 128 个位置）",
    "PE value": "PE 的值",
    "wavelength 2π/ω_i": "波长 2π/ω_i",
    "largest: 2π·10000^(1−2/d)": "最长：2π·10000^(1−2/d)",
    "10000·2π (not reached)": "10000·2π（达不到）",
    "pair index i (dims 2i, 2i+1)": "维度对序号 i（第 2i、2i+1 维）",
    "wavelength (positions, log scale)": "波长（位置数，对数坐标）",
    "Wavelengths grow geometrically": "波长呈等比增长",
    "PE[p]·PE[p+k] (every p)": "PE[p]·PE[p+k]（所有 p）",
    "offset k (positions)": "偏移 k（位置数）",
    "dot product": "点积",
    "Depends only on the offset (d = {})": "只与偏移有关（d = {}）",
}


def wrong_table(n: int, d: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """A common bug: one frequency per dimension (j/d instead of 2i/d), so sin and cos
    of a pair turn at different speeds. Not a rotation."""
    j = torch.arange(d, dtype=torch.float64)
    angle = torch.arange(n, dtype=torch.float64)[:, None] / 10000 ** (j / d)
    pe = torch.where(j % 2 == 0, torch.sin(angle), torch.cos(angle))
    return pe.to(dtype)


def run(
    seed: int = 0,
    *,
    n_positions: int = 512,
    embed_dim: int = 128,
    max_offset: int = 64,
    table_fn: Callable[..., Tensor] = positional.sinusoidal_table,
    plot: bool = True,
) -> Result:
    """Check all three properties on ``table_fn(n_positions, embed_dim)`` in fp64.

    Wrong variant: :func:`wrong_table`. (Deterministic; ``seed`` is unused.)
    """
    pe = table_fn(n_positions, embed_dim, dtype=torch.float64)  # (P, d)
    rot_err, dot_spread, rows = 0.0, 0.0, []
    dots = []
    for k in range(1, max_offset + 1):
        m_k = positional.relative_rotation(k, embed_dim)  # (d, d)
        err = float((pe[k:] - pe[:-k] @ m_k.T).abs().max())
        rot_err = max(rot_err, err)
        dot = (pe[:-k] * pe[k:]).sum(-1)  # (P-k,) PE[p]·PE[p+k] for every p
        dots.append(float(dot.mean()))
        spread = float(dot.max() - dot.min())
        dot_spread = max(dot_spread, spread)
        if k in (1, 2, 4, 8, 16, 32, 64):
            theory = float(torch.cos(positional.frequencies(embed_dim) * k).sum())
            rows.append([k, err, float(dot.mean()), theory, spread])
    omega = positional.frequencies(embed_dim)
    wl = 2 * math.pi / omega  # (d/2,)
    ratio = wl[1:] / wl[:-1]
    ratio_err = float((ratio / 10000 ** (2 / embed_dim) - 1).abs().max())
    largest = 2 * math.pi * 10000 ** (1 - 2 / embed_dim)  # the last pair, i = d/2 − 1
    checks = [
        check_le("max over k of (max_p PE[p]·PE[p+k] − min_p …)", dot_spread, 1e-9,
                 id="dot-depends-on-offset"),
        check_le("|first wavelength − 2π|", abs(float(wl[0]) - 2 * math.pi), 1e-12,
                 id="first-wavelength"),
        check_le("max relative deviation of wavelength ratio from 10000^(2/d)", ratio_err,
                 1e-12, id="wavelength-ratio"),
        check_le("|last wavelength / (2π·10000^(1−2/d)) − 1|",
                 abs(float(wl[-1]) / largest - 1), 1e-12, id="last-wavelength"),
    ]
    fig = _figure(pe, wl, dots, embed_dim) if plot else None
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity=f"max |PE[pos+k] − M_k·PE[pos]| over pos < {n_positions}, k ≤ {max_offset} "
                 "(fp64)",
        quantity_zh=f"pos < {n_positions}、k ≤ {max_offset} 上 |PE[pos+k] − M_k·PE[pos]| 的"
                    "最大值（fp64）",
        measured=rot_err, expected=0.0, tolerance=1e-9, checks=checks,
        table=(["offset k", "max |PE[p+k] − M_k PE[p]|", "mean PE[p]·PE[p+k]",
                "theory Σ cos(ω_i k)", "spread over p"], rows),
        figure=fig,
        caption=f"attnlab.positional.sinusoidal_table({n_positions}, {embed_dim}) and "
                f"relative_rotation(k, {embed_dim}), fp64. Wavelengths: first {float(wl[0]):.4f}"
                f" = 2π, last {float(wl[-1]):.1f} = 2π·10000^(1−2/{embed_dim}) (10000·2π = "
                f"{10000 * 2 * math.pi:.1f} is not reached).",
        caption_zh=f"attnlab.positional.sinusoidal_table({n_positions}, {embed_dim}) 与 "
                   f"relative_rotation(k, {embed_dim})，fp64。波长：最短 {float(wl[0]):.4f} = 2π，"
                   f"最长 {float(wl[-1]):.1f} = 2π·10000^(1−2/{embed_dim})（达不到 10000·2π = "
                   f"{10000 * 2 * math.pi:.1f}）。",
    )


def _figure(pe, wl, dots, embed_dim):
    fig, (ax0, ax1, ax2) = new_figure(12, 3.6, ncols=3)
    im = ax0.imshow(pe[:128].T.numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1,
                    interpolation="nearest")
    ax0.set_xlabel("position pos")
    ax0.set_ylabel("embedding dimension")
    ax0.set_title("Sinusoidal table PE (first 128 positions)", fontsize=10)
    fig.colorbar(im, ax=ax0, label="PE value")
    ax1.semilogy(range(len(wl)), wl.tolist(), "o", ms=3, color="#3451b2",
                 label="wavelength 2π/ω_i")
    ax1.axhline(2 * math.pi, color="k", ls=":", lw=1, label="2π")
    ax1.axhline(float(wl[-1]), color="#b3261e", ls="--", lw=1,
                label="largest: 2π·10000^(1−2/d)")
    ax1.axhline(10000 * 2 * math.pi, color="k", ls="--", lw=1, label="10000·2π (not reached)")
    label_axes(ax1, "pair index i (dims 2i, 2i+1)", "wavelength (positions, log scale)",
               "Wavelengths grow geometrically")
    ks = list(range(1, len(dots) + 1))
    ax2.plot(ks, dots, color="#b3261e", label="PE[p]·PE[p+k] (every p)")
    label_axes(ax2, "offset k (positions)", "dot product",
               f"Depends only on the offset (d = {embed_dim})")
    return fig
