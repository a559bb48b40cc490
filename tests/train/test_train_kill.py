"""A training process killed with SIGKILL leaves a valid checkpoint that resumes exactly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from attnlab.train.checkpoint import build_model, load_checkpoint
from attnlab.train.config import TrainConfig
from attnlab.train.trainer import read_metrics, train
from limits import CHILD_S

ARGS = ["--task", "copy", "--layers", "1", "--heads", "2", "--dim", "16", "--batch-size", "8",
        "--checkpoint-every", "2", "--log-every", "1"]


def _step_on_disk(run_dir) -> int:
    cfg = TrainConfig.for_task("copy", num_layers=1, num_heads=2, embed_dim=16, batch_size=8)
    return load_checkpoint(run_dir, build_model(cfg), config=cfg, restore_rng=False)


def test_sigkill_mid_run_loses_only_the_steps_since_the_checkpoint(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnlab.train", *ARGS, "--out", str(run), "--steps", "100000",
         "--quiet"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + CHILD_S
        while time.monotonic() < deadline:
            rows = read_metrics(run)
            if rows and rows[-1]["step"] >= 5:  # past at least two checkpoints, mid-run
                break
            if proc.poll() is not None:
                raise AssertionError(f"trainer exited early: {proc.stderr.read().decode()}")
            time.sleep(0.05)
        else:
            raise AssertionError(f"the trainer logged no step 5 in {CHILD_S} s")
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=CHILD_S) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    logged = read_metrics(run)[-1]["step"]
    step = _step_on_disk(run)  # loads and verifies the checksum: never corrupt
    assert step >= 4 and logged - step <= 2  # at most checkpoint_every steps lost
    # resume it to step+3, and compare with an uninterrupted run to the same step
    target = step + 3
    cfg = TrainConfig.for_task("copy", num_layers=1, num_heads=2, embed_dim=16, batch_size=8,
                               checkpoint_every=2, log_every=1, steps=target)
    resumed = train(cfg, run, resume=True, quiet=True)
    assert resumed.start_step == step and resumed.step == target
    straight = train(cfg, tmp_path / "straight", quiet=True)
    a, b = build_model(cfg), build_model(cfg)
    load_checkpoint(run, a, config=cfg, restore_rng=False)
    load_checkpoint(tmp_path / "straight", b, config=cfg, restore_rng=False)
    diff = max(float((x - y).abs().max()) for x, y in zip(a.state_dict().values(),
                                                         b.state_dict().values()))
    assert diff <= 1e-6
    assert abs(resumed.eval_loss - straight.eval_loss) <= 1e-6
    steps = [r["step"] for r in read_metrics(run) if not r.get("final")]
    assert steps == sorted(set(steps))  # lines after the checkpoint were dropped, not doubled
