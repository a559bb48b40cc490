"""The explorer's geometry view: one joint 2-D projection of each head's queries and keys
(AttentionViz), with the small eigen-solver it needs."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["top2", "joint_projection"]


def top2(c: Tensor | np.ndarray, squarings: int = 5, iters: int = 6) -> Tensor:
    """(S, d, 2) leading eigenvectors of symmetric PSD (S, d, d) by subspace iteration.

    Plain small matmuls (numpy) instead of LAPACK: hundreds of tiny eigensolves are instant
    this way on a busy machine, and deterministic (fixed start).

    >>> v = top2(torch.diag(torch.tensor([1.0, 3.0, 2.0]))[None])
    >>> v[0].abs().round().T.tolist()  # the axes of the two largest eigenvalues, 3 then 2
    [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    c = np.asarray(c, dtype=np.float64)
    s, d, _ = c.shape
    v = np.zeros((s, d, 2))
    v[:, :, 0] = 1.0
    v[:, 1::2, 1] = 1.0
    v[:, 0, 1] = -1.0 if d > 1 else 0.0

    def trace(m: np.ndarray) -> np.ndarray:
        return np.maximum(np.trace(m, axis1=1, axis2=2), 1e-300)[:, None, None]

    p = c / trace(c)
    for _ in range(squarings):  # p = c^(2^squarings), normalised: same eigenvectors
        p = p @ p
        p = p / trace(p)
    for _ in range(iters):
        v = p @ v
        a = v[..., 0] / np.maximum(np.linalg.norm(v[..., 0], axis=-1, keepdims=True), 1e-300)
        b = v[..., 1] - (a * v[..., 1]).sum(-1, keepdims=True) * a
        b = b / np.maximum(np.linalg.norm(b, axis=-1, keepdims=True), 1e-300)
        v = np.stack([a, b], axis=-1)
    return torch.from_numpy(v)


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
    q = q.detach().double().numpy()  # (S, Lq, d)
    k = k.detach().double().numpy()  # (S, Lk, d)
    k = k - k.mean(1, keepdims=True) + q.mean(1, keepdims=True)
    qn = np.maximum(np.linalg.norm(q, axis=-1).mean(-1), 1e-12)  # (S,)
    kn = np.maximum(np.linalg.norm(k, axis=-1).mean(-1), 1e-12)
    alpha = np.sqrt(kn / qn)[:, None, None]
    x = np.concatenate([q * alpha, k / alpha], axis=1)  # (S, Lq + Lk, d)
    x = x - x.mean(1, keepdims=True)
    xy = x @ top2(x.transpose(0, 2, 1) @ x).numpy()  # (S, Lq + Lk, 2)
    m = np.maximum(np.abs(xy).reshape(len(xy), -1).max(-1), 1e-12)[:, None, None]
    return torch.from_numpy(xy / m).float()

