"""article-code: the articles' PyTorch listings, run as printed, then minimally corrected.

Article 000 prints ``PureSelfAttention`` with its own ``__main__`` test; article 001 prints
a ``MultiHeadAttention`` (defaults ``d_model=512, n_heads=8``) with no test. attnlab ships
both listings verbatim (``listings/*.py.txt``: text, so that no tool imports, lints or
byte-compiles code that may not compile) and runs each in a fresh interpreter
(``sys.executable``, :func:`.article_listings.run_listings`), never in attnlab's own
process. A small driver there compiles the listing, runs its ``__main__`` block (000),
builds the class with attnlab's weights (``load_state_dict(strict=True)``), calls
``forward`` on a (2, 10, 512) input, with and without a mask (article 001's convention:
``mask == 0`` is blocked), and records the first exception with its line in the listing. It
records the attention weights by wrapping ``torch.nn.functional.softmax`` while ``forward``
runs (the listings are not changed).

Article 001's listing is then corrected one :class:`Edit` at a time, each run again, until
it runs; the corrected listing (and 000's, which runs as printed) must equal attnlab's
:class:`~attnlab.nn.SelfAttention` / :class:`~attnlab.nn.MultiHeadAttention` with the same
weights, and :func:`einsum_attention` (the einsum formulation 001 recommends) must equal
attnlab's module too. The article's debugging tips are checked on the listing's own weights,
and each tip is shown able to catch what it is meant to catch. Finally 001's tip on
``contiguous()`` is measured: ``view`` after ``transpose`` raises, ``reshape`` and
``contiguous().view`` agree.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from attnlab.nn import MultiHeadAttention, SelfAttention

from ._common import check_ge, check_le, new_figure, seeded
from ._result import Result, fmt_num
from .article_listings import (
    DEDENT_001,
    FIXES_001,
    LISTINGS,
    Edit,
    Listing,
    apply_edits,
    diff_lines,
    listing_source,
    run_listings,
)

NAME = "article-code"
CLAIM = ("The articles' PyTorch listings run as printed and compute multi-head attention "
         "(equal to attnlab's modules with the same weights).")
CLAIM_ZH = ("两篇文章给出的 PyTorch 代码清单可按原样运行，并正确计算多头注意力"
            "（与使用相同权重的 attnlab 模块输出一致，差异在浮点舍入以内）。")

#: English -> Chinese for every string a reader sees (check names, table, figure).
ZH: dict[str, str] = {
    # checks
    "000 as printed: its own __main__ test runs (1 = yes)":
        "000 按原样：其自带的 __main__ 测试可运行（1 = 是）",
    "000 as printed vs attnlab SelfAttention, same weights: max |output error|":
        "000 按原样 vs attnlab SelfAttention（相同权重）：输出最大绝对误差",
    "000 as printed vs attnlab SelfAttention: max |weights error|":
        "000 按原样 vs attnlab SelfAttention：注意力权重最大绝对误差",
    "{} with the {} fixes vs attnlab MultiHeadAttention: max |output error| (no mask, "
    "causal, padding)":
        "{} 经 {} 处修正后 vs attnlab MultiHeadAttention：输出最大绝对误差（无掩码、因果掩码、"
        "填充掩码）",
    "einsum formulation vs attnlab MultiHeadAttention, fp64: max |output error|":
        "einsum 写法 vs attnlab MultiHeadAttention（fp64）：输出最大绝对误差",
    "tip: torch.allclose(attn.sum(-1), 1) on the corrected 001 and attnlab (1 = all True)":
        "调试技巧：在修正后的 001 与 attnlab 上 torch.allclose(attn.sum(-1), 1)（1 = 全部为 True）",
    "tip: attn.masked_fill(mask==0, 0).sum() == attn.sum() on the corrected 001 and attnlab, "
    "causal and padding masks (1 = all True)":
        "调试技巧：在修正后的 001 与 attnlab 上，因果掩码和填充掩码下 "
        "attn.masked_fill(mask==0, 0).sum() == attn.sum()（1 = 全部为 True）",
    "the two tips flag weights normalised over the wrong axis and weights computed without "
    "the mask (1 = both flagged)":
        "两条调试技巧能分别发现沿错误维度归一化的权重和未加掩码算出的权重（1 = 两者都被发现）",
    "tip: view after transpose raises RuntimeError (1 = raised)":
        "调试技巧：transpose 之后直接 view 抛出 RuntimeError（1 = 抛出）",
    "reshape vs contiguous().view after transpose: max |difference|":
        "transpose 之后 reshape 与 contiguous().view 的最大绝对差",
    # table
    "run": "运行",
    "result": "结果",
    "line of the listing run": "所运行代码清单中的行号",
    "message or measurement": "报错信息或测量值",
    "runs": "运行成功",
    "IndentationError": "IndentationError（缩进错误）",
    "AttributeError": "AttributeError（属性错误）",
    "RuntimeError": "RuntimeError（运行时错误）",
    "TypeError": "TypeError（类型错误）",
    "no error": "无报错",
    "000 as printed, run as __main__ (its own test)":
        "000 按原样，作为 __main__ 运行（其自带测试）",
    "{} as printed, driven: PureSelfAttention({}, {}) on ({}, {}, {})":
        "{} 按原样，由驱动程序调用：PureSelfAttention({}, {})，输入 ({}, {}, {})",
    "{} as printed: MultiHeadAttention({}, {}) on ({}, {}, {})":
        "{} 按原样：MultiHeadAttention({}, {})，输入 ({}, {}, {})",
    "001, other reading: masked_fill dedented (runs unconditionally), forward(x) without a mask":
        "001 的另一种读法：把 masked_fill 一行取消缩进（无条件执行），不带掩码调用 forward(x)",
    "fix {} diff": "修正 {} 的改动",
    "max |out − attnlab SelfAttention| = {}": "与 attnlab SelfAttention 输出的最大绝对差 = {}",
    "max |out − attnlab MultiHeadAttention| = {} (no mask, causal, padding)":
        "与 attnlab MultiHeadAttention 输出的最大绝对差 = {}（无掩码、因果掩码、填充掩码）",
    "unexpected indent": "意外的缩进（unexpected indent）",
    "'MultiHeadAttention' object has no attribute 'n_heads'":
        "'MultiHeadAttention' 对象没有属性 'n_heads'",
    "einsum(): the number of subscripts in the equation ({}) does not match the number of "
    "dimensions ({}) for operand {} and no ellipsis was given":
        "einsum()：方程中的下标个数（{}）与维数（{}）不一致（第 {} 个操作数），且未使用省略号",
    "masked_fill() received an invalid combination of arguments - got (bool, float), but "
    "expected one of:":
        "masked_fill() 收到了无效的参数组合：得到 (bool, float)，但期望以下之一：",
    "Sum of attention weights for token {}: {}": "词元 {} 的注意力权重之和：{}",
    "view after transpose, (B, H, L, d) = ({}, {}, {}, {})":
        "transpose 之后直接 view，(B, H, L, d) = ({}, {}, {}, {})",
    "view size is not compatible with input tensor's size and stride (at least one dimension "
    "spans across two contiguous subspaces)":
        "view 的形状与输入张量的尺寸和步长不兼容（至少有一个维度跨越了两个连续子空间）",
    "reshape / contiguous().view after transpose": "transpose 之后 reshape / contiguous().view",
    "max |difference| = {}": "最大绝对差 = {}",
    "view after transpose, one head (H = {}): ({}, {}, {}, {})":
        "transpose 之后直接 view，单个头（H = {}）：({}, {}, {}, {})",
    "view after transpose, one token (L = {}): ({}, {}, {}, {})":
        "transpose 之后直接 view，单个词元（L = {}）：({}, {}, {}, {})",
    # figure
    "000 output": "000 输出",
    "000 weights": "000 权重",
    "001 fixed": "001 修正后",
    "einsum fp64": "einsum（fp64）",
    "max |error| vs attnlab": "与 attnlab 的最大绝对误差",
    "tolerance": "容差",
    "did not run": "未能运行",
    "listing run (same weights as attnlab)": "代码清单运行（与 attnlab 相同权重）",
    "max |error| (an exact 0 at the floor)": "最大绝对误差（恰为 0 时画在底部）",
    "Listings against attnlab's modules": "代码清单与 attnlab 模块的对比",
    "Corrected {} listing: head {}, causal mask": "修正后的 {} 代码清单：第 {} 个头，因果掩码",
    "Corrected 001 listing": "修正后的 001 代码清单",
    "the corrected listing did not run": "修正后的代码清单无法运行",
    "key position": "键位置",
    "query position": "查询位置",
}

__all__ = ["NAME", "CLAIM", "CLAIM_ZH", "ZH", "Edit", "Listing", "LISTINGS", "FIXES_001",
           "DEDENT_001", "listing_source", "apply_edits", "diff_lines", "run_listings",
           "einsum_attention", "run"]

#: Sizes of the driven runs: article 001's defaults and article 000's test input.
EMBED_DIM, HEADS, BATCH, SEQ = 512, 8, 2, 10
#: fp32 agreement between a listing and attnlab with the same weights.
TOLERANCE = 1e-6
#: fp64 agreement between :func:`einsum_attention` and attnlab's module.
EINSUM_TOLERANCE = 1e-12


# -- the einsum formulation ------------------------------------------------------------------


def einsum_attention(
    mha: MultiHeadAttention, x: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Multi-head self-attention written with ``torch.einsum`` (article 001's advice), with
    the weights of attnlab's ``mha``: no ``view``/``transpose`` of the heads at all.

    ``x`` (B, N, E); ``mask`` bool (True = may attend) broadcastable to (B, H, N, N), or
    None. Returns the output (B, N, E) and the weights (B, H, N, N). A row whose keys are
    all masked gives NaN here (softmax of −∞ only), where attnlab gives 0. Needs the fused
    ``qkv_proj`` of a module without grouped heads or rotary embeddings.

    >>> mha = MultiHeadAttention(16, 4)
    >>> x = torch.randn(2, 5, 16)
    >>> out, w = einsum_attention(mha, x)
    >>> bool(torch.allclose(out, mha(x)[0], atol=1e-6)), tuple(w.shape)
    (True, (2, 4, 5, 5))
    """
    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(f"mha must be an attnlab MultiHeadAttention, got {type(mha).__name__}")
    if not mha.fused_qkv or mha.num_kv_heads != mha.num_heads or mha.rotary is not None:
        raise ValueError("mha must have a fused qkv_proj, num_kv_heads == num_heads and no "
                         f"rotary embedding; got fused_qkv={mha.fused_qkv}, "
                         f"num_kv_heads={mha.num_kv_heads}, num_heads={mha.num_heads}, "
                         f"rotary={mha.rotary is not None}")
    if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != mha.embed_dim:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"x must have shape (B, N, {mha.embed_dim}), got {got}")
    b, n, e = x.shape
    h, d = mha.num_heads, mha.head_dim
    w_qkv = mha.qkv_proj.weight.view(3, h, d, e)  # rows of W_q, W_k, W_v, head by head
    qkv = torch.einsum("bne,shde->sbnhd", x, w_qkv)  # (3, B, N, H, d)
    if mha.qkv_proj.bias is not None:
        qkv = qkv + mha.qkv_proj.bias.view(3, 1, 1, h, d)
    q, k, v = qkv.unbind(0)  # each (B, N, H, d)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * mha.scale  # (B, H, N, N)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    ctx = torch.einsum("bhqk,bkhd->bqhd", weights, v)  # (B, N, H, d)
    w_o = mha.out_proj.weight.view(e, h, d)
    out = torch.einsum("bqhd,ehd->bqe", ctx, w_o)  # (B, N, E)
    if mha.out_proj.bias is not None:
        out = out + mha.out_proj.bias
    return out, weights


# -- the experiment --------------------------------------------------------------------------


def _err(a: Tensor, b: Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def _rows_tip(attn: Tensor) -> bool:
    """Article 001's tip 1: ``torch.allclose(attn.sum(dim=-1), torch.ones_like(...))``."""
    s = attn.sum(dim=-1)
    return bool(torch.allclose(s, torch.ones_like(s)))


def _mask_tip(attn: Tensor, mask: Tensor) -> bool:
    """Article 001's tip 2: ``attn.masked_fill(mask==0, 0).sum() == attn.sum()``."""
    return bool(attn.masked_fill(mask == 0, 0).sum() == attn.sum())


def _describe(rec: dict[str, Any]) -> tuple[str, Any, str]:
    """(result, line, message) of a run: its first error, or "runs"."""
    errs = [rec["error"]] + [c["error"] for c in rec["calls"]]
    first = next((e for e in errs if e), None)
    if first is None:
        return "runs", "", ""
    line = first["line"] if first["line"] is not None else ""
    return first["type"], line, first["message"]


def _failed(rec: dict[str, Any]) -> bool:
    return rec["error"] is not None or any(c["error"] for c in rec["calls"])


def run(
    seed: int = 0,
    *,
    plot: bool = True,
    listing_000: str | None = None,
    listing_001: str | None = None,
    fixes_001: Sequence[Edit] = FIXES_001,
    einsum_fn: Callable[..., tuple[Tensor, Tensor]] = einsum_attention,
    timeout: float = 120.0,
) -> Result:
    """Run both listings as printed and 001 corrected edit by edit; compare with attnlab.

    Wrong variants: ``listing_000``/``listing_001`` replace the printed listings (a listing
    that runs and matches flips the verdict), ``fixes_001`` the corrections (a wrong patch
    fails the agreement and tip checks), ``einsum_fn`` the einsum formulation.
    """
    src0 = listing_source("000") if listing_000 is None else listing_000
    src1 = listing_source("001") if listing_001 is None else listing_001
    with seeded(seed) as g:
        sa = SelfAttention(EMBED_DIM, HEADS).eval()
        mha = MultiHeadAttention(EMBED_DIM, HEADS).eval()
        with torch.no_grad():  # non-zero biases, so that their handling is compared too
            for p in (mha.qkv_proj.bias, mha.out_proj.bias):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
        x = torch.randn(BATCH, SEQ, EMBED_DIM, generator=g)
        causal = torch.tril(torch.ones(SEQ, SEQ))  # article 001's convention: 0 = blocked
        padding = torch.ones(BATCH, 1, 1, SEQ)
        padding[1, ..., SEQ - 3:] = 0  # the second sequence has 3 padding tokens
        t_view = torch.randn(BATCH, HEADS, SEQ, EMBED_DIM // HEADS, generator=g)
        wrong_axis = torch.softmax(torch.randn(BATCH, HEADS, SEQ, SEQ, generator=g), dim=-2)
    masks = {"none": None, "causal": causal, "padding": padding}
    with torch.no_grad():
        ref0, ref0_w = sa(x)
        ref1 = {k: mha(x, mask=None if m is None else m.bool(), need_weights=True)
                for k, m in masks.items()}

    tensors0 = {"x": x, **{f"w/{k}": v for k, v in sa.state_dict().items()}}
    tensors1 = {"x": x, "causal": causal, "padding": padding,
                **{f"w/{k}": v for k, v in mha.state_dict().items()}}
    calls1 = [["x", None], ["x", "causal"], ["x", "padding"]]
    l0, l1 = LISTINGS["000"], LISTINGS["001"]
    fn0, fn1 = l0.filename.removesuffix(".txt"), l1.filename.removesuffix(".txt")
    runs0 = [
        {"label": "000 main", "source": src0, "filename": fn0, "main": True},
        {"label": "000 driven", "source": src0, "filename": fn0, "cls": l0.cls,
         "args": [EMBED_DIM, HEADS], "state": "w/", "calls": [["x", None]]},
    ]
    steps = [apply_edits(src1, fixes_001[:i]) for i in range(len(fixes_001) + 1)]
    runs1 = [{"label": f"001 + {i} fixes", "source": s, "filename": fn1, "cls": l1.cls,
              "args": [EMBED_DIM, HEADS], "state": "w/", "calls": calls1}
             for i, s in enumerate(steps)]
    try:
        dedent = apply_edits(src1, DEDENT_001)
    except ValueError:
        dedent = None  # a replaced listing the other reading does not apply to
    if dedent is not None:
        runs1.append({"label": "001 dedented", "source": dedent, "filename": fn1,
                      "cls": l1.cls, "args": [EMBED_DIM, HEADS], "state": "w/",
                      "calls": calls1})
    (recs0, outs0), (recs1, outs1) = run_listings(
        [(runs0, tensors0), (runs1, tensors1)], seed=seed, timeout=timeout)

    # 000: its own test, then driven with attnlab's weights
    main0, driven0 = recs0
    err0_out = err0_w = math.inf
    if not _failed(driven0):
        err0_out = _err(outs0["1/0/out"], ref0)
        err0_w = _err(outs0["1/0/attn"], ref0_w)
    fails0 = _failed(main0) or _failed(driven0) or max(err0_out, err0_w) > TOLERANCE

    # 001: as printed, then each fix; the last step is the corrected listing
    def agreement(run_index: int) -> tuple[float, dict[str, Tensor]]:
        if _failed(recs1[run_index]):
            return math.inf, {}
        attn = {k: outs1[f"{run_index}/{j}/attn"] for j, k in enumerate(masks)}
        errs = [_err(outs1[f"{run_index}/{j}/out"], ref1[k][0]) for j, k in enumerate(masks)]
        return max(errs), attn

    err1_printed, _ = agreement(0)
    fails1 = not err1_printed <= TOLERANCE
    last = len(steps) - 1
    err1_fixed, attn1 = agreement(last)

    # the einsum formulation against attnlab's module, in fp64: the same function, not
    # merely the same result up to fp32 rounding
    mha64, x64 = copy.deepcopy(mha).double(), x.double()
    with torch.no_grad():
        err_einsum = max(
            _err(einsum_fn(mha64, x64, None if m is None else m.bool())[0],
                 mha64(x64, mask=None if m is None else m.bool())[0])
            for m in masks.values())

    # article 001's debugging tips on the corrected listing's weights and on attnlab's
    ours_w = {k: v[1] for k, v in ref1.items()}
    rows_ok = bool(attn1) and all(_rows_tip(a) for a in [*attn1.values(), *ours_w.values()])
    mask_ok = bool(attn1) and all(
        _mask_tip(w[k], masks[k]) for w in (attn1, ours_w) for k in ("causal", "padding"))
    with torch.no_grad():  # each tip must catch what it is meant to catch
        rows_catches = not _rows_tip(wrong_axis)
        mask_catches = not _mask_tip(ours_w["none"], causal)

    # 001's tip on contiguous(): view after transpose raises, reshape and contiguous work
    view_rows, view_raised, view_same = _contiguous_tip(t_view)

    failing = int(fails0) + int(fails1)
    checks = [
        check_ge("000 as printed: its own __main__ test runs (1 = yes)",
                 float(not _failed(main0)), 1, id="printed-000-main-runs"),
        check_le("000 as printed vs attnlab SelfAttention, same weights: max |output error|",
                 err0_out, TOLERANCE, id="printed-000-output"),
        check_le("000 as printed vs attnlab SelfAttention: max |weights error|",
                 err0_w, TOLERANCE, id="printed-000-weights"),
        check_le(f"001 with the {len(fixes_001)} fixes vs attnlab MultiHeadAttention: "
                 "max |output error| (no mask, causal, padding)", err1_fixed, TOLERANCE,
                 support=True, id="fixed-001-output"),
        check_le("einsum formulation vs attnlab MultiHeadAttention, fp64: max |output error|",
                 err_einsum, EINSUM_TOLERANCE, support=True, id="einsum"),
        check_ge("tip: torch.allclose(attn.sum(-1), 1) on the corrected 001 and attnlab "
                 "(1 = all True)", float(rows_ok), 1, support=True, id="tip-row-sums"),
        check_ge("tip: attn.masked_fill(mask==0, 0).sum() == attn.sum() on the corrected 001 "
                 "and attnlab, causal and padding masks (1 = all True)", float(mask_ok), 1,
                 support=True, id="tip-mask"),
        check_ge("the two tips flag weights normalised over the wrong axis and weights "
                 "computed without the mask (1 = both flagged)",
                 float(rows_catches and mask_catches), 1, support=True, id="tips-catch"),
        check_ge("tip: view after transpose raises RuntimeError (1 = raised)",
                 float(view_raised), 1, support=True, id="view-after-transpose-raises"),
        check_le("reshape vs contiguous().view after transpose: max |difference|",
                 view_same, 0.0, support=True, id="reshape-equals-contiguous"),
    ]

    rows: list[list[Any]] = []
    out_line = next((ln for ln in reversed(main0["stdout"].splitlines()) if ln.strip()), "")
    result, line, msg = _describe(main0)
    rows.append(["000 as printed, run as __main__ (its own test)", result, line,
                 msg or out_line])
    result, line, msg = _describe(driven0)
    rows.append(["000 as printed, driven: PureSelfAttention(512, 8) on (2, 10, 512)", result,
                 line, msg or f"max |out − attnlab SelfAttention| = {fmt_num(err0_out)}"])
    for i, rec in enumerate(recs1[: len(steps)]):
        result, line, msg = _describe(rec)
        if i == 0:
            label = "001 as printed: MultiHeadAttention(512, 8) on (2, 10, 512)"
        elif i == 1:
            label = f"001 + fix 1: {fixes_001[0].why}"
        else:
            label = f"001 + fixes 1–{i}, fix {i}: {fixes_001[i - 1].why}"
        if result == "runs":
            msg = (f"max |out − attnlab MultiHeadAttention| = {fmt_num(agreement(i)[0])} "
                   "(no mask, causal, padding)")
        rows.append([label, result, line, msg])
    if dedent is not None:
        rec = recs1[-1]
        result, line, msg = _describe(rec)
        rows.append(["001, other reading: masked_fill dedented (runs unconditionally), "
                     "forward(x) without a mask", result, line, msg])
    for i, e in enumerate(fixes_001, 1):
        before = apply_edits(src1, fixes_001[: i - 1])
        for d in diff_lines(before, apply_edits(before, [e])):
            rows.append([f"fix {i} diff", "", "", d])
    rows += view_rows

    fig = _figure(checks[1:5], attn1.get("causal")) if plot else None
    printed = _describe(recs1[0])
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity="listings (of 2) that fail as printed (an exception, or a result other "
                 "than attnlab's with the same weights)",
        quantity_zh="按原样运行失败的代码清单数（共 2 份；抛出异常，或与使用相同权重的 attnlab "
                    "结果不符）",
        measured=failing, expected=0, tolerance=0, relation="<=", checks=checks,
        table=(["run", "result", "line of the listing run", "message or measurement"], rows),
        figure=fig,
        caption=f"Each listing ran in a fresh interpreter (sys.executable); "
                f"001 as printed: {printed[0]} at line {printed[1]}. Sizes: E = {EMBED_DIM}, "
                f"{HEADS} heads, input ({BATCH}, {SEQ}, {EMBED_DIM}), fp32, attnlab's weights. "
                "Right: article 001's own recipe (matshow of attn[0, 0], cmap 'Reds') on the "
                "corrected listing's weights.",
        caption_zh="每份代码清单都在全新的解释器（sys.executable）中运行；"
                   f"001 按原样运行：第 {printed[1]} 行抛出 {printed[0]}。规模：E = {EMBED_DIM}，"
                   f"{HEADS} 个头，输入 ({BATCH}, {SEQ}, {EMBED_DIM})，fp32，使用 attnlab 的权重。"
                   "右图：按文章 001 自己的方法（对 attn[0, 0] 作 matshow，配色 'Reds'）"
                   "绘制修正后代码清单的注意力权重。",
        expect_holds=False,
        expect_why="Article 001's listing does not run as printed: its `if mask is not None:` "
                   "sits inside the comment above the masking line, whose indentation is then "
                   "unexpected; the listing also never sets self.n_heads and self.d_model and "
                   "never splits k and v into heads.",
        expect_why_zh="文章 001 的代码清单无法按原样运行：`if mask is not None:` 被写进了"
                      "掩码那一行上方的注释里，于是下一行的缩进成了意外缩进；此外它从未设置 "
                      "self.n_heads 和 self.d_model，也没有把 k 和 v 切分成多个头。",
    )


def _contiguous_tip(t: Tensor) -> tuple[list[list[Any]], bool, float]:
    """Article 001: after ``transpose``, ``view`` raises unless ``contiguous()`` comes first.

    ``t`` is (B, H, L, d) as after attention; step 6 of 001 transposes it to (B, L, H, d)
    and merges the heads. Also measured: the shapes where ``view`` works without it.
    """
    b, h, n, d = t.shape
    tt = t.transpose(1, 2)  # (B, L, H, d), not contiguous
    try:
        tt.view(b, n, h * d)
        raised, msg = False, "no error"
    except RuntimeError as exc:
        raised, msg = True, str(exc).split(".")[0]
    same = _err(tt.reshape(b, n, h * d), tt.contiguous().view(b, n, h * d))
    rows: list[list[Any]] = [
        [f"view after transpose, (B, H, L, d) = {tuple(t.shape)}",
         "RuntimeError" if raised else "runs", "", msg],
        ["reshape / contiguous().view after transpose", "runs", "",
         f"max |difference| = {fmt_num(same)}"],
    ]
    for label, shape in (("one head (H = 1)", (b, 1, n, d)), ("one token (L = 1)", (b, h, 1, d))):
        u = torch.zeros(shape).transpose(1, 2)
        try:
            u.view(shape[0], shape[2], shape[1] * shape[3])
            res = "runs"
        except RuntimeError:
            res = "RuntimeError"
        rows.append([f"view after transpose, {label}: {shape}", res, "", ""])
    return rows, raised, same


def _figure(agree_checks, attn):
    fig, (ax0, ax1) = new_figure(10, 3.8, ncols=2)
    labels = ["000 output", "000 weights", "001 fixed", "einsum fp64"]
    floor = 1e-18  # where an exact 0 is drawn on the log axis
    for i, c in enumerate(agree_checks):
        shown = c.value if math.isfinite(c.value) else 1.0
        ax0.bar(i, max(shown, floor), bottom=floor / 10,
                color="#3451b2" if c.passed else "#b3261e",
                label="max |error| vs attnlab" if i == 0 else None)
        tol = float(c.expected.split()[-1])
        ax0.hlines(tol, i - 0.4, i + 0.4, color="k", ls=":", lw=1.2,
                   label="tolerance" if i == 0 else None)
        text = "0" if c.value == 0 else (fmt_num(c.value) if math.isfinite(c.value)
                                         else "did not run")
        ax0.annotate(text, (i, max(shown, floor)), ha="center", va="bottom", fontsize=7)
    ax0.set_yscale("log")
    ax0.set_ylim(floor / 10, 1e-2)
    ax0.set_xticks(range(len(labels)), labels, fontsize=8)
    ax0.set_xlabel("listing run (same weights as attnlab)")
    ax0.set_ylabel("max |error| (an exact 0 at the floor)")
    ax0.set_title("Listings against attnlab's modules", fontsize=10)
    ax0.legend(fontsize=7, loc="upper left")
    ax0.grid(True, axis="y", alpha=0.3)
    if attn is not None:
        im = ax1.imshow(attn[0, 0].numpy(), cmap="Reds", vmin=0, interpolation="nearest")
        fig.colorbar(im, ax=ax1, label="attention weight")
        ax1.set_title("Corrected 001 listing: head 1, causal mask", fontsize=10)
    else:
        ax1.text(0.5, 0.5, "the corrected listing did not run", ha="center", va="center",
                 transform=ax1.transAxes)
        ax1.set_title("Corrected 001 listing", fontsize=10)
    ax1.set_xlabel("key position")
    ax1.set_ylabel("query position")
    return fig


def _fix_labels() -> dict[str, str]:
    """The table's labels of the fixes, as :func:`run` writes them."""
    out: dict[str, str] = {}
    for e in FIXES_001:
        out[f"{{}} + fix {{}}: {e.why}"] = f"{{}} + 修正 {{}}：{e.why_zh}"
        out[f"{{}} + fixes {{}}–{{}}, fix {{}}: {e.why}"] = (
            f"{{}} + 修正 {{}}–{{}}，修正 {{}}：{e.why_zh}")
    return out


def _code_lines() -> dict[str, str]:
    """The diff lines of the fixes are code: they read the same in Chinese."""
    out: dict[str, str] = {}
    src = listing_source("001")
    for i in range(len(FIXES_001)):
        before = apply_edits(src, FIXES_001[:i])
        for d in diff_lines(before, apply_edits(before, [FIXES_001[i]])):
            out[d] = d
    return out


ZH.update(_fix_labels())
ZH.update(_code_lines())
