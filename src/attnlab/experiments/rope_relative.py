"""rope-relative: with rotary embeddings, ⟨R_m q, R_n k⟩ depends only on m − n.

RoPE rotates each pair of dimensions of q (at position m) by the angle m·ω_i and of k (at
position n) by n·ω_i. Rotations compose, R_mᵀ R_n = R_{n−m}, so
⟨R_m q, R_n k⟩ = qᵀ R_{n−m} k: the score sees only the offset, and rotations keep |q|.
Checked on ``attnlab.positional.RotaryEmbedding`` (half-split layout, as in Llama).

Both hold by construction (rotations compose and keep lengths, whatever q and k), so the
same measurement is made on a control that must fail it: absolute sinusoidal positions
added to q and k (:func:`additive_positions`), which makes the score depend on m and n,
not only on m − n.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.core import positional

from ._common import check_le, label_axes, new_figure, seeded
from ._result import Check, Control, Result

NAME = "rope-relative"
CLAIM = "With rotary position embeddings, the score ⟨R_m q, R_n k⟩ depends only on m − n."
CLAIM_ZH = "使用旋转位置编码（RoPE）时，分数 ⟨R_m q, R_n k⟩ 只依赖于相对位置 m − n。"

ZH = {
    "max | |R_m q| − |q| | / |q|": "旋转前后范数的最大相对变化 | |R_m q| − |q| | / |q|",
    "mean score": "平均分数",
    "min over m": "对 m 取最小",
    "max over m": "对 m 取最大",
    "spread / |q||k|": "极差 / |q||k|",
    "⟨R_m q, R_n k⟩: constant along every diagonal": "⟨R_m q, R_n k⟩：沿每条对角线都是常数",
    "key position n": "键的位置 n",
    "query position m": "查询的位置 m",
    "The score is a function of m − n only": "分数只是 m − n 的函数",
    "relative position m − n": "相对位置 m − n",
    "score ⟨R_m q, R_n k⟩": "分数 ⟨R_m q, R_n k⟩",
    "score (same for every m)": "分数（对每个 m 都相同）",
}

Rotate = Callable[[Tensor, Tensor], Tensor]


def attnlab_rope(head_dim: int) -> Rotate:
    rope = positional.RotaryEmbedding(head_dim)
    return lambda x, positions: rope(x, positions=positions)


def additive_positions(head_dim: int) -> Rotate:
    """Wrong: absolute sinusoidal positions added to q and k, not rotated in."""
    def add(x: Tensor, positions: Tensor) -> Tensor:
        table = positional.sinusoidal_table(int(positions.max()) + 1, head_dim, dtype=x.dtype)
        return x + table[positions]
    return add


def _scores(rotate: Rotate, q: Tensor, k: Tensor, n_positions: int) -> tuple[Tensor, Tensor]:
    """((P, P) scores ⟨R_m q, R_n k⟩ indexed [m, n], (P, d) the rotated queries R_m q)."""
    pos = torch.arange(n_positions)
    rq = rotate(q.expand(n_positions, q.shape[-1]), pos)  # (P, d): R_m q
    rk = rotate(k.expand(n_positions, k.shape[-1]), pos)  # (P, d): R_n k
    return rq @ rk.T, rq


def _diagonal_spread(scores: Tensor, unit: float) -> float:
    """max over offsets of (max − min of the scores with that n − m) / ``unit``."""
    n = scores.shape[0]
    return max(float(d.max() - d.min()) / unit
               for d in (torch.diagonal(scores, offset=o) for o in range(-(n - 1), n)))


#: The offsets m − n shown in the table.
TABLE_OFFSETS = (64, 16, 4, 1, 0, -1, -4, -16, -64)


@dataclass(frozen=True)
class Diagonal:
    """The scores with one offset m − n (one diagonal of the score matrix)."""

    offset: int  # m − n
    mean: float
    low: float  # min over m
    high: float  # max over m
    spread: float  # (max − min) / |q||k|

    def cells(self) -> list:
        return [self.offset, self.mean, self.low, self.high, self.spread]


@dataclass(frozen=True)
class RopeMeasurement:
    """The scores of one q against one k at every pair of positions, their spread along
    the diagonals and the rotated queries' norms; the same with the control's positions."""

    head_dim: int
    n_positions: int
    control_fn: Callable[[int], Rotate]
    scores: Tensor  # (P, P) ⟨R_m q, R_n k⟩ indexed [m, n]
    offsets: tuple[int, ...]  # m − n, from P − 1 down to −(P − 1)
    offset_means: tuple[float, ...]  # the mean score at each of those offsets
    diagonals: tuple[Diagonal, ...]  # the table's offsets (TABLE_OFFSETS)
    spread: float  # max over m − n of the spread along its diagonal, / |q||k|
    norm_err: float  # max | |R_m q| − |q| | / |q|
    control_spread: float  # the same two with the control's positions
    control_norm_err: float


def measure(
    seed: int = 0,
    *,
    head_dim: int = 64,
    n_positions: int = 128,
    rotate_fn: Callable[[int], Rotate] = attnlab_rope,
    control_fn: Callable[[int], Rotate] = additive_positions,
) -> RopeMeasurement:
    """Scores, spreads and norms by ``rotate_fn`` and by ``control_fn`` (arguments: see
    :func:`run`)."""
    with seeded(seed) as g:
        q = torch.randn(head_dim, generator=g, dtype=torch.float64)
        k = torch.randn(head_dim, generator=g, dtype=torch.float64)
    scores, rq = _scores(rotate_fn(head_dim), q, k, n_positions)  # [m, n]
    unit = float(q.norm() * k.norm())
    offsets, means, diagonals = [], [], []
    for off in range(-(n_positions - 1), n_positions):
        diag = torch.diagonal(scores, offset=off)  # entries with n − m = off
        offsets.append(-off)
        means.append(float(diag.mean()))
        if -off in TABLE_OFFSETS:
            diagonals.append(Diagonal(-off, float(diag.mean()), float(diag.min()),
                                      float(diag.max()), float(diag.max() - diag.min()) / unit))
    # the control: the same q, k and measurement, positions from control_fn
    c_scores, c_rq = _scores(control_fn(head_dim), q, k, n_positions)
    return RopeMeasurement(
        head_dim, n_positions, control_fn, scores, tuple(offsets), tuple(means),
        tuple(diagonals), _diagonal_spread(scores, unit), _norm_error(rq, q),
        _diagonal_spread(c_scores, unit), _norm_error(c_rq, q))


def _norm_error(rq: Tensor, q: Tensor) -> float:
    """max | |R_m q| − |q| | / |q| over the rotated queries ``rq`` (P, d)."""
    return float(((rq.norm(dim=-1) - q.norm()).abs().max()) / q.norm())


def headline_control(m: RopeMeasurement) -> Control:
    """The spread along the diagonals with the control's positions."""
    return Control(*_control_words(m.control_fn), m.control_spread)


def checks(m: RopeMeasurement) -> list[Check]:
    """Rotations keep |q|; beside the control's positions."""
    return [check_le("max | |R_m q| − |q| | / |q|", m.norm_err, 1e-5, id="norm-kept",
                     by_construction=True,
                     control=Control(*_control_words(m.control_fn), m.control_norm_err))]


def table(m: RopeMeasurement) -> tuple[list[str], list[list]]:
    """One row per offset of TABLE_OFFSETS."""
    return (["m − n", "mean score", "min over m", "max over m", "spread / |q||k|"],
            [d.cells() for d in m.diagonals])


BY_CONSTRUCTION = ("Each pair of dimensions is turned by a 2×2 rotation; rotations compose "
                   "(R_mᵀ R_n = R_{n−m}) and keep lengths, so ⟨R_m q, R_n k⟩ = qᵀ R_{n−m} k "
                   "for every q and k.")
BY_CONSTRUCTION_ZH = ("每对维度被一个 2×2 旋转转动；旋转可以复合（R_mᵀ R_n = R_{n−m}）且保持"
                      "长度，所以对任意 q、k 都有 ⟨R_m q, R_n k⟩ = qᵀ R_{n−m} k。")


def captions(m: RopeMeasurement) -> tuple[str, str]:
    """The caption in English and in Chinese."""
    what, what_zh = _control_words(m.control_fn)
    return (f"attnlab RotaryEmbedding({m.head_dim}); one q and one k (fp64) placed at "
            f"every pair of positions m, n < {m.n_positions}. Control, {what}: the spread "
            f"along a diagonal reaches {m.control_spread:.3g}·|q||k|.",
            f"attnlab 的 RoPE 实现（头维度 {m.head_dim}）；同一个 q 和 k（fp64）分别放在"
            f"所有 m, n < {m.n_positions} 的位置上。对照（{what_zh}）：沿对角线的极差达 "
            f"{m.control_spread:.3g}·|q||k|。")


def run(
    seed: int = 0,
    *,
    head_dim: int = 64,
    n_positions: int = 128,
    rotate_fn: Callable[[int], Rotate] = attnlab_rope,
    control_fn: Callable[[int], Rotate] = additive_positions,
    plot: bool = True,
) -> Result:
    """Score one q at every position m against one k at every position n.

    Wrong variant: ``rotate_fn=additive_positions``. Control: the same scores with
    ``control_fn`` (default :func:`additive_positions`); ``control_fn=attnlab_rope`` (RoPE as
    its own control) must make the result not hold. Scores are compared relative to
    |q||k|; RoPE's angles are computed in fp32, so agreement is ~1e-6, not fp64's 1e-15.
    """
    m = measure(seed, head_dim=head_dim, n_positions=n_positions, rotate_fn=rotate_fn,
                control_fn=control_fn)
    caption, caption_zh = captions(m)
    return Result(
        NAME, CLAIM, CLAIM_ZH, origin="attnlab",  # attnlab's addition, not the articles'
        quantity="max over m − n of the spread of ⟨R_m q, R_n k⟩ along its diagonal, / |q||k|",
        quantity_zh="⟨R_m q, R_n k⟩ 在每条对角线（m − n 固定）上的极差，对所有 m − n 取最大，"
                    "再除以 |q||k|",
        measured=m.spread, expected=0.0, tolerance=1e-5, checks=checks(m),
        control=headline_control(m), by_construction=BY_CONSTRUCTION,
        by_construction_zh=BY_CONSTRUCTION_ZH, table=table(m),
        figure=figure(m) if plot else None, caption=caption, caption_zh=caption_zh)


def _control_words(control_fn: Callable[[int], Rotate]) -> tuple[str, str]:
    """What the control is, in English and Chinese."""
    if control_fn is additive_positions:
        return ("absolute sinusoidal positions added to q and k instead of rotated in",
                "把绝对正弦位置编码加到 q 和 k 上，而不是旋转进去")
    name = getattr(control_fn, "__name__", type(control_fn).__name__)
    return f"positions by {name}", f"用 {name} 加入位置"


def figure(m: RopeMeasurement):
    """The score matrix, and the score against m − n."""
    fig, (ax0, ax1) = new_figure(10, 3.8, ncols=2)
    im = ax0.imshow(m.scores.numpy(), cmap="RdBu_r", interpolation="nearest")
    ax0.set_xlabel("key position n")
    ax0.set_ylabel("query position m")
    ax0.set_title("⟨R_m q, R_n k⟩: constant along every diagonal", fontsize=10)
    fig.colorbar(im, ax=ax0, label="score")
    ax1.plot(list(m.offsets), list(m.offset_means), color="#3451b2",
             label="score (same for every m)")
    label_axes(ax1, "relative position m − n", "score ⟨R_m q, R_n k⟩",
               "The score is a function of m − n only", legend=False)
    ax1.legend(fontsize=8)
    return fig
