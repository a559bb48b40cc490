"""Checks of plain arguments shared across attnlab (ints of sizes, lengths and counts)."""

from __future__ import annotations

__all__ = ["check_int"]


def check_int(name: str, value: object, *, minimum: int = 0) -> int:
    """``value`` if it is an int (not a bool) ``>= minimum``; else ``TypeError`` or
    ``ValueError`` naming ``name``, what was expected and what was received.

    >>> check_int("lq", 3)
    3
    >>> check_int("num_heads", 0, minimum=1)
    Traceback (most recent call last):
    ...
    ValueError: num_heads must be a positive int, got 0
    """
    want = "a positive int" if minimum == 1 else f"an int >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be {want}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be {want}, got {value!r}")
    return value
