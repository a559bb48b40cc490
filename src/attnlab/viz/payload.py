"""What Python computes for the explorer page, within its budgets: the data of each trace
(weights exact or pooled, q and k, the geometry, the diagnostics, the score-shaping rules),
the sinusoidal table and the formulas, assembled into the one JSON payload the page reads
(:func:`page_payload`; its encoding: :mod:`attnlab.viz.explorer`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, TypedDict

import torch
from torch import Tensor

from attnlab._errors import check_int
from attnlab.core.positional import frequencies, sinusoidal_table
from attnlab.core.scores import ScoreShape
from attnlab.tracing.attention import AttentionTrace
from attnlab.viz.assets import static_asset
from attnlab.viz.attribution_payload import AttributionPayload, attribution_payload
from attnlab.viz.codec import QUANTIZATION_ERROR, Blob, encode_blob, json_for_html, nbytes
from attnlab.viz.inputs import (
    POSITION_ROLES,
    POSITION_SCORES,
    About,
    ImageInput,
    image_input,
    is_cross,
    stack_name,
)
from attnlab.viz.pooling import block_label, block_spans, coarsen_pooled, pooled_maps
from attnlab.viz.qk import pieces_payload, qk_heads, qk_payload

__all__ = ["FORMAT_VERSION", "VIEWS", "IMAGE_VIEW", "ExplorerConfig", "page_payload",
           "shapes_payload", "math_payload", "MATH_TEXTS", "PagePayload", "TracePayload",
           "ShapePayload", "ShapeRules"]

#: The version of the page's data (module docstring of :mod:`attnlab.viz.explorer`).
FORMAT_VERSION = 2
#: The views of the page, in the order its tabs list them.
VIEWS = ("model", "head", "matrix", "qk", "attribution", "geometry", "positional",
         "diagnostics")
#: The view that overlays a query patch's attention on the image (image traces only).
IMAGE_VIEW = "image"


@dataclass(frozen=True)
class ExplorerConfig:
    """How much of a trace goes into the page."""

    max_tokens: int = 256  # up to this many tokens the page holds every weight; above: pooled
    pooled_blocks: int = 128  # pooled maps have at most this many blocks per side
    page_budget: int = 3_000_000  # bytes of the whole page: long inputs get coarser blocks
    qk_budget: int = 1_600_000  # bytes of q and k per trace: keeps 6×12 heads × 128 tokens < 3 MB
    weights_budget: int = 1_000_000  # short inputs: maps up to this many bytes as uint16
    # short inputs: bytes (before gzip) of the attribution view's exact data per page (key
    # norms, rollout, each head's refinement of the maps to its exact weights, then q/k:
    # attnlab.viz.attribution_payload)
    attribution_budget: int = 700_000
    pe_positions: int = 128  # rows of the sinusoidal table in the positional view
    pe_dim: int = 64  # embed_dim of that table: 32 (sin, cos) pairs
    view: str = "model"  # the view the page opens on

    def __post_init__(self) -> None:
        for name in ("max_tokens", "pooled_blocks", "pe_positions", "pe_dim"):
            check_int(f"ExplorerConfig.{name}", getattr(self, name), minimum=2)
        if self.pe_dim % 2:
            raise ValueError(f"ExplorerConfig.pe_dim must be even, got {self.pe_dim}")
        for name in ("qk_budget", "weights_budget", "page_budget", "attribution_budget"):
            check_int(f"ExplorerConfig.{name}", getattr(self, name))
        if self.view not in VIEWS + (IMAGE_VIEW,):
            raise ValueError(f"ExplorerConfig.view must be one of {VIEWS + (IMAGE_VIEW,)}, "
                             f"got {self.view!r}")


# --------------------------------------------------------------------------------------
# the page's data, as the page's JavaScript reads it
# --------------------------------------------------------------------------------------


class ShapeRules(TypedDict):
    """How a trace's scores are shaped, as the page applies them to a row it recomputes
    (:func:`shapes_payload`); a list has one entry per layer."""

    causal: bool
    window: list[int | None] | None  # None: no layer has a window
    softcap: list[float | None] | None  # None: no layer has a soft-cap
    alibi: list[float] | None  # one slope per head (the same in every layer), or None
    key_mask: Blob | None  # a "b8" blob of the keys every query may see, or None
    bias: bool  # some layer has a dense bias: the page then does not recompute rows
    #: per layer None or one logit per head (or per head and query row); None: no sinks
    sinks: list[list[float] | list[list[float]] | None] | None


class ShapePayload(ShapeRules):
    """:class:`ShapeRules` with each layer's ``scale`` (None: a trace of dense weights
    alone that does not know its scale)."""

    scale: list[float | None]


class DiagnosticsTable(TypedDict):
    """The head table of the diagnostics view (:func:`attnlab.analysis.diagnose`)."""

    columns: list[str]
    #: one per head: layer, head, each score :func:`~attnlab.analysis.diagnose` computed
    #: (by its name: which ones depends on the trace), redundancy, cluster and its roles
    #: (one text, comma-separated)
    rows: list[dict[str, Any]]


class GenerationPayload(TypedDict):
    """Where a generation's prompt ends and which positions it generated."""

    prompt_tokens: int
    generated: list[int]  # the generated positions
    chat: bool  # the prompt went through the model's chat template
    text: str | None  # the generated text


class _Blocks(TypedDict):
    """The blocks of a pooled map (None for exact maps: one token a block)."""

    row_blocks: list[list[int]] | None  # [start, stop) of each row block
    col_blocks: list[list[int]] | None
    rows: list[str] | None  # each row block's label
    cols: list[str] | None


class _TraceHead(TypedDict):
    """What :class:`TracePayload` holds besides the weight maps and the attribution view's
    data (a pooled page sizes its maps to what these and that view's data leave of the
    budget)."""

    stack: str
    cross: bool  # queries and keys are different sequences (:func:`is_cross`)
    image: ImageInput | None
    model: str
    text: str  # the first 200 characters
    causal: bool
    L: int
    H: int
    H_kv: int
    Lq: int
    Lk: int
    d: int | None
    scale: list[float | None]  # per layer
    shape: ShapeRules
    tokens: list[str]
    key_tokens: list[str] | None  # None: the keys are the tokens
    pooled: bool  # the maps are pooled (a long input)
    max_tokens: int
    api: str | None  # the URL prefix of exact data (None: nothing to fetch)
    diagnostics: DiagnosticsTable
    #: q and k of the heads that fit the budget (:func:`attnlab.viz.qk.qk_payload`'s
    #: document), or None
    qk: dict[str, Any] | None
    qk_missing: str  # why a head's q and k are not here: "none", "long", "bias", "budget"
    generation: GenerationPayload | None
    #: how a merged trace's tokens are made of pieces
    #: (:func:`attnlab.viz.qk.pieces_payload`'s document), or None
    pieces: dict[str, Any] | None


class TracePayload(_TraceHead, _Blocks):
    """One trace of the page: what it is, its scores' shaping, its diagnostics, q and k,
    its weight maps (exact or pooled) and the attribution view's data."""

    attribution: AttributionPayload
    block: int  # tokens a row block (1: exact maps)
    col_block: int  # tokens a column block
    weights: Blob  # the maps (L, H, rows, cols), u16 or u8
    weights_error: float  # the largest |error| of that encoding


class PEPayload(TypedDict):
    """The sinusoidal table of the positional view."""

    n: int  # positions
    d: int  # embed_dim
    omega: list[float]  # the frequency of each (sin, cos) pair
    table: Blob  # (n, d) float32


class StackRef(TypedDict):
    """One stack of an input: its name and its trace's index in ``traces``."""

    name: str
    t: int


class InputPayload(TypedDict):
    """One input of the page."""

    model: str
    text: str  # the first 200 characters
    target: str | None  # the target text's first 200 characters
    #: the trace's ``meta["input"]`` when it is a mapping (without the image itself): the
    #: caller's own description of the input, as given
    media: dict[str, Any] | None
    stacks: list[StackRef]


class PagePayload(TypedDict):
    """Everything the page receives (:func:`page_payload`), the JSON the page reads."""

    format_version: int
    uid: str
    view: str  # the view the page opens on
    views: list[str]  # the tabs in order
    layer: int  # the head the page opens on
    head: int
    stack: str
    inputs: list[InputPayload]
    traces: list[TracePayload]  # every stack of every input, in order
    pe: PEPayload
    math: dict[str, dict[str, str]]  # language -> key -> HTML (:func:`math_payload`)


def _shape_payload(trace: AttentionTrace) -> ShapePayload:
    """The score-shaping rules per layer, as the page applies them (one row at a time)."""
    if not trace.shapes:  # dense weights only: the page has no q/k to shape anyway
        return {"scale": [trace.scale] * trace.num_layers, "causal": bool(trace.causal),
                "window": None, "softcap": None, "alibi": None, "key_mask": None,
                "bias": False, "sinks": None}
    return shapes_payload(trace.shapes)


def shapes_payload(shapes: Sequence[ScoreShape]) -> ShapePayload:
    """The score shaping of each layer (``shapes``, one :class:`ScoreShape` a layer) as the
    page reads it: ``scale`` per layer; ``causal``; ``window`` and ``softcap`` per layer or
    None; ``alibi`` one slope per head or None; ``key_mask`` a ``b8`` blob or None;
    ``bias`` whether any layer has a dense bias (the page then does not recompute rows);
    ``sinks`` per layer None or one logit per head (or per head and query row).

    >>> shapes_payload([ScoreShape(scale=0.5, causal=True, window=4)])["window"]
    [4]
    """
    if not shapes:
        raise ValueError("shapes must hold one ScoreShape per layer, got none")
    km = shapes[0].key_mask
    if any(not _same_mask(s.key_mask, km) for s in shapes):
        raise ValueError("the explorer needs one key_mask for all layers of a trace")
    alibi = [None if s.alibi_slopes is None else [float(x) for x in s.alibi_slopes]
             for s in shapes]
    if any(a != alibi[0] for a in alibi):
        raise ValueError("the explorer needs the same ALiBi slopes in every layer")
    return {
        "scale": [s.scale for s in shapes],
        "causal": bool(shapes[0].causal),
        "window": [s.window for s in shapes] if any(s.window for s in shapes) else None,
        "softcap": [s.softcap for s in shapes] if any(s.softcap for s in shapes) else None,
        "alibi": alibi[0],
        "key_mask": None if km is None else encode_blob(km, "b8", gz=True),
        "bias": any(s.bias is not None for s in shapes),
        # per layer: one logit per head, or per head and query row
        "sinks": None if all(s.sinks is None for s in shapes) else [
            None if s.sinks is None else s.sinks.double().tolist() for s in shapes],
    }


def _same_mask(a: Tensor | None, b: Tensor | None) -> bool:
    """Both None, or two equal tensors."""
    if a is None or b is None:
        return a is None and b is None
    return torch.equal(a, b)


# --------------------------------------------------------------------------------------
# what Python computes for the page
# --------------------------------------------------------------------------------------


def _diagnostics(trace: AttentionTrace, progress: bool, group: Any = None
                 ) -> tuple[DiagnosticsTable, Tensor, int]:
    """The head table of :func:`attnlab.analysis.diagnose` (columns, one row per head), and
    the pooled maps its one pass over the weights made, with their block size: the page's
    maps come from that same pass, so every weight is computed once. ``group``: a torchrun
    group (:func:`attnlab._dist.join`) whose processes split the pass by heads
    (:func:`~attnlab.analysis.diagnose`'s ``group``), every process getting the whole result.

    For cross-attention (:func:`is_cross`) the scores and roles that compare positions of
    queries and keys (:data:`POSITION_SCORES`) are left out: the two are different texts.
    """
    from attnlab.analysis import HeadDiagnostics, diagnose

    diag = diagnose(trace, progress=progress, group=group)
    # one stack (an AttentionTrace, not a StackedTrace), and diagnose keeps its pooled maps
    assert isinstance(diag, HeadDiagnostics) and diag.pooled is not None
    rows = diag.rows()
    cross = is_cross(trace)
    for r in rows:
        roles = r["roles"]
        if cross:
            roles = [x for x in roles if x not in POSITION_ROLES]
            for name in POSITION_SCORES:
                r.pop(name, None)
        r["roles"] = ", ".join(roles)
    columns = list(rows[0]) if rows else []
    block = int(diag.meta.get("similarity_block", 0))
    return {"columns": columns, "rows": rows}, diag.pooled, block


_PAGE_FRAME = 2000  # bytes of the page around the data, CSS and JS (head, CSP, wrappers)


def _maps_blob(maps: Tensor, budget: int) -> Blob:
    return encode_blob(maps, "u16" if maps.numel() * 2 <= budget else "u8", gz=True)


def _row_col_blocks(trace: AttentionTrace, cfg: ExplorerConfig) -> tuple[int, int]:
    """The finest block sizes of a pooled page, (rows, columns): one size for both when the
    queries are the keys; for cross-attention each side its own, so that a short target
    over a long source keeps one row per target token."""
    lq, lk = trace.seq_len, trace.key_len
    if not is_cross(trace):
        finest = math.ceil(max(lq, lk) / cfg.pooled_blocks)
        return finest, finest
    return math.ceil(lq / cfg.pooled_blocks), math.ceil(lk / cfg.pooled_blocks)


def _fit_pooled(trace: AttentionTrace, cfg: ExplorerConfig, room: int, maps: Tensor,
                base: int, col_base: int | None = None
                ) -> tuple[Blob, list[tuple[int, int]], list[tuple[int, int]]]:
    """Pooled maps of every head at the finest block size whose encoding fits ``room`` bytes.

    ``maps`` (L, H, nq, nk) are pooled in blocks of ``base`` tokens (the diagnostics' pass
    made them); they are coarsened exactly (:func:`coarsen_pooled`) to at most
    ``pooled_blocks`` blocks a side, then further, each size tried in uint16 then uint8,
    until the base64 text fits. With ``col_base``, ``maps`` are already at the finest
    blocks, ``base`` queries × ``col_base`` keys (cross-attention), and only the further
    coarsening applies.
    """
    lq, lk = trace.seq_len, trace.key_len
    if col_base is not None:
        rows, cols = block_spans(lq, base), block_spans(lk, col_base)
        maps = maps.float()
    else:
        finest = math.ceil(max(lq, lk) / cfg.pooled_blocks)
        maps, rows, cols = coarsen_pooled(maps.float(), block_spans(lq, base),
                                          block_spans(lk, base), math.ceil(finest / base))
    while True:
        for dtype in ("u16", "u8"):
            blob = encode_blob(maps, dtype, gz=True)
            if len(blob["b64"]) <= room:
                return blob, rows, cols
        if len(rows) <= 2 and len(cols) <= 2:
            return blob, rows, cols  # the smallest map there is; the page says how big it is
        maps, rows, cols = coarsen_pooled(maps, rows, cols, 2)


def _generation_payload(trace: AttentionTrace) -> GenerationPayload | None:
    """Where a generation's prompt ends and which positions it generated (the trace's
    ``meta``), or None for a trace of a text alone."""
    meta = trace.meta or {}
    gen = meta.get("generated")
    if not gen:
        return None
    return {"prompt_tokens": int(meta.get("prompt_tokens", min(gen))),
            "generated": [int(i) for i in gen], "chat": bool(meta.get("chat")),
            "text": (meta.get("generation") or {}).get("text")}


def _rules(shape: ShapePayload) -> ShapeRules:
    """``shape`` without its ``scale`` (which the page reads at the trace's top level)."""
    return {"causal": shape["causal"], "window": shape["window"], "softcap": shape["softcap"],
            "alibi": shape["alibi"], "key_mask": shape["key_mask"], "bias": shape["bias"],
            "sinks": shape["sinks"]}


def _trace_payload(trace: AttentionTrace, cfg: ExplorerConfig, first: tuple[int, int],
                   api: str | None, room: int, progress: bool = False,
                   group: Any = None) -> TracePayload:
    nl, nh, lq, lk = trace.num_layers, trace.num_heads, trace.seq_len, trace.key_len
    keys = trace.key_tokens
    pooled = max(lq, lk) > cfg.max_tokens
    shape = _shape_payload(trace)
    rules = _rules(shape)
    image = image_input(trace)
    generation = _generation_payload(trace)
    diagnostics, given_maps, given_block = _diagnostics(trace, progress, group)
    # a merged trace: q and k belong to the pieces; the page gets the pieces' (viz.qk)
    pieces = pieces_payload(trace)
    if not trace.has_qk:
        qk_missing = "none"
    elif pooled:
        qk_missing = "long"
    elif rules["bias"]:
        qk_missing = "bias"
    else:
        qk_missing = "budget"  # a head not in qk: its q and k did not fit the budget
    qk = (qk_payload(trace.unmerged(), *qk_heads(trace.unmerged(), cfg.qk_budget, first))
          if qk_missing == "budget" else None)
    head: _TraceHead = {
        "stack": stack_name(trace), "cross": is_cross(trace), "image": image,
        "model": trace.model, "text": (trace.text or "")[:200], "causal": bool(trace.causal),
        "L": nl, "H": nh, "H_kv": trace.num_kv_heads, "Lq": lq, "Lk": lk,
        "d": trace.head_dim, "scale": shape["scale"], "shape": rules,
        "tokens": list(trace.tokens), "key_tokens": None if keys is None else list(keys),
        "pooled": pooled, "max_tokens": cfg.max_tokens, "api": api,
        "diagnostics": diagnostics, "qk": qk, "qk_missing": qk_missing,
        "generation": generation, "pieces": pieces,
    }
    if pooled:  # the attribution view has nothing exact to embed: only why
        attribution = attribution_payload(trace, budget=cfg.attribution_budget, first=first,
                                          pooled=True, qk=qk)
        keys = keys if keys is not None else trace.tokens

        def blocks(rows: list[tuple[int, int]], cols: list[tuple[int, int]]) -> _Blocks:
            return {"row_blocks": [list(r) for r in rows], "col_blocks": [list(c) for c in cols],
                    "rows": [block_label(trace.tokens, a, b) for a, b in rows],
                    "cols": [block_label(keys, a, b) for a, b in cols]}

        rb, cb = _row_col_blocks(trace, cfg)
        labels = blocks(block_spans(lq, rb), block_spans(lk, cb))  # the most there can be
        before_maps = {**head, "attribution": attribution}  # the trace's data but its maps
        other = nbytes(json_for_html(before_maps)) + nbytes(json_for_html(labels)) + 200
        if rb == cb:
            blob, rows, cols = _fit_pooled(trace, cfg, max(room - other, 0), given_maps,
                                           given_block)
        else:
            blob, rows, cols = _fit_pooled(trace, cfg, max(room - other, 0),
                                           pooled_maps(trace, rb, cb), rb, cb)
        return {**head, "attribution": attribution, "block": rows[0][1] - rows[0][0],
                "col_block": cols[0][1] - cols[0][0], "weights": blob, **blocks(rows, cols),
                "weights_error": QUANTIZATION_ERROR[blob["dtype"]]}
    if given_block == 1 and tuple(given_maps.shape) == (nl, nh, lq, lk):
        maps = given_maps.float()  # blocks of one token: the exact weights, same pass
    else:
        maps = torch.stack([torch.stack([trace.head_weights(l_, h).float()
                                         for h in range(nh)]) for l_ in range(nl)])
    weights = _maps_blob(maps, cfg.weights_budget)
    return {**head, "block": 1, "col_block": 1, "weights": weights,
            "row_blocks": None, "col_blocks": None, "rows": None, "cols": None,
            # the attribution view refines these maps to each head's exact weights
            "attribution": attribution_payload(trace, budget=cfg.attribution_budget,
                                               first=first, pooled=False, qk=qk,
                                               maps=weights),
            "weights_error": QUANTIZATION_ERROR[weights["dtype"]]}


@cache
def _pe_payload(n: int, d: int) -> PEPayload:
    """The sinusoidal table for the positional view (the same for every page: cached)."""
    return {"n": n, "d": d, "omega": frequencies(d).tolist(),
            "table": encode_blob(sinusoidal_table(n, d), "f32", gz=True)}


#: The explorer's formulas (TeX in ``$...$``), rendered as MathML here, in Python, and shown
#: by the page as given (``payload()["math"]``: language -> key -> HTML); the page's own
#: plain text for a key is its fallback.
_PE = r"\mathrm{PE}_{\mathrm{pos}}"
_PEK = r"\mathrm{PE}_{\mathrm{pos}+k}"
MATH_TEXTS: dict[str, tuple[str, str]] = {
    "peNote": (
        f"${_PEK} = M_k \\, {_PE}$: each $(\\sin, \\cos)$ pair turns by $\\omega_i k$. "
        f"Dot: ${_PE}$; arrow: $M_k \\, {_PE}$; ring: ${_PEK}$ from the table.",
        f"${_PEK} = M_k \\, {_PE}$：每一对 $(\\sin, \\cos)$ 转过 $\\omega_i k$。"
        f"圆点：${_PE}$；箭头：$M_k \\, {_PE}$；圆环：表中的 ${_PEK}$。"),
    "maxErr": (f"$\\max |M_k \\, {_PE} - {_PEK}|$ = ", f"最大 $|M_k \\, {_PE} - {_PEK}|$ = "),
}


@cache
def math_payload() -> dict[str, dict[str, str]]:
    """:data:`MATH_TEXTS` as HTML with MathML, per language (``{"en": {...}, "zh": {...}}``).

    >>> math_payload()["en"]["maxErr"].startswith("<math")
    True
    """
    from attnlab._mathml import html_with_math

    return {lang: {k: html_with_math(texts[i]) for k, texts in MATH_TEXTS.items()}
            for i, lang in enumerate(("en", "zh"))}



def page_payload(inputs: Sequence[tuple[About, list[tuple[str, AttentionTrace]]]],
                 cfg: ExplorerConfig, *, uid: str, layer: int, head: int, stack: str,
                 firsts: Sequence[tuple[int, int]], api: Sequence[str | None],
                 progress: bool = False, group: Any = None) -> PagePayload:
    """Everything the page receives, as a JSON-ready dict.

    ``inputs`` are :func:`attnlab.viz.inputs.input_stacks` of each input; every stack of
    every input is one trace of the page, in order, each with its first head (``firsts``,
    whose q/k are kept first) and its ``api`` URL prefix (None: nothing to fetch). The
    traces share ``cfg``'s ``qk_budget``, ``weights_budget`` and ``attribution_budget``, and
    the page stays within ``page_budget`` bytes with the page's CSS and JS, the sinusoidal
    table and the formulas. ``group``: the processes of a torchrun group split each trace's
    pass over the weights by heads (see :func:`_diagnostics`); every process builds the same
    payload.
    """
    traces = [t for _, stacks in inputs for _, t in stacks]
    fixed = nbytes(static_asset("explorer.js")) + nbytes(static_asset("explorer.css"))
    pe = _pe_payload(cfg.pe_positions, cfg.pe_dim)
    n = len(traces)  # several traces share the q/k, weights and attribution budgets
    each = replace(cfg, qk_budget=cfg.qk_budget // n, weights_budget=cfg.weights_budget // n,
                   attribution_budget=cfg.attribution_budget // n)
    about_inputs: list[InputPayload] = []
    t_index = 0
    for about, stacks in inputs:
        given = about["input"]
        media = (None if not isinstance(given, Mapping)
                 else {k: v for k, v in given.items() if k != "image_png"})
        about_inputs.append({"model": about["model"], "text": (about["text"] or "")[:200],
                             "target": None if about["target"] is None
                             else str(about["target"])[:200], "media": media,
                             "stacks": [{"name": name, "t": t_index + i}
                                        for i, (name, _) in enumerate(stacks)]})
        t_index += len(stacks)
    room = (cfg.page_budget - fixed - _PAGE_FRAME - nbytes(json_for_html(pe))
            - nbytes(json_for_html(about_inputs))
            - nbytes(json_for_html(math_payload()))) // n
    return {
        "format_version": FORMAT_VERSION,
        "uid": uid,
        "view": cfg.view,
        "views": [*VIEWS, IMAGE_VIEW],  # the tabs in order (the image one shown for images)
        "layer": layer, "head": head, "stack": stack,
        "inputs": about_inputs,
        "traces": [_trace_payload(t, each, first, a, room, progress, group)
                   for t, first, a in zip(traces, firsts, api)],
        "pe": pe,
        "math": math_payload(),
    }
