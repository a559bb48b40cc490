"""Experiments run once per session at test sizes (figures included) and shared by tests."""

from __future__ import annotations

import pytest

from attnlab.experiments import EXPERIMENTS, run

#: Smaller sizes than ``attnlab verify`` uses, still large enough for every claim to hold.
FAST: dict[str, dict] = {
    "qk-variance": dict(pairs=2**19),
    "softmax-saturation": dict(rows=128),
    "linear-attention": dict(lengths=(512, 1024, 2048), repeats=1, n_exact=100),
}


@pytest.fixture(scope="session")
def fast_results():
    """name -> Result for every experiment, at test sizes, with figures."""
    return {name: run(name, seed=0, plot=True, **FAST.get(name, {})) for name in EXPERIMENTS}
