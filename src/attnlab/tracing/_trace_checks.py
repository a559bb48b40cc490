"""The checks an :class:`~attnlab.tracing.attention.AttentionTrace` makes of what it is
given: each tensor's shape against the others' (:func:`trace_dims`), one device for all
(:func:`check_one_device`), an index, a grouping of positions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from attnlab._errors import check_int
from attnlab.core.functional import default_scale
from attnlab.core.scores import ScoreShape

__all__ = ["check_groups", "check_one_device", "index", "make_shapes", "move_target", "shape_of",
           "trace_dims"]


def shape_of(t: Tensor | None) -> tuple[int, ...] | str:
    return tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__


def index(name: str, i: object, size: int) -> int:
    """An int index into ``size`` items (negative ones count from the end), as ``0..size-1``."""
    i = check_int(name, i, minimum=None)
    if not -size <= i < size:
        raise IndexError(f"{name} must be in [0, {size}), got {i}")
    return i % size


def check_groups(groups: object, n: int) -> list[list[int]]:
    """``groups`` as lists, checked to split ``0..n-1`` into consecutive runs."""
    if not (isinstance(groups, (list, tuple)) and all(
            isinstance(g, (list, tuple)) and g and all(
                isinstance(i, int) and not isinstance(i, bool) for i in g) for g in groups)
            and [i for g in groups for i in g] == list(range(n))):
        raise ValueError(f"groups must split 0..{n - 1} into consecutive runs, got {groups}")
    return [list(g) for g in groups]


def trace_dims(w: Tensor | None, q: Tensor | None, k: Tensor | None, v: Tensor | None,
               lse: Tensor | None, c: Tensor | None, o: Tensor | None
               ) -> tuple[int, int, int, int]:
    """(L, H, Lq, Lk) in pieces of a trace's tensors (dense weights ``w``; or q, k, v, lse;
    context ``c``; out_proj ``o``), after checking every one's shape."""
    if w is not None:
        if w.dim() != 4:
            raise ValueError(f"weights must have shape (L, H, Lq, Lk), got {shape_of(w)}")
        nl, nh, nq, nk = w.shape
    else:  # (the trace has checked that it holds q, k and lse)
        if q is None or q.dim() != 4:
            raise ValueError(f"q must have shape (L, H, Lq, d), got {shape_of(q)}")
        nl, nh, nq = q.shape[:3]
        nk = k.shape[2] if k is not None and k.dim() == 4 else -1
    if q is not None:
        if q.dim() != 4 or tuple(q.shape[:3]) != (nl, nh, nq):
            raise ValueError(f"q must have shape ({nl}, {nh}, {nq}, d), got {shape_of(q)}")
    if k is not None:
        if q is None:
            raise ValueError("k needs q (both are kept, or neither)")
        ok = (k.dim() == 4 and k.shape[0] == nl and k.shape[2] == nk and k.shape[1] >= 1
              and nh % k.shape[1] == 0 and k.shape[3] == q.shape[3])
        if not ok:
            raise ValueError(
                f"k must have shape ({nl}, H_kv, {nk}, {q.shape[3]}) with H_kv dividing "
                f"{nh}, got {shape_of(k)}"
            )
    hkv = k.shape[1] if k is not None else nh
    if v is not None:
        if v.dim() != 4 or tuple(v.shape[:3]) != (nl, hkv, nk):
            raise ValueError(f"v must have shape ({nl}, {hkv}, {nk}, dv), got {shape_of(v)}")
    if lse is not None and tuple(lse.shape) != (nl, nh, nq):
        raise ValueError(f"lse must have shape ({nl}, {nh}, {nq}), got {shape_of(lse)}")
    if c is not None and (c.dim() != 4 or tuple(c.shape[:3]) != (nl, nh, nq)):
        raise ValueError(f"context must have shape ({nl}, {nh}, {nq}, dv), got {shape_of(c)}")
    dv = None if v is None else v.shape[3]
    if o is not None and (v is None or o.dim() != 4 or tuple(o.shape[:3]) != (
            nl, nh, dv)):
        raise ValueError(f"out_proj needs v and must have shape ({nl}, {nh}, dv, E), got "
                         f"{shape_of(o)}")
    return nl, nh, nq, nk


def check_one_device(tensors: dict[str, Tensor | None], shapes: Sequence[ScoreShape],
                     dev: torch.device, first: str) -> None:
    """Every tensor of ``tensors`` and of each score shape on ``dev`` (``first``'s)."""
    fix = "move a whole trace with AttentionTrace.to(device)"
    for name, t in tensors.items():
        if t is not None and t.device != dev:
            raise ValueError(f"{name} must be on the device of {first} ({dev}), got "
                             f"{name} on {t.device}; {fix}")
    for i, shape in enumerate(shapes):
        for name, t in shape.tensors().items():
            if t.device != dev:
                raise ValueError(f"shapes[{i}].{name} must be on the device of {first} "
                                 f"({dev}), got {t.device}; {fix}")


def make_shapes(shapes: Any, scale: float | None, causal: bool | None, q: Tensor | None,
                nl: int, nh: int, nq: int, nk: int) -> tuple[ScoreShape, ...]:
    """One :class:`ScoreShape` per layer from what a trace is given (one shape, one per
    layer, or a scale and causal flag; none for dense weights without a scale), each
    checked against the trace's heads and lengths."""
    if shapes is None:
        if scale is None:
            if q is None:
                return ()
            scale = default_scale(q.shape[-1])
        shapes = ScoreShape(scale=scale, causal=bool(causal))
    elif scale is not None or causal is not None:
        given = [s for s in ((shapes,) if isinstance(shapes, ScoreShape) else shapes)]
        if any((scale is not None and s.scale != float(scale))
               or (causal is not None and s.causal != causal) for s in given):
            raise ValueError("scale/causal disagree with shapes; give one or the other")
    if isinstance(shapes, ScoreShape):
        shapes = [shapes] * nl
    shapes = tuple(shapes)
    if len(shapes) != nl or not all(isinstance(s, ScoreShape) for s in shapes):
        raise ValueError(f"shapes must be one ScoreShape or one per layer ({nl}), got "
                         f"{len(shapes)} items")
    for i, s in enumerate(shapes):
        try:
            s.check(num_heads=nh, lq=nq, lk=nk)
        except ValueError as exc:
            raise ValueError(f"shapes[{i}]: {exc}") from None
    return shapes


def move_target(device: Any, here: torch.device, opened: bool, path: Any) -> torch.device:
    """``device`` as a ``torch.device`` for moving a trace now on ``here``: a trace opened
    from a file (``opened``, memory-mapped and checked on demand) stays on the CPU, and one
    on the meta device holds no values to move; each refused naming what to do."""
    try:
        dev = torch.device(device)
    except (TypeError, RuntimeError, ValueError):
        raise TypeError(f"device must be a torch.device or a device name such as 'cpu' "
                        f"or 'cuda:0', got {device!r}") from None
    if opened and dev.type != "cpu":
        raise ValueError(
            f"device {str(dev)!r}: this trace is opened from {path or 'its file'} "
            f"(memory-mapped, read and checked on demand) and stays on the CPU; read it whole "
            f"with AttentionTrace.load(path) (every tensor checked), then .to({str(dev)!r})")
    if not opened and here.type == "meta" and dev.type != "meta":
        raise ValueError(f"device {str(dev)!r}: this trace is on the meta device, which "
                         f"holds shapes only, no values; move the trace it was made from")
    return dev
