"""Capture of tiny, randomly initialised Hugging Face models (built from a config, nothing
downloaded): soft-cap, per-layer sliding windows, padding, a model's own 4-D mask, and
the fused path for long inputs, each against the model's eager attention."""

from __future__ import annotations

import pytest
import torch

import attnlab.tracing.adapters.huggingface as hf
from attnlab.tracing import capture

transformers = pytest.importorskip("transformers")


def _model(kind: str, **over):
    torch.manual_seed(0)
    common = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                  max_position_embeddings=256, attn_implementation="eager")
    common.update(over)
    if kind == "gemma2":
        cfg = transformers.Gemma2Config(sliding_window=4, attn_logit_softcapping=5.0,
                                        final_logit_softcapping=None, **common)
        model = transformers.Gemma2ForCausalLM(cfg).eval()
        with torch.no_grad():  # scores well beyond the soft-cap, so that it matters
            for layer in model.model.layers:
                layer.self_attn.q_proj.weight.mul_(20)
                layer.self_attn.k_proj.weight.mul_(20)
        return model
    if kind == "mistral":
        return transformers.MistralForCausalLM(
            transformers.MistralConfig(sliding_window=5, **common)).eval()
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**common)).eval()


def _run(model, ids, **kw):
    with torch.no_grad():
        ref = model(input_ids=ids, output_attentions=True, **kw)
        with capture(model) as cap:
            got = model(input_ids=ids, **kw)
    assert model.config._attn_implementation == "eager"
    return ref, got, cap


def _rows_err(t, ref, b=0, rows=slice(None)):
    want = torch.stack([a[b] for a in ref.attentions])[:, :, rows]
    return float((t.weights[:, :, rows] - want).abs().max())


def test_gemma2_softcap_and_per_layer_windows():
    model = _model("gemma2")
    ids = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(1))
    ref, got, cap = _run(model, ids)
    assert torch.equal(got.logits, ref.logits)  # the eager order: bit for bit
    t = cap.trace()
    windows = [s.window for s in t.shapes]
    assert sorted(windows, key=str) == [4, None]  # one sliding layer, one full layer
    assert all(s.softcap == 5.0 and s.causal and s.bias is None for s in t.shapes)
    assert _rows_err(t, ref) <= 1e-5
    # the same trace without its soft-cap is wrong
    from attnlab.core.scores import ScoreShape
    from attnlab.tracing import AttentionTrace

    bare = [ScoreShape(scale=s.scale, causal=True, window=s.window) for s in t.shapes]
    wrong = AttentionTrace(tokens=t.tokens, q=t.q, k=t.k, lse=t.lse, shapes=bare)
    assert _rows_err(wrong, ref) > 1e-3


def test_mistral_sliding_window_is_a_rule_and_checked():
    model = _model("mistral")
    ids = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(2))
    ref, got, cap = _run(model, ids)
    t = cap.trace()
    assert [s.window for s in t.shapes] == [5, 5] and t.shapes[0].bias is None
    assert torch.equal(got.logits, ref.logits) and _rows_err(t, ref) <= 1e-5


def test_left_padding_becomes_a_key_mask_per_batch_element():
    model = _model("llama")
    ids = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(3))
    att = torch.ones(2, 10, dtype=torch.long)
    att[1, :3] = 0  # three padding tokens on the left of the second sequence
    ref, got, cap = _run(model, ids, attention_mask=att)
    assert torch.equal(got.logits, ref.logits)
    t0, t1 = cap.trace(0), cap.trace(1)
    assert t0.shapes[0].key_mask is None and torch.equal(t1.shapes[0].key_mask, att[1].bool())
    assert _rows_err(t0, ref, 0) <= 1e-5
    assert _rows_err(t1, ref, 1, slice(3, None)) <= 1e-5  # the real tokens' rows
    assert t1.weights[:, :, :3].abs().max() == 0  # rows that see no real key: nothing


def test_a_models_own_4d_mask_is_kept_densely():
    model = _model("llama")
    ids = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(4))
    allowed = torch.ones(8, 8, dtype=torch.bool).tril()
    allowed[5, 2] = False  # no rule describes this one
    mask = torch.zeros(1, 1, 8, 8).masked_fill(~allowed, torch.finfo(torch.float32).min)
    ref, got, cap = _run(model, ids, attention_mask=mask)
    t = cap.trace()
    assert t.shapes[0].bias is not None and not t.causal
    assert torch.equal(got.logits, ref.logits) and _rows_err(t, ref) <= 1e-5
    assert t.weights[:, :, 5, 2].abs().max() == 0


def test_long_inputs_take_the_fused_path(monkeypatch):
    model = _model("llama")
    ids = torch.randint(0, 64, (1, 40), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        eager = model(input_ids=ids, output_attentions=True)
    calls = []
    real = hf.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(hf, "EAGER_ORDER_MAX_TOKENS", 16)
    monkeypatch.setattr(hf, "scaled_dot_product_attention", spy)
    with torch.no_grad(), capture(model) as cap:
        got = model(input_ids=ids)
    assert len(calls) == 2 and all(c["return_lse"] and c["causal"] for c in calls)
    assert (got.logits - eager.logits).abs().max() <= 1e-4
    assert _rows_err(cap.trace(), eager) <= 1e-5
