"""The kernels ``attnlab bench`` races: attnlab's backends and what each must beat.

>>> q = k = v = torch.randn(1, 2, 5, 8)
>>> sorted(attention_contenders(False, 5, BenchConfig(), "cpu"))
['chunked', 'explicit', 'fused', 'linear', 'naive', 'torch_sdpa']
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.bench.config import BenchConfig
from attnlab.core.chunked import chunked_attention
from attnlab.core.functional import scaled_dot_product_attention
from attnlab.core.linear import linear_attention
from attnlab.core.masks import causal as causal_mask
from attnlab.nn import MultiHeadAttention

__all__ = ["naive_attention", "attention_contenders", "mha_contenders"]

Kernel = Callable[[Tensor, Tensor, Tensor], Tensor]


def naive_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None
                    ) -> tuple[Tensor, Tensor]:
    """Article 000's code, as written there: matmul, divide by √d_k, softmax, matmul (and
    article 001's way to be causal: ``masked_fill`` the scores before the softmax)."""
    d_k = q.shape[-1]
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)  # the articles' formula
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=-1)
    return torch.matmul(weights, v), weights


def attention_contenders(causal: bool, n: int, cfg: BenchConfig, device: str
                         ) -> dict[str, Kernel]:
    """name -> ``fn(q, k, v) -> out`` for one cell; the kernels that write the (B, H, N, N)
    weights are left out above ``cfg.max_weights_bytes``."""
    c: dict[str, Kernel] = {
        "torch_sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        "fused": lambda q, k, v: scaled_dot_product_attention(q, k, v, causal=causal),
        "chunked": lambda q, k, v: chunked_attention(q, k, v, causal=causal)[0],
        "linear": lambda q, k, v: linear_attention(q, k, v, causal=causal),
    }
    if cfg.batch * cfg.heads * n * n * 4 <= cfg.max_weights_bytes:
        mask = causal_mask(n, device=device) if causal else None
        c["naive"] = lambda q, k, v: naive_attention(q, k, v, mask)[0]
        c["explicit"] = lambda q, k, v: scaled_dot_product_attention(
            q, k, v, causal=causal, return_weights=True)[0]
    return c


def mha_contenders(n: int, cfg: BenchConfig, device: str
                   ) -> dict[str, tuple[torch.nn.Module, Callable[[torch.nn.Module, Tensor],
                                                                  Tensor]]] | None:
    """torch's and attnlab's multi-head attention modules with the same weights, both
    returning per-head weights; None above ``cfg.max_weights_bytes``."""
    if cfg.batch * cfg.heads * n * n * 4 > cfg.max_weights_bytes:
        return None
    torch.manual_seed(cfg.seed)
    theirs = torch.nn.MultiheadAttention(cfg.mha_embed_dim, cfg.heads, batch_first=True)
    ours = MultiHeadAttention.from_torch(theirs)
    theirs, ours = theirs.to(device), ours.to(device)
    return {
        "torch_mha": (theirs, lambda m, x: m(x, x, x, need_weights=True,
                                             average_attn_weights=False)[0]),
        "attnlab_mha": (ours, lambda m, x: m(x, need_weights=True)[0]),
    }
