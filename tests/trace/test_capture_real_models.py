"""Capture on real pretrained weights (offline): exact against output_attentions, and
softmax(q kᵀ·scale + mask)·v recomputed from the captured q, k, v."""

from __future__ import annotations

import warnings

import pytest
import torch

import attnlab
from attnlab import models
from attnlab.analysis import recompute_errors

pytestmark = pytest.mark.models

SENTENCE = "The animal didn't cross the street because it was too tired"
CHINESE = "注意力机制是深度学习的核心"


@pytest.fixture(scope="module")
def minilm():
    return models.load("minilm")


@pytest.fixture(scope="module")
def smollm2():
    return models.load("smollm2")


def _reference(loaded, ids):
    with torch.no_grad():
        out = loaded.model(input_ids=torch.tensor([ids]), output_attentions=True)
    return torch.stack([a[0] for a in out.attentions])  # (L, H, N, N)


def test_minilm_equals_output_attentions_and_recomputes(minilm):
    t = attnlab.trace(minilm, SENTENCE)
    assert t.tokens[0] == "[CLS]" and "animal" in t.tokens and t.tokens[-1] == "[SEP]"
    assert tuple(t.weights.shape) == (6, 12, 15, 15) and not t.causal
    assert (t.weights - _reference(minilm, t.token_ids)).abs().max() <= 1e-6
    err = recompute_errors(t)
    assert err["weights"] <= 1e-4 and err["context"] <= 1e-4
    # wrong variant: forgetting 1/sqrt(d_k) must show
    wrong = attnlab.AttentionTrace(tokens=t.tokens, weights=t.weights, q=t.q, k=t.k, v=t.v,
                                   context=t.context, scale=1.0)
    assert recompute_errors(wrong)["weights"] > 1e-2


def test_minilm_warns_on_unknown_chinese_and_guards_length(minilm):
    with pytest.warns(UserWarning, match=r"unknown to minilm.*smollm2"):
        t = attnlab.trace(minilm, CHINESE, qkv=False)
    assert t.meta["unknown_fraction"] > 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # English: no warning
        attnlab.trace(minilm, "plain words", qkv=False)
    long = " ".join(["word"] * 600)
    with pytest.raises(ValueError, match="at most 512.*truncate=True"):
        attnlab.trace(minilm, long)
    t = attnlab.trace(minilm, long, truncate=True, qkv=False)
    assert t.seq_len == 512 and t.meta["truncated_from"] == 602
    for empty in ("", "   \n\t"):
        with pytest.raises(ValueError, match="empty"):
            attnlab.trace(minilm, empty)


def test_sdpa_model_is_switched_to_eager_for_the_capture(minilm):
    import transformers

    sdpa = transformers.AutoModel.from_pretrained(minilm.path, attn_implementation="sdpa")
    ids = torch.tensor([[101, 7592, 2088, 102]])
    with torch.no_grad(), attnlab.capture(sdpa) as cap:
        sdpa(input_ids=ids)
    assert len(cap) == 6
    assert sdpa.config._attn_implementation == "sdpa"
    assert torch.allclose(cap.trace().weights, _reference(minilm, ids[0].tolist()), atol=1e-6)
    # nothing left behind: the modeling file's eager function is the original again
    from transformers.models.bert import modeling_bert

    assert not hasattr(modeling_bert.eager_attention_forward, "_attnlab_wrapper")
    # a bare Hugging Face model plus its tokenizer traces too
    t = attnlab.trace(sdpa, "hello world", tokenizer=minilm.tokenizer)
    assert t.tokens == ["[CLS]", "hello", "world", "[SEP]"] and not t.causal


def test_smollm2_gqa_rope_exact_and_recomputed(smollm2):
    t = attnlab.trace(smollm2, "The cat sat on the mat. The cat")
    assert t.causal and tuple(t.weights.shape[:2]) == (30, 9) and t.q.shape[-1] == 64
    assert (t.weights - _reference(smollm2, t.token_ids)).abs().max() <= 1e-6
    err = recompute_errors(t)
    assert err["weights"] <= 1e-4 and err["context"] <= 1e-4
    # 9 query heads share 3 key/value heads in groups of 3 (repeat_interleave, not repeat)
    assert torch.equal(t.k[:, 0], t.k[:, 2]) and not torch.equal(t.k[:, 0], t.k[:, 3])
    tiled = t.k.view(30, 3, 3, *t.k.shape[2:])[:, 0:1].expand(-1, 3, -1, -1, -1)
    wrong = attnlab.AttentionTrace(tokens=t.tokens, weights=t.weights, q=t.q,
                                   k=tiled.reshape(t.k.shape), causal=True, scale=t.scale)
    assert recompute_errors(wrong)["weights"] > 1e-2


def test_smollm2_chinese_pieces_merge_into_characters(smollm2):
    pieces = attnlab.trace(smollm2, CHINESE, merge_pieces=False)
    assert pieces.seq_len > len(CHINESE)  # byte-level BPE splits characters
    by_ids = attnlab.trace(smollm2, pieces.token_ids[:6] + [28120], qkv=False)
    assert by_ids.tokens[0].startswith("\\x") and by_ids.tokens[-1].strip().isalpha()
    assert not any("\ufffd" in tok or "Ġ" in tok for tok in by_ids.tokens)
    err = recompute_errors(pieces)
    assert err["weights"] <= 1e-4 and err["context"] <= 1e-4
    t = attnlab.trace(smollm2, CHINESE)
    assert t.tokens == list(CHINESE)
    assert not any("\ufffd" in tok for tok in t.tokens)
    assert "summed over keys, averaged over queries" in t.meta["merged"]["rule"]
    assert torch.allclose(t.weights.sum(-1), torch.ones(30, 9, len(CHINESE)), atol=1e-5)
    # merged weights are exactly the rule applied to the pieces
    g = t.meta["merged"]["groups"]
    a, b = g[3], g[1]
    want = pieces.weights[..., a, :][..., b].sum(-1).mean(-1)
    assert torch.allclose(t.weights[..., 3, 1], want, atol=1e-6)
