"""Checks of plain arguments shared across attnlab (ints of sizes, lengths and counts; the
type of a config)."""

from __future__ import annotations

from typing import TypeVar

_T = TypeVar("_T")

__all__ = ["check_instance", "check_int"]


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
