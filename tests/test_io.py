"""Atomic writes: a failed write leaves the old file whole and no temp file behind; temp
files are recognisably attnlab's; errors name the target."""

from __future__ import annotations

import os

import pytest

from attnlab._io import (
    atomic_open,
    atomic_write_bytes,
    atomic_write_text,
    check_output_dir,
    check_output_file,
    is_temp_of,
    remove_stale_temps,
)


def test_failure_mid_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "f.bin"
    atomic_write_bytes(target, b"old")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_open(target, "wb") as f:
            f.write(b"half of the new")
            raise RuntimeError("boom")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_text_and_folders(tmp_path):
    p = atomic_write_text(tmp_path / "a" / "b.txt", "注意力")
    assert p.read_text(encoding="utf-8") == "注意力"
    with pytest.raises(ValueError, match="mode must be"):
        with atomic_open(tmp_path / "x", "a"):
            pass


def test_temp_files_carry_attnlabs_mark_and_only_those_are_removed(tmp_path):
    target = tmp_path / "f.bin"
    with pytest.raises(RuntimeError):
        with atomic_open(target, "wb") as f:
            f.write(b"x")
            seen = [p.name for p in tmp_path.iterdir()]
            raise RuntimeError("killed")
    assert len(seen) == 1 and is_temp_of(seen[0], "f.bin")
    stale = tmp_path / seen[0]
    stale.write_bytes(b"left by a killed writer")
    theirs = [".f.bin.tmp", ".f.bin.k3x_9a0q.tmp", ".g.bin.attnlab-k3x_9a0q.tmp",
              ".f.bin.attnlab-k3x_9a0.tmp", "f.bin.attnlab-k3x_9a0q.tmp", ".notes.tmp"]
    for name in theirs:
        (tmp_path / name).write_text("user data")
    assert remove_stale_temps(tmp_path, ["f.bin"]) == [stale]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(theirs)


@pytest.mark.parametrize("make, cause", [
    ("dir", "is a directory; give a file name inside it"),
    ("under-file", "is a file, not a folder"),
])
def test_output_paths_are_checked_naming_the_argument(tmp_path, make, cause):
    blocker = tmp_path / "blocker"
    if make == "dir":
        blocker.mkdir()
        path = blocker
    else:
        blocker.write_text("mine")
        path = blocker / "deeper" / "out.bin"
    with pytest.raises(ValueError, match=f"^--out {path}: .*{cause}"):
        check_output_file(path, arg="--out")
    assert check_output_file(tmp_path / "new" / "x.bin", arg="--out") == tmp_path / "new/x.bin"
    (tmp_path / "f").write_text("")
    with pytest.raises(ValueError, match="is a file, not a directory"):
        check_output_dir(tmp_path / "f", arg="--out")
    assert check_output_dir(tmp_path / "a" / "b", arg="--out") == tmp_path / "a" / "b"


def test_write_errors_name_the_target_not_the_temp_file(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    with pytest.raises(IsADirectoryError) as info:
        atomic_write_bytes(folder, b"x")
    assert info.value.filename == str(folder)
    blocker = tmp_path / "file"
    blocker.write_text("mine")
    with pytest.raises(OSError) as info:
        atomic_write_text(blocker / "x.txt", "y")
    assert info.value.filename == str(blocker / "x.txt") and ".tmp" not in str(info.value)
    assert blocker.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == [
        "d", "file"]


def test_a_memory_folder_is_chosen_only_with_room_and_without_tmpdir(tmp_path, monkeypatch):
    """memory_temp_parent: a writable candidate with twice the size free, else the next,
    else None; never when $TMPDIR is set (the user chose where temporary files go)."""
    from attnlab._io import memory_temp_parent

    monkeypatch.delenv("TMPDIR", raising=False)
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    room, missing = str(tmp_path), str(tmp_path / "missing")
    # wide margins: other processes write to the same disk meanwhile
    assert memory_temp_parent(free // 4, candidates=[missing, room]) == room
    assert memory_temp_parent(free, candidates=[room]) is None  # not twice as much free
    assert memory_temp_parent(1, candidates=[missing]) is None
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    assert memory_temp_parent(1, candidates=[str(a_file), room]) == room
    monkeypatch.setenv("TMPDIR", room)
    assert memory_temp_parent(1, candidates=[room]) is None
