"""The test server's pieces: a tiny seeded model behind it, and uvicorn on a free port."""

from __future__ import annotations

import torch

from attnlab.nn.transformer import GPT, GPTConfig
from attnlab.tracing import AttentionTrace, capture
from attnlab.tracing.budget import estimate_trace_bytes
from servers import free_port, serve_in_thread  # noqa: F401 (re-exported to the serve tests)


class ToyTracer:
    """text -> trace of a seeded character-level attnlab GPT (2 layers × 2 heads), one token
    per character, with what the server checks first (tokens, limit, memory estimate)."""

    max_length = 512

    def __init__(self) -> None:
        torch.manual_seed(0)
        cfg = GPTConfig(vocab_size=128, block_size=self.max_length, num_layers=2, num_heads=2,
                        embed_dim=32)
        self.model = GPT(cfg).eval()
        self.calls = 0

    def count_tokens(self, text: str) -> int:
        return len(text)

    def estimate(self, num_tokens: int) -> int:
        return estimate_trace_bytes(self.model, num_tokens).total

    def __call__(self, text: str) -> AttentionTrace:
        self.calls += 1
        ids = torch.tensor([[ord(c) % 128 for c in text]])
        if ids.shape[1] > self.max_length:
            raise ValueError(f"text has {ids.shape[1]} tokens; toy-gpt takes {self.max_length}")
        with torch.no_grad(), capture(self.model) as cap:
            self.model(ids)
        return cap.trace(tokens=list(text), model="toy-gpt", text=text)


def make_toy_tracer() -> ToyTracer:
    return ToyTracer()
