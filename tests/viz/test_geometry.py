"""The geometry view's projection (viz.geometry): the eigen-solver against LAPACK, and the
picture's invariances (a key shift shared by all keys)."""

from __future__ import annotations

import numpy as np
import torch

from attnlab.viz import explorer
from attnlab.viz.geometry import joint_projection, top2


def test_top2_finds_the_two_leading_eigenvectors():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 30, 5, generator=g, dtype=torch.float64) * torch.tensor(
        [8.0, 3.0, 0.5, 0.2, 0.1], dtype=torch.float64)
    c = (x.mT @ x).numpy()
    v = top2(c).numpy()
    ref = np.linalg.eigh(c)[1][..., ::-1][..., :2]  # largest first
    assert np.allclose(np.abs((v * ref).sum(1)), 1.0, atol=1e-6)  # same axes, up to sign


def test_joint_projection_ignores_a_shared_key_shift():
    """Softmax over keys ignores a shift shared by all keys: so does the picture."""
    g = torch.Generator().manual_seed(1)
    spread = torch.tensor([8.0, 3.0, 0.3, 0.2, 0.1, 0.1])  # two clear principal axes
    q = torch.randn(3, 40, 6, generator=g) * spread
    k = torch.randn(3, 50, 6, generator=g) * spread
    xy = joint_projection(q, k)
    assert xy.shape == (3, 90, 2) and float(xy.abs().max()) <= 1.0 + 1e-6
    shifted = joint_projection(q, k + torch.randn(3, 1, 6, generator=g) * 5)
    assert torch.allclose(xy.abs(), shifted.abs(), atol=1e-4)  # up to a sign per axis


def test_the_old_names_still_import_from_the_explorer():
    assert explorer._top2 is top2 and explorer._geometry is joint_projection
