"""pe-frequency-roles: in the sinusoidal table, high-frequency pairs resolve neighbouring
positions and alias over long distances; low-frequency pairs do the opposite.

Article 001: 「低频（大波长）捕获长距离依赖，高频（小波长）记录局部位置」. Each pair of
dimensions (2i, 2i+1) of the table is a point (sin ω_i p, cos ω_i p) on the unit circle,
turning by ω_i = 10000^(−2i/d) per position. What one pair can tell about the offset Δ
between two positions p and p + Δ is the angle between its two points: decode

    Δ̂_i = wrap(φ_i(p + Δ) − φ_i(p)) / ω_i,    φ_i = atan2(sin, cos), wrap to (−π, π],

with ω_i itself read from the table (the phase step from position 0 to 1), and readout
noise of standard deviation σ added to every value of the table (the model reads the
encoding through weights and other signals, never exactly). Then

* a high-frequency pair (ω_i ≈ 1) turns a visible angle per position: Δ = 1 decodes to
  within ≈ σ√2/ω_i positions; but it wraps around every 2π/ω_i positions, so Δ = 1000
  decodes to some offset of at most π/ω_i (aliasing);
* a low-frequency pair (ω_i ≪ 1) is unique over π/ω_i positions, so Δ = 1000 decodes
  well, but its point moves only 2 sin(ω_i/2) ≈ ω_i per position — far below the noise:
  Δ = 1 is lost.

The pairs are grouped into quarters by index, so the claim is about the table as laid
out (low dimensions fast, high dimensions slow); tables with shuffled or constant
frequencies must fail.

Control: every number is measured again on the table with its frequencies assigned in
reverse order (:func:`reversed_table`: pair i turns at pair d/2 − 1 − i's frequency), the
same pairs of dimensions carrying the other frequencies. If the roles belonged to the
dimensions or to the decoder rather than to the frequencies, the reversed table would show
them too; it must fail every test (its first quarter misses Δ = 1 and decodes Δ = 1000,
its last resolves Δ = 1 and aliases at Δ = 1000).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.core import positional

from ._common import check_ge, check_le, label_axes, new_figure, seeded
from ._result import Check, Control, Result

NAME = "pe-frequency-roles"
CLAIM = ("In the sinusoidal table (d = 512), decoding an offset Δ from one (sin, cos) pair's "
         "phase difference under readout noise σ = 0.01, the highest-frequency quarter of "
         "the pairs resolves Δ = 1 but aliases at Δ = 1000, and the lowest-frequency quarter "
         "decodes Δ = 1000 but cannot resolve Δ = 1: high frequencies record local position, "
         "low frequencies long distances.")
CLAIM_ZH = ("在正弦位置编码表（d = 512）中，在读出噪声 σ = 0.01 下用单个 (sin, cos) 维度对的"
            "相位差解码偏移 Δ：频率最高的四分之一维度对能分辨 Δ = 1，但在 Δ = 1000 处发生"
            "混叠；频率最低的四分之一能解码 Δ = 1000，却分辨不了 Δ = 1——高频记录局部位置，"
            "低频覆盖长距离。")

ZH: dict[str, str] = {
    # checks
    "highest-frequency quarter: relative error at Δ = {}":
        "频率最高的四分之一：Δ = {} 处的相对误差",
    "highest-frequency quarter: relative error at Δ = {} (aliasing)":
        "频率最高的四分之一：Δ = {} 处的相对误差（混叠）",
    "lowest-frequency quarter: relative error at Δ = {} (below the noise)":
        "频率最低的四分之一：Δ = {} 处的相对误差（低于噪声）",
    # table
    "pairs": "维度对",
    "pairs {}–{}": "第 {}–{} 对",
    "shortest wavelength": "最短波长",
    "longest wavelength": "最长波长",
    "change per position ‖ΔPE_i‖": "每移动一个位置的变化 ‖ΔPE_i‖",
    "relative error at Δ = {}": "Δ = {} 处的相对误差",
    # figure
    "wavelength 2π/ω_i (positions, log scale)": "波长 2π/ω_i（位置数，对数坐标）",
    "mean |Δ̂ − Δ| / Δ (log scale)": "|Δ̂ − Δ| / Δ 的均值（对数坐标）",
    "Δ = {}": "Δ = {}",
    "error = Δ (nothing decoded)": "误差 = Δ（什么也解码不出）",
    "Decoding an offset from one pair": "用一个维度对解码偏移",
    "change per position (log scale)": "每移动一个位置的变化（对数坐标）",
    "‖PE_i(p+1) − PE_i(p)‖ (no noise)": "‖PE_i(p+1) − PE_i(p)‖（无噪声）",
    "noise on a difference σ√{} = {}": "差值上的噪声 σ√{} = {}",
    "How far one step moves each pair": "每一步使各维度对移动多远",
    "position p": "位置 p",
    "phase φ_i(p) (radians)": "相位 φ_i(p)（弧度）",
    "pair {} (wavelength {})": "第 {} 对（波长 {}）",
    "High frequency wraps, low frequency barely moves": "高频反复绕圈，低频几乎不动",
}


def shuffled_table(n_positions: int, embed_dim: int, dtype: torch.dtype = torch.float64
                   ) -> Tensor:
    """The sinusoidal table with its (sin, cos) pairs in a fixed random order: every
    frequency is still there, but no longer ordered from fast to slow."""
    pe = positional.sinusoidal_table(n_positions, embed_dim, dtype=dtype)
    perm = torch.randperm(embed_dim // 2, generator=torch.Generator().manual_seed(1))
    return pe.view(n_positions, embed_dim // 2, 2)[:, perm].reshape(n_positions, embed_dim)


def reversed_table(n_positions: int, embed_dim: int, dtype: torch.dtype = torch.float64
                   ) -> Tensor:
    """The sinusoidal table with its frequencies assigned in reverse order: pair i turns at
    ω_{d/2 − 1 − i}, slow pairs first (the control)."""
    pe = positional.sinusoidal_table(n_positions, embed_dim, dtype=dtype)
    return pe.view(n_positions, embed_dim // 2, 2).flip(1).reshape(n_positions, embed_dim)


def constant_table(n_positions: int, embed_dim: int, dtype: torch.dtype = torch.float64
                   ) -> Tensor:
    """Every pair at the one middle frequency 10000^(−1/2): no spread of wavelengths."""
    omega = 10000.0 ** -0.5
    angle = torch.arange(n_positions, dtype=torch.float64)[:, None] * omega
    angle = angle.expand(n_positions, embed_dim // 2)
    pe = torch.stack([torch.sin(angle), torch.cos(angle)], -1).reshape(n_positions, embed_dim)
    return pe.to(dtype)


def _wrap(a: Tensor) -> Tensor:
    """Angles wrapped to (−π, π]."""
    return torch.remainder(a + math.pi, 2 * math.pi) - math.pi


def _phase(pe: Tensor) -> Tensor:
    """(..., d) table rows -> (..., d/2) phase of each (sin, cos) pair."""
    return torch.atan2(pe[..., 0::2], pe[..., 1::2])


def decode_errors(pe: Tensor, delta: int, noise: float, samples: int, g: torch.Generator
                  ) -> Tensor:
    """(d/2,) mean |Δ̂_i − Δ| / Δ per pair, over ``samples`` random positions p, with
    Gaussian readout noise ``noise`` on every value; ω_i read from rows 0 and 1."""
    n, d = pe.shape
    omega = _wrap(_phase(pe[1]) - _phase(pe[0]))  # (d/2,) phase step per position
    p = torch.randint(0, n - delta, (samples,), generator=g)
    a = pe[p] + noise * torch.randn(samples, d, generator=g, dtype=pe.dtype)
    b = pe[p + delta] + noise * torch.randn(samples, d, generator=g, dtype=pe.dtype)
    decoded = _wrap(_phase(b) - _phase(a)) / omega  # (S, d/2)
    return ((decoded - delta).abs() / delta).mean(0)


@dataclass(frozen=True)
class Band:
    """One quarter of the pairs (a table row)."""

    first: int  # first pair index
    last: int  # last pair index
    shortest: float  # shortest wavelength
    longest: float  # longest wavelength
    step: float  # mean change per position ‖ΔPE_i‖
    err_near: float  # mean relative error at Δ = near
    err_far: float  # and at Δ = far

    def cells(self) -> list:
        return [f"pairs {self.first}–{self.last}", self.shortest, self.longest, self.step,
                self.err_near, self.err_far]


@dataclass(frozen=True)
class ControlBands:
    """The control table's first and last quarter: mean relative errors."""

    high_near: float
    high_far: float
    low_near: float
    low_far: float


@dataclass(frozen=True)
class FrequencyRolesMeasurement:
    """Per pair of the table: its wavelength, its change per position, and the decoding
    errors at Δ = near and far; the same errors on the control table."""

    embed_dim: int
    n_positions: int
    near: int
    far: int
    noise: float
    samples: int
    c_samples: int  # samples of the control
    control_fn: Callable[..., Tensor]
    pe: Tensor  # (P, d)
    wavelength: Tensor  # (d/2,) 2π/ω_i, ω read from the table's first two rows
    step: Tensor  # (d/2,) ‖PE_i(p+1) − PE_i(p)‖ averaged over p
    err_near: Tensor  # (d/2,) mean |Δ̂ − Δ| / Δ at Δ = near
    err_far: Tensor  # (d/2,) and at Δ = far
    control: ControlBands

    @property
    def quarter(self) -> int:
        return self.embed_dim // 2 // 4

    @property
    def bands(self) -> list[Band]:
        return _bands(self.wavelength, self.step, self.err_near, self.err_far, self.quarter)


def measure(
    seed: int = 0,
    *,
    embed_dim: int = 512,
    n_positions: int = 4096,
    near: int = 1,
    far: int = 1000,
    noise: float = 0.01,
    samples: int = 2000,
    table_fn: Callable[..., Tensor] = positional.sinusoidal_table,
    control_fn: Callable[..., Tensor] = reversed_table,
) -> FrequencyRolesMeasurement:
    """Decode both offsets from every pair of the table and of the control (arguments: see
    :func:`run`)."""
    if far + 1 >= n_positions:
        raise ValueError(f"n_positions must exceed far + 1 = {far + 1}, got {n_positions}")
    if embed_dim % 8:
        raise ValueError(f"embed_dim must be a multiple of 8 (four bands of pairs), got "
                         f"{embed_dim}")
    pe = table_fn(n_positions, embed_dim, dtype=torch.float64)  # (P, d)
    with seeded(seed) as g:
        err_near = decode_errors(pe, near, noise, samples, g)  # (d/2,)
        err_far = decode_errors(pe, far, noise, samples, g)
    omega = _wrap(_phase(pe[1]) - _phase(pe[0])).abs()  # (d/2,)
    step = (pe[1:].view(n_positions - 1, -1, 2) - pe[:-1].view(n_positions - 1, -1, 2)
            ).norm(dim=-1).mean(0)  # (d/2,) ‖PE_i(p+1) − PE_i(p)‖ averaged over p
    quarter = embed_dim // 2 // 4
    ctrl = control_fn(n_positions, embed_dim, dtype=torch.float64)
    # independent noise and positions for the control; a quarter of the samples is plenty
    # for errors that sit orders of magnitude from the thresholds
    c_samples = max(samples // 4, 100)
    with seeded(seed + 1) as g:
        c_near = decode_errors(ctrl, near, noise, c_samples, g)
        c_far = decode_errors(ctrl, far, noise, c_samples, g)
    control = ControlBands(float(c_near[:quarter].mean()), float(c_far[:quarter].mean()),
                           float(c_near[-quarter:].mean()), float(c_far[-quarter:].mean()))
    return FrequencyRolesMeasurement(embed_dim, n_positions, near, far, noise, samples,
                                     c_samples, control_fn, pe, 2 * math.pi / omega, step,
                                     err_near, err_far, control)


def headline_control(m: FrequencyRolesMeasurement) -> Control:
    """The control table's lowest-frequency quarter at Δ = far."""
    return Control(*_control_words(m.control_fn), m.control.low_far)


def checks(m: FrequencyRolesMeasurement) -> list[Check]:
    """The high frequencies resolve neighbours and alias far; the low ones do not resolve
    neighbours; each beside the control table."""
    what = _control_words(m.control_fn)
    high, low, c = m.bands[0], m.bands[-1], m.control
    return [
        check_le(f"highest-frequency quarter: relative error at Δ = {m.near}", high.err_near,
                 0.25, id="high-near", control=Control(*what, c.high_near)),
        check_ge(f"highest-frequency quarter: relative error at Δ = {m.far} (aliasing)",
                 high.err_far, 0.5, id="high-far-aliasing", control=Control(*what, c.high_far)),
        check_ge(f"lowest-frequency quarter: relative error at Δ = {m.near} (below the noise)",
                 low.err_near, 1.0, id="low-near", control=Control(*what, c.low_near)),
    ]


def table(m: FrequencyRolesMeasurement) -> tuple[list[str], list[list]]:
    """One row per quarter of the pairs."""
    return (["pairs", "shortest wavelength", "longest wavelength",
             "change per position ‖ΔPE_i‖", f"relative error at Δ = {m.near}",
             f"relative error at Δ = {m.far}"], [b.cells() for b in m.bands])


def captions(m: FrequencyRolesMeasurement) -> tuple[str, str]:
    """The caption in English and in Chinese."""
    n_positions, embed_dim, pairs, samples = m.n_positions, m.embed_dim, m.embed_dim // 2, m.samples
    near, far, noise, c_samples, c = m.near, m.far, m.noise, m.c_samples, m.control
    what, what_zh = _control_words(m.control_fn)
    return (f"Table of {n_positions} positions, d = {embed_dim} ({pairs} pairs, in four "
            f"quarters by index); for each pair, Δ̂ = wrap(φ(p + Δ) − φ(p)) / ω over "
            f"{samples} random p, Gaussian noise σ = {noise} on every value, ω read from "
            f"the table's first two rows. A relative error ≥ 1 means nothing is decoded "
            f"(as bad as answering 0). Control, {what}, over {c_samples} p: its first "
            f"quarter errs by {c.high_near:.3g} at Δ = {near} and {c.high_far:.3g} at "
            f"Δ = {far}, its last by "
            f"{c.low_near:.3g} and {c.low_far:.3g}: the roles follow the frequencies.",
            f"共 {n_positions} 个位置、d = {embed_dim} 的位置编码表（{pairs} 个维度对，"
            f"按序号分为四等份）；对每个维度对，在 {samples} 个随机位置 p 上计算 "
            f"Δ̂ = wrap(φ(p + Δ) − φ(p)) / ω，每个值加标准差 σ = {noise} 的高斯噪声，"
            f"ω 取自表的前两行。相对误差 ≥ 1 表示什么也解码不出（与回答 0 一样差）。"
            f"对照（{what_zh}，{c_samples} 个 p）：其前四分之一在 Δ = {near} 处误差 "
            f"{c.high_near:.3g}、"
            f"Δ = {far} 处 {c.high_far:.3g}，后四分之一分别为 {c.low_near:.3g} 和 "
            f"{c.low_far:.3g}：作用随频率而定。")


def run(
    seed: int = 0,
    *,
    embed_dim: int = 512,
    n_positions: int = 4096,
    near: int = 1,
    far: int = 1000,
    noise: float = 0.01,
    samples: int = 2000,
    table_fn: Callable[..., Tensor] = positional.sinusoidal_table,
    control_fn: Callable[..., Tensor] = reversed_table,
    plot: bool = True,
) -> Result:
    """Decode Δ = ``near`` and Δ = ``far`` from each pair of ``table_fn(n_positions,
    embed_dim)`` (fp64) under readout noise ``noise``; compare the first and last quarter
    of the pairs, and do the same on the control ``control_fn(n_positions, embed_dim)``.

    Wrong variants: :func:`shuffled_table`, :func:`constant_table`; the table as its own
    control (``control_fn=positional.sinusoidal_table``) must make the result not hold.
    """
    m = measure(seed, embed_dim=embed_dim, n_positions=n_positions, near=near, far=far,
                noise=noise, samples=samples, table_fn=table_fn, control_fn=control_fn)
    caption, caption_zh = captions(m)
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity=f"lowest-frequency quarter: mean |Δ̂ − Δ| / Δ at Δ = {far}",
        quantity_zh=f"频率最低的四分之一：Δ = {far} 处 |Δ̂ − Δ| / Δ 的均值",
        measured=m.bands[-1].err_far, expected=0.1, tolerance=0.0, relation="<=",
        checks=checks(m), control=headline_control(m), table=table(m),
        figure=figure(m) if plot else None, caption=caption, caption_zh=caption_zh)


def _bands(wavelength: Tensor, step: Tensor, err_near: Tensor, err_far: Tensor, quarter: int
           ) -> list[Band]:
    """One band per quarter of the pairs: shortest and longest wavelength, mean change per
    position, mean relative error at Δ = near and at Δ = far."""
    bands = []
    for b in range(4):
        sl = slice(b * quarter, (b + 1) * quarter)
        bands.append(Band(b * quarter, (b + 1) * quarter - 1, float(wavelength[sl].min()),
                          float(wavelength[sl].max()), float(step[sl].mean()),
                          float(err_near[sl].mean()), float(err_far[sl].mean())))
    return bands


def _control_words(control_fn: Callable[..., Tensor]) -> tuple[str, str]:
    """What the control table is, in English and Chinese."""
    if control_fn is reversed_table:
        return ("the same pairs of dimensions with the frequencies assigned in reverse order "
                "(pair i at ω_{d/2−1−i})",
                "同样的维度对，频率按相反顺序分配（第 i 对取 ω_{d/2−1−i}）")
    name = getattr(control_fn, "__name__", type(control_fn).__name__)
    return f"table {name}", f"位置编码表 {name}"


def figure(m: FrequencyRolesMeasurement):
    """Decoding error and change per position against the wavelength, and three pairs'
    phases."""
    wavelength, err_near, err_far, step = m.wavelength, m.err_near, m.err_far, m.step
    near, far, noise, pe, quarter = m.near, m.far, m.noise, m.pe, m.quarter
    fig, (ax0, ax1, ax2) = new_figure(13, 3.8, ncols=3)
    wl = wavelength.numpy()
    order = wavelength.argsort().numpy()
    ax0.loglog(wl[order], err_near.numpy()[order], ".", color="#3451b2", ms=3,
               label=f"Δ = {near}")
    ax0.loglog(wl[order], err_far.numpy()[order], ".", color="#b3261e", ms=3,
               label=f"Δ = {far}")
    ax0.axhline(1.0, color="k", ls=":", lw=1, label="error = Δ (nothing decoded)")
    label_axes(ax0, "wavelength 2π/ω_i (positions, log scale)", "mean |Δ̂ − Δ| / Δ (log scale)",
               "Decoding an offset from one pair", log_grid=True)
    ax1.loglog(wl[order], step.numpy()[order], ".", color="#137a3a", ms=3,
               label="‖PE_i(p+1) − PE_i(p)‖ (no noise)")
    ax1.axhline(noise * math.sqrt(2), color="k", ls=":", lw=1,
                label=f"noise on a difference σ√2 = {noise * math.sqrt(2):.3g}")
    label_axes(ax1, "wavelength 2π/ω_i (positions, log scale)",
               "change per position (log scale)", "How far one step moves each pair",
               log_grid=True)
    span = min(pe.shape[0], 120)
    pos = torch.arange(span)
    for i, color in ((0, "#b3261e"), (quarter - 1, "#a05a00"), (pe.shape[1] // 2 - 1,
                                                                "#3451b2")):
        ax2.plot(pos, _phase(pe[:span])[:, i], color=color, lw=1,
                 label=f"pair {i} (wavelength {float(wavelength[i]):.3g})")
    label_axes(ax2, "position p", "phase φ_i(p) (radians)",
               "High frequency wraps, low frequency barely moves")
    return fig
