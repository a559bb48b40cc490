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
