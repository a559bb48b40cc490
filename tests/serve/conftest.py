"""A tiny seeded model behind the server, and the server itself on a free local port."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import torch

import attnlab
from attnlab.trace import AttentionTrace, capture


def make_toy_tracer():
    """text -> trace of a seeded character-level attnlab GPT (2 layers × 2 heads)."""
    torch.manual_seed(0)
    cfg = attnlab.GPTConfig(vocab_size=128, block_size=512, n_layer=2, n_head=2, n_embd=32)
    model = attnlab.GPT(cfg).eval()

    def tracer(text: str) -> AttentionTrace:
        ids = torch.tensor([[ord(c) % 128 for c in text]])
        if ids.shape[1] > cfg.block_size:
            raise ValueError(f"text has {ids.shape[1]} tokens; toy-gpt takes {cfg.block_size}")
        with torch.no_grad(), capture(model) as cap:
            model(ids)
        return cap.trace(tokens=list(text), model="toy-gpt", text=text)

    return tracer


@pytest.fixture(scope="session")
def toy_tracer():
    return make_toy_tracer()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def live_server(toy_tracer):
    """uvicorn serving the app in a thread on 127.0.0.1; yields the base URL."""
    import uvicorn

    from attnlab.serve import create_app

    app = create_app({"toy-gpt": toy_tracer}, max_chars=300)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
