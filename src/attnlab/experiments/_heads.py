"""What the head experiments share: tiny attnlab models trained for a few hundred steps,
the attention they learned read back through attnlab's hook points, principal angles, the
loss panel, and a two-relation task.

Used by ``multihead-cost``, ``one-relation-per-head``, ``qkv-roles`` and ``wo-fusion``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.nn import MultiHeadAttention

from ._common import label_axes

__all__ = ["TwoRelationTask", "train", "accuracy", "read_hooks", "relation_mass",
           "principal_angles", "pair_angles", "mean_pair_angle", "plot_losses"]

#: ``batch_fn(step) -> (inputs (B, N) ids, targets (B, N) ids, scored (B, N) bool)``
BatchFn = Callable[[int], tuple[Tensor, Tensor, Tensor]]


def train(model: nn.Module, batch_fn: BatchFn, steps: int, lr: float, *,
          extra_loss: Callable[[], Tensor] | None = None,
          on_step: Callable[[int], None] | None = None) -> list[float]:
    """Adam on the trainable parameters of ``model`` for ``steps`` steps; cross-entropy of
    ``model(inputs)`` against ``targets`` at the ``scored`` positions (plus ``extra_loss()``
    when given). ``on_step(step)`` runs before each step and once after the last (step =
    ``steps``), e.g. to evaluate. Returns the task loss of every step (the extra term
    excluded)."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    losses = []
    model.train()
    with torch.enable_grad():
        for step in range(steps):
            if on_step is not None:
                on_step(step)
            inputs, targets, scored = batch_fn(step)
            loss = F.cross_entropy(model(inputs)[scored], targets[scored])
            total = loss if extra_loss is None else loss + extra_loss()
            opt.zero_grad(set_to_none=True)
            total.backward()
            opt.step()
            losses.append(loss.item())
    model.eval()
    if on_step is not None:
        on_step(steps)
    return losses


@torch.no_grad()
def accuracy(model: nn.Module, inputs: Tensor, targets: Tensor, scored: Tensor) -> float:
    """Share of the scored positions where the most likely token is the target."""
    pred = model(inputs).argmax(-1)
    return float((pred[scored] == targets[scored]).float().mean())


@torch.no_grad()
def read_hooks(model: nn.Module, attn: MultiHeadAttention, inputs: Tensor,
               points: Sequence[str] = ("weights",)) -> dict[str, Tensor]:
    """Run ``model`` on ``inputs`` and return what passed through ``attn``'s hook points
    (``"q"``, ``"k"``, ``"v"``, ``"weights"``, ``"context"``; see :mod:`attnlab.nn.attention`)."""
    seen: dict[str, Tensor] = {}
    handles = [getattr(attn, f"hook_{p}").register_forward_hook(
        lambda _m, _i, out, p=p: seen.setdefault(p, out.detach())) for p in points]
    try:
        model(inputs)
    finally:
        for h in handles:
            h.remove()
    missing = [p for p in points if p not in seen]
    if missing:
        raise RuntimeError(f"hook points {missing} saw nothing: is attn a module of model?")
    return seen


def relation_mass(weights: Tensor, sources: Tensor, scored: Tensor) -> Tensor:
    """Mean attention weight each head puts on each relation's source token.

    weights (B, H, N, N); sources (B, N, R) long, the key position each relation points
    to from each query; scored (B, N) bool, the queries that count. Returns (H, R).
    """
    b, h, n, _ = weights.shape
    idx = sources.clamp_min(0)[:, None].expand(b, h, n, sources.shape[-1])  # (B, H, N, R)
    mass = weights.gather(-1, idx)  # (B, H, N, R)
    keep = scored[:, None, :, None].expand_as(mass)
    return (mass * keep).sum((0, 2)) / keep.sum((0, 2))


def principal_angles(a: Tensor, b: Tensor) -> Tensor:
    """Principal angles (radians, ascending) between the row spaces of a (r, E) and b (s, E).

    Computed in float64 from orthonormal bases (QR): the arccos of the singular values of
    Q_aᵀ Q_b."""
    qa = torch.linalg.qr(a.T.double()).Q  # (E, r)
    qb = torch.linalg.qr(b.T.double()).Q  # (E, s)
    cos = torch.linalg.svdvals(qa.T @ qb).clamp(-1, 1)  # descending cosines
    return torch.acos(cos)


def pair_angles(parts: Sequence[Tensor]) -> list[float]:
    """The mean principal angle (degrees) of each pair of the given row blocks, pairs
    (0, 1), (0, 2), … in order."""
    return [float(torch.rad2deg(principal_angles(parts[i], parts[j])).mean())
            for i in range(len(parts)) for j in range(i + 1, len(parts))]


def mean_pair_angle(parts: Sequence[Tensor]) -> float:
    """Mean principal angle (degrees) over all pairs of the given row blocks."""
    angles = pair_angles(parts)
    return sum(angles) / len(angles)


def plot_losses(ax, curves: Sequence[tuple[Sequence[float], str, str]], title: str, *,
                chance: float | None = None) -> None:
    """The training-loss panel: each ``(losses, colour, label)`` of :func:`train` against
    step 1…n, a dotted line at the ``chance`` loss (``log K`` nats for K classes) when given,
    and the axes labelled (:func:`~attnlab.experiments._common.label_axes`)."""
    for losses, color, label in curves:
        ax.plot(range(1, len(losses) + 1), losses, color=color, lw=1, label=label)
    if chance is not None:
        ax.axhline(chance, color="k", ls=":", lw=1, label=f"chance: log {round(math.exp(chance))}")
    label_axes(ax, "training step", "cross-entropy at scored positions (nats)", title)


@dataclass(frozen=True)
class TwoRelationTask:
    """A sequence task whose every answer needs two source tokens at once.

    Inputs are ``seq_len`` random values in ``[0, n_values)``. At a scored position t the
    target is the ordered pair ``n_values · a + b`` (``n_values²`` classes), where

    * ``kind="offsets"``: a = the token at t − 1, b = the token at t − ``far``
      (two positional relations);
    * ``kind="marked"``: a = the token at t − 1, b = the value of the one *marked* token of
      the sequence (id ``value + n_values``, placed in the first half; a content relation),
      scored from two positions after the mark.

    The pair is ordered, so a model must know which token came from which relation.
    """

    kind: str = "offsets"
    n_values: int = 8
    seq_len: int = 16
    far: int = 3

    def __post_init__(self) -> None:
        if self.kind not in ("offsets", "marked"):
            raise ValueError(f"kind must be 'offsets' or 'marked', got {self.kind!r}")
        if not 2 <= self.n_values:
            raise ValueError(f"n_values must be >= 2, got {self.n_values}")
        if not 2 <= self.far < self.seq_len - 1:
            raise ValueError(f"far must be in [2, seq_len - 1), got far={self.far}, "
                             f"seq_len={self.seq_len}")

    @property
    def vocab_size(self) -> int:
        """Input ids (values, marked values: 2·n_values ≤ n_values²) and the output pairs
        share one vocabulary."""
        return self.n_values ** 2

    @property
    def relations(self) -> tuple[str, str]:
        second = f"t − {self.far}" if self.kind == "offsets" else "marked token"
        return ("t − 1", second)

    def batch(self, g: torch.Generator, size: int
              ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """inputs (B, N), targets (B, N), scored (B, N) bool, sources (B, N, 2): the key
        position of each relation from each query (meaningful where scored)."""
        v, n = self.n_values, self.seq_len
        x = torch.randint(v, (size, n), generator=g)  # values
        t = torch.arange(n)[None, :].expand(size, n)
        prev = (t - 1).clamp_min(0)
        inputs = x.clone()
        if self.kind == "offsets":
            second = (t - self.far).clamp_min(0)
            scored = t >= self.far
        else:
            mark = torch.randint(0, n // 2, (size, 1), generator=g)
            inputs.scatter_(1, mark, x.gather(1, mark) + v)  # the marked token
            second = mark.expand(size, n)
            scored = t >= mark + 2
        targets = v * x.gather(1, prev) + x.gather(1, second)
        return inputs, targets, scored, torch.stack([prev, second], dim=-1)
