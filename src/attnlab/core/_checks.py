"""Checks of plain arguments shared across attnlab (ints of sizes, lengths and counts; the
type of a config)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from attnlab._errors import check_int, check_optional_int, check_real

_T = TypeVar("_T")

__all__ = ["broadcast_shapes", "check_instance", "check_int", "check_optional_int", "check_real"]


def check_instance(name: str, value: object, cls: type[_T]) -> _T:
    """``value`` if it is a ``cls``; else ``TypeError`` naming ``name``, the class expected
    and the type received.

    >>> check_instance("config", {}, int)
    Traceback (most recent call last):
    ...
    TypeError: config must be an int, got dict
    """
    if not isinstance(value, cls):
        article = "an" if cls.__name__[:1].upper() in "AEIOU" else "a"
        raise TypeError(f"{name} must be {article} {cls.__name__}, got {type(value).__name__}")
    return value


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The shape that ``shapes`` broadcast to, as ``torch.broadcast_shapes`` gives it (sizes
    aligned from the right; a size 1 or a missing dim takes the other's size), for shapes of
    plain non-negative ints; ``ValueError`` naming the shapes where two sizes differ and
    neither is 1.

    torch's own function imports ``torch.fx``'s symbolic shapes (and sympy) on its first
    call: 0.4-0.6 s added to the first attention a process computes, for a few comparisons
    of ints.

    >>> broadcast_shapes((2, 1, 4), (3, 1), ())
    (2, 3, 4)
    >>> broadcast_shapes((2, 3), (4, 3))
    Traceback (most recent call last):
    ...
    ValueError: shapes (2, 3) and (4, 3) do not broadcast: 2 against 4 at dim -2
    """
    out: list[int] = []
    for shape in shapes:
        sizes = tuple(int(n) for n in shape)
        if len(sizes) > len(out):
            out[:0] = [1] * (len(sizes) - len(out))
        for i in range(1, len(sizes) + 1):
            a, b = out[-i], sizes[-i]
            if a == b or b == 1:
                continue
            if a == 1:
                out[-i] = b
                continue
            raise ValueError(f"shapes {', '.join(str(tuple(s)) for s in shapes[:-1])} and "
                             f"{tuple(shapes[-1])} do not broadcast: {a} against {b} at dim "
                             f"-{i}")
    return tuple(out)
