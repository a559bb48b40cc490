"""The explorer's QK and geometry views, from Python: the softmax rows the QK view
recomputes from q and k (at any scale and temperature, under the trace's score shaping:
:meth:`ScoreShape.probs <attnlab.core.scores.ScoreShape.probs>`), which heads keep their q
and k on the page and in which dtype, and what float16 storage costs.

**Merged traces** (byte pieces of a character merged into one token): q and k belong to
the pieces, not to the merged tokens, so the QK view of a merged token shows **its pieces'
q·k against every key piece**, one query piece at a time, each key labelled as a piece of
its token (``苹 (piece 2 of 3)``); the merged row the other views show is those pieces'
weights summed over each key token's pieces and averaged over the query's pieces. The page
embeds the pieces' q and k (:func:`qk_payload` of the trace's ``unmerged()``, with the
``pieces`` sizes of :func:`pieces_payload`); the server answers with
:func:`qk_pieces_data`.

说明：合并追踪中 q 与 k 属于字节片段，QK 视图对所选字符的各片段逐一显示它与所有键片段的
q·k，每个键标明是哪个字符的第几个片段。"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from attnlab._errors import Error
from attnlab.core.scores import ScoreShape
from attnlab.tracing import _merge
from attnlab.tracing.attention import AttentionTrace
from attnlab.viz.codec import encode_blob
from attnlab.viz.geometry import joint_projection

__all__ = ["qk_row_probs", "sink_logits", "qk_heads", "qk_payload", "pieces_payload",
           "qk_pieces_data", "PIECES_RULE"]

#: What the QK view of a merged token shows, as the page and the server's answer state it.
PIECES_RULE = ("q and k belong to the byte pieces: the selected piece's q·k against every "
               "key piece; the merged weights are the pieces' weights summed over a key "
               "token's pieces and averaged over the query token's pieces")


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
    d = trace.head_dim
    if d is None:
        raise Error("the QK view needs the trace's q and k: it keeps none (made without qkv)")
    nl, nh = trace.num_layers, trace.num_heads
    per_head = trace.seq_len * d + trace.key_len * d
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
    q = torch.stack([trace.layer_tensor("q", l_)[h] for l_, h in heads]).float()  # (S, Lq, d)
    k = torch.stack([trace.layer_tensor("k", l_)[g] for l_, g in kv]).float()  # (S_kv, Lk, d)
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
            "k_of": k_of, "dtype": dtype, "lq": lq, "lk": lk,
            "q": encode_blob(q, dtype, gz=True),
            "k": encode_blob(k, dtype, gz=True), "storage_error": err,
            "geometry": encode_blob(geo, "f32", gz=True)}


def pieces_payload(trace: AttentionTrace) -> dict | None:
    """How a merged trace's tokens are made of pieces, for the page: ``sizes`` (the number
    of pieces of each token, in order), ``count`` (of pieces) and the merge's ``rule``; None
    for a trace without a merge."""
    if trace.groups is None:
        return None
    rule = (trace.meta.get("merged") or {}).get("rule", _merge.RULE)
    return {"sizes": [len(g) for g in trace.groups], "count": sum(map(len, trace.groups)),
            "rule": str(rule), "qk_rule": PIECES_RULE}


def qk_pieces_data(trace: AttentionTrace, layer: int, head: int, query: int, *,
                   top: int = 48) -> dict:
    """What the QK view draws for merged token ``query`` of one head: one row per piece of
    the token (``query_pieces``, labelled), each against every key piece (``key_len`` of
    them), as :func:`attnlab.viz.api.qk_data` gives one row of an unmerged trace.

    ``q`` (P, d), ``dots`` (P, Lk) q·k in float64 (unscaled), ``allowed`` (P, Lk),
    ``bias`` (P, Lk) or None, ``sink`` (one per piece, or None), ``weights`` (P, Lk) the
    pieces' exact rows; ``keys`` the key pieces shown (the ``top`` strongest of each row,
    and the query's own pieces), labelled in ``key_pieces``, with their ``k``;
    ``merged_weights`` the merged token's row (Lk tokens) — the pieces' rows summed over
    each key token's pieces and averaged over the query's pieces — and ``rule``. ``layer``,
    ``head``, ``query`` and ``top`` are taken as checked."""
    g, tokens = trace.groups, trace.tokens
    if g is None:
        raise Error("qk_pieces_data is for a merged trace (byte pieces merged into tokens); "
                    "this trace has no merge: use attnlab.viz.api.qk_data")
    pieces_t = trace.unmerged()
    mine = list(g[query])
    lq = lk = pieces_t.seq_len
    shape = pieces_t.score_shape(layer)
    k = pieces_t.layer_tensor("k", layer)[pieces_t.kv_head(head)]  # (Lk pieces, d)
    q = pieces_t.layer_tensor("q", layer)[head, mine]  # (P, d)
    dots = torch.stack([k.double() @ q[r].double() for r in range(len(mine))])
    allowed = torch.isfinite(shape.scores(q, k, rows=mine, head=head, lq=lq, lk=lk))
    bias = shape.additive(mine, head=head, lq=lq, lk=lk)
    if bias is not None:  # hidden keys carry 0: JSON-safe
        bias = bias.masked_fill(~allowed, 0.0)
    w = pieces_t.weights_rows(layer, head, mine).float()  # (P, Lk pieces)
    keys = {p for p in mine if bool(allowed[mine.index(p), p])}
    for r in range(len(mine)):
        keys |= set(torch.topk(w[r], min(top, lk)).indices.tolist())
    keys_l = sorted(keys)
    sink = shape.sink_logits(mine, head=head)
    return {"layer": layer, "head": head, "query": query, "scale": shape.scale,
            "softcap": shape.softcap, "merged": True, "rule": PIECES_RULE,
            "key_len": lk, "query_pieces": _merge.piece_labels(g, tokens, mine),
            "key_pieces": _merge.piece_labels(g, tokens, keys_l),
            "sink": None if sink is None else [float(x) for x in sink],
            "q": encode_blob(q.float(), "f32"), "dots": encode_blob(dots, "f64"),
            "allowed": encode_blob(allowed, "b8"),
            "bias": None if bias is None else encode_blob(bias, "f64"),
            "weights": encode_blob(w, "f32"), "keys": keys_l,
            "k": encode_blob(k[keys_l].float(), "f32"),
            "merged_weights": encode_blob(trace.weights_rows(layer, head, [query])[0], "f32")}
