"""dot-product-geometry: a score is |q||k|cos θ, and its variance splits into norm and angle.

On queries and keys projected by an ``attnlab.MultiHeadAttention`` with its initial random
(Xavier) weights, untrained, from random token embeddings plus sinusoidal positions (read
at its ``hook_q`` / ``hook_k`` capture points), the raw score attnlab computes equals
|q||k|cos θ, with θ measured
independently of the dot product (θ = 2·atan2(|q̂ − k̂|, |q̂ + k̂|), the numerically stable
angle between unit vectors). Writing s = n·c with n = |q||k| and c = cos θ,

    Var(s) = E[n]²·Var(c) + Var(n)·E[c²]        (exact when n and c are independent)

splits the spread of the scores into an angle part and a norm part (article 000: the dot
product measures direction, scaled by length).

The identity holds by construction (no weights or inputs can break it); its control is
the deliberately wrong variant that takes θ = acos(q·k) of the raw, unnormalised dot
product, which the same test must reject. The split of the variance is exact only when n and
c are independent (support checks: it can be read off the table).

What is not an identity is whether, on the queries and keys attention actually uses, the
angle is what orders the scores (article 000:
「抛开向量长度不看，点积的核心意义在于衡量两个向量在方向上的相似度」).
Softmax compares the keys of one query, whose |q| is common to the row, so only the key
lengths |k_j| compete with the angle. A one-head associative-recall model
(``scaling-training``'s, trained here for ``train_steps`` Adam steps) is read on held-out
sequences: within each query's row, the Spearman rank correlation between cos θ_j and the
score must be ≥ 0.9, and the same correlation with the key lengths in place of the angle
(the lengths the sentence sets aside: its control) must fail it. The untrained copy is
shown beside it: the angle orders the scores of random vectors too (their lengths
concentrate), so this is geometry, not something training creates.

A check reads the dimensions as well: each head's projection maps the d-dimensional input
to d_k = d/h dimensions (the last axis at ``hook_q`` / ``hook_k`` against the input's), so
it never raises the dimension (:func:`widening` ≤ 1), whatever article 000's heading
「线性投影：升维与子空间切割」 says. That is a count by construction; its control is a
projection that does widen (d → 2d), which the same test rejects.

Two support checks read article 000's 「矩阵中第 $i$ 行第 $j$ 列的元素，精确地量化了序列中第
$i$ 个词对第 $j$ 个词的“关注程度”」 on the same untrained layer: the score s_ij = q_i·k_j is
not how much token i attends to j; the weight A_ij = softmax_j(s_i·/√d) is, and it depends
on the whole row. Over pairs of entries from different rows of one head, the fraction where
the higher score has the lower weight (:func:`score_weight_discordance`) is far from 0,
while within one row, where softmax is monotone (the control), it is 0; and adding a
constant to the other scores of row i changes A_ij with s_ij unchanged
(:func:`shift_others_change`), while adding it to the whole row (the control) changes
nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.core import positional
from attnlab.core._checks import broadcast_shapes
from attnlab.core.functional import scaled_dot_product_attention
from attnlab.nn import MultiHeadAttention

from . import scaling_training as recall
from ._common import check_between, check_ge, check_le, new_figure, scores_via_attnlab, seeded
from ._result import Check, Control, Result

NAME = "dot-product-geometry"
CLAIM = ("On queries and keys projected by a randomly initialised (untrained) attnlab "
         "MultiHeadAttention from random token embeddings plus sinusoidal positions, "
         "attnlab's score q·k equals |q||k|cos θ (an identity), and the score variance splits "
         "into a norm part and an angle part; on a trained attention head, within each "
         "query's row the angle, not the key lengths, orders the scores.")
CLAIM_ZH = ("在随机初始化（未经训练）的 attnlab MultiHeadAttention 由随机词嵌入加正弦位置编码"
            "投影得到的查询与键上，attnlab 的分数 q·k 等于 |q||k|cos θ（恒等式），"
            "分数的方差可分解为长度部分与夹角部分；在训练后的注意力头上，每个查询的一行之内，"
            "决定分数高低顺序的是夹角，而不是键的长度。")

ZH: dict[str, str] = {
    # checks
    "head {}: (angle part + norm part) / Var(score)": "头 {}：(夹角部分 + 长度部分) / Var(分数)",
    "per-head projection: output dimension d_k / input dimension d (q and k)":
        "每个头的投影：输出维度 d_k / 输入维度 d（q 与 k）",
    "a key made exactly orthogonal to its query: its softmax weight × N (1 = the uniform "
    "share), mean over heads and queries": "与查询严格正交的键：其 softmax 权重 × N"
    "（1 为均匀份额），对所有头与查询取平均",
    "trained recall head: a key made exactly orthogonal to the query, its softmax weight × "
    "N (1 = the uniform share), mean over keys and rows":
        "训练后的回忆头：与查询严格正交的键的 softmax 权重 × N（1 为均匀份额），对各键与各行取平均",
    "trained recall head: mean within-row Spearman(cos θ_j, score_j)":
        "训练后的回忆头：行内 Spearman(cos θ_j, 分数_j) 的平均值",
    "pairs of entries from different rows of one head: the higher score q·k has the lower "
    "weight, fraction": "同一个头中来自不同行的两个元素：分数 q·k 较高者权重反而较低的比例",
    "the other scores of row i raised by {}: mean |ΔA_ij| / A_ij with s_ij unchanged":
        "把第 i 行其他分数都加 {}：s_ij 不变时 |ΔA_ij| / A_ij 的平均值",
    # table
    "head": "头",
    "Var(score)": "Var(分数)",
    "angle part E[n]²Var(c)": "夹角部分 E[n]²Var(c)",
    "norm part Var(n)E[c²]": "长度部分 Var(n)E[c²]",
    "sum / Var": "两部分之和 / Var",
    "mean θ (°)": "平均 θ（°）",
    # figure
    "k{}: θ = {}°, |k| = {}, q·k = {}": "k{}：θ = {}°，|k| = {}，q·k = {}",
    "|k| cos θ: component along q (projection units)": "|k| cos θ：沿 q 方向的分量（投影单位）",
    "|k| sin θ (projection units)": "|k| sin θ（投影单位）",
    "Head {}: q (|q| = {}) and five keys at their true angles":
        "头 {}：q（|q| = {}）与按真实夹角画出的五个键",
    "cos θ between q and k": "q 与 k 夹角的 cos θ",
    "score q·k (unscaled)": "分数 q·k（未缩放）",
    "Head {}: score = |q||k|·cos θ (colour: |q||k|)": "头 {}：分数 = |q||k|·cos θ（颜色：|q||k|）",
}


def stable_angle(q: Tensor, k: Tensor) -> Tensor:
    """Angle between q and k (radians) without using their dot product: 2·atan2(|â−b̂|, |â+b̂|)."""
    a = q / q.norm(dim=-1, keepdim=True)
    b = k / k.norm(dim=-1, keepdim=True)
    return 2 * torch.atan2((a - b).norm(dim=-1), (a + b).norm(dim=-1))


def raw_dot_angle(q: Tensor, k: Tensor) -> Tensor:
    """Wrong: θ = acos(q·k) of the raw dot product, not normalised by |q||k| (clamped to
    [−1, 1]): the angle only for unit vectors."""
    return torch.acos((q * k).sum(-1).clamp(-1, 1))


def row_spearman(a: Tensor, b: Tensor) -> Tensor:
    """Spearman rank correlation of ``a`` and ``b`` along the last axis (no ties expected):
    (..., N), (..., N) -> (...).

    >>> round(float(row_spearman(torch.tensor([1., 2., 3.]), torch.tensor([10., 30., 20.]))), 6)
    0.5
    """
    if a.shape != b.shape or a.shape[-1] < 2:
        raise ValueError(f"a and b must have one shape with a last axis of at least 2, got "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    ra = a.argsort(-1).argsort(-1).double()
    rb = b.argsort(-1).argsort(-1).double()
    ra, rb = ra - ra.mean(-1, keepdim=True), rb - rb.mean(-1, keepdim=True)
    return (ra * rb).sum(-1) / (ra.norm(dim=-1) * rb.norm(dim=-1))


def key_length(q: Tensor, k: Tensor) -> Tensor:
    """|k| for each key (the predictor the article sets aside; q is unused)."""
    return k.norm(dim=-1).expand(*broadcast_shapes(q.shape[:-1], k.shape[:-1]))


def _recall_rows(model: recall.RecallModel, c: recall.RecallConfig, g: torch.Generator,
                 angle_fn: Callable[[Tensor, Tensor], Tensor],
                 control_fn: Callable[[Tensor, Tensor], Tensor]) -> dict[str, float]:
    """The query's row of a recall model on fresh sequences: how its scores are ordered by
    cos θ (``angle_fn``) and by ``control_fn`` (default: the key lengths)."""
    tokens, _ = recall.recall_batch(c, g)
    with torch.no_grad():
        x = model.embed(tokens)
        q = model.W_q(x[:, -1:]).double()  # (B, 1, E): the query token
        k = model.W_k(x).double()  # (B, N+1, E)
    s = scores_via_attnlab(q, k, scale=1.0)[:, 0]  # (B, N+1): the row softmax compares
    cos = torch.cos(angle_fn(q, k))  # (B, N+1)
    nk = k.norm(dim=-1)
    orth, lowest = orthogonal_key_weights_in_row(q, k)
    return {"angle": float(row_spearman(cos, s).mean()),
            "orth": orth, "lowest": lowest,
            "control": float(row_spearman(control_fn(q, k).expand_as(s), s).mean()),
            "length": float(row_spearman(nk, s).mean()),
            "spread": float((nk.std(-1) / nk.mean(-1)).mean()),
            "top": float((s.argmax(-1) == cos.argmax(-1)).double().mean())}


def trained_recall_rows(seed: int, steps: int, embed_dim: int,
                        angle_fn: Callable[[Tensor, Tensor], Tensor] = stable_angle,
                        control_fn: Callable[[Tensor, Tensor], Tensor] = key_length,
                        ) -> tuple[dict[str, float], dict[str, float], float]:
    """A one-head recall model (``scaling-training``'s) read before and after ``steps``
    Adam steps: (untrained rows, trained rows, final loss), each on 256 fresh sequences."""
    c = recall.RecallConfig(embed_dim=embed_dim, steps=steps)
    probe = recall.RecallConfig(embed_dim=embed_dim, batch=256)
    with seeded(seed) as g:
        model = recall.RecallModel(c, None)
        before = _recall_rows(model, probe, g, angle_fn, control_fn)
        with torch.enable_grad():
            losses = recall.fit_recall(model, c, g, steps, c.lr) if steps else [math.nan]
        after = _recall_rows(model, probe, g, angle_fn, control_fn)
    tail = losses[-max(1, len(losses) // 10):]
    return before, after, sum(tail) / len(tail)


def orthogonal_key_weight(q: Tensor, k: Tensor) -> float:
    """The softmax weight (scaled by 1/√d) that a key exactly orthogonal to its query gets,
    times the number of keys N (1 is the uniform share), averaged over heads and queries.

    Key 0 is replaced, for each query, by its component orthogonal to that query (score 0
    to rounding); the other keys keep their scores. q, k: (H, N, d)."""
    h, n, d = q.shape
    unit = q / q.norm(dim=-1, keepdim=True)
    k0 = k[:, :1, :].expand(h, n, d)
    perp = k0 - (k0 * unit).sum(-1, keepdim=True) * unit  # (H, N, d), ⟂ each query
    s = q @ k.transpose(-1, -2) / math.sqrt(d)
    s[:, :, 0] = (q * perp).sum(-1) / math.sqrt(d)
    w = torch.softmax(s, dim=-1)
    return float((w[:, :, 0] * n).mean())


def orthogonal_key_weights_in_row(q: Tensor, k: Tensor) -> tuple[float, float]:
    """On a recall model's query row (q (B, 1, E), k (B, N, E), the query token last): the
    softmax weight × N that each pair key gets when it alone is made exactly orthogonal to
    the query (the other keys keep their scores), mean over keys and rows; and, for
    comparison, the weight × N of the least-weighted pair key of each row as it is (a key
    the head ignores), mean over rows."""
    n, d = k.shape[1], q.shape[-1]
    unit = q / q.norm(dim=-1, keepdim=True)
    base = (q @ k.transpose(-1, -2))[:, 0] / math.sqrt(d)  # (B, N)
    got = []
    for j in range(n - 1):
        kj = k[:, j]
        perp = kj - (kj * unit[:, 0]).sum(-1, keepdim=True) * unit[:, 0]
        s = base.clone()
        s[:, j] = (q[:, 0] * perp).sum(-1) / math.sqrt(d)
        got.append(torch.softmax(s, dim=-1)[:, j] * n)
    lowest = (torch.softmax(base, dim=-1)[:, :-1] * n).min(-1).values
    return float(torch.stack(got).mean()), float(lowest.mean())


def score_weight_discordance(s: Tensor, w: Tensor) -> tuple[float, float]:
    """For scores ``s`` and weights ``w`` of shape (H, N, N): among pairs of entries of one
    head with different scores, the fraction where the higher score has the lower weight,
    over pairs from different rows and over pairs within one row.

    >>> s = torch.tensor([[[0., 1.], [2., 3.]]])
    >>> score_weight_discordance(s, torch.softmax(s, -1))
    (0.25, 0.0)
    """
    if s.shape != w.shape or s.dim() != 3:
        raise ValueError(f"s and w must be (H, N, N) of one shape, got {tuple(s.shape)} and "
                         f"{tuple(w.shape)}")
    n = s.shape[-1]
    row = torch.arange(n).repeat_interleave(n)
    same = row[:, None] == row[None, :]
    counts = torch.zeros(2, 2, dtype=torch.float64)  # [across, within] x [discordant, all]
    for sh, wh in zip(s.flatten(1), w.flatten(1)):
        higher = sh[:, None] > sh[None, :]
        lower_w = wh[:, None] < wh[None, :]
        for k, where in enumerate((~same, same)):
            counts[k, 0] += (higher & lower_w & where).sum()
            counts[k, 1] += (higher & where).sum()
    frac = counts[:, 0] / counts[:, 1].clamp_min(1)
    return float(frac[0]), float(frac[1])


def shift_others_change(q: Tensor, k: Tensor, shift: float) -> tuple[float, float]:
    """attnlab's weights A (q, k: (H, N, d)) and the weights with ``shift`` added to every
    score of row i except s_ij (an additive mask, one key j at a time): the mean of
    |ΔA_ij| / A_ij, and the same with the shift added to the whole row (s_ij too)."""
    n = k.shape[-2]
    v = k.new_zeros(*k.shape[:-1], 1)
    _, w = scaled_dot_product_attention(q, k, v, return_weights=True)
    changed = torch.empty_like(w)
    for j in range(n):
        bias = torch.full((n,), shift, dtype=q.dtype)
        bias[j] = 0.0
        _, wj = scaled_dot_product_attention(q, k, v, bias, return_weights=True)
        changed[..., j] = wj[..., j]
    _, whole = scaled_dot_product_attention(q, k, v, torch.full((n,), shift, dtype=q.dtype),
                                            return_weights=True)
    return (float(((changed - w).abs() / w).mean()), float(((whole - w).abs() / w).mean()))


def attnlab_weights(q: Tensor, k: Tensor) -> Tensor:
    """attnlab's attention weights softmax(q·k/√d) for (H, N, d) queries and keys."""
    v = k.new_zeros(*k.shape[:-1], 1)
    return scaled_dot_product_attention(q, k, v, return_weights=True)[1]


def widening(input_dim: int, *projected: Tensor) -> float:
    """The largest output dimension / input dimension over ``projected`` (their last axis):
    > 1 only when a projection raises the dimension.

    >>> widening(64, torch.zeros(4, 8, 16), torch.zeros(4, 8, 16))
    0.25
    """
    if not isinstance(input_dim, int) or input_dim < 1:
        raise ValueError(f"input_dim must be an int >= 1, got {input_dim!r}")
    if not projected:
        raise ValueError("widening needs at least one projected tensor, got none")
    return max(t.shape[-1] for t in projected) / input_dim


def _capture_qk(seed: int, n_tokens: int, embed_dim: int, heads: int) -> tuple[Tensor, Tensor]:
    with seeded(seed) as g:
        mha = MultiHeadAttention(embed_dim, heads).double()
        got: dict[str, Tensor] = {}
        hooks = [mha.hook_q.register_forward_hook(lambda m, i, o: got.__setitem__("q", o)),
                 mha.hook_k.register_forward_hook(lambda m, i, o: got.__setitem__("k", o))]
        try:
            vocab = torch.randn(50, embed_dim, generator=g, dtype=torch.float64)
            ids = torch.randint(0, 50, (1, n_tokens), generator=g)
            pe = positional.sinusoidal_table(n_tokens, embed_dim, dtype=torch.float64)
            with torch.no_grad():
                mha(vocab[ids] + pe)
        finally:
            for h in hooks:
                h.remove()
    return got["q"][0], got["k"][0]  # (H, N, d) each


@dataclass(frozen=True)
class VarianceSplit:
    """One head's score variance, split into its angle part and its norm part."""

    head: int
    var: float  # Var(score)
    angle_part: float  # E[n]²Var(c)
    norm_part: float  # Var(n)E[c²]
    mean_theta: float  # mean θ (°)

    @property
    def ratio(self) -> float:
        """(angle part + norm part) / Var(score): 1 when n and c are independent."""
        return (self.angle_part + self.norm_part) / self.var

    def cells(self) -> list:
        return [self.head, self.var, self.angle_part, self.norm_part, self.ratio,
                self.mean_theta]


def _variance_split(h: int, s: Tensor, n: Tensor, c: Tensor, theta: Tensor) -> VarianceSplit:
    """Head ``h``'s split, from its scores ``s``, norms ``n = |q||k|`` and cosines ``c``."""
    sh, nh, ch = s[h].flatten(), n[h].flatten(), c[h].flatten()
    return VarianceSplit(h, float(sh.var(unbiased=False)),
                         float(nh.mean() ** 2 * ch.var(unbiased=False)),
                         float(nh.var(unbiased=False) * (ch**2).mean()),
                         float(torch.rad2deg(theta[h]).mean()))


@dataclass(frozen=True)
class DotProductMeasurement:
    """The identity and its control, the variance split per head, the dimensions, the
    scores against the weights on the untrained layer, and the trained recall head."""

    n_tokens: int
    embed_dim: int
    heads: int
    train_steps: int
    shift: float
    q: Tensor  # (H, N, d) queries, fp64
    k: Tensor  # (H, N, d) keys
    s: Tensor  # (H, N, N) raw scores q·k, as attnlab computes them
    n: Tensor  # (H, N, N) |q||k|
    c: Tensor  # (H, N, N) cos θ, θ by ``angle_fn``
    err: float  # max |q·k − |q||k|cos θ| / (|q||k|)
    control_err: float  # the same with ``control_angle_fn``
    splits: tuple[VarianceSplit, ...]  # per head
    before: dict[str, float]  # the recall head's rows, untrained (see trained_recall_rows)
    after: dict[str, float]  # and trained
    loss: float  # its final loss
    widening: float  # d_k / d of the heads' projections
    wide_widening: float  # the same for a projection that widens (the control)
    across: float  # pairs from different rows: the higher score has the lower weight
    within: float  # the same pairs within one row (the control)
    others: float  # the other scores of a row shifted: mean |ΔA_ij| / A_ij
    whole_row: float  # the whole row shifted (the control)
    orthogonal_weight: float  # a key made orthogonal to its query: its weight × N


def measure(
    seed: int = 0,
    *,
    n_tokens: int = 64,
    embed_dim: int = 64,
    heads: int = 4,
    train_steps: int = 200,
    angle_fn: Callable[[Tensor, Tensor], Tensor] = stable_angle,
    control_angle_fn: Callable[[Tensor, Tensor], Tensor] = raw_dot_angle,
    order_control_fn: Callable[[Tensor, Tensor], Tensor] = key_length,
    weights_fn: Callable[[Tensor, Tensor], Tensor] = attnlab_weights,
    shift: float = 1.0,
) -> DotProductMeasurement:
    """Every measurement of :func:`run` (same arguments)."""
    if not isinstance(train_steps, int) or train_steps < 1:
        raise ValueError(f"train_steps must be an int >= 1, got {train_steps!r}")
    q, k = _capture_qk(seed, n_tokens, embed_dim, heads)  # (H, N, d)
    s = scores_via_attnlab(q, k, scale=1.0)  # (H, N, N) raw q·k, as attnlab computes it
    nq, nk = q.norm(dim=-1), k.norm(dim=-1)  # (H, N)
    n = nq[:, :, None] * nk[:, None, :]  # (H, N, N)

    def identity_error(fn: Callable[[Tensor, Tensor], Tensor]) -> tuple[float, Tensor]:
        th = fn(q[:, :, None, :], k[:, None, :, :])  # (H, N, N)
        return float(((s - n * torch.cos(th)).abs() / n).max()), th

    err, theta = identity_error(angle_fn)
    control_err, _ = identity_error(control_angle_fn)
    c = torch.cos(theta)
    splits = tuple(_variance_split(h, s, n, c, theta) for h in range(heads))
    before, after, loss = trained_recall_rows(seed, train_steps, embed_dim, angle_fn,
                                              order_control_fn)
    with seeded(seed), torch.no_grad():  # a projection that does raise the dimension
        wide = torch.nn.Linear(embed_dim, 2 * embed_dim).double()(q.new_zeros(1, embed_dim))
    across, within = score_weight_discordance(s, weights_fn(q, k))
    others, whole_row = shift_others_change(q, k, shift)
    return DotProductMeasurement(
        n_tokens, embed_dim, heads, train_steps, shift, q, k, s, n, c, err, control_err,
        splits, before, after, loss, widening(embed_dim, q, k), widening(embed_dim, wide),
        across, within, others, whole_row, orthogonal_key_weight(q, k))


def headline_control(m: DotProductMeasurement) -> Control:
    """The identity with θ taken from the raw dot product."""
    return Control("θ = acos(q·k) of the raw dot product, not normalised by |q||k|",
                   "θ = acos(q·k)，取未按 |q||k| 归一化的原始点积", m.control_err)


def _untrained_checks(m: DotProductMeasurement) -> list[Check]:
    """The untrained layer: the variance split per head, the dimensions, and the scores
    against the weights, each beside its control."""
    return [check_between(f"head {s.head}: (angle part + norm part) / Var(score)", s.ratio,
                          0.8, 1.2, id=f"head-{s.head}-variance-split", support=True)
            for s in m.splits] + [
        check_le("per-head projection: output dimension d_k / input dimension d "
                 "(q and k)", m.widening, 1.0, id="projection-no-wider", by_construction=True,
                 control=Control("a projection that widens, d → 2d (nn.Linear)",
                                 "一个升维的投影，d → 2d（nn.Linear）", m.wide_widening)),
        check_ge("pairs of entries from different rows of one head: the higher "
                 "score q·k has the lower weight, fraction", m.across, 0.05,
                 id="score-not-weight-across-rows", support=True,
                 control=Control("the same pairs within one row, where softmax is "
                                 "monotone in the score",
                                 "同一行之内的同样配对（行内 softmax 随分数单调）", m.within)),
        check_ge(f"the other scores of row i raised by {m.shift:g}: mean |ΔA_ij| / "
                 "A_ij with s_ij unchanged", m.others, 0.1,
                 id="weight-depends-on-row", support=True, by_construction=True,
                 control=Control("the whole row raised by the same constant, s_ij "
                                 "included (softmax ignores a shift of the row)",
                                 "整行（包括 s_ij）加上同一常数（softmax 不受整行"
                                 "平移影响）", m.whole_row)),
    ]


def _trained_checks(m: DotProductMeasurement) -> list[Check]:
    """The angle orders the trained head's scores; an orthogonal key keeps its weight."""
    after = m.after
    return [
        check_ge("trained recall head: mean within-row Spearman(cos θ_j, score_j)",
                 after["angle"], 0.9, id="trained-angle-order",
                 control=Control("the key lengths |k_j| in place of the angle (what "
                                 "the sentence sets aside)",
                                 "以键的长度 |k_j| 代替夹角（这句话所抛开的长度）",
                                 after["control"])),
        check_ge("a key made exactly orthogonal to its query: its softmax weight × "
                 "N (1 = the uniform share), mean over heads and queries",
                 m.orthogonal_weight, 0.1, id="orthogonal-key-keeps-weight", support=True),
        check_ge("trained recall head: a key made exactly orthogonal to the query, "
                 "its softmax weight × N (1 = the uniform share), mean over keys "
                 "and rows", after["orth"], 0.1, id="trained-orthogonal-key-keeps-weight",
                 control=Control("the least-weighted key of each row as trained (a "
                                 "key the head does ignore)",
                                 "训练后每行中权重最小的键（该头确实忽略的键）",
                                 after["lowest"])),
    ]


def checks(m: DotProductMeasurement) -> list[Check]:
    return _untrained_checks(m) + _trained_checks(m)


def table(m: DotProductMeasurement) -> tuple[list[str], list[list]]:
    """One row per head: the variance split."""
    return (["head", "Var(score)", "angle part E[n]²Var(c)", "norm part Var(n)E[c²]",
             "sum / Var", "mean θ (°)"], [s.cells() for s in m.splits])


BY_CONSTRUCTION = ("θ is the angle between the unit vectors q/|q| and k/|k| and cos θ is "
                   "their dot product, so |q||k|cos θ = q·k for any two non-zero "
                   "vectors: no weights or inputs can break it (fp64 rounding only).")
BY_CONSTRUCTION_ZH = ("θ 是单位向量 q/|q| 与 k/|k| 的夹角，cos θ 就是它们的点积，"
                      "因此对任意两个非零向量都有 |q||k|cos θ = q·k：任何权重或输入都"
                      "无法打破它（只差 fp64 舍入）。")


def captions(m: DotProductMeasurement) -> tuple[str, str]:
    """The caption in English and in Chinese."""
    heads, embed_dim, n_tokens, train_steps = m.heads, m.embed_dim, m.n_tokens, m.train_steps
    before, after, loss = m.before, m.after, m.loss
    chance, keys = math.log(recall.RecallConfig().n_keys), recall.RecallConfig().n_pairs + 1
    return (f"Queries and keys of a {heads}-head attnlab MultiHeadAttention "
            f"(E = {embed_dim}, fp64) with its initial random weights (untrained), on "
            f"{n_tokens} tokens drawn from 50 random embeddings plus sinusoidal positions, "
            f"read at hook_q/hook_k; scores read back from attnlab's attention. Trained "
            f"head: scaling-training's one-head associative-recall model (d_k = "
            f"{embed_dim}), {train_steps} Adam steps, final loss {loss:.2f} nats (chance "
            f"{chance:.2f}); on 256 fresh sequences, "
            f"within the query's row of {keys} keys, "
            f"Spearman(cos θ, score) = {after['angle']:.3f} (untrained "
            f"{before['angle']:.3f}), Spearman(|k|, score) = {after['length']:.3f}, the "
            f"top-scoring key has the smallest angle in {after['top']:.0%} of rows.",
            f"{heads} 头 attnlab MultiHeadAttention（E = {embed_dim}，fp64），取其随机"
            f"初始权重（未经训练），输入为从 50 个随机词嵌入中抽取的 {n_tokens} 个词元"
            f"加正弦位置编码；从 hook_q/hook_k 读取查询与键；"
            f"分数从 attnlab 的注意力中读回。训练后的头：scaling-training 的单头关联回忆"
            f"模型（d_k = {embed_dim}），Adam 训练 {train_steps} 步，最终损失 {loss:.2f} "
            f"奈特（随机水平 {chance:.2f}）；在 256 个"
            f"新序列上，查询那一行的 {keys} 个键之内，"
            f"Spearman(cos θ, 分数) = {after['angle']:.3f}（未训练时 "
            f"{before['angle']:.3f}），Spearman(|k|, 分数) = {after['length']:.3f}，"
            f"分数最高的键在 {after['top']:.0%} 的行中也是夹角最小的键。")


def run(
    seed: int = 0,
    *,
    n_tokens: int = 64,
    embed_dim: int = 64,
    heads: int = 4,
    train_steps: int = 200,
    angle_fn: Callable[[Tensor, Tensor], Tensor] = stable_angle,
    control_angle_fn: Callable[[Tensor, Tensor], Tensor] = raw_dot_angle,
    order_control_fn: Callable[[Tensor, Tensor], Tensor] = key_length,
    weights_fn: Callable[[Tensor, Tensor], Tensor] = attnlab_weights,
    shift: float = 1.0,
    plot: bool = True,
) -> Result:
    """Score every query against every key, per head; compare with |q||k|cos θ; then read
    how the angle orders a trained recall head's scores.

    Wrong variant: ``angle_fn`` that takes ``acos`` of the raw (unnormalized) dot product.
    Controls: ``control_angle_fn`` (default :func:`raw_dot_angle`) must fail the identity,
    ``order_control_fn`` (default :func:`key_length`) must fail to order the trained
    head's scores; handing either the right thing (``stable_angle``, or the cosine) makes
    the control pass and the result not hold.

    ``weights_fn`` (default :func:`attnlab_weights`) gives the weights whose order is set
    against the scores' (:func:`score_weight_discordance`); a wrong variant, weights that are
    a function of the score alone (``exp(q·k/√d)`` unnormalised), has no discordant pair
    and fails that support check. ``shift``: the constant added to the other scores of a
    row (:func:`shift_others_change`).
    """
    m = measure(seed, n_tokens=n_tokens, embed_dim=embed_dim, heads=heads,
                train_steps=train_steps, angle_fn=angle_fn, control_angle_fn=control_angle_fn,
                order_control_fn=order_control_fn, weights_fn=weights_fn, shift=shift)
    caption, caption_zh = captions(m)
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity="max |q·k − |q||k|cos θ| / (|q||k|) over all heads and pairs (fp64)",
        quantity_zh="所有头与配对上 |q·k − |q||k|cos θ| / (|q||k|) 的最大值（fp64）",
        measured=m.err, expected=0.0, tolerance=1e-12, checks=checks(m),
        control=headline_control(m), by_construction=BY_CONSTRUCTION,
        by_construction_zh=BY_CONSTRUCTION_ZH, table=table(m),
        figure=figure(m) if plot else None, caption=caption, caption_zh=caption_zh)


def figure(m: DotProductMeasurement):
    """Head 0: its query and five keys at their true angles, and score against cos θ."""
    q, k, s, n, c = m.q, m.k, m.s, m.n, m.c
    fig, (ax0, ax1) = new_figure(10, 4.2, ncols=2)
    # left: the query along the x axis and five keys drawn at their true angle θ to it (in
    # all d dimensions) and their true length: a faithful picture of q·k = |q||k|cos θ.
    nq = float(q[0, 0].norm())
    theta = torch.acos(c[0, 0].clamp(-1, 1))  # (N,)
    order = theta.argsort()
    picks = [int(order[round(i * (len(order) - 1) / 4)]) for i in range(5)]  # spread of θ
    ax0.annotate("", xy=(nq, 0), xytext=(0, 0),
                 arrowprops=dict(arrowstyle="-|>", color="#b3261e", lw=2.2))
    ax0.text(nq, 0, "  q", color="#b3261e", fontsize=11, va="center")
    colors = ["#3451b2", "#137a3a", "#a05a00", "#7b1fa2", "#00838f"]
    lim = nq
    for col, j in zip(colors, picks):
        th, nk = float(theta[j]), float(k[0, j].norm())
        x, y = nk * math.cos(th), nk * math.sin(th)
        lim = max(lim, nk)
        ax0.annotate("", xy=(x, y), xytext=(0, 0),
                     arrowprops=dict(arrowstyle="-|>", color=col, lw=1.5))
        ax0.plot([], [], color=col, lw=1.5,
                 label=f"k{j}: θ = {math.degrees(th):.0f}°, |k| = {nk:.2f}, "
                       f"q·k = {float(s[0, 0, j]):.2f}")
    ax0.set_xlim(-1.1 * lim, 1.25 * lim)
    ax0.set_ylim(-0.05 * lim, 2.0 * lim)  # headroom for the legend
    ax0.set_aspect("equal")
    ax0.axhline(0, color="#ccc", lw=0.8)
    ax0.axvline(0, color="#ccc", lw=0.8)
    ax0.set_xlabel("|k| cos θ: component along q (projection units)")
    ax0.set_ylabel("|k| sin θ (projection units)")
    ax0.set_title(f"Head 0: q (|q| = {nq:.2f}) and five keys at their true angles",
                  fontsize=9)
    ax0.legend(fontsize=7, loc="upper left")
    sc = ax1.scatter(c[0].flatten().numpy(), s[0].flatten().numpy(),
                     c=n[0].flatten().numpy(), s=4, cmap="viridis")
    ax1.set_xlabel("cos θ between q and k")
    ax1.set_ylabel("score q·k (unscaled)")
    ax1.set_title("Head 0: score = |q||k|·cos θ (colour: |q||k|)", fontsize=9)
    fig.colorbar(sc, ax=ax1, label="|q||k|")
    ax1.grid(True, alpha=0.3)
    return fig
