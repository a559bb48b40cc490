"""article-code: the articles' PyTorch listings, run as printed, then minimally corrected.

Article 000 prints ``PureSelfAttention`` with its own ``__main__`` test; article 001 prints
a ``MultiHeadAttention`` (defaults ``d_model=512, n_heads=8``) with no test. attnlab ships
both listings verbatim (``listings/*.py.txt``: text, so that no tool imports, lints or
byte-compiles code that may not compile) and runs them in a fresh interpreter
(``sys.executable``, :func:`.article_listings.run_listings`), each in a namespace of its
own, never in attnlab's own process. A small driver there compiles the listing, runs its
``__main__`` block (000), builds the class with attnlab's weights
(``load_state_dict(strict=True)``), calls ``forward`` on a (2, 10, 512) input, with and
without a mask (article 001's convention: ``mask == 0`` is blocked), and records the first
exception with its line in the listing. It
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

Two more pieces of article 001's code run the same way, each beside a control that runs.
The fused projection its tip names, 「nn.Linear(3*d_model)」, is built at the listing's size
(:data:`.article_listings.FUSED_CALL_001`): it raises TypeError (``nn.Linear`` needs
``in_features`` and ``out_features``), where the listing's own ``nn.Linear(d_model,
3*d_model)`` builds. Its heat-map snippet (:data:`.article_listings.HEATMAP_001`) plots
``attn``, a local variable of the listing's ``forward``: run in a notebook after the
corrected listing and ``out = model(x)`` it raises NameError, and ``attn = model(x)`` (the
output taken for the weights) fails in ``matshow``; after a ``forward`` that returns its
weights too (:data:`.article_listings.RETURN_WEIGHTS_001`) and ``out, attn = model(x)`` the
same snippet runs and draws the first head's L × L map (matplotlib's Agg backend, in the
same fresh interpreter).

The agreements are identities of code (the same formula with the same weights: they hold by
construction, up to fp32 rounding), so each is shown beside a deliberately wrong variant
(:data:`WRONG`) run the same way, which the same tolerance must reject: 000 without the
1/√d scale (weights) or merging the heads without transposing back (output), the corrected
001 without the scale, the einsum formulation without it. The debugging tips run on real
bugs: the corrected 001 with its softmax over the wrong axis, and with its mask ignored;
each tip must flag its bug and pass the right listing. The headline's control is the same
count on the two wrong listings, both of which must count as failing.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnlab.nn import MultiHeadAttention

from ._common import check_ge, check_le, new_figure
from ._result import Check, Control, Result, fmt_num
from .article_listings import (
    DEDENT_001,
    FIXES_001,
    FUSED_CALL_001,
    HEATMAP_001,
    LISTING_CALL_001,
    LISTINGS,
    Edit,
    Listing,
    RunRecord,
    apply_edits,
    diff_lines,
    listing_source,
    run_listings,
)
from .article_runs import (
    BATCH,
    EMBED_DIM,
    HEADS,
    HEATMAP_CELLS,
    SEQ,
    WRONG,
    ContiguousTip,
    SnippetOutcome,
    TipOutcomes,
    WrongRun,
    contiguous_tip,
    describe_run,
    draw_inputs,
    max_error,
    plan_runs,
    run_failed,
    run_plan,
    snippet_outcome,
    tip_outcomes,
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
        "000 按原样与 attnlab SelfAttention 对比（相同权重）：输出最大绝对误差",
    "000 as printed vs attnlab SelfAttention: max |weights error|":
        "000 按原样与 attnlab SelfAttention 对比：注意力权重最大绝对误差",
    "{} with the {} fixes vs attnlab MultiHeadAttention: max |output error| (no mask, "
    "causal, padding)":
        "{} 经 {} 处修正后与 attnlab MultiHeadAttention 对比：输出最大绝对误差（无掩码、因果掩码、"
        "填充掩码）",
    "einsum formulation vs attnlab MultiHeadAttention, fp64: max |output error|":
        "einsum 写法与 attnlab MultiHeadAttention 对比（fp64）：输出最大绝对误差",
    "tip: torch.allclose(attn.sum(-1), 1) on the corrected 001 and attnlab (1 = all True)":
        "调试技巧：在修正后的 001 与 attnlab 上 torch.allclose(attn.sum(-1), 1)（1 = 全部为 True）",
    "tip: attn.masked_fill(mask==0, 0).sum() == attn.sum() on the corrected 001 and attnlab, "
    "causal and padding masks (1 = all True)":
        "调试技巧：在修正后的 001 与 attnlab 上，因果掩码和填充掩码下 "
        "attn.masked_fill(mask==0, 0).sum() == attn.sum()（1 = 全部为 True）",
    "the two tips flag the corrected 001 with its softmax over the wrong axis and with its "
    "mask ignored (1 = both flagged)":
        "两条调试技巧能分别发现修正后的 001 中沿错误维度做的 softmax 和被忽略的掩码"
        "（1 = 两者都被发现）",
    "tip: view after transpose raises RuntimeError (1 = raised)":
        "调试技巧：transpose 之后直接 view 抛出 RuntimeError（1 = 抛出）",
    "reshape vs contiguous().view after transpose: max |difference|":
        "transpose 之后 reshape 与 contiguous().view 的最大绝对差",
    "tip: the fused projection as printed, nn.Linear(3*d_model), raises TypeError (1 = raised)":
        "技巧：按原样构建融合投影 nn.Linear(3*d_model) 抛出 TypeError（1 = 抛出）",
    "heat-map snippet after the corrected 001 and out = model(x): raises (1 = raised)":
        "在修正后的 001 与 `out = model(x)` 之后运行热力图代码：抛出异常（1 = 抛出）",
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
    "max |out − attnlab| = {}, max |weights − attnlab| = {}":
        "与 attnlab 输出的最大绝对差 = {}，与 attnlab 权重的最大绝对差 = {}",
    "not applicable": "不适用",
    "NameError": "NameError（名称未定义）",
    "ValueError": "ValueError（值错误）",
    "{} tip as printed: qkv_proj = nn.Linear({}*d_model), d_model = {}":
        "{} 的技巧按原样：qkv_proj = nn.Linear({}*d_model)，d_model = {}",
    "{}'s listing call: qkv_proj = nn.Linear(d_model, {}*d_model), d_model = {}":
        "{} 代码清单中的写法：qkv_proj = nn.Linear(d_model, {}*d_model)，d_model = {}",
    "Linear.__init__() missing {} required positional argument: 'out_features'":
        "Linear.__init__() 缺少 {} 个必需的位置参数：'out_features'",
    "__init__() missing {} required positional argument: 'out_features'":
        "__init__() 缺少 {} 个必需的位置参数：'out_features'",
    "{} heat-map snippet after the corrected listing and out = model(x)":
        "{} 的热力图代码，在修正后的代码清单与 out = model(x) 之后运行",
    "{} heat-map snippet after the corrected listing and attn = model(x) (the output taken "
    "for the weights)":
        "{} 的热力图代码，在修正后的代码清单与 attn = model(x)（把输出当作权重）之后运行",
    "{} heat-map snippet, control: forward returns (output, attn), then out, attn = model(x)":
        "{} 的热力图代码，对照：forward 返回 (output, attn)，再执行 out, attn = model(x)",
    "name 'attn' is not defined": "名称 'attn' 未定义（name 'attn' is not defined）",
    "not enough values to unpack (expected {}, got {})":
        "没有足够的值可供解包（期望 {} 个，得到 {} 个）",
    "drew a {} × {} image": "画出了一幅 {} × {} 的图",
    "the snippet did not run: {}": "代码未能运行：{}",
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
           "einsum_attention", "WRONG", "run"]

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


@dataclass(frozen=True)
class ArticleCodeMeasurement:
    """Both listings as printed, 001 fix by fix, the wrong variants, the einsum formulation
    and article 001's tips, each against attnlab with the same weights."""

    src1: str  # 001's listing as run (printed, or a replacement)
    fixes_001: tuple[Edit, ...]
    fused_call_001: str
    main0: RunRecord  # 000's own test, run as __main__
    driven0: RunRecord  # 000 driven with attnlab's weights
    err0_out: float  # 000 driven vs attnlab SelfAttention: max |output error| (inf: failed)
    err0_w: float  # and max |weights error|
    steps: tuple[RunRecord, ...]  # 001 as printed, then after each fix
    step_errors: tuple[float, ...]  # each step vs attnlab MultiHeadAttention (inf: failed)
    attn1: dict[str, Tensor]  # the corrected 001's weights by mask (empty: it failed)
    dedent: RunRecord | None  # 001's other reading (None: not applicable)
    main_bug_runs: bool  # 000's own test with 7 heads runs
    wrong: dict[str, WrongRun]  # by key of WRONG
    einsum_err: float  # fp64, max over the masks
    einsum_err_wrong: float  # the same without the scale
    tips: TipOutcomes
    contiguous: ContiguousTip
    fused_call: RunRecord  # 001's tip's fused projection, as printed
    listing_call: RunRecord  # the listing's own call
    heat: dict[str, SnippetOutcome]  # by key of HEATMAP_CELLS

    @property
    def err1_fixed(self) -> float:
        return self.step_errors[-1]

    @property
    def failing(self) -> int:
        """Listings (of 2) that fail as printed: an exception or a result not attnlab's."""
        fails0 = (run_failed(self.main0) or run_failed(self.driven0)
                  or max(self.err0_out, self.err0_w) > TOLERANCE)
        fails1 = not self.step_errors[0] <= TOLERANCE
        return int(fails0) + int(fails1)

    @property
    def wrong_failing(self) -> int:
        """The same count on the two wrong listings (each without its scale)."""
        return sum(not max(w.out_err, w.w_err) <= TOLERANCE
                   for w in (self.wrong["000-no-scale"], self.wrong["001-no-scale"]))


def _einsum_errors(mha: MultiHeadAttention, x: Tensor, masks: dict[str, Tensor | None],
                   einsum_fn: Callable[..., tuple[Tensor, Tensor]]) -> tuple[float, float]:
    """The einsum formulation against attnlab's module in fp64 (the same function, not
    merely the same result up to fp32 rounding), and the same with the scale dropped."""
    mha64, x64 = copy.deepcopy(mha).double(), x.double()
    unscaled = copy.deepcopy(mha64)
    unscaled.scale = 1.0
    with torch.no_grad():
        scaled, dropped = (max(
            max_error(einsum_fn(m64, x64, None if m is None else m.bool())[0],
                      mha64(x64, mask=None if m is None else m.bool())[0])
            for m in masks.values()) for m64 in (mha64, unscaled))
    return scaled, dropped


def measure(
    seed: int = 0,
    *,
    listing_000: str | None = None,
    listing_001: str | None = None,
    fixes_001: Sequence[Edit] = FIXES_001,
    einsum_fn: Callable[..., tuple[Tensor, Tensor]] = einsum_attention,
    fused_call_001: str = FUSED_CALL_001,
    heatmap_001: str = HEATMAP_001,
    timeout: float = 120.0,
) -> ArticleCodeMeasurement:
    """Run every listing, fix, wrong variant and tip (arguments: see :func:`run`)."""
    src0 = listing_source("000") if listing_000 is None else listing_000
    src1 = listing_source("001") if listing_001 is None else listing_001
    inputs = draw_inputs(seed)
    plan = plan_runs(inputs, src0, src1, fixes_001, fused_call_001, heatmap_001)
    r = run_plan(inputs, plan, seed, timeout)
    recs2 = r.recs0[plan.first_tip:]
    steps = tuple(r.recs1[:plan.steps])
    step_errors = tuple(r.agreement(i)[0] for i in range(plan.steps))
    attn1 = r.agreement(plan.steps - 1)[1]
    err0_out = err0_w = math.inf
    if not run_failed(r.recs0[1]):
        err0_out = max_error(r.outs0["1/0/out"], r.ref0)
        err0_w = max_error(r.outs0["1/0/attn"], r.ref0_w)
    wrong = {key: r.wrong(plan.at[key]) for key in WRONG}
    bug_at = plan.at["000-main-bug"]
    tips = tip_outcomes(attn1, {k: v[1] for k, v in r.ref1.items()},
                 wrong["001-softmax-wrong-axis"].weights, wrong["001-mask-ignored"].weights,
                 inputs.masks)
    heat = {k: snippet_outcome(None if i is None else recs2[i])
            for k, i in plan.heat_at.items()}
    return ArticleCodeMeasurement(
        src1, tuple(fixes_001), fused_call_001, r.recs0[0], r.recs0[1], err0_out, err0_w,
        steps, step_errors, attn1,
        None if plan.dedent_at is None else r.recs1[plan.dedent_at],
        bug_at is not None and not run_failed(r.recs0[bug_at[1]]), wrong,
        *_einsum_errors(inputs.mha, inputs.x, inputs.masks, einsum_fn), tips,
        contiguous_tip(inputs.t_view), recs2[0], recs2[1], heat)


# -- the checks --------------------------------------------------------------------------------


def _ctl(key: str, value: float) -> Control:
    """The wrong variant ``key`` of :data:`WRONG` as a check's control."""
    e = WRONG[key]
    return Control(e.why, e.why_zh, value)


def headline_control(m: ArticleCodeMeasurement) -> Control:
    """The same count on the two wrong listings."""
    return Control("the same count on two wrong listings (000 and the corrected 001, "
                   "each without its scale)",
                   "对两份错误代码（000 与修正后的 001，各自去掉缩放）做同样的计数",
                   m.wrong_failing)


def _listing_checks(m: ArticleCodeMeasurement) -> list[Check]:
    """000 as printed, the corrected 001 and the einsum formulation against attnlab."""
    return [
        check_ge("000 as printed: its own __main__ test runs (1 = yes)",
                 float(not run_failed(m.main0)), 1, id="printed-000-main-runs",
                 control=Control("000's own test changed to 7 heads (512 is not divisible by "
                                 "7: its assert must stop it)",
                                 "把 000 自带测试改为 7 个头（512 不能被 7 整除，其 assert "
                                 "应当报错）", float(m.main_bug_runs))),
        check_le("000 as printed vs attnlab SelfAttention, same weights: max |output error|",
                 m.err0_out, TOLERANCE, id="printed-000-output", by_construction=True,
                 control=_ctl("000-no-transpose-back", m.wrong["000-no-transpose-back"].out_err)),
        check_le("000 as printed vs attnlab SelfAttention: max |weights error|",
                 m.err0_w, TOLERANCE, id="printed-000-weights", by_construction=True,
                 control=_ctl("000-no-scale", m.wrong["000-no-scale"].w_err)),
        check_le(f"001 with the {len(m.fixes_001)} fixes vs attnlab MultiHeadAttention: "
                 "max |output error| (no mask, causal, padding)", m.err1_fixed, TOLERANCE,
                 support=True, id="fixed-001-output", by_construction=True,
                 control=_ctl("001-no-scale", m.wrong["001-no-scale"].out_err)),
        check_le("einsum formulation vs attnlab MultiHeadAttention, fp64: max |output error|",
                 m.einsum_err, EINSUM_TOLERANCE, support=True, id="einsum", by_construction=True,
                 control=Control("the einsum formulation without the 1/√d_k scale",
                                 "去掉 1/√d_k 缩放的 einsum 写法", m.einsum_err_wrong)),
    ]


def _tip_checks(m: ArticleCodeMeasurement) -> list[Check]:
    """Article 001's tips: the two debugging tips, contiguous(), the fused projection and
    the heat-map snippet, each beside what it must tell apart."""
    tips, ct, heat = m.tips, m.contiguous, m.heat
    return [
        check_ge("tip: torch.allclose(attn.sum(-1), 1) on the corrected 001 and attnlab "
                 "(1 = all True)", float(tips.rows_ok), 1, support=True, id="tip-row-sums",
                 control=_ctl("001-softmax-wrong-axis", float(tips.rows_on_bug))),
        check_ge("tip: attn.masked_fill(mask==0, 0).sum() == attn.sum() on the corrected 001 "
                 "and attnlab, causal and padding masks (1 = all True)", float(tips.mask_ok), 1,
                 support=True, id="tip-mask",
                 control=_ctl("001-mask-ignored", float(tips.mask_on_bug))),
        check_ge("the two tips flag the corrected 001 with its softmax over the wrong axis and "
                 "with its mask ignored (1 = both flagged)", float(tips.catches), 1,
                 support=True, id="tips-catch",
                 control=Control("the two tips on the right listing (corrected 001): flagged",
                                 "两条技巧用于正确的代码（修正后的 001）：是否报错",
                                 float(tips.right_flagged))),
        check_ge("tip: view after transpose raises RuntimeError (1 = raised)",
                 float(ct.raised), 1, support=True, id="view-after-transpose-raises",
                 control=Control("view of the contiguous() copy", "对 contiguous() 副本调用 view",
                                 float(ct.contiguous_raised))),
        check_le("reshape vs contiguous().view after transpose: max |difference|",
                 ct.same, 0.0, support=True, id="reshape-equals-contiguous",
                 by_construction=True,
                 control=Control("the heads merged without the transpose",
                                 "不转置直接合并各头", ct.merge_wrong)),
        check_ge("tip: the fused projection as printed, nn.Linear(3*d_model), raises "
                 "TypeError (1 = raised)", float(_raised_type_error(m.fused_call)), 1,
                 support=True, id="fused-call-raises",
                 control=Control(f"the listing's own call, {LISTING_CALL_001}",
                                 f"代码清单自己的写法 {LISTING_CALL_001}",
                                 float(_raised_type_error(m.listing_call)))),
        check_ge("heat-map snippet after the corrected 001 and out = model(x): raises "
                 "(1 = raised)", float(heat["listing"].raised), 1, support=True,
                 id="heatmap-snippet-raises",
                 control=Control(f"the same snippet after a forward that returns its weights "
                                 f"too, then {HEATMAP_CELLS['control']}",
                                 f"同一段代码，`forward` 同时返回注意力权重，再执行 "
                                 f"`{HEATMAP_CELLS['control']}`",
                                 float(heat["control"].raised))),
    ]


def _raised_type_error(rec: RunRecord) -> bool:
    err = rec["error"]
    return err is not None and err["type"] == "TypeError"


def checks(m: ArticleCodeMeasurement) -> list[Check]:
    """The listings against attnlab, then article 001's tips, each beside its control."""
    return _listing_checks(m) + _tip_checks(m)


# -- the table ---------------------------------------------------------------------------------


def _step_label(i: int, fixes_001: Sequence[Edit]) -> str:
    if i == 0:
        return "001 as printed: MultiHeadAttention(512, 8) on (2, 10, 512)"
    if i == 1:
        return f"001 + fix 1: {fixes_001[0].why}"
    return f"001 + fixes 1–{i}, fix {i}: {fixes_001[i - 1].why}"


def _listing_rows(m: ArticleCodeMeasurement) -> list[list[Any]]:
    """000's runs, 001's step by step, its other reading and each fix's diff."""
    out_line = next((ln for ln in reversed(m.main0["stdout"].splitlines()) if ln.strip()), "")
    result, line, msg = describe_run(m.main0)
    rows: list[list[Any]] = [["000 as printed, run as __main__ (its own test)", result, line,
                              msg or out_line]]
    result, line, msg = describe_run(m.driven0)
    rows.append(["000 as printed, driven: PureSelfAttention(512, 8) on (2, 10, 512)", result,
                 line, msg or f"max |out − attnlab SelfAttention| = {fmt_num(m.err0_out)}"])
    for i, rec in enumerate(m.steps):
        result, line, msg = describe_run(rec)
        if result == "runs":
            msg = (f"max |out − attnlab MultiHeadAttention| = {fmt_num(m.step_errors[i])} "
                   "(no mask, causal, padding)")
        rows.append([_step_label(i, m.fixes_001), result, line, msg])
    if m.dedent is not None:
        result, line, msg = describe_run(m.dedent)
        rows.append(["001, other reading: masked_fill dedented (runs unconditionally), "
                     "forward(x) without a mask", result, line, msg])
    for i, e in enumerate(m.fixes_001, 1):
        before = apply_edits(m.src1, m.fixes_001[: i - 1])
        for d in diff_lines(before, apply_edits(before, [e])):
            rows.append([f"fix {i} diff", "", "", d])
    return rows


def _wrong_rows(m: ArticleCodeMeasurement) -> list[list[Any]]:
    """The controls, run the same way."""
    return [[f"control (wrong on purpose): {e.why}", w.result, "",
             f"max |out − attnlab| = {fmt_num(w.out_err)}, max |weights − attnlab| = "
             f"{fmt_num(w.w_err)}" if math.isfinite(w.out_err) else ""]
            for e, w in ((WRONG[key], m.wrong[key]) for key in WRONG)]


def _tip_rows(m: ArticleCodeMeasurement) -> list[list[Any]]:
    """contiguous(), the fused projection and the heat-map snippet."""
    ct = m.contiguous
    b, h, n, d = ct.shape
    rows: list[list[Any]] = [
        [f"view after transpose, (B, H, L, d) = {ct.shape}",
         "RuntimeError" if ct.raised else "runs", "", ct.message],
        ["reshape / contiguous().view after transpose", "runs", "",
         f"max |difference| = {fmt_num(ct.same)}"],
        [f"view after transpose, one head (H = 1): {(b, 1, n, d)}", ct.one_head, "", ""],
        [f"view after transpose, one token (L = 1): {(b, h, 1, d)}", ct.one_token, "", ""],
    ]
    for rec, label in ((m.fused_call, f"001 tip as printed: qkv_proj = {m.fused_call_001}, "
                                      f"d_model = {EMBED_DIM}"),
                       (m.listing_call, f"001's listing call: qkv_proj = {LISTING_CALL_001}, "
                                        f"d_model = {EMBED_DIM}")):
        rows.append([label, *describe_run(rec)])
    for key, label in (
            ("listing", "001 heat-map snippet after the corrected listing and out = model(x)"),
            ("output-as-attn", "001 heat-map snippet after the corrected listing and "
                               "attn = model(x) (the output taken for the weights)"),
            ("control", "001 heat-map snippet, control: forward returns (output, attn), then "
                        "out, attn = model(x)")):
        s = m.heat[key]
        rows.append([label, s.result, s.line, s.message])
    return rows


def table(m: ArticleCodeMeasurement) -> tuple[list[str], list[list[Any]]]:
    """One row per run of a listing (its first error, with its line), each fix's diff, the
    wrong variants and the tips."""
    return (["run", "result", "line of the listing run", "message or measurement"],
            _listing_rows(m) + _wrong_rows(m) + _tip_rows(m))


# -- the result --------------------------------------------------------------------------------


QUANTITY = ("listings (of 2) that fail as printed (an exception, or a result other than "
            "attnlab's with the same weights)")
QUANTITY_ZH = ("按原样运行失败的代码清单数（共 2 份；抛出异常，或与使用相同权重的 attnlab "
               "结果不符）")
EXPECT_WHY = ("Article 001's listing does not run as printed: its `if mask is not None:` "
              "sits inside the comment above the masking line, whose indentation is then "
              "unexpected; the listing also never sets self.n_heads and self.d_model and "
              "never splits k and v into heads.")
EXPECT_WHY_ZH = ("文章 001 的代码清单无法按原样运行：`if mask is not None:` 被写进了"
                 "掩码那一行上方的注释里，于是下一行的缩进成了意外缩进；此外它从未设置 "
                 "self.n_heads 和 self.d_model，也没有把 k 和 v 切分成多个头。")


def captions(m: ArticleCodeMeasurement) -> tuple[str, str]:
    """The caption in English and in Chinese."""
    printed = describe_run(m.steps[0])
    return (f"The listings ran in a fresh interpreter (sys.executable), each in a namespace "
            f"of its own; "
            f"001 as printed: {printed[0]} at line {printed[1]}. Sizes: E = {EMBED_DIM}, "
            f"{HEADS} heads, input ({BATCH}, {SEQ}, {EMBED_DIM}), fp32, attnlab's weights. "
            "Right: article 001's own recipe (matshow of attn[0, 0], cmap 'Reds') on the "
            "corrected listing's weights.",
            "代码清单在一个全新的解释器（sys.executable）中运行，每份都有自己的命名空间；"
            f"001 按原样运行：第 {printed[1]} 行抛出 {printed[0]}。规模：E = {EMBED_DIM}，"
            f"{HEADS} 个头，输入 ({BATCH}, {SEQ}, {EMBED_DIM})，fp32，使用 attnlab 的权重。"
            "右图：按文章 001 自己的方法（对 attn[0, 0] 作 matshow，配色 'Reds'）"
            "绘制修正后代码清单的注意力权重。")


def run(
    seed: int = 0,
    *,
    plot: bool = True,
    listing_000: str | None = None,
    listing_001: str | None = None,
    fixes_001: Sequence[Edit] = FIXES_001,
    einsum_fn: Callable[..., tuple[Tensor, Tensor]] = einsum_attention,
    fused_call_001: str = FUSED_CALL_001,
    heatmap_001: str = HEATMAP_001,
    timeout: float = 120.0,
) -> Result:
    """Run both listings as printed and 001 corrected edit by edit; compare with attnlab.

    Wrong variants: ``listing_000``/``listing_001`` replace the printed listings (a listing
    that runs and matches flips the verdict), ``fixes_001`` the corrections (a wrong patch
    fails the agreement and tip checks), ``einsum_fn`` the einsum formulation,
    ``fused_call_001`` the fused projection of 001's tip and ``heatmap_001`` its heat-map
    snippet (a call or a snippet that runs fails its check).
    """
    m = measure(seed, listing_000=listing_000, listing_001=listing_001, fixes_001=fixes_001,
                einsum_fn=einsum_fn, fused_call_001=fused_call_001, heatmap_001=heatmap_001,
                timeout=timeout)
    caption, caption_zh = captions(m)
    return Result(
        NAME, CLAIM, CLAIM_ZH, quantity=QUANTITY, quantity_zh=QUANTITY_ZH, measured=m.failing,
        expected=0, tolerance=0, relation="<=", checks=checks(m), control=headline_control(m),
        table=table(m), figure=figure(m) if plot else None, caption=caption,
        caption_zh=caption_zh, expect_holds=False, expect_why=EXPECT_WHY,
        expect_why_zh=EXPECT_WHY_ZH)


def figure(m: ArticleCodeMeasurement):
    """The agreements against attnlab on a log axis, and the corrected 001's weights."""
    agree_checks, attn = _listing_checks(m)[1:5], m.attn1.get("causal")
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


def _control_labels() -> dict[str, str]:
    """The table's labels of the wrong variants (:data:`WRONG`)."""
    return {f"control (wrong on purpose): {e.why}": f"对照（故意写错）：{e.why_zh}"
            for e in WRONG.values()}


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
ZH.update(_control_labels())
ZH.update(_code_lines())
