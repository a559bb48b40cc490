"""Experiments run once per session at test sizes (figures included) and shared by tests.

Each experiment runs when a test first asks for it. Under pytest-xdist the worker that runs
it leaves its result, pickled, in the session's shared temporary folder, and a worker that
needs it later reads that file (the same code, seed and sizes give the same results): the
suite runs each experiment once, not once per worker. A worker that needs every result
first runs those no other worker is running, then reads the others as they are written, so
two workers that need them at once share the work instead of one waiting for the other.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from experiment_sizes import FAST, Unavailable
from filelock import FileLock, Timeout

from attnlab.experiments import EXPERIMENTS, run
from attnlab.models import ModelNotAvailableError


def _run_one(name: str):
    try:
        return run(name, seed=0, plot=True, **FAST.get(name, {}))
    except ModelNotAvailableError as exc:
        return Unavailable(str(exc))


class SessionResults(Mapping):
    """name -> Result of every experiment at test sizes, each run on first use (an
    :class:`Unavailable` for one whose model is not installed: use :func:`result_of`).
    ``shared``: the folder the workers of a pytest-xdist session share (None: one process)."""

    def __init__(self, shared: Path | None) -> None:
        self._shared = shared
        self._got: dict = {}

    def __iter__(self) -> Iterator[str]:
        return iter(EXPERIMENTS)

    def __len__(self) -> int:
        return len(EXPERIMENTS)

    def __getitem__(self, name: str):
        if name not in EXPERIMENTS:
            raise KeyError(name)
        if name not in self._got:
            self._fetch(name, wait=True)
        return self._got[name]

    def _fetch(self, name: str, wait: bool) -> bool:
        """Read ``name``'s result, or run it; without ``wait``, give up (False) when another
        worker is running it."""
        if self._shared is None:
            self._got[name] = _run_one(name)
            return True
        path = self._shared / f"{name}.pickle"
        lock = FileLock(f"{path}.lock")
        try:
            lock.acquire(timeout=-1 if wait else 0)
        except Timeout:
            return False
        try:
            if path.is_file():
                self._got[name] = pickle.loads(path.read_bytes())
            else:
                self._got[name] = result = _run_one(name)
                part = path.with_suffix(".part")
                part.write_bytes(pickle.dumps(result))
                part.replace(path)
        finally:
            lock.release()
        return True

    def _fetch_all(self) -> None:
        left = [n for n in EXPERIMENTS if n not in self._got]
        left = [n for n in left if not self._fetch(n, wait=False)]  # those no one is running
        for name in left:
            self._fetch(name, wait=True)

    def values(self):
        self._fetch_all()
        return super().values()

    def items(self):
        self._fetch_all()
        return super().items()


@pytest.fixture(scope="session")
def fast_results(tmp_path_factory) -> SessionResults:
    """name -> Result for every experiment, at test sizes, with figures
    (:class:`SessionResults`: each run on first use, once per session)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return SessionResults(None)
    shared = tmp_path_factory.getbasetemp().parent / "fast_results"
    shared.mkdir(exist_ok=True)
    return SessionResults(shared)
