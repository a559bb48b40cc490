"""attnlab <-> torch.nn conversions compute the same function."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.core.positional import RotaryEmbedding
from attnlab.nn import MultiHeadAttention


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kdim", [None, 12])
@pytest.mark.parametrize("num_kv_heads", [None, 2])
def test_to_torch_round_trip(bias, kdim, num_kv_heads):
    torch.manual_seed(0)
    ours = MultiHeadAttention(16, 4, bias=bias, kdim=kdim, vdim=kdim, num_kv_heads=num_kv_heads)
    theirs = ours.to_torch()
    assert theirs.batch_first
    x = torch.randn(2, 5, 16)
    kv = x if kdim is None else torch.randn(2, 7, kdim)
    a, wa = ours(x, None if kdim is None else kv, need_weights=True)
    b, wb = theirs(x, kv, kv, average_attn_weights=False)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    torch.testing.assert_close(wa, wb, atol=1e-6, rtol=0)
    back = MultiHeadAttention.from_torch(theirs)
    torch.testing.assert_close(back(x, None if kdim is None else kv)[0], a, atol=1e-6, rtol=0)


def test_unsupported_torch_features_are_refused():
    with pytest.raises(ValueError, match="add_bias_kv"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(ValueError, match="add_zero_attn"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_zero_attn=True))
    with pytest.raises(TypeError, match="Linear"):
        MultiHeadAttention.from_torch(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="rotary"):
        MultiHeadAttention(8, 2, rotary=RotaryEmbedding(4)).to_torch()
