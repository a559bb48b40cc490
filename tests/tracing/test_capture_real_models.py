"""Capture on real pretrained weights (offline): rows rebuilt from q, k and the log-sum-exp
equal the model's own eager ``output_attentions``; the model's outputs are unchanged; only
the captured model is touched."""

from __future__ import annotations

import warnings

import pytest
import torch

from attnlab import models
from attnlab.core.scores import ScoreShape
from attnlab.report.long_text import long_text
from attnlab.tracing import AttentionTrace, capture
from attnlab.tracing.tracer import trace

pytestmark = pytest.mark.models

SENTENCE = "The animal didn't cross the street because it was too tired"
CHINESE = "注意力机制是深度学习的核心"


@pytest.fixture(scope="module")
def minilm():
    return models.load("minilm")


@pytest.fixture(scope="module")
def smollm2():
    return models.load("smollm2")


def _text(tokens_wanted: int) -> str:
    """About ``tokens_wanted`` characters of Chinese prose (attnlab's course, Chinese half):
    at least as many SmolLM2 tokens as characters."""
    text = long_text({}).text
    return text[text.index("# 01 · 向量"):][:tokens_wanted]


def _eager(loaded, ids: list[int], **kw):
    with torch.no_grad():
        return loaded.model(input_ids=torch.tensor([ids]), output_attentions=True, **kw)


def test_minilm_rows_equal_eager_output_attentions(minilm):
    ids = minilm.tokenizer(" ".join([SENTENCE] * 30), truncation=True,
                           max_length=300)["input_ids"]
    t = trace(minilm, ids)
    assert t.seq_len == 300 and not t.causal and t.has_qk
    out = _eager(minilm, ids)
    ref = torch.stack([a[0] for a in out.attentions])  # (L, H, N, N)
    assert (t.weights - ref).abs().max() <= 1e-5
    assert t.lse.shape == (6, 12, 300) and t.k.shape == (6, 12, 300, 32)
    # the model's output is unchanged while it is captured
    with torch.no_grad(), capture(minilm.model) as cap:
        got = minilm.model(input_ids=torch.tensor([ids]))
    assert (got.last_hidden_state - out.last_hidden_state).abs().max() <= 1e-4
    assert len(cap) == 6 and minilm.model.config._attn_implementation == "eager"
    # a wrong scale (1/d instead of 1/sqrt(d)) must show
    wrong = AttentionTrace(tokens=t.tokens, q=t.q, k=t.k, lse=t.lse,
                           shapes=ScoreShape(scale=1 / 32))
    assert (wrong.weights - ref).abs().max() > 1e-3


def test_minilm_padding_is_a_key_mask_not_a_dense_mask(minilm):
    enc = minilm.tokenizer([SENTENCE, "short one"], padding=True, return_tensors="pt")
    with torch.no_grad():
        ref = minilm.model(**enc, output_attentions=True).attentions
        with capture(minilm.model) as cap:
            minilm.model(**enc)
    t = cap.trace(1)
    km = enc["attention_mask"][1].bool()
    assert torch.equal(t.shapes[0].key_mask, km) and t.shapes[0].bias is None
    n = int(km.sum())  # rows of real tokens: exact; padded keys get nothing
    assert (t.weights[:, :, :n] - torch.stack([a[1] for a in ref])[:, :, :n]).abs().max() <= 1e-5
    assert t.weights[..., n:].abs().max() == 0


def test_two_models_in_one_capture_block(minilm):
    import transformers

    other = transformers.AutoModel.from_pretrained(minilm.path, attn_implementation="sdpa")
    ids = torch.tensor([[101, 7592, 2088, 102]])
    with torch.no_grad():
        before = other(input_ids=ids).last_hidden_state
        with capture(minilm.model) as cap:
            minilm.model(input_ids=ids)
            # only the captured model's config points at attnlab; the other keeps its own
            assert minilm.model.config._attn_implementation == "attnlab"
            assert other.config._attn_implementation == "sdpa"
            during = other(input_ids=ids).last_hidden_state
    assert torch.equal(before, during) and len(cap) == 6
    # a model loaded with sdpa is captured too, and put back as it was
    with torch.no_grad(), capture(other) as cap2:
        other(input_ids=ids)
    assert len(cap2) == 6 and other.config._attn_implementation == "sdpa"
    assert not any("_attnlab_observers" in m.__dict__ for m in other.modules())
    t = trace(other, "hello world", tokenizer=minilm.tokenizer)
    assert t.tokens == ["[CLS]", "hello", "world", "[SEP]"] and not t.causal


def test_minilm_warns_on_unknown_chinese_and_guards_length(minilm):
    with pytest.warns(UserWarning, match=r"unknown to minilm.*smollm2"):
        t = trace(minilm, CHINESE, qkv=False)
    assert t.meta["unknown_fraction"] > 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # English: no warning
        trace(minilm, "plain words", qkv=False)
    long = " ".join(["word"] * 600)
    with pytest.raises(ValueError, match="at most 512.*truncate=True"):
        trace(minilm, long)
    t = trace(minilm, long, truncate=True)
    assert t.seq_len == 512 and t.meta["truncated_from"] == 602


def test_smollm2_gqa_rope_rows_and_logits(smollm2):
    ids = smollm2.tokenizer(_text(400))["input_ids"][:256]
    t = trace(smollm2, ids)
    assert t.causal and (t.num_layers, t.num_heads, t.num_kv_heads) == (30, 9, 3)
    assert t.k.shape == (30, 3, 256, 64)  # 9 query heads share 3 key/value heads
    out = _eager(smollm2, ids)
    ref = torch.stack([a[0] for a in out.attentions])
    assert (t.weights - ref).abs().max() <= 1e-5
    with torch.no_grad(), capture(smollm2.model) as cap:
        logits = smollm2.model(input_ids=torch.tensor([ids])).logits
    assert (logits - out.logits).abs().max() <= 1e-4 and len(cap) == 30
    assert smollm2.model.config._attn_implementation == "eager"
    # grouped heads read their own key head: the wrong grouping must show
    wrong = AttentionTrace(tokens=t.tokens, q=t.q, k=t.k[:, [1, 2, 0]], lse=t.lse,
                           shapes=t.shapes)
    assert (wrong.weights - ref).abs().max() > 1e-3


def test_smollm2_chinese_pieces_merge_into_characters(smollm2):
    pieces = trace(smollm2, CHINESE, merge_pieces=False)
    assert pieces.seq_len > len(CHINESE)  # byte-level BPE splits characters
    by_ids = trace(smollm2, pieces.token_ids[:6] + [28120], qkv=False)
    assert by_ids.tokens[0].startswith("\\x") and by_ids.tokens[-1].strip().isalpha()
    assert not any("\ufffd" in tok or "Ġ" in tok for tok in by_ids.tokens)
    t = trace(smollm2, CHINESE)
    assert t.tokens == list(CHINESE) and t.has_qk and t.q.shape[2] == pieces.seq_len
    assert "summed over keys, averaged over queries" in t.meta["merged"]["rule"]
    assert torch.allclose(t.weights.sum(-1), torch.ones(30, 9, len(CHINESE)), atol=1e-5)
    g = t.meta["merged"]["groups"]
    a, b = g[3], g[1]
    want = pieces.weights[..., a, :][..., b].sum(-1).mean(-1)
    assert torch.allclose(t.weights[..., 3, 1], want, atol=1e-6)
    assert torch.allclose(t.weights_rows(4, 2, [3])[0, 1], want[4, 2], atol=1e-6)
