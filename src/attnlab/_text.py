"""Messages on one line: the one rule every command, the server and the report use to
show an exception or a refusal to a reader.

Depends on nothing.

>>> one_line(ValueError("bad\\n   value"))
'bad value'
>>> one_line(KeyError())
'KeyError'
>>> one_line(RuntimeError("x" * 50), limit=10)
'xxxxxxxxx…'
>>> too_long("--target", 700, 512, "tokens")
'--target: 700 tokens, the model accepts at most 512; pass --truncate to keep the first 512'
"""

from __future__ import annotations

__all__ = ["one_line", "too_long"]


def one_line(exc: BaseException | object, limit: int | None = None) -> str:
    """``exc``'s message with every run of white space made one space (its type's name
    when the message is empty), cut to ``limit`` characters with an ellipsis."""
    text = " ".join(str(exc).split())
    if not text and isinstance(exc, BaseException):
        text = type(exc).__name__
    if limit is not None and len(text) > limit:
        text = text[: max(limit - 1, 0)] + "…"
    return text


def too_long(arg: str, got: int | str, most: int | str, unit: str, *,
             flag: str = "--truncate") -> str:
    """The one wording of "this input is longer than the model accepts": names the
    argument, what it holds, the most accepted, and how to go on."""
    return (f"{arg}: {got} {unit}, the model accepts at most {most}; pass {flag} to keep "
            f"the first {most}")
