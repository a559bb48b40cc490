"""Capture from attnlab and torch modules: q, k, v and the log-sum-exp give the weights the
module computes, the module runs as its caller asked, and nothing is left behind."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.core.scores import ScoreShape
from attnlab.nn.attention import MultiHeadAttention
from attnlab.nn.transformer import GPT, GPTConfig
from attnlab.tracing import AttentionTrace, capture


def _gpt(seed: int = 0, **kw) -> GPT:
    torch.manual_seed(seed)
    cfg = dict(vocab_size=20, num_layers=2, num_heads=4, embed_dim=32, num_kv_heads=2,
               positional="rope")
    cfg.update(kw)
    return GPT(GPTConfig(**cfg)).eval()


IDS = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3]])


def _no_hooks(model: nn.Module) -> bool:
    return all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_attnlab_gqa_rope_rows_equal_the_modules_own_weights():
    gpt = _gpt()
    with torch.no_grad(), capture(gpt) as cap:
        # while capturing, the modules report the lse and not the dense weights
        attn = gpt.blocks[0].attn
        assert attn.hook_lse.observed and not attn.hook_weights.observed
        gpt(IDS)
    t = cap.trace()
    with torch.no_grad(), capture(gpt, qkv=False) as dense_cap:
        gpt(IDS)
    dense = dense_cap.trace()
    assert t.has_qk and not dense.has_qk and t.causal and dense.causal
    assert tuple(t.k.shape) == (2, 2, 10, 8)  # grouped heads stored once, not repeated
    assert (t.weights - dense.weights).abs().max() < 1e-6
    # wrong variants fail: a wrong scale, or the causal mask forgotten
    for wrong in (ScoreShape(scale=1.0, causal=True), ScoreShape(scale=t.scale)):
        bad = AttentionTrace(tokens=t.tokens, q=t.q, k=t.k, lse=t.lse, shapes=wrong)
        assert (bad.weights - dense.weights).abs().max() > 1e-2
    # grouped heads: query heads 0, 1 read key head 0 and heads 2, 3 key head 1
    wrong_k = t.k.repeat(1, 2, 1, 1)  # [0, 1, 0, 1] instead of [0, 0, 1, 1]
    shapes = t.shapes
    tiled = AttentionTrace(tokens=t.tokens, q=t.q, k=wrong_k, lse=t.lse, shapes=shapes)
    assert (tiled.weights - dense.weights).abs().max() > 1e-2
    assert _no_hooks(gpt)


def test_context_is_kept_only_when_asked_and_equals_weights_times_v():
    gpt = _gpt()
    with torch.no_grad(), capture(gpt, context=True) as cap:
        gpt(IDS)
    t = cap.trace()
    assert t.context is not None and t.context.shape == (2, 4, 10, 8)
    for layer in range(2):
        for head in range(4):
            ctx = t.head_weights(layer, head) @ t.v[layer, t.kv_head(head)]
            assert torch.allclose(ctx, t.context[layer, head], atol=1e-5)
    with torch.no_grad(), capture(gpt) as cap2:
        gpt(IDS)
    assert cap2.trace().context is None


def test_capturing_one_model_leaves_another_alone():
    a, b = _gpt(0), _gpt(1)
    with torch.no_grad():
        before = b(IDS)
        with capture(a) as cap:
            a(IDS)
            # b is not observed: no hook point of b has an observer, so it keeps its path
            assert all(not getattr(m, "observed", False) for m in b.modules())
            during = b(IDS)
    assert torch.equal(before, during)  # bit for bit: b took the same path
    assert {r.name.split(".")[0] for r in cap.records} <= {n for n, _ in a.named_children()}
    assert len(cap) == 2


def test_masks_become_rules_or_a_dense_bias_per_batch_element():
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 2).eval()
    x = torch.randn(2, 6, 16)
    key_mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    with torch.no_grad(), capture(m) as cap:
        _, w = m(x, key_mask=key_mask, causal=True, need_weights=True)
    t0, t1 = cap.trace(0), cap.trace(1)
    assert t0.shapes[0].key_mask is None and t0.causal  # all real: no key mask stored
    assert torch.equal(t1.shapes[0].key_mask, key_mask[1]) and t1.shapes[0].bias is None
    assert (t1.weights[0] - w[1]).abs().max() < 1e-6 and (t0.weights[0] - w[0]).abs().max() < 1e-6
    # a hand-made causal mask is recognised as the rule; any other mask is a dense bias
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    odd = torch.rand(6, 6, generator=torch.Generator().manual_seed(1)) > 0.3
    odd[:, 0] = True
    for mask, rule in ((causal, True), (odd, False)):
        with torch.no_grad(), capture(m) as cap:
            _, w = m(x, mask=mask, need_weights=True)
        t = cap.trace(1)
        assert t.shapes[0].causal is rule and (t.shapes[0].bias is None) is rule
        assert (t.weights[0] - w[1]).abs().max() < 1e-6


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_torch_encoder_output_unchanged_and_weights_exact():
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, batch_first=True)
    enc = nn.TransformerEncoder(layer, 2).eval()  # nested tensors enabled by default
    x = torch.randn(2, 6, 16)
    kpm = torch.zeros(2, 6, dtype=torch.bool)
    kpm[1, 4:] = True  # two padding keys in the second sequence
    with torch.no_grad():
        plain = enc(x, src_key_padding_mask=kpm)
        with capture(enc) as cap:
            got = enc(x, src_key_padding_mask=kpm)
            assert enc.use_nested_tensor is False
    assert enc.use_nested_tensor is True and _no_hooks(enc)
    assert len(cap) == 2
    assert torch.allclose(plain[0], got[0], atol=1e-5)
    assert torch.allclose(plain[1, :4], got[1, :4], atol=1e-5)
    t = cap.trace(batch_index=1)
    assert t.weights[..., 4:].abs().max() == 0  # padding keys get nothing
    attn = enc.layers[0].self_attn
    with torch.no_grad():
        _, ref = attn(x, x, x, key_padding_mask=kpm, need_weights=True,
                      average_attn_weights=False)
    assert (t.weights[0] - ref[1]).abs().max() < 1e-6
    # the same trace with the key mask forgotten is wrong
    bad = AttentionTrace(tokens=t.tokens, q=t.q, k=t.k, lse=t.lse,
                         shapes=ScoreShape(scale=t.scale))
    assert (bad.weights[0] - ref[1]).abs().max() > 1e-2


def test_torch_mha_returns_what_the_caller_asked_for():
    mha = nn.MultiheadAttention(8, 2).eval()  # sequence-first
    x = torch.randn(5, 1, 8)
    causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)  # torch: True = blocked
    with torch.no_grad(), capture(mha) as cap:
        out_none = mha(x, x, x, need_weights=False)
        out_avg = mha(x, x, x)
        out_causal = mha(x, x, x, attn_mask=causal, average_attn_weights=False)
    assert out_none[1] is None
    assert out_avg[1].shape == (1, 5, 5)  # averaged over heads, as torch's default
    t = cap.trace()
    assert len(t.meta["layer_names"]) == 3
    assert torch.allclose(out_avg[1][0], t.head_weights(1, 0) / 2 + t.head_weights(1, 1) / 2,
                          atol=1e-6)
    assert t.shapes[2].causal and t.shapes[2].bias is None  # recognised as the rule
    assert torch.allclose(out_causal[1][0, 1], t.head_weights(2, 1), atol=1e-6)


def test_dense_capture_of_torch_mha_equals_torch_weights():
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(1, 5, 8)
    with torch.no_grad(), capture(mha, qkv=False) as cap:
        _, w = mha(x, x, x, average_attn_weights=False)
    t = cap.trace()
    assert not t.has_qk and (t.weights[0] - w[0]).abs().max() < 1e-6


def test_cross_attention_keeps_its_key_length():
    torch.manual_seed(2)
    m = MultiHeadAttention(16, 4).eval()
    q, mem = torch.randn(1, 3, 16), torch.randn(1, 7, 16)
    with torch.no_grad(), capture(m) as cap:
        _, w = m(q, mem, need_weights=True)
    t = cap.trace()
    assert (t.seq_len, t.key_len) == (3, 7) and len(t.key_tokens) == 7
    assert (t.weights[0] - w[0]).abs().max() < 1e-6


def test_release_moves_records_into_the_trace():
    gpt = _gpt()
    with torch.no_grad(), capture(gpt) as cap:
        gpt(IDS)
    keep = cap.trace()
    moved = cap.trace(release=True)
    assert cap.records == [] and torch.equal(keep.q, moved.q)
    with pytest.raises(ValueError, match="nothing was captured"):
        cap.trace()


def test_no_hooks_left_after_capture_even_on_error():
    gpt = _gpt()
    mha = nn.MultiheadAttention(8, 2)
    model = nn.ModuleDict({"gpt": gpt, "mha": mha})
    with pytest.raises(RuntimeError, match="boom"), capture(model):
        raise RuntimeError("boom")
    assert _no_hooks(model)


def test_capture_rejects_what_it_cannot_read():
    with pytest.raises(ValueError, match="no attention module"), capture(nn.Linear(2, 2)):
        pass
    with pytest.raises(TypeError, match="torch.nn.Module"), capture("minilm"):
        pass
    with pytest.raises(TypeError, match="qkv must be a bool"), capture(_gpt(), qkv="yes"):
        pass
    odd = nn.MultiheadAttention(8, 2, add_bias_kv=True)
    with pytest.raises(ValueError, match="add_bias_kv"), capture(odd):
        pass
    assert _no_hooks(odd)
