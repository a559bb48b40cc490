"""The attention explorer: one self-contained HTML block built from an :class:`AttentionTrace`.

Python does the arithmetic that must be exact or that would be slow in the page, and hands
the page compact arrays; the page (``viz/static/explorer.js``, hand-written, inlined) draws
seven linked views: model (layers × heads), head (arcs), matrix (heatmap), QK (the
softmax(q·k·scale / T) of one query, recomputed live from q and k), geometry (queries and
keys in one 2-D projection), positional (the sinusoidal table and its rotations) and
diagnostics (the sortable head table of :mod:`attnlab.analysis`), and for an image trace an
eighth, the image view (the picture with the chosen query patch's attention over the patch
grid, prefix tokens listed apart).

An input may be a ``StackedTrace`` (encoder self-, decoder self- and cross-attention of an
encoder–decoder or speech model): the page then has a stack selector, and every view works
on the stack chosen, with its own queries and keys — cross-attention has the target tokens as
rows and the source tokens (or time positions) as columns; its QK and geometry views use the
cross stack's own q and k, and the diagnostics leave out the scores that compare query and
key positions (:data:`POSITION_SCORES`), which mean nothing across two texts.

Every weight comes from the trace's on-demand methods (``head_weights`` for short inputs,
rows by tiles through the diagnostics' pass for long ones); nothing here asks for the dense
``trace.weights``.

* **Short inputs** (at most ``max_tokens`` tokens): every weight of every head, and the q/k
  of the heads that fit ``qk_budget``, so the QK view recomputes any row in the page.
* **Long inputs**: every head as a *pooled* map — the mean over a block's queries of the
  sum over the block's keys, so pooled rows still sum to 1 (as :meth:`AttentionTrace.pooled`)
  — made in the one pass of :func:`attnlab.analysis.diagnose` that also scores the heads,
  with the block size chosen so that the page stays within ``page_budget`` bytes; the
  page adds a token strip to move through the input. Served by ``attnlab serve`` (``api``
  set), a click on a token or a block fetches the exact row or tile from the server
  (:mod:`attnlab.serve.trace_api`), and the QK view works for any query.

Encoding of the embedded data (``format_version`` 2)::

    weights   uint16, w·65535 rounded (|error| <= 7.7e-6), gzip, base64   (L, H, R, C);
              uint8 (|error| <= 2e-3) when uint16 does not fit the budget
    q, k      float32 when every stored head fits ``qk_budget`` bytes, else float16
              (the per-head max |Δp| that float16 storage causes is measured and shown);
              k per key/value head (grouped-query heads share one)
    geometry  float32 2-D points, queries then keys, per stored head
    pe        float32 sinusoidal table (positions × embed_dim)

Every string that reaches the page goes through :func:`json_for_html`, which escapes ``<``,
``>`` and ``&`` so that a token such as ``</script>`` cannot end the script element.

>>> import torch
>>> w = torch.softmax(torch.randn(1, 2, 3, 3), dim=-1)
>>> t = AttentionTrace(tokens=["a", "</script>", "c"], weights=w, model="toy")
>>> page = Explorer(t, uid="x0").to_html()
>>> page.count("</script>"), 'id="x0"' in page   # only the page's own three scripts close
(3, True)
"""

from __future__ import annotations

import base64
import gzip
import html
import json
import math
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from attnlab.core.positional import frequencies, sinusoidal_table
from attnlab.core.scores import ScoreShape
from attnlab.tracing.attention import AttentionTrace
from attnlab.viz.assets import static_asset

__all__ = ["VIEWS", "IMAGE_VIEW", "STACK_NAMES", "Explorer", "ExplorerConfig", "json_for_html",
           "static_asset", "explore", "decode_blob", "block_spans", "coarsen_pooled",
           "qk_row_probs", "sink_logits", "input_stacks", "image_input", "is_cross",
           "POSITION_SCORES"]

FORMAT_VERSION = 2
VIEWS = ("model", "head", "matrix", "qk", "geometry", "positional", "diagnostics")
#: The view that overlays a query patch's attention on the image (image traces only).
IMAGE_VIEW = "image"
#: Attention stacks in the order the stack selector lists them (then any other name).
STACK_NAMES = ("self", "encoder", "decoder", "cross")
#: Diagnostics that read a query's position against its keys' (first token, previous, own
#: token, distance, repeats): they mean nothing when queries and keys are different
#: sequences (cross-attention), so the explorer leaves them out there.
POSITION_SCORES = ("sink", "previous", "diagonal", "distance", "duplicate", "induction",
                   "repeat_induction")
_POSITION_ROLES = ("sink", "previous-token", "self", "induction")


@dataclass(frozen=True)
class ExplorerConfig:
    """How much of a trace goes into the page."""

    max_tokens: int = 256  # up to this many tokens the page holds every weight; above: pooled
    pooled_blocks: int = 128  # pooled maps have at most this many blocks per side
    page_budget: int = 3_000_000  # bytes of the whole page: long inputs get coarser blocks
    qk_budget: int = 1_600_000  # bytes of q and k per trace: keeps 6×12 heads × 128 tokens < 3 MB
    weights_budget: int = 1_000_000  # short inputs: maps up to this many bytes as uint16
    pe_positions: int = 128  # rows of the sinusoidal table in the positional view
    pe_dim: int = 64  # embed_dim of that table: 32 (sin, cos) pairs
    view: str = "model"  # the view the page opens on

    def __post_init__(self) -> None:
        for name in ("max_tokens", "pooled_blocks", "pe_positions", "pe_dim"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 2:
                raise ValueError(f"ExplorerConfig.{name} must be an int >= 2, got {v!r}")
        if self.pe_dim % 2:
            raise ValueError(f"ExplorerConfig.pe_dim must be even, got {self.pe_dim}")
        for name in ("qk_budget", "weights_budget", "page_budget"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"ExplorerConfig.{name} must be an int >= 0, got {v!r}")
        if self.view not in VIEWS + (IMAGE_VIEW,):
            raise ValueError(f"ExplorerConfig.view must be one of {VIEWS + (IMAGE_VIEW,)}, "
                             f"got {self.view!r}")


# --------------------------------------------------------------------------------------
# encoding
# --------------------------------------------------------------------------------------


def json_for_html(obj: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``.

    >>> json_for_html({"t": "</script><b>&"})
    '{"t": "\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e\\\\u0026"}'
    """
    s = json.dumps(obj, ensure_ascii=False, allow_nan=False)
    return (s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


_KINDS = {"u8": "u1", "u16": "<u2", "f16": "<f2", "f32": "<f4", "f64": "<f8", "b8": "u1"}


def encode_blob(t: Tensor, dtype: str, *, gz: bool = False) -> dict[str, Any]:
    """A tensor as little-endian bytes, optionally gzipped, in base64 (what the page reads).

    ``u8``/``u16`` store values in [0, 1] as fractions of 255/65535; ``b8`` stores bools;
    ``f16``/``f32``/``f64`` store floats.

    >>> b = encode_blob(torch.tensor([0.0, 0.5, 1.0]), "u16")
    >>> b["shape"], decode_blob(b).tolist()
    ([3], [0.0, 0.5000076295109483, 1.0])
    """
    if dtype not in _KINDS:
        raise ValueError(f"dtype must be one of {sorted(_KINDS)}, got {dtype!r}")
    t = t.detach().to("cpu").contiguous()
    if dtype == "u16":
        raw = (t.float().clamp(0, 1) * 65535).round().to(torch.int32).numpy().astype("<u2")
    elif dtype == "u8":
        raw = (t.float().clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    elif dtype == "b8":
        raw = t.to(torch.bool).to(torch.uint8).numpy()
    elif dtype == "f16":
        raw = t.to(torch.float16).numpy().astype("<f2")
    elif dtype == "f32":
        raw = t.to(torch.float32).numpy().astype("<f4")
    else:
        raw = t.to(torch.float64).numpy().astype("<f8")
    data = raw.tobytes()
    if gz:
        data = gzip.compress(data, compresslevel=6, mtime=0)
    return {"dtype": dtype, "gz": gz, "shape": list(t.shape),
            "b64": base64.b64encode(data).decode("ascii")}


def decode_blob(blob: dict[str, Any]) -> Tensor:
    """Inverse of :func:`encode_blob` (tests and tools): float64 values as the page sees them."""
    data = base64.b64decode(blob["b64"])
    if blob["gz"]:
        data = gzip.decompress(data)
    arr = np.frombuffer(data, dtype=_KINDS[blob["dtype"]]).astype("float64")
    if blob["dtype"] in ("u8", "u16"):
        arr = arr / (255.0 if blob["dtype"] == "u8" else 65535.0)
    return torch.from_numpy(arr.copy()).reshape(blob["shape"])


#: Largest |error| of each map encoding (half a quantization step).
QUANTIZATION_ERROR = {"u16": 0.5 / 65535, "u8": 0.5 / 255}


# --------------------------------------------------------------------------------------
# pooled maps
# --------------------------------------------------------------------------------------


def block_spans(n: int, size: int) -> list[tuple[int, int]]:
    """``[(0, size), (size, 2·size), ..., (.., n)]``: blocks of ``size`` tokens, last one short.

    >>> block_spans(10, 4)
    [(0, 4), (4, 8), (8, 10)]
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be a positive int, got {size!r}")
    return [(s, min(s + size, n)) for s in range(0, n, size)]


def coarsen_pooled(pooled: Tensor, row_spans: Sequence[tuple[int, int]],
                   col_spans: Sequence[tuple[int, int]], factor: int
                   ) -> tuple[Tensor, list[tuple[int, int]], list[tuple[int, int]]]:
    """Pooled maps (..., R, C) over blocks ``factor`` times larger, exactly.

    A pooled block is the mean over its queries of the sum over its keys, so merging
    blocks sums the key blocks and averages the query blocks *weighted by their number of
    queries* (the last block may be short). Returns the maps and the merged spans.

    >>> w = torch.softmax(torch.randn(6, 6), -1)
    >>> fine = torch.stack([torch.stack([w[a:b, c:d].sum(-1).mean() for c, d in
    ...     block_spans(6, 1)]) for a, b in block_spans(6, 1)])
    >>> p, rows, cols = coarsen_pooled(fine, block_spans(6, 1), block_spans(6, 1), 4)
    >>> rows, bool(torch.allclose(p[1, 0], w[4:, :4].sum(-1).mean()))
    ([(0, 4), (4, 6)], True)
    """
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise ValueError(f"factor must be a positive int, got {factor!r}")
    if pooled.shape[-2:] != (len(row_spans), len(col_spans)):
        raise ValueError(f"pooled has shape {tuple(pooled.shape)}, expected (..., "
                         f"{len(row_spans)}, {len(col_spans)}) for the spans given")
    p = pooled.double()
    groups_c = [list(range(g, min(g + factor, len(col_spans))))
                for g in range(0, len(col_spans), factor)]
    groups_r = [list(range(g, min(g + factor, len(row_spans))))
                for g in range(0, len(row_spans), factor)]
    by_key = torch.stack([p[..., g].sum(-1) for g in groups_c], dim=-1)  # (..., R, C')
    counts = torch.tensor([b - a for a, b in row_spans], dtype=torch.float64)
    rows = []
    for g in groups_r:
        w = counts[g] / counts[g].sum()
        rows.append((by_key[..., g, :] * w[:, None]).sum(-2))
    out = torch.stack(rows, dim=-2).to(pooled.dtype)
    merge = lambda spans, groups: [(spans[g[0]][0], spans[g[-1]][1]) for g in groups]  # noqa: E731
    return out, merge(row_spans, groups_r), merge(col_spans, groups_c)


def _block_label(tokens: Sequence[str], a: int, b: int) -> str:
    first = tokens[a].strip() or tokens[a]
    return f"{a}–{b - 1} {first}…" if b - a > 1 else tokens[a]


# --------------------------------------------------------------------------------------
# score shaping, as the page recomputes it
# --------------------------------------------------------------------------------------


def qk_row_probs(q_rows: Tensor, k: Tensor, shape: ScoreShape, *, rows: Sequence[int],
                 lq: int, lk: int, head: int = 0, scale: float | None = None,
                 temperature: float = 1.0) -> Tensor:
    """(R, Lk) float64 softmax rows as the QK view computes them, at any scale and temperature.

    ``z = scale·q·k`` (float64), soft-capped, ALiBi and dense bias added, hidden keys at
    −∞, divided by ``temperature``; a learned sink logit (divided by ``temperature`` too)
    joins the softmax and takes its share away from every key. At the trace's own scale and
    temperature 1 this is the model's attention (the trace's ``weights_rows``) to float32 rounding.

    >>> s = ScoreShape(scale=0.5, causal=True)
    >>> p = qk_row_probs(torch.eye(2), torch.eye(2), s, rows=[0, 1], lq=2, lk=2)
    >>> [round(x, 6) for x in p[1].tolist()], p[0].tolist()  # sigmoid(0.5); causal row 0
    ([0.377541, 0.622459], [1.0, 0.0])
    """
    scale = shape.scale if scale is None else float(scale)
    r = torch.as_tensor(list(rows), dtype=torch.long)
    z = (q_rows.double() @ k.double().T) * scale  # (R, Lk)
    if shape.softcap is not None:
        z = torch.tanh(z / shape.softcap) * shape.softcap
    if shape.alibi_slopes is not None:
        pos_q = (r + (lk - lq))[:, None]
        z = z - float(shape.alibi_slopes[head]) * (pos_q - torch.arange(lk)[None, :]).double()
    if shape.bias is not None:
        b = shape.bias[head if shape.bias.shape[0] > 1 else 0].double()
        b = b[r] if b.shape[0] > 1 else b
        z = z + b
    keep = shape.visible(r, None, lq=lq, lk=lk)
    z = z / temperature
    if keep is not None:
        z = z.masked_fill(~keep, float("-inf"))
    sink = sink_logits(shape, head, r)
    if sink is not None:  # a learned logit joins the softmax, its share goes to no key
        z = torch.cat([z, sink.double()[:, None] / temperature], dim=-1)
        return torch.softmax(z, dim=-1)[:, :-1]
    p = torch.softmax(z, dim=-1)
    return torch.nan_to_num(p, nan=0.0)  # a row with no visible key: zeros


def sink_logits(shape: ScoreShape, head: int, rows: Tensor) -> Tensor | None:
    """(R,) the sink logit of ``head`` for each query row (one per head, or one per head
    and row), or None when the model has none."""
    if shape.sinks is None:
        return None
    s = shape.sinks[head]
    return s.expand(rows.shape[0]) if s.dim() == 0 else s[rows]


def _shape_payload(trace: AttentionTrace) -> dict[str, Any]:
    """The score-shaping rules per layer, as the page applies them (one row at a time)."""
    shapes = trace.shapes
    if not shapes:  # dense weights only: the page has no q/k to shape anyway
        return {"scale": [trace.scale] * trace.num_layers, "causal": bool(trace.causal),
                "window": None, "softcap": None, "alibi": None, "key_mask": None,
                "bias": False, "sinks": None}
    km = shapes[0].key_mask
    if any((s.key_mask is None) != (km is None) or
           (km is not None and not torch.equal(s.key_mask, km)) for s in shapes):
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


# --------------------------------------------------------------------------------------
# inputs: one trace, or several attention stacks of one input; images
# --------------------------------------------------------------------------------------


def _stacked_class() -> type | None:
    try:
        from attnlab.tracing.stacks import StackedTrace
    except ImportError:  # a tracing package without several-stack traces
        return None
    return StackedTrace


def _is_stacked(obj: Any) -> bool:
    cls = _stacked_class()
    if cls is not None and isinstance(obj, cls):
        return True
    return (isinstance(obj, Mapping) and len(obj) > 0
            and all(isinstance(v, AttentionTrace) for v in obj.values()))


def _stack_name(trace: AttentionTrace) -> str:
    return str(getattr(trace, "stack", None) or "self")


def input_stacks(obj: Any) -> tuple[dict[str, Any], list[tuple[str, AttentionTrace]]]:
    """What the explorer shows of one input: ``(about, [(stack name, trace), ...])``.

    ``obj`` is an :class:`AttentionTrace` (one stack, named by its ``stack``, ``"self"`` by
    default) or a ``StackedTrace`` / mapping name → AttentionTrace (encoder, decoder and
    cross-attention of one input, in the order given). ``about`` holds the model, the text,
    the target text and ``meta["input"]`` (what kind of input: text, image, audio).

    >>> w = torch.softmax(torch.randn(1, 1, 2, 3), -1)
    >>> cross = AttentionTrace(tokens=["x", "y"], key_tokens=list("abc"), weights=w)
    >>> about, stacks = input_stacks({"cross": cross})
    >>> [name for name, _ in stacks], about["model"]
    (['cross'], '')
    """
    if isinstance(obj, AttentionTrace):
        return ({"model": obj.model, "text": obj.text, "target": None,
                 "input": obj.meta.get("input")}, [(_stack_name(obj), obj)])
    if not _is_stacked(obj):
        raise TypeError(f"each input must be an AttentionTrace or a StackedTrace (a mapping "
                        f"of stack name to AttentionTrace), got {type(obj).__name__}")
    stacks = [(str(name), t) for name, t in obj.items()]
    first = stacks[0][1]
    meta = getattr(obj, "meta", None) or {}
    return ({"model": str(getattr(obj, "model", "") or first.model),
             "text": getattr(obj, "text", None) if hasattr(obj, "text") else first.text,
             "target": getattr(obj, "target", None), "input": meta.get("input")}, stacks)


def is_cross(trace: AttentionTrace) -> bool:
    """True when the queries and keys of ``trace`` are different sequences (cross-attention:
    the stack is ``"cross"``, or the key tokens do not end with the query tokens), so
    scores that compare a query's position with its keys' do not apply.

    >>> w = torch.softmax(torch.randn(1, 1, 2, 3), -1)
    >>> is_cross(AttentionTrace(tokens=["x", "y"], key_tokens=list("abc"), weights=w))
    True
    >>> is_cross(AttentionTrace(tokens=["b", "c"], key_tokens=list("abc"), weights=w))
    False
    """
    if _stack_name(trace) == "cross":
        return True
    keys = trace.key_tokens
    return keys is not None and list(keys[len(keys) - len(trace.tokens):]) != trace.tokens


def image_input(trace: AttentionTrace) -> dict[str, Any] | None:
    """The image a vision trace saw, checked against its tokens, as the page draws it:
    ``{"grid": [rows, cols], "prefix": n, "patch_size", "image_size", "png", "path",
    "prefix_tokens"}``; ``None`` for a trace of anything else.

    ``trace.meta["input"]`` must say ``kind == "image"``; the patches are the tokens after
    the ``prefix`` ones, row-major, ``rows × cols`` of them, queries and keys alike.
    ``ValueError`` (naming the field) when the description does not fit the trace.
    """
    info = trace.meta.get("input")
    if not isinstance(info, Mapping) or info.get("kind") != "image":
        return None

    def bad(field: str, want: str, got: object) -> ValueError:
        return ValueError(f"trace.meta['input']['{field}'] must be {want}, got {got!r}")

    grid, prefix, png = info.get("grid"), info.get("prefix", 0), info.get("image_png")
    if (not isinstance(grid, Sequence) or len(grid) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in grid)):
        raise bad("grid", "[rows, cols] of positive ints", grid)
    if isinstance(prefix, bool) or not isinstance(prefix, int) or prefix < 0:
        raise bad("prefix", "an int >= 0", prefix)
    n = prefix + grid[0] * grid[1]
    if trace.seq_len != n or trace.key_len != n:
        raise bad("grid", f"a grid whose patches plus the prefix ({prefix}) are the trace's "
                  f"{trace.seq_len} queries and {trace.key_len} keys", grid)
    if not isinstance(png, str):
        raise bad("image_png", "a base64 PNG", type(png).__name__)
    try:
        head = base64.b64decode(png[:24], validate=True)
    except ValueError:
        head = b""
    if not head.startswith(b"\x89PNG"):
        raise bad("image_png", "a base64 PNG", png[:16] + "…")
    size = info.get("image_size")
    return {"grid": [int(grid[0]), int(grid[1])], "prefix": prefix,
            "patch_size": info.get("patch_size"),
            "image_size": None if size is None else [int(x) for x in size],
            "png": png, "path": str(info.get("path") or ""),
            "prefix_tokens": list(trace.tokens[:prefix])}


# --------------------------------------------------------------------------------------
# what Python computes for the page
# --------------------------------------------------------------------------------------


def _diagnostics(trace: AttentionTrace, progress: bool) -> tuple[dict[str, Any], Tensor, int]:
    """The head table of :func:`attnlab.analysis.diagnose` (columns, one row per head), and
    the pooled maps its one pass over the weights made, with their block size: the page's
    maps come from that same pass, so every weight is computed once.

    For cross-attention (:func:`is_cross`) the scores and roles that compare positions of
    queries and keys (:data:`POSITION_SCORES`) are left out: the two are different texts.
    """
    from attnlab.analysis import diagnose

    diag = diagnose(trace, progress=progress)
    rows = diag.rows()
    cross = is_cross(trace)
    for r in rows:
        roles = r["roles"]
        if cross:
            roles = [x for x in roles if x not in _POSITION_ROLES]
            for name in POSITION_SCORES:
                r.pop(name, None)
        r["roles"] = ", ".join(roles)
    columns = list(rows[0]) if rows else []
    block = int(diag.meta.get("similarity_block", 0))
    return {"columns": columns, "rows": rows}, diag.pooled, block


def _qk_heads(trace: AttentionTrace, budget: int, first: tuple[int, int]) -> tuple[list, str]:
    """Which heads get their q/k stored, and in which dtype."""
    nl, nh = trace.num_layers, trace.num_heads
    per_head = trace.seq_len * trace.head_dim + trace.key_len * trace.head_dim
    order = [first] + [(l_, h) for l_ in range(nl) for h in range(nh) if (l_, h) != first]
    if per_head * 4 * len(order) <= budget:
        return order, "f32"
    n = min(len(order), budget // (per_head * 2))
    return order[: max(n, 1)], "f16"


def _top2(c: Tensor | np.ndarray, squarings: int = 5, iters: int = 6) -> Tensor:
    """(S, d, 2) leading eigenvectors of symmetric PSD (S, d, d) by subspace iteration.

    Plain small matmuls (numpy) instead of LAPACK: hundreds of tiny eigensolves are instant
    this way on a busy machine, and deterministic (fixed start).
    """
    c = np.asarray(c, dtype=np.float64)
    s, d, _ = c.shape
    v = np.zeros((s, d, 2))
    v[:, :, 0] = 1.0
    v[:, 1::2, 1] = 1.0
    v[:, 0, 1] = -1.0 if d > 1 else 0.0

    def trace(m: np.ndarray) -> np.ndarray:
        return np.maximum(np.trace(m, axis1=1, axis2=2), 1e-300)[:, None, None]

    p = c / trace(c)
    for _ in range(squarings):  # p = c^(2^squarings), normalised: same eigenvectors
        p = p @ p
        p = p / trace(p)
    for _ in range(iters):
        v = p @ v
        a = v[..., 0] / np.maximum(np.linalg.norm(v[..., 0], axis=-1, keepdims=True), 1e-300)
        b = v[..., 1] - (a * v[..., 1]).sum(-1, keepdims=True) * a
        b = b / np.maximum(np.linalg.norm(b, axis=-1, keepdims=True), 1e-300)
        v = np.stack([a, b], axis=-1)
    return torch.from_numpy(v)


def _geometry(q: Tensor, k: Tensor) -> Tensor:
    """(S, Lq + Lk, 2) joint 2-D projection of each head's queries and keys (AttentionViz).

    Softmax over keys ignores a shift shared by all keys (q·(k+c) adds q·c to a whole row),
    and q·k is unchanged by q→αq, k→k/α. So keys are translated onto the queries' centroid
    and both clouds rescaled to the same mean norm before one PCA: the picture then shows
    which keys a query is near, not the offset between the two clouds.
    """
    q = q.detach().double().numpy()  # (S, Lq, d)
    k = k.detach().double().numpy()  # (S, Lk, d)
    k = k - k.mean(1, keepdims=True) + q.mean(1, keepdims=True)
    qn = np.maximum(np.linalg.norm(q, axis=-1).mean(-1), 1e-12)  # (S,)
    kn = np.maximum(np.linalg.norm(k, axis=-1).mean(-1), 1e-12)
    alpha = np.sqrt(kn / qn)[:, None, None]
    x = np.concatenate([q * alpha, k / alpha], axis=1)  # (S, Lq + Lk, d)
    x = x - x.mean(1, keepdims=True)
    xy = x @ _top2(x.transpose(0, 2, 1) @ x).numpy()  # (S, Lq + Lk, 2)
    m = np.maximum(np.abs(xy).reshape(len(xy), -1).max(-1), 1e-12)[:, None, None]
    return torch.from_numpy(xy / m).float()


def _qk_payload(trace: AttentionTrace, heads: list[tuple[int, int]], dtype: str) -> dict:
    """q of each stored head, k of each key/value head they use, geometry, f16 error."""
    group = trace.num_heads // trace.num_kv_heads
    kv = list(dict.fromkeys((l_, h // group) for l_, h in heads))  # first use first
    k_of = [kv.index((l_, h // group)) for l_, h in heads]
    q = torch.stack([trace.q[l_, h] for l_, h in heads]).float()  # (S, Lq, d)
    k = torch.stack([trace.k[l_, g] for l_, g in kv]).float()  # (S_kv, Lk, d)
    lq, lk = trace.seq_len, trace.key_len
    err = [0.0] * len(heads)
    if dtype == "f16":  # what float16 storage costs, measured: max |Δp| per head
        rows = list(range(lq))
        for n, (l_, h) in enumerate(heads):
            shape = trace.score_shape(l_)
            exact = qk_row_probs(q[n], k[k_of[n]], shape, rows=rows, lq=lq, lk=lk, head=h)
            stored = qk_row_probs(q[n].half().float(), k[k_of[n]].half().float(), shape,
                                  rows=rows, lq=lq, lk=lk, head=h)
            err[n] = float((exact - stored).abs().max())
    geo = _geometry(q, k[k_of])
    return {"heads": [list(x) for x in heads], "kv_heads": [list(x) for x in kv],
            "k_of": k_of, "dtype": dtype, "q": encode_blob(q, dtype, gz=True),
            "k": encode_blob(k, dtype, gz=True), "storage_error": err,
            "geometry": encode_blob(geo, "f32", gz=True)}


_PAGE_FRAME = 2000  # bytes of the page around the data, CSS and JS (head, CSP, wrappers)


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8"))


def _maps_blob(maps: Tensor, budget: int) -> dict[str, Any]:
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


def _pooled_maps(trace: AttentionTrace, row_block: int, col_block: int) -> Tensor:
    """(L, H, nq, nk) pooled maps in blocks of ``row_block`` queries × ``col_block`` keys:
    the mean over a block's queries of the sum over its keys (rows still sum to 1), one
    head at a time, tiles of rows (never a dense head larger than a tile).

    >>> w = torch.softmax(torch.randn(1, 1, 3, 5), -1)
    >>> t = AttentionTrace(tokens=list("xyz"), key_tokens=list("abcde"), weights=w)
    >>> p = _pooled_maps(t, 1, 2)
    >>> p.shape, bool(torch.allclose(p[0, 0, 1, 2], w[0, 0, 1, 4].double()))
    (torch.Size([1, 1, 3, 3]), True)
    """
    nl, nh, lq, lk = trace.num_layers, trace.num_heads, trace.seq_len, trace.key_len
    rows, cols = block_spans(lq, row_block), block_spans(lk, col_block)
    col_of = torch.arange(lk) // col_block
    counts = torch.tensor([b - a for a, b in rows], dtype=torch.float64)
    out = torch.zeros(nl, nh, len(rows), len(cols), dtype=torch.float64)
    for layer in range(nl):
        for head in range(nh):
            for r0, r1, w in trace.iter_row_tiles(layer, head):
                by_key = torch.zeros(r1 - r0, len(cols), dtype=torch.float64)
                by_key.index_add_(1, col_of, w.double())
                out[layer, head].index_add_(0, torch.arange(r0, r1) // row_block, by_key)
    return out / counts[:, None]


def _fit_pooled(trace: AttentionTrace, cfg: ExplorerConfig, room: int, maps: Tensor,
                base: int, col_base: int | None = None
                ) -> tuple[dict[str, Any], list[tuple[int, int]], list[tuple[int, int]]]:
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


def _trace_payload(trace: AttentionTrace, cfg: ExplorerConfig, first: tuple[int, int],
                   api: str | None, room: int, progress: bool = False) -> dict:
    nl, nh, lq, lk = trace.num_layers, trace.num_heads, trace.seq_len, trace.key_len
    keys = trace.key_tokens
    pooled = max(lq, lk) > cfg.max_tokens
    shape = _shape_payload(trace)
    image = image_input(trace)
    payload: dict[str, Any] = {
        "stack": _stack_name(trace), "cross": is_cross(trace), "image": image,
        "model": trace.model, "text": (trace.text or "")[:200], "causal": bool(trace.causal),
        "L": nl, "H": nh, "H_kv": trace.num_kv_heads, "Lq": lq, "Lk": lk,
        "d": trace.head_dim, "scale": shape.pop("scale"), "shape": shape,
        "tokens": list(trace.tokens), "key_tokens": None if keys is None else list(keys),
        "pooled": pooled, "max_tokens": cfg.max_tokens, "api": api,
        "diagnostics": None, "qk": None, "qk_missing": None,
    }
    payload["diagnostics"], given_maps, given_block = _diagnostics(trace, progress)
    if trace.groups is not None:  # q and k belong to the pieces, not to these tokens
        payload["qk_missing"] = "merged"
    elif not trace.has_qk:
        payload["qk_missing"] = "none"
    elif pooled:
        payload["qk_missing"] = "long"
    elif shape["bias"]:
        payload["qk_missing"] = "bias"
    else:
        heads, dtype = _qk_heads(trace, cfg.qk_budget, first)
        payload["qk"] = _qk_payload(trace, heads, dtype)
        payload["qk_missing"] = "budget"
    if pooled:
        keys = keys if keys is not None else trace.tokens

        def blocks(rows: list[tuple[int, int]], cols: list[tuple[int, int]]) -> dict:
            return {"row_blocks": [list(r) for r in rows], "col_blocks": [list(c) for c in cols],
                    "rows": [_block_label(trace.tokens, a, b) for a, b in rows],
                    "cols": [_block_label(keys, a, b) for a, b in cols]}

        rb, cb = _row_col_blocks(trace, cfg)
        labels = blocks(block_spans(lq, rb), block_spans(lk, cb))  # the most there can be
        other = _nbytes(json_for_html(payload)) + _nbytes(json_for_html(labels)) + 200
        if rb == cb:
            blob, rows, cols = _fit_pooled(trace, cfg, max(room - other, 0), given_maps,
                                           given_block)
        else:
            blob, rows, cols = _fit_pooled(trace, cfg, max(room - other, 0),
                                           _pooled_maps(trace, rb, cb), rb, cb)
        payload.update({"block": rows[0][1] - rows[0][0], "col_block": cols[0][1] - cols[0][0],
                        "weights": blob, **blocks(rows, cols)})
    else:
        if given_block == 1 and tuple(given_maps.shape) == (nl, nh, lq, lk):
            maps = given_maps.float()  # blocks of one token: the exact weights, same pass
        else:
            maps = torch.stack([torch.stack([trace.head_weights(l_, h).float()
                                             for h in range(nh)]) for l_ in range(nl)])
        payload.update({"block": 1, "col_block": 1,
                        "weights": _maps_blob(maps, cfg.weights_budget),
                        "row_blocks": None, "col_blocks": None, "rows": None, "cols": None})
    payload["weights_error"] = QUANTIZATION_ERROR[payload["weights"]["dtype"]]
    return payload


def explore(model: Any, texts: str | Sequence[str], *,
            target: str | Sequence[str | None] | None = None,
            config: ExplorerConfig | None = None, truncate: bool = False,
            progress: bool = False) -> Explorer:
    """Trace each text through ``model`` (a name, path or loaded model) into one Explorer.

    The model is loaded once (:func:`attnlab.models.load` keeps it per process).
    ``target``: for an encoder–decoder model, the target text of each text (one str for a
    single text, or one str or None per text; None: the model's own generation); each
    input is then a ``StackedTrace`` with its stack selector.
    ``progress``: progress bars on stderr while tracing and while the page's one pass over
    the weights runs (the page is built here, so that ``save`` only writes it).
    """
    from attnlab.tracing.tracer import trace

    if isinstance(texts, str):
        texts = [texts]
    if not texts:
        raise ValueError("texts must hold at least one text, got none")
    targets = [target] if target is None or isinstance(target, str) else list(target)
    if len(targets) == 1 and len(texts) > 1 and targets[0] is None:
        targets = targets * len(texts)
    if len(targets) != len(texts) or not all(x is None or isinstance(x, str) for x in targets):
        raise ValueError(f"target must be one str or None per text ({len(texts)}), got "
                         f"{target!r}")
    if isinstance(model, (str, os.PathLike)):
        from attnlab.models import load

        model = load(model, progress=False)
    traces = [trace(model, t, truncate=truncate, progress=progress) if g is None else
              trace(model, t, target=g, truncate=truncate, progress=progress)
              for t, g in zip(texts, targets)]
    ex = Explorer(traces, config=config)
    ex.payload(progress=progress)
    return ex


@cache
def _pe_payload(n: int, d: int) -> dict[str, Any]:
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


# --------------------------------------------------------------------------------------
# the Explorer object
# --------------------------------------------------------------------------------------


class Explorer:
    """An interactive view of one or more inputs (e.g. two sentences on one model).

    Each input is an :class:`AttentionTrace` or a ``StackedTrace`` (encoder self-, decoder
    self- and cross-attention of one input), which the page shows with a stack selector;
    cross-attention has the target tokens as rows and the source tokens as columns. An
    image trace (``meta["input"]["kind"] == "image"``) adds the image view: the image with
    the chosen query's attention over its patches. Several traces on one page share the
    ``qk_budget`` and ``weights_budget`` of :class:`ExplorerConfig`.

    ``to_html()`` is a self-contained fragment (CSS, JS and data inline; ids from ``uid``),
    shown inline in Jupyter through ``_repr_html_``; ``save(path)`` writes a whole page.
    Nothing in either makes a network request. ``api`` (one URL prefix per trace, one per
    stack of a several-stack input, or None) is set by the server only: the page then
    fetches exact rows and tiles from it.
    """

    def __init__(self, traces: Any, *,
                 config: ExplorerConfig | None = None, uid: str | None = None,
                 layer: int = 0, head: int = 0,
                 api: Sequence[str | None] | None = None, stack: str | None = None) -> None:
        if isinstance(traces, AttentionTrace) or _is_stacked(traces):
            traces = [traces]
        items = list(traces) if isinstance(traces, Sequence) else []
        ok = [isinstance(t, AttentionTrace) or _is_stacked(t) for t in items]
        if not items or not all(ok):
            got = [type(t).__name__ for t in items] or type(traces).__name__
            raise TypeError(f"traces must be an AttentionTrace, a StackedTrace or a non-empty "
                            f"list of them, got {got}")
        #: one entry per input: (about, [(stack name, trace), ...]) (see input_stacks)
        self.inputs = [input_stacks(t) for t in items]
        #: every stack of every input, in page order (what ``api`` gives one prefix each)
        self.traces = [t for _, stacks in self.inputs for _, t in stacks]
        self.config = config or ExplorerConfig()
        if not isinstance(self.config, ExplorerConfig):
            raise TypeError(f"config must be an ExplorerConfig, got {type(config).__name__}")
        names = [name for name, _ in self.inputs[0][1]]
        if stack is not None and stack not in names:
            raise ValueError(f"stack must be one of the first input's stacks {names}, got "
                             f"{stack!r}")
        #: the stack the page opens on (of the first input)
        self.stack = stack if stack is not None else names[0]
        t0 = self.inputs[0][1][names.index(self.stack)][1]
        if not (0 <= layer < t0.num_layers and 0 <= head < t0.num_heads):
            raise ValueError(f"layer, head must lie in [0, {t0.num_layers}) x [0, "
                             f"{t0.num_heads}), got ({layer}, {head})")
        api = [None] * len(self.traces) if api is None else list(api)
        if len(api) != len(self.traces) or not all(a is None or isinstance(a, str) for a in api):
            raise ValueError(f"api must hold one URL prefix (str or None) per trace, one per "
                             f"stack of a several-stack input ({len(self.traces)}), got {api!r}")
        self.layer, self.head, self.api = layer, head, api
        self.uid = uid or f"ax-{uuid.uuid4().hex[:12]}"
        self._payload: dict[str, Any] | None = None

    def payload(self, progress: bool = False) -> dict[str, Any]:
        """Everything the page receives, as a JSON-ready dict (computed once, then kept).

        ``progress``: show a progress bar on stderr over the one pass that reads every
        weight (diagnostics and pooled maps together).
        """
        if self._payload is None:
            cfg = self.config
            fixed = _nbytes(static_asset("explorer.js")) + _nbytes(static_asset("explorer.css"))
            pe = _pe_payload(cfg.pe_positions, cfg.pe_dim)
            n = len(self.traces)  # several traces share the q/k and weights budgets
            each = replace(cfg, qk_budget=cfg.qk_budget // n,
                           weights_budget=cfg.weights_budget // n)
            inputs, t_index = [], 0
            for about, stacks in self.inputs:
                media = about["input"] if isinstance(about["input"], Mapping) else None
                media = None if media is None else {
                    k: v for k, v in media.items() if k != "image_png"}
                inputs.append({"model": about["model"], "text": (about["text"] or "")[:200],
                               "target": None if about["target"] is None
                               else str(about["target"])[:200], "media": media,
                               "stacks": [{"name": name, "t": t_index + n}
                                          for n, (name, _) in enumerate(stacks)]})
                t_index += len(stacks)
            room = (cfg.page_budget - fixed - _PAGE_FRAME - _nbytes(json_for_html(pe))
                    - _nbytes(json_for_html(inputs))
                    - _nbytes(json_for_html(math_payload()))) // len(self.traces)
            self._payload = {
                "format_version": FORMAT_VERSION,
                "uid": self.uid,
                "view": cfg.view,
                "layer": self.layer, "head": self.head, "stack": self.stack,
                "inputs": inputs,
                "traces": [_trace_payload(t, each, self._first_head(t), a, room, progress)
                           for t, a in zip(self.traces, self.api)],
                "pe": pe,
                "math": math_payload(),
            }
        self._payload["uid"] = self.uid
        return self._payload

    def _first_head(self, trace: AttentionTrace) -> tuple[int, int]:
        """The head whose q/k a page keeps first: the one it opens on, where ``trace`` has
        it (stacks differ in layers and heads), else (0, 0)."""
        if self.layer < trace.num_layers and self.head < trace.num_heads:
            return self.layer, self.head
        return 0, 0

    def to_html(self) -> str:
        """The fragment: ``<div id=uid>`` + data + inline CSS and JS + a boot call."""
        uid = html.escape(self.uid, quote=True)
        data = json_for_html(self.payload())
        return (
            f'<div class="attnlab-explorer" id="{uid}" data-format-version="{FORMAT_VERSION}">'
            f'<noscript>attnlab explorer: JavaScript is needed to draw the views. '
            f'需要 JavaScript 才能绘制各个视图。</noscript>'
            f'<div class="ax-loading">attnlab explorer…</div></div>'
            f'<script type="application/json" id="{uid}-data">{data}</script>'
            f"<style>{static_asset('explorer.css')}</style>"
            f"<script>{static_asset('explorer.js')}</script>"
            f'<script>window.AttnlabExplorer.mount("{uid}");</script>'
        )

    def _repr_html_(self) -> str:
        return self.to_html()

    def to_page(self, title: str | None = None, *, connect_self: bool = False) -> str:
        """A whole HTML document around :meth:`to_html` (strict CSP: nothing external;
        ``connect_self`` lets the page fetch from the server that sent it)."""
        model = self.inputs[0][0]["model"]
        title = title or f"attnlab explorer · {model or 'trace'}"
        connect = " connect-src 'self';" if connect_self else ""
        return (
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\';'
            f"{connect} img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\n"
            f"<title>{html.escape(title)}</title>\n"
            "<style>body{margin:0;padding:16px;background:#fbfbfd;}</style>\n</head>\n<body>\n"
            f"{self.to_html()}\n</body>\n</html>\n"
        )

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the whole page to ``path`` atomically; returns the path."""
        from attnlab._io import atomic_write_text

        path = Path(path)
        if path.suffix.lower() not in (".html", ".htm"):
            raise ValueError(f"path must end in .html, got {str(path)!r}")
        atomic_write_text(path, self.to_page())
        umask = os.umask(0)
        os.umask(umask)
        path.chmod(0o666 & ~umask)  # a page to share, not a private temp file
        return path
