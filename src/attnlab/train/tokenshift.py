"""attnlab's ``GPT`` with a token shift: each position's input also holds the token before it.

The input of position ``t`` is ``wte[x_t] + wshift[x_(t-1)] + wpe[t]`` (position 0, which
has no previous token, gets ``wte[x_0] + wpe[0]``); ``wshift`` is a second learned
embedding table, so the model can tell the current token from the previous one. Everything
after the input is the plain :class:`attnlab.nn.transformer.GPT` (pre-LN blocks, tied
``lm_head``).

Why: a lookup "find the earlier occurrence of this key and read the value after it" needs
each value position to know the key before it. A plain GPT has to build that itself, with a
previous-token head in one layer feeding a lookup head in the next (the induction circuit);
the token shift writes the previous token into the input, so one attention head can do the
lookup (see ``assoc-recall`` in :mod:`attnlab.train.tasks`).

The class keeps the name ``GPT``: it is one, decoder-only and causal, and attnlab's tracing
recognizes it as such.

>>> import torch
>>> from attnlab.nn.transformer import GPTConfig
>>> m = GPT(GPTConfig(vocab_size=10, block_size=8, num_layers=1, num_heads=2, embed_dim=8))
>>> m(torch.zeros(2, 5, dtype=torch.long)).shape
torch.Size([2, 5, 10])
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnlab.nn.transformer import GPT as _PlainGPT

__all__ = ["GPT", "shifted_input"]


def shifted_input(model: GPT, idx: Tensor) -> Tensor:
    """The input (B, N, E) that ``model``'s first block receives for token ids ``idx``."""
    b, n = idx.shape
    x = model.wte(idx)
    shift = model.wshift(idx[:, :-1])  # (B, N-1, E): the previous token of positions 1..N-1
    x = x + torch.cat([torch.zeros_like(x[:, :1]), shift], dim=1)
    if model.wpe is not None:
        x = x + model.wpe(torch.arange(n, device=idx.device))
    return x


def _check_ids(idx: object, vocab: int) -> None:
    if not isinstance(idx, Tensor) or idx.is_floating_point() or idx.is_complex() \
            or idx.dtype == torch.bool or idx.dim() != 2:
        got = (f"dtype {idx.dtype}, shape {tuple(idx.shape)}" if isinstance(idx, Tensor)
               else type(idx).__name__)
        raise TypeError(f"idx must be an integer tensor (B, N) of token ids, got {got}")
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= vocab):
        raise ValueError(f"idx holds ids in [{int(idx.min())}, {int(idx.max())}], outside the "
                         f"vocabulary [0, {vocab})")


class GPT(_PlainGPT):
    """Decoder-only Transformer whose input adds a learned embedding of the previous token.

    Same constructor and config as :class:`attnlab.nn.transformer.GPT`, plus the table
    ``wshift`` (vocab_size, embed_dim), initialized like ``wte`` (normal, std 0.02). No KV
    cache: the previous token of a cached step is not in its input; :meth:`generate`
    recomputes the whole prefix at each step (the tiny models trained here need no more).
    """

    def __init__(self, config) -> None:
        super().__init__(config)
        self.wshift = nn.Embedding(config.vocab_size, config.embed_dim)
        nn.init.normal_(self.wshift.weight, std=0.02)

    def forward(self, idx: Tensor, caches: list | None = None) -> Tensor:
        """Logits (B, N, V) for token ids ``idx`` (B, N)."""
        if caches is not None:
            raise ValueError("caches: this GPT has a token shift and no KV cache; call it "
                             "without caches (generate(..., use_cache=False))")
        _check_ids(idx, self.config.vocab_size)
        if idx.shape[1] > self.config.block_size:
            raise ValueError(f"sequence of {idx.shape[1]} tokens exceeds "
                             f"block_size={self.config.block_size}")
        x = self.drop(shifted_input(self, idx))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    @torch.no_grad()
    def generate(self, idx: Tensor, max_new_tokens: int, **kwargs) -> Tensor:
        """As :meth:`attnlab.nn.transformer.GPT.generate`, always without a KV cache."""
        if kwargs.get("use_cache", False) is not False:
            raise ValueError("use_cache: this GPT has a token shift and no KV cache; pass "
                             "use_cache=False or leave it out")
        kwargs["use_cache"] = False
        return super().generate(idx, max_new_tokens, **kwargs)
