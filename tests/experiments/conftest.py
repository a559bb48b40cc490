"""Experiments run once per session at test sizes (figures included) and shared by tests."""

from __future__ import annotations

import pytest
from experiment_sizes import FAST, Unavailable

from attnlab.experiments import EXPERIMENTS, run
from attnlab.models import ModelNotAvailableError


@pytest.fixture(scope="session")
def fast_results():
    """name -> Result for every experiment, at test sizes, with figures (an
    :class:`Unavailable` for one whose model is not installed: use :func:`result_of`)."""
    out = {}
    for name in EXPERIMENTS:
        try:
            out[name] = run(name, seed=0, plot=True, **FAST.get(name, {}))
        except ModelNotAvailableError as exc:
            out[name] = Unavailable(str(exc))
    return out
