"""The literature's head scores on dense attention patterns, each exactly as its source
computes it.

The patterns are dense tensors ``(..., N, N)``, rows summing to 1, query ``i`` and key
``j`` both positions in one sequence, which is how the sources state them. Sources (read
at the commits named in :mod:`attnlab.analysis.literature`, which runs them on models):

* TransformerLens's head detector: the detection patterns (:func:`previous_token_pattern`,
  :func:`duplicate_token_pattern`, :func:`induction_pattern`) and the similarity score
  (:func:`head_similarity`; its ``"abs"`` measure from streamed sums:
  :func:`abs_from_sums`);
* Gu et al. 2025: the importance of a key (:func:`token_importance`) and Sink%
  (:func:`sink_percent`);
* the TransformerLens main demo's induction stripe (:func:`demo_induction_stripe`) and
  Olsson et al.'s prefix matching (:func:`prefix_matching_score`) on repeated sequences.

Everything is computed in float64 from float32 weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from attnlab._errors import check_int
from attnlab.analysis.survey_config import EPSILON as _EPSILON

__all__ = ["EPSILON", "ERROR_MEASURES", "HEAD_NAMES", "abs_from_sums",
           "demo_induction_stripe", "detection_pattern", "duplicate_token_pattern",
           "head_similarity", "induction_pattern", "prefix_matching_score",
           "previous_token_pattern", "sink_percent", "token_importance"]

#: TransformerLens's named detection patterns.
HEAD_NAMES = ("previous_token_head", "duplicate_token_head", "induction_head")
ERROR_MEASURES = ("mul", "abs")
#: Gu et al.'s threshold (defined with the survey's settings, which import no torch).
EPSILON = _EPSILON


# --------------------------------------------------------------------------------------
# TransformerLens head detector: detection patterns and the similarity score
# --------------------------------------------------------------------------------------


def previous_token_pattern(n: int) -> Tensor:
    """TransformerLens ``get_previous_token_head_detection_pattern``: (n, n) float32 with
    ones at ``(i, i - 1)`` for ``i >= 1`` (the diagonal just below the main one), zeros
    elsewhere.

    >>> previous_token_pattern(3).tolist()
    [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    """
    _check_length(n)
    p = torch.zeros(n, n)
    p[1:, :-1] = torch.eye(n - 1)
    return torch.tril(p)


def duplicate_token_pattern(tokens: Sequence[int] | Tensor) -> Tensor:
    """TransformerLens ``get_duplicate_token_head_detection_pattern``: (n, n) float32 with
    ones at ``(i, j)`` for ``j < i`` and ``x_j = x_i`` (earlier copies of the query's
    token; the diagonal is zeroed, the upper triangle dropped).

    >>> duplicate_token_pattern([5, 7, 5]).tolist()
    [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    """
    t = _ids_tensor(tokens)
    eq = (t[None, :] == t[:, None]).float()
    eq.fill_diagonal_(0.0)
    return torch.tril(eq)


def induction_pattern(tokens: Sequence[int] | Tensor) -> Tensor:
    """TransformerLens ``get_induction_head_detection_pattern``: the duplicate pattern
    shifted one key to the right (first column zero, lower triangle kept): ones at
    ``(i, j)`` for ``1 <= j <= i`` and ``x_{j-1} = x_i``, the token right after an earlier
    copy of the query's token.

    >>> induction_pattern([5, 7, 5]).tolist()
    [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    """
    dup = duplicate_token_pattern(tokens)
    out = torch.zeros_like(dup)
    out[:, 1:] = dup[:, :-1]
    return torch.tril(out)


def detection_pattern(name: str, tokens: Sequence[int] | Tensor) -> Tensor:
    """The named TransformerLens detection pattern (one of :data:`HEAD_NAMES`) for
    ``tokens``."""
    if name == "previous_token_head":
        return previous_token_pattern(len(_ids_tensor(tokens)))
    if name == "duplicate_token_head":
        return duplicate_token_pattern(tokens)
    if name == "induction_head":
        return induction_pattern(tokens)
    raise ValueError(f"detection_pattern must be one of {', '.join(HEAD_NAMES)}, got {name!r}")


def head_similarity(patterns: Tensor, detection: Tensor, *, error_measure: str = "mul",
                    exclude_bos: bool = False, exclude_current_token: bool = False,
                    round_abs: bool = True) -> Tensor:
    """TransformerLens ``compute_head_attention_similarity_score`` for every pattern of
    ``patterns`` (..., N, N) against one ``detection`` pattern (N, N); float64 (...).

    * ``"mul"``: ``sum(A * P) / sum(A)``, where ``exclude_bos`` first zeroes the attention
      to key 0 and ``exclude_current_token`` the diagonal (of A, so the denominator
      changes too): the share of the head's attention that falls on the pattern.
    * ``"abs"``: ``1 - round(sum|A - P| / N, 3)`` (TransformerLens writes it
      ``1 - round(mean|A - P| * N, 3)``), with the exclusions zeroing those entries of
      ``|A - P|``; 1 is a perfect match, -1 a perfect mismatch. TransformerLens asserts
      that ``|A - P|`` is lower triangular (a causal pattern): a pattern with weight above
      the diagonal is refused here too. ``round_abs=False`` skips the rounding to 3
      decimals (for averaging many texts without rounding each).

    >>> a = torch.tensor([[1.0, 0.0], [0.25, 0.75]])
    >>> p = previous_token_pattern(2)
    >>> head_similarity(a, p).item(), head_similarity(a, p, error_measure="abs").item()
    (0.125, -0.25)
    """
    if error_measure not in ERROR_MEASURES:
        raise ValueError(f"error_measure must be one of {', '.join(ERROR_MEASURES)}, got "
                         f"{error_measure!r}")
    if not isinstance(patterns, Tensor) or patterns.dim() < 2 or (
            patterns.shape[-1] != patterns.shape[-2]):
        got = tuple(patterns.shape) if isinstance(patterns, Tensor) else type(patterns).__name__
        raise ValueError(f"patterns must be square attention patterns (..., N, N), got {got}")
    n = patterns.shape[-1]
    if not isinstance(detection, Tensor) or tuple(detection.shape) != (n, n):
        got = tuple(detection.shape) if isinstance(detection, Tensor) else type(detection)
        raise ValueError(f"detection must be an ({n}, {n}) pattern, got {got}")
    if bool((detection.triu(1) != 0).any()):
        raise ValueError("detection must be lower triangular (TransformerLens refuses a "
                         "detection pattern with entries above the diagonal)")
    a = patterns.double()
    p = detection.double()
    if error_measure == "mul":
        if exclude_bos or exclude_current_token:
            a = a.clone()
            if exclude_bos:
                a[..., :, 0] = 0.0
            if exclude_current_token:
                a.diagonal(dim1=-2, dim2=-1).zero_()
        return (a * p).sum((-2, -1)) / a.sum((-2, -1))
    diff = (a - p).abs()
    if bool((diff.triu(1) != 0).any()):
        raise ValueError("the 'abs' error measure needs causal (lower-triangular) attention "
                         "patterns: TransformerLens asserts |A - P| is lower triangular; "
                         "use error_measure='mul' for a bidirectional model")
    if exclude_bos:
        diff[..., :, 0] = 0.0
    if exclude_current_token:
        diff.diagonal(dim1=-2, dim2=-1).zero_()
    return _one_minus(diff.sum((-2, -1)) / n, round_abs)


def abs_from_sums(mass: Tensor, hits: Tensor, size: Tensor | float, n: Tensor | float, *,
                  round_abs: bool = True) -> Tensor:
    """TransformerLens's ``"abs"`` measure without exclusions, ``1 - round(sum|A - P| / N,
    3)``, from sums over the rows (streamed, no N x N tensor): for a 0/1 pattern ``P`` and
    weights in [0, 1], ``sum|A - P| = mass - 2 hits + |P|`` with ``mass = sum A``, ``hits =
    sum A P`` and ``size = |P|``, the ones of the pattern; ``n`` the sequence's length.

    >>> a = torch.tensor([[1.0, 0.0], [0.25, 0.75]])
    >>> p = previous_token_pattern(2)
    >>> abs_from_sums(a.sum(), (a * p).sum(), p.sum(), 2).item()
    -0.25
    """
    return _one_minus((mass - 2.0 * hits + size) / n, round_abs)


def _one_minus(raw: Tensor, round_abs: bool) -> Tensor:
    """``1 - raw``, ``raw`` rounded to 3 decimals first (as TransformerLens) if asked."""
    raw = raw.double()
    if not round_abs:
        return 1.0 - raw
    return torch.tensor([1.0 - round(v, 3) for v in raw.flatten().tolist()],
                        dtype=torch.float64).reshape(raw.shape)


# --------------------------------------------------------------------------------------
# Gu et al.: token importance, the sink criterion, Sink%
# --------------------------------------------------------------------------------------


def token_importance(patterns: Tensor, *, causal: bool) -> Tensor:
    """Gu et al. (2025), eq. of the attention-sink metric: the importance of key ``k``,
    ``alpha_k = (1 / |Q_k|) * sum_{i in Q_k} A_ik``, where ``Q_k`` are the queries that can
    see key ``k``: ``i >= k`` when causal (``1 / (T - k + 1) * sum_{i=k}^{T}`` in the
    paper's 1-based notation), every query otherwise. ``patterns`` (..., N, N) ->
    float64 (..., N).

    >>> a = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    >>> token_importance(a, causal=True).tolist()
    [0.75, 0.5]
    """
    _check_square("patterns", patterns)
    n = patterns.shape[-1]
    seen_by = (n - torch.arange(n)).double() if causal else torch.full((n,), float(n),
                                                                         dtype=torch.float64)
    return patterns.double().sum(-2) / seen_by


def sink_percent(importance_first: Tensor, *, epsilon: float = EPSILON) -> float:
    """Gu et al.'s Sink%: 100 x the share of (sample, layer, head) whose first-token
    importance ``alpha_1`` exceeds ``epsilon`` (strictly), from ``importance_first`` of any
    shape (e.g. (samples, L, H)).

    >>> sink_percent(torch.tensor([[0.9, 0.3], [0.31, 0.0]], dtype=torch.float64))
    50.0
    """
    if importance_first.numel() == 0:
        raise ValueError("importance_first is empty: no (sample, layer, head) to count")
    return float((importance_first.double() > epsilon).double().mean()) * 100.0


# --------------------------------------------------------------------------------------
# Repeated random tokens: the TransformerLens demo, Olsson et al.'s prefix matching
# --------------------------------------------------------------------------------------


def demo_induction_stripe(patterns: Tensor, seq_len: int) -> Tensor:
    """TransformerLens main demo, ``induction_score_hook``: the mean of the attention
    pattern's diagonal at offset ``1 - seq_len`` (query ``i`` to key ``i - seq_len + 1``,
    for ``i = seq_len - 1 ... 2 seq_len - 1``: ``seq_len + 1`` entries) of patterns
    (..., 2 seq_len, 2 seq_len) of a sequence repeated twice; float64 (...). The demo
    averages this over its batch as well (:func:`demo_induction_score`).

    >>> demo_induction_stripe(torch.eye(4), 2).item()  # the identity has no stripe at -1
    0.0
    """
    _check_square("patterns", patterns)
    if patterns.shape[-1] != 2 * seq_len:
        raise ValueError(f"patterns must be of a sequence of {seq_len} tokens repeated twice "
                         f"({2 * seq_len} tokens), got {patterns.shape[-1]}")
    return patterns.double().diagonal(offset=1 - seq_len, dim1=-2, dim2=-1).mean(-1)


def prefix_matching_score(patterns: Tensor, *, period: int, repeats: int = 2,
                          start: int = 0) -> Tensor:
    """Olsson et al. (2022), prefix matching: on ``start`` prefix tokens followed by a
    sequence of ``period`` distinct tokens repeated ``repeats`` times, the attention each
    token of a later repeat pays to the tokens right after its earlier occurrences,
    ``sum_{c < r} A[i, start + c * period + t + 1]`` for the query ``i`` at offset ``t`` of
    repeat ``r >= 1``, averaged over those queries; float64 (...).

    Unlike the TransformerLens demo stripe it scores only the queries of the later
    repeats, and counts every earlier occurrence when there are more than two repeats.

    >>> a = torch.zeros(4, 4); a[:, 0] = 1.0; a[2, 1] = 1.0; a[2, 0] = 0.0
    >>> prefix_matching_score(a, period=2).item()  # row 2 on key 1; row 3 on key 0
    0.5
    """
    _check_square("patterns", patterns)
    n = patterns.shape[-1]
    if period < 1 or repeats < 2 or start < 0 or start + period * repeats > n:
        raise ValueError(f"period={period}, repeats={repeats}, start={start} need period "
                         f">= 1, repeats >= 2 and start + period * repeats <= N = {n}")
    rows, cols = [], []
    for r in range(1, repeats):
        for t in range(period):
            i = start + r * period + t
            for c in range(r):
                rows.append(i)
                cols.append(start + c * period + t + 1)
    a = patterns.double()
    hit = a[..., torch.tensor(rows), torch.tensor(cols)].sum(-1)
    return hit / ((repeats - 1) * period)


# --------------------------------------------------------------------------------------
# small checks
# --------------------------------------------------------------------------------------


def _check_length(n: int) -> None:
    check_int("n", n, minimum=1)


def _check_square(name: str, t: Any) -> None:
    if not isinstance(t, Tensor) or t.dim() < 2 or t.shape[-1] != t.shape[-2]:
        got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
        raise ValueError(f"{name} must be square attention patterns (..., N, N), got {got}")


def _ids_tensor(tokens: Sequence[int] | Tensor) -> Tensor:
    t = torch.as_tensor(tokens).flatten()
    if t.numel() == 0 or t.is_floating_point():
        raise ValueError(f"tokens must be a non-empty sequence of token ids, got {tokens!r}")
    return t.long()


