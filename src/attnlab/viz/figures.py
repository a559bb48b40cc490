"""Static figures of attention traces (matplotlib; PNG or SVG).

* :func:`heatmap`: one head, token labels on both axes (Chinese renders: a CJK font is
  selected by name, see :func:`cjk_font`);
* :func:`grid`: every layer x head as thumbnails;
* :func:`arcs`: bertviz's head view, static: tokens in two columns, a line per weight;
* :func:`qk_projection`: AttentionViz's joint query-key view (:func:`qk_joint_transform`);
* :func:`decomposition`: each score as ``scale * |q| |k| cos θ``
  (:func:`score_decomposition`).

Every function returns a ``matplotlib.figure.Figure``; :func:`save_figure` writes it.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any

import matplotlib as mpl
import torch
from matplotlib.figure import Figure
from torch import Tensor

from attnlab._io import atomic_open
from attnlab.trace.trace import AttentionTrace

__all__ = ["cjk_font", "heatmap", "grid", "arcs", "qk_projection", "decomposition",
           "qk_joint_transform", "score_decomposition", "save_figure", "KINDS", "plot"]

#: Fonts that cover Chinese, in order of preference (Debian: fonts-wqy-microhei or
#: fonts-noto-cjk; macOS / Windows names last).
CJK_FONTS = ("WenQuanYi Micro Hei", "Noto Sans CJK SC", "Noto Sans CJK JP",
             "Source Han Sans SC", "Droid Sans Fallback", "PingFang SC", "Microsoft YaHei",
             "SimHei", "Arial Unicode MS")
_CJK_FILES = re.compile(r"(wqy|NotoSansCJK|NotoSerifCJK|SourceHan|DroidSansFallback)", re.I)
_CJK = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")


@lru_cache(maxsize=1)
def cjk_font() -> str | None:
    """The name of an installed font covering Chinese, or None (then a warning on use)."""
    from matplotlib import font_manager as fm

    names = {f.name for f in fm.fontManager.ttflist}
    for name in CJK_FONTS:
        if name in names:
            return name
    # installed after matplotlib built its font cache: register the files directly
    for path in fm.findSystemFonts():
        if _CJK_FILES.search(os.path.basename(path)):
            try:
                fm.fontManager.addfont(path)
            except (OSError, RuntimeError, ValueError):
                continue
    names = {f.name for f in fm.fontManager.ttflist}
    return next((n for n in CJK_FONTS if n in names), None)


def _rc(tokens: list[str]) -> dict[str, Any]:
    """rcParams for a figure showing ``tokens``: DejaVu first, the CJK font as fallback."""
    family = ["DejaVu Sans"]
    if any(_CJK.search(t) for t in tokens):
        font = cjk_font()
        if font is None:
            warnings.warn("no font covering Chinese is installed (e.g. Debian's "
                          "fonts-wqy-microhei); CJK labels will show as boxes",
                          UserWarning, stacklevel=3)
        else:
            family = [font, "DejaVu Sans"]
    return {"font.family": family, "axes.unicode_minus": False, "svg.fonttype": "path"}


def _label(tok: str) -> str:
    """Tokens as drawn: visible spaces and newlines, no mathtext."""
    t = tok.replace("\n", "⏎").replace("$", r"\$")
    return t if t.strip() else repr(t)


def _note(trace: AttentionTrace) -> str:
    merged = trace.meta.get("merged")
    return f"merged tokens: {merged['rule']}" if isinstance(merged, dict) else ""


def _check_head(trace: AttentionTrace, layer: int, head: int) -> tuple[int, int]:
    trace.head(layer, head)  # raises IndexError naming the valid range
    return layer % trace.num_layers, head % trace.num_heads


def _keys(trace: AttentionTrace) -> list[str]:
    return trace.key_tokens if trace.key_tokens is not None else trace.tokens


# -- one head --------------------------------------------------------------------------------


def heatmap(trace: AttentionTrace, layer: int, head: int, *, annotate: bool | None = None,
            cmap: str = "Blues") -> Figure:
    """One head's weights (queries down, keys across) with token labels.

    >>> w = torch.softmax(torch.randn(1, 1, 3, 3), -1)
    >>> fig = heatmap(AttentionTrace(tokens=["注意", "力", "!"], weights=w), 0, 0)
    >>> len(fig.axes)
    2
    """
    layer, head = _check_head(trace, layer, head)
    w = trace.head(layer, head).float()
    lq, lk = w.shape
    keys = _keys(trace)
    with mpl.rc_context(_rc(trace.tokens + keys)):
        size = max(3.5, min(16.0, 0.32 * max(lq, lk) + 2))
        fig = Figure(figsize=(size + 1.0, size))
        ax = fig.subplots()
        im = ax.imshow(w.numpy(), cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_xticks(range(lk), [_label(t) for t in keys], rotation=90, fontsize=8)
        ax.set_yticks(range(lq), [_label(t) for t in trace.tokens], fontsize=8)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        if annotate if annotate is not None else max(lq, lk) <= 12:
            for i in range(lq):
                for j in range(lk):
                    v = float(w[i, j])
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if v > 0.5 else "black")
        ax.set_title(f"{trace.model} layer {layer} head {head}", fontsize=10)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="weight")
        note = _note(trace)
        if note:
            fig.text(0.01, 0.005, note, fontsize=7, color="#555")
        fig.tight_layout()
    return fig


def grid(trace: AttentionTrace, *, size: float = 1.0, highlight: list[tuple[int, int]] = ()
         ) -> Figure:
    """Every head as a thumbnail: rows = layers, columns = heads."""
    nl, nh = trace.num_layers, trace.num_heads
    with mpl.rc_context(_rc([])):
        fig = Figure(figsize=(size * nh + 0.6, size * nl + 0.6))
        axes = fig.subplots(nl, nh, squeeze=False)
        for li in range(nl):
            for hi in range(nh):
                ax = axes[li][hi]
                ax.imshow(trace.weights[li, hi].float().numpy(), cmap="Blues", vmin=0, vmax=1,
                          interpolation="nearest")
                ax.set_xticks([])
                ax.set_yticks([])
                if (li, hi) in highlight:
                    for s in ax.spines.values():
                        s.set_color("#b3261e")
                        s.set_linewidth(2)
                if li == 0:
                    ax.set_title(f"H{hi}", fontsize=7)
                if hi == 0:
                    ax.set_ylabel(f"L{li}", fontsize=7, rotation=0, labelpad=10)
        fig.suptitle(f"{trace.model}: {nl} layers x {nh} heads, {trace.seq_len} tokens",
                     fontsize=9)
        note = _note(trace)
        if note:
            fig.text(0.01, 0.002, note, fontsize=6, color="#555")
        fig.subplots_adjust(wspace=0.08, hspace=0.08)
    return fig


def arcs(trace: AttentionTrace, layer: int, head: int, *, min_weight: float = 0.02) -> Figure:
    """bertviz's head view: queries left, keys right, a line per weight (opacity = weight)."""
    layer, head = _check_head(trace, layer, head)
    w = trace.head(layer, head).float()
    lq, lk = w.shape
    keys = _keys(trace)
    with mpl.rc_context(_rc(trace.tokens + keys)):
        fig = Figure(figsize=(4.2, max(3.0, 0.28 * max(lq, lk) + 1)))
        ax = fig.subplots()
        yq = [1 - i / max(lq - 1, 1) for i in range(lq)]
        yk = [1 - j / max(lk - 1, 1) for j in range(lk)]
        for i in range(lq):
            for j in range(lk):
                v = float(w[i, j])
                if v >= min_weight:
                    ax.plot([0.0, 1.0], [yq[i], yk[j]], color="#3451b2", alpha=min(1.0, v),
                            linewidth=0.5 + 2.5 * v)
        for i, t in enumerate(trace.tokens):
            ax.text(-0.03, yq[i], _label(t), ha="right", va="center", fontsize=8)
        for j, t in enumerate(keys):
            ax.text(1.03, yk[j], _label(t), ha="left", va="center", fontsize=8)
        ax.set_xlim(-0.6, 1.6)
        ax.set_ylim(-0.05, 1.05)
        ax.axis("off")
        ax.set_title(f"{trace.model} layer {layer} head {head}\nquery → key "
                     f"(lines ≥ {min_weight})", fontsize=9)
        note = _note(trace)
        if note:
            fig.text(0.01, 0.005, note, fontsize=6, color="#555")
    return fig


# -- query/key geometry -----------------------------------------------------------------------


def qk_joint_transform(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, float]:
    """AttentionViz's trick: put queries and keys in one space without changing a weight.

    ``k' = k - mean(k) + mean(q)`` adds the same vector ``c`` to every key, so each
    query's scores all shift by ``q·c``, which the softmax ignores; then ``q' = α q`` and
    ``k' = k' / α`` with ``α = sqrt(mean|k'| / mean|q|)`` equalise the mean norms and leave
    every product ``q'·k'`` unchanged.

    >>> q, k = torch.randn(5, 8), torch.randn(6, 8) + 3
    >>> q2, k2, a = qk_joint_transform(q, k)
    >>> bool(torch.allclose(torch.softmax(q @ k.T, -1), torch.softmax(q2 @ k2.T, -1).float(),
    ...                     atol=1e-5))
    True
    """
    if q.dim() != 2 or k.dim() != 2 or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q (Lq, d) and k (Lk, d) must share d, got {tuple(q.shape)} and "
                         f"{tuple(k.shape)}")
    q, k = q.double(), k.double()
    k = k - k.mean(0) + q.mean(0)
    alpha = math.sqrt(float(k.norm(dim=-1).mean()) / max(float(q.norm(dim=-1).mean()), 1e-12))
    return q * alpha, k / alpha, alpha


def _pca2(x: Tensor) -> Tensor:
    x = x - x.mean(0)
    _, _, vh = torch.linalg.svd(x, full_matrices=False)
    return x @ vh[:2].T  # (N, 2)


def qk_projection(trace: AttentionTrace, layer: int, head: int) -> Figure:
    """Queries and keys of one head in one 2-D PCA plane, after :func:`qk_joint_transform`."""
    layer, head = _check_head(trace, layer, head)
    if trace.q is None or trace.k is None:
        raise ValueError("the qk figure needs a trace with q and k (trace without --no-qkv)")
    q2, k2, alpha = qk_joint_transform(trace.q[layer, head], trace.k[layer, head])
    xy = _pca2(torch.cat([q2, k2])).float()
    lq = q2.shape[0]
    keys = _keys(trace)
    with mpl.rc_context(_rc(trace.tokens + keys)):
        fig = Figure(figsize=(6, 5))
        ax = fig.subplots()
        ax.scatter(xy[:lq, 0], xy[:lq, 1], c="#3451b2", s=22, label="query")
        ax.scatter(xy[lq:, 0], xy[lq:, 1], c="#d9730d", s=22, marker="s", label="key")
        for i, t in enumerate(trace.tokens):
            ax.annotate(_label(t), xy[i].tolist(), fontsize=7, color="#3451b2",
                        xytext=(3, 3), textcoords="offset points")
        for j, t in enumerate(keys):
            ax.annotate(_label(t), xy[lq + j].tolist(), fontsize=7, color="#d9730d",
                        xytext=(3, -8), textcoords="offset points")
        ax.legend(fontsize=8)
        ax.set_title(f"{trace.model} layer {layer} head {head}: joint q–k PCA\n"
                     f"keys translated to the queries' mean, q×{alpha:.2f}, k÷{alpha:.2f} "
                     "(scores unchanged)", fontsize=9)
        fig.tight_layout()
    return fig


def score_decomposition(q: Tensor, k: Tensor, scale: float) -> dict[str, Tensor]:
    """``score_ij = scale · |q_i| · |k_j| · cos θ_ij``, each factor as a tensor.

    >>> d = score_decomposition(torch.randn(3, 4), torch.randn(5, 4), 0.5)
    >>> sorted(d)
    ['cos', 'k_norm', 'q_norm', 'score']
    """
    qn = q.double().norm(dim=-1)  # (Lq,)
    kn = k.double().norm(dim=-1)  # (Lk,)
    cos = (q.double() @ k.double().T) / (qn[:, None] * kn[None, :]).clamp_min(1e-30)
    return {"q_norm": qn, "k_norm": kn, "cos": cos,
            "score": scale * qn[:, None] * kn[None, :] * cos}


def decomposition(trace: AttentionTrace, layer: int, head: int) -> Figure:
    """Three panels: cos θ (direction), |q||k| (length) and their scaled product, the score."""
    layer, head = _check_head(trace, layer, head)
    if trace.q is None or trace.k is None:
        raise ValueError("the decomposition figure needs a trace with q and k")
    scale = trace.scale if trace.scale is not None else trace.q.shape[-1] ** -0.5
    d = score_decomposition(trace.q[layer, head], trace.k[layer, head], scale)
    keys = _keys(trace)
    n = max(trace.seq_len, len(keys))
    panels = [("cos θ (direction)", d["cos"], "RdBu_r", (-1, 1)),
              ("|q|·|k| (length)", d["q_norm"][:, None] * d["k_norm"][None, :], "Greys", None),
              (f"score = {scale:.3g}·|q||k|cos θ", d["score"], "RdBu_r", "sym")]
    with mpl.rc_context(_rc(trace.tokens + keys)):
        side = max(3.2, min(7.0, 0.22 * n + 1.5))
        fig = Figure(figsize=(3 * side + 1, side))
        axes = fig.subplots(1, 3)
        for ax, (title, m, cmap, lim) in zip(axes, panels):
            m = m.float()
            if trace.causal:
                keep = torch.ones_like(m, dtype=torch.bool).tril(m.shape[1] - m.shape[0])
                m = m.masked_fill(~keep, float("nan"))
            if lim == "sym":
                r = float(m.nan_to_num(0).abs().max()) or 1.0
                lim = (-r, r)
            im = ax.imshow(m.numpy(), cmap=cmap, aspect="auto",
                           **({} if lim is None else {"vmin": lim[0], "vmax": lim[1]}))
            ax.set_title(title, fontsize=9)
            fs = 7 if n <= 30 else 5
            ax.set_xticks(range(len(keys)), [_label(t) for t in keys], rotation=90, fontsize=fs)
            ax.set_yticks(range(trace.seq_len), [_label(t) for t in trace.tokens], fontsize=fs)
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03)
        fig.suptitle(f"{trace.model} layer {layer} head {head}: where the scores come from",
                     fontsize=10)
        fig.tight_layout()
    return fig


# -- files -----------------------------------------------------------------------------------

KINDS = {"heatmap": heatmap, "grid": grid, "arcs": arcs, "qk": qk_projection,
         "decomposition": decomposition}


def plot(trace: AttentionTrace, kind: str, layer: int = 0, head: int = 0) -> Figure:
    """The figure ``kind`` (one of :data:`KINDS`) of ``trace``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    if kind == "grid":
        return grid(trace)
    return KINDS[kind](trace, layer, head)


def save_figure(fig: Figure, path: str | os.PathLike[str], *, dpi: int = 130) -> Path:
    """Write ``fig`` as PNG or SVG (by suffix), atomically."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise ValueError(f"--out must end in .png or .svg, got {str(path)!r}")
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format=fmt, dpi=dpi, bbox_inches="tight")
    return path
