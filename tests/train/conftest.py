"""Tiny configs that train in a fraction of a second per step."""

from __future__ import annotations

import pytest

from attnlab.train.config import TrainConfig


def tiny_config(task: str = "copy", **kw) -> TrainConfig:
    base = dict(n_layer=1, n_head=2, n_embd=16, batch_size=8, steps=6, warmup_steps=2,
                checkpoint_every=3, log_every=2, eval_batches=2)
    base.update(kw)
    return TrainConfig.for_task(task, **base)


@pytest.fixture
def tiny():
    """``tiny(task="copy", **overrides)``: a TrainConfig for a model that trains instantly."""
    return tiny_config
