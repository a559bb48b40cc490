"""Mask constructors: one convention (True = may attend), checked against brute force."""

from __future__ import annotations

import pytest
import torch

import attnlab
from attnlab.core import masks


@pytest.mark.parametrize(("lq", "lk"), [(1, 1), (4, 4), (2, 5), (5, 2), (0, 3)])
def test_causal_matches_definition(lq, lk):
    m = masks.causal(lq, lk)
    expected = torch.tensor([[j <= i + lk - lq for j in range(lk)] for i in range(lq)],
                            dtype=torch.bool).reshape(lq, lk)
    assert m.dtype == torch.bool and torch.equal(m, expected)


def test_padding_and_refusal_to_truncate():
    m = masks.padding([3, 1, 0], 4)
    assert m.tolist() == [[True] * 3 + [False], [True, False, False, False], [False] * 4]
    assert masks.padding(torch.tensor([2, 3])).shape == (2, 3)
    with pytest.raises(ValueError, match="max_len=2 is shorter than the longest length 3"):
        masks.padding([3], 2)
    with pytest.raises(ValueError, match="lengths must be a 1-D integer"):
        masks.padding(torch.tensor([[1.0]]))
    with pytest.raises(ValueError, match=">= 0"):
        masks.padding([-1])


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("lq", "lk", "window"), [(6, 6, 1), (6, 6, 3), (3, 7, 2), (5, 5, 9)])
def test_sliding_window_matches_definition(causal, lq, lk, window):
    m = masks.sliding_window(lq, lk, window=window, causal=causal)
    for i in range(lq):
        p = i + lk - lq
        for j in range(lk):
            want = (0 <= p - j < window) if causal else abs(p - j) < window
            assert bool(m[i, j]) == want


def test_sliding_window_rejects_bad_window():
    with pytest.raises(ValueError, match="window must be an int >= 1, got 0"):
        masks.sliding_window(4, window=0)


def test_combine_bool_and_float():
    c = masks.causal(3)
    key = torch.tensor([True, True, False])
    both = masks.combine(c, key, None)
    assert torch.equal(both, c & key)
    f = torch.zeros(3, 3)
    f[0, 0] = -1.5
    mixed = masks.combine(c, f)
    assert mixed.dtype == torch.float32
    assert mixed[0, 0] == -1.5 and torch.isneginf(mixed[0, 1]) and mixed[2, 1] == 0
    assert masks.combine(None, None) is None
    with pytest.raises(ValueError, match="do not broadcast"):
        masks.combine(torch.ones(2, 3, dtype=torch.bool), torch.ones(4, dtype=torch.bool))
    with pytest.raises(TypeError, match="int64"):
        masks.combine(torch.ones(3, dtype=torch.long))


def test_bool_and_equivalent_float_mask_give_the_same_attention():
    q, k, v = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    m = masks.combine(masks.causal(5), masks.padding([4], 5)[:, None, None, :])
    a = attnlab.scaled_dot_product_attention(q, k, v, m)
    b = attnlab.scaled_dot_product_attention(q, k, v, masks.to_additive(m))
    torch.testing.assert_close(a, b)
    # the opposite convention (torch's key_padding_mask) would give a different answer
    c = attnlab.scaled_dot_product_attention(q, k, v, ~m[..., :1, :].expand_as(m) & m)
    assert not torch.allclose(a, c)


def test_from_torch_key_padding_mask_inverts():
    kpm = torch.tensor([[False, False, True]])
    assert masks.from_torch_key_padding_mask(kpm).tolist() == [[True, True, False]]
