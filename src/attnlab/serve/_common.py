"""What every attnlab server app shares: its limits (:class:`ServeConfig`), the ``Host``
allow-list against DNS rebinding, the refusal of cross-site requests (an ``Origin`` that is
not the server's own: 403; a JSON endpoint's body that is not ``application/json``: 415; no
CORS header is ever sent), one JSON error shape ``{"error": ...}`` for every status, and
the one exception a request is refused with (:class:`attnlab.Refused`)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.requests import Request

from attnlab._errors import (
    Refused,  # the one refusal class, re-exported here
    check_int,
    check_optional_int,
)

__all__ = ["LOCAL_HOSTS", "Refused", "ServeConfig", "allowed_hosts_for", "error",
           "install_guards", "json_content_type_error"]

#: Host names every server answers to (plus the address it is bound to).
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class ServeConfig:
    """Limits of one server."""

    max_chars: int = 100_000  # a cheap first filter only: tokens and memory decide
    host: str = "127.0.0.1"  # local only unless the user asks for more
    port: int = 8000
    cache_dir: Path | None = None  # None: attnlab's model cache ($ATTNLAB_CACHE or ~/.cache)
    max_memory: int | None = None  # bytes a request's traces may need; None: half the RAM
    allowed_hosts: tuple[str, ...] = ()  # Host names answered besides LOCAL_HOSTS and host
    dtype: str | None = None  # the models' precision (float32, bfloat16, float16); None: as loaded
    device: str | None = None  # where the models run (auto, cpu, cuda, mps); None: the CPU

    def __post_init__(self) -> None:
        check_int("max_chars", self.max_chars, minimum=1)
        check_int("port", self.port, maximum=65535)
        check_optional_int("max_memory (bytes)", self.max_memory, minimum=1)
        if isinstance(self.allowed_hosts, str) or not all(
                isinstance(h, str) and h for h in self.allowed_hosts):
            raise ValueError(f"allowed_hosts must be a tuple of host names, got "
                             f"{self.allowed_hosts!r}")


def error(status: int, message: str, headers: Mapping[str, str] | None = None) -> Any:
    """A JSON response ``{"error": message}`` with ``status``."""
    from fastapi.responses import JSONResponse

    return JSONResponse(status_code=status, content={"error": message},
                        headers=dict(headers or {}))


def _host_name(header: str) -> str:
    """The host of a ``Host`` header, without port or IPv6 brackets, lower case."""
    h = header.strip().lower()
    if h.startswith("["):
        return h[1:h.find("]")] if "]" in h else h
    return h.rsplit(":", 1)[0] if h.count(":") == 1 else h


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin_key(scheme: str, netloc: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) of an origin, default ports filled in; None if it has none."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return scheme.lower(), parts.hostname.lower(), port or _DEFAULT_PORTS.get(scheme.lower())


def _foreign_origin(origin: str, scheme: str, host: str) -> bool:
    """Whether an ``Origin`` header names another site than ``scheme://host`` (this server,
    as the request's ``Host`` header names it). ``null`` and anything unparsable count."""
    from urllib.parse import urlsplit

    o = origin.strip()
    try:
        parts = urlsplit(o)
    except ValueError:
        return True
    if not parts.scheme or parts.path or parts.query or parts.fragment:
        return True
    mine = _origin_key(scheme, host.strip())
    return mine is None or _origin_key(parts.scheme, parts.netloc) != mine


def json_content_type_error(request: Request) -> str | None:
    """Why a JSON endpoint refuses this request's ``Content-Type`` (None: it is
    ``application/json``, with or without parameters). A page on any site can send
    ``text/plain`` or a form without a preflight; it cannot send ``application/json``."""
    raw = request.headers.get("content-type")
    media = (raw or "").split(";", 1)[0].strip().lower()
    if media == "application/json":
        return None
    got = repr(raw) if raw is not None else "none"
    return f"Content-Type must be application/json, got {got}"


def allowed_hosts_for(bound: str | None, extra: tuple[str, ...] = ()) -> frozenset[str]:
    """The ``Host`` names a server bound to ``bound`` answers: :data:`LOCAL_HOSTS`, the
    bound address unless it is a wildcard (0.0.0.0, ::), and ``extra``."""
    names = set(LOCAL_HOSTS) | {h.lower().strip("[]") for h in extra}
    if bound:
        b = bound.lower().strip("[]")
        try:
            wildcard = ipaddress.ip_address(b).is_unspecified
        except ValueError:
            wildcard = False
        if not wildcard:
            names.add(b)
    return frozenset(names)


def install_guards(app: Any, hosts: frozenset[str]) -> None:
    """What every attnlab server app has: the ``Host`` allow-list (``hosts``, see
    :func:`allowed_hosts`), a 403 for a request whose ``Origin`` is another site's (same-
    origin requests and requests without ``Origin``, like curl's, pass) and one JSON error
    shape ``{"error": ...}`` for every status
    (422 validation, 404, 405, any other HTTP error, and 500 for a crash)."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    @app.middleware("http")
    async def _only_local_hosts(request: Request, call_next: Any) -> Any:
        header = request.headers.get("host")
        if header is None or _host_name(header) not in hosts:
            return error(400, f"Host header {header!r} is not allowed; this server answers "
                               f"to {', '.join(sorted(hosts))} (serve --allow-host NAME adds "
                               f"one)")
        origin = request.headers.get("origin")
        if origin is not None and _foreign_origin(origin, request.url.scheme, header):
            own = f"{request.url.scheme}://{header}"
            return error(403, f"Origin {origin!r} is not this server's own ({own}); "
                              f"requests from other sites are refused (no CORS)")
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Any:
        parts = []
        for e in exc.errors():
            where = ".".join(str(x) for x in e.get("loc", ()) if x not in ("body", "query"))
            parts.append(f"{where or 'request'}: {e.get('msg', 'invalid')}")
        return error(422, "invalid request: " + "; ".join(parts))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> Any:
        if exc.status_code == 404:
            message = f"not found: {request.url.path}"
        elif exc.status_code == 405:
            allow = (exc.headers or {}).get("Allow", "")
            message = f"method {request.method} is not allowed on {request.url.path}" + (
                f"; use {allow}" if allow else "")
        else:
            message = str(exc.detail)
        return error(exc.status_code, message, exc.headers)

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> Any:
        return error(500, f"internal error ({type(exc).__name__}); the server log has the "
                           f"details")
