"""A tiny seeded model behind the server, and the server itself on a free local port."""

from __future__ import annotations

import pytest
from serve_helpers import ToyTracer, serve_in_thread


@pytest.fixture(scope="session")
def toy_tracer():
    return ToyTracer()


@pytest.fixture(scope="module")
def live_server(toy_tracer):
    """uvicorn serving the app in a thread on 127.0.0.1; yields the base URL."""
    from attnlab.serve import create_app

    with serve_in_thread(create_app({"toy-gpt": toy_tracer}, max_chars=300)) as url:
        yield url
