"""attnlab.analysis.alignment: Spearman's ρ against a case computed by hand (ties included),
and the alignment of cross-attention with the words: a monotone one scores 1, the same
attention with its time positions shuffled scores lower, the aligned head is found."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlab.analysis.alignment import (
    alignment,
    best_aligned_head,
    peak_positions,
    spearman,
    word_rows,
)
from attnlab.tracing.attention import AttentionTrace


def test_spearman_by_hand_with_ties():
    # ranks of a: 0 1 2 3 4; of b (the two 4s share 2.5): 1 0 2.5 2.5 4.
    # centred: a -2 -1 0 1 2, b -1 -2 0.5 0.5 2; covariance 2 + 2 + 0 + 0.5 + 4 = 8.5,
    # sums of squares 10 and 1 + 4 + 0.25 + 0.25 + 4 = 9.5
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 4, 5]) == pytest.approx(8.5 / math.sqrt(95))
    assert spearman([10, 20, 30], [3, 2, 1]) == -1.0
    assert spearman([1, 2, 3, 4], [10, 20, 15, 40]) == pytest.approx(0.8)
    assert math.isnan(spearman([1, 2, 3], [7, 7, 7]))  # a constant sequence has no ranks
    for a, b in (([1, 2], [1, 2, 3]), ([1], [1])):
        with pytest.raises(ValueError, match="same length >= 2"):
            spearman(a, b)


def test_a_wrong_spearman_without_ties_would_differ():
    """Ranks without the shared mean (ties broken by position) give another number: the
    hand-computed case tells them apart."""
    b = np.array([2, 1, 4, 4, 5])
    broken = np.argsort(np.argsort(b, kind="stable"), kind="stable")
    wrong = float(np.corrcoef(np.arange(5), broken)[0, 1])
    assert wrong != pytest.approx(spearman(range(5), b))


def _cross(peaks: list[list[int]], keys: int = 12) -> AttentionTrace:
    """A cross-attention trace over words " w0" ...: one layer, a head per list of peaks,
    each row's weight concentrated (softmax of a sharp bump) around its peak."""
    n = len(peaks[0])
    pos = torch.arange(keys, dtype=torch.float32)
    w = torch.stack([torch.softmax(-(pos[None] - torch.tensor(p, dtype=torch.float32)[:, None])
                                   ** 2, -1) for p in peaks])[None]  # (1, H, n, keys)
    tokens = ["<|start|>"] + [f" w{i}" for i in range(n - 1)]
    return AttentionTrace(tokens=tokens, key_tokens=[f"{i * 0.02:.2f}s" for i in range(keys)],
                          weights=w, stack="cross")


def test_alignment_of_a_monotone_cross_attention_and_of_it_shuffled():
    forward = [0, 1, 3, 4, 6, 8, 9, 11]
    t = _cross([forward])
    rho, words, peaks = alignment(t)
    assert rho == 1.0 and words == [f" w{i}" for i in range(7)] and peaks == forward[1:]
    order = np.random.default_rng(0).permutation(12)  # the time positions shuffled
    shuffled = _cross([[int(order[p]) for p in forward]])
    assert alignment(shuffled)[0] < rho
    assert alignment(_cross([forward[::-1]]))[0] == -1.0
    with pytest.raises(ValueError, match="the transcript has 2 words"):
        alignment(_cross([[0, 3, 5]]))


def test_the_best_aligned_head_and_the_mean_over_heads():
    forward = [0, 1, 3, 4, 6, 8, 9, 11]
    order = np.random.default_rng(1).permutation(12)
    t = _cross([[int(order[p]) for p in forward], forward])  # head 1 follows the words
    assert best_aligned_head(t) == (0, 1, 1.0)
    rows = word_rows(t.tokens)
    assert rows == list(range(1, 8))
    mean = (t.head_weights(0, 0) + t.head_weights(0, 1))[rows].argmax(-1).tolist()
    assert peak_positions(t, rows) == mean


def test_word_rows_keep_words_only():
    assert word_rows(["<|startoftranscript|>", " the", ".", " cat", "<|endoftext|>", "2"]) \
        == [1, 3]
