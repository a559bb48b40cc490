"""Find the heads a trained model specialized into, with :mod:`attnlab.analysis`'s scores.

The model runs under :func:`attnlab.tracing.capture.capture`, which gives one
:class:`~attnlab.tracing.attention.AttentionTrace` per sequence of the batch; every head is
then scored by :func:`attnlab.analysis.head_scores` (TransformerLens's definitions):

* previous-token score: ``previous``, the share of the head's attention on the token just
  before each query, over all rows (at most (N-1)/N: the first row has no previous token).
* induction score: ``induction``, the share on the keys that follow an earlier occurrence
  of the query's token, over the rows from the first token that occurred before to the
  end (where an induction head has a target): 1.0 for a perfect induction head.

Both are averaged over the sequences of the batch.

For a lookup task (``assoc-recall``, a sequence ending in a query key that occurred once
before), :func:`score_lookup_heads` scores the attention of the *query position* (the last
one) alone, with the same two token-matching scores of :func:`attnlab.analysis.head_scores`
restricted to that row:

* value score: ``induction`` on the last row, the share of its attention on the token right
  after the earlier occurrence of the query key (the value to recall): 1.0 for a head that
  reads the answer.
* key score: ``duplicate`` on the last row, the share on the earlier occurrence of the key
  itself (a near miss for the lookup: one position early).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import torch
from torch import Tensor, nn

from attnlab.analysis import head_scores
from attnlab.tracing.capture import capture

__all__ = ["BestHead", "HeadScores", "LookupScores", "TaskHeads", "capture_weights",
           "first_repeat", "score_heads", "score_lookup_heads", "score_lookup_traces",
           "score_traces", "trace_batch"]


class BestHead(TypedDict):
    """Per-head scores of one kind as JSON: the best head and every score (4 places)."""

    layer: int
    head: int
    score: float  # the best head's
    scores: list[list[float]]  # (L, H)


class TaskHeads(TypedDict, total=False):
    """The heads a run's task is about, as JSON: ``previous_token`` and ``induction``
    (:meth:`HeadScores.to_json`), or ``query_to_value``, ``query_to_key`` and
    ``sequences`` (:meth:`LookupScores.to_json`)."""

    previous_token: BestHead
    induction: BestHead
    query_to_value: BestHead  # the lookup head: the query key's attention to the value
    query_to_key: BestHead  # the same to the key's earlier occurrence
    sequences: int  # the sequences the lookup scores average over


def _check_idx(idx: Tensor) -> None:
    if not isinstance(idx, Tensor) or idx.dim() != 2 or idx.is_floating_point():
        got = (f"dtype {idx.dtype} shape {tuple(idx.shape)}" if isinstance(idx, Tensor)
               else type(idx).__name__)
        raise ValueError(f"idx must be token ids (B, N) of an integer dtype, got {got}")


def trace_batch(model: nn.Module, idx: Tensor) -> list[Any]:
    """Run ``model`` on ``idx`` (B, N) under capture: one trace per sequence, with its
    token ids."""
    _check_idx(idx)
    with torch.no_grad(), capture(model) as cap:
        model(idx)
    return [cap.trace(b, token_ids=idx[b].tolist()) for b in range(idx.shape[0])]


def capture_weights(model: nn.Module, idx: Tensor) -> Tensor:
    """Dense attention weights (L, B, H, N, N) of every head on ``idx`` (B, N), for
    pictures of the short sequences of the synthetic tasks."""
    traces = trace_batch(model, idx)
    return torch.stack([torch.stack([torch.stack([t.head_weights(layer, head)
                                                  for head in range(t.num_heads)])
                                     for t in traces]) for layer in range(traces[0].num_layers)])


def first_repeat(ids: Sequence[int]) -> int | None:
    """Position of the first token that occurred earlier in ``ids`` (None if none did).

    >>> first_repeat([9, 1, 2, 3, 1, 2])
    4
    """
    seen: set[int] = set()
    for i, x in enumerate(ids):
        if x in seen:
            return i
        seen.add(x)
    return None


def _best(s: Tensor) -> tuple[int, int, float]:
    """(layer, head, score) of the largest of per-head scores ``s`` (L, H)."""
    i = int(s.argmax())
    return i // s.shape[1], i % s.shape[1], float(s.flatten()[i])


def _scores_json(s: Tensor) -> BestHead:
    """Per-head scores ``s`` (L, H) as JSON: the best head (layer, head, score) and every
    score, rounded to 4 places."""
    layer, head, score = _best(s)
    return {"layer": layer, "head": head, "score": round(score, 4),
            "scores": [[round(float(v), 4) for v in r] for r in s]}


@dataclass(frozen=True)
class HeadScores:
    """Per-head scores, (L, H) each, and the best head of each kind as (layer, head)."""

    previous_token: Tensor
    induction: Tensor

    @property
    def best_previous_token(self) -> tuple[int, int, float]:
        return _best(self.previous_token)

    @property
    def best_induction(self) -> tuple[int, int, float]:
        return _best(self.induction)

    def to_json(self) -> TaskHeads:
        return {"previous_token": _scores_json(self.previous_token),
                "induction": _scores_json(self.induction)}


def score_traces(traces: Sequence[Any]) -> HeadScores:
    """Previous-token and induction scores (see the module docstring) of traces with token
    ids, averaged over the traces; a trace with no repeated token adds no induction score."""
    if not traces:
        raise ValueError("traces is empty; give at least one trace")
    prev, ind = [], []
    for t in traces:
        if getattr(t, "token_ids", None) is None:
            raise ValueError("every trace needs its token_ids (for the induction score)")
        prev.append(head_scores(t)["previous"])
        start = first_repeat(t.token_ids)
        if start is not None:
            ind.append(head_scores(t, queries=range(start, t.seq_len))["induction"])
    induction = torch.stack(ind).mean(0) if ind else torch.zeros_like(prev[0])
    return HeadScores(torch.stack(prev).mean(0).float(), induction.float())


def score_heads(model: nn.Module, idx: Tensor) -> HeadScores:
    """Previous-token and induction scores of every head of ``model`` on ``idx`` (B, N)."""
    return score_traces(trace_batch(model, idx))


@dataclass(frozen=True)
class LookupScores:
    """Per-head scores of the query position, (L, H) each (see the module docstring):
    ``value`` (attention on the value after the matching key) and ``key`` (on the matching
    key); ``sequences``: how many sequences were averaged."""

    value: Tensor
    key: Tensor
    sequences: int

    @property
    def best_value(self) -> tuple[int, int, float]:
        """(layer, head, score) of the head that puts the most attention on the value."""
        return _best(self.value)

    @property
    def best_key(self) -> tuple[int, int, float]:
        """(layer, head, score) of the head that puts the most attention on the key."""
        return _best(self.key)

    def to_json(self) -> TaskHeads:
        return {"query_to_value": _scores_json(self.value),
                "query_to_key": _scores_json(self.key), "sequences": self.sequences}


def score_lookup_traces(traces: Sequence[Any]) -> LookupScores:
    """Value and key scores of the last query row of traces with token ids, averaged over
    the traces whose last token occurred earlier (the others have no key to find)."""
    if not traces:
        raise ValueError("traces is empty; give at least one trace")
    value, key = [], []
    for t in traces:
        ids = getattr(t, "token_ids", None)
        if ids is None:
            raise ValueError("every trace needs its token_ids (to find the query key)")
        if ids[-1] not in ids[:-1]:
            continue
        s = head_scores(t, queries=range(t.seq_len - 1, t.seq_len))
        value.append(s["induction"])
        key.append(s["duplicate"])
    if not value:
        raise ValueError("no trace ends in a token that occurred earlier: there is no key to "
                         "look up (give sequences of a lookup task such as assoc-recall)")
    return LookupScores(torch.stack(value).mean(0).float(), torch.stack(key).mean(0).float(),
                        len(value))


def score_lookup_heads(model: nn.Module, idx: Tensor) -> LookupScores:
    """Value and key scores of every head of ``model`` on the query position of ``idx``
    (B, N): sequences that end in a key that occurred once before."""
    return score_lookup_traces(trace_batch(model, idx))
