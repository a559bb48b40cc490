"""Hugging Face encoder–decoder models traced as three stacks (encoder, decoder, cross),
each equal to the model's own ``output_attentions``; targets given as text, as ids, or
generated; padding, causality and T5's relative bias recorded."""

from __future__ import annotations

import warnings

import pytest
import torch
from word_tokenizer import word_tokenizer

transformers = pytest.importorskip("transformers")

import importlib  # noqa: E402

import attnlab.tracing.support as support  # noqa: E402
from attnlab.core.scores import ScoreShape, row_logsumexp  # noqa: E402
from attnlab.core.weights import shaped_weights  # noqa: E402
from attnlab.tracing import (  # noqa: E402
    AttentionTrace,
    StackedTrace,
    UnreadableAttentionError,
    capture,
    families,
    load_trace,
    trace,
)

capture_mod = importlib.import_module("attnlab.tracing.capture")
OUTPUTS = {"encoder": "encoder_attentions", "decoder": "decoder_attentions",
           "cross": "cross_attentions"}


_tokenizer = word_tokenizer  # tests/tracing/word_tokenizer.py


def _lm(family: str):
    """The tiny model of ``family`` with its language-model head (it can generate)."""
    config = support.tiny_config(family, "encoder-decoder")
    auto = families.mappings()
    cls = getattr(transformers, auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES[family])
    torch.manual_seed(0)
    return cls(config).eval()


def _own_maps(model, src, tgt, src_mask=None):
    with torch.no_grad():
        out = model(input_ids=src, attention_mask=src_mask if src_mask is not None
                    else torch.ones_like(src), decoder_input_ids=tgt,
                    output_attentions=True, use_cache=False)
    return {s: torch.stack([a for a in getattr(out, f)], 1) for s, f in OUTPUTS.items()}


def _recomputed(t: AttentionTrace) -> torch.Tensor:
    """Weights rebuilt from the trace's q and k alone under its recorded shapes."""
    nq, nk = t.q.shape[2], t.k.shape[2]
    out = []
    for layer in range(t.num_layers):
        shape = t.score_shape(layer)
        k = t.k[layer].repeat_interleave(t.num_heads // t.num_kv_heads, dim=0)
        lse = row_logsumexp(t.q[layer], t.k[layer], shape)
        out.append(shaped_weights(t.q[layer], k, lse, shape, rows=range(nq),
                                  head=list(range(t.num_heads)), lq=nq, lk=nk))
    return torch.stack(out)


@pytest.mark.parametrize("family", ["bart", "t5"])
def test_text_and_target_give_three_exact_stacks_labelled_by_side(family):
    model, tok = _lm(family), _tokenizer()
    st = trace(model, "a b c d e", target="x y z", tokenizer=tok)
    assert isinstance(st, StackedTrace) and st.names == ("encoder", "decoder", "cross")
    assert st.text == "a b c d e" and st.target == "x y z"
    assert st.meta["target_from"] == "given"
    gc = model.generation_config  # T5 starts its decoder with the pad token
    start = gc.decoder_start_token_id if gc.decoder_start_token_id is not None else (
        gc.pad_token_id)
    src = tok("a b c d e")["input_ids"]
    tgt = [start] + tok(text_target="x y z")["input_ids"]
    assert st["encoder"].tokens == ["a", "b", "c", "d", "e", "</s>"]
    assert st["encoder"].token_ids == src and st["decoder"].token_ids == tgt
    assert st["decoder"].tokens == tok.convert_ids_to_tokens(tgt)
    assert st["cross"].tokens == st["decoder"].tokens
    assert st["cross"].key_tokens == st["encoder"].tokens
    own = _own_maps(model, torch.tensor([src]), torch.tensor([tgt]))
    for name, t in st.items():
        assert t.stack == name and t.num_layers == own[name].shape[1] == 2
        assert t.causal == (name == "decoder")
        want = own[name][0]
        assert float((t.weights - want).abs().max()) <= support.EXACT_TOL, name
        assert float((_recomputed(t) - t.weights).abs().max()) <= support.RECOMPUTE_TOL, name


def test_t5_relative_bias_is_recorded_and_needed():
    model = _lm("t5")
    st = trace(model, [5, 6, 7, 8, 9, 10], target=[0, 11, 12, 13])
    for name, t in st.items():
        assert all(s.bias is not None for s in t.shapes), name  # T5's position bias
        assert float((_recomputed(t) - t.weights).abs().max()) <= 1e-5
    # a deliberately wrong reading: the same q, k, lse without the bias are far off
    enc = st["encoder"]
    bare = AttentionTrace(enc.tokens, q=enc.q, k=enc.k, lse=enc.lse,
                          shapes=[ScoreShape(scale=s.scale) for s in enc.shapes],
                          stack="encoder")
    assert float((_recomputed(bare) - enc.weights).abs().max()) > 1e-3


def test_without_a_target_the_model_generates_one():
    model, tok = _lm("bart"), _tokenizer()
    st = trace(model, "a b c", tokenizer=tok, max_new_tokens=4)
    assert st.meta["target_from"] == "generated"
    ids = tok("a b c", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                             max_new_tokens=4, do_sample=False, num_beams=1)[0].tolist()
    assert st["decoder"].token_ids == gen and st["cross"].seq_len == len(gen)
    assert st.target == tok.decode(gen, skip_special_tokens=True)
    own = _own_maps(model, ids, torch.tensor([gen]))
    assert float((st["cross"].weights - own["cross"][0]).abs().max()) <= support.EXACT_TOL


def test_source_padding_is_recorded_for_encoder_and_cross():
    model = _lm("bart")
    src = torch.randint(5, 60, (2, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(src)
    mask[1, 5:] = 0  # the second source has 5 real tokens
    tgt = torch.tensor([[2, 8, 9, 10]] * 2)
    own = _own_maps(model, src, tgt, mask)
    with torch.no_grad(), capture(model) as cap:
        model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt, use_cache=False)
    for b in (0, 1):
        st = cap.trace(b)
        for name, t in st.items():
            assert float((t.weights - own[name][b]).abs().max()) <= support.EXACT_TOL
        km = st["cross"].shapes[0].key_mask
        assert (km is None) == (b == 0) and (b == 0 or km.tolist() == [True] * 5 + [False] * 2)
        assert st["decoder"].shapes[0].causal and not st["cross"].shapes[0].causal
        assert float(st["cross"].weights[..., 5:].abs().max()) == (0.0 if b else float(
            st["cross"].weights[..., 5:].abs().max()))


def test_a_stacked_trace_round_trips_through_one_file(tmp_path):
    st = trace(_lm("t5"), [5, 6, 7, 8], target=[0, 9, 10])
    back = load_trace(st.save(tmp_path / "t5.safetensors"))
    assert isinstance(back, StackedTrace) and back.names == st.names
    for name in st:
        assert torch.equal(back[name].weights, st[name].weights)
        assert back[name].tokens == st[name].tokens


def test_bad_targets_are_refused_naming_the_argument():
    tok = _tokenizer()
    llama = support.tiny_model("llama")
    with pytest.raises(ValueError, match=r"target is for encoder–decoder models.*one "
                                         r"attention stack"):
        trace(llama, [5, 6, 7], target=[1, 2])
    base = support.tiny_model("bart")  # BartModel: no language-model head
    with pytest.raises(ValueError, match=r"target is needed: .*no language-model head"):
        trace(base, [5, 6, 7])
    with pytest.raises(ValueError, match="target is empty"):
        trace(base, [5, 6, 7], target=[])
    with pytest.raises(ValueError, match=r"target holds ids in \[2, 500\], outside the vocab"):
        trace(base, [5, 6, 7], target=[2, 500])
    with pytest.raises(ValueError, match="max_new_tokens must be a positive int"):
        trace(_lm("bart"), "a b", tokenizer=tok, max_new_tokens=0)
    with pytest.raises(TypeError, match="target must be"):
        trace(base, [5, 6, 7], target=3.5)


def test_stacks_mixed_up_are_caught_by_the_check(monkeypatch):
    """The matrix's check sees a trace that does not keep the stacks apart."""
    assert support.check_family("bart").status == "exact"
    monkeypatch.setattr(capture_mod, "stack_table", lambda root: {})
    r = support.check_family("bart")
    assert r.status == "wrong" and "could not tell its encoder, decoder and cross" in r.reason


def test_merged_self_and_cross_attention_is_refused_by_name():
    r = support.check_family("t5gemma2")
    assert r.status == "refused" and "T5Gemma2MergedAttention" in r.reason
    with pytest.raises(UnreadableAttentionError, match="merged self- and cross-attention"):
        trace(support.tiny_model("t5gemma2"), [5, 6, 7, 8], target=[0, 9])


def test_long_cross_attention_is_still_checked_against_eager(monkeypatch):
    """Cross-attention longer than the checked prefix is checked on its first queries and
    keys (no rule ties a query to a key position), as self-attention is."""
    import attnlab.tracing.adapters.huggingface as hf

    seen = []
    real = hf._prefix_kwargs
    monkeypatch.setattr(hf, "_prefix_kwargs", lambda kw, lq, lk, nq, nk: (
        seen.append((lq, lk, nq, nk)), real(kw, lq, lk, nq, nk))[1])
    config = support.tiny_config("bart", "encoder-decoder")
    config.max_position_embeddings = 128
    torch.manual_seed(0)
    model = transformers.BartModel(config).eval()
    src, tgt = [5 + i % 80 for i in range(100)], [2] + list(range(5, 65))  # 100 and 61
    st = trace(model, src, target=tgt)
    assert (61, 100, 32, 32) in seen and st["cross"].key_len == 100


def test_a_composed_encoder_decoder_model_keeps_its_stacks_apart():
    """EncoderDecoderModel (bert2bert): BERT's attention module serves the encoder, the
    decoder and cross-attention; the call with the encoder's states is cross-attention."""
    enc = transformers.BertConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=48)
    dec = transformers.BertConfig(vocab_size=96, hidden_size=32, num_hidden_layers=3,
                                  num_attention_heads=4, intermediate_size=48,
                                  is_decoder=True, add_cross_attention=True)
    config = transformers.EncoderDecoderConfig.from_encoder_decoder_configs(enc, dec)
    config.decoder_start_token_id, config.pad_token_id = 1, 0
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.EncoderDecoderModel(config=config).eval()
    model.config._attn_implementation = "eager"
    src, tgt = torch.tensor([[5, 6, 7, 8, 9]]), torch.tensor([[1, 10, 11]])
    st = trace(model, src[0].tolist(), target=tgt[0].tolist())
    own = _own_maps(model, src, tgt)
    assert {n: t.num_layers for n, t in st.items()} == {"encoder": 2, "decoder": 3, "cross": 3}
    for name, t in st.items():
        assert float((t.weights - own[name][0]).abs().max()) <= support.EXACT_TOL, name


def test_an_encoder_decoder_model_inside_another_module_is_told_apart():
    class Wrapper(torch.nn.Module):  # e.g. a user's own model around a Hugging Face one
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, **kw):
            return self.inner(**kw)

    model = Wrapper(support.tiny_model("bart")).eval()
    src, tgt = torch.tensor([[5, 6, 7, 8]]), torch.tensor([[2, 9, 10]])
    with torch.no_grad(), capture(model) as cap:
        model(input_ids=src, decoder_input_ids=tgt, use_cache=False)
    st = cap.trace()
    assert isinstance(st, StackedTrace) and st.names == ("encoder", "decoder", "cross")
    own = _own_maps(model.inner, src, tgt)
    for name, t in st.items():
        assert t.meta["layer_names"][0].startswith("inner.")
        assert float((t.weights - own[name][0]).abs().max()) <= support.EXACT_TOL, name
