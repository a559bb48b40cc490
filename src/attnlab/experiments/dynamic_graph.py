"""dynamic-graph: attention is a complete graph whose edge weights depend on the input.

The weights A(X) (N × N, rows summing to 1, every entry > 0) are the weighted adjacency
matrix of a complete directed graph on the tokens; unlike a fixed graph (a convolution, a
GNN's adjacency) they change with the input X. Without positions, self-attention is
permutation-equivariant: f(PX) = P f(X) for any permutation P, so it sees a set, not a
sequence; adding the sinusoidal positional encoding breaks that (article 000 and 001).

Equivariance without positions is an identity (each step of attention acts per token or
sums over the set of keys, whatever the weights), and so are the complete graph and the
rows summing to 1 (exp > 0, divided by its own sum): they hold by construction, each beside
the deliberately wrong variant the same test rejects — the sinusoidal encoding added (the
point of article 001's 「传统 RNN 通过时间步记录位置信息」), a causal mask (a triangular, not
complete, graph), exp(scores) without the normalisation. Whether the weights depend on the
input is measured against a fixed graph: the same layer with W_Q zeroed, whose scores are 0
and whose weights are 1/N whatever the input, as in a GNN's fixed adjacency. That positions
break the symmetry is measured against the layer without them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.core import masks, positional
from attnlab.nn import MultiHeadAttention

from ._common import check_ge, check_le, new_figure, seeded
from ._result import Check, Control, Result

NAME = "dynamic-graph"
CLAIM = ("The attention matrix is the weighted adjacency of a complete graph whose weights "
         "depend on the input; without positions self-attention is permutation-equivariant, "
         "and adding PE breaks it.")
CLAIM_ZH = ("注意力矩阵是一张完全图的带权邻接矩阵，边权随输入而变；不加位置信息时，"
            "自注意力对输入的置换等变，加入位置编码后就不再等变。")

SENTENCE = "the cat sat on the mat because it was tired".split()

ZH = {
    "smallest edge weight (complete graph: all > {})": "最小的边权（完全图：全部 > {}）",
    "max |A(X) − A(X′)| for another input X′ (weights depend on input)":
        "换一个输入 X′ 时 |A(X) − A(X′)| 的最大值（权重随输入而变）",
    "with sinusoidal PE: max |f(PX) − P f(X)|": "加入正弦位置编码时 |f(PX) − P f(X)| 的最大值",
    "without PE: max |f(PX) − P f(X)|": "不加位置编码时 |f(PX) − P f(X)| 的最大值",
    "with a causal mask, without PE: max |f(PX) − P f(X)|":
        "加因果掩码、不加位置编码时 |f(PX) − P f(X)| 的最大值",
    "Attention graph: query → key, edges with weight > {}/N":
        "注意力图：查询 → 键，只画权重 > {}/N 的边",
    "Weighted adjacency A(X) (rows sum to {})": "带权邻接矩阵 A(X)（每行之和为 {}）",
    # the input sentence is data: its words are shown as they are
    **{word: word for word in SENTENCE},
}


def no_positions(x: Tensor) -> Tensor:
    return x


def with_positions(x: Tensor) -> Tensor:
    """Add the sinusoidal table (x: (B, N, E))."""
    return x + positional.sinusoidal_table(x.shape[1], x.shape[2], dtype=x.dtype)


#: Why the claim holds whatever the input.
BY_CONSTRUCTION = ("Without positions every step acts on each token alone (projections) or sums "
                   "over the set of keys (softmax, weighted sum), so f(PX) = P f(X) for every "
                   "permutation P, whatever the weights or the input (fp64 rounding only).")
BY_CONSTRUCTION_ZH = ("不加位置信息时，每一步要么逐个词元作用（投影），要么对键的集合求和"
                      "（softmax、加权求和），因此对任意置换 P 都有 f(PX) = P f(X)，"
                      "与权重和输入无关（只差 fp64 舍入）。")


@dataclass(frozen=True)
class DynamicGraphMeasurement:
    """The graph A(X) of one layer on a sentence, and what each identity's wrong variant
    and the fixed graph give."""

    words: tuple[str, ...]
    embed_dim: int
    heads: int
    weights: Tensor  # (N, N) head-averaged A(X)
    min_weight: float  # smallest edge weight
    min_weight_causal: float  # the same under a causal mask
    row_sum_error: float  # max |row sum − 1|
    row_sum_error_unnormalised: float  # the same for exp(scores)
    input_change: float  # max |A(X) − A(X′)| for another input X′
    input_change_fixed: float  # the same for the layer with W_Q = 0
    equivariance_error: float  # max |f(PX) − P f(X)| with ``encode``
    equivariance_error_control: float  # the same with ``control_encode``
    pe_error: float  # the same with the sinusoidal encoding
    plain_error: float  # the same without positions
    causal_error: float  # the same with a causal mask, without positions


def _fixed_graph(mha: MultiHeadAttention) -> MultiHeadAttention:
    """The same layer with W_Q = 0: scores 0, a fixed graph."""
    fixed = copy.deepcopy(mha)
    e = mha.embed_dim
    with torch.no_grad():
        fixed.qkv_proj.weight[:e] = 0
        if fixed.qkv_proj.bias is not None:
            fixed.qkv_proj.bias[:e] = 0
    return fixed


def _weights_and_raw(mha: MultiHeadAttention, x: Tensor) -> tuple[Tensor, Tensor]:
    """Head-averaged weights (1, N, N) of ``mha`` on ``x``, and exp(scores) averaged over
    the heads without the softmax's normalisation."""
    got: dict[str, Tensor] = {}
    hooks = [mha.hook_q.register_forward_hook(lambda m, i, o: got.__setitem__("q", o)),
             mha.hook_k.register_forward_hook(lambda m, i, o: got.__setitem__("k", o))]
    try:
        _, w = mha(x, need_weights=True, average_weights=True)  # w: (1, N, N)
        raw = (got["q"] @ got["k"].transpose(-2, -1) * mha.scale).exp().mean(1)  # (1,N,N)
    finally:
        for h in hooks:
            h.remove()
    return w, raw


def _equivariance_error(mha: MultiHeadAttention, x: Tensor, perm: Tensor,
                        enc: Callable[[Tensor], Tensor], mask: Tensor | None = None) -> float:
    """max |f(PX) − P f(X)| of ``mha`` after ``enc``."""
    out_x, _ = mha(enc(x), mask=mask, need_weights=True)
    out_px, _ = mha(enc(x[:, perm]), mask=mask, need_weights=True)
    return float((out_px - out_x[:, perm]).abs().max())


def measure(
    seed: int = 0,
    *,
    embed_dim: int = 32,
    heads: int = 4,
    encode: Callable[[Tensor], Tensor] = no_positions,
    control_encode: Callable[[Tensor], Tensor] = with_positions,
) -> DynamicGraphMeasurement:
    """One attnlab MultiHeadAttention (fp64) on a sentence, its permutation, and other input
    (arguments: see :func:`run`)."""
    words = SENTENCE
    vocab = sorted(set(words))
    with seeded(seed) as g:
        mha = MultiHeadAttention(embed_dim, heads).double().eval()
        table = torch.randn(len(vocab), embed_dim, generator=g, dtype=torch.float64)
        x = table[torch.tensor([vocab.index(w) for w in words])][None]  # (1, N, E)
        other = torch.randn(1, len(words), embed_dim, generator=g, dtype=torch.float64)
        perm = torch.randperm(len(words), generator=g)
    fixed = _fixed_graph(mha)
    causal = masks.causal(len(words))
    with torch.no_grad():
        w, raw = _weights_and_raw(mha, encode(x))
        eq, eq_control, pe, plain = (_equivariance_error(mha, x, perm, enc) for enc in
                                     (encode, control_encode, with_positions, no_positions))
        # GPT-style layers are causal: the mask itself orders the tokens
        causal_err = _equivariance_error(mha, x, perm, no_positions, causal)
        _, w_other = mha(other, need_weights=True, average_weights=True)
        _, w_causal = mha(encode(x), mask=causal, need_weights=True, average_weights=True)
        _, w_fixed = fixed(encode(x), need_weights=True, average_weights=True)
        _, w_fixed_other = fixed(other, need_weights=True, average_weights=True)
    w = w[0]
    return DynamicGraphMeasurement(
        tuple(words), embed_dim, heads, w, float(w.min()), float(w_causal.min()),
        float((w.sum(-1) - 1).abs().max()), float((raw[0].sum(-1) - 1).abs().max()),
        float((w - w_other[0]).abs().max()), float((w_fixed - w_fixed_other).abs().max()),
        eq, eq_control, pe, plain, causal_err)


def headline_control(m: DynamicGraphMeasurement) -> Control:
    """Equivariance with the sinusoidal encoding added."""
    return Control("the same layer with the sinusoidal encoding added",
                   "加入正弦位置编码的同一层", m.equivariance_error_control)


def checks(m: DynamicGraphMeasurement) -> list[Check]:
    """Complete graph, rows summing to 1, input-dependent weights, positions and masks
    breaking the symmetry; each beside its wrong variant or fixed graph."""
    return [
        check_ge("smallest edge weight (complete graph: all > 0)", m.min_weight, 1e-12,
                 id="complete-graph", by_construction=True,
                 control=Control("a causal mask (a triangular graph, not complete)",
                                 "因果掩码（三角形的图，不是完全图）", m.min_weight_causal)),
        check_le("max |row sum − 1|", m.row_sum_error, 1e-12, id="row-sum",
                 by_construction=True,
                 control=Control("exp(scores) without the softmax's normalisation",
                                 "未经 softmax 归一化的 exp(分数)",
                                 m.row_sum_error_unnormalised)),
        check_ge("max |A(X) − A(X′)| for another input X′ (weights depend on input)",
                 m.input_change, 1e-2, id="input-dependent",
                 control=Control("a fixed graph: the same layer with W_Q = 0 (weights 1/N "
                                 "whatever the input)",
                                 "固定的图：同一层但 W_Q = 0（无论输入如何，权重都是 1/N）",
                                 m.input_change_fixed)),
        check_ge("with sinusoidal PE: max |f(PX) − P f(X)|", m.pe_error, 1e-2,
                 id="pe-breaks-symmetry",
                 control=Control("the same layer without positions", "不加位置编码的同一层",
                                 m.plain_error)),
        check_ge("with a causal mask, without PE: max |f(PX) − P f(X)|", m.causal_error, 1e-2,
                 support=True, id="causal-not-equivariant",
                 control=Control("the same layer without the mask", "不加掩码的同一层",
                                 m.plain_error)),
    ]


def table(m: DynamicGraphMeasurement) -> tuple[list[str], list[list]]:
    """Every check's value, then the equivariance error without positions."""
    return (["quantity", "value"], [[c.name, c.value] for c in checks(m)]
            + [["without PE: max |f(PX) − P f(X)|", m.equivariance_error]])


def captions(m: DynamicGraphMeasurement) -> tuple[str, str]:
    sentence = " ".join(m.words)
    return (f"attnlab MultiHeadAttention(E = {m.embed_dim}, {m.heads} heads, fp64) on "
            f"“{sentence}” with one fixed random vector per word; graph: head-averaged "
            "weights, edges above 1/N drawn, width ∝ weight.",
            f"attnlab 的多头注意力（E = {m.embed_dim}，{m.heads} 个头，fp64）作用于英文句子"
            f"“{sentence}”，每个词对应一个固定的随机向量；图中为各头的平均权重，"
            "只画出权重大于 1/N 的边，线宽 ∝ 权重。")


def run(
    seed: int = 0,
    *,
    embed_dim: int = 32,
    heads: int = 4,
    encode: Callable[[Tensor], Tensor] = no_positions,
    control_encode: Callable[[Tensor], Tensor] = with_positions,
    plot: bool = True,
) -> Result:
    """One attnlab MultiHeadAttention (fp64) on a sentence, its permutation, and other input.

    ``encode`` is applied before attention in the "no positions" run; the wrong variant
    ``encode=with_positions`` must fail the equivariance claim. ``control_encode`` is the
    headline's control (default :func:`with_positions`, which must break equivariance);
    handing :func:`no_positions` makes the control pass and the result not hold.
    """
    m = measure(seed, embed_dim=embed_dim, heads=heads, encode=encode,
                control_encode=control_encode)
    caption, caption_zh = captions(m)
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity="without positions, max |f(PX) − P f(X)| for a random permutation P (fp64)",
        quantity_zh="不加位置信息时，随机置换 P 下 |f(PX) − P f(X)| 的最大值（fp64）",
        measured=m.equivariance_error, expected=0.0, tolerance=1e-12, checks=checks(m),
        control=headline_control(m), by_construction=BY_CONSTRUCTION,
        by_construction_zh=BY_CONSTRUCTION_ZH, table=table(m),
        figure=figure(m) if plot else None, caption=caption, caption_zh=caption_zh)


def figure(m: DynamicGraphMeasurement):
    """The attention graph on a circle and its weighted adjacency matrix."""
    import math

    w, words = m.weights, list(m.words)
    fig, (ax0, ax1) = new_figure(10, 4.6, ncols=2)
    n = len(words)
    ang = [math.pi / 2 - 2 * math.pi * i / n for i in range(n)]
    xy = [(math.cos(a), math.sin(a)) for a in ang]
    for i in range(n):
        for j in range(n):
            wij = float(w[i, j])
            if i != j and wij > 1 / n:
                ax0.annotate("", xy=xy[j], xytext=xy[i], arrowprops=dict(
                    arrowstyle="-|>", color="#3451b2", alpha=min(1.0, 2 * wij),
                    lw=6 * wij, shrinkA=12, shrinkB=12, connectionstyle="arc3,rad=0.12"))
    for (x, y), word in zip(xy, words):
        ax0.scatter([x], [y], s=500, color="#fbfbfd", edgecolor="#1d2330", zorder=3)
        ax0.text(x, y, word, ha="center", va="center", fontsize=8, zorder=4)
    ax0.set_xlim(-1.35, 1.35)
    ax0.set_ylim(-1.35, 1.35)
    ax0.set_aspect("equal")
    ax0.axis("off")
    ax0.set_title("Attention graph: query → key, edges with weight > 1/N", fontsize=10)
    im = ax1.imshow(w.numpy(), cmap="Blues", vmin=0, interpolation="nearest")
    ax1.set_xticks(range(n), words, rotation=60, fontsize=8)
    ax1.set_yticks(range(n), words, fontsize=8)
    ax1.set_xlabel("key token")
    ax1.set_ylabel("query token")
    ax1.set_title("Weighted adjacency A(X) (rows sum to 1)", fontsize=10)
    fig.colorbar(im, ax=ax1, label="attention weight")
    return fig
