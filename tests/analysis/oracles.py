"""Dense references the tests hold product code to: attnlab's head scores written out on
whole (..., N, N) attention patterns in float64, independently of the streamed sums of
:mod:`attnlab.analysis.sums`."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from attnlab.analysis.detection import duplicate_token_pattern, induction_pattern


def own_scores(patterns: Tensor, token_ids: Sequence[int] | Tensor | None = None
               ) -> dict[str, Tensor]:
    """attnlab's scores of :mod:`attnlab.analysis.scores` (same names, same definitions)
    on dense self-attention patterns (..., N, N): name -> float64 (...).

    With ``m_i`` the mass of row ``i`` and ``M = sum_i m_i``: ``entropy`` = mean row
    entropy in nats ``sum_i -sum_j A log A / M``; ``max_weight`` = ``sum_i max_j A_ij / M``;
    ``sink`` = attention on key 0 over the rows ``i >= 1``, divided by their mass;
    ``previous`` / ``diagonal`` = mass fraction on ``j = i - 1`` / ``j = i``; ``distance``
    = ``sum_ij A_ij |i - j| / M``; ``duplicate`` / ``induction`` (with ``token_ids``) =
    mass fraction on TransformerLens's duplicate / induction patterns. ``previous``,
    ``duplicate`` and ``induction`` are the TransformerLens ``"mul"`` scores.

    >>> s = own_scores(torch.eye(3))
    >>> s["diagonal"].item(), s["entropy"].item(), s["distance"].item()
    (1.0, 0.0, 0.0)
    """
    assert patterns.dim() >= 2 and patterns.shape[-1] == patterns.shape[-2], patterns.shape
    n = patterns.shape[-1]
    a = patterns.double()
    m = a.sum(-1)
    mass = m.sum(-1)
    pos = torch.arange(n)
    plogp = torch.where(a > 0, a * a.clamp_min(1e-300).log(), torch.zeros((), dtype=a.dtype))

    def ratio(num: Tensor, den: Tensor) -> Tensor:
        return torch.where(den > 0, num / den.clamp_min(1e-300), torch.zeros_like(num))

    out = {
        "entropy": ratio(-plogp.sum((-2, -1)), mass) + 0.0,
        "max_weight": ratio(a.amax(-1).sum(-1), mass),
        "sink": ratio(a[..., 1:, 0].sum(-1), m[..., 1:].sum(-1)),
        "previous": ratio(a.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1), mass),
        "diagonal": ratio(a.diagonal(dim1=-2, dim2=-1).sum(-1), mass),
        "distance": ratio((a * (pos[:, None] - pos[None, :]).abs().double()).sum((-2, -1)),
                          mass),
    }
    if token_ids is not None:
        ids = torch.as_tensor(token_ids).long().flatten()
        assert ids.numel() == n, (ids.numel(), n)
        out["duplicate"] = ratio((a * duplicate_token_pattern(ids).double()).sum((-2, -1)),
                                 mass)
        out["induction"] = ratio((a * induction_pattern(ids).double()).sum((-2, -1)), mass)
    return out

