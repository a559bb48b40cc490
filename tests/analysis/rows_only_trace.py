"""A stand-in for the trace's on-demand API over dense weights, which also records how it
was read: the largest tile of rows asked for, and whether the dense map was touched."""

from __future__ import annotations

import torch


class RowsOnlyTrace:
    """Dense weights (L, H, Lq, Lk) behind ``weights_rows`` only; ``weights`` raises."""

    def __init__(self, weights: torch.Tensor, token_ids=None, model: str = "toy") -> None:
        self._w = weights
        self.num_layers, self.num_heads, self.seq_len, self.key_len = weights.shape
        self.tokens = [f"t{i}" for i in range(self.seq_len)]
        self.token_ids = token_ids
        self.model = model
        self.meta: dict = {}
        self.max_rows = 0
        self.calls = 0

    @property
    def weights(self):
        raise AssertionError("the dense weights were used")

    def weights_rows(self, layer, head, queries):
        rows = list(queries)
        self.max_rows = max(self.max_rows, len(rows))
        self.calls += 1
        return self._w[layer, head, rows]
