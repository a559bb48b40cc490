"""pe-relative-position: the sinusoidal table encodes offsets as rotations.

For PE[pos, 2i] = sin(ω_i pos), PE[pos, 2i+1] = cos(ω_i pos) with ω_i = 10000^(−2i/d):

* PE[pos + k] = M_k · PE[pos] with one block-diagonal rotation M_k for every pos
  (angle-sum formulas; ``attnlab.positional.relative_rotation``);
* PE[p] · PE[p + k] = Σ_i cos(ω_i k) depends only on the offset k, not on p;
* the wavelengths 2π/ω_i grow geometrically, by the factor 10000^(2/d), from 2π (i = 0)
  to 2π·10000^(1−2/d) (i = d/2 − 1): just short of 10000·2π, which the last pair would
  reach only if i ran to d/2 (article 001's 10000^(2i/d_model)).

All three hold by construction (angle-sum formulas, the formula's exponent), so each is
measured beside a control that must fail the same test: a random table of the same scale
(an ``nn.Embedding`` at initialisation) with its *best* least-squares map M̂_k, for which no
linear shift exists; the same table for the offset dot products; and, for the wavelengths
(read from the table: the phase each pair turns from position 0 to 1), the two common
slips of the exponent — pairs counted from i = 1 (:func:`off_by_one_table`, whose last
wavelength is the 10000·2π the article names) and i/d in place of 2i/d
(:func:`half_exponent_table`).

The cos half is needed. Article 001 prints only PE(pos, 2i) = sin(pos/10000^(2i/d_model)),
then says that PE_{pos+k} is a linear combination of PE_{pos}; the angle-sum formula
sin(ω(p+k)) = sin ωp cos ωk + cos ωp sin ωk reads cos ωp, which the sin half does not hold.
So the same best least-squares map M̂_k is fit to the sin half alone (:func:`sin_half`, the
table's even columns): it misses by more than 1 (at pos = 0 the sin half is the zero vector,
which every linear map sends to 0, while PE_k is not), where the full table, sin and cos
interleaved, is its control: there the best map is exact to rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.core import positional

from ._common import check_ge, check_le, label_axes, new_figure, one_thread, seeded
from ._result import Check, Control, Result

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
    "smallest ratio of each wavelength to the one before it (> {}: they grow)":
        "每个波长与前一个波长之比的最小值（> {}：波长增长）",
    "max relative deviation of wavelength ratio from 10000^(2/d)":
        "相邻波长之比相对 10000^(2/d) 的最大相对偏差",
    "|last wavelength / (2π·10000^(1−2/d)) − 1|": "|最长波长 / (2π·10000^(1−2/d)) − 1|",
    "the sin half alone (PE[pos, 2i], the formula article 001 prints): max |PE[pos+k] − "
    "M̂_k PE[pos]| with its best least-squares map":
        "只有 sin 一半（PE[pos, 2i]，即文章 001 给出的公式）：用其最小二乘最优映射 M̂_k 时 "
        "|PE[pos+k] − M̂_k PE[pos]| 的最大值",
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


def table_from_frequencies(n: int, omega: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
    """(n, 2·len(omega)) table with PE[pos, 2i] = sin(ω_i pos), PE[pos, 2i+1] = cos(ω_i pos)."""
    angle = torch.arange(n, dtype=torch.float64)[:, None] * omega.to(torch.float64)[None, :]
    return torch.stack([torch.sin(angle), torch.cos(angle)], -1).reshape(n, -1).to(dtype)


def off_by_one_table(n: int, d: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """Wrong: pairs counted from i = 1 (ω_i = 10000^(−2(i+1)/d)): the first wavelength is
    2π·10000^(2/d), not 2π, and the last is 10000·2π."""
    return table_from_frequencies(n, positional.frequencies(d) * 10000 ** (-2 / d), dtype)


def half_exponent_table(n: int, d: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """Wrong: i/d in place of 2i/d (ω_i = 10000^(−i/d)): the wavelengths grow by
    10000^(1/d) per pair, not 10000^(2/d)."""
    i = torch.arange(d // 2, dtype=torch.float64)
    return table_from_frequencies(n, 10000.0 ** (-i / d), dtype)


def decaying_table(n: int, d: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """Wrong, as the label 波长衰减 (article 001) reads: wavelengths that decay with i, from
    2π·10000^(1−2/d) down to 2π (the sinusoidal frequencies in reverse order)."""
    return table_from_frequencies(n, positional.frequencies(d).flip(0), dtype)


def sin_half(pe: Tensor) -> Tensor:
    """The sin half of a table: its even columns PE[:, 2i] = sin(ω_i pos), all that article
    001's formula PE(pos, 2i) = sin(pos/10000^(2i/d_model)) defines."""
    return pe[:, 0::2]


def random_table(n: int, d: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> Tensor:
    """A learned-absolute table at initialisation: N(0, ½) entries (the sinusoidal table's
    mean square), one independent row per position."""
    with seeded(seed) as g:
        return (torch.randn(n, d, generator=g, dtype=torch.float64) / math.sqrt(2)).to(dtype)


def table_wavelengths(pe: Tensor) -> Tensor:
    """(d/2,) wavelength 2π/ω_i of each (sin, cos) pair of ``pe``, ω_i read from the table:
    the phase the pair turns from position 0 to position 1."""
    s0, c0, s1, c1 = pe[0, 0::2], pe[0, 1::2], pe[1, 0::2], pe[1, 1::2]
    # the signed angle from (c0, s0) to (c1, s1), in (−π, π], without subtracting phases
    step = torch.atan2(c0 * s1 - s0 * c1, c0 * c1 + s0 * s1)
    return 2 * math.pi / step.abs()


def control_offsets(max_offset: int) -> list[int]:
    """The offsets k = 1, 2, 4, … (and ``max_offset``) at which the control's maps are fit."""
    return sorted({2**j for j in range(max_offset.bit_length())} | {max_offset})


def best_shift_error(pe: Tensor, max_offset: int) -> float:
    """max over k in :func:`control_offsets` and over pos < P − ``max_offset`` of
    |PE[pos+k] − M̂_k PE[pos]|, M̂_k the least-squares linear map for that k on those
    positions (the best any fixed linear map does there)."""
    n = pe.shape[0] - max_offset
    with one_thread():
        # the best map's residual is b minus its projection on the columns of PE[:n]: one
        # SVD for every k, stable where the table is rank deficient (its slow pairs)
        u, sv, _ = torch.linalg.svd(pe[:n], full_matrices=False)
        basis = u[:, sv > sv[0] * max(pe.shape) * torch.finfo(pe.dtype).eps]  # (n, rank)
        err = 0.0
        for k in control_offsets(max_offset):
            b = pe[k:k + n]
            err = max(err, float((b - basis @ (basis.T @ b)).abs().max()))
    return err


def _spread(x: Tensor) -> float:
    return float(x.max() - x.min())


@dataclass(frozen=True)
class WavelengthErrors:
    """How far a table's wavelengths are from the formula's (see :func:`_wavelength_errors`)."""

    first: float  # |first − 2π|
    ratio: float  # max |ratio / 10000^(2/d) − 1|
    last: float  # |last / (2π·10000^(1−2/d)) − 1|


def _wavelength_errors(wl: Tensor, d: int) -> WavelengthErrors:
    """|first − 2π|, max |ratio / 10000^(2/d) − 1|, |last / (2π·10000^(1−2/d)) − 1|."""
    ratio = wl[1:] / wl[:-1]
    return WavelengthErrors(abs(float(wl[0]) - 2 * math.pi),
                            float((ratio / 10000 ** (2 / d) - 1).abs().max()),
                            abs(float(wl[-1]) / (2 * math.pi * 10000 ** (1 - 2 / d)) - 1))


@dataclass(frozen=True)
class OffsetStats:
    """One offset k of the table: the rotation's error and PE[p]·PE[p+k] over p."""

    k: int
    err: float  # max |PE[p+k] − M_k PE[p]|
    mean_dot: float  # mean PE[p]·PE[p+k]
    spread: float  # its max − min over p

    def cells(self, embed_dim: int) -> list:
        """A table row, with the theory Σ cos(ω_i k)."""
        theory = float(torch.cos(positional.frequencies(embed_dim) * self.k).sum())
        return [self.k, self.err, self.mean_dot, theory, self.spread]


#: The offsets shown in the table.
TABLE_OFFSETS = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class PERelativeMeasurement:
    """The table's rotations, dot products and wavelengths, beside their controls."""

    n_positions: int
    embed_dim: int
    max_offset: int
    control_fn: Callable[..., Tensor] | None
    pe: Tensor  # (P, d) the table
    offsets: tuple[OffsetStats, ...]  # k = 1 … max_offset
    wl: Tensor  # (d/2,) wavelengths read from the table
    wavelengths: WavelengthErrors
    ctrl_err: float  # the control table: best least-squares shift error
    ctrl_spread: float  # the control table: largest spread of PE[p]·PE[p+k] over p
    shifted: WavelengthErrors  # pairs counted from i = 1
    halved: WavelengthErrors  # i/d in place of 2i/d
    grow: float  # smallest ratio of successive wavelengths
    decay_grow: float  # the same for decaying wavelengths (the control)
    half_err: float  # the sin half alone: best least-squares shift error
    full_err: float  # the whole table: the same

    @property
    def rot_err(self) -> float:
        """max |PE[pos+k] − M_k·PE[pos]| over every pos and k."""
        return max([0.0] + [o.err for o in self.offsets])

    @property
    def dot_spread(self) -> float:
        return max([0.0] + [o.spread for o in self.offsets])


def _offset_stats(pe: Tensor, k: int, embed_dim: int) -> OffsetStats:
    m_k = positional.relative_rotation(k, embed_dim)  # (d, d)
    err = float((pe[k:] - pe[:-k] @ m_k.T).abs().max())
    dot = (pe[:-k] * pe[k:]).sum(-1)  # (P-k,) PE[p]·PE[p+k] for every p
    return OffsetStats(k, err, float(dot.mean()), _spread(dot))


def measure(
    seed: int = 0,
    *,
    n_positions: int = 512,
    embed_dim: int = 128,
    max_offset: int = 64,
    table_fn: Callable[..., Tensor] = positional.sinusoidal_table,
    control_fn: Callable[..., Tensor] | None = None,
    half_fn: Callable[[Tensor], Tensor] = sin_half,
) -> PERelativeMeasurement:
    """The three properties on ``table_fn(n_positions, embed_dim)`` in fp64, and their
    controls (arguments: see :func:`run`)."""
    if not 0 < max_offset < n_positions - embed_dim:
        raise ValueError(f"max_offset must be in (0, n_positions − embed_dim = "
                         f"{n_positions - embed_dim}) so that every least-squares map is "
                         f"determined, got {max_offset}")
    pe = table_fn(n_positions, embed_dim, dtype=torch.float64)  # (P, d)
    offsets = tuple(_offset_stats(pe, k, embed_dim) for k in range(1, max_offset + 1))
    wl = table_wavelengths(pe)  # (d/2,) read from the table
    # controls: a table with no linear shift, and the two slips of the exponent
    ctrl = (control_fn(n_positions, embed_dim, dtype=torch.float64) if control_fn is not None
            else random_table(n_positions, embed_dim, seed))
    ctrl_spread = max(_spread((ctrl[:-k] * ctrl[k:]).sum(-1)) for k in range(1, max_offset + 1))
    decay = table_wavelengths(decaying_table(2, embed_dim))
    return PERelativeMeasurement(
        n_positions, embed_dim, max_offset, control_fn, pe, offsets, wl,
        _wavelength_errors(wl, embed_dim), best_shift_error(ctrl, max_offset), ctrl_spread,
        _wavelength_errors(table_wavelengths(off_by_one_table(2, embed_dim)), embed_dim),
        _wavelength_errors(table_wavelengths(half_exponent_table(2, embed_dim)), embed_dim),
        float((wl[1:] / wl[:-1]).min()), float((decay[1:] / decay[:-1]).min()),
        # the formula as article 001 prints it, the sin half alone: no linear map shifts it
        best_shift_error(half_fn(pe), max_offset), best_shift_error(pe, max_offset))


def headline_control(m: PERelativeMeasurement) -> Control:
    """The control table with its best least-squares maps."""
    what, what_zh = _control_words(m.control_fn)
    return Control(f"{what}, with its best least-squares map M̂_k for k = 1, 2, 4, …, "
                   f"{m.max_offset} (fit on pos < {m.n_positions - m.max_offset})",
                   f"{what_zh}，k = 1, 2, 4, …, {m.max_offset} 各用其最小二乘最优映射 M̂_k"
                   f"（在 pos < {m.n_positions - m.max_offset} 上拟合）", m.ctrl_err)


def checks(m: PERelativeMeasurement) -> list[Check]:
    """The wavelengths grow, the dot product depends on the offset alone, the wavelengths'
    formula, and the sin half has no linear shift; each beside its wrong variant."""
    return [
        check_ge("smallest ratio of each wavelength to the one before it (> 1: they grow)",
                 m.grow, 1.0 + 1e-6, id="wavelengths-grow", by_construction=True,
                 control=Control("wavelengths that decay with i (the sinusoidal frequencies in "
                                 "reverse order, as the label 波长衰减 reads)",
                                 "随 i 衰减的波长（把正弦编码的频率倒序排列，即标题“波长衰减”"
                                 "的字面意思）", m.decay_grow)),
        check_le("max over k of (max_p PE[p]·PE[p+k] − min_p …)", m.dot_spread, 1e-9,
                 id="dot-depends-on-offset", by_construction=True,
                 control=Control(*_control_words(m.control_fn), m.ctrl_spread)),
        check_le("|first wavelength − 2π|", m.wavelengths.first, 1e-12, id="first-wavelength",
                 by_construction=True,
                 control=Control("pairs counted from i = 1: ω_i = 10000^(−2(i+1)/d)",
                                 "维度对从 i = 1 起算：ω_i = 10000^(−2(i+1)/d)",
                                 m.shifted.first)),
        check_le("max relative deviation of wavelength ratio from 10000^(2/d)",
                 m.wavelengths.ratio, 1e-12, id="wavelength-ratio", by_construction=True,
                 control=Control("i/d in place of 2i/d: ω_i = 10000^(−i/d)",
                                 "用 i/d 代替 2i/d：ω_i = 10000^(−i/d)", m.halved.ratio)),
        check_le("|last wavelength / (2π·10000^(1−2/d)) − 1|", m.wavelengths.last, 1e-12,
                 id="last-wavelength", by_construction=True,
                 control=Control("pairs counted from i = 1, so the last wavelength is 10000·2π",
                                 "维度对从 i = 1 起算，最长波长因而为 10000·2π", m.shifted.last)),
        check_ge("the sin half alone (PE[pos, 2i], the formula article 001 prints): max "
                 "|PE[pos+k] − M̂_k PE[pos]| with its best least-squares map", m.half_err, 0.1,
                 support=True, id="sin-half-no-linear-shift", by_construction=True,
                 control=Control("the whole table, sin and cos interleaved, with the same "
                                 "least-squares fit",
                                 "完整的表（sin 与 cos 交错），做同样的最小二乘拟合", m.full_err)),
    ]


def table(m: PERelativeMeasurement) -> tuple[list[str], list[list]]:
    """The offsets 1, 2, 4, …, 64 (those up to ``max_offset``)."""
    return (["offset k", "max |PE[p+k] − M_k PE[p]|", "mean PE[p]·PE[p+k]",
             "theory Σ cos(ω_i k)", "spread over p"],
            [o.cells(m.embed_dim) for o in m.offsets if o.k in TABLE_OFFSETS])


BY_CONSTRUCTION = ("The angle-sum formulas sin(ω(p+k)) = sin ωp cos ωk + cos ωp sin ωk "
                   "and cos(ω(p+k)) = cos ωp cos ωk − sin ωp sin ωk make PE[p+k] = M_k·PE[p]"
                   " for every p, and PE[p]·PE[p+k] = Σ cos(ω_i k); the wavelengths are "
                   "2π·10000^(2i/d) by the formula itself.")
BY_CONSTRUCTION_ZH = ("和角公式 sin(ω(p+k)) = sin ωp cos ωk + cos ωp sin ωk、"
                      "cos(ω(p+k)) = cos ωp cos ωk − sin ωp sin ωk 使 PE[p+k] = M_k·PE[p] "
                      "对所有 p 成立，且 PE[p]·PE[p+k] = Σ cos(ω_i k)；波长 "
                      "2π·10000^(2i/d) 由公式本身给出。")


def captions(m: PERelativeMeasurement) -> tuple[str, str]:
    """The caption in English and in Chinese."""
    n, d, wl = m.n_positions, m.embed_dim, m.wl
    what, what_zh = _control_words(m.control_fn)
    return (f"attnlab.positional.sinusoidal_table({n}, {d}) and "
            f"relative_rotation(k, {d}), fp64. Wavelengths: first {float(wl[0]):.4f}"
            f" = 2π, last {float(wl[-1]):.1f} = 2π·10000^(1−2/{d}) (10000·2π = "
            f"{10000 * 2 * math.pi:.1f} is not reached). Control, {what}: off by up to "
            f"{m.ctrl_err:.2f} even with its best linear map M̂_k, and its PE[p]·PE[p+k] "
            f"varies by {m.ctrl_spread:.1f} over p. The sin half alone (what article 001 "
            f"prints): its best linear map misses by {m.half_err:.2f} (the whole table: "
            f"{m.full_err:.1e}).",
            f"attnlab.positional.sinusoidal_table({n}, {d}) 与 "
            f"relative_rotation(k, {d})，fp64。波长：最短 {float(wl[0]):.4f} = 2π，"
            f"最长 {float(wl[-1]):.1f} = 2π·10000^(1−2/{d})（达不到 10000·2π = "
            f"{10000 * 2 * math.pi:.1f}）。对照（{what_zh}）即使用其最优线性映射 M̂_k，"
            f"误差仍达 {m.ctrl_err:.2f}，其 PE[p]·PE[p+k] 随 p 的极差为 {m.ctrl_spread:.1f}。"
            f"只取 sin 一半（文章 001 给出的公式）时，最优线性映射的误差为 {m.half_err:.2f}"
            f"（完整的表：{m.full_err:.1e}）。")


def run(
    seed: int = 0,
    *,
    n_positions: int = 512,
    embed_dim: int = 128,
    max_offset: int = 64,
    table_fn: Callable[..., Tensor] = positional.sinusoidal_table,
    control_fn: Callable[..., Tensor] | None = None,
    half_fn: Callable[[Tensor], Tensor] = sin_half,
    plot: bool = True,
) -> Result:
    """Check all three properties on ``table_fn(n_positions, embed_dim)`` in fp64.

    Wrong variant: :func:`wrong_table`. Controls: ``control_fn(n_positions, embed_dim)``
    (default :func:`random_table` with ``seed``) with its best linear maps, and the wrong
    exponents :func:`off_by_one_table` and :func:`half_exponent_table` for the wavelengths;
    passing ``control_fn=positional.sinusoidal_table`` (the table as its own control) must
    make the result not hold. ``half_fn`` takes the table to what article 001 prints of it
    (default :func:`sin_half`); one that keeps the cos half (``lambda pe: pe``) must fail
    the check that the sin half has no linear shift.
    """
    m = measure(seed, n_positions=n_positions, embed_dim=embed_dim, max_offset=max_offset,
                table_fn=table_fn, control_fn=control_fn, half_fn=half_fn)
    caption, caption_zh = captions(m)
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity=f"max |PE[pos+k] − M_k·PE[pos]| over pos < {n_positions}, k ≤ {max_offset} "
                 "(fp64)",
        quantity_zh=f"pos < {n_positions}、k ≤ {max_offset} 上 |PE[pos+k] − M_k·PE[pos]| 的"
                    "最大值（fp64）",
        measured=m.rot_err, expected=0.0, tolerance=1e-9, checks=checks(m),
        control=headline_control(m), by_construction=BY_CONSTRUCTION,
        by_construction_zh=BY_CONSTRUCTION_ZH, table=table(m),
        figure=figure(m) if plot else None, caption=caption, caption_zh=caption_zh)


def _control_words(control_fn: Callable[..., Tensor] | None) -> tuple[str, str]:
    """What the table control is, in English and Chinese."""
    if control_fn is None:
        return ("random table N(0, ½): a learned-absolute embedding at initialisation, at the "
                "sinusoidal table's scale",
                "随机表 N(0, ½)：初始化时的可学习绝对位置嵌入，尺度与正弦表相同")
    name = getattr(control_fn, "__name__", type(control_fn).__name__)
    return f"table {name}", f"位置编码表 {name}"


def figure(m: PERelativeMeasurement):
    """The table, its wavelengths, and PE[p]·PE[p+k] against the offset."""
    pe, wl, embed_dim = m.pe, m.wl, m.embed_dim
    dots = [o.mean_dot for o in m.offsets]
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
