"""The explorer's attribution view, from Python: what a query's row moves and why a score
is what it is, read exactly from a trace (:mod:`attnlab.tracing.attribution`).

Three rows for a query ``i`` (``KINDS``): ``"weights"`` (the head's ``α_ij``), ``"value"``
(``α_ij·‖v_j W_O^h‖``, Kobayashi et al. 2020; with ``head=None`` the norm of the sum over
the layer's heads) and ``"rollout"`` (the whole model's residual-adjusted rollout, Abnar &
Zuidema 2020); and one pair's score taken apart by RoPE frequency band and by geometry
(``|q|``, ``|k|``, ``cos θ``).

Plain functions, so that the server's routes (:mod:`attnlab.serve.trace_api`), the page's
payload and any other caller (a notebook widget) share them:

* :func:`attribution_rows` — rows of one kind (a JSON-ready dict);
* :func:`score_parts_json` — one pair's decomposition (a JSON-ready dict);
* :func:`attribution_payload` — what a static page embeds for the view.

Each refuses a bad argument with :class:`attnlab.Refused` (here also named
``AttributionError``; an :class:`attnlab.Error`, so a ``ValueError``) whose ``status`` says
how a server answers it: 422 a bad argument, 409 a trace that lacks what the kind needs (v
and the output projection, q and k, self-attention), 413 too many rows at once.

**Merged traces** (byte pieces merged into characters) have every kind, by the merge's own
rule (:mod:`attnlab.tracing.attribution`): computed on the pieces, then summed over a key
token's pieces and averaged over the query token's pieces; a score's parts of a merged pair
are the list of its piece pairs, each labelled (``苹 (piece 2 of 3)``). A static page of a
merged trace embeds, instead of the key norms, each kept head's merged value-weighted rows
``(Lq, Lk)`` (a merged row is not a merged weight times a norm), and the pieces' q and k.

**What a page embeds** (short inputs only: a page whose maps are pooled fetches everything
from the server). The page already holds every head's weights, quantized (``u16``, or
``u8`` past ``weights_budget``); the view refines them to each head's exact weights with
one more ``u16`` per weight where every head fits so (32 bits in all over ``u16`` maps: an
error of at most 1.2e-10), else one more ``u8`` over ``u16`` maps or ``u16`` over ``u8``
maps (24 bits in all: at most ``2**-25``, 3e-8) — instead of a float32 copy, and a value-weighted
row is those weights times one norm per key. At most ``budget`` bytes of arrays (before
gzip and base64; :attr:`attnlab.viz.payload.ExplorerConfig.attribution_budget`, 700,000
bytes by default, shared by a page's traces), each taken, in this order, if it still fits:
the key norms ``‖v_j W_O^h‖`` ``(L, H, Lk)`` (float32); the page's first head — its
refinement ``(Lq, Lk)`` (float32 weights where a map is not that head's weights rounded, or
no maps are given; for a merged trace also its float32 value-weighted rows) and, where the
QK payload does not hold them in float32, its q ``(Lq, d)`` and k ``(Lk, d)`` (of the
pieces, for a merged trace); the rollout matrix ``(Lq, Lk)``; the other heads' refinements;
then their q and k. SmolLM2 (270 heads) keeps every head's rows up to 43 tokens (its maps
``u16``). The page adds a refinement to its map, multiplies a weight by its key's norm and
sums q·k over a band's dimensions itself, in float64: every number it shows is
AttentionTrace's to float32 rounding (times the key's norm, for a value-weighted row).
"""

from __future__ import annotations

import base64
import gzip
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
import torch
from torch import Tensor

from attnlab._errors import Refused, check_int
from attnlab.tracing.attention import AttentionTrace
from attnlab.viz.codec import Blob, encode_blob

__all__ = ["KINDS", "MAX_ROWS", "AttributionError", "parse_rows", "attribution_rows",
           "score_parts_json", "attribution_payload", "key_norms", "AttributionRows",
           "AttributionPayload", "Band"]

#: The rows the view shows: the head's weights, value-weighted, the whole model's rollout.
KINDS = ("weights", "value", "rollout")
#: The most rows one :func:`attribution_rows` call computes.
MAX_ROWS = 256


#: An argument or a trace the attribution functions refuse; ``status`` is the HTTP status a
#: server answers with (422 bad argument, 409 the trace lacks what is asked, 413 too much at
#: once). The one refusal class, :class:`attnlab.Refused`.
AttributionError = Refused


class AttributionRows(TypedDict):
    """Rows of one kind for some queries (:func:`attribution_rows`)."""

    kind: str  # one of KINDS
    layer: int | None  # None for "rollout" (the whole model's)
    head: int | None  # None for "rollout", and for "value" summed over the layer's heads
    rows: list[int]  # the query positions
    key_len: int
    sums: list[float]  # each row's sum
    values: Blob | list[list[float]]  # (len(rows), Lk): a blob, or nested lists


class Band(TypedDict):
    """One band of a score's parts, without its value (``score_parts``' ``bands``)."""

    dims: list[int]  # the head dimensions of the band
    rotated: bool  # RoPE turns it
    freq: float | None  # its angular frequency (None: not rotated)
    wavelength: float | None  # 2π / freq, in positions


class AttributionPayload(TypedDict):
    """What a static page embeds for the attribution view (:func:`attribution_payload`):
    why something is not there, and the arrays that fit the budget. The lists ``heads``,
    ``weights``, ``fine``, ``q`` and ``k`` run in step, one entry per kept head."""

    missing: str | None  # "long": a pooled page, which embeds nothing exact
    budget: int  # bytes of arrays allowed (before gzip)
    bytes: int  # bytes of arrays taken
    #: why value-weighted rows cannot be drawn: "none" (no v or out_proj), "budget" (the
    #: key norms did not fit); None: they can
    value_missing: str | None
    rollout_missing: str | None  # why there is no rollout: "cross", "budget"
    parts_missing: str | None  # why there are no score parts: "none" (no q and k)
    rollout: Blob | None  # (Lq, Lk) float32
    norms: Blob | None  # (L, H, Lk) float32: ‖v_j W_O^h‖
    heads: list[list[int]]  # [layer, head] of each kept head
    weights: list[Blob | None]  # a head's float32 weights (None: refined from the maps)
    fine: list[Blob | None]  # a head's refinement of the page's maps (None: weights given)
    fine_span: float  # the span of a refinement, in steps of the map
    q: list[Blob | None]  # a head's q (of the pieces); None: the QK payload holds it
    k: list[Blob | None]
    bands: list[Band] | None  # the bands of a score's parts (None without q and k)
    #: the positional layout the score's parts use, as ``score_parts`` reports it
    #: (:mod:`attnlab.tracing.attribution`); None without q and k
    layout: dict[str, Any] | None
    value: list[Blob]  # a merged trace: each kept head's value-weighted rows (else empty)


def _int(name: str, value: Any, n: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < n:
        raise Refused(422, f"{name} must be an int in [0, {n}), got {value!r}")
    return value


def parse_rows(rows: Any, n: int) -> list[int]:
    """Query positions in ``[0, n)`` from an int, a sequence or range of ints, or the text
    ``"3"``, ``"3,7,9"`` or ``"10:20"`` (what the server's ``rows=`` holds).

    >>> parse_rows("2:5", 10), parse_rows("1,4", 10), parse_rows(7, 10)
    ([2, 3, 4], [1, 4], [7])
    """
    want = "rows must be an int, a list of ints, or 'i', 'i,j,…', 'start:stop'"
    if isinstance(rows, str):
        a, colon, b = rows.strip().partition(":")
        try:
            if colon:
                lo, hi = int(a) if a.strip() else 0, int(b) if b.strip() else n
            else:
                out = [int(x) for x in rows.split(",") if x.strip()]
        except ValueError:
            raise Refused(422, f"{want}, got {rows!r}") from None
        if colon:
            if not 0 <= lo < hi <= n:
                raise Refused(422, f"rows must satisfy 0 <= start < stop <= {n}, "
                                   f"got {rows!r}")
            out = list(range(lo, hi))
    elif isinstance(rows, int) and not isinstance(rows, bool):
        out = [rows]
    elif isinstance(rows, (Sequence, range)) and all(
            isinstance(i, int) and not isinstance(i, bool) for i in rows):
        out = list(rows)
    else:
        raise Refused(422, f"{want}, got {rows!r}")
    if not out:
        raise Refused(422, "rows is empty")
    for i in out:
        if not 0 <= i < n:
            raise Refused(422, f"rows must lie in [0, {n}), got {i}")
    if len(out) > MAX_ROWS:
        raise Refused(413, f"{len(out)} rows in one request; the limit is {MAX_ROWS}")
    return out


def _value_missing(trace: AttentionTrace) -> str | None:
    """Why value-weighted rows cannot be computed (None: they can)."""
    return "none" if trace.v is None or trace.out_proj is None else None


def _rollout_missing(trace: AttentionTrace) -> str | None:
    return "cross" if trace.stack == "cross" or trace.seq_len != trace.key_len else None


def _parts_missing(trace: AttentionTrace) -> str | None:
    return None if trace.has_qk else "none"


_WHY = {
    "value:none": "value-weighted attention needs the trace's v and each head's output "
                  "projection (out_proj); this trace has {what}: trace with qkv from a model "
                  "whose attention module holds its output projection (o_proj, out_proj, "
                  "c_proj, dense, ...)",
    "rollout:cross": "rollout composes a stack's layers, so rows and keys must be the same "
                     "tokens; this trace is {stack!r} with {lq} queries and {lk} keys",
    "parts:none": "the score's parts need q and k; this trace holds weights only (traced "
                  "without qkv)",
}


def _refuse(key: str, trace: AttentionTrace) -> Refused:
    what = ("neither v nor out_proj" if trace.v is None and trace.out_proj is None
            else "no v" if trace.v is None else "no out_proj")
    return Refused(409, _WHY[key].format(what=what, stack=trace.stack,
                                         lq=trace.seq_len, lk=trace.key_len))


def _check_trace(trace: Any) -> None:
    if not isinstance(trace, AttentionTrace):
        raise TypeError(f"trace must be an AttentionTrace (one stack), got "
                        f"{type(trace).__name__}")


def attribution_rows(trace: AttentionTrace, kind: str, layer: int | None = None,
                     head: int | None = None, rows: Any = 0, *,
                     encoding: str = "b64") -> AttributionRows:
    """Rows ``(len(rows), Lk)`` of one ``kind`` (see :data:`KINDS`) for query ``rows``.

    ``"weights"``: the trace's ``weights_rows(layer, head, rows)`` (float32).
    ``"value"``: its ``value_weighted_rows(layer, head, rows)`` (float32; ``head=None``:
    the norm of the sum over the layer's heads). ``"rollout"``: its ``rollout_rows(rows)``
    (float64), the whole model's — ``layer`` and ``head`` must then be omitted.

    Returns ``kind``, ``layer``, ``head``, ``rows``, ``key_len``, ``sums`` (each row's sum)
    and ``values``: a blob ``{"dtype", "gz", "shape", "b64"}`` (``encoding="b64"``) or
    nested lists (``encoding="list"``).

    >>> from attnlab.core.scores import ScoreShape, row_logsumexp
    >>> q, k = torch.ones(1, 1, 3, 2), torch.ones(1, 1, 3, 2)
    >>> shape = ScoreShape(scale=1.0, causal=True)
    >>> t = AttentionTrace(list("abc"), q=q, k=k, shapes=shape,
    ...                    lse=row_logsumexp(q[0], k[0], shape)[None])
    >>> got = attribution_rows(t, "weights", 0, 0, 2, encoding="list")
    >>> got["rows"], [round(x, 6) for x in got["values"][0]]  # equal scores: uniform
    ([2], [0.333333, 0.333333, 0.333333])
    """
    _check_trace(trace)
    if kind not in KINDS:
        raise Refused(422, f"kind must be one of {', '.join(map(repr, KINDS))}, got "
                           f"{kind!r}")
    if encoding not in ("b64", "list"):
        raise Refused(422, f"encoding must be 'b64' or 'list', got {encoding!r}")
    if kind == "rollout":
        for name, v in (("layer", layer), ("head", head)):
            if v is not None:
                raise Refused(422, f"{name} must be omitted for kind 'rollout' (the "
                                   f"whole model's: every layer and head), got {v!r}")
        if _rollout_missing(trace):
            raise _refuse("rollout:cross", trace)
    else:
        if layer is None:
            raise Refused(422, f"layer is required for kind {kind!r}: an int in [0, "
                               f"{trace.num_layers})")
        layer = _int("layer", layer, trace.num_layers)
        if head is None and kind == "weights":
            raise Refused(422, f"head is required for kind 'weights': an int in [0, "
                               f"{trace.num_heads})")
        if head is not None:
            head = _int("head", head, trace.num_heads)
        why = _value_missing(trace)
        if kind == "value" and why:
            raise _refuse("value:" + why, trace)
    picked = parse_rows(rows, trace.seq_len)
    if kind == "weights":
        assert layer is not None and head is not None  # both required for it, checked above
        values = trace.weights_rows(layer, head, picked).float()
    elif kind == "value":
        assert layer is not None  # required for it, checked above
        values = trace.value_weighted_rows(layer, head, picked).float()
    else:
        values = trace.rollout_rows(picked).double()
    sums = [float(x) for x in values.double().sum(-1)]
    return {"kind": kind, "layer": layer, "head": head, "rows": picked,
            "key_len": trace.key_len, "sums": sums,
            "values": (values.tolist() if encoding == "list"
                       else encode_blob(values, "f64" if kind == "rollout" else "f32"))}


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def score_parts_json(trace: AttentionTrace, layer: int, head: int, i: int, j: int, *,
                     pairing: str | None = None) -> dict[str, Any]:
    """Query ``i``'s score for key ``j`` in one head taken apart: the trace's
    ``score_parts(layer, head, i, j, pairing=pairing)`` (``score``, ``bands`` with their
    ``value``, ``dims``, ``freq``, ``wavelength``, ``rotated``; ``q_norm``, ``k_norm``,
    ``cos``, ``angle_deg``, ``scale``, ``layout``), JSON-ready: ``shaped`` (the score the
    softmax sees) is None and ``visible`` False for a key the query may not see (−∞);
    ``band_sum`` is the bands' sum; ``query_token`` and ``key_token`` name the pair.

    A merged trace: ``merged`` True, ``query_token`` and ``key_token`` the merged tokens,
    ``query_pieces`` and ``key_pieces`` labelled, and ``pairs``, one decomposition as above
    per pair of their pieces (its ``query_token`` and ``key_token`` the pieces' labels,
    e.g. ``苹 (piece 2 of 3)``; ``query_piece`` and ``key_piece`` where they are)."""
    _check_trace(trace)
    layer = _int("layer", layer, trace.num_layers)
    head = _int("head", head, trace.num_heads)
    i = _int("i", i, trace.seq_len)
    j = _int("j", j, trace.key_len)
    if pairing is not None and pairing not in ("half", "interleaved", "adjacent"):
        raise Refused(422, f"pairing must be one of 'half', 'interleaved', "
                           f"'adjacent' or omitted, got {pairing!r}")
    why = _parts_missing(trace)
    if why:
        raise _refuse("parts:" + why, trace)
    p = trace.score_parts(layer, head, i, j, pairing=pairing)
    keys = trace.key_tokens if trace.key_tokens is not None else trace.tokens
    for part in p.get("pairs", [p]):  # a merged pair: each pair of its pieces
        part["visible"] = math.isfinite(part["shaped"])
        part["shaped"] = _finite(part["shaped"])
        part["band_sum"] = math.fsum(b["value"] for b in part["bands"])
        if "query_piece" in part:
            part["query_token"] = part["query_piece"]["label"]
            part["key_token"] = part["key_piece"]["label"]
    p["query_token"], p["key_token"] = trace.tokens[i], keys[j]
    return p


# --------------------------------------------------------------------------------------
# what a static page embeds
# --------------------------------------------------------------------------------------


def key_norms(trace: AttentionTrace) -> Tensor:
    """(L, H, Lk) float32: ``‖v_j W_O^h‖``, the norm of what key ``j`` moves through head
    ``h`` — the factor by which value-weighted attention scales a weight."""
    def of_layer(layer: int) -> Tensor:  # (H, Lk); v and out_proj read checked
        v, o = trace.layer_tensor("v", layer), trace.layer_tensor("out_proj", layer)
        return torch.stack([(v[trace.kv_head(h)].float() @ o[h]).norm(dim=-1)
                            for h in range(trace.num_heads)])

    return torch.stack([of_layer(layer) for layer in range(trace.num_layers)])


def _layout(trace: AttentionTrace) -> tuple[list[Band], dict[str, Any]]:
    """The bands (without values) and the layout that ``score_parts`` uses for this trace."""
    p = trace.unmerged().score_parts(0, 0, 0, 0)
    bands: list[Band] = [{"dims": b["dims"], "rotated": b["rotated"], "freq": b["freq"],
                          "wavelength": b["wavelength"]} for b in p["bands"]]
    return bands, p["layout"]


def _stored_ints(blob: Blob) -> np.ndarray:
    """The integers a ``u8``/``u16`` blob stores (the page's maps, as the page reads them)."""
    data = base64.b64decode(blob["b64"])
    if blob["gz"]:
        data = gzip.decompress(data)
    return np.frombuffer(data, dtype="u1" if blob["dtype"] == "u8" else "<u2").reshape(
        blob["shape"])


#: The dtype of a head's refinement over maps of each dtype when not every head fits it in
#: ``u16``: 24 bits of each weight in all (``u16`` over ``u16`` maps: 32 bits).
FINE = {"u16": "u8", "u8": "u16"}


#: The span of a refinement, in steps of the map: ±0.51 (a map rounds ``w·65535`` computed
#: in float32, so a weight may lie a little more than half a step from its map).
FINE_SPAN = 1.02


def _fine_blob(exact: Tensor, stored: np.ndarray, step: float, dtype: str
               ) -> Blob | None:
    """``exact`` (Lq, Lk) less the page's map ``stored · step``, in steps, divided by
    :data:`FINE_SPAN` and offset by ½ into [0, 1], stored as ``dtype`` (the page's weight:
    ``(stored + (x − ½)·FINE_SPAN)·step``); None: the map is not this head's weights
    rounded."""
    r = exact.double() / step - torch.from_numpy(stored.astype("float64"))
    if float(r.abs().max()) > FINE_SPAN / 2:
        return None
    return encode_blob((r / FINE_SPAN + 0.5).clamp_(0, 1), dtype, gz=True)


def _empty_payload(trace: AttentionTrace, budget: int, pooled: bool) -> AttributionPayload:
    """The attribution payload before any head is added: what the trace lacks, and the
    bands and layout of its score parts when it has them."""
    out: AttributionPayload = {
        "missing": "long" if pooled else None, "budget": budget, "bytes": 0,
        "value_missing": _value_missing(trace), "rollout_missing": _rollout_missing(trace),
        "parts_missing": _parts_missing(trace), "rollout": None, "norms": None,
        "heads": [], "weights": [], "fine": [], "fine_span": FINE_SPAN, "q": [], "k": [],
        "bands": None, "layout": None,
        "value": [],  # a merged trace: each kept head's value-weighted rows (else norms)
    }
    if not out["parts_missing"]:
        out["bands"], out["layout"] = _layout(trace)
    return out


def _map_ints(trace: AttentionTrace, maps: Blob) -> tuple[np.ndarray, float]:
    """(the integers of the page's weight ``maps``, the weight of one step of them);
    ``ValueError`` unless they are a ``u16`` or ``u8`` blob of the trace's (L, H, Lq, Lk)."""
    shape = [trace.num_layers, trace.num_heads, trace.seq_len, trace.key_len]
    if maps.get("dtype") not in FINE or maps.get("shape") != shape:
        raise ValueError(f"maps must be a u16 or u8 blob of shape {shape}, got "
                         f"{maps.get('dtype')!r} {maps.get('shape')!r}")
    return _stored_ints(maps), 1 / 65535 if maps["dtype"] == "u16" else 1 / 255


class _Budget:
    """The bytes left of a payload's budget."""

    def __init__(self, budget: int) -> None:
        self.left = budget

    def take(self, need: int) -> bool:
        """Whether ``need`` more bytes fit, and if so count them."""
        if need > self.left:
            return False
        self.left -= need
        return True


@dataclass(frozen=True)
class _Heads:
    """What adding a head to the payload reads: the trace and its pieces (whose q and k are
    kept), the page's maps (``stored``, a ``step`` apart; None without maps) and the dtype
    of a refinement over them, whether merged value-weighted rows are kept, the heads whose
    q and k the QK payload already holds, and one head's q and k in bytes (0: none)."""

    trace: AttentionTrace
    pieces: AttentionTrace
    stored: np.ndarray | None
    step: float
    fine: str
    value_rows: bool
    in_qk: frozenset[tuple[int, ...]]
    qk_bytes: int


def _add_rows(out: AttributionPayload, heads: _Heads, room: _Budget, layer: int, h: int) -> bool:
    """Add head ``(layer, h)``'s exact weights (and merged rows) when they fit ``room``."""
    trace, fine = heads.trace, heads.fine
    lq, lk = trace.seq_len, trace.key_len
    w = trace.head_weights(layer, h).float()
    blob = None if heads.stored is None else _fine_blob(w, heads.stored[layer, h], heads.step,
                                                        fine)
    size = (lq * lk * (1 if fine == "u8" else 2)) if blob is not None else lq * lk * 4
    if not room.take(size + (lq * lk * 4 if heads.value_rows else 0)):
        return False
    out["heads"].append([layer, h])
    out["fine"].append(blob)
    out["weights"].append(None if blob is not None else encode_blob(w, "f32", gz=True))
    if heads.value_rows:
        out["value"].append(encode_blob(trace.value_weighted_rows(layer, h, range(lq)),
                                        "f32", gz=True))
    out["q"].append(None)
    out["k"].append(None)
    return True


def _add_qk(out: AttributionPayload, heads: _Heads, room: _Budget, n: int) -> bool:
    """Add the pieces' q and k of kept head ``n``, read checked, when they fit ``room``
    (true when it needs none)."""
    layer, h = out["heads"][n]
    if out["parts_missing"] or (layer, h) in heads.in_qk:
        return True
    if not room.take(heads.qk_bytes):
        return False
    pieces = heads.pieces
    q, k = pieces.layer_tensor("q", layer), pieces.layer_tensor("k", layer)
    out["q"][n] = encode_blob(q[h].float(), "f32", gz=True)
    out["k"][n] = encode_blob(k[pieces.kv_head(h)].float(), "f32", gz=True)
    return True


def attribution_payload(trace: AttentionTrace, *, budget: int, first: tuple[int, int],
                        pooled: bool, qk: dict[str, Any] | None = None,
                        maps: Blob | None = None) -> AttributionPayload:
    """What a page embeds for the attribution view of ``trace`` (see the module docstring):
    within ``budget`` bytes (before gzip), the key norms, the head ``first`` (its exact
    weights and, unless ``qk``, the trace's QK payload, holds them in float32, its q and k),
    the rollout matrix, the other heads' exact weights, then their q and k. ``maps``: the
    page's ``u16`` or ``u8`` weight maps ``(L, H, Lq, Lk)`` (the payload's ``weights``); a
    head's exact weights are then those maps refined (``fine``: a ``u8`` or ``u16`` blob per
    head, ``fine_span`` steps wide, 24 or 32 bits of each weight in all) rather than float32
    (``weights``). ``pooled`` (a
    long input): nothing but why (``missing: "long"``) and what the trace lacks, for the
    page to say or to fetch."""
    check_int("budget", budget)
    lq, lk, d = trace.seq_len, trace.key_len, trace.head_dim
    out = _empty_payload(trace, budget, pooled)
    if pooled:
        return out
    stored, step = (None, 0.0) if maps is None else _map_ints(trace, maps)
    merged = trace.groups is not None
    value_rows = merged and not out["value_missing"]
    nl, nh = trace.num_layers, trace.num_heads
    norms_bytes = 0 if out["value_missing"] or merged else nl * nh * lk * 4
    rollout_bytes = 0 if out["rollout_missing"] else lq * lk * 4
    pieces = trace.unmerged()  # q and k are the pieces' (the trace itself when unmerged)
    in_qk = set()
    if qk is not None and qk.get("dtype") == "f32":
        in_qk = {tuple(x) for x in qk["heads"]}
    # one head's own q and k (none without q and k)
    # (d is None only for a trace without q, whose parts are missing)
    qk_bytes = (0 if out["parts_missing"] or d is None
                else (pieces.seq_len + pieces.key_len) * d * 4)
    first_qk = 0 if tuple(first) in in_qk else qk_bytes
    # every head's rows in u16 when they fit (32 bits a weight over u16 maps), else 24 bits
    fine = "u16" if maps is None or norms_bytes + rollout_bytes + first_qk + nl * nh * lq * lk * (
        2 + (4 if value_rows else 0)) <= budget else FINE[maps["dtype"]]
    heads = _Heads(trace, pieces, stored, step, fine, value_rows, frozenset(in_qk), qk_bytes)
    room = _Budget(budget)
    if norms_bytes:
        if room.take(norms_bytes):
            out["norms"] = encode_blob(key_norms(trace), "f32", gz=True)
        else:
            out["value_missing"] = "budget"
    first_kept = _add_rows(out, heads, room, *first)
    if first_kept:
        _add_qk(out, heads, room, 0)
    if rollout_bytes:
        if room.take(rollout_bytes):
            out["rollout"] = encode_blob(trace.rollout_rows(range(lq)).float(), "f32", gz=True)
        else:
            out["rollout_missing"] = "budget"
    if first_kept:
        for lh in [(a, b) for a in range(nl) for b in range(nh) if (a, b) != tuple(first)]:
            if not _add_rows(out, heads, room, *lh):
                break
        for n in range(1, len(out["heads"])):
            if not _add_qk(out, heads, room, n):
                break
    out["bytes"] = budget - room.left
    return out
