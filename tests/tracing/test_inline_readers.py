"""The inline-softmax readers added for GPT-Neo, GPT-NeoX-Japanese, XGLM, OpenAI GPT, FSMT,
MVP, TrOCR and the encoders XLM, FlauBERT, Megatron-BERT, RemBERT, TAPAS, RoFormer, MPNet and
I-BERT (attnlab.tracing.adapters.inline): each family exact in the support matrix, local
windows and padding read as rules, the model's own outputs unchanged by capture, and a wrong
reading (scale, window, mask, rotation, bias) refused by the check against the module's own
weights."""

from __future__ import annotations

import pytest
import torch
from padded_capture import padded_capture  # tests/tracing/padded_capture.py

transformers = pytest.importorskip("transformers")

import attnlab.tracing.adapters.inline as inline  # noqa: E402
import attnlab.tracing.support as support  # noqa: E402
from attnlab.tracing import UnreadableAttentionError, capture, trace  # noqa: E402
from attnlab.tracing.adapters._base import dense_weights  # noqa: E402

_HF = "transformers.models."
#: family -> the reader's key in READERS
NEW = {
    "gpt_neo": _HF + "gpt_neo.modeling_gpt_neo.GPTNeoSelfAttention",
    "xglm": _HF + "xglm.modeling_xglm.XGLMAttention",
    "gpt_neox_japanese": _HF + "gpt_neox_japanese.modeling_gpt_neox_japanese"
                               ".GPTNeoXJapaneseAttention",
    "openai-gpt": _HF + "openai.modeling_openai.Attention",
    "fsmt": _HF + "fsmt.modeling_fsmt.Attention",
    "mvp": _HF + "mvp.modeling_mvp.MvpAttention",
    "trocr": _HF + "trocr.modeling_trocr.TrOCRAttention",
    "xlm": _HF + "xlm.modeling_xlm.MultiHeadAttention",
    "flaubert": _HF + "flaubert.modeling_flaubert.MultiHeadAttention",
    "megatron-bert": _HF + "megatron_bert.modeling_megatron_bert.MegatronBertSelfAttention",
    "rembert": _HF + "rembert.modeling_rembert.RemBertSelfAttention",
    "tapas": _HF + "tapas.modeling_tapas.TapasSelfAttention",
    "roformer": _HF + "roformer.modeling_roformer.RoFormerSelfAttention",
    "mpnet": _HF + "mpnet.modeling_mpnet.MPNetSelfAttention",
    "ibert": _HF + "ibert.modeling_ibert.IBertSelfAttention",
}


@pytest.mark.parametrize("family", sorted(NEW))
def test_each_family_is_exact(family):
    r = support.check_family(family)
    assert r.status == "exact", r.reason
    assert r.max_weight_error <= support.EXACT_TOL
    assert r.max_recompute_error <= support.RECOMPUTE_TOL
    if r.kind == "encoder-decoder":
        assert r.stacks == {"encoder": 2, "decoder": 2, "cross": 2}


def _trace_ids(family):
    model = support.tiny_model(family)
    ids = list(range(5, 5 + support.SEQ_LEN))
    if dict(support.families())[family] == "encoder-decoder":
        return lambda: trace(model, ids, target=list(range(7, 7 + support.TARGET_LEN)))
    return lambda: trace(model, ids)


def _scaled(read, factor):
    def wrong(module, a):
        out = read(module, a)
        return {**out, "scale": out["scale"] * factor}
    return wrong


@pytest.mark.parametrize("family", sorted(NEW))
def test_a_wrong_scale_is_refused(monkeypatch, family):
    run = _trace_ids(family)
    run()  # read rightly: traced
    monkeypatch.setitem(inline.READERS, NEW[family], _scaled(inline.READERS[NEW[family]], 1.5))
    with pytest.raises(UnreadableAttentionError, match="differ from the module's own"):
        run()


def test_gpt_neo_local_layers_keep_their_window_and_a_window_left_out_is_refused(monkeypatch):
    model = support.tiny_model("gpt_neo")  # layer 0 global, layer 1 local (window 4)
    t = trace(model, list(range(5, 17)))
    assert [s.window for s in t.shapes] == [None, support.WINDOW]
    assert all(s.causal and s.scale == 1.0 for s in t.shapes)
    real = inline.READERS[NEW["gpt_neo"]]

    def no_window(module, a):
        out = real(module, a)
        # the local layer's own rule read as plain causal: the window lost
        return {**out, "window": None, "visible": torch.ones_like(out["visible"]).tril()}

    monkeypatch.setitem(inline.READERS, NEW["gpt_neo"], no_window)
    with pytest.raises(UnreadableAttentionError, match="differ from the module's own"):
        trace(model, list(range(5, 17)))


def test_a_causal_buffer_that_is_not_the_rule_is_refused():
    model = support.tiny_model("gpt_neo")
    local = model.h[1].attn.attention  # its buffer made plain causal: no longer the window
    local.bias = torch.ones_like(local.bias).tril()
    with pytest.raises(UnreadableAttentionError, match="not attnlab's causal rule with a window"):
        trace(model, list(range(5, 17)))


def test_fsmt_without_its_causal_mask_is_refused(monkeypatch):
    real = inline.READERS[NEW["fsmt"]]
    monkeypatch.setitem(inline.READERS, NEW["fsmt"],
                        lambda module, a: real(module, {**a, "attn_mask": None}))
    with pytest.raises(UnreadableAttentionError, match="differ from the module's own"):
        _trace_ids("fsmt")()


@pytest.mark.parametrize("family", ["xglm", "gpt_neo", "openai-gpt", "gpt_neox_japanese",
                                    "xlm", "megatron-bert", "roformer", "mpnet", "ibert"])
def test_padding_is_a_key_mask(family):
    """Left padding in a batch: every real row exact against the model's own maps."""
    _, cap = padded_capture(family)
    assert cap.trace(1).shapes[0].key_mask.tolist() == [False] * 3 + [True] * 7


@pytest.mark.parametrize("family", ["openai-gpt", "mvp", "trocr", "xlm", "tapas", "mpnet",
                                    "ibert"])
def test_capture_leaves_the_models_output_as_it_was(family):
    """Modules asked for their weights only for attnlab's check hand them back as before:
    a model run without output_attentions returns none, and the same hidden states."""
    model = support.tiny_model(family)
    ids = torch.tensor([list(range(5, 15))])
    kw = {"decoder_input_ids": ids[:, :6]} if family == "mvp" else {}
    with torch.no_grad():
        plain = model(input_ids=ids, **kw)
        with capture(model):
            hooked = model(input_ids=ids, **kw)
    assert torch.equal(plain.last_hidden_state if family != "trocr" else plain.logits,
                       hooked.last_hidden_state if family != "trocr" else hooked.logits)
    for name in ("attentions", "decoder_attentions", "cross_attentions"):
        assert getattr(hooked, name, None) == getattr(plain, name, None)


def test_a_kv_cache_with_keys_is_refused():
    model = support.tiny_model("xglm")
    ids = torch.tensor([list(range(5, 15))])
    with torch.no_grad():
        past = model(input_ids=ids, use_cache=True).past_key_values
        with pytest.raises(UnreadableAttentionError, match="KV cache"), capture(model):
            model(input_ids=torch.tensor([[20]]), cache=past, use_cache=True)


def test_mvp_prompt_keys_are_refused(monkeypatch):
    monkeypatch.setitem(support._OVERRIDES, "mvp", {"use_prompt": True, "prompt_length": 3,
                                                    "prompt_mid_dim": 16})
    r = support.check_family("mvp")
    assert r.status == "refused" and "prompt keys" in r.reason, r.reason


def test_roformer_q_and_k_read_before_their_rotation_are_refused(monkeypatch):
    """RoFormer rotates q and k inline: a reading that leaves the rotation out is refused."""
    monkeypatch.setitem(inline.READERS, NEW["roformer"], inline._bert_like)
    with pytest.raises(UnreadableAttentionError, match="differ from the module's own"):
        _trace_ids("roformer")()


def test_mpnet_keeps_its_relative_position_bias_and_leaving_it_out_is_refused(monkeypatch):
    t = _trace_ids("mpnet")()
    n = support.SEQ_LEN
    assert all(s.bias is not None and tuple(s.bias.shape) == (s.bias.shape[0], n, n)
               for s in t.shapes)
    real = inline.READERS[NEW["mpnet"]]
    monkeypatch.setitem(inline.READERS, NEW["mpnet"],
                        lambda module, a: {**real(module, a), "bias": None})
    with pytest.raises(UnreadableAttentionError, match="differ from the module's own"):
        _trace_ids("mpnet")()


def test_ibert_in_integer_only_mode_is_refused(monkeypatch):
    monkeypatch.setitem(support._OVERRIDES, "ibert", {"quant_mode": True})
    r = support.check_family("ibert")
    assert r.status == "refused" and "integer-only mode" in r.reason, r.reason


def test_roformer_as_a_decoder_reads_causal_self_and_unrotated_cross_attention():
    """A RoFormer decoder with cross-attention: self-attention causal and rotated, the
    cross-attention's keys the encoder's states (no rotation), both exact."""
    cfg = transformers.RoFormerConfig(
        vocab_size=99, hidden_size=32, embedding_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=37, is_decoder=True,
        add_cross_attention=True, attn_implementation="eager")
    model = transformers.RoFormerModel(cfg).eval()
    ids = torch.tensor([list(range(5, 11))])
    enc = torch.randn(1, 4, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model(input_ids=ids, encoder_hidden_states=enc, use_cache=False,
                    output_attentions=True)
        with capture(model) as cap:
            model(input_ids=ids, encoder_hidden_states=enc, use_cache=False)
    own = [a for pair in zip(ref.attentions, ref.cross_attentions, strict=True) for a in pair]
    assert [r.shapes[0].causal for r in cap.records] == [True, False, True, False]
    for rec, want in zip(cap.records, own, strict=True):
        w = dense_weights(rec.q, rec.k, rec.lse, rec.shapes)
        assert w.shape == want.shape
        assert float((w - want).abs().max()) <= support.EXACT_TOL
