"""What the explorer shows of one input: its attention stacks in order (one trace, or the
encoder, decoder and cross-attention of an encoder–decoder input), whether a stack's queries
and keys are different sequences (cross-attention), and the image a vision trace saw."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import torch  # noqa: F401  (the doctests)

from attnlab.tracing.attention import STACKS as STACK_NAMES
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.stacks import StackedTrace

__all__ = ["STACK_NAMES", "POSITION_SCORES", "POSITION_ROLES", "About", "ImageInput",
           "input_stacks", "is_cross", "is_stacked", "stack_name", "image_input"]

#: Diagnostics that read a query's position against its keys' (first token, previous, own
#: token, distance, repeats): they mean nothing when queries and keys are different
#: sequences (cross-attention), so the explorer leaves them out there.
POSITION_SCORES = ("sink", "previous", "diagonal", "distance", "duplicate", "induction",
                   "repeat_induction")
#: The head roles that rest on those scores (left out for cross-attention too).
POSITION_ROLES = ("sink", "previous-token", "self", "induction")


def is_stacked(obj: Any) -> bool:
    """True for a ``StackedTrace`` or a non-empty mapping of stack name to AttentionTrace."""
    if isinstance(obj, StackedTrace):
        return True
    return (isinstance(obj, Mapping) and len(obj) > 0
            and all(isinstance(v, AttentionTrace) for v in obj.values()))


def stack_name(trace: AttentionTrace) -> str:
    """The stack a trace is of (``"self"`` when it does not say)."""
    return str(getattr(trace, "stack", None) or "self")


class About(TypedDict):
    """What the explorer says of one input besides its stacks (:func:`input_stacks`)."""

    model: str
    text: str | None
    target: str | None  # the target text of an encoder–decoder input (None: none given)
    #: the trace's ``meta["input"]`` as given: what kind of input (text, image, audio) and
    #: how it was made; the page reads it only when it is a mapping
    input: Any
    target_truncated_from: int | None  # the target's tokens before ``truncate`` cut it


class ImageInput(TypedDict):
    """The image a vision trace saw, as the page draws it (:func:`image_input`)."""

    grid: list[int]  # [rows, cols] of patches
    prefix: int  # tokens before the patches (a class token, registers)
    patch_size: Any  # as ``meta["input"]`` gives it (None when it does not say)
    image_size: list[int] | None
    png: str  # the image, a base64 PNG
    path: str  # where the image came from ("" when not known)
    prefix_tokens: list[str]


def input_stacks(obj: Any) -> tuple[About, list[tuple[str, AttentionTrace]]]:
    """What the explorer shows of one input: ``(about, [(stack name, trace), ...])``.

    ``obj`` is an :class:`AttentionTrace` (one stack, named by its ``stack``, ``"self"`` by
    default) or a ``StackedTrace`` / mapping name → AttentionTrace (encoder, decoder and
    cross-attention of one input, in the order given). ``about`` holds the model, the text,
    the target text, ``meta["input"]`` (what kind of input: text, image, audio) and
    ``target_truncated_from`` (the target's tokens before ``truncate`` cut it, else None).

    >>> w = torch.softmax(torch.randn(1, 1, 2, 3), -1)
    >>> cross = AttentionTrace(tokens=["x", "y"], key_tokens=list("abc"), weights=w)
    >>> about, stacks = input_stacks({"cross": cross})
    >>> [name for name, _ in stacks], about["model"]
    (['cross'], '')
    """
    if isinstance(obj, AttentionTrace):
        return ({"model": obj.model, "text": obj.text, "target": None,
                 "input": obj.meta.get("input"), "target_truncated_from": None},
                [(stack_name(obj), obj)])
    if not is_stacked(obj):
        raise TypeError(f"each input must be an AttentionTrace or a StackedTrace (a mapping "
                        f"of stack name to AttentionTrace), got {type(obj).__name__}")
    stacks = [(str(name), t) for name, t in obj.items()]
    first = stacks[0][1]
    meta = getattr(obj, "meta", None) or {}
    return ({"model": str(getattr(obj, "model", "") or first.model),
             "text": getattr(obj, "text", None) if hasattr(obj, "text") else first.text,
             "target": getattr(obj, "target", None), "input": meta.get("input"),
             "target_truncated_from": meta.get("target_truncated_from")}, stacks)


def is_cross(trace: AttentionTrace) -> bool:
    """True when the queries and keys of ``trace`` are different sequences (cross-attention:
    the stack is ``"cross"``, or the key tokens do not end with the query tokens), so
    scores that compare a query's position with its keys' do not apply.

    >>> w = torch.softmax(torch.randn(1, 1, 2, 3), -1)
    >>> is_cross(AttentionTrace(tokens=["x", "y"], key_tokens=list("abc"), weights=w))
    True
    >>> is_cross(AttentionTrace(tokens=["b", "c"], key_tokens=list("abc"), weights=w))
    False
    """
    if stack_name(trace) == "cross":
        return True
    keys = trace.key_tokens
    return keys is not None and list(keys[len(keys) - len(trace.tokens):]) != trace.tokens


def image_input(trace: AttentionTrace) -> ImageInput | None:
    """The image a vision trace saw, checked against its tokens, as the page draws it:
    ``{"grid": [rows, cols], "prefix": n, "patch_size", "image_size", "png", "path",
    "prefix_tokens"}``; ``None`` for a trace of anything else.

    ``trace.meta["input"]`` must say ``kind == "image"``; the patches are the tokens after
    the ``prefix`` ones, row-major, ``rows × cols`` of them, queries and keys alike.
    ``ValueError`` (naming the field) when the description does not fit the trace.
    """
    info = trace.meta.get("input")
    if not isinstance(info, Mapping) or info.get("kind") != "image":
        return None

    def bad(field: str, want: str, got: object) -> ValueError:
        return ValueError(f"trace.meta['input']['{field}'] must be {want}, got {got!r}")

    grid, prefix, png = info.get("grid"), info.get("prefix", 0), info.get("image_png")
    if (not isinstance(grid, Sequence) or len(grid) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in grid)):
        raise bad("grid", "[rows, cols] of positive ints", grid)
    if isinstance(prefix, bool) or not isinstance(prefix, int) or prefix < 0:
        raise bad("prefix", "an int >= 0", prefix)
    n = prefix + grid[0] * grid[1]
    if trace.seq_len != n or trace.key_len != n:
        raise bad("grid", f"a grid whose patches plus the prefix ({prefix}) are the trace's "
                  f"{trace.seq_len} queries and {trace.key_len} keys", grid)
    if not isinstance(png, str):
        raise bad("image_png", "a base64 PNG", type(png).__name__)
    try:
        head = base64.b64decode(png[:24], validate=True)
    except ValueError:
        head = b""
    if not head.startswith(b"\x89PNG"):
        raise bad("image_png", "a base64 PNG", png[:16] + "…")
    size = info.get("image_size")
    return {"grid": [int(grid[0]), int(grid[1])], "prefix": prefix,
            "patch_size": info.get("patch_size"),
            "image_size": None if size is None else [int(x) for x in size],
            "png": png, "path": str(info.get("path") or ""),
            "prefix_tokens": list(trace.tokens[:prefix])}

