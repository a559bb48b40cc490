"""masking: masked positions get exactly zero weight, and no gradient leaks from the future.

A bool mask (True = may attend) sets the blocked scores to −∞ before the softmax, so their
weights are exactly 0 — not small, 0. With a causal mask, output t is a function of inputs
0..t only: the Jacobian ∂out_t/∂x_s is exactly 0 for every s > t (checked by autograd
through a whole ``attnlab.MultiHeadAttention``). A row whose keys are all masked yields an
output of 0, not NaN (article 001).

These are identities of the mechanism (exp(−∞) = 0 exactly, and attnlab's rule for an empty
row): they hold by construction, each beside the deliberately wrong variant the same test
must reject. The causal Jacobian's control is an off-by-one causal mask
(:func:`off_by_one_causal`); the masked weights' is a mask multiplied into the scores
(``scores · mask``: a blocked score becomes 0, not −∞, and keeps the weight exp(0)/Σ). An
additive mask of −1e4 is *not* such a variant here: in fp32 and fp64 exp(−1e4) underflows to
exactly 0, so its masked weights are 0 as well (shown in the table); where it does go wrong
is a row whose keys are all masked: −1e4 added to every score of the row changes nothing, so
the row attends to its masked keys as if unmasked instead of giving 0 — the fully-masked
row's control. The NaN check's control is the plain
softmax of scores filled with −∞ (the articles' listing), which gives NaN there. That the
past does reach each output is measured against a mask that lets each token see only itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.core import masks
from attnlab.core.functional import scaled_dot_product_attention
from attnlab.nn import MultiHeadAttention

from ._common import check_ge, check_le, new_figure, seeded
from ._result import Check, Control, Result

NAME = "masking"
CLAIM = ("Masked weights are exactly 0; with a causal mask ∂out_t/∂x_s is exactly 0 for "
         "every s > t; a fully-masked row yields 0, not NaN.")
CLAIM_ZH = ("被遮蔽位置的权重恰好为 0（不只是很小）；使用因果掩码时，对所有 s > t，∂out_t/∂x_s "
            "恰好为 0；一整行都被遮蔽时，输出为 0 而不是 NaN。")

ZH = {
    "article {}'s printed check passes with the masked scores filled with −∞, {} and {}: "
    "fills it passes (of {})": "文章 {} 打印的检查在被遮蔽分数分别填充为负无穷、{} 和 {} 时"
                               "都通过：通过的填充数（共 {} 个）",
    "max |weight| on masked positions (random bool mask)":
        "被遮蔽位置上 |权重| 的最大值（随机布尔掩码）",
    "fully-masked row: max |output| (fused and explicit)":
        "整行被遮蔽：|输出| 的最大值（融合路径与显式路径）",
    "fully-masked row: outputs contain NaN/inf ({} = yes)":
        "整行被遮蔽：输出中是否出现 NaN/inf（{} = 是）",
    "min Σ|∂out_t/∂x_s| over s ≤ t (the past does reach out_t)":
        "s ≤ t 时 Σ|∂out_t/∂x_s| 的最小值（过去确实影响 out_t）",
    "max Σ|∂out_t/∂x_s| over s > t (future)": "s > t（未来）时 Σ|∂out_t/∂x_s| 的最大值",
    "additive mask {}: max |weight| on masked positions":
        "加性掩码 {}：被遮蔽位置上 |权重| 的最大值",
    "log{} Σ|∂out_t/∂x_s| (blank = exactly {})": "log{} Σ|∂out_t/∂x_s|（空白 = 恰为 {}）",
    "input position s": "输入位置 s",
    "output position t": "输出位置 t",
    "Weights under a random bool mask": "随机布尔掩码下的权重",
    "masked (weight = {})": "被遮蔽（权重 = {}）",
    "log{} |Jacobian block|": "log{} |雅可比块|",
}


def off_by_one_causal(n: int) -> Tensor:
    """Wrong: a causal mask that also lets each token see the next one."""
    return torch.ones(n, n, dtype=torch.bool).tril(diagonal=1)


def diagonal_only(n: int) -> Tensor:
    """A mask that lets each token see only itself (the past never reaches it)."""
    return torch.eye(n, dtype=torch.bool)


def multiplied_mask_weights(q: Tensor, k: Tensor, mask: Tensor) -> Tensor:
    """Wrong: the bool mask multiplied into the scaled scores (blocked score 0, not −∞),
    then the softmax."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores * mask, dim=-1)


def minus_inf_softmax(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """The articles' listing: scores filled with −∞ where masked, a plain softmax, @ v (a
    fully-masked row gives NaN)."""
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, -math.inf)
    return torch.softmax(scores, dim=-1) @ v


def additive_mask(mask: Tensor, value: float = -1e4) -> Tensor:
    """The bool mask as an additive float mask: 0 where allowed, ``value`` where blocked."""
    return torch.zeros(mask.shape, dtype=torch.float64).masked_fill(~mask, value)


#: The fills of the masked scores under which article 001's printed check is run.
PRINTED_CHECK_FILLS = (-math.inf, -1e9, -1e4)


#: Why the claim holds whatever the input.
BY_CONSTRUCTION = ("A blocked score is −∞ and exp(−∞) = 0 exactly, so the weight, and with it "
                   "every derivative through it, is exactly 0 for any scores; a row with no key "
                   "is given 0 by attnlab's rule, whatever the input.")
BY_CONSTRUCTION_ZH = ("被遮蔽的分数为负无穷，exp(−∞) 恰为 0，因此对任何分数，该权重以及经过"
                      "它的所有导数都恰为 0；没有任何可见键的行按 attnlab 的约定输出 0，"
                      "与输入无关。")


@dataclass(frozen=True)
class MaskingMeasurement:
    """Masked weights, the causal Jacobian, a fully-masked row and article 001's printed
    check, each beside the wrong variant the same test must reject."""

    n: int
    embed_dim: int
    heads: int
    weights: Tensor  # (N, N) weights of one head under the random bool mask
    mask: Tensor  # (N, N) that mask (True = may attend)
    masked_weight: float  # max |weight| on masked positions
    masked_weight_multiplied: float  # the same, mask multiplied into the scores
    masked_weight_additive: float  # the same, additive mask −1e4
    jacobian: Tensor  # (N, N) Σ|∂out_t/∂x_s| under the causal mask
    leak: float  # max over s > t of the Jacobian blocks
    leak_control: float  # the same under the control mask
    past: float  # min over s ≤ t
    past_diagonal: float  # the same under a mask that lets each token see only itself
    dead_row_output: float  # max |output| of the fully-masked row (fused and explicit)
    dead_row_finite: bool
    dead_row_additive: float  # the same row under an additive mask −1e4
    listing_nan: bool  # the articles' listing gives NaN on that row
    printed_check_passes: int  # fills of PRINTED_CHECK_FILLS the printed check passes
    printed_check_multiplied: bool  # the printed check passes a multiplied mask


def _masked_weights(q: Tensor, k: Tensor, v: Tensor, mask: Tensor
                    ) -> tuple[Tensor, float, float, float]:
    """Weights under ``mask`` and the largest masked weight: attnlab's, with the mask
    multiplied into the scores, with an additive mask."""
    _, w = scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    blocked = ~mask.expand_as(w)
    masked_w = float(w.masked_select(blocked).abs().max())
    multiplied_w = float(multiplied_mask_weights(q, k, mask).masked_select(blocked)
                         .abs().max())
    _, w_add = scaled_dot_product_attention(q, k, v, additive_mask(mask), return_weights=True)
    return w, masked_w, multiplied_w, float(w_add.masked_select(blocked).abs().max())


def _jacobian_blocks(mha: MultiHeadAttention, x: Tensor, mask: Tensor) -> Tensor:
    """Σ|∂out_t/∂x_s| (N_out, N_in) of the module under ``mask``."""
    jac = torch.autograd.functional.jacobian(lambda x_: mha(x_, mask=mask)[0][0],
                                             x)[:, :, 0]  # (N, E, N, E)
    return jac.abs().sum(dim=(1, 3))


def _dead_row(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> tuple[float, bool, float, bool]:
    """Query 3 may attend nothing: its largest |output| and whether every output is finite
    (fused and explicit), its largest |output| under an additive mask, and whether the
    articles' listing gives NaN."""
    dead = mask.clone()
    dead[:, :, 3] = False  # query 3 may attend nothing
    nan_free, dead_out = True, 0.0
    for backend in ("auto", "explicit"):
        out = scaled_dot_product_attention(q, k, v, dead, backend=backend)
        nan_free &= bool(torch.isfinite(out).all())
        dead_out = max(dead_out, float(out[:, :, 3].abs().max()))
    dead_add = float(scaled_dot_product_attention(q, k, v, additive_mask(dead))[:, :, 3]
                     .abs().max())
    listing_nan = not bool(torch.isfinite(minus_inf_softmax(q, k, v, dead)).all())
    return dead_out, nan_free, dead_add, listing_nan


def _printed_check(q: Tensor, k: Tensor, mask: Tensor) -> tuple[int, bool]:
    """Article 001's printed check, attn.masked_fill(mask == 0, 0).sum() == attn.sum(), on
    the weights of scores filled with −∞, −1e9 and −1e4 (how many pass: all three, so it
    cannot tell −∞ from a finite fill), and on a mask multiplied into the scores."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    blocked_m = ~mask.expand_as(scores)

    def printed_check(attn: Tensor) -> bool:
        return bool(attn.masked_fill(blocked_m, 0).sum() == attn.sum())

    fills_pass = sum(printed_check(torch.softmax(scores.masked_fill(blocked_m, f), -1))
                     for f in PRINTED_CHECK_FILLS)
    return fills_pass, printed_check(multiplied_mask_weights(q, k, mask))


def measure(
    seed: int = 0,
    *,
    n: int = 10,
    embed_dim: int = 16,
    heads: int = 2,
    mask_fn: Callable[[int], Tensor] = masks.causal,
    control_mask_fn: Callable[[int], Tensor] = off_by_one_causal,
) -> MaskingMeasurement:
    """Random masks, a causal Jacobian and a fully-masked row, in fp64 (arguments: see
    :func:`run`)."""
    with seeded(seed) as g:
        q = torch.randn(2, 3, n, 8, generator=g, dtype=torch.float64)
        k = torch.randn(2, 3, n, 8, generator=g, dtype=torch.float64)
        v = torch.randn(2, 3, n, 8, generator=g, dtype=torch.float64)
        rand_mask = torch.rand(2, 1, n, n, generator=g) > 0.5
        rand_mask[..., 0] = True
        w, masked_w, multiplied_w, additive_w = _masked_weights(q, k, v, rand_mask)

        mha = MultiHeadAttention(embed_dim, heads).double()
        x = torch.randn(1, n, embed_dim, generator=g, dtype=torch.float64)
        future = torch.ones(n, n, dtype=torch.bool).triu(diagonal=1)  # s > t
        jnorm = _jacobian_blocks(mha, x, mask_fn(n))
        control_leak = float(_jacobian_blocks(mha, x, control_mask_fn(n))[future].max())
        past_diagonal = float(_jacobian_blocks(mha, x, diagonal_only(n))[~future].min())
        dead_out, nan_free, dead_add, listing_nan = _dead_row(q, k, v, rand_mask)
        fills_pass, multiplied_pass = _printed_check(q, k, rand_mask)
    return MaskingMeasurement(
        n, embed_dim, heads, w[0, 0], rand_mask[0, 0], masked_w, multiplied_w, additive_w,
        jnorm, float(jnorm[future].max()), control_leak, float(jnorm[~future].min()),
        past_diagonal, dead_out, nan_free, dead_add, listing_nan, fills_pass, multiplied_pass)


def headline_control(m: MaskingMeasurement) -> Control:
    """The leak under an off-by-one causal mask."""
    return Control("an off-by-one causal mask (each token also sees the next)",
                   "错一位的因果掩码（每个词元还能看到下一个）", m.leak_control)


def checks(m: MaskingMeasurement) -> list[Check]:
    """The printed check, the masked weights, the fully-masked row, the past reaching each
    output; each with its wrong variant."""
    return [
        check_ge("article 001's printed check passes with the masked scores filled with "
                 "−∞, −1e9 and −1e4: fills it passes (of 3)", m.printed_check_passes,
                 len(PRINTED_CHECK_FILLS), support=True, id="printed-check-blind-to-fill",
                 control=Control("a mask multiplied into the scores (the masked keys keep "
                                 "weight): 1 if the printed check passes",
                                 "把掩码乘到分数上（被遮蔽的键仍有权重）：打印的检查通过则为 1",
                                 float(m.printed_check_multiplied))),
        check_le("max |weight| on masked positions (random bool mask)", m.masked_weight, 0.0,
                 id="masked-weight-zero", by_construction=True,
                 control=Control("the mask multiplied into the scores (scores · mask: blocked "
                                 "score 0, not −∞)",
                                 "把掩码乘到分数上（分数 · 掩码：被遮蔽的分数为 0 而非负无穷）",
                                 m.masked_weight_multiplied)),
        check_le("fully-masked row: max |output| (fused and explicit)", m.dead_row_output, 0.0,
                 id="dead-row-zero", by_construction=True,
                 control=Control("an additive mask of −1e4 (the row attends to its masked "
                                 "keys as if unmasked)",
                                 "加性掩码 −1e4（这一行照常关注被遮蔽的键，如同未加掩码）",
                                 m.dead_row_additive)),
        check_le("fully-masked row: outputs contain NaN/inf (1 = yes)",
                 float(not m.dead_row_finite), 0.0, id="dead-row-finite", by_construction=True,
                 control=Control("a plain softmax of scores filled with −∞ (the articles' "
                                 "listing)",
                                 "对填入负无穷的分数直接做 softmax（文章的代码）",
                                 float(m.listing_nan))),
        check_ge("min Σ|∂out_t/∂x_s| over s ≤ t (the past does reach out_t)", m.past, 1e-6,
                 id="past-reaches",
                 control=Control("a mask that lets each token see only itself",
                                 "只允许每个词元看到自己的掩码", m.past_diagonal)),
    ]


def table(m: MaskingMeasurement) -> tuple[list[str], list[list]]:
    """Every check's value, then the future's Jacobian and the additive mask's weights."""
    return (["quantity", "value"],
            [[c.name, c.value] for c in checks(m)]
            + [["max Σ|∂out_t/∂x_s| over s > t (future)", m.leak],
               ["additive mask −1e4: max |weight| on masked positions",
                m.masked_weight_additive]])


def captions(m: MaskingMeasurement) -> tuple[str, str]:
    return (f"Jacobian of a causal attnlab MultiHeadAttention (E = {m.embed_dim}, {m.heads} "
            f"heads, N = {m.n}, fp64) by torch.autograd; masks in attnlab's convention.",
            f"attnlab 因果多头注意力（E = {m.embed_dim}，{m.heads} 个头，N = {m.n}，fp64）的"
            "雅可比矩阵，由 PyTorch 的自动微分求得；掩码采用 attnlab 的约定。")


def run(
    seed: int = 0,
    *,
    n: int = 10,
    embed_dim: int = 16,
    heads: int = 2,
    mask_fn: Callable[[int], Tensor] = masks.causal,
    control_mask_fn: Callable[[int], Tensor] = off_by_one_causal,
    plot: bool = True,
) -> Result:
    """Random masks, a causal Jacobian and a fully-masked row, in fp64.

    ``mask_fn(n)`` builds the causal mask handed to the module; the wrong variant
    :func:`off_by_one_causal` must fail. ``control_mask_fn`` (default
    :func:`off_by_one_causal`) is the headline's control; handing ``masks.causal`` makes it
    pass and the result not hold.
    """
    m = measure(seed, n=n, embed_dim=embed_dim, heads=heads, mask_fn=mask_fn,
                control_mask_fn=control_mask_fn)
    caption, caption_zh = captions(m)
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity="max over s > t of Σ|∂out_t/∂x_s|, causal MultiHeadAttention (autograd, fp64)",
        quantity_zh="因果多头注意力中 s > t 时 Σ|∂out_t/∂x_s| 的最大值（自动微分，fp64）",
        measured=m.leak, expected=0.0, tolerance=0.0, checks=checks(m),
        control=headline_control(m), by_construction=BY_CONSTRUCTION,
        by_construction_zh=BY_CONSTRUCTION_ZH, table=table(m),
        figure=figure(m) if plot else None, caption=caption, caption_zh=caption_zh)


def figure(m: MaskingMeasurement):
    """The causal Jacobian's blocks and the weights under a random bool mask."""
    jnorm, w, mask = m.jacobian, m.weights, m.mask
    fig, (ax0, ax1) = new_figure(10, 3.9, ncols=2)
    shown = jnorm.clone()
    shown[shown == 0] = float("nan")
    im = ax0.imshow(torch.log10(shown).numpy(), cmap="viridis", interpolation="nearest")
    ax0.set_xlabel("input position s")
    ax0.set_ylabel("output position t")
    ax0.set_title("log10 Σ|∂out_t/∂x_s| (blank = exactly 0)", fontsize=10)
    fig.colorbar(im, ax=ax0, label="log10 |Jacobian block|")
    im1 = ax1.imshow(w.numpy(), cmap="Blues", vmin=0, interpolation="nearest")
    ys, xs = torch.nonzero(~mask, as_tuple=True)
    ax1.scatter(xs.numpy(), ys.numpy(), marker="x", s=18, color="#b3261e",
                label="masked (weight = 0)")
    ax1.set_xlabel("key position")
    ax1.set_ylabel("query position")
    ax1.set_title("Weights under a random bool mask", fontsize=10)
    ax1.legend(fontsize=7, loc="upper right")
    fig.colorbar(im1, ax=ax1, label="attention weight")
    return fig
