"""Helpers of the training tests: tiny configs."""

from __future__ import annotations

from attnlab.train.config import TrainConfig


def tiny_config(task: str = "copy", **kw) -> TrainConfig:
    base = dict(num_layers=1, num_heads=2, embed_dim=16, batch_size=8, steps=6, warmup_steps=2,
                checkpoint_every=3, log_every=2, eval_batches=2)
    base.update(kw)
    return TrainConfig.for_task(task, **base)
