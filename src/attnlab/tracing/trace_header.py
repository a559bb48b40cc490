"""The header of a trace file: its format and versions, and every check made of it before a
tensor is read (:mod:`attnlab.tracing.trace_file` writes and reads the files).

A check that fails raises :class:`TraceFormatError` naming the file, the stack and the
field or tensor at fault. A new format version is its field checks in ``_check_fields``
and the newest version read (``_NEWEST``) raised.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeGuard, TypeVar, cast

from attnlab._errors import Error
from attnlab.core.scores import TENSOR_FIELDS
from attnlab.tracing._file_records import (
    ManifestEntry,
    OneTraceHeader,
    StackedHeader,
    TraceMetadata,
)
from attnlab.tracing._names import STACK_ORDER, STACKS, TRACE_TENSORS

__all__ = ["FORMAT_VERSION", "ONE_STACK", "SEVERAL_STACKS", "STREAM_FORMAT_VERSION",
           "TraceFormatError"]

#: Version of the file layout :func:`save_one` and :func:`save_stacked` write.
FORMAT_VERSION = 4
#: Version of the one-trace files a :class:`~attnlab.tracing.trace_stream.TraceStream`
#: writes (version 4's layout, plus each layer's sha256 per tensor).
STREAM_FORMAT_VERSION = 5
#: The ``format`` of a file of one trace, and of a file of several stacks.
ONE_STACK = "attnlab.AttentionTrace"
SEVERAL_STACKS = "attnlab.StackedTrace"
#: The oldest and the newest format_version read, for each format.
_OLDEST = {ONE_STACK: 1, SEVERAL_STACKS: 4}
_NEWEST = {ONE_STACK: STREAM_FORMAT_VERSION, SEVERAL_STACKS: FORMAT_VERSION}

V = TypeVar("V")


class TraceFormatError(Error):
    """A file that is not a readable attnlab trace (corrupt, foreign, inconsistent, too new)."""


def _unprefixed(items: Mapping[str, V], stack: str) -> dict[str, V]:
    """The entries of one stack (names under ``<stack>/``), the prefix taken off: its
    tensors, or what the header says of them."""
    prefix = f"{stack}/"
    return {n[len(prefix):]: v for n, v in items.items() if n.startswith(prefix)}


def _bad(path: Path | str, field: str, want: str, got: object) -> TraceFormatError:
    shown = repr(got)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return TraceFormatError(f"{path}: field {field!r} must be {want}, got {shown}")


def _is_int(x: object) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool)


def _parse_json(path: Path, raw: str | None) -> dict[str, Any]:
    """The attnlab metadata of a safetensors header, as a JSON object whose fields are not
    checked yet (:func:`_check_one` and :func:`_check_stacked` check them, each giving the
    header's record)."""
    if raw is None:
        raise TraceFormatError(f"{path} is a safetensors file but not an attnlab trace")
    try:
        meta = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"{path}: corrupt attnlab metadata ({exc})") from None
    if not isinstance(meta, dict):
        raise _bad(path, "attnlab", "a JSON object", meta)
    return meta


def _check_format(path: Path, fmt: str, stated: object, version: object) -> int:
    """The file holds ``fmt`` (``stated``: the ``format`` its header states) at a
    format_version this attnlab reads (``version``: the one it states), which is returned."""
    if stated != fmt:
        what = "an AttentionTrace" if fmt == ONE_STACK else "a StackedTrace"
        raise TraceFormatError(f"{path} holds {stated!r}, not {what}")
    oldest, newest = _OLDEST[fmt], _NEWEST[fmt]
    if not _is_int(version) or not oldest <= version <= newest:
        raise TraceFormatError(
            f"{path} has format_version {version!r}; this attnlab reads {oldest} to "
            f"{newest} for {fmt}")
    return version


def _check_one(path: Path, meta: dict[str, Any], info: dict[str, tuple[str, list[int]]]
               ) -> OneTraceHeader:
    """The header of a one-trace file (``meta``: its attnlab metadata as
    :func:`_parse_json` gives it; ``info``: each tensor's dtype and shape), before any
    tensor is read; returns the metadata as the header's record."""
    if meta.get("format") == SEVERAL_STACKS:
        stacks = meta.get("stacks")
        names = ", ".join(stacks) if isinstance(stacks, dict) else "several"
        raise TraceFormatError(
            f"{path} holds several attention stacks ({names}), not one "
            "AttentionTrace; read it with attnlab.tracing.load_trace(path) or "
            "attnlab.tracing.StackedTrace.load(path)")
    version = _check_format(path, ONE_STACK, meta.get("format"), meta.get("format_version"))
    _check_fields(path, meta, version)
    _check_manifest(path, version, None if version == 1 else meta["tensors"], info)
    # every field a reader uses is checked: the format and version above, the trace's
    # fields and manifest by _check_fields (each tensor's sha256 is checked when read)
    return cast(OneTraceHeader, meta)


def _check_stacked(path: Path, meta: dict[str, Any], info: dict[str, tuple[str, list[int]]]
                   ) -> tuple[StackedHeader, dict[str, tuple[str, TraceMetadata]]]:
    """The header of a file of several stacks (``meta`` and ``info`` as for
    :func:`_check_one`), before any tensor is read: the metadata as the header's record,
    and stack name -> (how errors name it, its metadata)."""
    if meta.get("format") == ONE_STACK:
        raise TraceFormatError(
            f"{path} holds one AttentionTrace, not several stacks; read it with "
            "attnlab.tracing.load_trace(path) or AttentionTrace.load(path)")
    version = _check_format(path, SEVERAL_STACKS, meta.get("format"),
                            meta.get("format_version"))
    for field, types, want in (("model", (str,), "a str"),
                               ("text", (str, type(None)), "null or a str"),
                               ("target", (str, type(None)), "null or a str"),
                               ("meta", (dict, type(None)), "a JSON object")):
        if not isinstance(meta.get(field), types):
            raise _bad(path, field, want, meta.get(field))
    stacks = meta.get("stacks")
    if (not isinstance(stacks, dict) or not stacks
            or any(n not in STACK_ORDER for n in stacks)):
        raise _bad(path, "stacks", f"a JSON object of stacks named among "
                   f"{', '.join(STACK_ORDER)}", stacks)
    stray = [n for n in info if n.split("/", 1)[0] not in stacks or "/" not in n]
    if stray:
        raise TraceFormatError(f"{path}: tensors {sorted(stray)} belong to no stack "
                               "the metadata lists")
    for name, sub in stacks.items():
        where = _in_stack(path, name)
        if not isinstance(sub, dict):
            raise _bad(path, f"stacks.{name}", "a JSON object", sub)
        _check_fields(where, sub, version)
        if sub.get("stack") != name:
            raise _bad(where, "stack", repr(name), sub.get("stack"))
        _check_manifest(where, version, sub["tensors"], _unprefixed(info, name))
    # every field a reader uses is checked: the file's above, each stack's by _check_fields
    # (each tensor's sha256 is checked when read)
    header = cast(StackedHeader, meta)
    return header, {name: (_in_stack(path, name), sub)
                    for name, sub in header["stacks"].items()}


def _in_stack(path: Path, stack: str) -> str:
    """How errors name the stack ``stack`` of the file at ``path``."""
    return f"{path} [stack {stack!r}]"


def _check_fields(path: Path | str, meta: dict[str, Any], version: int) -> None:
    """The fields of one trace's metadata (a JSON object, not checked yet) have the types
    ``version`` of the format states (:class:`~attnlab.tracing._file_records.TraceMetadata`)."""
    tokens = meta.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise _bad(path, "tokens", "a list of str", tokens)
    kt = meta.get("key_tokens")
    if kt is not None and (not isinstance(kt, list) or not all(isinstance(t, str) for t in kt)):
        raise _bad(path, "key_tokens", "null or a list of str", kt)
    ids = meta.get("token_ids")
    if ids is not None and (not isinstance(ids, list) or not all(_is_int(i) for i in ids)):
        raise _bad(path, "token_ids", "null or a list of ints", ids)
    for field, types, want in (("model", (str,), "a str"), ("causal", (bool,), "a bool"),
                               ("text", (str, type(None)), "null or a str"),
                               ("meta", (dict, type(None)), "a JSON object")):
        if field in meta and not isinstance(meta[field], types):
            raise _bad(path, field, want, meta[field])
    if version == 1:
        scale = meta.get("scale")
        if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))
                                  or not math.isfinite(scale)):
            raise _bad(path, "scale", "null or a finite float", scale)
        return
    if version >= 4 and meta.get("stack") not in STACKS:
        raise _bad(path, "stack", f"one of {', '.join(STACKS)}", meta.get("stack"))
    groups = meta.get("groups")
    if groups is not None and (not isinstance(groups, list) or not all(
            isinstance(g, list) and all(_is_int(i) for i in g) for g in groups)):
        raise _bad(path, "groups", "null or a list of lists of ints", groups)
    shapes = meta.get("shapes")
    if not isinstance(shapes, list):
        raise _bad(path, "shapes", "a list (one entry per layer)", shapes)
    for i, s in enumerate(shapes):
        _check_shape_entry(path, f"shapes[{i}]", s, version)
    manifest = meta.get("tensors")
    if not isinstance(manifest, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("dtype"), str)
            and isinstance(v.get("shape"), list) for v in manifest.values()):
        raise _bad(path, "tensors", "a map of name -> {dtype, shape}", manifest)


def _check_shape_entry(path: Path | str, f: str, s: object, version: int) -> None:
    """One layer's score shape entry (``f``: its field name) as ``version`` holds it."""
    if not isinstance(s, dict):
        raise _bad(path, f, "a JSON object", s)
    sc = s.get("scale")
    if isinstance(sc, bool) or not isinstance(sc, (int, float)) or not math.isfinite(sc):
        raise _bad(path, f"{f}.scale", "a finite float", sc)
    if not isinstance(s.get("causal"), bool):
        raise _bad(path, f"{f}.causal", "a bool", s.get("causal"))
    if s.get("window") is not None and not _is_int(s["window"]):
        raise _bad(path, f"{f}.window", "null or an int", s["window"])
    if version < 3 and (s.get("sinks") is not None or (s.get("window") is not None
                                                        and not s["causal"])):
        raise TraceFormatError(
            f"{path}: field {f!r} has sinks or a window without causal, which only "
            f"format_version 3 holds (and later ones), but the file says {version}")
    cap = s.get("softcap")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float))
                            or not math.isfinite(cap)):
        raise _bad(path, f"{f}.softcap", "null or a finite float", cap)
    for field in TENSOR_FIELDS:
        if s.get(field) is not None and not isinstance(s[field], str):
            raise _bad(path, f"{f}.{field}", "null or a tensor name", s[field])


def _check_manifest(path: Path | str, version: int, manifest: dict[str, ManifestEntry] | None,
                    info: dict[str, tuple[str, list[int]]]) -> None:
    """Every tensor present with the shape and dtype the metadata's ``manifest`` states (its
    types checked; None for a version-1 file, which has none), no others."""
    if manifest is None:
        manifest = {}
        if "weights" not in info:
            raise TraceFormatError(f"{path} has no 'weights' tensor")
        unknown = set(info) - {"weights", "q", "k", "v", "scores", "context"}
    else:
        unknown = set(info) ^ set(manifest)
    if unknown:
        raise TraceFormatError(
            f"{path}: tensors {sorted(unknown)} are not the ones the metadata lists")
    for name, (dtype, shape) in info.items():
        want = manifest.get(name)
        if want is not None and (want["dtype"] != dtype or want["shape"] != shape):
            raise TraceFormatError(
                f"{path}: tensor {name!r} is {dtype} {shape}, the metadata says "
                f"{want['dtype']} {want['shape']}"
            )
        if name in TRACE_TENSORS or name == "scores":
            if dtype not in ("F32", "F16", "BF16", "F64") or len(shape) != (
                    3 if name == "lse" else 4):
                raise TraceFormatError(
                    f"{path}: tensor {name!r} must be a float tensor with "
                    f"{3 if name == 'lse' else 4} dims, got {dtype} {shape}")
        if version >= 5 and want is not None:
            _check_layer_digests(path, name, shape, want.get("layer_sha256"))


def _check_layer_digests(path: Path | str, name: str, shape: list[int], chunks: object) -> None:
    """A version-5 manifest entry's ``layer_sha256``: one sha256 (64 hex digits) per layer
    for a tensor stacked by layer, none for a score shape's tensor."""
    field = f"tensors.{name}.layer_sha256"
    if name not in TRACE_TENSORS:
        if chunks is not None:
            raise _bad(path, field, "absent (a score shape's tensor has no layers)", chunks)
        return
    n = shape[0] if shape else 0
    if not isinstance(chunks, list) or len(chunks) != n or not all(
            isinstance(c, str) and len(c) == 64 for c in chunks):
        raise _bad(path, field, f"a list of {n} sha256 digests (one per layer)", chunks)
