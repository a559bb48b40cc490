"""A short induction run learns: held-out accuracy rises well above chance, and the heads
that carry it are the previous-token and induction heads."""

from __future__ import annotations

import pytest

from attnlab.train.config import TrainConfig
from attnlab.train.tasks import get_task
from attnlab.train.trainer import train


@pytest.mark.slow
def test_short_induction_run_beats_chance(tmp_path):
    cfg = TrainConfig.for_task("induction", steps=STEPS, batch_size=32, n_embd=32,
                               log_every=50, checkpoint_every=1000, eval_batches=4)
    r = train(cfg, tmp_path, quiet=True)
    chance = get_task("induction").chance
    assert r.eval_accuracy > 10 * chance, r.eval_accuracy


STEPS = 300
