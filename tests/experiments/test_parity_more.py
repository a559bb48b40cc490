"""Parity beyond the encoder layer: cross-attention, the decoder layer and the whole
encoder-decoder stack against torch; wrong conversions are caught; every name has Chinese."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.experiments import parity
from attnlab.i18n import merge, missing
from attnlab.nn import MultiHeadAttention, TransformerDecoderLayer, TransformerEncoderLayer


@pytest.fixture(scope="module")
def checks():
    return parity.run_parity(0)


def _named(checks, start):
    found = [c for c in checks if c.name.startswith(start)]
    assert found, f"no parity check named {start!r}…"
    return found


@pytest.mark.parametrize("start, count", [("cross-attention MHA", 6),
                                          ("TransformerDecoderLayer", 4),
                                          ("nn.Transformer (2 + 2 layers)", 4)])
def test_new_parity_checks_pass(checks, start, count):
    found = _named(checks, start)
    assert len(found) == count
    assert all(c.passed for c in found), [(c.name, c.max_error) for c in found if not c.passed]


def test_every_name_has_chinese(checks):
    texts = [c.name for c in checks] + [t for n, v, _ in parity.seed_demos(0) for t in (n, v)]
    assert missing(texts, merge(parity.ZH)) == []
    assert missing(["a parity check nobody named"], merge(parity.ZH)) != []


def test_run_parity_is_deterministic_and_keeps_the_rng(checks):
    torch.manual_seed(5)
    expected = torch.rand(2)
    torch.manual_seed(5)
    again = parity.run_parity(0)
    assert torch.equal(torch.rand(2), expected)
    assert [(c.name, c.max_error) for c in again] == [(c.name, c.max_error) for c in checks]


# -- wrong conversions must fail --------------------------------------------------------------


class _DropsKeyMask(MultiHeadAttention):
    """Wrong: ignores the key mask (padding leaks into the weights)."""

    def forward(self, *args, key_mask=None, **kwargs):
        return super().forward(*args, **kwargs)


def test_cross_attention_ignoring_memory_padding_is_caught(monkeypatch):
    right = MultiHeadAttention.from_torch

    def wrong(m):
        ours = right(m)
        ours.__class__ = _DropsKeyMask
        return ours

    monkeypatch.setattr(parity.MultiHeadAttention, "from_torch", staticmethod(wrong))
    found = parity._cross_checks(torch.Generator().manual_seed(0))
    assert not any(c.passed for c in found if c.name.endswith(": output"))


def test_decoder_without_the_cross_attention_weights_is_caught(monkeypatch):
    right = TransformerDecoderLayer.from_torch.__func__

    def wrong(cls, layer):
        ours = right(cls, layer)
        ours.cross_attn = MultiHeadAttention(ours.cross_attn.embed_dim,
                                             ours.cross_attn.num_heads).eval()
        return ours

    monkeypatch.setattr(TransformerDecoderLayer, "from_torch", classmethod(wrong))
    found = parity._decoder_checks(torch.Generator().manual_seed(0))
    assert not any(c.passed for c in found)


def test_stack_with_the_wrong_layer_norm_placement_is_caught(monkeypatch):
    right = TransformerEncoderLayer.from_torch.__func__

    def wrong(cls, layer):
        ours = right(cls, layer)
        ours.norm_first = not ours.norm_first
        return ours

    monkeypatch.setattr(TransformerEncoderLayer, "from_torch", classmethod(wrong))
    found = parity._stack_checks(torch.Generator().manual_seed(0))
    assert not any(c.passed for c in found)


# -- TransformerDecoderLayer.from_torch -------------------------------------------------------


def test_decoder_from_torch_copies_the_configuration():
    layer = nn.TransformerDecoderLayer(16, 2, 24, dropout=0.25, activation="gelu",
                                       layer_norm_eps=1e-6, batch_first=True, norm_first=True)
    ours = TransformerDecoderLayer.from_torch(layer)
    assert ours.training and ours.norm_first and ours.norm3.eps == 1e-6
    assert ours.ff.linear1.out_features == 24 and ours.dropout3.p == 0.25
    assert torch.equal(ours.cross_attn.out_proj.weight, layer.multihead_attn.out_proj.weight)
    assert torch.equal(ours.norm3.weight, layer.norm3.weight)


def test_decoder_from_torch_refuses_what_it_cannot_copy():
    with pytest.raises(TypeError, match="torch.nn.TransformerDecoderLayer, got "
                                        "TransformerEncoderLayer"):
        TransformerDecoderLayer.from_torch(nn.TransformerEncoderLayer(16, 2, batch_first=True))
    layer = nn.TransformerDecoderLayer(16, 2, 24, activation=nn.Tanh(), batch_first=True)
    with pytest.raises(ValueError, match="unsupported activation 'tanh'"):
        TransformerDecoderLayer.from_torch(layer)
