"""attnlab's one family of exceptions: :class:`Error`, the base of every exception attnlab
defines (``except attnlab.Error`` catches each of them), :class:`AttnlabWarning`, the base
of its warnings, and :class:`Refused`, the one refusal that carries an HTTP ``status``
(the server's, the widget's and the attribution functions' alike).

Depends on nothing. The reference lists every class and when it is raised
(``docs/site/errors.md``).

>>> exc = Refused(422, "layer must be in [0, 2), got 5")
>>> isinstance(exc, Error), isinstance(exc, ValueError), exc.status, exc.message
(True, True, 422, 'layer must be in [0, 2), got 5')
>>> try:
...     raise Refused(413, "body is over 10 bytes")
... except Error as caught:
...     print(caught)
body is over 10 bytes
"""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["ArgumentError", "ArgumentTypeError", "AttnlabWarning", "Error", "Refused",
           "check_int", "check_optional_int", "check_real"]


class Error(ValueError):
    """The base of every exception attnlab defines: a value attnlab refuses, with a message
    that says why (one line, naming the argument, the file or the model at fault).

    A ``ValueError``, so code written for the built-in type keeps catching it; a class
    that was a ``RuntimeError`` before this family existed is one still (``class
    IsolatedCallError(Error, RuntimeError)``). An argument checked by attnlab's shared
    checks (``check_int`` …) raises :class:`ArgumentTypeError` for a value of the wrong
    type and :class:`ArgumentError` for one out of range.
    """


class ArgumentError(Error):
    """An argument of the right type but out of range (a negative size, a port above
    65535): the message names the argument, what it must be and what it got."""


class ArgumentTypeError(Error, TypeError):
    """An argument of the wrong type (a float, a string or a bool where an int is
    expected): a ``TypeError`` as Python's own convention has it, and an
    :class:`Error` (so a ``ValueError`` too: code that caught either keeps working)."""


class AttnlabWarning(UserWarning):
    """The base of every warning attnlab emits (``warnings.simplefilter("ignore",
    attnlab.AttnlabWarning)`` silences them all)."""


class Refused(Error):
    """A request refused, by the server, the notebook widget or the attribution functions:
    ``status`` is the HTTP status a server answers with (400 unreadable, 404 unknown, 409
    the trace lacks what is asked, 413 too much at once, 415 wrong content type, 422 a bad
    value) and ``message`` what is wrong, naming the parameter (the JSON body
    ``{"error": message}``).

    ``attnlab.serve._common.Refused``, ``attnlab.viz.api.RequestError`` and
    ``attnlab.viz.attribution_payload.AttributionError`` are this class (examples: the
    module's docstring).
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message

    def __reduce__(self) -> tuple[Any, ...]:  # pickled with both fields (another process)
        return type(self), (self.status, self.message)


def check_int(name: str, value: object, *, minimum: int | None = 0,
              maximum: int | None = None) -> int:
    """``value`` if it is an int (not a bool) in ``[minimum, maximum]`` (None: no bound);
    else :class:`ArgumentTypeError` (a wrong type: a ``TypeError`` and a
    ``ValueError``) or :class:`ArgumentError` (out of range), naming ``name``,
    what was expected and what was received.

    >>> check_int("lq", 3)
    3
    >>> check_int("num_heads", 0, minimum=1)
    Traceback (most recent call last):
    ...
    attnlab.ArgumentError: num_heads must be a positive int, got 0
    >>> check_int("port", 70000, maximum=65535)
    Traceback (most recent call last):
    ...
    attnlab.ArgumentError: port must be an int in [0, 65535], got 70000
    >>> check_int("layer", True)
    Traceback (most recent call last):
    ...
    attnlab.ArgumentTypeError: layer must be an int >= 0, got bool True
    """
    if maximum is not None and minimum is not None:
        want = f"an int in [{minimum}, {maximum}]"
    elif maximum is not None:
        want = f"an int <= {maximum}"
    elif minimum is None:
        want = "an int"
    else:
        want = "a positive int" if minimum == 1 else f"an int >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name} must be {want}, got {type(value).__name__} "
                                f"{value!r}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ArgumentError(f"{name} must be {want}, got {value!r}")
    return value


def check_optional_int(name: str, value: object, *, minimum: int | None = 0,
                       maximum: int | None = None) -> int | None:
    """``None``, or ``value`` checked by :func:`check_int`.

    >>> check_optional_int("max_bytes", None) is None, check_optional_int("max_bytes", 8)
    (True, 8)
    """
    return None if value is None else check_int(name, value, minimum=minimum,
                                                maximum=maximum)


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"{'<' if high_open else '<='} {high:g}"
    return ""


def check_real(name: str, value: object, *, low: float | None = None,
               high: float | None = None, low_open: bool = False, high_open: bool = False,
               finite: bool = True, nonzero: bool = False) -> float:
    """``value`` as a float if it is a real number (an int or a float, not a bool) that is
    finite (unless ``finite=False``), non-zero when ``nonzero``, and within ``low`` and
    ``high`` (None: no bound; ``low_open``/``high_open``: the bound itself excluded); else
    :class:`ArgumentTypeError` (a wrong type) or :class:`ArgumentError` (a value out of
    range, or NaN), naming ``name``, what was expected and what was received.

    >>> check_real("dropout", 0.1, low=0, high=1, high_open=True)
    0.1
    >>> check_real("dropout", 1.0, low=0, high=1, high_open=True)
    Traceback (most recent call last):
    ...
    attnlab.ArgumentError: dropout must be a float in [0, 1), got 1.0
    >>> check_real("eps", 0, low=0, low_open=True)
    Traceback (most recent call last):
    ...
    attnlab.ArgumentError: eps must be a finite float > 0, got 0.0
    >>> check_real("scale", "1")
    Traceback (most recent call last):
    ...
    attnlab.ArgumentTypeError: scale must be a finite float, got str '1'
    """
    bound = _interval(low, high, low_open, high_open)
    kind = ("a finite " if finite and (low is None or high is None) else "a ") + (
        "non-zero float" if nonzero else "float")
    want = f"{kind} {bound}".rstrip()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{name} must be {want}, got {type(value).__name__} "
                                f"{value!r}")
    x = float(value)
    bad = (math.isnan(x) or (finite and math.isinf(x)) or (nonzero and x == 0.0)
           or (low is not None and (x <= low if low_open else x < low))
           or (high is not None and (x >= high if high_open else x > high)))
    if bad:
        raise ArgumentError(f"{name} must be {want}, got {x!r}")
    return x


# the public spelling (``attnlab.Error``), in tracebacks too (doctest therefore runs the
# module's examples, not the classes')
for _cls in (Error, ArgumentError, ArgumentTypeError, AttnlabWarning, Refused):
    _cls.__module__ = "attnlab"
del _cls
