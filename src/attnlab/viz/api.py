"""The explorer's requests for exact data, as plain functions: rows, tiles, pooled blocks,
top-k keys, the QK view's data (here), and the attribution view's rows and score parts
(:mod:`attnlab.viz.attribution_payload`), by one dispatcher.

A page whose maps are pooled (a long input) fetches what it shows exactly from whoever holds
the trace: ``attnlab serve`` over HTTP (:mod:`attnlab.serve.trace_api`, whose routes wrap
these functions) or, in Jupyter, the kernel over a widget's comm
(:mod:`attnlab.viz.widget`). Both answer with the same functions, so the page reads the
same JSON either way.

Each function takes the trace and the request's parameters and returns a JSON-ready dict;
arrays come as blobs ``{"dtype", "gz", "shape", "b64"}`` (:func:`attnlab.viz.codec.
encode_blob`) or, with ``encoding="list"``, as nested lists. A bad request raises
:class:`attnlab.Refused` (here also named ``RequestError``), whose ``status`` is what a
server answers with (422 a bad value, 413 too much at once, 409 a trace without what is
asked).

:func:`answer` is one request by its path and its parameters as the page sends them
(:data:`ENDPOINTS`: the path, its parameters and their types, as the server's routes
declare them), what the widget calls.

说明：探索器在长输入（池化）页面上向持有追踪的一方请求精确数据——通过 HTTP 向
``attnlab serve``，或在 Jupyter 中通过小部件的 comm 向内核。两者调用本模块的同一组函数。
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

import torch
from torch import Tensor

from attnlab._errors import Refused
from attnlab.tracing.attention import AttentionTrace
from attnlab.viz.attribution_payload import AttributionRows, attribution_rows, score_parts_json
from attnlab.viz.codec import Blob, encode_blob
from attnlab.viz.qk import qk_pieces_data

__all__ = ["MAX_ROWS", "MAX_TILE", "MAX_POOLED_BLOCKS", "MAX_TOP", "RequestError", "Param",
           "Endpoint", "ENDPOINTS", "answer", "rows_data", "tile_data", "pooled_data",
           "topk_data", "qk_data", "Answer", "RowsData", "TileData", "PooledData", "TopkData",
           "QKData"]

MAX_ROWS = 256  # rows of one /rows request: 256 × 8,192 keys = 8 MB of float32
MAX_TILE = 1 << 20  # weights in one /tile request (4 MB of float32)
MAX_POOLED_BLOCKS = 512  # blocks per side of one /pooled request
MAX_TOP = 256  # keys of one /topk or /qk request


#: A request refused: ``status`` (the HTTP status a server answers with) and ``message``
#: (what is wrong, naming the parameter). The one refusal class, :class:`attnlab.Refused`.
RequestError = Refused


# --------------------------------------------------------------------------------------
# what the requests answer
# --------------------------------------------------------------------------------------

#: An array of weights as a request asks for it: a blob (``encoding="b64"``) or nested
#: lists, one per row (``encoding="list"``).
Weights = Blob | list[list[float]]


class RowsData(TypedDict):
    """Exact rows of one head (:func:`rows_data`)."""

    layer: int
    head: int
    queries: list[int]
    weights: Weights  # (len(queries), Lk) float32
    top_values: NotRequired[list[float]]  # with top > 0: the first row's strongest keys
    top_indices: NotRequired[list[int]]


class TileData(TypedDict):
    """An exact tile of one head (:func:`tile_data`)."""

    layer: int
    head: int
    rows: list[int]  # [start, stop)
    cols: list[int]  # [start, stop)
    weights: Weights  # float32


class PooledData(TypedDict):
    """The pooled map of one head (:func:`pooled_data`)."""

    layer: int
    head: int
    block: int  # tokens a block
    weights: Weights  # float32, rows sum to 1


class TopkData(TypedDict):
    """The strongest keys of one query (:func:`topk_data`)."""

    layer: int
    head: int
    query: int
    values: list[float]
    indices: list[int]
    tokens: list[str]  # the keys' tokens


class QKData(TypedDict):
    """What the QK view draws for one query of one head (:func:`qk_data`)."""

    layer: int
    head: int
    query: int
    scale: float
    softcap: float | None
    sink: float | None  # the head's learned sink logit for this query
    q: Blob  # (d,) float32
    dots: Blob  # (Lk,) float64: q·k of every key, unscaled
    allowed: Blob  # (Lk,) b8: the keys the query may see
    bias: Blob | None  # (Lk,) float64: ALiBi and dense bias (0 where hidden)
    weights: Blob  # (Lk,) float32: the exact row
    keys: list[int]  # the strongest keys and the query's own position
    k: Blob  # (len(keys), d) float32


#: One request's answer (:func:`answer`). The attribution view's score parts
#: (:func:`~attnlab.viz.attribution_payload.score_parts_json`) and a merged trace's QK data
#: (:func:`attnlab.viz.qk.qk_pieces_data`) are the documents of those modules.
Answer = (RowsData | TileData | PooledData | TopkData | QKData | AttributionRows
          | dict[str, Any])


# --------------------------------------------------------------------------------------
# argument parsing (shared by the endpoints)
# --------------------------------------------------------------------------------------


def _index(name: str, value: int, n: int) -> int:
    if not 0 <= value < n:
        raise Refused(422, f"{name} must be in [0, {n}), got {value}")
    return value


def _span(name: str, text: str, n: int) -> range:
    """``a:b`` (either side may be empty) -> range, checked against [0, n)."""
    parts = text.split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        a = int(parts[0]) if parts[0].strip() else 0
        b = int(parts[1]) if parts[1].strip() else n
    except ValueError:
        raise Refused(422, f"{name} must be a span 'start:stop', got {text!r}") from None
    if not 0 <= a < b <= n:
        raise Refused(422, f"{name} must satisfy 0 <= start < stop <= {n}, got {text!r}")
    return range(a, b)


def _queries(text: str, n: int) -> list[int]:
    """``3`` | ``3,7,9`` | ``10:20`` -> positions in [0, n)."""
    if ":" in text:
        out = list(_span("queries", text, n))
    else:
        try:
            out = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise Refused(422, f"queries must be 'i', 'i,j,…' or 'start:stop', got "
                           f"{text!r}") from None
        if not out:
            raise Refused(422, "queries is empty")
        for i in out:
            _index("queries", i, n)
    if len(out) > MAX_ROWS:
        raise Refused(413, f"{len(out)} queries in one request; the limit is {MAX_ROWS}")
    return out


def _head(trace: AttentionTrace, layer: int, head: int) -> tuple[int, int]:
    return (_index("layer", layer, trace.num_layers), _index("head", head, trace.num_heads))


def _array(t: Tensor, dtype: str, encoding: str) -> Weights:
    if encoding == "list":
        return t.tolist()
    return encode_blob(t, dtype)


def _encoding(encoding: str) -> str:
    if encoding not in ("b64", "list"):
        raise Refused(422, f"encoding must be 'b64' or 'list', got {encoding!r}")
    return encoding


# --------------------------------------------------------------------------------------
# what each request computes (plain functions: the routes and the widget wrap them)
# --------------------------------------------------------------------------------------


def rows_data(t: AttentionTrace, layer: int, head: int, queries: str, *, top: int = 0,
              encoding: str = "b64") -> RowsData:
    """Exact rows ``(len(queries), Lk)``; ``top`` > 0 adds the first row's strongest keys."""
    layer, head = _head(t, layer, head)
    qs = _queries(queries, t.seq_len)
    if not 0 <= top <= MAX_TOP:
        raise Refused(422, f"top must be in [0, {MAX_TOP}], got {top}")
    w = t.weights_rows(layer, head, qs).float()  # (R, Lk)
    out: RowsData = {"layer": layer, "head": head, "queries": qs,
                     "weights": _array(w, "f32", _encoding(encoding))}
    if top:
        vals, idx = torch.topk(w[0], min(top, w.shape[1]))
        out["top_values"], out["top_indices"] = vals.tolist(), idx.tolist()
    return out


def tile_data(t: AttentionTrace, layer: int, head: int, rows: str, cols: str, *,
              encoding: str = "b64") -> TileData:
    """The exact tile rows ``a:b`` × cols ``c:d``."""
    layer, head = _head(t, layer, head)
    r, c = _span("rows", rows, t.seq_len), _span("cols", cols, t.key_len)
    if len(r) * len(c) > MAX_TILE:
        raise Refused(413, f"a tile of {len(r)} x {len(c)} weights; the limit is {MAX_TILE}")
    w = t.weights_tile(layer, head, r, c).float()
    return {"layer": layer, "head": head, "rows": [r.start, r.stop], "cols": [c.start, c.stop],
            "weights": _array(w, "f32", _encoding(encoding))}


def pooled_data(t: AttentionTrace, layer: int, head: int, block: int, *,
                encoding: str = "b64") -> PooledData:
    """The pooled map of one head in blocks of ``block`` tokens (rows sum to 1)."""
    layer, head = _head(t, layer, head)
    n = max(t.seq_len, t.key_len)
    least = -(-n // MAX_POOLED_BLOCKS)
    if not least <= block <= n:
        raise Refused(422, f"block must be in [{least}, {n}] for {n} tokens (at most "
                       f"{MAX_POOLED_BLOCKS} blocks a side), got {block}")
    p = t.pooled(layer, head, block).float()
    return {"layer": layer, "head": head, "block": block,
            "weights": _array(p, "f32", _encoding(encoding))}


def topk_data(t: AttentionTrace, layer: int, head: int, query: int, k: int) -> TopkData:
    """The ``k`` strongest keys of one query: values, indices and their tokens."""
    layer, head = _head(t, layer, head)
    query = _index("query", query, t.seq_len)
    if not 1 <= k <= MAX_TOP:
        raise Refused(422, f"k must be in [1, {MAX_TOP}], got {k}")
    vals, idx = t.topk(layer, head, query, min(k, t.key_len))
    keys = t.key_tokens if t.key_tokens is not None else t.tokens
    idx_list = [int(i) for i in idx]
    return {"layer": layer, "head": head, "query": query,
            "values": [float(v) for v in vals], "indices": idx_list,
            "tokens": [keys[i] for i in idx_list]}


def qk_data(t: AttentionTrace, layer: int, head: int, query: int, *,
            top: int = 48) -> QKData | dict[str, Any]:
    """Everything the QK view draws for one query of one head, at any length.

    ``dots`` = q·k of every key (float64, unscaled), ``allowed`` = the keys the score
    shaping lets the query see, ``bias`` = the additive part of the shaped score (ALiBi,
    dense bias; None when there is none), ``softcap`` and ``sink`` (the head's learned
    sink logit for this query, or None): the page recomputes ``softmax((f(scale·dots) +
    bias) / T)``, the sink joining the softmax, for any scale and temperature; ``weights`` =
    the exact row at the model's scale (the trace's ``weights_rows``); ``keys`` = the
    ``top`` strongest keys (and the query's own position), with their ``k`` vectors.

    A merged trace (byte pieces merged into characters): q and k belong to the pieces, so
    the answer is one such row per piece of ``query`` against every key piece, each piece
    labelled (``merged`` True: :func:`attnlab.viz.qk.qk_pieces_data`). 409 only for a trace
    without q and k.
    """
    layer, head = _head(t, layer, head)
    query = _index("query", query, t.seq_len)
    if not 1 <= top <= MAX_TOP:
        raise Refused(422, f"top must be in [1, {MAX_TOP}], got {top}")
    if not t.has_qk:
        raise Refused(409, "the QK view needs this trace's q and k: it keeps none (made "
                           "without qkv)")
    if t.groups is not None:  # q and k of the pieces: the query's pieces, labelled
        return qk_pieces_data(t, layer, head, query, top=top)
    lq, lk = t.seq_len, t.key_len
    shape = t.score_shape(layer)
    g = head // (t.num_heads // t.num_kv_heads)
    q_row = t.layer_tensor("q", layer)[head, query]  # (d,), checked
    k = t.layer_tensor("k", layer)[g]  # (Lk, d), checked
    q = q_row.double()
    dots = k.double() @ q  # (Lk,)
    shaped = shape.scores(q_row[None], k, rows=[query], head=head,
                          lq=lq, lk=lk)[0]  # (Lk,) float32, -inf where hidden
    allowed = torch.isfinite(shaped)
    bias = shape.additive([query], head=head, lq=lq, lk=lk)  # ALiBi and dense bias
    if bias is not None:  # hidden keys (a bias of -inf among them) carry 0: JSON-safe
        bias = bias[0].masked_fill(~allowed, 0.0)
    w = t.weights_rows(layer, head, [query])[0].float()  # (Lk,)
    strongest = torch.topk(w, min(top, lk)).indices.tolist()
    own = query + (lk - lq)
    keys = sorted(set(strongest) | ({own} if 0 <= own < lk and bool(allowed[own]) else set()))
    sink = shape.sink_logits([query], head=head)
    return {"layer": layer, "head": head, "query": query, "scale": shape.scale,
            "softcap": shape.softcap, "sink": None if sink is None else float(sink[0]),
            "q": encode_blob(q.float(), "f32"),
            "dots": encode_blob(dots, "f64"), "allowed": encode_blob(allowed, "b8"),
            "bias": None if bias is None else encode_blob(bias, "f64"),
            "weights": encode_blob(w, "f32"), "keys": keys,
            "k": encode_blob(k[keys].float(), "f32")}


# --------------------------------------------------------------------------------------
# one request by its path and parameters (what the widget calls)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """One parameter of a request: its ``name``, its ``type`` (``int`` or ``str``) and its
    ``default`` (none when ``required``; a default of None makes it optional)."""

    name: str
    type: type
    default: Any = None
    required: bool = False


def _required(name: str, kind: type) -> Param:
    return Param(name, kind, required=True)


@dataclass(frozen=True)
class Endpoint:
    """A request the page sends: its parameters, as the server's route declares them, and
    the function that answers it (called as ``function(trace, **parameters)``)."""

    params: tuple[Param, ...]
    function: Callable[..., Answer]


_LAYER_HEAD = (_required("layer", int), _required("head", int))
#: Every request the page sends, by path (the part of the URL after ``/api/traces/{tid}/``).
ENDPOINTS: dict[str, Endpoint] = {
    "rows": Endpoint(_LAYER_HEAD + (_required("queries", str), Param("top", int, 0),
                                    Param("encoding", str, "b64")), rows_data),
    "tile": Endpoint(_LAYER_HEAD + (_required("rows", str), _required("cols", str),
                                    Param("encoding", str, "b64")), tile_data),
    "pooled": Endpoint(_LAYER_HEAD + (_required("block", int), Param("encoding", str, "b64")),
                       pooled_data),
    "topk": Endpoint(_LAYER_HEAD + (_required("query", int), Param("k", int, 10)), topk_data),
    "qk": Endpoint(_LAYER_HEAD + (_required("query", int), Param("top", int, 48)), qk_data),
    # the attribution view's (attnlab.viz.attribution_payload)
    "attribution/rows": Endpoint((_required("kind", str), _required("rows", str),
                                  Param("layer", int, None), Param("head", int, None),
                                  Param("encoding", str, "b64")), attribution_rows),
    "score_parts": Endpoint(_LAYER_HEAD + (_required("i", int), _required("j", int),
                                           Param("pairing", str, None)), score_parts_json),
}


def _typed(p: Param, value: Any) -> Any:
    """``value`` as ``p``'s type, read as a server reads a query string: an int from an int
    or its decimal text, a str from a str or an int (the page sends a query position as a
    number)."""
    if value is None and not p.required and p.default is None:
        return None
    if p.type is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value.strip()):
            return int(value)
        raise Refused(422, f"{p.name} must be an integer, got {value!r}")
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise Refused(422, f"{p.name} must be a string, got {value!r}")


def answer(trace: AttentionTrace, path: str, params: Mapping[str, Any]) -> Answer:
    """The answer to one request of the page: ``path`` (a key of :data:`ENDPOINTS`, e.g.
    ``"rows"``) with ``params`` as the page sends them (values as numbers or text); what
    the server's route of that path answers. A bad path, a missing, unknown or mistyped
    parameter, or a value out of range raises :class:`attnlab.Refused` naming it.

    >>> w = torch.softmax(torch.randn(1, 2, 4, 4), -1)
    >>> t = AttentionTrace(tokens=list("abcd"), weights=w)
    >>> got = answer(t, "rows", {"layer": 0, "head": 1, "queries": 2, "encoding": "list"})
    >>> got["queries"], torch.equal(torch.tensor(got["weights"]), w[0, 1, 2:3])
    ([2], True)
    >>> answer(t, "rows", {"layer": 0, "queries": 2})
    Traceback (most recent call last):
    ...
    attnlab.Refused: head is required for 'rows' (an integer), got none
    """
    if not isinstance(path, str) or path not in ENDPOINTS:
        raise Refused(404, f"path must be one of {sorted(ENDPOINTS)}, got {path!r}")
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise Refused(422, f"params must map parameter names to values, got "
                           f"{type(params).__name__}")
    ep = ENDPOINTS[path]
    names = [p.name for p in ep.params]
    unknown = sorted(set(params) - set(names))
    if unknown:
        raise Refused(422, f"{path!r} takes the parameters {names}; got unknown "
                           f"parameter(s) {unknown}")
    values = {}
    for p in ep.params:
        if p.name not in params:
            if p.required:
                what = "an integer" if p.type is int else "a string"
                raise Refused(422, f"{p.name} is required for {path!r} ({what}), got none")
            values[p.name] = p.default
        else:
            values[p.name] = _typed(p, params[p.name])
    return ep.function(trace, **values)  # the attribution functions refuse with Refused too
