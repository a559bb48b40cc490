"""Static figures of attention traces (matplotlib; PNG or SVG).

* :func:`heatmap`: one head, token labels on both axes (Chinese renders: a CJK font is
  selected by name, see :func:`cjk_font`);
* :func:`grid`: every layer x head as thumbnails;
* :func:`arcs`: bertviz's head view, static: tokens in two columns, a line per weight;
* :func:`qk_projection`: AttentionViz's joint query-key view (:func:`qk_joint_transform`);
* :func:`decomposition`: each score as ``scale * |q| |k| cos θ``
  (:func:`score_decomposition`).

Every weight comes from the trace's on-demand methods (``head_weights`` for a short head,
``pooled`` for a long one, see :func:`head_map`), so a trace of any length can be drawn:
a long head is drawn as its pooled map and the figure's title says so. Nothing here uses
the dense ``trace.weights``.

Every function returns a ``matplotlib.figure.Figure``; :func:`save_figure` writes it.
Each takes ``lang="en"`` or ``"zh"``: the language of its titles, axes and legends (the
tokens are the input's, drawn as they are; Chinese uses the CJK font).
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib as mpl
import torch
from matplotlib.figure import Figure
from torch import Tensor

from attnlab._io import atomic_open
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.tracer import MERGE_RULE

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

__all__ = ["cjk_font", "LANGS", "heatmap", "grid", "arcs", "qk_projection", "decomposition",
           "qk_joint_transform", "score_decomposition", "head_map", "save_figure", "KINDS",
           "plot"]

#: Fonts that cover Chinese, in order of preference (Debian: fonts-wqy-microhei or
#: fonts-noto-cjk; macOS / Windows names last).
CJK_FONTS = ("WenQuanYi Micro Hei", "Noto Sans CJK SC", "Noto Sans CJK JP",
             "Source Han Sans SC", "Droid Sans Fallback", "PingFang SC", "Microsoft YaHei",
             "SimHei", "Arial Unicode MS")
_CJK_FILES = re.compile(r"(wqy|NotoSansCJK|NotoSerifCJK|SourceHan|DroidSansFallback)", re.I)
_CJK = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")


#: The languages a figure can be drawn in.
LANGS = ("en", "zh")

#: Every text the figures write, per language (``str.format`` templates).
_TEXT: dict[str, dict[str, str]] = {
    "en": {
        "head": "{model} layer {layer} head {head}",
        "key": "key", "query": "query", "key block": "key block", "query block": "query block",
        "weight": "weight", "pooled weight": "pooled weight",
        "tokens": ", {n} tokens",
        "pooled": "pooled in blocks of {block} tokens (mean over a block's queries of the sum "
                  "over its keys)",
        "grid": "{model}: {nl} layers x {nh} heads, {n} tokens",
        "grid pooled": "\npooled in blocks of {block} tokens\n(mean over a block's queries of "
                       "the sum over its keys)",
        "arcs": "\nquery → key (lines ≥ {min_weight})",
        "qk": ": joint q–k PCA, {n} tokens\nkeys translated to the queries' mean, q×{a}, "
              "k÷{a} (scores unchanged)",
        "cos": "cos θ (direction)", "norm": "|q|·|k| (length)", "score": "score = {s}·|q||k|cos θ",
        "window": " (queries {q0}–{q1}, keys {k0}–{k1} of {n})",
        "decomposition": ": where the scores come from{where}",
        "merged": "merged tokens: {rule}",
    },
    "zh": {
        "head": "{model} 第 {layer} 层第 {head} 个头",
        "key": "键", "query": "查询", "key block": "键块", "query block": "查询块",
        "weight": "权重", "pooled weight": "池化权重",
        "tokens": "，{n} 个词元",
        "pooled": "按每块 {block} 个词元池化（对块内查询取平均、对块内键求和）",
        "grid": "{model}：{nl} 层 × {nh} 个头，{n} 个词元",
        "grid pooled": "\n按每块 {block} 个词元池化\n（对块内查询取平均、对块内键求和）",
        "arcs": "\n查询 → 键（只画权重 ≥ {min_weight} 的线）",
        "qk": "：q 与 k 的联合主成分投影，{n} 个词元\n键平移到查询的均值，q×{a}，k÷{a}"
              "（分数不变）",
        "cos": "cos θ（方向）", "norm": "|q|·|k|（长度）", "score": "分数 = {s}·|q||k|cos θ",
        "window": "（查询 {q0}–{q1}，键 {k0}–{k1}，共 {n} 个）",
        "decomposition": "：分数从何而来{where}",
        "merged": "合并的词元：{rule}",
    },
}
#: The merge rules attnlab writes into a trace (:meth:`AttentionTrace.merge_tokens`), in
#: Chinese; any other rule is shown as it is.
_RULES_ZH = {
    MERGE_RULE: "同一字符的字节片段已合并：对键求和、对查询取平均",
    "weights summed over keys, averaged over queries": "对键求和、对查询取平均",
}


def _check_lang(lang: str) -> str:
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {LANGS}, got {lang!r}")
    return lang


def _t(lang: str, key: str, **values: Any) -> str:
    """The text ``key`` of :data:`_TEXT` in ``lang``, filled with ``values``."""
    return _TEXT[lang][key].format(**values)


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


def _rc(tokens: list[str], lang: str = "en") -> dict[RcKeyType, Any]:
    """rcParams for a figure showing ``tokens`` in ``lang``: DejaVu first, the CJK font as
    fallback (when a token or the language needs it)."""
    family = ["DejaVu Sans"]
    if lang == "zh" or any(_CJK.search(t) for t in tokens):
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


def _note(trace: AttentionTrace, lang: str = "en") -> str:
    merged = trace.meta.get("merged")
    if not isinstance(merged, dict):
        return ""
    rule = str(merged["rule"])
    return _t(lang, "merged", rule=_RULES_ZH.get(rule, rule) if lang == "zh" else rule)


def _check_head(trace: AttentionTrace, layer: int, head: int) -> tuple[int, int]:
    nl, nh = trace.num_layers, trace.num_heads
    if not -nl <= layer < nl:
        raise IndexError(f"layer must be in [0, {nl}), got {layer}")
    if not -nh <= head < nh:
        raise IndexError(f"head must be in [0, {nh}), got {head}")
    return layer % nl, head % nh


def _keys(trace: AttentionTrace) -> list[str]:
    return trace.key_tokens if trace.key_tokens is not None else trace.tokens


def _block_label(tokens: list[str], a: int, b: int) -> str:
    return _label(tokens[a]) if b - a == 1 else f"{a}–{b - 1} {_label(tokens[a])}…"


def head_map(trace: AttentionTrace, layer: int, head: int, max_blocks: int
             ) -> tuple[Tensor, list[str], list[str], int]:
    """One head as a matrix of at most ``max_blocks`` rows and columns.

    Returns ``(map, row labels, column labels, block)``: the exact weights (``block`` 1)
    when the input is that short, else the head's pooled map in blocks of ``block`` tokens
    (:meth:`AttentionTrace.pooled`: mean over a block's queries of the sum over its keys,
    so rows still sum to 1). Never more than ``max_blocks``² numbers.

    >>> w = torch.softmax(torch.randn(1, 1, 10, 10), -1)
    >>> m, rows, cols, block = head_map(AttentionTrace(tokens=list("abcdefghij"), weights=w),
    ...                                 0, 0, 4)
    >>> tuple(m.shape), block, rows[0]
    ((4, 4), 3, '0–2 a…')
    """
    lq, lk = trace.seq_len, trace.key_len
    keys = _keys(trace)
    if max(lq, lk) <= max_blocks:
        return (trace.head_weights(layer, head).float(), [_label(t) for t in trace.tokens],
                [_label(t) for t in keys], 1)
    block = math.ceil(max(lq, lk) / max_blocks)
    m = trace.pooled(layer, head, block).float()
    rows = [_block_label(trace.tokens, a, min(a + block, lq)) for a in range(0, lq, block)]
    cols = [_block_label(keys, a, min(a + block, lk)) for a in range(0, lk, block)]
    return m, rows, cols, block


def _pooled_title(block: int, lang: str = "en") -> str:
    return _t(lang, "pooled", block=block) if block > 1 else ""


def _ticks(ax: Any, rows: list[str], cols: list[str], fontsize: int = 8) -> None:
    """Every label while they fit, else every n-th (at most 64 a side)."""
    sr, sc = max(1, math.ceil(len(rows) / 64)), max(1, math.ceil(len(cols) / 64))
    ax.set_xticks(range(0, len(cols), sc), cols[::sc], rotation=90, fontsize=fontsize)
    ax.set_yticks(range(0, len(rows), sr), rows[::sr], fontsize=fontsize)


# -- one head --------------------------------------------------------------------------------


def heatmap(trace: AttentionTrace, layer: int, head: int, *, annotate: bool | None = None,
            cmap: str = "Blues", max_blocks: int = 128, lang: str = "en") -> Figure:
    """One head's weights (queries down, keys across) with token labels.

    Up to ``max_blocks`` tokens every weight is drawn; a longer head is drawn as its
    pooled map (:func:`head_map`), and the title says so.

    >>> w = torch.softmax(torch.randn(1, 1, 3, 3), -1)
    >>> fig = heatmap(AttentionTrace(tokens=["注意", "力", "!"], weights=w), 0, 0)
    >>> len(fig.axes), heatmap(AttentionTrace(tokens=["a", "b", "c"], weights=w, model="toy"), 0,
    ...                            0, lang="zh").axes[0].get_title()
    (2, 'toy 第 0 层第 0 个头')
    """
    lang = _check_lang(lang)
    layer, head = _check_head(trace, layer, head)
    w, rows, cols, block = head_map(trace, layer, head, max_blocks)
    nr, nc = w.shape
    with mpl.rc_context(_rc(trace.tokens[:4096] + _keys(trace)[:4096], lang)):
        size = max(3.5, min(16.0, 0.32 * max(nr, nc) + 2))
        fig = Figure(figsize=(size + 1.0, size))
        ax = fig.subplots()
        vmax = 1.0 if block == 1 else max(float(w.max()), 1e-12)
        im = ax.imshow(w.numpy(), cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto",
                       interpolation="nearest")
        _ticks(ax, rows, cols)
        ax.set_xlabel(_t(lang, "key" if block == 1 else "key block"))
        ax.set_ylabel(_t(lang, "query" if block == 1 else "query block"))
        if annotate if annotate is not None else max(nr, nc) <= 12:
            for i in range(nr):
                for j in range(nc):
                    v = float(w[i, j])
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if v > 0.5 * vmax else "black")
        title = _t(lang, "head", model=trace.model, layer=layer, head=head)
        if block > 1:
            title += _t(lang, "tokens", n=trace.seq_len) + "\n" + _pooled_title(block, lang)
        ax.set_title(title, fontsize=10 if block == 1 else 8)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04,
                     label=_t(lang, "weight" if block == 1 else "pooled weight"))
        note = _note(trace, lang)
        if note:
            fig.text(0.01, 0.005, note, fontsize=7, color="#555")
        fig.tight_layout()
    return fig


def grid(trace: AttentionTrace, *, size: float = 1.0,
         highlight: Sequence[tuple[int, int]] = (),
         max_blocks: int = 64, lang: str = "en") -> Figure:
    """Every head as a thumbnail: rows = layers, columns = heads (pooled maps when the input
    is longer than ``max_blocks`` tokens)."""
    lang = _check_lang(lang)
    nl, nh = trace.num_layers, trace.num_heads
    block = 1
    height = size * nl + 0.6 + (0.5 if max(trace.seq_len, trace.key_len) > max_blocks else 0)
    with mpl.rc_context(_rc([], lang)):
        fig = Figure(figsize=(max(size * nh + 0.6, 3.2), height))
        axes = fig.subplots(nl, nh, squeeze=False)
        for li in range(nl):
            for hi in range(nh):
                ax = axes[li][hi]
                m, _, _, block = head_map(trace, li, hi, max_blocks)
                ax.imshow(m.numpy(), cmap="Blues", vmin=0, vmax=1 if block == 1 else None,
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
        title = _t(lang, "grid", model=trace.model, nl=nl, nh=nh, n=trace.seq_len)
        if block > 1:
            title += _t(lang, "grid pooled", block=block)
        fig.suptitle(title, fontsize=7 if block > 1 else 9)
        note = _note(trace, lang)
        if note:
            fig.text(0.01, 0.002, note, fontsize=6, color="#555")
        fig.subplots_adjust(wspace=0.08, hspace=0.08, top=1 - (0.75 if block > 1 else 0.4) / height)
    return fig


def arcs(trace: AttentionTrace, layer: int, head: int, *, min_weight: float = 0.02,
         max_blocks: int = 64, lang: str = "en") -> Figure:
    """bertviz's head view: queries left, keys right, a line per weight (opacity = weight);
    blocks of tokens (pooled) when the input is longer than ``max_blocks`` tokens."""
    lang = _check_lang(lang)
    layer, head = _check_head(trace, layer, head)
    w, rows, cols, block = head_map(trace, layer, head, max_blocks)
    nr, nc = w.shape
    with mpl.rc_context(_rc(trace.tokens[:4096] + _keys(trace)[:4096], lang)):
        fig = Figure(figsize=(4.2 if block == 1 else 5.5, max(3.0, 0.28 * max(nr, nc) + 1)))
        ax = fig.subplots()
        yq = [1 - i / max(nr - 1, 1) for i in range(nr)]
        yk = [1 - j / max(nc - 1, 1) for j in range(nc)]
        for i in range(nr):
            for j in range(nc):
                v = float(w[i, j])
                if v >= min_weight:
                    ax.plot([0.0, 1.0], [yq[i], yk[j]], color="#3451b2", alpha=min(1.0, v),
                            linewidth=0.5 + 2.5 * v)
        for i, t in enumerate(rows):
            ax.text(-0.03, yq[i], t, ha="right", va="center", fontsize=8)
        for j, t in enumerate(cols):
            ax.text(1.03, yk[j], t, ha="left", va="center", fontsize=8)
        ax.set_xlim(-0.6 if block == 1 else -0.9, 1.6 if block == 1 else 1.9)
        ax.set_ylim(-0.05, 1.05)
        ax.axis("off")
        title = (_t(lang, "head", model=trace.model, layer=layer, head=head)
                 + _t(lang, "arcs", min_weight=min_weight))
        if block > 1:
            title += "\n" + _pooled_title(block, lang)
        ax.set_title(title, fontsize=9 if block == 1 else 7)
        note = _note(trace, lang)
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


def _qk_of(trace: AttentionTrace, layer: int, head: int, what: str) -> tuple[Tensor, Tensor]:
    """q (Lq, d) and k (Lk, d) of one query head (its key/value head for grouped queries)."""
    if not trace.has_qk:
        raise ValueError(f"the {what} figure needs a trace with q and k (traced with qkv)")
    if trace.groups is not None:
        raise ValueError(f"the {what} figure needs unmerged tokens: this trace's q and k "
                         "belong to the byte pieces it merged (trace with merge_pieces=False)")
    group = trace.num_heads // trace.num_kv_heads
    return (trace.layer_tensor("q", layer)[head],
            trace.layer_tensor("k", layer)[head // group])


def qk_projection(trace: AttentionTrace, layer: int, head: int, *,
                  max_labels: int = 64, lang: str = "en") -> Figure:
    """Queries and keys of one head in one 2-D PCA plane, after :func:`qk_joint_transform`.

    O(N·d): every query and key is a point at any length; tokens are written next to them
    up to ``max_labels`` tokens.
    """
    lang = _check_lang(lang)
    layer, head = _check_head(trace, layer, head)
    q, k = _qk_of(trace, layer, head, "qk")
    q2, k2, alpha = qk_joint_transform(q, k)
    xy = _pca2(torch.cat([q2, k2])).float()
    lq = q2.shape[0]
    keys = _keys(trace)
    labels = max(lq, len(keys)) <= max_labels
    with mpl.rc_context(_rc((trace.tokens + keys) if labels else [], lang)):
        fig = Figure(figsize=(6, 5))
        ax = fig.subplots()
        dot = 22 if labels else max(1.0, 22 * (max_labels / lq) ** 0.5)
        ax.scatter(xy[:lq, 0], xy[:lq, 1], c="#3451b2", s=dot, label=_t(lang, "query"))
        ax.scatter(xy[lq:, 0], xy[lq:, 1], c="#d9730d", s=dot, marker="s", label=_t(lang, "key"))
        if labels:
            for i, t in enumerate(trace.tokens):
                ax.annotate(_label(t), (float(xy[i, 0]), float(xy[i, 1])), fontsize=7,
                            color="#3451b2", xytext=(3, 3), textcoords="offset points")
            for j, t in enumerate(keys):
                ax.annotate(_label(t), (float(xy[lq + j, 0]), float(xy[lq + j, 1])),
                            fontsize=7, color="#d9730d", xytext=(3, -8),
                            textcoords="offset points")
        ax.legend(fontsize=8)
        ax.set_title(_t(lang, "head", model=trace.model, layer=layer, head=head)
                     + _t(lang, "qk", n=lq, a=f"{alpha:.2f}"), fontsize=9)
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


def decomposition(trace: AttentionTrace, layer: int, head: int, *,
                  rows: range | None = None, cols: range | None = None,
                  max_tokens: int = 128, lang: str = "en") -> Figure:
    """Three panels: cos θ (direction), |q||k| (length) and their scaled product, the score.

    Drawn for queries ``rows`` × keys ``cols`` (ranges); by default the whole head up to
    ``max_tokens`` tokens, else the last ``max_tokens`` queries and keys (the title says
    which). Memory: that window only.
    """
    lang = _check_lang(lang)
    layer, head = _check_head(trace, layer, head)
    q, k = _qk_of(trace, layer, head, "decomposition")
    lq, lk = trace.seq_len, trace.key_len
    rows = range(max(0, lq - max_tokens), lq) if rows is None else rows
    cols = range(max(0, lk - max_tokens), lk) if cols is None else cols
    for name, r, n in (("rows", rows, lq), ("cols", cols, lk)):
        if not isinstance(r, range) or r.step != 1 or not 0 <= r.start < r.stop <= n:
            raise ValueError(f"{name} must be a range of step 1 within [0, {n}), got {r!r}")
    shape = trace.score_shape(layer)
    d = score_decomposition(q[rows.start:rows.stop], k[cols.start:cols.stop], shape.scale)
    keys = _keys(trace)
    qt = [trace.tokens[i] for i in rows]
    kt = [keys[j] for j in cols]
    n = max(len(rows), len(cols))
    keep = shape.visible(torch.arange(rows.start, rows.stop), torch.arange(cols.start, cols.stop),
                         lq=lq, lk=lk)
    # (title, map, colour map, colour limits: fixed, None for the map's own, or "sym" for
    # symmetric about 0 over what is visible)
    panels: list[tuple[str, torch.Tensor, str, tuple[float, float] | str | None]] = [
        (_t(lang, "cos"), d["cos"], "RdBu_r", (-1, 1)),
        (_t(lang, "norm"), d["q_norm"][:, None] * d["k_norm"][None, :], "Greys", None),
        (_t(lang, "score", s=f"{shape.scale:.3g}"), d["score"], "RdBu_r", "sym")]
    with mpl.rc_context(_rc(qt + kt, lang)):
        side = max(3.2, min(7.0, 0.22 * n + 1.5))
        fig = Figure(figsize=(3 * side + 1, side))
        axes = fig.subplots(1, 3)
        for ax, (title, m, cmap, lim) in zip(axes, panels):
            m = m.float()
            if keep is not None:
                m = m.masked_fill(~keep, float("nan"))
            if isinstance(lim, str):  # "sym"
                top = float(m.nan_to_num(0).abs().max()) or 1.0
                lim = (-top, top)
            im = ax.imshow(m.numpy(), cmap=cmap, aspect="auto", interpolation="nearest",
                           **({} if lim is None else {"vmin": lim[0], "vmax": lim[1]}))
            ax.set_title(title, fontsize=9)
            fs = 7 if n <= 30 else 5
            _ticks(ax, [_label(t) for t in qt], [_label(t) for t in kt], fontsize=fs)
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03)
        where = "" if (len(rows), len(cols)) == (lq, lk) else _t(
            lang, "window", q0=rows.start, q1=rows.stop - 1, k0=cols.start, k1=cols.stop - 1,
            n=lq)
        fig.suptitle(_t(lang, "head", model=trace.model, layer=layer, head=head)
                     + _t(lang, "decomposition", where=where), fontsize=10)
        fig.tight_layout()
    return fig


# -- files -----------------------------------------------------------------------------------

KINDS: dict[str, Callable[..., Figure]] = {
    "heatmap": heatmap, "grid": grid, "arcs": arcs, "qk": qk_projection,
    "decomposition": decomposition}


def plot(trace: AttentionTrace, kind: str, layer: int = 0, head: int = 0, *,
         lang: str = "en") -> Figure:
    """The figure ``kind`` (one of :data:`KINDS`) of ``trace``, in ``lang`` (:data:`LANGS`)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    if kind == "grid":
        return grid(trace, lang=lang)
    return KINDS[kind](trace, layer, head, lang=lang)


def save_figure(fig: Figure, path: str | os.PathLike[str], *, dpi: int = 130) -> Path:
    """Write ``fig`` as PNG or SVG (by suffix), atomically, cut to its artists (as
    ``savefig(bbox_inches="tight")``; a PNG drawn once: :func:`attnlab._render.figure_png`)."""
    from attnlab._render import figure_png

    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise ValueError(f"--out must end in .png or .svg, got {str(path)!r}")
    with atomic_open(path, "wb") as f:
        if fmt == "png":
            f.write(figure_png(fig, dpi=dpi))
        else:
            fig.savefig(f, format=fmt, dpi=dpi, bbox_inches="tight")
    return path
