"""Traces for the explorer's tests: a seeded toy GPT (real capture) and synthetic q/k traces
of any length and score shaping (exact log-sum-exp, no model)."""

from __future__ import annotations

import torch

import attnlab
from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.tracing import capture
from attnlab.tracing.attention import AttentionTrace

TEXT = "The cat sat </script><b>on</b> the mat 注意力"


def toy_trace(text: str = TEXT, layers: int = 2, heads: int = 4, seed: int = 0
              ) -> AttentionTrace:
    """A seeded character-level attnlab GPT, traced with q/k (causal)."""
    torch.manual_seed(seed)
    cfg = attnlab.GPTConfig(vocab_size=128, block_size=1024, num_layers=layers,
                            num_heads=heads, embed_dim=16 * heads)
    model = attnlab.GPT(cfg).eval()
    with torch.no_grad():
        for block in model.blocks:  # sharper than the default init: the scale knob matters
            for prm in block.attn.parameters():
                prm.mul_(6.0)
    ids = torch.tensor([[ord(c) % 128 for c in text]])
    with torch.no_grad(), capture(model) as cap:
        model(ids)
    return cap.trace(tokens=list(text), model="toy-gpt", text=text)


def synthetic_trace(n: int, *, layers: int = 2, heads: int = 4, kv_heads: int | None = None,
                    d: int = 16, seed: int = 0, tokens: list[str] | None = None,
                    **shape: object) -> AttentionTrace:
    """q/k/lse trace of ``n`` tokens with local, sink-like and diffuse heads.

    Keys carry a slowly turning positional direction, so a query is near the keys around
    its own position (local heads); key 0 gets a strong component (a sink). ``shape``
    goes to :class:`ScoreShape` (causal by default).
    """
    kv_heads = kv_heads or heads
    g = torch.Generator().manual_seed(seed)
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    freq = torch.logspace(-2.5, -0.5, d // 2)[None, :]
    wave = torch.cat([torch.sin(pos * freq), torch.cos(pos * freq)], -1)  # (n, d)
    q = torch.randn(layers, heads, n, d, generator=g) * 0.7 + 3 * wave
    k = torch.randn(layers, kv_heads, n, d, generator=g) * 0.7 + 3 * wave
    k[:, :, 0] += 4 * torch.randn(d, generator=g)
    q *= torch.linspace(0.3, 1.6, heads)[None, :, None, None]  # diffuse ... sharp
    shape.setdefault("causal", True)
    shape.setdefault("scale", d ** -0.5)
    ss = ScoreShape(**shape)
    lse = torch.stack([row_logsumexp(q[i], k[i], ss) for i in range(layers)])
    return AttentionTrace(tokens=tokens or [f"w{i}" for i in range(n)], q=q, k=k, lse=lse,
                          shapes=ss, model=f"synthetic-{n}")


def dense_pooled(w: torch.Tensor, block: int) -> torch.Tensor:
    """The dense definition of a pooled map of one head (Lq, Lk): mean over each block's
    queries of the sum over its keys, in float64."""
    w = w.double()
    lq, lk = w.shape
    return torch.stack([torch.stack([w[a:a + block, c:c + block].sum(-1).mean()
                                     for c in range(0, lk, block)])
                        for a in range(0, lq, block)])
