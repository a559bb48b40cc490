"""Does cross-attention follow the words in time? Spearman's rank correlation between each
word's position in a transcript and the encoder position of its cross-attention peak.

The rows of a speech model's cross-attention are the transcript's tokens, its columns time.
:func:`word_rows` keeps the rows that are words; :func:`peak_positions` takes for each the
encoder position with the most weight, averaged over every layer and head (no head picked);
:func:`alignment` correlates the words' order with those peaks (:func:`spearman`: near 1 when
the peak moves forward word by word); :func:`best_aligned_head` finds the head whose own
peaks follow the words best.

>>> import torch
>>> from attnlab.tracing.attention import AttentionTrace
>>> w = torch.eye(4)[[0, 1, 3]][None, None]  # three words peaking at keys 0, 1, 3
>>> t = AttentionTrace(tokens=[" a", " b", " c"], key_tokens=list("0123"), weights=w,
...                    stack="cross")
>>> alignment(t)
(1.0, [' a', ' b', ' c'], [0, 1, 3])
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from attnlab.tracing.attention import AttentionTrace

__all__ = ["alignment", "best_aligned_head", "peak_positions", "spearman", "word_rows"]


def spearman(a: Any, b: Any) -> float:
    """Spearman's rank correlation of two equal-length sequences (ties share their mean
    rank); NaN when either is constant.

    >>> spearman([1, 2, 3, 4], [10, 20, 15, 40]), spearman([1, 2, 3], [3, 2, 1])
    (0.8, -1.0)
    """
    def ranks(v: Any) -> np.ndarray:
        v = np.asarray(v, dtype=np.float64)
        order = np.argsort(v, kind="stable")
        r = np.empty(v.size)
        r[order] = np.arange(v.size)
        for value in np.unique(v):
            same = v == value
            r[same] = r[same].mean()
        return r

    ra, rb = ranks(a), ranks(b)
    if ra.size != rb.size or ra.size < 2:
        raise ValueError(f"spearman needs two sequences of the same length >= 2, got "
                         f"{ra.size} and {rb.size}")
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return round(float(np.corrcoef(ra, rb)[0, 1]), 12)


def word_rows(tokens: list[str]) -> list[int]:
    """The decoder rows that are words: a letter in the label, not a special token."""
    return [i for i, t in enumerate(tokens)
            if any(c.isalpha() for c in t) and not t.strip().startswith("<|")]


def peak_positions(cross: AttentionTrace, rows: list[int]) -> list[int]:
    """For each decoder row in ``rows``: the encoder position with the most
    cross-attention, averaged over every layer and head (no head is picked)."""
    mean = sum(cross.head_weights(layer, h)[rows].double()
               for layer in range(cross.num_layers) for h in range(cross.num_heads))
    return [int(i) for i in torch.as_tensor(mean).argmax(-1)]


def best_aligned_head(cross: AttentionTrace) -> tuple[int, int, float]:
    """(layer, head, ρ) of the head whose own cross-attention peaks follow the words best
    (Spearman ρ as :func:`alignment`, per head; ties go to the head with the most weight on
    its peaks): the head the explorer opens on."""
    rows = word_rows(cross.tokens)
    best: tuple[float, float, int, int] | None = None
    for layer in range(cross.num_layers):
        for h in range(cross.num_heads):
            w = cross.head_weights(layer, h)[rows]
            rho = spearman(range(len(rows)), w.argmax(-1).tolist())
            key = (-1.0 if math.isnan(rho) else rho, float(w.max(-1).values.mean()), layer, h)
            if best is None or key[:2] > best[:2]:
                best = key
    assert best is not None
    return best[2], best[3], best[0]


def alignment(cross: AttentionTrace) -> tuple[float, list[str], list[int]]:
    """(Spearman ρ between each word's position in the transcript and the time of its
    cross-attention peak, the words, the peaks' encoder positions)."""
    rows = word_rows(cross.tokens)
    if len(rows) < 3:
        raise ValueError(f"the transcript has {len(rows)} words; the alignment needs 3 or "
                         "more")
    peaks = peak_positions(cross, rows)
    return spearman(range(len(rows)), peaks), [cross.tokens[i] for i in rows], peaks
