"""A short induction run learns: held-out accuracy on the induction positions rises well
above chance (a model that did not learn stays at chance, as the step-0 check shows)."""

from __future__ import annotations

import pytest

from attnlab.train.config import TrainConfig
from attnlab.train.tasks import get_task
from attnlab.train.trainer import evaluate, train


@pytest.mark.slow
def test_short_induction_run_beats_chance(tmp_path):
    cfg = TrainConfig.for_task("induction", steps=100, log_every=50, checkpoint_every=1000,
                               eval_batches=4)  # the default model, 1/6 of its steps
    chance = get_task("induction").chance
    from attnlab.train.checkpoint import build_model

    _, acc0 = evaluate(build_model(cfg), get_task("induction"), cfg)
    assert acc0 < 3 * chance  # untrained: at chance
    r = train(cfg, tmp_path, quiet=True)
    assert r.eval_accuracy > 10 * chance, r.eval_accuracy
