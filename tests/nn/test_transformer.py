"""Transformer pieces built from attnlab attention match torch and decode consistently."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab import GPT, GPTConfig, Transformer, TransformerConfig, TransformerEncoderLayer


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_torch(norm_first, activation):
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation=activation,
                                     batch_first=True, norm_first=norm_first)
    ours = TransformerEncoderLayer.from_torch(ref)
    x = torch.randn(3, 7, 32, requires_grad=True)
    key_mask = torch.ones(3, 7, dtype=torch.bool)
    key_mask[1, 5:] = False
    ref.train()  # keep torch off its inference fast path so gradients flow
    a = ours(x, key_mask=key_mask)
    b = ref(x, src_key_padding_mask=~key_mask)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    ga, = torch.autograd.grad(a.sum(), x)
    gb, = torch.autograd.grad(b.sum(), x)
    torch.testing.assert_close(ga, gb, atol=1e-4, rtol=0)
    ref.eval(), ours.eval()
    with torch.no_grad():  # torch's fast path (nested tensors zero padded rows; compare real)
        torch.testing.assert_close(ours(x, key_mask=key_mask)[key_mask],
                                   ref(x, src_key_padding_mask=~key_mask)[key_mask],
                                   atol=1e-5, rtol=0)


def test_post_ln_and_pre_ln_differ():
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    post = TransformerEncoderLayer.from_torch(ref)
    pre = TransformerEncoderLayer.from_torch(ref)
    pre.norm_first = True
    x = torch.randn(1, 4, 16)
    assert not torch.allclose(post(x), pre(x), atol=1e-3)


@pytest.mark.parametrize("positional", ["learned", "rope"])
@pytest.mark.parametrize("n_kv_head", [None, 1])
def test_gpt_generate_with_and_without_cache_is_identical(positional, n_kv_head):
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=23, block_size=40, n_layer=2, n_head=2, n_embd=16,
                    n_kv_head=n_kv_head, positional=positional)
    model = GPT(cfg).eval()
    prompt = torch.randint(0, 23, (2, 5))
    a = model.generate(prompt, 20, greedy=True, use_cache=True)
    b = model.generate(prompt, 20, greedy=True, use_cache=False)
    assert torch.equal(a, b) and a.shape == (2, 25)
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    s1 = model.generate(prompt, 10, use_cache=True, generator=g1)
    s2 = model.generate(prompt, 10, use_cache=False, generator=g2)
    assert torch.equal(s1, s2)


def test_gpt_ties_embeddings_and_is_causal():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=8))
    assert model.lm_head.weight is model.wte.weight
    x = torch.randint(0, 11, (1, 8))
    y = x.clone()
    y[0, 5] = (y[0, 5] + 1) % 11
    with torch.no_grad():
        la, lb = model(x), model(y)
    torch.testing.assert_close(la[:, :5], lb[:, :5])  # the past never sees the future
    assert not torch.allclose(la[:, 5:], lb[:, 5:])


def test_gpt_refuses_bad_input():
    model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=8))
    with pytest.raises(ValueError, match="block_size=8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 11\)"):
        model(torch.full((1, 3), 11))
    with pytest.raises(ValueError, match="integer tensor"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="divisible"):
        GPT(GPTConfig(n_embd=10, n_head=3))


def test_encoder_decoder_transformer_learns_to_copy():
    torch.manual_seed(0)
    cfg = TransformerConfig(src_vocab_size=12, tgt_vocab_size=12, d_model=32, n_heads=2,
                            n_encoder_layers=1, n_decoder_layers=1, dim_feedforward=64)
    model = Transformer(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(100):
        src = torch.randint(2, 12, (32, 6), generator=g)
        tgt_in = torch.cat([torch.ones(32, 1, dtype=torch.long), src[:, :-1]], 1)  # 1 = BOS
        logits = model(src, tgt_in)
        loss = nn.functional.cross_entropy(logits.reshape(-1, 12), src.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.1 * losses[0]
