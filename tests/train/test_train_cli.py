"""`attnlab train`: bad arguments fail clearly before any work; a good run writes its files."""

from __future__ import annotations

import json

import pytest

from attnlab.cli import main

TINY = ["--layers", "1", "--heads", "2", "--dim", "16", "--batch-size", "8"]


@pytest.mark.parametrize("argv, message", [
    (["--task", "nope"], "unknown task 'nope'"),
    (["--task", "copy", "--steps", "0"], "--steps (steps) must be a positive int, got 0"),
    (["--task", "copy", "--heads", "3", "--dim", "16"],
     "--dim (embed_dim=16) must be divisible by --heads (num_heads=3)"),
    (["--task", "copy", "--lr", "-1"], "--lr (lr) must be a positive finite number"),
    (["--task", "copy", "--resume"], "--resume: no checkpoint"),
])
def test_bad_arguments_fail_before_any_work(tmp_path, capsys, argv, message):
    out = tmp_path / "run"
    assert main(["train", *argv, "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()  # nothing was created


def test_out_under_a_file_or_at_a_file_is_one_line_naming_out(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert main(["train", "--task", "copy", "--out", str(blocker / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"--out {blocker / 'run'}: {blocker} is a file, not a folder" in err
    assert err.count("\n") == 1
    assert main(["train", "--task", "copy", "--out", str(blocker), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "is a file, not a directory" in err and err.count("\n") == 1
    assert blocker.read_text() == "not a directory"


def test_train_writes_the_run_directory_and_json(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "--task", "reverse", "--out", str(out), "--steps", "4", "--log-every",
            "2", *TINY, "--json"]
    assert main(argv) == 0
    cap = capsys.readouterr()
    summary = json.loads(cap.out)  # stdout is the JSON alone
    assert summary["step"] == 4 and 0 <= summary["eval_accuracy"] <= 1
    names = {p.name for p in out.iterdir()}
    assert names == {"config.json", "checkpoint.safetensors", "metrics.jsonl", "training.png"}
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [2, 4, 4]
    assert {"step", "loss", "accuracy"} <= set(lines[0]) and "eval_accuracy" in lines[-1]
    # a second run into the same folder is refused, not silently overwritten
    assert main(argv) == 2
    assert "pass --resume" in capsys.readouterr().err
