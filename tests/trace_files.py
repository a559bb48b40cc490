"""Trace files damaged on purpose, for the tests of the checks that must catch them."""

from __future__ import annotations

import json
import struct
from pathlib import Path


def flip_layer_bit(path: Path, out: Path, name: str, layer: int, at: int = 5) -> Path:
    """A copy of ``path`` (a safetensors trace file) at ``out`` with one bit flipped inside
    ``layer``'s chunk of tensor ``name``, ``at`` bytes into it."""
    raw = bytearray(path.read_bytes())
    n = struct.unpack("<Q", raw[:8])[0]
    entry = json.loads(raw[8:8 + n])[name]
    start, end = entry["data_offsets"]
    chunk = (end - start) // entry["shape"][0]
    raw[8 + n + start + layer * chunk + at] ^= 0x08
    out.write_bytes(bytes(raw))
    return out
