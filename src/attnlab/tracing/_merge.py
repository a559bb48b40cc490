"""Merged tokens and their pieces: the one rule by which a merged trace's tokens are made of
its pieces (:meth:`~attnlab.tracing.attention.AttentionTrace.merge_tokens`), and the pieces'
labels.

A merge puts consecutive pieces (e.g. the byte pieces of one Chinese character) into
``groups``; the trace keeps the pieces' tensors. Any quantity defined per pair of pieces
(a weight, a value-weighted weight, a rollout entry) is merged by the rule **summed over a
key token's pieces, averaged over a query token's pieces**:
``M'[a, b] = mean_{i in a} sum_{j in b} M[i, j]`` (:func:`merge`), so that rows that sum to
1 over the pieces still sum to 1 over the tokens. A quantity of one pair (q·k, a score's
parts) has no merged value: a merged pair is the list of its piece pairs, each labelled as
a piece of its token (:func:`piece_labels`).

说明：合并的词元（如同一汉字的字节片段）保留各片段的张量；按片段定义的量（权重、值加权、
rollout）按同一规则合并：对键词元的各片段求和，对查询词元的各片段取平均。

>>> import torch
>>> g = [[0], [1, 2]]
>>> merge(torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]), g,
...       torch.arange(2), None)
tensor([[1.0000, 0.0000],
        [0.3500, 0.6500]])
>>> [p["label"] for p in piece_labels(g, ["a", "苹"], [0, 1, 2])]
['a', '苹 (piece 1 of 2)', '苹 (piece 2 of 2)']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

import torch
from torch import Tensor

__all__ = ["RULE", "MergeRecord", "PieceLabel", "pieces_of", "merge", "piece_labels",
           "token_of_piece", "piece_fields"]

#: The rule, as :meth:`AttentionTrace.merge_tokens` records it by default.
RULE = "weights summed over keys, averaged over queries"


class MergeRecord(TypedDict):
    """What a merged trace's ``meta["merged"]`` records
    (:meth:`~attnlab.tracing.attention.AttentionTrace.merge_tokens`)."""

    rule: str
    #: The pieces of each merged token.
    groups: list[list[int]]
    #: The pieces' labels, as before the first merge.
    pieces: list[str]
    #: The pieces' token ids, as before the first merge (None: the trace had none).
    piece_ids: list[int] | None


class PieceLabel(TypedDict):
    """One piece of a merged token, labelled as a piece of its token (:func:`piece_labels`)."""

    #: Its position among the pieces.
    piece: int
    #: Its token's index.
    token: int
    #: Its place among the token's pieces, from 1.
    index: int
    #: How many pieces the token has.
    count: int
    #: The token's label, with ``(piece k of n)`` when it has more than one piece.
    label: str


def pieces_of(groups: Sequence[Sequence[int]], tokens: Tensor) -> tuple[Tensor, Tensor]:
    """The pieces of merged ``tokens`` (1-D long) in order, and for each piece its place in
    ``tokens``."""
    pieces = [i for a in tokens.tolist() for i in groups[a]]
    size = torch.tensor([len(g) for g in groups], dtype=torch.long)[tokens]
    return (torch.tensor(pieces, dtype=torch.long),
            torch.repeat_interleave(torch.arange(tokens.shape[0]), size))


def merge(raw: Tensor, groups: Sequence[Sequence[int]], rows: Tensor,
          cols: Tensor | None) -> Tensor:
    """``raw`` (pieces of ``rows`` x pieces of ``cols``, all pieces when ``cols`` is None)
    merged by the rule: summed over each key token's pieces, averaged over each query
    token's pieces; (len(rows), len(cols)) in ``raw``'s dtype, on ``raw``'s device (``rows``
    and ``cols``: positions on the host, from the groups)."""
    cols = torch.arange(len(groups)) if cols is None else cols
    row_of, col_of = pieces_of(groups, rows)[1], pieces_of(groups, cols)[1]
    if tuple(raw.shape) != (row_of.shape[0], col_of.shape[0]):
        raise ValueError(f"raw must hold the pieces' values ({row_of.shape[0]}, "
                         f"{col_of.shape[0]}), got {tuple(raw.shape)}")
    dev = raw.device
    count = torch.bincount(row_of, minlength=rows.shape[0]).to(dev, raw.dtype)
    summed = torch.zeros(raw.shape[0], cols.shape[0], dtype=raw.dtype, device=dev).index_add_(
        1, col_of.to(dev), raw)  # keys summed
    out = torch.zeros(rows.shape[0], cols.shape[0], dtype=raw.dtype, device=dev).index_add_(
        0, row_of.to(dev), summed)
    return out / count[:, None]


def token_of_piece(groups: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """For each piece, ``(its token, its place among the token's pieces)``."""
    return [(a, k) for a, g in enumerate(groups) for k in range(len(g))]


def piece_labels(groups: Sequence[Sequence[int]], tokens: Sequence[str],
                 pieces: Sequence[int]) -> list[PieceLabel]:
    """Each of ``pieces`` as a piece of its token: ``piece``, ``token`` (its index),
    ``index`` (1-based among the token's pieces), ``count`` and ``label`` — the token's
    label, with ``(piece k of n)`` when the token has more than one piece."""
    where = token_of_piece(groups)
    out: list[PieceLabel] = []
    for p in pieces:
        a, k = where[p]
        n = len(groups[a])
        label = tokens[a] if n == 1 else f"{tokens[a]} (piece {k + 1} of {n})"
        out.append({"piece": int(p), "token": a, "index": k + 1, "count": n, "label": label})
    return out


def piece_fields(meta: dict[str, Any], tokens: Sequence[str], groups: Sequence[Sequence[int]]
                 ) -> tuple[list[str], dict[str, Any], list[int] | None]:
    """The tokens, meta and token ids of the pieces of a merged trace: the labels recorded
    before the merge (``meta["merged"]["pieces"]``, else each piece its token's label), the
    meta without ``"merged"``, the recorded piece ids (or None)."""
    merged = meta.get("merged")  # (a MergeRecord, as the trace's meta holds it)
    recorded = merged if isinstance(merged, dict) else {}
    n = sum(len(g) for g in groups)
    pieces: Any = recorded.get("pieces")  # (a JSON value, checked here)
    labels = pieces if len(pieces or ()) == n else [
        tokens[a] for a, g in enumerate(groups) for _ in g]
    ids = recorded.get("piece_ids") if len(recorded.get("piece_ids") or ()) == n else None
    return list(labels), {k: v for k, v in meta.items() if k != "merged"}, ids
