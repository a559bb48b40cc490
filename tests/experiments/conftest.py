"""Experiments run once per session at test sizes (figures included) and shared by tests.

Under pytest-xdist the first worker that needs them runs them and leaves them, pickled, in
the session's shared temporary folder; a worker that needs them later reads that file (the
same code, seed and sizes give the same results), so the suite runs them once, not once per
worker.
"""

from __future__ import annotations

import os
import pickle

import pytest
from experiment_sizes import FAST, Unavailable
from filelock import FileLock

from attnlab.experiments import EXPERIMENTS, run
from attnlab.models import ModelNotAvailableError


def _run_all() -> dict:
    out = {}
    for name in EXPERIMENTS:
        try:
            out[name] = run(name, seed=0, plot=True, **FAST.get(name, {}))
        except ModelNotAvailableError as exc:
            out[name] = Unavailable(str(exc))
    return out


@pytest.fixture(scope="session")
def fast_results(tmp_path_factory):
    """name -> Result for every experiment, at test sizes, with figures (an
    :class:`Unavailable` for one whose model is not installed: use :func:`result_of`)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return _run_all()
    shared = tmp_path_factory.getbasetemp().parent / "fast_results.pickle"
    with FileLock(f"{shared}.lock"):
        if shared.is_file():
            return pickle.loads(shared.read_bytes())
        out = _run_all()
        part = shared.with_suffix(".part")
        part.write_bytes(pickle.dumps(out))
        part.replace(shared)
        return out
