"""Find the heads a trained model specialized into, by scoring every head's attention.

For a head with weights ``A`` (Lq, Lk) on a token sequence ``x``:

* previous-token score: the mean of ``A[t, t-1]`` over positions ``t >= 1``: 1.0 for a head
  that always looks one token back.
* induction score: over positions ``t`` whose token occurred before, the mean attention
  mass on the keys ``j+1`` with ``x[j] == x[t]``, ``j+1 < t``: the tokens that *followed*
  the earlier occurrences, which is what an induction head copies.

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
           "score_heads", "induction_targets"]


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
    t = torch.arange(1, n, device=weights.device)
    return weights[..., t, t - 1].mean(dim=-1)


def induction_targets(idx: Tensor) -> Tensor:
    """(B, N, N) bool: key ``k`` follows an earlier occurrence of the query's token, that is
    ``idx[b, k-1] == idx[b, t]`` with ``k < t``: where an induction head at ``t`` looks."""
    b, n = idx.shape
    same = idx[:, :, None] == idx[:, None, :]  # (B, N, N): same[b, t, j]
    succ = torch.zeros_like(same)
    succ[:, :, 1:] = same[:, :, :-1]  # succ[b, t, k] = same[b, t, k-1]
    return succ & torch.ones(n, n, dtype=torch.bool, device=idx.device).tril(-1)  # k < t


def induction_score(weights: Tensor, idx: Tensor) -> Tensor:
    """Mean attention mass on the tokens that followed earlier occurrences of the current
    token, over the positions whose token occurred before.

    ``weights``: (..., B, H, N, N); ``idx``: (B, N). Returns (..., H)."""
    m = induction_targets(idx).to(weights.dtype)  # (B, N, N)
    valid = m.any(dim=-1).to(weights.dtype)  # (B, N): the token occurred before
    mass = (weights * m[:, None]).sum(-1)  # (..., B, H, N)
    return (mass * valid[:, None]).sum(dim=(-3, -1)) / valid.sum().clamp(min=1)


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
    return HeadScores(prev.cpu(), ind.cpu())
