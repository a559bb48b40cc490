"""Capture from attnlab and torch modules: exact weights, q/k/v that recompute them, no leaks."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import attnlab
from attnlab.analysis import recompute_errors
from attnlab.trace import AttentionTrace, TraceFormatError, capture


def _gpt(**kw) -> attnlab.GPT:
    torch.manual_seed(0)
    cfg = dict(vocab_size=20, n_layer=2, n_head=4, n_embd=32, n_kv_head=2, positional="rope")
    cfg.update(kw)
    return attnlab.GPT(attnlab.GPTConfig(**cfg)).eval()


def test_three_ways_to_reach_trace():
    import attnlab.trace as pkg
    from attnlab.trace import capture as cap_fn

    gpt = _gpt()
    t = attnlab.trace(gpt, [1, 2, 3, 4, 5])
    assert isinstance(t, attnlab.trace.AttentionTrace)
    assert pkg.AttentionTrace is AttentionTrace
    assert cap_fn is attnlab.capture
    assert tuple(t.weights.shape) == (2, 4, 5, 5) and t.causal


def test_attnlab_gqa_rope_recompute_and_wrong_variants():
    t = attnlab.trace(_gpt(), torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]]))
    err = recompute_errors(t)
    assert err["weights"] < 1e-5 and err["context"] < 1e-5
    # a wrong recomputation must fail: no 1/sqrt(d) scaling, or no causal mask
    unscaled = AttentionTrace(tokens=t.tokens, weights=t.weights, q=t.q * math.sqrt(8),
                              k=t.k, v=t.v, context=t.context, causal=True, scale=t.scale)
    assert recompute_errors(unscaled)["weights"] > 1e-2
    no_mask = AttentionTrace(tokens=t.tokens, weights=t.weights, q=t.q, k=t.k, v=t.v,
                             context=t.context, causal=False, scale=t.scale)
    assert recompute_errors(no_mask)["weights"] > 1e-2
    # grouped heads share keys: heads 0,1 read kv head 0 and heads 2,3 read kv head 1
    assert torch.equal(t.k[:, 0], t.k[:, 1]) and not torch.equal(t.k[:, 1], t.k[:, 2])


def test_scores_are_scaled_masked_and_softmax_to_the_weights():
    t = attnlab.trace(_gpt(), [1, 2, 3, 4, 5], scores=True)
    assert torch.isinf(t.scores[..., 0, 1:]).all() and torch.isfinite(t.scores[..., -1, :]).all()
    assert torch.allclose(torch.softmax(t.scores, -1), t.weights, atol=1e-6)
    assert attnlab.trace(_gpt(), [1, 2, 3]).scores is None  # opt-in


def test_torch_encoder_fast_path_is_captured_and_output_unchanged():
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, batch_first=True)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    x = torch.randn(2, 6, 16)
    kpm = torch.zeros(2, 6, dtype=torch.bool)
    kpm[1, 4:] = True  # two padding keys in the second sequence
    with torch.no_grad():
        plain = enc(x, src_key_padding_mask=kpm)
        with capture(enc) as cap:
            got = enc(x, src_key_padding_mask=kpm)
    assert len(cap) == 2
    assert torch.allclose(plain[0], got[0], atol=1e-5)
    t = cap.trace(batch_index=1)
    assert t.weights[..., 4:].abs().max() == 0  # padding keys get nothing
    err = recompute_errors(t, mask=torch.tensor([True] * 4 + [False] * 2))
    assert err["weights"] < 1e-5 and err["context"] < 1e-5
    # the first layer's weights are those torch computes when asked for them
    attn = enc.layers[0].self_attn
    with torch.no_grad():
        _, ref = attn(x, x, x, key_padding_mask=kpm, need_weights=True,
                      average_attn_weights=False)
    assert torch.allclose(cap.records[0].weights, ref, atol=1e-6)


def test_torch_mha_returns_what_the_caller_asked_for():
    mha = nn.MultiheadAttention(8, 2).eval()  # sequence-first
    x = torch.randn(5, 1, 8)
    with torch.no_grad(), capture(mha) as cap:
        out_none = mha(x, x, x, need_weights=False)
        out_avg = mha(x, x, x)
    assert out_none[1] is None
    assert out_avg[1].shape == (1, 5, 5)  # averaged over heads, as torch's default
    assert cap.records[0].weights.shape == (1, 2, 5, 5)
    assert torch.allclose(out_avg[1], cap.records[1].weights.mean(1), atol=1e-6)


def test_no_hooks_left_after_capture_even_on_error():
    gpt = _gpt()
    mha = nn.MultiheadAttention(8, 2)
    model = nn.ModuleDict({"gpt": gpt, "mha": mha})
    with pytest.raises(RuntimeError, match="boom"), capture(model):
        raise RuntimeError("boom")
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks
    assert torch.backends.mha.get_fastpath_enabled()
    from attnlab.core.functional import capture_active

    assert not capture_active()


def test_capture_rejects_models_without_attention():
    with pytest.raises(ValueError, match="no attention module"), capture(nn.Linear(2, 2)):
        pass
    with pytest.raises(TypeError, match="torch.nn.Module"), capture("minilm"):
        pass


def test_trace_input_errors():
    gpt = _gpt()
    with pytest.raises(ValueError, match="empty"):
        attnlab.trace(gpt, [])
    with pytest.raises(ValueError, match="tokenizer"):
        attnlab.trace(gpt, "some text")
    with pytest.raises(ValueError, match="at most 256"):
        attnlab.trace(gpt, [1] * 300)
    t = attnlab.trace(gpt, [1] * 300, truncate=True)
    assert t.seq_len == 256 and t.meta["truncated_from"] == 300


def test_merge_tokens_sums_keys_averages_queries(tmp_path):
    torch.manual_seed(0)
    w = torch.softmax(torch.randn(2, 3, 5, 5), -1)
    t = AttentionTrace(tokens=["a", "b1", "b2", "c", "d"], weights=w, model="toy")
    m = t.merge_tokens([[0], [1, 2], [3], [4]], ["a", "b", "c", "d"])
    assert m.tokens == ["a", "b", "c", "d"]
    assert torch.allclose(m.weights.sum(-1), torch.ones(2, 3, 4))
    want = (w[..., 1, 1] + w[..., 1, 2] + w[..., 2, 1] + w[..., 2, 2]) / 2
    assert torch.allclose(m.weights[..., 1, 1], want)
    # a wrong rule (averaging over keys too) would break the row sums
    wrong = (w[..., 1:3, 1:3].mean((-1, -2)))
    assert not torch.allclose(m.weights[..., 1, 1], wrong)
    with pytest.raises(ValueError, match="consecutive"):
        t.merge_tokens([[0, 2], [1], [3], [4]])
    back = AttentionTrace.load(m.save(tmp_path / "m.safetensors"))
    assert back.meta["merged"]["groups"] == [[0], [1, 2], [3], [4]]
    assert "html" not in back.meta and back.tokens == m.tokens


def test_trace_file_errors(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(TraceFormatError):
        AttentionTrace.load(bad)
    t = attnlab.trace(_gpt(), [1, 2, 3])
    t.save(tmp_path / "t.safetensors")
    assert AttentionTrace.load(tmp_path / "t.safetensors").weights.equal(t.weights)


def test_batch_mask_and_key_mask_give_scores_that_softmax_to_the_weights():
    torch.manual_seed(0)
    m = attnlab.MultiHeadAttention(16, 2).eval()
    x = torch.randn(2, 5, 16)
    mask = torch.rand(2, 5, 5) > 0.3  # (B, Lq, Lk)
    mask[..., 0] = True
    key_mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    with capture(m) as cap:
        _, w = m(x, mask=mask, key_mask=key_mask, need_weights=True)
    for b in range(2):
        t = cap.trace(b, scores=True)
        assert torch.allclose(torch.softmax(t.scores[0], -1), w[b], atol=1e-6)
        allowed = mask[b] & key_mask[b]
        assert torch.isneginf(t.scores[0][:, ~allowed]).all()
