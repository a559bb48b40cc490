"""The explorer's geometry view: one joint 2-D projection of each head's queries and keys
(AttentionViz), with the small eigen-solver it needs."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["top2", "joint_projection"]


def top2(c: Tensor | np.ndarray, squarings: int = 5, iters: int = 6) -> Tensor:
    """(S, d, 2) leading eigenvectors of symmetric PSD (S, d, d), largest first.

    Each by power iteration on ``c^(2^squarings)`` (normalised; the same eigenvectors), the
    second on ``c`` with the first taken out (``c − λ₁ a aᵀ``): iterating both at once on
    the power would lose the second whenever ``(λ₂/λ₁)^(2^squarings)`` falls below float64's
    resolution, i.e. for any head with one dominant direction. Plain small matmuls (numpy)
    instead of LAPACK: hundreds of tiny eigensolves are instant this way on a busy machine,
    and deterministic (fixed start).

    >>> v = top2(torch.diag(torch.tensor([1.0, 3.0, 2.0]))[None])
    >>> v[0].abs().round().T.tolist()  # the axes of the two largest eigenvalues, 3 then 2
    [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    >>> v = top2(torch.diag(torch.tensor([1e4, 1.0, 1e-3]))[None])  # one axis dominates
    >>> v[0].abs().round().T.tolist()
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    """
    c = np.asarray(c, dtype=np.float64)
    s, d, _ = c.shape
    first = np.ones((s, d))
    second = np.zeros((s, d))
    second[:, 1::2] = 1.0
    second[:, 0] = -1.0 if d > 1 else 0.0

    def unit(x: np.ndarray) -> np.ndarray:
        return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-300)

    def trace(m: np.ndarray) -> np.ndarray:
        return np.maximum(np.abs(np.trace(m, axis1=1, axis2=2)), 1e-300)[:, None, None]

    def leading(m: np.ndarray, v: np.ndarray, away: np.ndarray | None) -> np.ndarray:
        p = m / trace(m)
        for _ in range(squarings):  # p = m^(2^squarings), normalised: same eigenvectors
            p = p @ p
            p = p / trace(p)
        for _ in range(iters):
            v = (p @ v[..., None])[..., 0]
            if away is not None:  # stay orthogonal to the first
                v = v - (away * v).sum(-1, keepdims=True) * away
            v = unit(v)
        return v

    a = leading(c, unit(first), None)
    lam = np.einsum("si,sij,sj->s", a, c, a)[:, None, None]
    b = leading(c - lam * (a[:, :, None] * a[:, None, :]), unit(second), a)
    return torch.from_numpy(np.stack([a, b], axis=-1))


def joint_projection(q: Tensor, k: Tensor) -> Tensor:
    """(S, Lq + Lk, 2) joint 2-D projection of each head's queries and keys (AttentionViz).

    Softmax over keys ignores a shift shared by all keys (q·(k+c) adds q·c to a whole row),
    and q·k is unchanged by q→αq, k→k/α. So keys are translated onto the queries' centroid
    and both clouds rescaled to the same mean norm before one PCA: the picture then shows
    which keys a query is near, not the offset between the two clouds. Coordinates are
    scaled into [-1, 1] per head.

    >>> q, k = torch.randn(2, 5, 4), torch.randn(2, 7, 4)
    >>> xy = joint_projection(q, k)
    >>> tuple(xy.shape), float(xy.abs().max()) <= 1.0
    ((2, 12, 2), True)
    """
    qa = q.detach().double().numpy()  # (S, Lq, d)
    ka = k.detach().double().numpy()  # (S, Lk, d)
    ka = ka - ka.mean(1, keepdims=True) + qa.mean(1, keepdims=True)
    qn = np.maximum(np.linalg.norm(qa, axis=-1).mean(-1), 1e-12)  # (S,)
    kn = np.maximum(np.linalg.norm(ka, axis=-1).mean(-1), 1e-12)
    alpha = np.sqrt(kn / qn)[:, None, None]
    x = np.concatenate([qa * alpha, ka / alpha], axis=1)  # (S, Lq + Lk, d)
    x = x - x.mean(1, keepdims=True)
    xy = x @ top2(x.transpose(0, 2, 1) @ x).numpy()  # (S, Lq + Lk, 2)
    m = np.maximum(np.abs(xy).reshape(len(xy), -1).max(-1), 1e-12)[:, None, None]
    return torch.from_numpy(xy / m).float()

