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

from attnlab.nn import MultiHeadAttention, SelfAttention

from ._common import check_ge, check_le, new_figure, seeded
from ._result import Check, Control, Result, fmt_num
from .article_listings import (
    DEDENT_001,
    FIXES_001,
    FUSED_CALL_001,
    HEATMAP_001,
    LISTING_CALL_001,
    LISTINGS,
    RETURN_WEIGHTS_001,
    Edit,
    Listing,
    apply_edits,
    diff_lines,
    fused_call_source,
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

#: Sizes of the driven runs: article 001's defaults and article 000's test input.
EMBED_DIM, HEADS, BATCH, SEQ = 512, 8, 2, 10
#: fp32 agreement between a listing and attnlab with the same weights.
TOLERANCE = 1e-6
#: fp64 agreement between :func:`einsum_attention` and attnlab's module.
EINSUM_TOLERANCE = 1e-12

#: The notebook cell run before article 001's heat-map snippet, by run: the corrected
#: listing's ``forward`` returns the output alone, so ``attn`` is either never defined or
#: the output itself; the control's ``forward`` returns ``(output, attn)``.
HEATMAP_CELLS: dict[str, str] = {
    "listing": "out = model(x)",
    "output-as-attn": "attn = model(x)",
    "control": "out, attn = model(x)",
}

#: The deliberately wrong variants the checks must reject (controls), by name: an edit of
#: 000 as printed, or of 001 once corrected.
WRONG: dict[str, Edit] = {
    "000-no-scale": Edit("        scores = scores / math.sqrt(self.head_dim)\n",
                         "        scores = scores\n", "000 without the 1/√d scale",
                         "000 去掉 1/√d 缩放"),
    "000-no-transpose-back": Edit(
        "        context = context.transpose(1, 2).contiguous().view(B, N, D)\n",
        "        context = context.contiguous().view(B, N, D)\n",
        "000 merging the heads without transposing back",
        "000 合并各头时没有先转置回来"),
    "001-no-scale": Edit("k) / self.d_k**0.5\n", "k)\n", "corrected 001 without the scale",
                         "修正后的 001 去掉缩放"),
    "001-softmax-wrong-axis": Edit("        attn = F.softmax(scores, dim=-1)\n",
                                   "        attn = F.softmax(scores, dim=-2)\n",
                                   "corrected 001 with the softmax over the query axis",
                                   "修正后的 001 沿查询维度做 softmax"),
    "001-mask-ignored": Edit(
        "            scores = scores.masked_fill(mask == 0, float('-inf'))\n",
        "            scores = scores\n", "corrected 001 ignoring the mask",
        "修正后的 001 忽略掩码"),
}


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


def _heatmap_harness(snippet: str, cell: str) -> str:
    """Source run after a listing in its fresh interpreter: a notebook that holds the
    listing's names, ``model`` (its class at article 001's size) and ``x``, runs ``cell``
    and then ``snippet`` (matplotlib's Agg backend). ``measure`` returns the snippet's first
    error (type, message, line in the snippet) or the shape of the image it drew."""
    return f'''
def measure(tensors):
    import traceback
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    notebook = dict(globals())  # the listing's cell: its imports and its class
    notebook["model"] = {LISTINGS["001"].cls}({EMBED_DIM}, {HEADS})
    notebook["x"] = tensors["x"]
    try:
        exec(compile({cell!r}, "<cell>", "exec"), notebook)
        exec(compile({snippet!r}, "<snippet>", "exec"), notebook)
    except Exception as exc:
        line = None
        for frame in traceback.extract_tb(exc.__traceback__):
            if frame.filename == "<snippet>":
                line = frame.lineno
        text = str(exc).strip()
        plt.close("all")
        return {{"type": type(exc).__name__, "line": line,
                 "message": text.splitlines()[0] if text else "", "shape": None}}
    images = [im for ax in plt.gcf().axes for im in ax.images]
    shape = list(images[0].get_array().shape) if images else None
    plt.close("all")
    return {{"type": None, "line": None, "message": "", "shape": shape}}
'''


def _err(a: Tensor, b: Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def _rows_tip(attn: Tensor) -> bool:
    """Article 001's tip 1: ``torch.allclose(attn.sum(dim=-1), torch.ones_like(...))``."""
    s = attn.sum(dim=-1)
    return bool(torch.allclose(s, torch.ones_like(s)))


def _mask_tip(attn: Tensor, mask: Tensor) -> bool:
    """Article 001's tip 2: ``attn.masked_fill(mask==0, 0).sum() == attn.sum()``."""
    return bool(attn.masked_fill(mask == 0, 0).sum() == attn.sum())


def _tip_passes(tip: Callable[..., bool], weights: Sequence[dict[str, Tensor]],
                masks: dict[str, Tensor | None], keys: Sequence[str]) -> bool:
    """``tip`` holds on every ``weights[k]`` for k in ``keys`` (the row-sum tip takes the
    weights alone, the mask tip also the mask); False when some weights are missing (a run
    that failed)."""
    if not all(w and all(k in w for k in keys) for w in weights):
        return False
    with torch.no_grad():
        return all(tip(w[k]) if tip is _rows_tip else tip(w[k], masks[k])
                   for w in weights for k in keys)


def _edited(source: str, edit: Edit) -> str | None:
    """``source`` with ``edit``, or None when its text is not in ``source`` exactly once."""
    try:
        return apply_edits(source, [edit])
    except ValueError:
        return None


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


# -- what runs where ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    """What every run shares, drawn from the seed: attnlab's modules (MultiHeadAttention
    with non-zero biases, so that their handling is compared too), the input, article 001's
    masks and a tensor for its tip on ``contiguous()``."""

    sa: SelfAttention
    mha: MultiHeadAttention
    x: Tensor  # (B, L, E)
    causal: Tensor  # (L, L), article 001's convention: 0 = blocked
    padding: Tensor  # (B, 1, 1, L), the second sequence has 3 padding tokens
    t_view: Tensor  # (B, H, L, d), as after attention

    @property
    def masks(self) -> dict[str, Tensor | None]:
        return {"none": None, "causal": self.causal, "padding": self.padding}


def draw_inputs(seed: int) -> Inputs:
    """The modules and tensors of :class:`Inputs`, in the order the seed draws them."""
    with seeded(seed) as g:
        sa = SelfAttention(EMBED_DIM, HEADS).eval()
        mha = MultiHeadAttention(EMBED_DIM, HEADS).eval()
        with torch.no_grad():
            for p in (mha.qkv_proj.bias, mha.out_proj.bias):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
        x = torch.randn(BATCH, SEQ, EMBED_DIM, generator=g)
        causal = torch.tril(torch.ones(SEQ, SEQ))
        padding = torch.ones(BATCH, 1, 1, SEQ)
        padding[1, ..., SEQ - 3:] = 0
        t_view = torch.randn(BATCH, HEADS, SEQ, EMBED_DIM // HEADS, generator=g)
    return Inputs(sa, mha, x, causal, padding, t_view)


@dataclass(frozen=True)
class RunPlan:
    """The runs of each fresh interpreter (:func:`.article_listings.run_listings`) and where
    each one's record lands."""

    jobs: list[tuple[list[dict[str, Any]], dict[str, Tensor]]]  # 000's (then the tips'), 001's
    steps: int  # 001's first runs: as printed, then after each fix
    at: dict[str, tuple[int, int] | None]  # each wrong variant's (job, run); None: not applicable
    dedent_at: int | None  # 001's other reading, in its job; None: not applicable
    first_tip: int  # where the tips' runs begin in 000's job
    heat_at: dict[str, int | None]  # each heat-map run among the tips' runs


_CALLS_000 = [["x", None]]
_CALLS_001 = [["x", None], ["x", "causal"], ["x", "padding"]]


def _driven(label: str, source: str, filename: str, cls: str,
            calls: list[list[str | None]]) -> dict[str, Any]:
    """A run that builds ``cls`` at article 001's size with attnlab's weights and calls it."""
    return {"label": label, "source": source, "filename": filename, "cls": cls,
            "args": [EMBED_DIM, HEADS], "state": "w/", "calls": calls}


def _tip_runs(corrected: str, fused_call_001: str, heatmap_001: str
              ) -> tuple[list[dict[str, Any]], dict[str, int | None]]:
    """001's tip on the fused projection and its heat-map snippet, with their controls; and
    where each heat-map run lands (None: a listing the control's edit does not apply to)."""
    fn_tip, fn1 = "001_fused_qkv_tip.py", LISTINGS["001"].filename.removesuffix(".txt")
    runs: list[dict[str, Any]] = [
        {"label": "001 fused call", "source": fused_call_source(fused_call_001),
         "filename": fn_tip},
        {"label": "001 listing call", "source": fused_call_source(LISTING_CALL_001),
         "filename": fn_tip},
    ]
    returns_weights = _edited(corrected, RETURN_WEIGHTS_001)
    heat_at: dict[str, int | None] = {}
    for key, cell in HEATMAP_CELLS.items():
        source = returns_weights if key == "control" else corrected
        heat_at[key] = None if source is None else len(runs)
        if source is not None:
            runs.append({"label": f"001 heat map, {key}", "source": source, "filename": fn1,
                         "harness": _heatmap_harness(heatmap_001, cell), "measure": "measure"})
    return runs, heat_at


def plan_runs(inputs: Inputs, src0: str, src1: str, fixes_001: Sequence[Edit],
              fused_call_001: str, heatmap_001: str) -> RunPlan:
    """000 run as ``__main__`` and driven, 001 as printed and after each fix, the wrong
    variants (:data:`WRONG`, each at a known run), 001's other reading, then the tips."""
    l0, l1 = LISTINGS["000"], LISTINGS["001"]
    fn0, fn1 = l0.filename.removesuffix(".txt"), l1.filename.removesuffix(".txt")
    runs0 = [{"label": "000 main", "source": src0, "filename": fn0, "main": True},
             _driven("000 driven", src0, fn0, l0.cls, _CALLS_000)]
    steps = [apply_edits(src1, fixes_001[:i]) for i in range(len(fixes_001) + 1)]
    runs1 = [_driven(f"001 + {i} fixes", s, fn1, l1.cls, _CALLS_001)
             for i, s in enumerate(steps)]
    # None: not applicable to a replaced listing (its control then counts as failing the
    # test, as a wrong one must)
    at: dict[str, tuple[int, int] | None] = {}
    main_bug = _edited(src0, Edit("    num_heads = 8\n", "    num_heads = 7\n",
                                  "000's own test with 7 heads"))
    at["000-main-bug"] = None if main_bug is None else (0, len(runs0))
    if main_bug is not None:
        runs0.append({"label": "000 main, 7 heads", "source": main_bug, "filename": fn0,
                      "main": True})
    for key in WRONG:
        job_index = 0 if key.startswith("000") else 1
        job, wrong = (runs0, runs1)[job_index], _edited((src0, steps[-1])[job_index], WRONG[key])
        at[key] = None if wrong is None else (job_index, len(job))
        if wrong is not None:
            job.append(_driven(key, wrong, (fn0, fn1)[job_index], (l0, l1)[job_index].cls,
                               (_CALLS_000, _CALLS_001)[job_index]))
    try:
        dedent = apply_edits(src1, DEDENT_001)
    except ValueError:
        dedent = None  # a replaced listing the other reading does not apply to
    dedent_at = None if dedent is None else len(runs1)
    if dedent is not None:
        runs1.append(_driven("001 dedented", dedent, fn1, l1.cls, _CALLS_001))
    runs2, heat_at = _tip_runs(steps[-1], fused_call_001, heatmap_001)
    tensors0 = {"x": inputs.x, **{f"w/{k}": v for k, v in inputs.sa.state_dict().items()}}
    tensors1 = {"x": inputs.x, "causal": inputs.causal, "padding": inputs.padding,
                **{f"w/{k}": v for k, v in inputs.mha.state_dict().items()}}
    # the tips run in 000's interpreter, the shorter job (its tensors hold the same x)
    return RunPlan([(runs0 + runs2, tensors0), (runs1, tensors1)], len(steps), at, dedent_at,
                   len(runs0), heat_at)


# -- what the runs gave ------------------------------------------------------------------------


@dataclass(frozen=True)
class WrongRun:
    """A deliberately wrong variant (:data:`WRONG`), run the same way, against attnlab."""

    result: str  # "not applicable", "runs" or its first error's type
    out_err: float  # max |output − attnlab|; inf when not applicable or it did not run
    w_err: float  # max |weights − attnlab|; inf likewise
    weights: dict[str, Tensor]  # by mask; empty when it did not run


@dataclass(frozen=True)
class Records:
    """The runs' records and tensors, and attnlab's outputs on the same inputs."""

    recs0: list[dict[str, Any]]
    outs0: dict[str, Tensor]
    recs1: list[dict[str, Any]]
    outs1: dict[str, Tensor]
    ref0: Tensor  # attnlab SelfAttention's output
    ref0_w: Tensor  # and its weights
    ref1: dict[str, tuple[Tensor, Tensor]]  # MultiHeadAttention's (output, weights) by mask

    def agreement(self, i: int) -> tuple[float, dict[str, Tensor]]:
        """001's run ``i`` against attnlab: max |output error| over the masks, and its
        weights by mask (inf and none when it failed)."""
        if _failed(self.recs1[i]):
            return math.inf, {}
        attn = {k: self.outs1[f"{i}/{j}/attn"] for j, k in enumerate(self.ref1)}
        errs = [_err(self.outs1[f"{i}/{j}/out"], self.ref1[k][0])
                for j, k in enumerate(self.ref1)]
        return max(errs), attn

    def wrong(self, where: tuple[int, int] | None) -> WrongRun:
        """The wrong variant run at ``where`` (:attr:`RunPlan.at`) against attnlab."""
        if where is None:
            return WrongRun("not applicable", math.inf, math.inf, {})
        job, i = where
        result = _describe((self.recs0, self.recs1)[job][i])[0]
        if job == 0:
            if _failed(self.recs0[i]):
                return WrongRun(result, math.inf, math.inf, {})
            return WrongRun(result, _err(self.outs0[f"{i}/0/out"], self.ref0),
                            _err(self.outs0[f"{i}/0/attn"], self.ref0_w),
                            {"none": self.outs0[f"{i}/0/attn"]})
        out_err, attn = self.agreement(i)
        w_err = max((_err(attn[k], self.ref1[k][1]) for k in attn), default=math.inf)
        return WrongRun(result, out_err, w_err, attn)


def run_plan(inputs: Inputs, plan: RunPlan, seed: int, timeout: float) -> Records:
    """attnlab's outputs on the inputs, then every run of ``plan``."""
    with torch.no_grad():
        ref0, ref0_w = inputs.sa(inputs.x)
        ref1 = {k: inputs.mha(inputs.x, mask=None if m is None else m.bool(), need_weights=True)
                for k, m in inputs.masks.items()}
    (recs0, outs0), (recs1, outs1) = run_listings(plan.jobs, seed=seed, timeout=timeout)
    return Records(recs0, outs0, recs1, outs1, ref0, ref0_w, ref1)


@dataclass(frozen=True)
class TipOutcomes:
    """Article 001's two debugging tips, on the right weights and on real bugs."""

    rows_ok: bool  # tip 1 holds on the corrected 001 and attnlab, every mask
    mask_ok: bool  # tip 2 holds on them, causal and padding masks
    rows_on_bug: bool  # tip 1 holds on 001 with its softmax over the wrong axis
    mask_on_bug: bool  # tip 2 holds on 001 with its mask ignored
    bugs_ran: bool  # both bugs gave weights
    right_ran: bool  # the corrected 001 gave weights

    @property
    def catches(self) -> bool:
        """Each tip flags its bug."""
        return self.bugs_ran and not self.rows_on_bug and not self.mask_on_bug

    @property
    def right_flagged(self) -> bool:
        """The control: the tips flag the right listing."""
        return self.right_ran and not (self.rows_ok and self.mask_ok)


def _tips(attn1: dict[str, Tensor], ours_w: dict[str, Tensor], w_axis: dict[str, Tensor],
          w_mask: dict[str, Tensor], masks: dict[str, Tensor | None]) -> TipOutcomes:
    """The tips on the corrected listing's weights and attnlab's, then on each real bug."""
    every, masked = ("none", "causal", "padding"), ("causal", "padding")
    return TipOutcomes(_tip_passes(_rows_tip, [attn1, ours_w], masks, every),
                       _tip_passes(_mask_tip, [attn1, ours_w], masks, masked),
                       _tip_passes(_rows_tip, [w_axis], masks, every),
                       _tip_passes(_mask_tip, [w_mask], masks, masked),
                       bool(w_axis) and bool(w_mask), bool(attn1))


@dataclass(frozen=True)
class ContiguousTip:
    """Article 001's tip on ``contiguous()``: after ``transpose``, ``view`` raises unless
    ``contiguous()`` comes first; also the shapes where ``view`` works without it."""

    shape: tuple[int, ...]  # (B, H, L, d), as after attention
    raised: bool  # view after transpose raised RuntimeError
    message: str  # its message's first sentence, or "no error"
    same: float  # max |reshape − contiguous().view|
    one_head: str  # view after transpose with H = 1: "runs" or "RuntimeError"
    one_token: str  # the same with L = 1
    contiguous_raised: bool  # control: view of the contiguous() copy raised
    merge_wrong: float  # control: the heads merged without the transpose, max |difference|


def _view_result(shape: tuple[int, int, int, int]) -> str:
    """Whether ``view`` after ``transpose(1, 2)`` of a tensor of ``shape`` runs."""
    u = torch.zeros(shape).transpose(1, 2)
    try:
        u.view(shape[0], shape[2], shape[1] * shape[3])
    except RuntimeError:
        return "RuntimeError"
    return "runs"


def contiguous_tip(t: Tensor) -> ContiguousTip:
    """``t`` is (B, H, L, d) as after attention; step 6 of 001 transposes it to
    (B, L, H, d) and merges the heads."""
    b, h, n, d = t.shape
    tt = t.transpose(1, 2)  # (B, L, H, d), not contiguous
    try:
        tt.view(b, n, h * d)
        raised, msg = False, "no error"
    except RuntimeError as exc:
        raised, msg = True, str(exc).split(".")[0]
    same = _err(tt.reshape(b, n, h * d), tt.contiguous().view(b, n, h * d))
    try:  # control: view of the contiguous copy raises nothing
        tt.contiguous().view(b, n, h * d)
        contiguous_raised = False
    except RuntimeError:
        contiguous_raised = True
    # control: merging the heads without the transpose is not the same tensor
    merge_wrong = _err(t.reshape(b, n, h * d), tt.contiguous().view(b, n, h * d))
    return ContiguousTip(tuple(t.shape), raised, msg, same, _view_result((b, 1, n, d)),
                         _view_result((b, h, 1, d)), contiguous_raised, merge_wrong)


@dataclass(frozen=True)
class SnippetOutcome:
    """A heat-map run: whether it raised, and its table cells."""

    raised: bool
    result: str  # "runs", "not applicable" or the error's type
    line: Any  # the line in the snippet, or ""
    message: str


def _snippet_outcome(rec: dict[str, Any] | None) -> SnippetOutcome:
    """A heat-map run's outcome: the listing's own error counts as the snippet not running
    (it never got there), reported as such."""
    if rec is None:
        return SnippetOutcome(True, "not applicable", "", "")
    if rec["error"] is not None:
        err = rec["error"]
        return SnippetOutcome(True, err["type"], "", f"the snippet did not run: {err['message']}")
    v = rec.get("value") or {}
    if v.get("type"):
        return SnippetOutcome(True, v["type"], v["line"] if v["line"] is not None else "",
                              v["message"])
    shape = v.get("shape")
    return SnippetOutcome(False, "runs", "", (f"drew a {shape[0]} × {shape[1]} image"
                                              if shape and len(shape) == 2 else ""))


# -- the measurement ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ArticleCodeMeasurement:
    """Both listings as printed, 001 fix by fix, the wrong variants, the einsum formulation
    and article 001's tips, each against attnlab with the same weights."""

    src1: str  # 001's listing as run (printed, or a replacement)
    fixes_001: tuple[Edit, ...]
    fused_call_001: str
    main0: dict[str, Any]  # 000's own test, run as __main__
    driven0: dict[str, Any]  # 000 driven with attnlab's weights
    err0_out: float  # 000 driven vs attnlab SelfAttention: max |output error| (inf: failed)
    err0_w: float  # and max |weights error|
    steps: tuple[dict[str, Any], ...]  # 001 as printed, then after each fix
    step_errors: tuple[float, ...]  # each step vs attnlab MultiHeadAttention (inf: failed)
    attn1: dict[str, Tensor]  # the corrected 001's weights by mask (empty: it failed)
    dedent: dict[str, Any] | None  # 001's other reading (None: not applicable)
    main_bug_runs: bool  # 000's own test with 7 heads runs
    wrong: dict[str, WrongRun]  # by key of WRONG
    einsum_err: float  # fp64, max over the masks
    einsum_err_wrong: float  # the same without the scale
    tips: TipOutcomes
    contiguous: ContiguousTip
    fused_call: dict[str, Any]  # 001's tip's fused projection, as printed
    listing_call: dict[str, Any]  # the listing's own call
    heat: dict[str, SnippetOutcome]  # by key of HEATMAP_CELLS

    @property
    def err1_fixed(self) -> float:
        return self.step_errors[-1]

    @property
    def failing(self) -> int:
        """Listings (of 2) that fail as printed: an exception or a result not attnlab's."""
        fails0 = (_failed(self.main0) or _failed(self.driven0)
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
        return tuple(max(
            _err(einsum_fn(m64, x64, None if m is None else m.bool())[0],
                 mha64(x64, mask=None if m is None else m.bool())[0])
            for m in masks.values()) for m64 in (mha64, unscaled))


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
    if not _failed(r.recs0[1]):
        err0_out, err0_w = _err(r.outs0["1/0/out"], r.ref0), _err(r.outs0["1/0/attn"], r.ref0_w)
    wrong = {key: r.wrong(plan.at[key]) for key in WRONG}
    bug_at = plan.at["000-main-bug"]
    tips = _tips(attn1, {k: v[1] for k, v in r.ref1.items()},
                 wrong["001-softmax-wrong-axis"].weights, wrong["001-mask-ignored"].weights,
                 inputs.masks)
    heat = {k: _snippet_outcome(None if i is None else recs2[i])
            for k, i in plan.heat_at.items()}
    return ArticleCodeMeasurement(
        src1, tuple(fixes_001), fused_call_001, r.recs0[0], r.recs0[1], err0_out, err0_w,
        steps, step_errors, attn1,
        None if plan.dedent_at is None else r.recs1[plan.dedent_at],
        bug_at is not None and not _failed(r.recs0[bug_at[1]]), wrong,
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
                 float(not _failed(m.main0)), 1, id="printed-000-main-runs",
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


def _raised_type_error(rec: dict[str, Any]) -> bool:
    return (rec["error"] or {}).get("type") == "TypeError"


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
    result, line, msg = _describe(m.main0)
    rows: list[list[Any]] = [["000 as printed, run as __main__ (its own test)", result, line,
                              msg or out_line]]
    result, line, msg = _describe(m.driven0)
    rows.append(["000 as printed, driven: PureSelfAttention(512, 8) on (2, 10, 512)", result,
                 line, msg or f"max |out − attnlab SelfAttention| = {fmt_num(m.err0_out)}"])
    for i, rec in enumerate(m.steps):
        result, line, msg = _describe(rec)
        if result == "runs":
            msg = (f"max |out − attnlab MultiHeadAttention| = {fmt_num(m.step_errors[i])} "
                   "(no mask, causal, padding)")
        rows.append([_step_label(i, m.fixes_001), result, line, msg])
    if m.dedent is not None:
        result, line, msg = _describe(m.dedent)
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
        rows.append([label, *_describe(rec)])
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
    printed = _describe(m.steps[0])
    return (f"Each listing ran in a fresh interpreter (sys.executable); "
            f"001 as printed: {printed[0]} at line {printed[1]}. Sizes: E = {EMBED_DIM}, "
            f"{HEADS} heads, input ({BATCH}, {SEQ}, {EMBED_DIM}), fp32, attnlab's weights. "
            "Right: article 001's own recipe (matshow of attn[0, 0], cmap 'Reds') on the "
            "corrected listing's weights.",
            "每份代码清单都在全新的解释器（sys.executable）中运行；"
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
