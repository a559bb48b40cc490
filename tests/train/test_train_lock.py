"""One training writes a run folder at a time: a second one on the same ``--out`` is refused
naming ``--out`` and the first's pid, or waits for it with ``--wait``; the lock file is
never a foreign entry and a finished run's folder holds only its own files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from attnlab.cli import main
from attnlab.train.trainer import read_metrics
from limits import CHILD_S, SLOW_CHILD_S

TINY = ["--task", "copy", "--layers", "1", "--heads", "2", "--dim", "16", "--batch-size", "8",
        "--log-every", "1", "--checkpoint-every", "100000"]
RUN_FILES = {"config.json", "checkpoint.safetensors", "metrics.jsonl", "training.png"}
LOCK = ".attnlab-lock-train"


def _training(out: Path, steps: int) -> subprocess.Popen:
    """A real training process on ``out``, returned once it has trained a step."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnlab.train", *TINY, "--out", str(out), "--steps",
         str(steps), "--quiet"], env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + CHILD_S
    while not read_metrics(out) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    assert read_metrics(out), "the first training never trained a step"
    return proc


def test_a_second_training_on_a_busy_folder_is_refused_naming_out_and_the_pid(tmp_path,
                                                                              capsys):
    out = tmp_path / "run"
    first = _training(out, 100000)
    try:
        assert (out / LOCK).is_file()  # held by the first
        rc = main(["train", *TINY, "--out", str(out), "--steps", "3", "--resume", "--quiet"])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1, err
        assert err.startswith(f"attnlab train: error: --out {out}: another attnlab process "
                              f"(pid {first.pid}) is writing this folder"), err
        assert "--wait" in err
        assert first.poll() is None  # the first goes on, untouched
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=CHILD_S)
    # a killed holder leaves its lock file: the next run takes the lock over, does not
    # count the file as foreign, and removes it when it is done
    assert (out / LOCK).is_file()
    assert main(["train", *TINY, "--out", str(out), "--steps", "3", "--resume", "--quiet"]) == 0
    assert {p.name for p in out.iterdir()} == RUN_FILES


def test_wait_trains_once_the_first_training_is_done(tmp_path, capsys):
    out = tmp_path / "run"
    first = _training(out, 200)
    try:
        assert first.poll() is None
        rc = main(["train", *TINY, "--out", str(out), "--steps", "205", "--resume", "--wait",
                   "--json"])
        assert first.wait(timeout=SLOW_CHILD_S) == 0, first.stderr.read().decode()[-2000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=CHILD_S)
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    # it resumed from the first's final checkpoint: it began after the first had ended
    assert (summary["start_step"], summary["step"]) == (200, 205)
    assert {p.name for p in out.iterdir()} == RUN_FILES


def test_a_left_lock_file_is_not_a_foreign_entry(tmp_path, capsys):
    out = tmp_path / "fresh"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from attnlab._io import lock_folder\n"
        "with lock_folder(sys.argv[1], name='train'):\n"
        "    print('held', flush=True); time.sleep(600)"), str(out)], stdout=subprocess.PIPE)
    assert holder.stdout.readline().strip() == b"held"
    assert main(["train", *TINY, "--out", str(out), "--steps", "2", "--quiet"]) == 2
    assert f"pid {holder.pid}" in capsys.readouterr().err
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=CHILD_S)
    assert [p.name for p in out.iterdir()] == [LOCK]  # the folder holds only the lock file
    assert main(["train", *TINY, "--out", str(out), "--steps", "2", "--quiet"]) == 0
    assert {p.name for p in out.iterdir()} == RUN_FILES
