"""The explorer's wire codec: JSON that is safe inside an HTML script element, and tensors
as little-endian bytes (optionally gzipped) in base64, the blobs the page decodes."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any, TypedDict

import numpy as np
import torch
from torch import Tensor

__all__ = ["Blob", "json_for_html", "encode_blob", "decode_blob", "nbytes",
           "QUANTIZATION_ERROR"]


class Blob(TypedDict):
    """A tensor as the page receives it (:func:`encode_blob`)."""

    dtype: str  # the stored element: "u8", "u16", "b8", "f16", "f32" or "f64"
    gz: bool  # the bytes are gzipped
    shape: list[int]
    b64: str  # the little-endian bytes (gzipped or not), in base64


def json_for_html(obj: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``.

    >>> json_for_html({"t": "</script><b>&"})
    '{"t": "\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e\\\\u0026"}'
    """
    s = json.dumps(obj, ensure_ascii=False, allow_nan=False)
    return (s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


_KINDS = {"u8": "u1", "u16": "<u2", "f16": "<f2", "f32": "<f4", "f64": "<f8", "b8": "u1"}


def encode_blob(t: Tensor, dtype: str, *, gz: bool = False) -> Blob:
    """A tensor as little-endian bytes, optionally gzipped, in base64 (what the page reads).

    ``u8``/``u16`` store values in [0, 1] as fractions of 255/65535; ``b8`` stores bools;
    ``f16``/``f32``/``f64`` store floats.

    >>> b = encode_blob(torch.tensor([0.0, 0.5, 1.0]), "u16")
    >>> b["shape"], decode_blob(b).tolist()
    ([3], [0.0, 0.5000076295109483, 1.0])
    """
    if dtype not in _KINDS:
        raise ValueError(f"dtype must be one of {sorted(_KINDS)}, got {dtype!r}")
    t = t.detach().to("cpu").contiguous()
    if dtype == "u16":
        raw = (t.float().clamp(0, 1) * 65535).round().to(torch.int32).numpy().astype("<u2")
    elif dtype == "u8":
        raw = (t.float().clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    elif dtype == "b8":
        raw = t.to(torch.bool).to(torch.uint8).numpy()
    elif dtype == "f16":
        raw = t.to(torch.float16).numpy().astype("<f2")
    elif dtype == "f32":
        raw = t.to(torch.float32).numpy().astype("<f4")
    else:
        raw = t.to(torch.float64).numpy().astype("<f8")
    data = raw.tobytes()
    if gz:
        data = gzip.compress(data, compresslevel=6, mtime=0)
    return {"dtype": dtype, "gz": gz, "shape": list(t.shape),
            "b64": base64.b64encode(data).decode("ascii")}


def decode_blob(blob: Blob) -> Tensor:
    """Inverse of :func:`encode_blob` (tests and tools): float64 values as the page sees them."""
    data = base64.b64decode(blob["b64"])
    if blob["gz"]:
        data = gzip.decompress(data)
    arr = np.frombuffer(data, dtype=_KINDS[blob["dtype"]]).astype("float64")
    if blob["dtype"] in ("u8", "u16"):
        arr = arr / (255.0 if blob["dtype"] == "u8" else 65535.0)
    return torch.from_numpy(arr.copy()).reshape(blob["shape"])


#: Largest |error| of each map encoding (half a quantization step).
QUANTIZATION_ERROR = {"u16": 0.5 / 65535, "u8": 0.5 / 255}


def nbytes(text: str) -> int:
    """The size of ``text`` on the page: its UTF-8 bytes.

    >>> nbytes("é")
    2
    """
    return len(text.encode("utf-8"))
