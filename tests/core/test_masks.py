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


@pytest.mark.parametrize(("lq", "lk", "window"), [(6, 6, 1), (6, 6, 3), (3, 7, 2), (5, 5, 9),
                                                   (7, 3, 2), (0, 4, 2)])
def test_causal_window_matches_definition(lq, lk, window):
    m = masks.causal(lq, lk, window=window)
    want = torch.tensor([[0 <= i + lk - lq - j < window for j in range(lk)] for i in range(lq)],
                        dtype=torch.bool).reshape(lq, lk)
    assert torch.equal(m, want)
    # each query sees at most `window` keys, the last query exactly min(window, lk)
    assert all(int(n) <= window for n in m.sum(-1))
    if lq:
        assert int(m[-1].sum()) == min(window, lk)
    # a wrong variant (window counted without the diagonal) differs
    wrong = torch.tensor([[0 <= i + lk - lq - j <= window for j in range(lk)]
                          for i in range(lq)], dtype=torch.bool).reshape(lq, lk)
    if lq and lk > window:
        assert not torch.equal(m, wrong)


def test_causal_window_none_is_plain_causal_and_bad_windows_are_refused():
    assert torch.equal(masks.causal(5, 8, window=None), masks.causal(5, 8))
    assert torch.equal(masks.causal(5, 8, window=100), masks.causal(5, 8))
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="window must be a positive int"):
            masks.causal(4, window=bad)
    with pytest.raises(ValueError, match="lq must be an int >= 0, got -1"):
        masks.causal(-1)
    with pytest.raises(TypeError, match="lk must be an int"):
        masks.causal(2, 2.0)


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


@pytest.mark.parametrize("pad", [float("-inf"), -1e9, -10000.0, torch.finfo(torch.float32).min])
def test_from_torch_key_padding_mask_float(pad):
    kpm = torch.tensor([[0.0, 0.0, pad], [0.0, pad, pad]])
    got = masks.from_torch_key_padding_mask(kpm)
    assert got.tolist() == [[True, True, False], [True, False, False]]
    # the bool mask torch would build from the same padding gives the same key mask
    assert torch.equal(got, masks.from_torch_key_padding_mask(kpm != 0))
    half = masks.from_torch_key_padding_mask(kpm.to(torch.float16).nan_to_num(neginf=-65504))
    assert torch.equal(half, got)


@pytest.mark.parametrize("value", [-1.0, 0.5, float("inf"), float("nan"), -9999.0])
def test_from_torch_key_padding_mask_refuses_values_with_no_key_meaning(value):
    with pytest.raises(ValueError, match="key_padding_mask"):
        masks.from_torch_key_padding_mask(torch.tensor([[0.0, value]]))


def test_from_torch_key_padding_mask_refuses_other_types_and_shapes():
    with pytest.raises(TypeError, match="key_padding_mask.*int64"):
        masks.from_torch_key_padding_mask(torch.tensor([[0, 1]]))
    with pytest.raises(TypeError, match="key_padding_mask must be a torch.Tensor, got list"):
        masks.from_torch_key_padding_mask([[False, True]])
    with pytest.raises(ValueError, match=r"\(B, Lk\).*\(1, 1, 2\)"):
        masks.from_torch_key_padding_mask(torch.zeros(1, 1, 2, dtype=torch.bool))


def test_padding_refuses_non_integer_lengths():
    with pytest.raises(TypeError, match="lengths"):
        masks.padding("abc")
    with pytest.raises(TypeError, match="max_len must be an int"):
        masks.padding([1], 2.0)
