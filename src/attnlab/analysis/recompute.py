"""Recompute a trace's attention from its q, k and v, and measure the disagreement.

For each layer, head and tile of query rows: the shaped scores of the trace's q and k
(the layer's :class:`~attnlab.core.scores.ScoreShape`: scale, causal, window, key mask,
soft-cap, ALiBi, bias, sink logits), their softmax in float64, and that softmax times v. Against:

* ``weights``: the trace's own weights (``weights_rows``). For a trace that stores the
  model's dense weights, they are the model's; for a q/k/log-sum-exp trace they are
  ``exp(s - lse)`` with the log-sum-exp the model computed, so the check says that the
  captured lse, q, k and score shaping agree.
* ``context``: the per-head outputs the model computed (when the trace stores v and
  context).

Memory O(tile x N) per head, like everything in :mod:`attnlab.analysis`.
"""

from __future__ import annotations

from typing import Any

import torch

from attnlab.core.scores import row_tiles

__all__ = ["recompute_errors"]


def recompute_errors(trace: Any, *, tile_rows: int | None = None) -> dict[str, float]:
    """Max |error| of the recomputed weights (and context) against the trace's.

    Returns ``{"weights": ...}`` and, when the trace stores v and context,
    ``"context"`` too.

    >>> from attnlab.tracing.attention import AttentionTrace
    >>> q, k, v = torch.randn(3, 1, 2, 5, 4).unbind(0)  # (L, H, N, d)
    >>> w = torch.softmax(q @ k.mT * 0.5, dim=-1)
    >>> t = AttentionTrace(tokens=list("abcde"), weights=w, q=q, k=k, v=v, context=w @ v,
    ...                    scale=0.5)
    >>> err = recompute_errors(t)
    >>> err["weights"] < 1e-6, err["context"] < 1e-6
    (True, True)
    """
    if not getattr(trace, "has_qk", False):
        raise ValueError("recompute_errors needs a trace with q and k (traced with qkv=True), "
                         f"got {trace!r}")
    if getattr(trace, "groups", None) is not None:
        raise ValueError(
            f"recompute_errors needs the model's own tokens, but this trace merges "
            f"{trace.q.shape[2]} pieces into {trace.seq_len} tokens; trace with "
            f"merge_pieces=False")
    lq, lk = trace.seq_len, trace.key_len
    with_context = trace.v is not None and trace.context is not None
    err_w = torch.zeros((), dtype=torch.float64)
    err_c = torch.zeros((), dtype=torch.float64)
    for layer in range(trace.num_layers):
        shape = trace.score_shape(layer)
        # one layer of each tensor, read checked (a streamed trace's layer digests)
        q_l, k_l = trace.layer_tensor("q", layer), trace.layer_tensor("k", layer)
        if with_context:
            v_l, ctx_l = trace.layer_tensor("v", layer), trace.layer_tensor("context", layer)
        for head in range(trace.num_heads):
            kv = trace.kv_head(head)
            k = k_l[kv]  # (Lk, d)
            for r0, r1 in row_tiles(lq, lk, tile_rows):
                rows = range(r0, r1)
                s = shape.scores(q_l[head, r0:r1], k, rows=rows, head=head,
                                 lq=lq, lk=lk).double()  # (T, Lk)
                lse = shape.logsumexp(s, head, rows)[..., None]  # learned sinks included
                w = torch.exp(s - lse.masked_fill(lse == float("-inf"), float("inf")))
                got = trace.weights_rows(layer, head, rows).double()
                err_w = torch.maximum(err_w, (w - got).abs().max())
                if with_context:
                    ctx = w @ v_l[kv].double()
                    err_c = torch.maximum(
                        err_c, (ctx - ctx_l[head, r0:r1].double()).abs().max())
    out = {"weights": float(err_w)}
    if with_context:
        out["context"] = float(err_c)
    return out
