"""Trace files read at any size: the header read (not mapped) and checked as safetensors
checks it, and the data mapped without charging its size to the memory the kernel commits —
a sparse file larger than this machine's memory opens, where a copy-on-write mapping (what
``safetensors.safe_open`` makes) is refused; ``load`` of such a file says to open it."""

from __future__ import annotations

import json
import mmap
import struct

import pytest
import torch
from safetensors.torch import save_file

from attnlab.tracing import _safetensors
from attnlab.tracing._safetensors import map_tensors, read_header
from attnlab.tracing.attention import AttentionTrace, TraceFormatError
from attnlab.tracing.budget import machine_memory


def _file(path, header: dict, data: bytes = b""):
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def test_a_file_safetensors_writes_reads_the_same(tmp_path):
    x = {"a": torch.arange(12, dtype=torch.float32).view(3, 4),
         "b": torch.tensor([True, False]), "c": torch.zeros(0, 5, dtype=torch.int64)}
    save_file(x, tmp_path / "t.safetensors", metadata={"k": "v"})
    header, start = read_header(tmp_path / "t.safetensors")
    assert header["__metadata__"] == {"k": "v"} and start > 8
    got, mm = map_tensors(tmp_path / "t.safetensors")
    for name, t in x.items():
        assert got[name].dtype == t.dtype and torch.equal(got[name], t)


@pytest.mark.parametrize("header, data, message", [
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4,
     "the tensors end at byte"),
    ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8,
     "8 bytes for a shape [3] of F32 (12 bytes)"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8,
     "starts at 4, not where the one before it ends (0)"),
    ({"a": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}, b"\0", "no dtype"),
    ({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4,
     "bad shape or data_offsets"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}, b"\0" * 4,
     "bad shape or data_offsets"),
    ({"__metadata__": {"attnlab": 5}}, b"", "__metadata__ must map names to strings"),
    ([1, 2], b"", "a JSON list, not an object"),
])
def test_a_header_that_lies_is_refused_saying_what(tmp_path, header, data, message):
    path = _file(tmp_path / "bad.safetensors", header, data)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")
                       .replace(")", r"\)").replace("]", r"\]")):
        read_header(path)
    with pytest.raises(TraceFormatError, match="is not a safetensors file"):
        AttentionTrace.open(path)


def test_bytes_that_are_no_header_are_refused(tmp_path):
    for raw, message in [(b"abc", "shorter than the 8"), (struct.pack("<Q", 10**12), "a header of"),
                         (struct.pack("<Q", 4) + b"\xff\xfe{}", "not JSON")]:
        (tmp_path / "x").write_bytes(raw)
        with pytest.raises(ValueError, match=message):
            read_header(tmp_path / "x")


def test_a_file_larger_than_memory_maps_and_load_refuses_it(tmp_path):
    """A sparse file of 1.5x this machine's memory (its tensor's pages never written, so
    it costs no disk): mapped copy-on-write it is refused where the kernel counts commits,
    mapped as attnlab maps it, it opens; a page of it reads as zeros."""
    n = int(machine_memory() * 1.5) // 4 // 4096 * 4096
    header = {"q": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}}
    path = _file(tmp_path / "huge.safetensors", header)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size + 4 * n)
    got, mm = map_tensors(path)
    assert got["q"].shape == (n,) and float(got["q"][n // 2]) == 0.0
    del got
    with open("/proc/sys/vm/overcommit_memory", encoding="ascii") as f:
        if f.read().strip() == "0":  # the heuristic refuses a private writable map past RAM
            with open(path, "rb") as fh, pytest.raises(OSError):
                mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)


def test_load_refuses_a_trace_larger_than_memory_and_open_reads_it(tmp_path, monkeypatch):
    from attnlab.tracing import budget

    t = AttentionTrace(["a", "b"], weights=torch.full((1, 1, 2, 2), 0.5))
    path = t.save(tmp_path / "t.safetensors")
    size = path.stat().st_size
    monkeypatch.setattr(budget, "machine_memory", lambda: size - 1)
    with pytest.raises(ValueError, match=r"more than this machine's memory \(.*\) to load "
                       r"whole; AttentionTrace\.open\(path\) reads it memory-mapped"):
        AttentionTrace.load(path)
    monkeypatch.setattr(budget, "machine_memory", lambda: size)  # just fits: loads
    assert torch.equal(AttentionTrace.load(path).weights, t.weights)


def test_without_noreserve_the_map_is_read_only(tmp_path, monkeypatch):
    path = _file(tmp_path / "t.safetensors",
                 {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8)
    real = mmap.mmap

    def refuse_writable(fd, length, *, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ, **kw):
        if prot & mmap.PROT_WRITE:
            raise OSError(12, "Cannot allocate memory")
        return real(fd, length, flags=flags, prot=prot, **kw)

    monkeypatch.setattr(_safetensors.mmap, "mmap", refuse_writable)
    got, mm = map_tensors(path)
    assert got["a"].tolist() == [0.0, 0.0]
    with pytest.raises(TypeError):
        mm[0] = 1  # read-only
