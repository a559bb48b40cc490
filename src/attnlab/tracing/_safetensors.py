"""A safetensors file's header read, and its tensors mapped, at any size.

``safetensors.safe_open`` maps the whole file copy-on-write and writable, and the kernel
charges such a mapping against the memory it can commit: a file larger than the machine's
memory is refused (``Cannot allocate memory``) before a byte is read. Here the header is
read with two ``read`` calls and checked as safetensors checks it (every tensor's offsets
inside the data, one after the other, of the size its dtype and shape make), and the data
is mapped private with ``MAP_NORESERVE``: copy-on-write as before (nothing is ever written
back to the file), but not charged, so that a 30 GB trace maps on a 24 GB machine. Where
the kernel refuses that too (strict overcommit), the mapping is read-only.

>>> import tempfile, torch
>>> from safetensors.torch import save_file
>>> with tempfile.TemporaryDirectory() as d:
...     save_file({"q": torch.arange(6.0).view(2, 3)}, f"{d}/t.safetensors",
...               metadata={"attnlab": "{}"})
...     header, start = read_header(f"{d}/t.safetensors")
...     tensors, mm = map_tensors(f"{d}/t.safetensors")
>>> header["q"]["dtype"], header["q"]["shape"], header["__metadata__"]
('F32', [2, 3], {'attnlab': '{}'})
>>> tensors["q"][1].tolist()
[3.0, 4.0, 5.0]
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

__all__ = ["DTYPES", "map_file", "map_tensors", "read_header"]

#: safetensors' dtype names -> torch dtypes (those attnlab reads).
DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
          "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32, "I16": torch.int16,
          "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}
#: The largest header safetensors reads (its own limit).
MAX_HEADER = 100_000_000
_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)


def read_header(path: str | os.PathLike[str]) -> tuple[dict[str, Any], int]:
    """(the header's JSON object, the offset where the data begins) of the safetensors file
    at ``path``. Raises ValueError saying what is wrong with the bytes."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"{size} bytes, shorter than the 8 that give the header's size")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER or 8 + n > size:
            raise ValueError(f"a header of {n} bytes in a file of {size}")
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"the header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ValueError(f"the header is a JSON {type(header).__name__}, not an object")
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ValueError("__metadata__ must map names to strings")
    spans = []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(e, dict) or e.get("dtype") not in DTYPES:
            raise ValueError(f"tensor {name!r}: no dtype attnlab reads ({e!r:.80})")
        shape, offsets = e.get("shape"), e.get("data_offsets")
        if (not isinstance(shape, list) or not all(_count(x) for x in shape)
                or not isinstance(offsets, list) or len(offsets) != 2
                or not all(_count(x) for x in offsets) or offsets[0] > offsets[1]):
            raise ValueError(f"tensor {name!r}: bad shape or data_offsets ({e!r:.80})")
        want = math.prod(shape) * torch.empty(0, dtype=DTYPES[e["dtype"]]).element_size()
        if offsets[1] - offsets[0] != want:
            raise ValueError(f"tensor {name!r}: {offsets[1] - offsets[0]} bytes for a shape "
                             f"{shape} of {e['dtype']} ({want} bytes)")
        spans.append((offsets[0], offsets[1], name))
    end = 0
    for start, stop, name in sorted(spans):
        if start != end:
            raise ValueError(f"tensor {name!r} starts at {start}, not where the one before "
                             f"it ends ({end})")
        end = stop
    if 8 + n + end != size:
        raise ValueError(f"the tensors end at byte {8 + n + end} of a file of {size}")
    return header, 8 + n


def _count(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def map_file(path: str | os.PathLike[str]) -> mmap.mmap:
    """The file mapped private (copy-on-write, never written back) without charging its
    size to the memory the kernel commits; read-only where the kernel refuses that."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise ValueError("an empty file")
        try:
            return mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE | _NORESERVE,
                             prot=mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError:
            return mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)


def map_tensors(path: str | os.PathLike[str]) -> tuple[dict[str, Tensor], mmap.mmap]:
    """Every tensor of the safetensors file at ``path`` as a view of :func:`map_file`'s
    mapping (no byte read until used), and the mapping."""
    header, base = read_header(path)
    mm = map_file(Path(path))
    out = {}
    with warnings.catch_warnings():  # a read-only mapping: its tensors are never written
        warnings.filterwarnings("ignore", message="The given buffer is not writable")
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            dtype = DTYPES[entry["dtype"]]
            start, end = entry["data_offsets"]
            count = (end - start) // torch.empty(0, dtype=dtype).element_size()
            flat = (torch.frombuffer(mm, dtype=dtype, count=count, offset=base + start)
                    if count else torch.empty(0, dtype=dtype))
            out[name] = flat.view(entry["shape"])
    return out, mm
