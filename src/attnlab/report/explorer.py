"""The report's explorer section: the interactive explorer on MiniLM, inline in the page,
with the check that its QK view (softmax(q·kᵀ·scale) recomputed from the captured q and k)
equals the model's own weights. The explorer follows the page's language switch (its
texts are in ``viz/static/explorer/i18n.json``)."""

from __future__ import annotations

from attnlab.models import ModelNotAvailableError, load
from attnlab.report.html import ReportContext, Section, bilingual
from attnlab.tracing.attention import AttentionTrace
from attnlab.viz.explorer import Explorer, explore

__all__ = ["build", "section_for", "qk_view_error", "REPORT_TEXT", "QK_TOL"]

REPORT_TEXT = "The cat sat on the mat because it was tired."
QK_TOL = 1e-4
MODEL = "MiniLM (all-MiniLM-L6-v2)"


def qk_view_error(trace: AttentionTrace) -> float:
    """max |QK view − weights| over every row of every head: the explorer's QK view
    (:meth:`ScoreShape.probs <attnlab.core.scores.ScoreShape.probs>` of each layer's score
    shape from the captured q and k, in float64, as
    :func:`attnlab.viz.explorer.qk_row_probs` computes it) against the trace's own weights
    (``weights_rows``). NaN when
    the view has nothing to recompute from (no q and k, or merged tokens)."""
    if not trace.has_qk or trace.groups is not None or not trace.shapes:
        return float("nan")
    lq, lk = trace.seq_len, trace.key_len
    rows = range(lq)
    err = 0.0
    for layer in range(trace.num_layers):
        shape = trace.score_shape(layer)
        q, k = trace.layer_tensor("q", layer), trace.layer_tensor("k", layer)  # checked
        for head in range(trace.num_heads):
            p = shape.probs(q[head], k[trace.kv_head(head)], rows=rows, head=head, lq=lq,
                            lk=lk)
            w = trace.weights_rows(layer, head, rows).double()
            err = max(err, float((p - w).abs().max()))
    return err


def section_for(ex: Explorer, text: str, *, model: str = MODEL) -> Section:
    """The section for an explorer ``ex`` of ``text`` on ``model`` (a name, as the page
    writes it in both languages): what to do with it, its QK check, and the explorer."""
    trace = ex.traces[0]
    body = bilingual(
        f"{model}: {trace.num_layers} layers × {trace.num_heads} heads, on “{text}”. Click a "
        "thumbnail to open a head; in the QK view turn the scale and temperature and watch "
        "the softmax saturate or flatten.",
        f"{model}：{trace.num_layers} 层 × {trace.num_heads} 个头，输入“{text}”。点击缩略图"
        "打开一个头；在 QK 视图中调节缩放与温度，观察 softmax 变尖锐或变平坦。",
    )
    err = qk_view_error(trace)
    ok = err <= QK_TOL
    body += bilingual(
        f"The QK view recomputes softmax(q·kᵀ·scale) from the captured q and k; at the "
        f"model's scale it equals the model's own weights: max |error| = {err:.1e} "
        f"(tolerance {QK_TOL:g}).",
        f"QK 视图由捕获的 q 与 k 重新计算 softmax(q·kᵀ·缩放)；在模型自己的缩放下，它与模型的"
        f"权重一致：最大 |误差| = {err:.1e}（容差 {QK_TOL:g}）。", cls="claim")
    return Section("explorer", "Attention explorer", "注意力探索器", body + ex.to_html(),
                   passed=ok, rows=[("tokens", str(trace.seq_len), None),
                                    ("QK recomputation vs model weights", f"{err:.1e}", ok)])


def build(ctx: ReportContext) -> Section:
    """The explorer on MiniLM for one English sentence (a note, not a failure, when the
    model cannot be loaded)."""
    try:
        loaded = load("minilm", progress=not ctx.quiet)
    except ModelNotAvailableError as exc:  # the page still builds; the section says why not
        ctx.log(f"explorer: real model unavailable ({exc})")
        return Section("explorer", "Attention explorer", "注意力探索器",
                       bilingual(f"The real model could not be loaded: {exc}",
                                 f"无法加载真实模型：{exc}"), passed=None)
    ex = explore(loaded, REPORT_TEXT)
    ex.uid = "ax-report"
    return section_for(ex, REPORT_TEXT)
