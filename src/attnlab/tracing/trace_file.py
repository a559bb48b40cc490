"""The trace file format: writing, reading, validating and upgrading attnlab's trace files.

A trace file is a safetensors file (no pickle) whose header holds attnlab's JSON metadata
under the key ``"attnlab"``, with a ``format`` and a ``format_version``
(:data:`FORMAT_VERSION`):

* ``"attnlab.AttentionTrace"``: one :class:`~attnlab.tracing.attention.AttentionTrace`.
  Its metadata holds the labels (``tokens``, ``key_tokens``, ``token_ids``, ``text``),
  ``model``, ``causal``, ``meta``, ``groups``, ``stack``, one entry per layer under
  ``shapes`` (the :class:`~attnlab.core.scores.ScoreShape`: numbers inline, its tensors by
  name, a tensor equal to an earlier layer's stored once) and under ``tensors`` each
  tensor's dtype, shape and sha256.
* ``"attnlab.StackedTrace"`` (version 4 on): a
  :class:`~attnlab.tracing.stacks.StackedTrace`: ``model``, ``text``, ``target``, ``meta``
  and under ``stacks.<stack>`` one trace's metadata as above, its tensors under a
  ``<stack>/`` prefix.

The versions: 1 held dense weights (q, k, v repeated per head); 2 held q, k, v and each
row's log-sum-exp, the score shape per layer and each tensor's sha256; 3 added sink logits
and windows without ``causal``; 4 added the ``stack`` of a trace and files of several
stacks; 5 (:data:`STREAM_FORMAT_VERSION`, one-trace files written layer by layer by
:class:`~attnlab.tracing.trace_stream.TraceStream`) keeps version 4's layout and adds, for
each tensor stacked by layer, ``layer_sha256``: the sha256 of each layer's chunk, so that
a reader can check a layer when it first reads it (:class:`LayerDigests`, which
:func:`open_one` attaches). :func:`save_one` and :func:`save_stacked` write version 4.
Every version this attnlab reads loads as today's trace: versions 2 and 3 as stack
``"self"``, version 1 as a dense trace.

Reading goes in stages: the header alone (``_read_header``: the metadata and each
tensor's dtype and shape), its checks (``_check_one`` / ``_check_stacked``, before any
tensor is read), the tensors (``_read_tensors``), then ``_finish``: each tensor's sha256,
the version's reader in ``_READERS`` (metadata and tensors -> the trace's constructor
arguments) and the checks of the values. A new version is one reader there, its field
checks in :mod:`attnlab.tracing.trace_header` (``_check_fields``, where the format's
versions are), and the newest version read (``_NEWEST``) raised; one whose
tensors are read lazily replaces the ``_read_tensors`` stage for its files. A bad file
raises :class:`TraceFormatError` naming the file, the stack and the field or tensor at
fault. Writing goes through :func:`attnlab._io.atomic_open`, tensor by tensor (no second
copy), or through a :class:`~attnlab.tracing.trace_stream.TraceStream`'s temp file, renamed
into place when complete.

>>> import tempfile, torch
>>> from attnlab.tracing.attention import AttentionTrace
>>> t = AttentionTrace(["a", "b"], weights=torch.full((1, 1, 2, 2), 0.5))
>>> with tempfile.TemporaryDirectory() as d:
...     path = t.save(Path(d) / "t.safetensors")
...     kind, back = file_format(path), load_one(path, AttentionTrace)
>>> kind, back.tokens, back.weights.sum().item()
('attnlab.AttentionTrace', ['a', 'b'], 2.0)
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnlab._io import atomic_open
from attnlab._text import one_line
from attnlab.core._layout import aligned
from attnlab.core.scores import ScoreShape
from attnlab.tracing._file_records import (
    SHAPE_TENSORS,
    ManifestEntry,
    OneTraceHeader,
    ShapeEntry,
    ShapeTensor,
    StackedHeader,
    TensorPlace,
    TraceArgs,
    TraceFields,
    TraceLabels,
    TraceMetadata,
)
from attnlab.tracing._names import TRACE_TENSORS
from attnlab.tracing._resident import RESIDENT_BYTES, Resident
from attnlab.tracing._safetensors import map_tensors, read_header
from attnlab.tracing.trace_header import (
    FORMAT_VERSION,
    ONE_STACK,
    SEVERAL_STACKS,
    STREAM_FORMAT_VERSION,
    TraceFormatError,
    _bad,
    _check_one,
    _check_stacked,
    _in_stack,
    _parse_json,
    _unprefixed,
)
from attnlab.tracing.trace_values import check_values

__all__ = ["FORMAT_VERSION", "ONE_STACK", "SEVERAL_STACKS", "STREAM_FORMAT_VERSION",
           "LayerDigests", "TraceFormatError", "file_format", "load_one",
           "load_stacked", "open_one", "open_stacked", "save_one", "save_stacked",
           "verify_one"]

_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
           torch.float64: "F64", torch.bool: "BOOL", torch.int64: "I64", torch.int32: "I32",
           torch.uint8: "U8"}

#: What a reader of a file is given to build a trace: the constructor's keyword arguments.
Build = Callable[..., Any]


# -- writing ------------------------------------------------------------------------------


def save_one(path: str | os.PathLike[str], fields: TraceFields) -> Path:
    """Write one trace (``fields``: its constructor's arguments, as
    ``AttentionTrace._file_fields()`` gives them) to ``path``, atomically."""
    meta, tensors = _file_part(fields)
    header: OneTraceHeader = {"format": ONE_STACK, "format_version": FORMAT_VERSION, **meta}
    return _write_file(Path(path), header, tensors)


def save_stacked(path: str | os.PathLike[str], stacks: Mapping[str, TraceFields], *,
                 model: str, text: str | None, target: str | None, meta: dict[str, Any]
                 ) -> Path:
    """Write several stacks (name -> one trace's fields, as for :func:`save_one`) to one
    file at ``path``, atomically: each stack's tensors under a ``<stack>/`` prefix
    (``meta``: the stacked trace's own, any JSON-ready values)."""
    head: StackedHeader = {"format": SEVERAL_STACKS, "format_version": FORMAT_VERSION,
                           "model": model, "text": text, "target": target, "meta": meta,
                           "stacks": {}}
    tensors = {}
    for name, fields in stacks.items():
        part, own = _file_part(fields)
        head["stacks"][name] = part
        tensors.update({f"{name}/{n}": x for n, x in own.items()})
    return _write_file(Path(path), head, tensors)


def _file_part(fields: TraceFields) -> tuple[TraceMetadata, dict[str, Tensor]]:
    """One trace's metadata (all but ``format`` and ``format_version``) and tensors, as a
    file holds them (a file of several stacks holds one such part per stack)."""
    tensors: dict[str, Tensor] = {}
    stored = (fields["weights"], fields["q"], fields["k"], fields["v"], fields["lse"],
              fields["context"], fields["out_proj"])
    for name, t in zip(TRACE_TENSORS, stored):
        if t is not None:
            tensors[name] = t.detach().to("cpu").contiguous()
    shapes = _shape_entries(fields["shapes"], tensors)
    for name, t in tensors.items():
        if t.dtype not in _DTYPES:
            raise ValueError(f"{name} has dtype {t.dtype}, which a trace file cannot hold")
    manifest: dict[str, ManifestEntry] = {
        n: {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "sha256": _sha256(t)}
        for n, t in tensors.items()}
    return _trace_meta(fields, shapes, manifest), tensors


def _trace_meta(fields: TraceLabels, shapes: list[ShapeEntry],
                manifest: dict[str, ManifestEntry]) -> TraceMetadata:
    """One trace's metadata as a file holds it: the labels and descriptions of ``fields``,
    the score shapes' entries and the tensors' manifest."""
    return {
        "stack": fields["stack"], "tokens": fields["tokens"],
        "key_tokens": fields["key_tokens"], "token_ids": fields["token_ids"],
        "model": fields["model"], "causal": fields["causal"], "text": fields["text"],
        "meta": fields["meta"], "groups": fields["groups"], "shapes": shapes,
        "tensors": manifest,
    }


def _shape_entry(shape: ScoreShape, refs: Mapping[ShapeTensor, str]) -> ShapeEntry:
    """One layer's score shape as a file holds it: its numbers (as
    :meth:`~attnlab.core.scores.ScoreShape.describe` gives them), then the names in the file
    of its tensors (``refs``, in :data:`~attnlab.tracing._file_records.SHAPE_TENSORS`
    order), then None for each tensor field it does not have."""
    entry: ShapeEntry = {"scale": shape.scale, "causal": shape.causal,
                         "window": shape.window, "softcap": shape.softcap}
    for field in SHAPE_TENSORS:
        if field in refs:
            entry[field] = refs[field]
    for field in SHAPE_TENSORS:
        entry.setdefault(field, None)
    return entry


def _shape_entries(shapes: Sequence[ScoreShape], tensors: dict[str, Tensor]
                   ) -> list[ShapeEntry]:
    """One JSON entry per layer's score shape; its tensors added to ``tensors`` under
    ``shapes.<layer>.<field>``, a tensor equal to an earlier layer's stored once."""
    entries: list[ShapeEntry] = []
    for i, s in enumerate(shapes):
        refs: dict[ShapeTensor, str] = {}
        for field in SHAPE_TENSORS:
            t = getattr(s, field)
            if t is None:
                continue
            ref = None
            for j in range(i):  # the same tensor as an earlier layer's: stored once
                prev = getattr(shapes[j], field)
                if prev is not None and prev.shape == t.shape and torch.equal(prev, t):
                    ref = entries[j][field]
                    break
            if ref is None:
                ref = f"shapes.{i}.{field}"
                tensors[ref] = t.detach().to("cpu").contiguous()
            refs[field] = ref
        entries.append(_shape_entry(s, refs))
    return entries


def _write_file(path: Path, meta: OneTraceHeader | StackedHeader, tensors: dict[str, Tensor]
                ) -> Path:
    """A safetensors file at ``path`` (atomically): ``meta`` as JSON under the header key
    ``"attnlab"``, then the tensors' bytes in order, each written straight from its tensor."""
    header: dict[str, dict[str, str] | TensorPlace] = {
        "__metadata__": {"attnlab": json.dumps(meta, ensure_ascii=False)}}
    offset = 0
    for name, t in tensors.items():
        n = t.numel() * t.element_size()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, ensure_ascii=False).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # data starts 8-byte aligned, as safetensors writes it
    with atomic_open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for t in tensors.values():
            if t.numel():
                f.write(t.reshape(-1).view(torch.uint8).numpy().data)
    return path


def _bytes(t: Tensor) -> Any:
    """The bytes of a contiguous CPU tensor, as they stand in a file (no copy)."""
    return t.reshape(-1).view(torch.uint8).numpy().data if t.numel() else b""


def _sha256(t: Tensor) -> str:
    """The sha256 of a contiguous CPU tensor's bytes, as they stand in the file."""
    return _hexdigest(_bytes(t))


def _hexdigest(data: Any) -> str:
    return hashlib.sha256(data).hexdigest()


def _layer_digest(data: Any, whole: Any, pool: ThreadPoolExecutor) -> str:
    """The sha256 of one layer's chunk ``data``, made on ``pool``'s thread while this one
    adds the chunk to ``whole`` (the tensor's running sha256): hashlib lets go of the GIL,
    so the two passes over the bytes run at once (version 5 states both digests)."""
    own = pool.submit(_hexdigest, data)
    whole.update(data)
    return own.result()


# -- writing layer by layer (format version 5) -------------------------------------------

#: The order of a streamed file's layer tensors: ``lse`` (H·N floats a layer) last, so that
#: the others start on 64-byte boundaries whenever their sizes are multiples of 64.
def file_format(path: str | os.PathLike[str]) -> str:
    """The ``format`` a trace file states (:data:`ONE_STACK`, :data:`SEVERAL_STACKS` or
    whatever else it holds), read from its header alone. Raises ``FileNotFoundError`` or
    :class:`TraceFormatError` (not safetensors, no or corrupt attnlab metadata)."""
    meta, _info = _read_header(Path(path))
    return str(meta.get("format"))


def load_one(path: str | os.PathLike[str], build: Build) -> Any:
    """The trace of a one-trace file (format version 1 to :data:`STREAM_FORMAT_VERSION`), made by
    ``build(**constructor arguments)`` after every check (see
    :meth:`attnlab.tracing.attention.AttentionTrace.load`). A file of several stacks is
    refused, saying how to read it."""
    from attnlab.tracing.budget import format_bytes, machine_memory

    path = Path(path)
    header = _check_one(path, *_read_header(path))
    size, memory = path.stat().st_size, machine_memory()
    if size > memory:
        raise ValueError(f"{path}: {format_bytes(size)}, more than this machine's memory "
                         f"({format_bytes(memory)}) to load whole; AttentionTrace.open(path) "
                         "reads it memory-mapped, a part at a time")
    return _finish(path, header, _read_tensors(path), header["format_version"], build)


def open_one(path: str | os.PathLike[str], build: Build, *,
             resident_bytes: int = RESIDENT_BYTES) -> Any:
    """The trace of a one-trace file (version 2 on) with its tensors memory-mapped, not
    read: the header and the manifest are checked now, each byte is read from disk when a
    computation first touches it, and :func:`verify_one` checks the sha256 of every tensor
    and its values (see :meth:`attnlab.tracing.attention.AttentionTrace.open`). A version-5
    file's trace gets a :class:`LayerDigests` (``trace._layer_digests``), which checks each
    layer's chunk of a tensor the first time the trace reads it; every trace gets a
    :class:`~attnlab.tracing._resident.Resident` (``trace._resident``), which keeps at most
    ``resident_bytes`` of the layer chunks it read in the process's resident set."""
    path = Path(path)
    header = _check_one(path, *_read_header(path))
    version = header["format_version"]
    if version < 2:
        raise TraceFormatError(f"{path} is a version-1 trace (dense weights); read it with "
                               "AttentionTrace.load")
    tensors, resident = _map_tensors(path, resident_bytes)
    try:
        trace = build(**_READERS[version](header, tensors))
    except (KeyError, ValueError, TypeError) as exc:
        raise TraceFormatError(f"{path}: inconsistent trace ({exc})") from None
    chunks = {n: e["layer_sha256"] for n, e in header["tensors"].items()
              if "layer_sha256" in e}
    # the file's own mapping: verify() reads through it, not a second
    trace._opened(path, tensors, resident,
                  digests=LayerDigests(path, chunks, tensors) if chunks else None)
    return trace


class LayerDigests:
    """The sha256 of each layer's chunk of each tensor of an opened version-5 trace file:
    :meth:`check` hashes a layer's chunk the first time it is asked for it (then remembers
    it was), so a corrupt layer is found when first read, at the cost of hashing what is
    read once. ``tensors``: the file's memory-mapped tensors (the bytes checked are the
    file's, whatever the trace's attributes hold)."""

    def __init__(self, path: Path, digests: dict[str, list[str]],
                 tensors: Mapping[str, Tensor]) -> None:
        self.path = path
        self.digests = digests
        self._tensors = {n: tensors[n] for n in digests}
        self._checked: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    def check(self, name: str, layer: int) -> None:
        """Raise :class:`TraceFormatError` naming the tensor and the layer when that layer's
        bytes of tensor ``name`` do not match the sha256 the file states for them (checked
        once; a tensor without layer digests passes)."""
        key = (name, layer)
        if key in self._checked or name not in self.digests:
            return
        with self._lock:
            if key in self._checked:
                return
            if _sha256(self._tensors[name][layer]) != self.digests[name][layer]:
                raise _corrupt_layer(self.path, name, layer)
            self._checked.add(key)

    def mark_all(self) -> None:
        """Count every chunk as checked (after :func:`verify_one` checked them all)."""
        self.mark((n, layer) for n, d in self.digests.items() for layer in range(len(d)))

    def mark(self, chunks: Iterable[tuple[str, int]]) -> None:
        """Count the ``(tensor, layer)`` chunks as checked (:func:`verify_one` checked them,
        or, with ``share``, the process that did)."""
        with self._lock:
            self._checked.update(chunks)

    def checked(self) -> set[tuple[str, int]]:
        """The (tensor, layer) chunks checked so far."""
        return set(self._checked)


def verify_one(path: str | Path, trace: Any, share: tuple[int, int] = (0, 1)) -> None:
    """Every check :func:`load_one` makes, on an opened trace: each tensor's sha256 against
    the file's metadata and the values (finite q, k, v; a sane log-sum-exp), reading the file
    once, a tensor at a time. Raises :class:`TraceFormatError` naming the tensor. A stack
    opened from a file of several stacks (:func:`open_stacked`) is checked against its own
    stack's metadata and tensors, and errors name the stack.

    ``share=(rank, world)``: this process's part of a check that ``world`` processes make
    together (:func:`attnlab.tracing.verify_across`): of a tensor with a sha256 per layer
    (version 5), the layers ``rank, rank + world, ...`` (their digests and values; the layers'
    digests together cover every byte of the tensor, so its whole digest is left out); of a
    tensor without, the whole tensor on one process (the ``i``-th tensor on process
    ``i % world``). Every byte is checked by exactly one process of the ``world``."""
    rank, world = _check_share(share)
    path = Path(path)
    meta, _info = _read_header(path)
    stack = trace._opened_stack
    where: Path | str = path
    if stack is not None:
        where = _in_stack(path, stack)
        sub = meta.get("stacks", {}).get(stack) if isinstance(meta.get("stacks"), dict) else None
        if not isinstance(sub, dict) or not isinstance(sub.get("tensors"), dict):
            raise TraceFormatError(f"{where}: the file no longer holds this stack")
        meta = sub
    # the trace's own mapping where it was opened from this file: a second mapping would
    # count every page of the file twice in the resident set
    mapped = trace._mapped
    same = mapped is not None and trace.opened_from is not None and Path(
        trace.opened_from) == path
    if same and mapped is not None and trace._resident is not None:
        tensors, resident = mapped, trace._resident
    else:
        tensors, resident = _map_tensors(path)
        if stack is not None:
            tensors = _unprefixed(tensors, stack)
    mine: list[tuple[str, int]] = []  # the layer chunks this process checked
    order = {name: i for i, name in enumerate(sorted(tensors))}  # the same on every process
    for name, t in tensors.items():
        entry = meta["tensors"].get(name)
        if entry is None:
            raise TraceFormatError(f"{where}: tensor {name!r} is not in the metadata")
        if world == 1:
            _check_digests(where, name, t, entry, resident.touch)
        elif entry.get("layer_sha256") is not None:
            layers = range(rank, t.shape[0], world)
            _check_some_layers(where, name, t, entry, layers, resident.touch)
            mine += [(name, layer) for layer in layers]
        elif order[name] % world == rank:
            _check_digests(where, name, t, entry, resident.touch)
    check_values(where, tensors, trace.shapes, TraceFormatError, resident.touch,
                 share=(rank, world))
    resident.release()  # what was read is not held for what comes next
    digests = trace._layer_digests
    if same and digests is not None:
        # the chunks just checked: a first read need not hash them again
        if world == 1:
            digests.mark_all()
        else:
            digests.mark(mine)


def _corrupt_layer(where: Path | str, name: str, layer: int) -> TraceFormatError:
    return TraceFormatError(f"{where}: tensor {name!r} layer {layer} does not match the "
                            "sha256 the metadata states for that layer (the file is corrupt)")


def _check_share(share: Any) -> tuple[int, int]:
    """``share`` as ``(rank, world)``: two ints, ``0 <= rank < world``."""
    ok = (isinstance(share, tuple) and len(share) == 2
          and all(isinstance(x, int) and not isinstance(x, bool) for x in share)
          and 0 <= share[0] < share[1])
    if not ok:
        raise ValueError(f"share: expected (rank, world) with 0 <= rank < world, got {share!r}")
    return share[0], share[1]


def _check_some_layers(where: Path | str, name: str, t: Tensor, entry: ManifestEntry,
                       layers: range,
                       seen: Callable[[tuple[str, int], Tensor], None] | None = None) -> None:
    """The ``layers`` of ``t`` against the sha256 of each that its manifest ``entry``
    states (a version-5 tensor), the tensor's whole digest left out."""
    chunks = entry.get("layer_sha256")
    assert chunks is not None
    for layer in layers:
        got = _sha256(t[layer])
        if seen is not None:
            seen((name, layer), t[layer])
        if got != chunks[layer]:
            raise _corrupt_layer(where, name, layer)


def _check_digests(where: Path | str, name: str, t: Tensor, entry: ManifestEntry,
                   seen: Callable[[tuple[str, int], Tensor], None] | None = None) -> None:
    """``t``'s bytes against the sha256 its manifest ``entry`` states and, where it states
    them (version 5), each layer's chunk against its own, in one pass over the bytes;
    ``seen((name, layer), chunk)`` after each layer's chunk is read (a version-5 tensor)."""
    digest = entry.get("sha256")
    if not isinstance(digest, str):
        raise _bad(where, f"tensors.{name}.sha256", "the sha256 of the tensor", digest)
    chunks = entry.get("layer_sha256")
    if chunks is None:
        got = _sha256(t)
    else:
        whole = hashlib.sha256()
        with ThreadPoolExecutor(1, thread_name_prefix="attnlab-sha256") as pool:
            for layer in range(t.shape[0]):
                own = _layer_digest(_bytes(t[layer]), whole, pool)
                if seen is not None:
                    seen((name, layer), t[layer])
                if own != chunks[layer]:
                    raise _corrupt_layer(where, name, layer)
        got = whole.hexdigest()
    if got != digest:
        raise TraceFormatError(f"{where}: tensor {name!r} does not match the sha256 the "
                               "metadata states (the file is corrupt)")


def _map_tensors(path: Path, resident_bytes: int = RESIDENT_BYTES
                 ) -> tuple[dict[str, Tensor], Resident]:
    """Every tensor of a safetensors file as a view of the file mapped copy-on-write, at any
    size (:func:`attnlab.tracing._safetensors.map_tensors`), and the :class:`Resident` that
    bounds what the process holds of the mapping."""
    tensors, mm = map_tensors(path)
    return tensors, Resident(mm, resident_bytes)


def load_stacked(path: str | os.PathLike[str], build: Build, build_stacked: Build) -> Any:
    """The stacks of a file of several stacks, each trace made by ``build`` as in
    :func:`load_one` and checked as it is (errors name the stack), then
    ``build_stacked(traces, model=, text=, target=, meta=)``. A one-trace file is refused,
    saying how to read it."""
    path = Path(path)
    header, parts = _check_stacked(path, *_read_header(path))
    tensors = _read_tensors(path)
    traces = {name: _finish(where, sub, _unprefixed(tensors, name),
                            header["format_version"], build)
              for name, (where, sub) in parts.items()}
    try:
        return build_stacked(traces, model=header["model"], text=header.get("text"),
                             target=header.get("target"), meta=header.get("meta") or {})
    except (ValueError, TypeError) as exc:
        raise TraceFormatError(f"{path}: inconsistent stacks ({exc})") from None


def open_stacked(path: str | os.PathLike[str], build: Build, build_stacked: Build, *,
                 resident_bytes: int = RESIDENT_BYTES) -> Any:
    """The stacks of a file of several stacks with their tensors memory-mapped, not read,
    as :func:`open_one` does for one trace: the header and each stack's manifest are
    checked now; each stack's trace is made by ``build`` from its own views of the one
    mapping, knows the file and its stack (``opened_from``, ``_opened_stack``) so that
    :func:`verify_one` checks it, and shares one :class:`~attnlab.tracing._resident.Resident`
    (at most ``resident_bytes`` of the file held, whichever stack read it). A one-trace file
    is refused, saying how to read it."""
    path = Path(path)
    header, parts = _check_stacked(path, *_read_header(path))
    tensors, resident = _map_tensors(path, resident_bytes)
    traces = {}
    for name, (where, sub) in parts.items():
        own = _unprefixed(tensors, name)
        try:
            trace = build(**_READERS[header["format_version"]](sub, own))
        except (KeyError, ValueError, TypeError) as exc:
            raise TraceFormatError(f"{where}: inconsistent trace ({exc})") from None
        trace._opened(path, own, resident, stack=name)
        traces[name] = trace
    try:
        return build_stacked(traces, model=header["model"], text=header.get("text"),
                             target=header.get("target"), meta=header.get("meta") or {})
    except (ValueError, TypeError) as exc:
        raise TraceFormatError(f"{path}: inconsistent stacks ({exc})") from None


def _read_header(path: Path) -> tuple[dict[str, Any], dict[str, tuple[str, list[int]]]]:
    """(the attnlab metadata, name -> (dtype, shape) of each tensor) of the file at
    ``path``, no tensor read: the metadata as a JSON object whose fields are not checked
    yet (``_check_one`` and ``_check_stacked`` check them). Bytes that are not safetensors,
    or a header without attnlab's JSON metadata, raise :class:`TraceFormatError`; a missing
    file ``FileNotFoundError``."""
    if not path.is_file():
        raise FileNotFoundError(f"no trace file at {path}")
    try:  # read, not mapped: safe_open's mapping is refused for a file larger than memory
        raw, _start = read_header(path)
    except (ValueError, OSError) as exc:
        raise TraceFormatError(f"{path} is not a safetensors file ({one_line(exc)})") from None
    info = {n: (e["dtype"], list(e["shape"])) for n, e in raw.items() if n != "__metadata__"}
    return _parse_json(path, raw.get("__metadata__", {}).get("attnlab")), info


def _read_tensors(path: Path) -> dict[str, Tensor]:
    """Every tensor of the file at ``path`` (its header already checked), read whole."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return {n: f.get_tensor(n) for n in f.keys()}
    except Exception as exc:  # safetensors raises several types for bad bytes
        raise TraceFormatError(f"{path} is not a safetensors file ({one_line(exc)})") from None


def _finish(where: Path | str, meta: TraceMetadata, tensors: dict[str, Tensor],
            version: int, build: Build) -> Any:
    """The trace of checked metadata and its tensors: sha256 verified (version 2 on),
    upgraded to the constructor's arguments, built, values checked. ``where`` names the
    file (and stack) in errors."""
    if version >= 2:
        manifest = meta["tensors"]
        for name, t in tensors.items():
            _check_digests(where, name, t, manifest[name])
    # each tensor on a 64-byte boundary, as a freshly computed one (the bytes as hashed): the
    # weights on demand are then the same bits whether the trace was computed or read
    tensors = {name: aligned(t) for name, t in tensors.items()}
    try:
        trace = build(**_READERS[version](meta, tensors))
    except (KeyError, ValueError, TypeError) as exc:
        raise TraceFormatError(f"{where}: inconsistent trace ({exc})") from None
    check_values(where, tensors, trace.shapes, TraceFormatError)
    return trace


# -- upgrading: each version's metadata and tensors -> the constructor's arguments ---------


def _from_v1(meta: TraceMetadata, tensors: dict[str, Tensor]) -> TraceArgs:
    """A version-1 file: dense weights (already merged), q/k/v/context repeated per head, one
    scale for every layer (no score shapes, lse, out_proj, groups or stack: the
    constructor's defaults)."""
    return TraceArgs(
        tokens=meta["tokens"], weights=tensors["weights"], q=tensors.get("q"),
        k=tensors.get("k"), v=tensors.get("v"), lse=None, context=tensors.get("context"),
        out_proj=None, shapes=None, scale=meta.get("scale"),
        causal=bool(meta.get("causal", False)), model=meta.get("model", ""),
        token_ids=meta.get("token_ids"), key_tokens=meta.get("key_tokens"),
        text=meta.get("text"), meta=meta.get("meta") or {}, groups=None, stack="self",
    )


def _from_v2(meta: TraceMetadata, tensors: dict[str, Tensor]) -> TraceArgs:
    """A file of version 2 to 5: the stored tensors and one score shape per layer (versions
    2 and 3 have no ``stack``: ``"self"``; version 5's layer digests are checked apart)."""
    shapes = []
    for i, s in enumerate(meta["shapes"]):
        try:
            shapes.append(ScoreShape(
                scale=s["scale"], causal=s["causal"], window=s.get("window"),
                softcap=s.get("softcap"),
                **{f: tensors[ref] for f in SHAPE_TENSORS if (ref := s.get(f)) is not None}))
        except (KeyError, ValueError, TypeError) as exc:
            raise ValueError(f"shapes[{i}]: {exc}") from None
    return TraceArgs(
        tokens=meta["tokens"], weights=tensors.get("weights"), q=tensors.get("q"),
        k=tensors.get("k"), v=tensors.get("v"), lse=tensors.get("lse"),
        context=tensors.get("context"), out_proj=tensors.get("out_proj"),
        shapes=shapes or None, causal=None if shapes else bool(meta.get("causal", False)),
        model=meta.get("model", ""), token_ids=meta.get("token_ids"),
        key_tokens=meta.get("key_tokens"), text=meta.get("text"), meta=meta.get("meta") or {},
        groups=meta.get("groups"), stack=meta.get("stack", "self"),
    )


#: format_version -> the reader of its metadata and tensors.
_READERS: dict[int, Callable[[TraceMetadata, dict[str, Tensor]], TraceArgs]] = {
    1: _from_v1, 2: _from_v2, 3: _from_v2, 4: _from_v2, 5: _from_v2}
