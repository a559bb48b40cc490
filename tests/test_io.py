"""Atomic writes: a failed write leaves the old file whole and no temp file behind."""

from __future__ import annotations

import pytest

from attnlab._io import atomic_open, atomic_write_bytes, atomic_write_text


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
