"""The attention explorer: one self-contained HTML block built from an :class:`AttentionTrace`.

Python does the arithmetic that must be exact or that would be slow in the page, and hands
the page compact arrays; the page (``viz/static/explorer.js``, hand-written, inlined) draws
seven linked views: model (layers × heads), head (arcs), matrix (heatmap), QK (the
softmax(q·k·scale / T) of one query, recomputed live from the captured q and k), geometry
(queries and keys in one 2-D projection), positional (the sinusoidal table and its
rotations) and diagnostics (the sortable head table of :mod:`attnlab.analysis`).

Encoding of the embedded data (``format_version`` 1)::

    weights   uint16, w·65535 rounded (|error| <= 7.7e-6), gzip, base64   (L, H, R, C);
              uint8 (|error| <= 2e-3) above ``weights_budget`` bytes
    q, k      float32 when every stored head fits ``qk_budget`` bytes, else float16
              (the per-head max |Δp| that float16 storage causes is measured and shown)
    geometry  float32 2-D points, queries then keys, per stored head
    pe        float32 sinusoidal table (positions × d_model)

Above ``max_tokens`` tokens the maps are pooled in Python: rows are averaged over blocks of
queries and summed over blocks of keys, so each pooled row still sums to 1 (the attention
mass one block of queries sends to one block of keys).

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
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from attnlab.core.positional import frequencies, sinusoidal_table
from attnlab.trace.trace import AttentionTrace

__all__ = ["VIEWS", "Explorer", "ExplorerConfig", "json_for_html", "static_asset", "explore",
           "report_section"]

FORMAT_VERSION = 1
_STATIC = Path(__file__).with_name("static")


@dataclass(frozen=True)
class ExplorerConfig:
    """How much of a trace goes into the page."""

    max_tokens: int = 256  # above this many tokens the maps are pooled (page stays responsive)
    pooled_blocks: int = 128  # pooled maps have at most this many rows and columns
    qk_budget: int = 1_600_000  # bytes of q and k per trace: keeps 6×12 heads × 128 tokens < 3 MB
    weights_budget: int = 1_000_000  # maps up to this many bytes as uint16, larger ones uint8
    pe_positions: int = 128  # rows of the sinusoidal table in the positional view
    pe_dim: int = 64  # d_model of that table: 32 (sin, cos) pairs
    view: str = "model"  # the view the page opens on

    def __post_init__(self) -> None:
        for name in ("max_tokens", "pooled_blocks", "pe_positions", "pe_dim"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 2:
                raise ValueError(f"ExplorerConfig.{name} must be an int >= 2, got {v!r}")
        if self.pe_dim % 2:
            raise ValueError(f"ExplorerConfig.pe_dim must be even, got {self.pe_dim}")
        for name in ("qk_budget", "weights_budget"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"ExplorerConfig.{name} must be an int >= 0, got {v!r}")
        if self.view not in VIEWS:
            raise ValueError(f"ExplorerConfig.view must be one of {VIEWS}, got {self.view!r}")


VIEWS = ("model", "head", "matrix", "qk", "geometry", "positional", "diagnostics")


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


def _blob(t: Tensor, dtype: str, *, gz: bool = False) -> dict[str, Any]:
    """A tensor as little-endian bytes, optionally gzipped, in base64."""
    t = t.detach().to("cpu").contiguous()
    if dtype == "u16":
        raw = (t.float().clamp(0, 1) * 65535).round().to(torch.int32).numpy().astype("<u2")
    elif dtype == "u8":
        raw = (t.float().clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    elif dtype == "f16":
        raw = t.to(torch.float16).numpy().astype("<f2")
    elif dtype == "f32":
        raw = t.to(torch.float32).numpy().astype("<f4")
    else:  # pragma: no cover - internal
        raise ValueError(dtype)
    data = raw.tobytes()
    if gz:
        data = gzip.compress(data, compresslevel=6, mtime=0)
    return {"dtype": dtype, "gz": gz, "shape": list(t.shape),
            "b64": base64.b64encode(data).decode("ascii")}


def decode_blob(blob: dict[str, Any]) -> Tensor:
    """Inverse of the page encoding (used by tests and tools): values as the page sees them."""
    data = base64.b64decode(blob["b64"])
    if blob["gz"]:
        data = gzip.decompress(data)
    kind = {"u8": "u1", "u16": "<u2", "f16": "<f2", "f32": "<f4"}[blob["dtype"]]
    arr = np.frombuffer(data, dtype=kind).astype("float64")
    if blob["dtype"] in ("u8", "u16"):
        arr = arr / (255.0 if blob["dtype"] == "u8" else 65535.0)
    return torch.from_numpy(arr.copy()).reshape(blob["shape"])


# --------------------------------------------------------------------------------------
# what Python computes for the page
# --------------------------------------------------------------------------------------


def _blocks(n: int, nblocks: int) -> list[tuple[int, int]]:
    size = math.ceil(n / nblocks)
    return [(s, min(s + size, n)) for s in range(0, n, size)]


def pool_weights(w: Tensor, rows: list[tuple[int, int]], cols: list[tuple[int, int]]) -> Tensor:
    """(L, H, R, C) pooled maps: mean over each block of queries, sum over each block of keys.

    Rows of the result still sum to 1 where the original rows did.

    >>> w = torch.softmax(torch.randn(1, 1, 6, 6), dim=-1)
    >>> p = pool_weights(w, [(0, 3), (3, 6)], [(0, 2), (2, 4), (4, 6)])
    >>> p.shape, bool(torch.allclose(p.sum(-1).float(), torch.ones(1, 1, 2)))
    (torch.Size([1, 1, 2, 3]), True)
    """
    w = w.double()
    by_key = torch.stack([w[..., a:b].sum(-1) for a, b in cols], dim=-1)  # (L, H, Lq, C)
    return torch.stack([by_key[..., a:b, :].mean(-2) for a, b in rows], dim=-2)  # (L, H, R, C)


def _block_label(tokens: Sequence[str], a: int, b: int) -> str:
    first = tokens[a].strip() or tokens[a]
    return f"{a}–{b - 1} {first}…" if b - a > 1 else tokens[a]


def _diagnostics(trace: AttentionTrace) -> dict[str, Any]:
    """The head table of :func:`attnlab.analysis.diagnose`: columns and one row per head."""
    from attnlab.analysis import diagnose

    rows = diagnose(trace).rows()
    for r in rows:
        r["roles"] = ", ".join(r["roles"])
    columns = list(rows[0]) if rows else []
    return {"columns": columns, "rows": rows}


def _qk_heads(trace: AttentionTrace, budget: int, first: tuple[int, int]) -> tuple[list, str]:
    """Which heads get their q/k stored, and in which dtype."""
    if trace.q is None or trace.k is None:
        return [], "f32"
    nl, nh = trace.num_layers, trace.num_heads
    per_head = (trace.q.shape[2] * trace.q.shape[3] + trace.k.shape[2] * trace.k.shape[3])
    order = [first] + [(l, h) for l in range(nl) for h in range(nh) if (l, h) != first]
    if per_head * 4 * len(order) <= budget:
        return order, "f32"
    n = min(len(order), budget // (per_head * 2))
    return order[: max(n, 1)], "f16"


def _softmax_rows(q: Tensor, k: Tensor, scale: float, causal: bool) -> Tensor:
    """(S, Lq, Lk) softmax(q·kᵀ·scale) in float64 for a stack of heads, causal bottom-right."""
    s = (q.double() @ k.double().transpose(-1, -2)) * scale  # (S, Lq, Lk)
    if causal:
        lq, lk = s.shape[-2:]
        keep = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq)
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1)


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


def _trace_payload(trace: AttentionTrace, cfg: ExplorerConfig, first: tuple[int, int]) -> dict:
    nl, nh, lq, lk = trace.weights.shape
    keys = trace.key_tokens if trace.key_tokens is not None else trace.tokens
    w = trace.weights.detach().float().cpu()
    pooled = max(lq, lk) > cfg.max_tokens
    if pooled:
        rows, cols = _blocks(lq, cfg.pooled_blocks), _blocks(lk, cfg.pooled_blocks)
        maps = pool_weights(w, rows, cols)
        row_labels = [_block_label(trace.tokens, a, b) for a, b in rows]
        col_labels = [_block_label(keys, a, b) for a, b in cols]
    else:
        rows = [(i, i + 1) for i in range(lq)]
        cols = [(j, j + 1) for j in range(lk)]
        maps, row_labels, col_labels = w, list(trace.tokens), list(keys)
    d = trace.head_dim
    scale = trace.scale if trace.scale is not None else (1 / math.sqrt(d) if d else None)
    payload: dict[str, Any] = {
        "model": trace.model, "text": trace.text, "causal": bool(trace.causal),
        "L": nl, "H": nh, "Lq": lq, "Lk": lk, "d": d, "scale": scale,
        "tokens": list(trace.tokens), "key_tokens": list(keys),
        "rows": row_labels, "cols": col_labels, "pooled": pooled,
        "row_blocks": [list(r) for r in rows] if pooled else None,
        "col_blocks": [list(c) for c in cols] if pooled else None,
        "weights": _blob(maps, "u16" if maps.numel() * 2 <= cfg.weights_budget else "u8",
                         gz=True),
        "diagnostics": _diagnostics(trace), "qk": None,
        "qk_missing": ("merged" if trace.meta.get("merged") else "none")
        if trace.q is None or trace.k is None else "budget",
    }
    heads, dtype = _qk_heads(trace, cfg.qk_budget, first)
    if heads:
        q = torch.stack([trace.q[l, h] for l, h in heads]).float()  # (S, Lq, d)
        k = torch.stack([trace.k[l, h] for l, h in heads]).float()  # (S, Lk, d)
        if dtype == "f32":
            err = [0.0] * len(heads)
        else:  # what float16 storage costs, measured: max |Δp| per head at the model's scale
            exact = _softmax_rows(q, k, scale, trace.causal)
            stored = _softmax_rows(q.half(), k.half(), scale, trace.causal)
            err = (exact - stored).abs().flatten(1).amax(-1).tolist()
        geo = _geometry(q, k)
        payload["qk"] = {
            "heads": [list(x) for x in heads], "dtype": dtype,
            "q": _blob(q, dtype, gz=True), "k": _blob(k, dtype, gz=True),
            "storage_error": err, "geometry": _blob(geo, "f32", gz=True),
        }
    return payload


def explore(model: Any, texts: str | Sequence[str], *, config: ExplorerConfig | None = None,
            truncate: bool = False) -> Explorer:
    """Trace each text through ``model`` (a name, path or loaded model) into one Explorer.

    The model is loaded once (:func:`attnlab.models.load` keeps it per process).
    """
    import attnlab.trace as trace_pkg

    if isinstance(texts, str):
        texts = [texts]
    if not texts:
        raise ValueError("texts must hold at least one text, got none")
    if isinstance(model, (str, os.PathLike)):
        from attnlab.models import load

        model = load(model, progress=False)
    traces = [trace_pkg.trace(model, t, truncate=truncate) for t in texts]
    return Explorer(traces, config=config)


@cache
def _pe_payload(n: int, d: int) -> dict[str, Any]:
    """The sinusoidal table for the positional view (the same for every page: cached)."""
    return {"n": n, "d": d, "omega": frequencies(d).tolist(),
            "table": _blob(sinusoidal_table(n, d), "f32", gz=True)}


@cache
def static_asset(name: str) -> str:
    """The text of ``viz/static/NAME`` (the explorer's JS and CSS)."""
    if name not in ("explorer.js", "explorer.css"):
        raise ValueError(f"name must be 'explorer.js' or 'explorer.css', got {name!r}")
    return (_STATIC / name).read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------
# the Explorer object
# --------------------------------------------------------------------------------------


class Explorer:
    """An interactive view of one or more traces (e.g. two sentences on one model).

    ``to_html()`` is a self-contained fragment (CSS, JS and data inline; ids from ``uid``),
    shown inline in Jupyter through ``_repr_html_``; ``save(path)`` writes a whole page.
    Nothing in either makes a network request.
    """

    def __init__(self, traces: AttentionTrace | Sequence[AttentionTrace], *,
                 config: ExplorerConfig | None = None, uid: str | None = None,
                 layer: int = 0, head: int = 0) -> None:
        if isinstance(traces, AttentionTrace):
            traces = [traces]
        traces = list(traces)
        if not traces or not all(isinstance(t, AttentionTrace) for t in traces):
            got = [type(t).__name__ for t in traces]
            raise TypeError(f"traces must be an AttentionTrace or a non-empty list of them, "
                            f"got {got}")
        self.traces = traces
        self.config = config or ExplorerConfig()
        if not isinstance(self.config, ExplorerConfig):
            raise TypeError(f"config must be an ExplorerConfig, got {type(config).__name__}")
        t0 = traces[0]
        if not (0 <= layer < t0.num_layers and 0 <= head < t0.num_heads):
            raise ValueError(f"layer, head must lie in [0, {t0.num_layers}) x [0, "
                             f"{t0.num_heads}), got ({layer}, {head})")
        self.layer, self.head = layer, head
        self.uid = uid or f"ax-{uuid.uuid4().hex[:12]}"

    def payload(self) -> dict[str, Any]:
        """Everything the page receives, as a JSON-ready dict."""
        cfg = self.config
        return {
            "format_version": FORMAT_VERSION,
            "uid": self.uid,
            "view": cfg.view,
            "layer": self.layer, "head": self.head,
            "traces": [_trace_payload(t, cfg, (self.layer, self.head)) for t in self.traces],
            "pe": _pe_payload(cfg.pe_positions, cfg.pe_dim),
        }

    def to_html(self) -> str:
        """The fragment: ``<div id=uid>`` + data + inline CSS and JS + a boot call."""
        uid = html.escape(self.uid, quote=True)
        data = json_for_html(self.payload())
        return (
            f'<div class="attnlab-explorer" id="{uid}" data-format-version="{FORMAT_VERSION}">'
            f'<noscript>attnlab explorer: JavaScript is needed to draw the views.</noscript>'
            f'<div class="ax-loading">attnlab explorer…</div></div>'
            f'<script type="application/json" id="{uid}-data">{data}</script>'
            f"<style>{static_asset('explorer.css')}</style>"
            f"<script>{static_asset('explorer.js')}</script>"
            f'<script>window.AttnlabExplorer.mount("{uid}");</script>'
        )

    def _repr_html_(self) -> str:
        return self.to_html()

    def to_page(self, title: str | None = None) -> str:
        """A whole HTML document around :meth:`to_html` (strict CSP: nothing external)."""
        t0 = self.traces[0]
        title = title or f"attnlab explorer · {t0.model or 'trace'}"
        return (
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            "img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\n"
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


# --------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------

REPORT_TEXT = "The cat sat on the mat because it was tired."


def report_section(ctx: Any) -> Any:
    """The explorer on MiniLM for one English sentence, inline in the report."""
    from attnlab.viz.html import Section, bilingual

    try:
        ex = explore("minilm", REPORT_TEXT)
    except Exception as exc:  # the page still builds; the section says what is missing
        ctx.log(f"explorer: real model unavailable ({exc})")
        return Section("explorer", "Attention explorer", "注意力浏览器",
                       bilingual(f"The real model could not be loaded: {exc}",
                                 f"无法加载真实模型：{exc}"), passed=None)
    ex.uid = "ax-report"
    trace = ex.traces[0]
    body = bilingual(
        f"MiniLM (all-MiniLM-L6-v2, {trace.num_layers} layers × {trace.num_heads} heads) on "
        f"“{REPORT_TEXT}”. Click a thumbnail to open a head; in the QK view turn the scale "
        "and temperature and watch the softmax saturate or flatten.",
        f"MiniLM（all-MiniLM-L6-v2，{trace.num_layers} 层 × {trace.num_heads} 头），输入"
        f"“{REPORT_TEXT}”。点击缩略图打开一个头；在 QK 视图中调节缩放与温度，观察 softmax "
        "变尖或变平。",
    )
    err = float("nan")
    if trace.q is not None and trace.k is not None and trace.scale is not None:
        live = _softmax_rows(trace.q.flatten(0, 1), trace.k.flatten(0, 1), trace.scale,
                             trace.causal)
        err = float((live - trace.weights.flatten(0, 1).double()).abs().max())
    ok = err <= 1e-4
    body += bilingual(
        f"The QK view recomputes softmax(q·kᵀ·scale) from the captured q and k; at the "
        f"model's scale it equals the model's own weights: max |error| = {err:.1e} "
        f"(tolerance 1e-4).",
        f"QK 视图由捕获的 q 与 k 重新计算 softmax(q·kᵀ·scale)；在模型自己的缩放下它与模型的"
        f"权重一致：最大 |误差| = {err:.1e}（容差 1e-4）。", cls="claim")
    return Section("explorer", "Attention explorer", "注意力浏览器", body + ex.to_html(),
                   passed=ok, rows=[("tokens", str(trace.seq_len), None),
                                    ("QK recomputation vs model weights", f"{err:.1e}", ok)])
