"""SelfAttention and MultiHeadAttention: parity with torch, GQA, KV cache, bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attnlab.core import masks
from attnlab.core.positional import RotaryEmbedding
from attnlab.nn import KVCache, MultiHeadAttention, SelfAttention


def article_000(m: SelfAttention, x: torch.Tensor):
    """Article 000's PureSelfAttention forward, written out plainly as the reference."""
    b, n, e = x.shape
    h, d = m.num_heads, m.head_dim
    q = m.W_q(x).view(b, n, h, d).transpose(1, 2)
    k = m.W_k(x).view(b, n, h, d).transpose(1, 2)
    v = m.W_v(x).view(b, n, h, d).transpose(1, 2)
    w = F.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1)
    return m.W_o((w @ v).transpose(1, 2).reshape(b, n, e)), w


def test_self_attention_equals_the_article():
    torch.manual_seed(0)
    m = SelfAttention(embed_dim=512, num_heads=8)
    x = torch.randn(2, 10, 512)
    out, w = m(x)
    ref_out, ref_w = article_000(m, x)
    assert out.shape == (2, 10, 512) and w.shape == (2, 8, 10, 10)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=0)
    torch.testing.assert_close(w, ref_w, atol=1e-6, rtol=0)
    assert all(p.bias is None for p in (m.W_q, m.W_k, m.W_v, m.W_o))
    causal = masks.causal(10)
    _, wm = m(x, mask=causal)
    assert (wm.masked_fill(causal, 0) == 0).all()
    out_nw, none = m(x, need_weights=False)
    assert none is None
    torch.testing.assert_close(out_nw, out, atol=1e-5, rtol=0)


@st.composite
def mha_case(draw):
    h = draw(st.sampled_from([1, 2, 4]))
    e = h * draw(st.sampled_from([2, 4, 8]))
    kdim = draw(st.sampled_from([None, 5]))
    return dict(
        e=e, h=h, kdim=kdim, bias=draw(st.booleans()), batch_first=draw(st.booleans()),
        b=draw(st.integers(1, 3)), lq=draw(st.integers(1, 6)), lk=draw(st.integers(1, 6)),
        dtype=draw(st.sampled_from([torch.float32, torch.float64])),
        mask_kind=draw(st.sampled_from(["none", "key", "attn2d", "attn4d", "float", "dead"])),
        cross=draw(st.booleans()), seed=draw(st.integers(0, 10_000)),
    )


@settings(max_examples=40, deadline=None, derandomize=True)
@given(mha_case())
def test_from_torch_matches_torch_outputs_weights_and_gradients(c):
    torch.manual_seed(c["seed"])
    dt = c["dtype"]
    m = nn.MultiheadAttention(c["e"], c["h"], bias=c["bias"], kdim=c["kdim"], vdim=c["kdim"],
                              batch_first=c["batch_first"], dtype=dt)
    ours = MultiHeadAttention.from_torch(m)
    b, lq = c["b"], c["lq"]
    cross = c["cross"] or c["kdim"] is not None
    lk = c["lk"] if cross else lq
    x = torch.randn(b, lq, c["e"], dtype=dt, requires_grad=True)
    kv = torch.randn(b, lk, c["kdim"] or c["e"], dtype=dt, requires_grad=True) if cross else x
    attn_mask = key_mask = None  # attnlab convention: True = may attend
    kind = c["mask_kind"]
    if kind == "key":
        key_mask = torch.rand(b, lk) > 0.3
        key_mask[:, 0] = True
    elif kind in ("attn2d", "dead"):
        attn_mask = torch.rand(lq, lk) > 0.4
        attn_mask[:, 0] = True
        if kind == "dead":
            attn_mask[0] = False
    elif kind == "attn4d":
        attn_mask = torch.rand(b, c["h"], lq, lk) > 0.4
        attn_mask[..., 0] = True
    elif kind == "float":
        attn_mask = torch.randn(lq, lk, dtype=dt)
    t_mask = None
    if attn_mask is not None:
        t_mask = ~attn_mask if attn_mask.dtype == torch.bool else attn_mask
        if t_mask.dim() == 4:  # torch wants (B*H, Lq, Lk)
            t_mask = t_mask.reshape(b * c["h"], lq, lk)
    tx = (lambda t: t) if c["batch_first"] else (lambda t: t.transpose(0, 1))
    ref_out, ref_w = m(tx(x), tx(kv), tx(kv), attn_mask=t_mask,
                       key_padding_mask=None if key_mask is None else ~key_mask,
                       need_weights=True, average_attn_weights=False)
    ref_out = tx(ref_out)
    out, w = ours(x, kv if cross else None, mask=attn_mask, key_mask=key_mask,
                  need_weights=True)
    tol, gtol = (1e-5, 1e-4) if dt == torch.float32 else (1e-10, 1e-9)
    alive = torch.ones(lq, dtype=torch.bool)
    if kind == "dead":
        alive[0] = False
        assert (out[:, 0] == 0).all() and (w[:, :, 0] == 0).all()
        assert torch.isnan(ref_out[:, 0]).all()  # torch: NaN; attnlab: 0
    torch.testing.assert_close(out[:, alive], ref_out[:, alive], atol=tol, rtol=0)
    torch.testing.assert_close(w[:, :, alive], ref_w[:, :, alive], atol=tol, rtol=0)
    gy = torch.randn_like(out)
    inputs = [x] + ([kv] if cross else [])
    if kind == "dead":  # torch's backward carries the NaN row into every gradient
        our_g = torch.autograd.grad(out, inputs + list(ours.parameters()), gy)
        assert all(torch.isfinite(g).all() for g in our_g)
        return
    ref_g = torch.autograd.grad(ref_out[:, alive], inputs + list(m.parameters()),
                                gy[:, alive], allow_unused=True)
    our_g = torch.autograd.grad(out[:, alive], inputs + list(ours.parameters()), gy[:, alive],
                                allow_unused=True)
    for a, r in zip(our_g[: len(inputs)], ref_g[: len(inputs)]):
        torch.testing.assert_close(a, r, atol=gtol, rtol=0)
    ours_params = dict(ours.named_parameters())
    theirs = dict(zip([n for n, _ in m.named_parameters()], ref_g[len(inputs):]))
    ours_g = dict(zip(ours_params, our_g[len(inputs):]))
    if ours.fused_qkv:
        torch.testing.assert_close(ours_g["qkv_proj.weight"], theirs["in_proj_weight"],
                                   atol=gtol, rtol=0)
    else:
        torch.testing.assert_close(ours_g["k_proj.weight"], theirs["k_proj_weight"],
                                   atol=gtol, rtol=0)
    torch.testing.assert_close(ours_g["out_proj.weight"], theirs["out_proj.weight"],
                               atol=gtol, rtol=0)


def test_average_weights_and_no_weights():
    m = MultiHeadAttention(16, 4)
    x = torch.randn(2, 5, 16)
    out, none = m(x)
    assert none is None
    _, w = m(x, need_weights=True)
    _, avg = m(x, need_weights=True, average_weights=True)
    torch.testing.assert_close(avg, w.mean(1))


def test_grouped_query_attention_shares_keys_within_groups():
    torch.manual_seed(0)
    m = MultiHeadAttention(32, 8, num_kv_heads=2)
    assert m.qkv_proj.out_features == 32 + 2 * 2 * 4
    x = torch.randn(1, 6, 32)
    seen = {}
    for name in ("q", "k", "v"):
        getattr(m, f"hook_{name}").register_forward_hook(
            lambda mod, i, o, name=name: seen.setdefault(name, o))
    out, w = m(x, need_weights=True)
    q, k, v = seen["q"], seen["k"], seen["v"]
    assert q.shape == (1, 8, 6, 4) and k.shape == v.shape == (1, 2, 6, 4)  # not repeated
    # query head i reads key/value head i // 4: repeat_interleave, not tile
    for expand, same in ((lambda t: t.repeat_interleave(4, dim=1), True),
                         (lambda t: t.repeat(1, 4, 1, 1), False)):
        ref_w = torch.softmax(q @ expand(k).transpose(-2, -1) * m.scale, dim=-1)
        assert torch.allclose(w, ref_w, atol=1e-6) is same
    # same function as its torch twin (GQA expanded)
    ref, ref_w = m.to_torch()(x, x, x, average_attn_weights=False)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(w, ref_w, atol=1e-5, rtol=0)


@pytest.mark.parametrize("num_kv_heads", [None, 2, 1])
def test_kv_cache_decoding_equals_full_causal_forward(num_kv_heads):
    torch.manual_seed(0)
    m = MultiHeadAttention(32, 4, num_kv_heads=num_kv_heads,
                           rotary=RotaryEmbedding(8)).eval()
    x = torch.randn(2, 9, 32)
    full, w_full = m(x, causal=True, need_weights=True)
    cache = KVCache()
    prefix, _ = m(x[:, :4], causal=True, cache=cache)  # prompt in one go
    steps = [prefix]
    for t in range(4, 9):
        o, w = m(x[:, t:t + 1], causal=True, cache=cache, need_weights=True)
        steps.append(o)
        torch.testing.assert_close(w[:, :, 0], w_full[:, :, t, : t + 1], atol=1e-6, rtol=0)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=0)
    assert len(cache) == 9
    # without the cache the new token attends only itself: a different answer
    alone, _ = m(x[:, 8:9], causal=True)
    assert not torch.allclose(alone, full[:, 8:9], atol=1e-3)


def test_cross_attention_cache_is_static():
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 2).eval()
    memory = torch.randn(1, 7, 16)
    x = torch.randn(1, 3, 16)
    full, _ = m(x, memory)
    cache = KVCache()
    steps = [m(x[:, t:t + 1], memory, cache=cache)[0] for t in range(3)]
    assert len(cache) == 7
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-6, rtol=0)


def test_cache_from_another_layer_is_refused():
    a, b = MultiHeadAttention(16, 2), MultiHeadAttention(16, 2)
    cache = KVCache()
    a(torch.randn(1, 2, 16), causal=True, cache=cache)
    with pytest.raises(ValueError, match="another attention layer"):
        b(torch.randn(1, 1, 16), causal=True, cache=cache)
    with pytest.raises(TypeError, match="KVCache"):
        a(torch.randn(1, 1, 16), cache={"k": None})


def test_self_attention_cache_is_refused_by_a_cross_attention_call():
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 2).eval()
    x, memory = torch.randn(1, 3, 16), torch.randn(1, 7, 16)
    cache = KVCache()
    m(x, causal=True, cache=cache)  # self-attention: the cache now holds x's keys
    assert cache.role == "self"
    with pytest.raises(ValueError, match="self-attention keys.*cross-attention call"):
        m(x[:, :1], memory, cache=cache)
    cross = KVCache()
    m(x[:, :1], memory, cache=cross)
    with pytest.raises(ValueError, match="cross-attention keys.*self-attention call"):
        m(x[:, 1:2], causal=True, cache=cross)
    cache.reset()  # an emptied cache may take the other role on its layer
    out, _ = m(x[:, :1], memory, cache=cache)
    torch.testing.assert_close(out, m(x[:, :1], memory)[0], atol=1e-6, rtol=0)


def test_cross_attention_cache_refuses_another_memory():
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 2).eval()
    x, memory = torch.randn(1, 3, 16), torch.randn(1, 7, 16)
    cache = KVCache()
    m(x[:, :1], memory, cache=cache)
    same_values = memory.clone()  # another tensor with the same memory is fine
    out, _ = m(x[:, 1:2], same_values, cache=cache)
    torch.testing.assert_close(out, m(x[:, 1:2], memory)[0], atol=1e-6, rtol=0)
    for other in (torch.randn(1, 7, 16), torch.randn(1, 5, 16)):
        with pytest.raises(ValueError, match="another memory"):
            m(x[:, 2:3], other, cache=cache)


@pytest.mark.parametrize(
    ("make", "exc", "words"),
    [
        (lambda: MultiHeadAttention(10, 3), ValueError, ["embed_dim=10", "num_heads=3"]),
        (lambda: MultiHeadAttention(16, 4, num_kv_heads=3), ValueError,
         ["num_kv_heads=3", "num_heads=4"]),
        (lambda: MultiHeadAttention(16, 0), ValueError, ["num_heads", "0"]),
        (lambda: MultiHeadAttention(2, 4), ValueError, ["embed_dim=2", "num_heads=4",
                                                        "head_dim"]),  # head_dim would be 0
        (lambda: MultiHeadAttention(16.0, 2), TypeError, ["embed_dim", "float"]),
        (lambda: SelfAttention(10, 4), ValueError, ["embed_dim=10", "num_heads=4"]),
        (lambda: SelfAttention(0, 4), ValueError, ["embed_dim", "0"]),
        (lambda: MultiHeadAttention(16, 2, dropout=1.0), ValueError, ["dropout", "1.0"]),
        (lambda: MultiHeadAttention(16, 2, dropout=float("nan")), ValueError, ["dropout"]),
        (lambda: MultiHeadAttention(16, 2, dropout="0.1"), TypeError, ["dropout", "str"]),
        (lambda: MultiHeadAttention(16, 2, bias=1), TypeError, ["bias", "bool"]),
        (lambda: MultiHeadAttention(16, 2, init_gain=0.0), ValueError, ["init_gain"]),
        (lambda: MultiHeadAttention(16, 2, rotary=4), TypeError, ["rotary", "int"]),
    ],
)
def test_bad_construction(make, exc, words):
    with pytest.raises(exc) as info:
        make()
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    ("call", "exc", "words"),
    [
        (lambda m: m(torch.randn(2, 5)), ValueError, ["query", "(B, N, E)", "(2, 5)"]),
        (lambda m: m(torch.randn(2, 5, 8)), ValueError, ["query", "16", "(2, 5, 8)"]),
        (lambda m: m(torch.randn(2, 5, 16), mask=torch.ones(5, 4, dtype=torch.bool)),
         ValueError, ["mask", "(5, 4)", "(Lq, Lk)=(5, 5)"]),
        (lambda m: m(torch.randn(2, 5, 16), mask=torch.ones(5, 5, dtype=torch.long)),
         TypeError, ["mask", "int64"]),
        (lambda m: m(torch.randn(2, 5, 16), key_mask=torch.ones(2, 4, dtype=torch.bool)),
         ValueError, ["key_mask", "(2, 5)", "(2, 4)"]),
        (lambda m: m(torch.randn(2, 5, 16), key_mask=torch.ones(2, 5)),
         TypeError, ["key_mask", "bool"]),
        (lambda m: m(torch.randn(2, 5, 16), torch.randn(3, 5, 16)), ValueError,
         ["batch size", "(3, 5, 16)"]),
        (lambda m: m(torch.randn(2, 5, 16), torch.randn(2, 5, 16), torch.randn(2, 4, 16)),
         ValueError, ["key and value", "(2, 4, 16)"]),
        (lambda m: m(torch.ones(2, 5, 16, dtype=torch.long)), TypeError, ["int64"]),
        (lambda m: m(torch.randn(2, 5, 16), need_weights="yes"), TypeError,
         ["need_weights", "bool"]),
        (lambda m: m(torch.randn(2, 5, 16), causal=1), TypeError, ["causal", "bool"]),
    ],
)
def test_bad_forward_input_names_argument_and_shapes(call, exc, words):
    m = MultiHeadAttention(16, 4)
    with pytest.raises(exc) as info:
        call(m)
    for word in words:
        assert word in str(info.value)


def test_small_init_gain_gives_near_uniform_attention():
    torch.manual_seed(0)
    x = torch.randn(1, 16, 64)
    ent = {}
    for gain in (0.02, 5.0):
        m = MultiHeadAttention(64, 4, init_gain=gain)
        with torch.no_grad():
            _, w = m(x, need_weights=True)
        ent[gain] = float(-(w * w.clamp_min(1e-30).log()).sum(-1).mean())
    assert ent[0.02] > 0.99 * math.log(16) > ent[5.0]
