"""The core tests run torch on two threads even in a one-thread pytest-xdist worker
(tests/conftest.py): the compiled kernel splits a call's rows between its threads, and that
split is what these tests must cover."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _two_threads(two_threads):
    yield
