"""torch.nn's Transformer stacks captured with the encoder, decoder and cross-attention
apart, each equal to what its own ``nn.MultiheadAttention`` computes for the same call."""

from __future__ import annotations

import importlib
import warnings

import pytest
import torch
from torch import nn

from attnlab.tracing import AttentionTrace, StackedTrace, capture, trace

torch_mha = importlib.import_module("attnlab.tracing.adapters.torch_mha")
E, H = 16, 4


def _calls(model: nn.Module) -> tuple[dict[str, list], list]:
    """Forward pre-hooks that keep each nn.MultiheadAttention call's arguments, by name."""
    seen: dict[str, list] = {}
    handles = []
    for name, m in model.named_modules():
        if isinstance(m, nn.MultiheadAttention):
            handles.append(m.register_forward_pre_hook(
                lambda mod, a, kw, name=name: seen.setdefault(name, []).append((mod, a, kw)),
                with_kwargs=True))
    return seen, handles


def _own_weights(calls: list) -> torch.Tensor:
    """(L, B, H, Lq, Lk): each call run again through its module with per-head weights."""
    out = []
    for mod, args, kwargs in calls:
        kw = {**kwargs, "need_weights": True, "average_attn_weights": False}
        kw.pop("is_causal", None)  # a hint only, with the mask given
        with torch.no_grad():
            out.append(mod(*args, **kw)[1])
    return torch.stack(out)


def _inputs(b=2, ls=7, lt=5):
    g = torch.Generator().manual_seed(0)
    src, tgt = torch.randn(b, ls, E, generator=g), torch.randn(b, lt, E, generator=g)
    pad = torch.zeros(b, ls, dtype=torch.bool)
    pad[1, 5:] = True  # the second source has 5 real tokens
    return src, tgt, pad


@pytest.mark.parametrize("norm_first", [False, True])
def test_nn_transformer_keeps_three_stacks_each_exact(norm_first):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model = nn.Transformer(E, H, num_encoder_layers=2, num_decoder_layers=3,
                               dim_feedforward=32, dropout=0.0, batch_first=True,
                               norm_first=norm_first).eval()
    src, tgt, pad = _inputs()
    causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
    args = dict(tgt_mask=causal, src_key_padding_mask=pad, memory_key_padding_mask=pad,
                tgt_is_causal=True)
    with torch.no_grad(), warnings.catch_warnings():  # torch's nested-tensor fast path
        warnings.simplefilter("ignore", UserWarning)
        plain = model(src, tgt, **args)
    seen, handles = _calls(model)
    try:
        with torch.no_grad(), capture(model) as cap:
            out = model(src, tgt, **args)
    finally:
        for hnd in handles:
            hnd.remove()
    assert torch.allclose(out, plain, atol=1e-6)  # capturing leaves the model's output alone
    names = {"encoder": [n for n in seen if n.startswith("encoder.")],
             "decoder": [n for n in seen if n.endswith(".self_attn") and "decoder" in n],
             "cross": [n for n in seen if n.endswith(".multihead_attn")]}
    for b in (0, 1):
        st = cap.trace(b)
        assert isinstance(st, StackedTrace) and st.names == ("encoder", "decoder", "cross")
        assert {n: t.num_layers for n, t in st.items()} == {"encoder": 2, "decoder": 3,
                                                             "cross": 3}
        assert [t.causal for t in st.values()] == [False, True, False]
        assert st["cross"].tokens == st["decoder"].tokens == [str(i) for i in range(5)]
        assert st["cross"].key_tokens == st["encoder"].tokens == [str(i) for i in range(7)]
        for stack, t in st.items():
            assert t.meta["layer_names"] == names[stack]
            own = _own_weights([c for n in names[stack] for c in seen[n]])[:, b]
            assert float((t.weights - own).abs().max()) <= 1e-6, (stack, b)
        if b == 1:  # padding: the last two source tokens hidden from encoder and cross
            assert float(st["cross"].weights[..., 5:].abs().max()) == 0.0
            assert st["encoder"].shapes[0].key_mask.tolist() == [True] * 5 + [False] * 2


def test_a_wrong_reading_fails_the_same_comparison(monkeypatch):
    """The comparison above can fail: a decoder read without its causal mask is off."""
    model = nn.Transformer(E, H, num_encoder_layers=1, num_decoder_layers=1,
                           dim_feedforward=32, dropout=0.0, batch_first=True).eval()
    src, tgt, _ = _inputs()
    causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
    real = torch_mha._shapes

    def no_mask(m, call, b, lq, lk):
        return real(m, {k: v for k, v in call.items() if k != "attn_mask"}, b, lq, lk)

    monkeypatch.setattr(torch_mha, "_shapes", no_mask)
    seen, handles = _calls(model)
    with torch.no_grad(), capture(model) as cap:
        model(src, tgt, tgt_mask=causal)
    for hnd in handles:
        hnd.remove()
    t = cap.trace(0)["decoder"]
    own = _own_weights(seen["decoder.layers.0.self_attn"])[:, 0]
    assert not t.causal and float((t.weights - own).abs().max()) > 1e-2


def test_an_encoder_alone_is_one_stack_and_a_decoder_alone_two():
    enc_layer = nn.TransformerEncoderLayer(E, H, 32, 0.0, batch_first=True)
    encoder = nn.TransformerEncoder(enc_layer, 2, enable_nested_tensor=False).eval()
    src, tgt, pad = _inputs()
    with torch.no_grad(), capture(encoder) as cap:
        encoder(src, src_key_padding_mask=pad)
    t = cap.trace(1, tokens=list("abcdefg"))
    assert isinstance(t, AttentionTrace) and t.stack == "self" and t.num_layers == 2
    dec_layer = nn.TransformerDecoderLayer(E, H, 32, 0.0, batch_first=True)
    decoder = nn.TransformerDecoder(dec_layer, 2).eval()
    causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
    seen, handles = _calls(decoder)
    with torch.no_grad(), capture(decoder) as cap:
        decoder(tgt, src, tgt_mask=causal, memory_key_padding_mask=pad)
    for hnd in handles:
        hnd.remove()
    st = cap.trace(1, tokens=list("vwxyz"), key_tokens=list("abcdefg"))
    assert isinstance(st, StackedTrace) and st.names == ("decoder", "cross")
    assert st["decoder"].tokens == st["cross"].tokens == list("vwxyz")
    assert st["cross"].key_tokens == list("abcdefg") and st["decoder"].causal
    own = _own_weights([c for n in ("layers.0.multihead_attn", "layers.1.multihead_attn")
                        for c in seen[n]])[:, 1]
    assert float((st["cross"].weights - own).abs().max()) <= 1e-6


def test_attnlab_transformer_is_traced_as_three_stacks():
    from attnlab.nn.transformer import Transformer, TransformerConfig

    model = Transformer(TransformerConfig(src_vocab_size=10, tgt_vocab_size=8, embed_dim=8,
                                          num_heads=2, num_encoder_layers=1,
                                          num_decoder_layers=2, ff_dim=16)).eval()
    st = trace(model, [1, 2, 3, 4], target=[5, 6, 7])
    assert isinstance(st, StackedTrace) and st.meta["target_from"] == "given"
    assert {n: (t.num_layers, t.seq_len, t.key_len) for n, t in st.items()} == {
        "encoder": (1, 4, 4), "decoder": (2, 3, 3), "cross": (2, 3, 4)}
    assert st["decoder"].causal and st["cross"].token_ids == [5, 6, 7]
    same = trace(model, [1, 2, 3])  # no generation of its own: the source on both sides
    assert same.meta["target_from"] == "source" and same["decoder"].token_ids == [1, 2, 3]


def test_attnlab_transformer_reads_a_target_text_with_its_own_tokenizer():
    from attnlab.nn.transformer import Transformer, TransformerConfig

    class Chars:  # a character tokenizer, as attnlab's trained runs have
        def encode(self, text):
            return [" abcdefg".index(c) for c in text]

        def decode_tokens(self, ids):
            return [" abcdefg"[i] for i in ids]

    model = Transformer(TransformerConfig(src_vocab_size=10, tgt_vocab_size=8, embed_dim=8,
                                          num_heads=2, num_encoder_layers=1,
                                          num_decoder_layers=1, ff_dim=16)).eval()
    st = trace(model, "abc", target="gde", tokenizer=Chars())
    assert st.text == "abc" and st.target == "gde" and st.meta["target_from"] == "given"
    assert st["encoder"].tokens == list("abc") and st["cross"].key_tokens == list("abc")
    assert st["decoder"].tokens == st["cross"].tokens == list("gde")
    assert st["decoder"].token_ids == [7, 4, 5]
