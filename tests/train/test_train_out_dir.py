"""`train --out`: attnlab writes only its own files, and deletes only its own temp files."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from attnlab.cli import main
from unprivileged import run_unprivileged

BASE = ["--task", "copy", "--layers", "1", "--heads", "2", "--dim", "16", "--batch-size", "8",
        "--log-every", "1", "--quiet"]
TINY = [*BASE, "--steps", "2"]
RUN_FILES = {"config.json", "checkpoint.safetensors", "metrics.jsonl", "training.png"}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def _user_folder(tmp_path: Path, **files: str) -> Path:
    out = tmp_path / "mine"
    out.mkdir()
    for name, text in files.items():
        (out / name.replace("__", ".")).write_text(text)
    return out


def test_a_folder_of_user_files_is_refused_and_left_untouched(tmp_path, capsys):
    out = _user_folder(tmp_path, notes__txt="my notes", __secret__tmp="hidden work",
                       __config__json__k3x_9a0q__tmp="looks like a temp file")
    before = _snapshot(out)
    assert main(["train", *TINY, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--out {out}: is not empty" in err and "--force" in err and err.count("\n") == 1
    assert _snapshot(out) == before


@pytest.mark.parametrize("name", sorted(RUN_FILES))
def test_a_user_file_named_like_a_run_file_is_never_overwritten(tmp_path, capsys, name):
    out = _user_folder(tmp_path, notes__txt="x")
    (out / name).write_text("the user's own file")
    before = _snapshot(out)
    for force in ([], ["--force"]):
        assert main(["train", *TINY, "--out", str(out), *force]) == 2
        err = capsys.readouterr().err
        assert f"holds {name} not written by attnlab train" in err and err.count("\n") == 1
        assert _snapshot(out) == before


def test_force_writes_beside_user_files_and_deletes_none(tmp_path, capsys):
    out = _user_folder(tmp_path, notes__txt="my notes", __secret__tmp="hidden work",
                       __config__json__k3x_9a0q__tmp="not attnlab's temp name")
    before = _snapshot(out)
    assert main(["train", *TINY, "--out", str(out), "--force"]) == 0
    after = _snapshot(out)
    assert {k: after[k] for k in before} == before  # every user file intact
    assert set(after) - set(before) == RUN_FILES


def test_the_stale_temp_cleaner_removes_only_attnlabs_own_temps(tmp_path):
    out = tmp_path / "run"
    assert main(["train", *TINY, "--out", str(out)]) == 0
    ours = [out / ".checkpoint.safetensors.attnlab-k3x_9a0q.tmp",
            out / ".metrics.jsonl.attnlab-00000000.tmp"]
    theirs = [out / ".checkpoint.safetensors.k3x_9a0q.tmp",  # the old, too loose pattern
              out / ".notes.tmp", out / ".report.html.attnlab-k3x_9a0q.tmp",
              out / ".config.json.attnlab-too-long-to-be-ours.tmp", out / "keep.tmp"]
    for p in ours + theirs:
        p.write_text("x")
    assert main(["train", *BASE, "--steps", "3", "--out", str(out), "--resume"]) == 0
    assert not any(p.exists() for p in ours)
    assert all(p.read_text() == "x" for p in theirs)


def test_an_existing_run_may_be_written_again_only_with_resume(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *TINY, "--out", str(out)]) == 0
    (out / "my-notes.txt").write_text("kept")
    assert main(["train", *TINY, "--out", str(out)]) == 2
    assert "pass --resume" in capsys.readouterr().err
    assert main(["train", *TINY, "--out", str(out), "--resume"]) == 0
    assert (out / "my-notes.txt").read_text() == "kept"


def test_an_unwritable_out_is_one_line_naming_out_not_a_temp_file(tmp_path):
    base = Path(tempfile.mkdtemp(prefix="attnlab-ro-"))
    try:
        target = base / "run"
        argv = ["train", *TINY, "--out", str(target)]
        assert main([*argv[:-1], str(tmp_path / "warm")]) == 0  # every module imported
        rc, err = run_unprivileged(lambda: main(argv), base)
        assert rc == 2, err
        assert err == f"attnlab train: error: --out {target}: folder {base} is not writable\n"
        assert not target.exists()
    finally:
        shutil.rmtree(base)
