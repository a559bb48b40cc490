"""The explorer as a local web app: type a text (or two), pick a model, explore it live.

``create_app(tracers)`` is a FastAPI app over a mapping of model names to tracers
(``text -> AttentionTrace``); :func:`run` loads named models once and serves them with
uvicorn on 127.0.0.1 unless told otherwise.

Endpoints::

    GET  /               the page: form + the explorer (same JS/CSS as the saved file)
    POST /api/explore    {"model", "text", "text2"?} -> the explorer's data (JSON)
    GET  /api/models     the models this server holds, and their limits
    GET  /healthz        {"status": "ok", ...}
    GET  /openapi.json   the schema (FastAPI)

Every refusal, whatever its status (400 bad body, 403 another site's ``Origin``, 404, 405,
413 too long or over the memory budget, 415 a body that is not ``application/json``, 422
invalid request, 500), is a JSON body ``{"error": "what is wrong"}``.

Before a model runs, a request is checked in this order, none of it under the inference
lock: the ``Host`` header (only local names, the bound address and ``allowed_hosts``: a
page on another site cannot reach the server through DNS rebinding), the ``Origin`` header
when there is one (only the server's own: 403 for any other site's page; no CORS header is
ever sent, so a preflight grants nothing), the ``Content-Type`` (``application/json`` only:
the ``text/plain`` and form bodies a page on any site can send without a preflight get
415), the body (size, UTF-8,
JSON, nesting), the fields, each text (visible characters, valid Unicode), its length in
characters (a cheap first filter), its length in **tokens** against the model's limit, and
the memory its traces would need (:func:`attnlab.tracing.budget.estimate_trace_bytes`)
against the budget. Model inference then runs under one lock (a model object is not assumed
thread-safe); requests in flight together never reserve more than the budget. The server
writes no file; model caches are pointed into ``cache_dir``.
"""

from __future__ import annotations

import html
import json
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request

# pydantic, which turns a route's return type into its response model, reads
# typing_extensions' TypedDict on Python < 3.12
from typing_extensions import NotRequired, TypedDict

from attnlab._text import one_line
from attnlab.serve._common import (
    Refused,
    ServeConfig,
    allowed_hosts_for,
    install_guards,
    json_content_type_error,
)
from attnlab.serve._common import error as _error
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.budget import (
    check_text,
    count_tokens,
    default_budget,
    estimate_trace_bytes,
    format_bytes,
    model_shape,
)
from attnlab.tracing.stacks import StackedTrace
from attnlab.viz.assets import static_asset
from attnlab.viz.codec import json_for_html
from attnlab.viz.explorer import Explorer
from attnlab.viz.payload import ExplorerConfig

if TYPE_CHECKING:
    from attnlab.serve.trace_api import TraceStore

__all__ = ["ExploreRequest", "ModelTracer", "ServeConfig", "create_app", "model_tracer",
           "pinned_caches", "run"]

Tracer = Callable[[str], AttentionTrace | StackedTrace]

class ModelLimits(TypedDict):
    """The most tokens a model accepts here (:func:`_limits`): each key only where the
    tracer says."""

    max_length: NotRequired[int]  # the model's own limit
    max_tokens: NotRequired[int]  # what the memory budget allows (at most max_length)


class Health(TypedDict):
    """What ``/healthz`` answers."""

    status: str  # "ok"
    models: list[str]
    max_chars: int


class ModelsInfo(TypedDict):
    """What ``/api/models`` answers."""

    models: list[str]
    max_chars: int
    max_memory: int  # the memory budget, in bytes
    limits: dict[str, ModelLimits]  # by model


MAX_JSON_DEPTH = 32  # a request body is one flat object; anything deeper is refused


class ExploreRequest(BaseModel):
    """Body of ``POST /api/explore``."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(description="one of GET /api/models")
    text: str = Field(description="the input text, 1 to max_chars characters")
    text2: str | None = Field(default=None, description="an optional second text")


class ModelTracer:
    """``text -> AttentionTrace`` for one loaded model, with what the server checks first:
    :meth:`count_tokens`, ``max_length`` and :meth:`estimate` (bytes for N tokens)."""

    def __init__(self, loaded: Any) -> None:
        self.loaded = loaded
        self.name = loaded.name
        self.max_length = int(loaded.max_length)
        self.shape = model_shape(loaded)

    def count_tokens(self, text: str) -> int:
        return count_tokens(self.loaded.tokenizer, text)

    def estimate(self, num_tokens: int) -> int:
        return estimate_trace_bytes(self.shape, num_tokens).total

    def __call__(self, text: str) -> AttentionTrace | StackedTrace:
        """The trace of ``text`` (a :class:`StackedTrace` for an encoder–decoder model)."""
        from attnlab.tracing.tracer import trace

        return trace(self.loaded, text)


def model_tracer(name: str, *, dtype: str | None = None, device: str | None = None
                 ) -> ModelTracer:
    """Load ``name`` once (name or path, offline), in ``dtype`` on ``device`` (None: as it
    loads; a copy otherwise, :func:`attnlab.tracing.tracer.placed`), and return its
    :class:`ModelTracer`."""
    import dataclasses

    from attnlab.models import load
    from attnlab.tracing.tracer import placed

    loaded = load(name, progress=False)
    if dtype is not None or device is not None:
        loaded = dataclasses.replace(loaded, model=placed(loaded.model, dtype, device))
    return ModelTracer(loaded)


def _depth(obj: Any) -> int:
    if isinstance(obj, dict):
        return 1 + max((_depth(v) for v in obj.values()), default=0)
    if isinstance(obj, list):
        return 1 + max((_depth(v) for v in obj), default=0)
    return 0


def _parse_body(body: bytes) -> ExploreRequest:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Refused(400, f"body is not UTF-8 (byte 0x{body[exc.start]:02x} at offset "
                            f"{exc.start})") from None
    try:
        obj = json.loads(text)
    except RecursionError:
        raise Refused(400, f"body nests JSON too deeply (at most {MAX_JSON_DEPTH} "
                            f"levels)") from None
    except json.JSONDecodeError as exc:
        raise Refused(422, f"invalid request: body: JSON decode error ({exc.msg} at "
                            f"character {exc.pos})") from None
    if _depth(obj) > MAX_JSON_DEPTH:
        raise Refused(400, f"body nests JSON too deeply (at most {MAX_JSON_DEPTH} levels)")
    try:
        return ExploreRequest.model_validate(obj)
    except ValidationError as exc:
        parts = []
        for e in exc.errors():
            where = ".".join(str(x) for x in e.get("loc", ())) or "body"
            parts.append(f"{where}: {e.get('msg', 'invalid')}")
        raise Refused(422, "invalid request: " + "; ".join(parts)) from None


@dataclass(frozen=True)
class _Explore:
    """What ``/api/explore`` works with: the tracers by name, the character limit, the
    memory budget and the largest body it reads; the budget's reservations, the lock that
    runs one forward pass at a time, the explorer's settings and the store of the explored
    traces (their exact rows on demand)."""

    tracers: Mapping[str, Tracer]
    names: list[str]
    max_chars: int
    budget: int
    max_body: int
    reserve: _Reservations
    infer_lock: threading.Lock
    cfg: ExplorerConfig
    store: TraceStore


def _explore(ex: _Explore, tracer: Tracer, texts: list[str], need: int) -> Any:
    """The explorer's payload of ``texts`` traced by ``tracer`` (``need`` bytes reserved
    meanwhile), each trace added to the store; a 422 error when the model refuses one."""
    with ex.reserve(need):  # in flight together, requests stay within the budget
        traces = []
        try:
            with ex.infer_lock:  # one forward pass at a time; the rest is per request
                for text in texts:
                    traces.append(tracer(text))
        except ValueError as exc:  # the model refuses this input
            return _error(422, one_line(exc))
        # exact rows on demand: one id per trace, per stack of an encoder–decoder input
        api = [ex.store.api_url(tid) for t in traces for tid in ex.store.add_input(t)]
        return Explorer(traces, config=ex.cfg, api=api).payload()


def _add_explore_route(app: Any, ex: _Explore) -> None:
    """``POST /api/explore``: a JSON body's texts, admitted within the limits, traced (in a
    worker thread) and explored."""
    schema = {"requestBody": {"required": True, "content": {"application/json": {
        "schema": ExploreRequest.model_json_schema()}}}}

    @app.post("/api/explore", openapi_extra=schema)
    async def explore(request: Request) -> Any:
        from starlette.concurrency import run_in_threadpool

        wrong_type = json_content_type_error(request)
        if wrong_type is not None:
            return _error(415, wrong_type)
        try:
            body = await _read_body(request, ex.max_body)
            req = _parse_body(body)
            tracer, texts, need = _admit(req, ex.tracers, ex.names, ex.max_chars, ex.budget)
        except Refused as exc:
            return _error(exc.status, exc.message)
        return await run_in_threadpool(_explore, ex, tracer, texts, need)


def create_app(tracers: Mapping[str, Tracer], *, max_chars: int = 100_000,
               max_memory: int | None = None, allowed_hosts: tuple[str, ...] = (),
               host: str | None = None, explorer: ExplorerConfig | None = None) -> Any:
    """A FastAPI app serving the explorer for the models in ``tracers``.

    A tracer with ``count_tokens(text)``, ``max_length`` and ``estimate(num_tokens)`` (as
    :class:`ModelTracer` has) gets the token and memory checks; a plain callable gets the
    character limit only. ``max_memory``: the bytes one request's traces may need, and all
    requests in flight together (``None``: half this machine's memory). ``host``: the
    address the server is bound to, answered besides :data:`LOCAL_HOSTS` and
    ``allowed_hosts``.
    """
    from fastapi import FastAPI
    from fastapi.responses import HTMLResponse

    from attnlab.serve.trace_api import TraceStore, trace_router

    if not tracers:
        raise ValueError("tracers must name at least one model, got none")
    ServeConfig(max_chars=max_chars, max_memory=max_memory, allowed_hosts=tuple(allowed_hosts))
    budget = max_memory if max_memory is not None else default_budget()
    hosts = allowed_hosts_for(host, tuple(allowed_hosts))
    names = list(tracers)
    limits = {name: _limits(t, budget) for name, t in tracers.items()}
    max_body = 16 * 2 * max_chars + 65536  # two texts of 4-byte characters, escaped
    cfg = explorer or ExplorerConfig()
    store = TraceStore(capacity=8, max_bytes=budget // 2, explorer=cfg)  # explored traces

    app = FastAPI(title="attnlab explorer", version="1",
                  description="Attention of real models, explored live. Local use.")
    install_guards(app, hosts)

    @app.get("/healthz")
    def healthz() -> Health:
        return {"status": "ok", "models": names, "max_chars": max_chars}

    @app.get("/api/models")
    def models() -> ModelsInfo:
        return {"models": names, "max_chars": max_chars, "max_memory": budget,
                "limits": limits}

    _add_explore_route(app, _Explore(tracers, names, max_chars, budget, max_body,
                                     _Reservations(budget), threading.Lock(), cfg, store))

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        return _page(names, max_chars)

    app.include_router(trace_router(store))
    return app


async def _read_body(request: Any, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > limit):
        raise Refused(413, f"body is {length} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Refused(413, f"body is over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _limits(tracer: Any, budget: int) -> ModelLimits:
    """The most tokens a model accepts here: its own limit and the memory budget's."""
    out: ModelLimits = {}
    if hasattr(tracer, "max_length"):
        out["max_length"] = int(tracer.max_length)
    if hasattr(tracer, "estimate"):
        lo, hi = 0, 1
        while hi < 1 << 30 and tracer.estimate(hi) <= budget:
            lo, hi = hi, hi * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if tracer.estimate(mid) <= budget else (lo, mid)
        out["max_tokens"] = min(lo, out.get("max_length", lo))
    return out


def _admit(req: ExploreRequest, tracers: Mapping[str, Tracer], names: list[str],
           max_chars: int, budget: int) -> tuple[Tracer, list[str], int]:
    """The tracer, the texts and the bytes they need, or :class:`Refused`."""
    if req.model not in tracers:
        raise Refused(404, f"unknown model {req.model!r}; this server has {names}")
    tracer = tracers[req.model]
    texts = [req.text] + ([req.text2] if req.text2 is not None else [])
    fields = ("text", "text2")
    for field, text in zip(fields, texts):
        try:
            check_text(text, field)
        except ValueError as exc:
            status = 400 if "surrogate" in str(exc) else 422
            raise Refused(status, one_line(exc)) from None
        if len(text) > max_chars:
            raise Refused(413, f"{field} has {len(text)} characters; the limit is {max_chars}")
    need = 0
    count = getattr(tracer, "count_tokens", None)
    estimate = getattr(tracer, "estimate", None)
    if count is None:
        return tracer, texts, need
    for field, text in zip(fields, texts):
        try:
            n = count(text)
        except ValueError as exc:
            raise Refused(422, f"{field}: {one_line(exc)}") from None
        limit = getattr(tracer, "max_length", None)
        if limit is not None and n > limit:
            raise Refused(413, f"{field} has {n} tokens; {req.model} accepts at most {limit}")
        need += estimate(n) if estimate is not None else 0
    if need > budget:
        raise Refused(413, f"the texts need about {format_bytes(need)} of memory, above this "
                            f"server's budget of {format_bytes(budget)} (serve --max-memory); "
                            f"give shorter texts")
    return tracer, texts, need


class _Reservations:
    """Bytes reserved by requests in flight; a request waits until its share fits."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self.cond = threading.Condition()

    def __call__(self, need: int) -> Any:
        import contextlib

        @contextlib.contextmanager
        def held() -> Any:
            with self.cond:
                while self.used and self.used + need > self.budget:
                    self.cond.wait()
                self.used += need
            try:
                yield
            finally:
                with self.cond:
                    self.used -= need
                    self.cond.notify_all()

        return held()


_CSP = ("default-src 'none'; connect-src 'self'; img-src data:; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'")

_FORM_JS = """
(function () {
  var form = document.getElementById('ax-form'), out = document.getElementById('ax-out');
  var msg = document.getElementById('ax-msg');
  form.addEventListener('submit', function (e) {
    e.preventDefault();
    var body = {model: form.model.value, text: form.text.value};
    if (form.text2.value.trim()) body.text2 = form.text2.value;
    msg.textContent = '…';
    fetch('api/explore', {method: 'POST', headers: {'Content-Type': 'application/json'},
                          body: JSON.stringify(body)})
      .then(function (r) { return r.json().then(function (j) { return [r.ok, j]; }); })
      .then(function (res) {
        if (!res[0]) { msg.textContent = res[1].error || 'error'; msg.className = 'bad'; return; }
        msg.textContent = ''; msg.className = '';
        out.innerHTML = '';
        var root = document.createElement('div');
        root.className = 'attnlab-explorer';
        out.appendChild(root);
        return window.AttnlabExplorer.mountData(root, res[1]);
      })
      .catch(function (err) { msg.textContent = String(err); msg.className = 'bad'; });
  });
})();
"""


def _page(names: list[str], max_chars: int) -> str:
    esc = html.escape
    options = "".join(f'<option value="{esc(n, quote=True)}">{esc(n)}</option>' for n in names)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<title>attnlab explorer</title>
<style>
body {{ margin:0; padding:16px 24px; font:14px/1.5 system-ui, sans-serif; background:#fbfbfd;
       color:#1d2330; }}
form {{ display:grid; grid-template-columns: 90px 1fr; gap:6px 10px; max-width:900px;
        margin-bottom:12px; }}
textarea {{ font: inherit; }} #ax-msg.bad {{ color:#b3261e; font-weight:600; }}
{static_asset("explorer.css")}
</style></head><body>
<h1 style="font-size:22px;margin:0 0 10px">attnlab explorer</h1>
<form id="ax-form">
<label for="ax-model">model</label><select id="ax-model" name="model">{options}</select>
<label for="ax-text">text</label>
<textarea id="ax-text" name="text" rows="2" maxlength="{max_chars}" required
>The cat sat on the mat because it was tired.</textarea>
<label for="ax-text2">text 2</label>
<textarea id="ax-text2" name="text2" rows="1" maxlength="{max_chars}"
 placeholder="optional second text"></textarea>
<span></span><span><button type="submit">explore</button> <span id="ax-msg"></span></span>
</form>
<div id="ax-out"></div>
<script>{static_asset("explorer.js")}</script>
<script>{_FORM_JS}</script>
<script type="application/json" id="ax-models">{json_for_html(names)}</script>
</body></html>
"""


def pinned_caches(cache_dir: Path) -> dict[str, str]:
    """The environment that points every library cache a server might write into
    ``cache_dir`` (attnlab's compiled kernel goes under ``XDG_CACHE_HOME``'s).

    >>> pinned_caches(Path("/c"))["XDG_CACHE_HOME"]
    '/c/xdg'
    """
    env = {"ATTNLAB_CACHE": str(cache_dir)}
    for var, sub in (("HF_HOME", "hf"), ("MPLCONFIGDIR", "matplotlib"),
                     ("TORCHINDUCTOR_CACHE_DIR", "torchinductor"), ("TRITON_CACHE_DIR", "triton"),
                     ("XDG_CACHE_HOME", "xdg")):
        env[var] = str(cache_dir / sub)
    return env


def _pin_caches(cache_dir: Path) -> None:
    """Point every library cache this process might write into ``cache_dir``."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    os.environ.update(pinned_caches(cache_dir))


def run(models: list[str], config: ServeConfig | None = None, *, quiet: bool = False) -> None:
    """Load each model once and serve until interrupted."""
    import uvicorn

    config = config or ServeConfig()
    if not models:
        raise ValueError("models must name at least one model (--model NAME)")
    if config.cache_dir is not None:
        _pin_caches(Path(config.cache_dir).expanduser().resolve())
    else:
        from attnlab.models import cache_dir

        _pin_caches(cache_dir())
    tracers = {}
    for name in models:
        if not quiet:
            print(f"attnlab serve: loading {name}", flush=True)
        try:
            tracers[name] = model_tracer(name, dtype=config.dtype, device=config.device)
        except (ValueError, TypeError, OSError) as exc:
            raise ValueError(f"--model {name}: {one_line(exc)}") from exc
    app = create_app(tracers, max_chars=config.max_chars, max_memory=config.max_memory,
                     allowed_hosts=config.allowed_hosts, host=config.host)
    if not quiet:
        budget = config.max_memory if config.max_memory is not None else default_budget()
        print(f"attnlab serve: http://{config.host}:{config.port}/ (memory budget "
              f"{format_bytes(budget)})", flush=True)
    uvicorn.run(app, host=config.host, port=config.port,
                log_level="warning" if quiet else "info")
