"""Find the heads a trained model specialized into, by scoring every head's attention.

For a head with weights ``A`` (Lq, Lk) on a token sequence ``x``:

* previous-token score: the mean of ``A[t, t-1]`` over positions ``t >= 1``: 1.0 for a head
  that always looks one token back.
* induction score: over positions ``t`` whose token occurred before (last at ``j < t``), the
  mean of ``A[t, j+1]``: attention to the token that *followed* the earlier occurrence, which
  is what an induction head copies.

Weights come from the attention modules' ``hook_weights`` points, captured under
:func:`attnlab.core.functional.weights_requested`.

>>> x = torch.tensor([[0, 5, 6, 7, 5, 6, 7]])
>>> prev = torch.zeros(1, 1, 7, 7); prev[0, 0, 0, 0] = 1
>>> for t in range(1, 7): prev[0, 0, t, t - 1] = 1
>>> previous_token_score(prev).item(), induction_score(prev, x).item()
(1.0, 0.0)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.core.functional import weights_requested

__all__ = ["HeadScores", "capture_weights", "previous_token_score", "induction_score",
           "score_heads"]


def capture_weights(model: nn.Module, idx: Tensor) -> Tensor:
    """Attention weights of every block of an attnlab ``GPT`` on ``idx`` (B, N):
    a tensor (L, B, H, N, N)."""
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        raise TypeError(f"model must be an attnlab GPT (with .blocks), got {type(model).__name__}")
    captured: list[Tensor] = []
    handles = [b.attn.hook_weights.register_forward_hook(
        lambda _m, _i, out: captured.append(out.detach())) for b in blocks]
    try:
        with torch.no_grad(), weights_requested():
            model(idx)
    finally:
        for h in handles:
            h.remove()
    return torch.stack(captured)  # (L, B, H, N, N)


def previous_token_score(weights: Tensor) -> Tensor:
    """Mean attention from each position to the one before it: (..., Lq, Lk) -> (...)."""
    n = weights.shape[-1]
    t = torch.arange(1, n)
    return weights[..., t, t - 1].mean(dim=-1)


def _induction_targets(idx: Tensor) -> tuple[Tensor, Tensor]:
    """For each (b, t), j+1 where j < t is the last earlier occurrence of idx[b, t]; and a
    bool mask of the positions that have one (and whose j+1 < t is a real earlier key)."""
    b, n = idx.shape
    same = idx[:, :, None] == idx[:, None, :]  # (B, N, N): same[b, t, j]
    earlier = torch.ones(n, n, dtype=torch.bool).tril(-1)  # j < t
    cand = same & earlier
    pos = torch.arange(n).expand(b, n, n)
    last = torch.where(cand, pos, torch.full_like(pos, -1)).max(dim=-1).values  # (B, N)
    valid = (last >= 0) & (last + 1 < torch.arange(n))
    return (last + 1).clamp(min=0), valid


def induction_score(weights: Tensor, idx: Tensor) -> Tensor:
    """Mean attention to the token after the previous occurrence of the current token.

    ``weights``: (..., B, H, N, N); ``idx``: (B, N). Returns (..., H)."""
    target, valid = _induction_targets(idx)  # (B, N)
    gathered = weights.gather(-1, target[:, None, :, None].expand(
        *weights.shape[:-1], 1)).squeeze(-1)  # (..., B, H, N)
    m = valid[:, None, :].to(weights.dtype)  # (B, 1, N)
    return (gathered * m).sum(dim=(-3, -1)) / (m.sum() * 1.0).clamp(min=1)


@dataclass(frozen=True)
class HeadScores:
    """Per-head scores, (L, H) each, and the best head of each kind as (layer, head)."""

    previous_token: Tensor
    induction: Tensor

    @staticmethod
    def _best(s: Tensor) -> tuple[int, int, float]:
        i = int(s.argmax())
        return i // s.shape[1], i % s.shape[1], float(s.flatten()[i])

    @property
    def best_previous_token(self) -> tuple[int, int, float]:
        return self._best(self.previous_token)

    @property
    def best_induction(self) -> tuple[int, int, float]:
        return self._best(self.induction)

    def to_json(self) -> dict:
        (pl, ph, ps), (il, ih, is_) = self.best_previous_token, self.best_induction
        return {
            "previous_token": {"layer": pl, "head": ph, "score": round(ps, 4),
                               "scores": [[round(float(v), 4) for v in r]
                                          for r in self.previous_token]},
            "induction": {"layer": il, "head": ih, "score": round(is_, 4),
                          "scores": [[round(float(v), 4) for v in r] for r in self.induction]},
        }


def score_heads(model: nn.Module, idx: Tensor) -> HeadScores:
    """Previous-token and induction scores of every head of ``model`` on ``idx`` (B, N)."""
    w = capture_weights(model, idx)  # (L, B, H, N, N)
    prev = previous_token_score(w).mean(dim=1)  # (L, H)
    ind = induction_score(w, idx)  # (L, H)
    return HeadScores(prev, ind)
