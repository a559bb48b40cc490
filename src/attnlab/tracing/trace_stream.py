"""Writing one trace file layer by layer while the model runs (format version
:data:`~attnlab.tracing.trace_file.STREAM_FORMAT_VERSION`): what stays in memory is one
layer, whatever the number of layers. The format itself, and reading, are
:mod:`attnlab.tracing.trace_file`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import struct
import weakref
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor

from attnlab._errors import check_int
from attnlab._io import temp_beside
from attnlab.core.scores import ScoreShape
from attnlab.tracing._file_records import (
    SHAPE_TENSORS,
    ManifestEntry,
    OneTraceHeader,
    ShapeEntry,
    ShapeTensor,
    TensorPlace,
    TraceLabels,
)
from attnlab.tracing.trace_file import (
    _DTYPES,
    ONE_STACK,
    STREAM_FORMAT_VERSION,
    _bytes,
    _layer_digest,
    _shape_entry,
    _trace_meta,
)

__all__ = ["TraceStream"]


_LAYER_ORDER = ("weights", "q", "k", "v", "context", "out_proj", "lse")
#: A streamed file's tensor data starts on this boundary (the header is padded to it).
_ALIGN = 64
#: Bytes copied at a time when a header outgrows its room and the data moves.
_COPY_BYTES = 16 << 20


@dataclass
class _Slot:
    """Where one layer tensor lives in a streamed file, and its digests so far."""

    dtype: str
    shape: list[int]  # one layer's
    offset: int  # of layer 0, in the data region
    chunk: int  # bytes of one layer
    digests: list[str] = dataclasses.field(default_factory=list)
    whole: Any = dataclasses.field(default_factory=hashlib.sha256)


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def _remove_temp(handle: list[Any]) -> None:
    """Close and delete a stream's temp file (``handle``: [fd or None, path])."""
    fd, tmp = handle
    handle[0] = None
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
    Path(tmp).unlink(missing_ok=True)


def _temp_beside(path: Path) -> tuple[int, str]:
    """A new temp file beside ``path`` (:func:`attnlab._io.temp_beside`)."""
    return temp_beside(path)


class TraceStream:
    """One trace written to a file layer by layer while the model runs (format version
    :data:`STREAM_FORMAT_VERSION`): what stays in memory is one layer, whatever the number of
    layers.

    ``TraceStream(path, num_layers)``, then :meth:`add` once per layer, in order (that
    layer's tensors by name, each without the layer dimension: ``q (H, Lq, d)``, ``k``,
    ``v``, ``lse (H, Lq)``, ``context``, ``out_proj`` or ``weights``, and its
    :class:`~attnlab.core.scores.ScoreShape`); :meth:`write_header` with the trace's other
    fields (``AttentionTrace._file_fields()``: labels, meta, groups; as often as needed:
    each call rewrites the header in place); :meth:`commit` moves the file to ``path``.
    :meth:`discard` (or the stream's garbage collection before a commit) deletes it.

    The layout is version 4's, one safetensors file whose tensors are stacked (L, ...), so
    that any safetensors reader and :func:`open_one` read it. After the first layer every
    tensor's shape is known (L given): room is reserved for the header, the file is
    preallocated (a full disk fails then, not midway) and each layer's slice of each tensor
    is written at its offset, hashed as it goes: each layer's chunk on its own
    (``layer_sha256``) and, the chunks arriving in order, the whole tensor (``sha256``). A
    later layer of another shape is refused, naming it. The score shapes' tensors (a key
    mask, ALiBi slopes, sinks, a bias; each distinct one stored once) follow the layer
    tensors, appended as they arrive. The header is written at the end, padded with spaces
    to its room (the safetensors format allows it); the room is that of L layers' entries
    like the first one's plus ``reserve`` bytes for the labels and ``meta``, and a header
    that still outgrows it moves the data once behind a longer one. Everything is written
    to a temp file beside ``path`` (``.NAME.attnlab-XXXXXXXX.tmp``, as
    :func:`attnlab._io.atomic_open` names its own), renamed over ``path`` by :meth:`commit`:
    a crash leaves no half file under ``path``.
    """

    def __init__(self, path: str | os.PathLike[str], num_layers: int, *,
                 reserve: int = 0) -> None:
        check_int("num_layers", num_layers, minimum=1)
        check_int("reserve", reserve)
        self.path = Path(path)
        self.num_layers = num_layers
        self.reserve = reserve
        #: Layers written so far.
        self.layers = 0
        fd, tmp = _temp_beside(self.path)
        self._handle: list[Any] = [fd, tmp]
        self._cleanup = weakref.finalize(self, _remove_temp, self._handle)
        self._slots: dict[str, _Slot] | None = None
        self._start = 0  # where the data region starts: 8 + the header's room
        self._main = 0  # bytes of the layer tensors
        self._tail: list[tuple[str, str, list[int], int, int, str]] = []  # score-shape tensors
        self._tail_bytes = 0
        self._seen: dict[tuple[str, tuple[int, ...], str], str] = {}
        self._entries: list[ShapeEntry] = []
        self._headed = False
        self._state = "open"

    @property
    def temp_path(self) -> Path:
        """The temp file the stream writes (a complete trace file after
        :meth:`write_header`), renamed to :attr:`path` by :meth:`commit`."""
        return Path(self._handle[1])

    def _check_open(self) -> None:
        if self._state != "open":
            raise RuntimeError(f"the trace stream to {self.path} is {self._state}")

    def _write(self, data: Any, offset: int) -> None:
        view = memoryview(data).cast("B")
        while view.nbytes:
            n = os.pwrite(self._handle[0], view, offset)
            view, offset = view[n:], offset + n

    # -- layers ---------------------------------------------------------------------------

    def add(self, tensors: Mapping[str, Tensor], shape: ScoreShape) -> None:
        """Write one layer: ``tensors`` (name -> that layer's tensor, the same names,
        shapes and dtypes at every layer) and its score shape."""
        self._check_open()
        layer = self.layers
        if layer >= self.num_layers:
            raise ValueError(f"layer {layer}: the trace stream to {self.path} was laid out for "
                             f"{self.num_layers} layers and got one more")
        if not isinstance(shape, ScoreShape):
            raise TypeError(f"shape must be a ScoreShape, got {type(shape).__name__}")
        parts: dict[str, Tensor] = {}
        for name, t in tensors.items():
            if name not in _LAYER_ORDER:
                raise ValueError(f"tensors: {name!r} is not a trace tensor (one of "
                                 f"{', '.join(_LAYER_ORDER)})")
            if not isinstance(t, Tensor):
                raise TypeError(f"tensors[{name!r}] must be a tensor, got {type(t).__name__}")
            t = t.detach().to("cpu").contiguous()
            if t.dtype not in _DTYPES:
                raise ValueError(f"{name} has dtype {t.dtype}, which a trace file cannot hold")
            parts[name] = t
        if self._slots is None:
            self._plan(parts, shape)
        assert self._slots is not None
        self._check_layer(layer, parts)
        with ThreadPoolExecutor(1, thread_name_prefix="attnlab-sha256") as pool:
            for name, slot in self._slots.items():
                data = _bytes(parts[name])
                self._write(data, self._start + slot.offset + layer * slot.chunk)
                slot.digests.append(_layer_digest(data, slot.whole, pool))
        refs = {f: self._shape_tensor(layer, f, t) for f in SHAPE_TENSORS
                if (t := getattr(shape, f)) is not None}
        self._entries.append(_shape_entry(shape, refs))
        self.layers += 1

    def _plan(self, parts: dict[str, Tensor], shape: ScoreShape) -> None:
        """The layout, from the first layer: every tensor's place, the header's room; the
        file preallocated."""
        if not parts:
            raise ValueError("a trace stream's layer needs at least one tensor")
        slots, offset = {}, 0
        for name in _LAYER_ORDER:
            t = parts.get(name)
            if t is not None:
                chunk = t.numel() * t.element_size()
                slots[name] = _Slot(_DTYPES[t.dtype], list(t.shape), offset, chunk)
                offset += chunk * self.num_layers
        self._slots, self._main = slots, offset
        self._start = self._room(self._room_needed(shape))
        size = self._start + self._main
        try:
            os.posix_fallocate(self._handle[0], 0, size)
        except AttributeError:  # no posix_fallocate on this system (macOS)
            os.ftruncate(self._handle[0], size)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise OSError(errno.ENOSPC, f"no space left for the trace ({size} bytes)",
                              str(self.path)) from None
            os.ftruncate(self._handle[0], size)  # a file system without fallocate

    def _room_needed(self, shape: ScoreShape) -> int:
        """Bytes of a header of L layers whose entries are like the first one's."""
        n = self.num_layers
        refs: dict[ShapeTensor, str] = {f: f"shapes.{n}.{f}" for f in SHAPE_TENSORS}
        entry = _shape_entry(shape, refs)
        digest = "0" * 64
        assert self._slots is not None
        manifest: dict[str, ManifestEntry] = {
            name: {"dtype": s.dtype, "shape": [n, *s.shape], "sha256": digest,
                   "layer_sha256": [digest] * n} for name, s in self._slots.items()}
        meta: OneTraceHeader = {
            "format": ONE_STACK, "format_version": STREAM_FORMAT_VERSION,
            **_trace_meta({"stack": "encoder", "tokens": [], "key_tokens": None,
                           "token_ids": None, "model": "", "causal": False, "text": None,
                           "meta": {}, "groups": None}, [entry] * n, manifest)}
        raw = len(self._header_json(meta))
        per_tensor = 160  # a score-shape tensor's entries, should every layer have its own
        return raw + len(shape.tensors()) * n * per_tensor + self.reserve + 4096

    @staticmethod
    def _room(need: int) -> int:
        """Where the data starts for a header of ``need`` bytes: an eighth more, aligned."""
        return _round_up(8 + need + need // 8, _ALIGN)

    def _check_layer(self, layer: int, parts: dict[str, Tensor]) -> None:
        assert self._slots is not None
        if set(parts) != set(self._slots):
            raise ValueError(
                f"layer {layer} holds {sorted(parts)}, the first layer {sorted(self._slots)}: "
                "a streamed trace needs every layer alike (trace it in memory instead)")
        for name, slot in self._slots.items():
            t = parts[name]
            if _DTYPES[t.dtype] != slot.dtype or list(t.shape) != slot.shape:
                raise ValueError(
                    f"layer {layer}: {name} is {_DTYPES[t.dtype]} {list(t.shape)}, the first "
                    f"layer's was {slot.dtype} {slot.shape}: a streamed trace needs every "
                    "layer alike (trace it in memory instead)")

    def _shape_tensor(self, layer: int, f: str, t: Tensor) -> str:
        """The name of a score shape's tensor in the file: an equal one already written
        (same dtype, shape and bytes), else ``shapes.<layer>.<field>``, appended now."""
        t = t.detach().to("cpu").contiguous()
        if t.dtype not in _DTYPES:
            raise ValueError(f"shapes[{layer}].{f} has dtype {t.dtype}, which a trace file "
                             "cannot hold")
        data = _bytes(t)
        digest = hashlib.sha256(data).hexdigest()
        key = (_DTYPES[t.dtype], tuple(t.shape), digest)
        if key in self._seen:
            return self._seen[key]
        ref = f"shapes.{layer}.{f}"
        n = t.numel() * t.element_size()
        self._write(data, self._start + self._main + self._tail_bytes)
        self._tail.append((ref, key[0], list(t.shape), self._tail_bytes, n, digest))
        self._tail_bytes += n
        self._seen[key] = ref
        return ref

    # -- the header, the end ----------------------------------------------------------------

    def _header_json(self, meta: OneTraceHeader) -> bytes:
        """The safetensors header of the file: ``meta`` as JSON under ``"attnlab"``, and
        each tensor's place in the data."""
        header: dict[str, dict[str, str] | TensorPlace] = {
            "__metadata__": {"attnlab": json.dumps(meta, ensure_ascii=False)}}
        assert self._slots is not None
        for name, s in self._slots.items():
            end = s.offset + s.chunk * self.num_layers
            header[name] = {"dtype": s.dtype, "shape": [self.num_layers, *s.shape],
                            "data_offsets": [s.offset, end]}
        for ref, dtype, shape, start, n, _digest in self._tail:
            header[ref] = {"dtype": dtype, "shape": shape,
                           "data_offsets": [self._main + start, self._main + start + n]}
        return json.dumps(header, ensure_ascii=False).encode("utf-8")

    def write_header(self, fields: TraceLabels) -> None:
        """Write (or rewrite) the header: the trace's fields (``stack``, ``tokens``,
        ``key_tokens``, ``token_ids``, ``model``, ``causal``, ``text``, ``meta``,
        ``groups``, as ``AttentionTrace._file_fields()`` gives them; its tensors and score
        shapes are the stream's own), the score shapes of every layer and the manifest with
        each tensor's sha256 and each layer's. Every layer must have been added."""
        self._check_open()
        if self._slots is None or self.layers != self.num_layers:
            raise ValueError(
                f"the trace stream to {self.path} holds {self.layers} of the "
                f"{self.num_layers} layers it was laid out for; a header needs them all")
        manifest: dict[str, ManifestEntry] = {
            name: {"dtype": s.dtype, "shape": [self.num_layers, *s.shape],
                   "sha256": s.whole.copy().hexdigest(), "layer_sha256": list(s.digests)}
            for name, s in self._slots.items()}
        for ref, dtype, shape, _start, _n, digest in self._tail:
            manifest[ref] = {"dtype": dtype, "shape": shape, "sha256": digest}
        meta: OneTraceHeader = {"format": ONE_STACK, "format_version": STREAM_FORMAT_VERSION,
                                **_trace_meta(fields, self._entries, manifest)}
        raw = self._header_json(meta)
        if 8 + len(raw) > self._start:
            self._move_data(self._room(len(raw)))
        raw += b" " * (self._start - 8 - len(raw))
        self._write(struct.pack("<Q", len(raw)) + raw, 0)
        self._headed = True

    def _move_data(self, start: int) -> None:
        """Copy the data region to a new temp file, ``start`` bytes in (a longer header's
        room), and write on there."""
        fd, tmp = _temp_beside(self.path)
        old_fd, old_start = self._handle[0], self._start
        size = self._main + self._tail_bytes
        try:
            done = 0
            while done < size:
                n = min(_COPY_BYTES, size - done)
                try:
                    got = os.copy_file_range(old_fd, fd, n, old_start + done, start + done)
                except (AttributeError, OSError):
                    got = os.pwrite(fd, os.pread(old_fd, n, old_start + done), start + done)
                if got <= 0:
                    raise OSError(errno.EIO, "the trace's data could not be moved",
                                  str(self.path))
                done += got
        except BaseException:
            _remove_temp([fd, tmp])
            raise
        _remove_temp(self._handle)
        self._handle[:] = [fd, tmp]
        self._start = start

    def commit(self) -> Path:
        """Flush the temp file to disk and rename it to :attr:`path`; returns the path."""
        self._check_open()
        if not self._headed:
            raise RuntimeError("write_header before commit: the file has no header yet")
        fd, tmp = self._handle
        os.fsync(fd)
        os.close(fd)
        self._handle[0] = None
        try:
            os.replace(tmp, self.path)
        except OSError as exc:
            raise type(exc)(exc.errno, exc.strerror or str(exc), str(self.path)) from exc
        self._cleanup.detach()
        self._state = "committed"
        with contextlib.suppress(OSError):  # make the rename durable (not every fs allows it)
            dfd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        return self.path

    def discard(self) -> None:
        """Delete the temp file; nothing is left under :attr:`path`. Idempotent."""
        if self._state == "open":
            self._cleanup()
            self._state = "discarded"


# -- reading ------------------------------------------------------------------------------
