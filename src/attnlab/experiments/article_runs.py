"""Running the articles' listings for :mod:`.article_code`: the sizes and inputs of the
driven runs, the deliberately wrong variants (:data:`WRONG`), the plan of every run (each
listing as printed and step by step corrected, the wrong variants, the tips, article 001's
fused call and heat-map snippet) and what each run recorded, read back as typed records.

The listings run in a fresh interpreter (:func:`.article_listings.run_listings`); this
module turns their records into :class:`Records`, :class:`TipOutcomes`,
:class:`ContiguousTip` and :class:`SnippetOutcome`, which :func:`.article_code.measure`
gathers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypedDict

import torch
from torch import Tensor

from attnlab.nn import MultiHeadAttention, SelfAttention

from ._common import seeded
from .article_listings import (
    DEDENT_001,
    LISTING_CALL_001,
    LISTINGS,
    RETURN_WEIGHTS_001,
    Edit,
    ListingRun,
    RunRecord,
    apply_edits,
    fused_call_source,
    run_listings,
)

#: Sizes of the driven runs: article 001's defaults and article 000's test input.
EMBED_DIM, HEADS, BATCH, SEQ = 512, 8, 2, 10

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



class HeatmapValue(TypedDict):
    """What the heat-map harness's ``measure`` returns (:func:`_heatmap_harness`)."""

    type: str | None  # the snippet's first error's class name (None: it ran)
    line: int | None  # that error's line in the snippet
    message: str  # its first line
    shape: list[int] | None  # the shape of the image it drew (None: none)


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


def max_error(a: Tensor, b: Tensor) -> float:
    """The largest absolute difference of two tensors, in float64."""
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


def describe_run(rec: RunRecord) -> tuple[str, int | str, str]:
    """(result, line, message) of a run: its first error, or "runs"."""
    errs = [rec["error"]] + [c["error"] for c in rec["calls"]]
    first = next((e for e in errs if e), None)
    if first is None:
        return "runs", "", ""
    line = first["line"] if first["line"] is not None else ""
    return first["type"], line, first["message"]


def run_failed(rec: RunRecord) -> bool:
    """Whether the run or one of its calls raised."""
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
    """The jobs of the listings' interpreter (:func:`.article_listings.run_listings`) and
    where each run's record lands."""

    jobs: list[tuple[list[ListingRun], dict[str, Tensor]]]  # 000's (then the tips'), 001's
    steps: int  # 001's first runs: as printed, then after each fix
    at: dict[str, tuple[int, int] | None]  # each wrong variant's (job, run); None: not applicable
    dedent_at: int | None  # 001's other reading, in its job; None: not applicable
    first_tip: int  # where the tips' runs begin in 000's job
    heat_at: dict[str, int | None]  # each heat-map run among the tips' runs


_CALLS_000: list[list[str | None]] = [["x", None]]
_CALLS_001: list[list[str | None]] = [["x", None], ["x", "causal"], ["x", "padding"]]


def _driven(label: str, source: str, filename: str, cls: str,
            calls: list[list[str | None]]) -> ListingRun:
    """A run that builds ``cls`` at article 001's size with attnlab's weights and calls it."""
    return {"label": label, "source": source, "filename": filename, "cls": cls,
            "args": [EMBED_DIM, HEADS], "state": "w/", "calls": calls}


def _tip_runs(corrected: str, fused_call_001: str, heatmap_001: str
              ) -> tuple[list[ListingRun], dict[str, int | None]]:
    """001's tip on the fused projection and its heat-map snippet, with their controls; and
    where each heat-map run lands (None: a listing the control's edit does not apply to)."""
    fn_tip, fn1 = "001_fused_qkv_tip.py", LISTINGS["001"].filename.removesuffix(".txt")
    runs: list[ListingRun] = [
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
    runs0: list[ListingRun] = [
        {"label": "000 main", "source": src0, "filename": fn0, "main": True},
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

    recs0: list[RunRecord]
    outs0: dict[str, Tensor]
    recs1: list[RunRecord]
    outs1: dict[str, Tensor]
    ref0: Tensor  # attnlab SelfAttention's output
    ref0_w: Tensor  # and its weights
    ref1: dict[str, tuple[Tensor, Tensor]]  # MultiHeadAttention's (output, weights) by mask

    def agreement(self, i: int) -> tuple[float, dict[str, Tensor]]:
        """001's run ``i`` against attnlab: max |output error| over the masks, and its
        weights by mask (inf and none when it failed)."""
        if run_failed(self.recs1[i]):
            return math.inf, {}
        attn = {k: self.outs1[f"{i}/{j}/attn"] for j, k in enumerate(self.ref1)}
        errs = [max_error(self.outs1[f"{i}/{j}/out"], self.ref1[k][0])
                for j, k in enumerate(self.ref1)]
        return max(errs), attn

    def wrong(self, where: tuple[int, int] | None) -> WrongRun:
        """The wrong variant run at ``where`` (:attr:`RunPlan.at`) against attnlab."""
        if where is None:
            return WrongRun("not applicable", math.inf, math.inf, {})
        job, i = where
        result = describe_run((self.recs0, self.recs1)[job][i])[0]
        if job == 0:
            if run_failed(self.recs0[i]):
                return WrongRun(result, math.inf, math.inf, {})
            return WrongRun(result, max_error(self.outs0[f"{i}/0/out"], self.ref0),
                            max_error(self.outs0[f"{i}/0/attn"], self.ref0_w),
                            {"none": self.outs0[f"{i}/0/attn"]})
        out_err, attn = self.agreement(i)
        w_err = max((max_error(attn[k], self.ref1[k][1]) for k in attn), default=math.inf)
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


def tip_outcomes(attn1: dict[str, Tensor], ours_w: dict[str, Tensor], w_axis: dict[str, Tensor],
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
    same = max_error(tt.reshape(b, n, h * d), tt.contiguous().view(b, n, h * d))
    try:  # control: view of the contiguous copy raises nothing
        tt.contiguous().view(b, n, h * d)
        contiguous_raised = False
    except RuntimeError:
        contiguous_raised = True
    # control: merging the heads without the transpose is not the same tensor
    merge_wrong = max_error(t.reshape(b, n, h * d), tt.contiguous().view(b, n, h * d))
    return ContiguousTip(tuple(t.shape), raised, msg, same, _view_result((b, 1, n, d)),
                         _view_result((b, h, 1, d)), contiguous_raised, merge_wrong)


@dataclass(frozen=True)
class SnippetOutcome:
    """A heat-map run: whether it raised, and its table cells."""

    raised: bool
    result: str  # "runs", "not applicable" or the error's type
    line: int | str  # the line in the snippet, or ""
    message: str


def snippet_outcome(rec: RunRecord | None) -> SnippetOutcome:
    """A heat-map run's outcome: the listing's own error counts as the snippet not running
    (it never got there), reported as such."""
    if rec is None:
        return SnippetOutcome(True, "not applicable", "", "")
    if rec["error"] is not None:
        err = rec["error"]
        return SnippetOutcome(True, err["type"], "", f"the snippet did not run: {err['message']}")
    v: HeatmapValue | None = rec.get("value")  # a heat-map run: its harness's HeatmapValue
    if v and v["type"]:
        return SnippetOutcome(True, v["type"], v["line"] if v["line"] is not None else "",
                              v["message"])
    shape = v["shape"] if v else None
    return SnippetOutcome(False, "runs", "", (f"drew a {shape[0]} × {shape[1]} image"
                                              if shape and len(shape) == 2 else ""))


# -- the measurement ---------------------------------------------------------------------------
