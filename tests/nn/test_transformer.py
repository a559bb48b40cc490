"""Transformer pieces built from attnlab attention match torch and decode consistently."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.nn import (
    GPT,
    GPTConfig,
    KVCache,
    Transformer,
    TransformerConfig,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)


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
@pytest.mark.parametrize("num_kv_heads", [None, 1])
def test_gpt_generate_with_and_without_cache_is_identical(positional, num_kv_heads):
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=23, block_size=40, num_layers=2, num_heads=2, embed_dim=16,
                    num_kv_heads=num_kv_heads, positional=positional)
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
    model = GPT(GPTConfig(vocab_size=11, block_size=8, num_layers=1, num_heads=2, embed_dim=8))
    assert model.lm_head.weight is model.wte.weight
    x = torch.randint(0, 11, (1, 8))
    y = x.clone()
    y[0, 5] = (y[0, 5] + 1) % 11
    with torch.no_grad():
        la, lb = model(x), model(y)
    torch.testing.assert_close(la[:, :5], lb[:, :5])  # the past never sees the future
    assert not torch.allclose(la[:, 5:], lb[:, 5:])


def test_gpt_refuses_bad_input():
    model = GPT(GPTConfig(vocab_size=11, block_size=8, num_layers=1, num_heads=2, embed_dim=8))
    with pytest.raises(ValueError, match="block_size=8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 11\)"):
        model(torch.full((1, 3), 11))
    with pytest.raises(TypeError, match="idx must be an integer tensor.*float32"):
        model(torch.zeros(1, 3))
    with pytest.raises(TypeError, match="idx must be an integer tensor.*list"):
        model([[1, 2]])
    with pytest.raises(TypeError, match="caches must be a list of 1 KVCache"):
        model(torch.zeros(1, 3, dtype=torch.long), caches=[])
    with pytest.raises(TypeError, match="config must be a GPTConfig"):
        GPT({"vocab_size": 11})
    with pytest.raises(TypeError, match="config must be a TransformerConfig, got GPTConfig"):
        Transformer(GPTConfig(vocab_size=11))


@pytest.mark.parametrize(
    ("kwargs", "exc", "words"),
    [
        (dict(embed_dim=10, num_heads=3), ValueError, ["embed_dim=10", "num_heads=3"]),
        (dict(embed_dim=2, num_heads=4), ValueError, ["embed_dim=2", "head_dim"]),
        (dict(num_heads=0), ValueError, ["num_heads", "0"]),
        (dict(embed_dim=0), ValueError, ["embed_dim", "0"]),
        (dict(num_layers=2.0), TypeError, ["num_layers", "float"]),
        (dict(num_kv_heads=3), ValueError, ["num_kv_heads=3", "num_heads=4"]),
        (dict(dropout="0.1"), TypeError, ["dropout", "str"]),
        (dict(dropout=1.5), ValueError, ["dropout", "1.5"]),
        (dict(bias="no"), TypeError, ["bias", "bool"]),
        (dict(positional="alibi"), ValueError, ["positional", "alibi"]),
        (dict(positional="rope", embed_dim=12, num_heads=4), ValueError, ["rope", "head_dim=3"]),
    ],
)
def test_gpt_config_refuses_bad_values(kwargs, exc, words):
    with pytest.raises(exc) as info:
        GPTConfig(**kwargs)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    ("make", "exc", "words"),
    [
        (lambda: TransformerConfig(num_heads=0), ValueError, ["num_heads", "0"]),
        (lambda: TransformerConfig(embed_dim=30, num_heads=4), ValueError, ["embed_dim=30"]),
        (lambda: TransformerConfig(dropout="0.1"), TypeError, ["dropout", "str"]),
        (lambda: TransformerConfig(ff_dim=0), ValueError, ["ff_dim", "0"]),
        (lambda: TransformerEncoderLayer(16, 3), ValueError, ["embed_dim=16", "num_heads=3"]),
        (lambda: TransformerEncoderLayer(16, 4, dropout="0.1"), TypeError, ["dropout"]),
        (lambda: TransformerEncoderLayer(16, 4, activation="tanh"), ValueError, ["activation"]),
        (lambda: TransformerDecoderLayer(16, 4, layer_norm_eps=0.0), ValueError,
         ["layer_norm_eps"]),
        (lambda: TransformerDecoderLayer(16, 4, norm_first="yes"), TypeError, ["norm_first"]),
    ],
)
def test_transformer_pieces_refuse_bad_values(make, exc, words):
    with pytest.raises(exc) as info:
        make()
    for word in words:
        assert word in str(info.value)


def _tiny_gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=11, block_size=16, num_layers=1, num_heads=2,
                         embed_dim=8)).eval()


@pytest.mark.parametrize(
    ("kwargs", "exc", "words"),
    [
        (dict(temperature=float("nan")), ValueError, ["temperature", "nan", "greedy=True"]),
        (dict(temperature=float("inf")), ValueError, ["temperature", "inf"]),
        (dict(temperature=0.0), ValueError, ["temperature", "> 0", "greedy=True"]),
        (dict(temperature=-1.0), ValueError, ["temperature", "-1.0"]),
        (dict(temperature="1"), TypeError, ["temperature", "str"]),
        (dict(top_k=0), ValueError, ["top_k", "a positive int", "0"]),
        (dict(top_k=-1), ValueError, ["top_k", "-1"]),
        (dict(top_k=2.5), TypeError, ["top_k", "float"]),
        (dict(top_k="3"), TypeError, ["top_k", "str"]),
        (dict(top_k=True), TypeError, ["top_k", "bool"]),
        (dict(max_new_tokens=2.5), TypeError, ["max_new_tokens", "float"]),
        (dict(max_new_tokens=-1), ValueError, ["max_new_tokens", "-1"]),
        (dict(max_new_tokens=20), ValueError, ["max_new_tokens", "block_size=16"]),
        (dict(greedy=1), TypeError, ["greedy", "bool"]),
        (dict(generator=0), TypeError, ["generator", "int"]),
        (dict(idx=torch.zeros(1, 0, dtype=torch.long)), ValueError, ["idx", "(1, 0)"]),
        (dict(idx=torch.tensor([[1, 11]])), ValueError, ["idx", "[0, 11)"]),
        (dict(idx=torch.tensor([[-1, 2]])), ValueError, ["idx", "[-1, 2]"]),
        (dict(idx=torch.tensor([1, 2])), ValueError, ["idx", "(B, N)", "(2,)"]),
        (dict(idx=[[1, 2]]), TypeError, ["idx", "list"]),
    ],
)
def test_generate_refuses_bad_arguments_by_name(kwargs, exc, words):
    model = _tiny_gpt()
    call = dict(idx=torch.tensor([[1, 2, 3]]), max_new_tokens=4)
    call.update(kwargs)
    with pytest.raises(exc) as info:
        model.generate(call.pop("idx"), call.pop("max_new_tokens"), **call)
    for word in words:
        assert word in str(info.value)


def test_generate_edge_values_that_are_allowed():
    model = _tiny_gpt()
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    greedy = model.generate(prompt, 5, greedy=True)
    # a tiny temperature is (numerically) greedy, never NaN; top_k beyond the vocabulary
    # keeps every token; top_k=1 is greedy whatever the temperature
    g = torch.Generator().manual_seed(0)
    assert torch.equal(model.generate(prompt, 5, temperature=1e-30, generator=g), greedy)
    assert torch.equal(model.generate(prompt, 5, top_k=1, temperature=100.0, generator=g), greedy)
    assert model.generate(prompt, 5, top_k=1000, generator=g).shape == (2, 8)
    assert torch.equal(model.generate(prompt, 0), prompt)


def test_encoder_decoder_transformer_learns_to_copy():
    torch.manual_seed(0)
    cfg = TransformerConfig(src_vocab_size=12, tgt_vocab_size=12, embed_dim=32, num_heads=2,
                            num_encoder_layers=1, num_decoder_layers=1, ff_dim=64)
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


def test_decoder_layer_refuses_swapped_caches():
    torch.manual_seed(0)
    layer = TransformerDecoderLayer(16, 2, ff_dim=32, dropout=0.0).eval()
    memory, x = torch.randn(1, 6, 16), torch.randn(1, 4, 16)
    full = layer(x, memory)
    self_cache, cross_cache = KVCache(), KVCache()
    steps = [layer(x[:, t:t + 1], memory, self_cache=self_cache, cross_cache=cross_cache)
             for t in range(4)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=0)
    a, b = KVCache(), KVCache()
    layer(x[:, :1], memory, self_cache=a, cross_cache=b)
    with pytest.raises(ValueError, match="another attention layer"):
        layer(x[:, 1:2], memory, self_cache=b, cross_cache=a)


def test_gpt_attention_is_each_blocks_own_module_and_refuses_a_missing_layer():
    from attnlab import ArgumentError, ArgumentTypeError
    from attnlab.nn.transformer import GPT, GPTConfig

    model = GPT(GPTConfig(vocab_size=11, block_size=8, num_layers=3, num_heads=2, embed_dim=8))
    assert [model.attention(i) for i in range(3)] == [b.attn for b in model.blocks]
    assert model.attention(-1) is model.blocks[2].attn
    with pytest.raises(ArgumentError, match="layer"):
        model.attention(3)
    with pytest.raises(ArgumentTypeError, match="layer"):
        model.attention(1.0)
    model.blocks[1] = torch.nn.Identity()
    with pytest.raises(ArgumentTypeError, match="block 1 is Identity, not a GPT block"):
        model.attention(1)
