"""What the adapters tell of a model: attnlab models by their class, transformers modules
by where their class is defined."""

from __future__ import annotations

import pytest
from torch import nn

from attnlab.nn.attention import MultiHeadAttention
from attnlab.nn.transformer import GPT, GPTConfig
from attnlab.tracing.adapters.attnlab import describe_model
from attnlab.tracing.adapters.huggingface import is_hf_module


def _gpt_config():
    return GPTConfig(vocab_size=16, block_size=8, num_layers=2, num_heads=2, embed_dim=8)


def test_a_gpt_and_its_subclasses_are_causal_by_class_not_by_name():
    class MyGPT(GPT):
        pass

    class GPT2(nn.Module):  # not attnlab's GPT, whatever its name says
        def __init__(self):
            super().__init__()
            self.attn = MultiHeadAttention(8, 2)

    Named = type("GPT", (nn.Module,), {})  # a foreign class named exactly "GPT"
    foreign = Named()
    foreign.attn = MultiHeadAttention(8, 2)

    assert describe_model(GPT(_gpt_config()))["causal"] is True
    assert describe_model(MyGPT(_gpt_config()))["causal"] is True
    assert describe_model(GPT2())["causal"] is False
    assert describe_model(foreign)["causal"] is False
    d = describe_model(GPT(_gpt_config()))
    assert (d["num_layers"], d["num_heads"], d["max_length"]) == (2, 2, 8)


def test_transformers_modules_are_told_by_their_defining_module():
    Foreign = type("BertSelfAttention", (nn.Module,),
                   {"__module__": "transformers.models.bert.modeling_bert"})
    Lookalike = type("BertSelfAttention", (nn.Module,), {"__module__": "mypackage.bert"})
    assert is_hf_module(Foreign()) is True
    assert is_hf_module(Lookalike()) is False
    assert is_hf_module(nn.MultiheadAttention(8, 2)) is False


def test_a_config_that_refuses_a_read_counts_it_as_absent():
    from attnlab.tracing.adapters.huggingface import describe_model as describe_hf
    from attnlab.tracing.budget import first_int, model_shape

    class Config:
        model_type = "toy"
        architectures = ["ToyForCausalLM"]
        hidden_size = 32
        num_attention_heads = 4
        num_hidden_layers = 3
        max_position_embeddings = 64

        @property
        def num_key_value_heads(self):  # kept per layer: no global value
            raise ValueError("num_key_value_heads is set per layer")

    class Toy(nn.Module):
        config = Config()

    assert first_int(Config(), "num_key_value_heads", "num_attention_heads") == 4
    d = describe_hf(Toy())
    assert (d["num_heads"], d["num_kv_heads"], d["head_dim"], d["num_layers"]) == (4, 4, 8, 3)
    assert model_shape(Toy()).num_kv_heads == 4


def test_the_hugging_face_attach_is_all_or_nothing():
    pytest.importorskip("transformers")
    from attnlab.tracing.adapters.huggingface import _OBSERVERS, ADAPTER

    class Config:
        _attn_implementation_internal = "eager"

    class Frozen:  # a config that refuses to be routed
        @property
        def _attn_implementation_internal(self):
            return "sdpa"

    a, b = nn.Linear(1, 1), nn.Linear(1, 1)
    a.config, b.config = Config(), Frozen()
    cap = object()
    with pytest.raises(AttributeError):
        ADAPTER.attach(cap, [a, b])
    assert _OBSERVERS not in a.__dict__ and _OBSERVERS not in b.__dict__
    assert a.config._attn_implementation_internal == "eager"
    handles = ADAPTER.attach(cap, [a])
    assert a.__dict__[_OBSERVERS] == [cap] and a.config._attn_implementation_internal != "eager"
    for h in reversed(handles):
        h.remove()
    assert _OBSERVERS not in a.__dict__ and a.config._attn_implementation_internal == "eager"
