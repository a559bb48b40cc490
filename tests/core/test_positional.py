"""Sinusoidal table, its relative rotation, RoPE and ALiBi, each checked both ways."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.core import positional as P


def test_table_follows_the_formula():
    pe = P.sinusoidal_table(30, 16, dtype=torch.float64)
    for pos in (0, 7, 29):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-12)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-12)


@pytest.mark.parametrize("offset", [1, 5, 37])
def test_relative_rotation_is_one_matrix_for_all_positions(offset):
    pe = P.sinusoidal_table(200, 64, dtype=torch.float64)
    m = P.relative_rotation(offset, 64)
    err = (pe[offset:] - pe[:-offset] @ m.T).abs().max()
    assert err < 1e-9
    assert torch.allclose(m @ m.T, torch.eye(64, dtype=torch.float64), atol=1e-12)  # rotation
    wrong = P.relative_rotation(offset + 1, 64)  # the wrong offset fails
    assert (pe[offset:] - pe[:-offset] @ wrong.T).abs().max() > 1e-3


def test_encoding_module_adds_table_and_refuses_overflow():
    enc = P.SinusoidalPositionalEncoding(8, max_len=10)
    x = torch.zeros(2, 4, 8)
    torch.testing.assert_close(enc(x, offset=3)[0], P.sinusoidal_table(10, 8)[3:7])
    with pytest.raises(ValueError, match="exceed max_len=10"):
        enc(torch.zeros(1, 8, 8), offset=3)
    with pytest.raises(ValueError, match=r"\(B, N, 8\)"):
        enc(torch.zeros(1, 4, 6))
    with pytest.raises(ValueError, match="embed_dim must be even"):
        P.sinusoidal_table(4, 7)


def test_rope_scores_depend_only_on_offset():
    torch.manual_seed(0)
    rope = P.RotaryEmbedding(16)
    q, k = torch.randn(1, 16), torch.randn(1, 16)

    def score(m, n):
        return float(rope(q, positions=torch.tensor([m])) @ rope(k, positions=torch.tensor([n])).T)

    assert score(9, 4) == pytest.approx(score(105, 100), abs=1e-4)
    assert score(9, 4) != pytest.approx(score(9, 5), abs=1e-3)
    # rotation preserves norms
    x = torch.randn(3, 5, 16)
    torch.testing.assert_close(rope(x).norm(dim=-1), x.norm(dim=-1))


def test_alibi_slopes():
    assert P.alibi_slopes(8).tolist() == [2.0 ** -(i + 1) for i in range(8)]
    s6 = P.alibi_slopes(6)
    assert s6.tolist()[:4] == P.alibi_slopes(4).tolist()
    assert s6.tolist()[4:] == P.alibi_slopes(8).tolist()[0::2][:2]
    bias = P.alibi_bias(2, 3)
    assert bias.shape == (2, 3, 3) and bias[0, 2, 0] == -2 * P.alibi_slopes(2)[0]
