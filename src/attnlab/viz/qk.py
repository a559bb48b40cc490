"""The explorer's QK and geometry views, from Python: the softmax rows the QK view
recomputes from q and k (at any scale and temperature, under the trace's score shaping:
:meth:`ScoreShape.probs <attnlab.core.scores.ScoreShape.probs>`), which heads keep their q
and k on the page and in which dtype, and what float16 storage costs."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from attnlab.core.scores import ScoreShape
from attnlab.tracing.attention import AttentionTrace
from attnlab.viz.codec import encode_blob
from attnlab.viz.geometry import joint_projection

__all__ = ["qk_row_probs", "sink_logits", "qk_heads", "qk_payload"]


def qk_row_probs(q_rows: Tensor, k: Tensor, shape: ScoreShape, *, rows: Sequence[int],
                 lq: int, lk: int, head: int = 0, scale: float | None = None,
                 temperature: float = 1.0) -> Tensor:
    """(R, Lk) float64 softmax rows as the QK view computes them, at any scale and temperature:
    :meth:`ScoreShape.probs <attnlab.core.scores.ScoreShape.probs>` of ``shape``.

    Shaped scores (capped, ALiBi and dense bias added, hidden keys at −∞) divided by
    ``temperature``; a learned sink logit (divided by ``temperature`` too) joins the softmax
    and takes its share away from every key. At the trace's own scale and temperature 1
    this is the model's attention (the trace's ``weights_rows``) to float32 rounding.

    >>> s = ScoreShape(scale=0.5, causal=True)
    >>> p = qk_row_probs(torch.eye(2), torch.eye(2), s, rows=[0, 1], lq=2, lk=2)
    >>> [round(x, 6) for x in p[1].tolist()], p[0].tolist()  # sigmoid(0.5); causal row 0
    ([0.377541, 0.622459], [1.0, 0.0])
    """
    return shape.probs(q_rows, k, rows=rows, head=head, lq=lq, lk=lk, scale=scale,
                       temperature=temperature)


def sink_logits(shape: ScoreShape, head: int, rows: Tensor) -> Tensor | None:
    """(R,) the sink logit of ``head`` for each query row (one per head, or one per head
    and row), or None when the model has none: :meth:`ScoreShape.sink_logits
    <attnlab.core.scores.ScoreShape.sink_logits>`."""
    return shape.sink_logits(rows, head=head)


def qk_heads(trace: AttentionTrace, budget: int, first: tuple[int, int]) -> tuple[list, str]:
    """Which heads get their q/k stored (``first`` first), and in which dtype: float32 when
    every head fits ``budget`` bytes, else as many heads as fit in float16."""
    nl, nh = trace.num_layers, trace.num_heads
    per_head = trace.seq_len * trace.head_dim + trace.key_len * trace.head_dim
    order = [first] + [(l_, h) for l_ in range(nl) for h in range(nh) if (l_, h) != first]
    if per_head * 4 * len(order) <= budget:
        return order, "f32"
    n = min(len(order), budget // (per_head * 2))
    return order[: max(n, 1)], "f16"



def qk_payload(trace: AttentionTrace, heads: list[tuple[int, int]], dtype: str) -> dict:
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
            exact = shape.probs(q[n], k[k_of[n]], rows=rows, head=h, lq=lq, lk=lk)
            stored = shape.probs(q[n].half().float(), k[k_of[n]].half().float(), rows=rows,
                                 head=h, lq=lq, lk=lk)
            err[n] = float((exact - stored).abs().max())
    geo = joint_projection(q, k[k_of])
    return {"heads": [list(x) for x in heads], "kv_heads": [list(x) for x in kv],
            "k_of": k_of, "dtype": dtype, "q": encode_blob(q, dtype, gz=True),
            "k": encode_blob(k, dtype, gz=True), "storage_error": err,
            "geometry": encode_blob(geo, "f32", gz=True)}
