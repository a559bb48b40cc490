"""Random-weight Hugging Face models built from a config, shared by the tests that check
a measure against the model's own eager maps."""

from __future__ import annotations


def random_llama(*, layers: int = 2, heads: int = 4, kv_heads: int = 2, hidden: int = 32,
                 vocab: int = 97, positions: int = 512, eager: bool = True, seed: int = 0):
    """A random-weight Llama causal LM built from a transformers config (seeded), for
    measures checked against the model's own eager maps."""
    import torch
    import transformers

    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=positions)
    if eager:
        cfg._attn_implementation = "eager"
    return transformers.LlamaForCausalLM(cfg).eval()
