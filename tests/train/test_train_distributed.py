"""Real ``torchrun --nproc_per_node=2`` (gloo on CPU) against one process, same global batch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from attnlab.train.checkpoint import build_model, load_checkpoint, read_config
from attnlab.train.trainer import read_metrics
from limits import SLOW_CHILD_S

ARGS = ["--task", "induction", "--layers", "2", "--heads", "2", "--dim", "16",
        "--batch-size", "8", "--steps", "6", "--log-every", "2", "--checkpoint-every", "3",
        "--quiet"]


@pytest.mark.slow
def test_two_processes_follow_the_single_process_run(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one, two = tmp_path / "one", tmp_path / "two"
    single = subprocess.run([sys.executable, "-m", "attnlab.train", *ARGS, "--out", str(one)],
                            env=env, capture_output=True, text=True, timeout=SLOW_CHILD_S)
    assert single.returncode == 0, single.stderr
    dist = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "-m", "attnlab.train", *ARGS, "--out", str(two)],
        env=env, capture_output=True, text=True, timeout=SLOW_CHILD_S)
    assert dist.returncode == 0, dist.stderr[-3000:]
    a, b = read_metrics(one), read_metrics(two)
    assert b[-1]["world_size"] == 2 and a[-1]["world_size"] == 1
    # only rank 0 wrote: each step appears once
    assert [r["step"] for r in b] == [r["step"] for r in a] == [2, 4, 6, 6]
    for ra, rb in zip(a, b):
        assert abs(ra["loss"] - rb["loss"]) <= 1e-4, (ra, rb)
    assert abs(a[-1]["eval_loss"] - b[-1]["eval_loss"]) <= 1e-4
    cfg = read_config(two)
    ma, mb = build_model(cfg), build_model(cfg)
    load_checkpoint(one, ma, config=cfg, restore_rng=False)
    load_checkpoint(two, mb, config=cfg, restore_rng=False)
    diff = max(float((x - y).abs().max()) for x, y in zip(ma.state_dict().values(),
                                                         mb.state_dict().values()))
    assert diff <= 1e-4
    assert not list(two.glob(".*.tmp"))
