"""trace(model, text_or_token_ids): loaded models (duck-typed) or bare modules, never names."""

from __future__ import annotations

import pytest
import torch

from attnlab.nn.transformer import GPT, GPTConfig
from attnlab.tracing.budget import MemoryBudgetError
from attnlab.tracing.tracer import trace


def _gpt(**kw) -> GPT:
    torch.manual_seed(0)
    cfg = dict(vocab_size=20, num_layers=2, num_heads=4, embed_dim=32, num_kv_heads=2,
               positional="rope", block_size=64)
    cfg.update(kw)
    return GPT(GPTConfig(**cfg)).eval()


class _Tok:
    """A plain tokenizer: one id per letter (as trained attnlab runs have)."""

    def encode(self, text):
        return [ord(c) % 20 for c in text]

    def decode_tokens(self, ids):
        return [chr(97 + i) for i in ids]


class _Loaded:
    """What the tracer needs of a loaded model (attnlab.models.LoadedModel's fields)."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer, self.name = model, tokenizer, "tiny"
        self.causal, self.max_length, self.num_layers = True, 8, 2

    def describe(self):
        return {"name": self.name, "kind": "attnlab", "note": "duck"}


def test_bare_module_and_token_ids():
    gpt = _gpt()
    gpt.train()
    t = trace(gpt, torch.tensor([[1, 2, 3, 4, 5]]))
    assert gpt.training  # put back as it was
    assert (t.num_layers, t.num_heads, t.seq_len, t.causal) == (2, 4, 5, True)
    assert t.tokens == ["1", "2", "3", "4", "5"]
    assert t.token_ids == [1, 2, 3, 4, 5] and t.meta["model_info"]["num_layers"] == 2
    assert torch.allclose(t.weights.sum(-1), torch.ones(2, 4, 5), atol=1e-5)
    dense = trace(gpt, [1, 2, 3, 4, 5], qkv=False)
    assert not dense.has_qk and (dense.weights - t.weights).abs().max() < 1e-6


def test_duck_typed_loaded_model_with_a_plain_tokenizer():
    loaded = _Loaded(_gpt(), _Tok())
    t = trace(loaded, "abcd", progress=True)
    assert t.model == "tiny" and t.text == "abcd" and t.seq_len == 4
    assert t.meta["model_info"]["note"] == "duck"
    with pytest.raises(ValueError, match="at most 8.*truncate=True"):
        trace(loaded, "abcdefghij")
    cut = trace(loaded, "abcdefghij", truncate=True)
    assert cut.seq_len == 8 and cut.meta["truncated_from"] == 10


def test_input_errors_name_the_fix():
    gpt = _gpt()
    with pytest.raises(TypeError, match=r"load it first.*attnlab.models.load"):
        trace("smollm2", "hello")
    with pytest.raises(TypeError, match="loaded model"):
        trace(object(), [1])
    with pytest.raises(ValueError, match="empty"):
        trace(gpt, [])
    with pytest.raises(ValueError, match="tokenizer"):
        trace(gpt, "some text")
    with pytest.raises(ValueError, match="no visible character"):
        trace(_Loaded(gpt, _Tok()), " \u200b ")
    with pytest.raises(ValueError, match="at most 64"):
        trace(gpt, [1] * 70)
    t = trace(gpt, [1] * 70, truncate=True)
    assert t.seq_len == 64 and t.meta["truncated_from"] == 70
    with pytest.raises(MemoryBudgetError, match="memory budget"):
        trace(gpt, [1] * 10, max_memory=1000)


def test_token_ids_outside_the_vocabulary_are_refused_by_name():
    gpt = _gpt()  # vocabulary [0, 20)
    for ids in ([-1], [1, 20], torch.tensor([3, 99])):
        with pytest.raises(ValueError, match=r"token_ids holds ids in .*outside the vocab"):
            trace(gpt, ids)
    assert trace(gpt, [0, 19]).token_ids == [0, 19]  # both ends of the vocabulary
    from attnlab.nn.transformer import Transformer, TransformerConfig

    ed = Transformer(TransformerConfig(src_vocab_size=10, tgt_vocab_size=6, embed_dim=8,
                                       num_heads=2, num_encoder_layers=1,
                                       num_decoder_layers=1, ff_dim=16)).eval()
    with pytest.raises(ValueError, match=r"\[0, 6\)"):  # both sides read the ids
        trace(ed, [1, 7])
    assert trace(ed, [1, 5])["encoder"].seq_len == 2
    transformers = pytest.importorskip("transformers")
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16)).eval()
    with pytest.raises(ValueError, match=r"token_ids .*\[0, 32\)"):
        trace(hf, [3, 32])
    assert trace(hf, [3, 31]).seq_len == 2
