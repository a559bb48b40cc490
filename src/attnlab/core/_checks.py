"""Checks of plain arguments shared across attnlab (ints of sizes, lengths and counts; the
type of a config)."""

from __future__ import annotations

from typing import TypeVar

from attnlab._errors import check_int, check_optional_int, check_real

_T = TypeVar("_T")

__all__ = ["check_instance", "check_int", "check_optional_int", "check_real"]


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
