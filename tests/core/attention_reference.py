"""The attention formula written the plain way in float64: ground truth for every path."""

from __future__ import annotations

import math

import torch


def reference(q, k, v, mask=None, causal=False, scale=None):
    """softmax(q kᵀ·scale + mask) v in float64 -> (out, weights, logsumexp).

    Fully-masked rows give output 0, weights 0 and logsumexp -inf.
    """
    q, k, v = q.double(), k.double(), v.double()
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-2, -1) * scale
    lq, lk = s.shape[-2:]
    if causal:
        s = s.masked_fill(~torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq), -math.inf)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else s + mask.double()
    dead = torch.isneginf(s).all(-1, keepdim=True)
    w = torch.softmax(s.masked_fill(dead, 0), -1).masked_fill(dead, 0)
    lse = torch.logsumexp(s.masked_fill(dead, 0), -1).masked_fill(dead.squeeze(-1), -math.inf)
    return w @ v, w, lse


def make_mask(kind, b, h, lq, lk, g, dtype=torch.float32):
    """A mask of one kind for (b, h, lq, lk) attention, drawn from ``g``: ``none``, ``bool``
    (with a fully-masked row), ``bool-bcast`` (lq, lk), ``row`` (whole rows on or off,
    broadcast along the keys), ``float`` (additive, with a fully-masked row) or ``key``
    (padding of random lengths)."""
    from attnlab.core.masks import padding

    if kind == "none":
        return None
    if kind == "bool":
        m = torch.rand(b, h, lq, lk, generator=g) > 0.5
        m[..., 0, :] = False  # a fully-masked row
        return m
    if kind == "bool-bcast":
        return torch.rand(lq, lk, generator=g) > 0.4
    if kind == "row":  # (..., Lq, 1): whole rows on or off, broadcast along the keys
        m = torch.rand(b, 1, lq, 1, generator=g) > 0.3
        m[:, :, 0] = False
        return m
    if kind == "float":
        m = torch.randn(b, 1, lq, lk, generator=g, dtype=dtype)
        m = m.masked_fill(torch.rand(b, 1, lq, lk, generator=g) > 0.7, -math.inf)
        m[:, :, -1] = -math.inf  # a fully-masked row
        return m
    if kind == "key":
        lengths = torch.randint(0, lk + 1, (b,), generator=g)
        return padding(lengths, lk)[:, None, None, :]
    raise AssertionError(kind)

