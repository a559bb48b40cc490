"""What the adapters tell of a model: attnlab models by their class, transformers modules
by where their class is defined."""

from __future__ import annotations

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
