"""The report's explorer section: the interactive explorer on MiniLM, inline in the page,
with the check that its QK view (softmax(q·kᵀ·scale) recomputed from the captured q and k)
equals the model's own weights."""

from __future__ import annotations

import torch

from attnlab.core.masks import causal as causal_mask
from attnlab.models import ModelNotAvailableError, load
from attnlab.report.html import ReportContext, Section, bilingual
from attnlab.viz.explorer import explore

__all__ = ["build", "qk_view_error", "REPORT_TEXT", "QK_TOL"]

REPORT_TEXT = "The cat sat on the mat because it was tired."
QK_TOL = 1e-4


def qk_view_error(trace) -> float:
    """max |softmax(q·kᵀ·scale) − weights| over every head, in float64: what the explorer's
    QK view recomputes from the captured q and k against the trace's weights (NaN when the
    trace holds no q and k)."""
    if trace.q is None or trace.k is None or trace.scale is None:
        return float("nan")
    q, k = trace.q.double(), trace.k.double()  # (L, H, Lq, d), (L, H_kv, Lk, d)
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # grouped heads: one per query
    s = (q @ k.transpose(-1, -2)) * trace.scale  # (L, H, Lq, Lk)
    if trace.causal:
        s = s.masked_fill(~causal_mask(s.shape[-2], s.shape[-1]), float("-inf"))
    return float((torch.softmax(s, dim=-1) - trace.weights.double()).abs().max())


def build(ctx: ReportContext) -> Section:
    """The explorer on MiniLM for one English sentence (a note, not a failure, when the
    model cannot be loaded)."""
    try:
        loaded = load("minilm", progress=not ctx.quiet)
    except ModelNotAvailableError as exc:  # the page still builds; the section says why not
        ctx.log(f"explorer: real model unavailable ({exc})")
        return Section("explorer", "Attention explorer", "注意力浏览器",
                       bilingual(f"The real model could not be loaded: {exc}",
                                 f"无法加载真实模型：{exc}"), passed=None)
    ex = explore(loaded, REPORT_TEXT)
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
    err = qk_view_error(trace)
    ok = err <= QK_TOL
    body += bilingual(
        f"The QK view recomputes softmax(q·kᵀ·scale) from the captured q and k; at the "
        f"model's scale it equals the model's own weights: max |error| = {err:.1e} "
        f"(tolerance {QK_TOL:g}).",
        f"QK 视图由捕获的 q 与 k 重新计算 softmax(q·kᵀ·scale)；在模型自己的缩放下它与模型的"
        f"权重一致：最大 |误差| = {err:.1e}（容差 {QK_TOL:g}）。", cls="claim")
    return Section("explorer", "Attention explorer", "注意力浏览器", body + ex.to_html(),
                   passed=ok, rows=[("tokens", str(trace.seq_len), None),
                                    ("QK recomputation vs model weights", f"{err:.1e}", ok)])
