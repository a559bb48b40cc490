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

from typing import Any

__all__ = ["AttnlabWarning", "Error", "Refused"]


class Error(ValueError):
    """The base of every exception attnlab defines: a value attnlab refuses, with a message
    that says why (one line, naming the argument, the file or the model at fault).

    A ``ValueError``, so code written for the built-in type keeps catching it; a class
    that was a ``RuntimeError`` before this family existed is one still (``class
    IsolatedCallError(Error, RuntimeError)``). Plain argument checks may still raise a
    built-in ``ValueError`` or ``TypeError``.
    """


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


# the public spelling (``attnlab.Error``), in tracebacks too (doctest therefore runs the
# module's examples, not the classes')
for _cls in (Error, AttnlabWarning, Refused):
    _cls.__module__ = "attnlab"
del _cls
