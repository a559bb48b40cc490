"""The explorer as a local web app: type a text (or two), pick a model, explore it live.

``create_app(tracers)`` is a FastAPI app over a mapping of model names to tracers
(``text -> AttentionTrace``); :func:`run` loads named models once and serves them with
uvicorn on 127.0.0.1 unless told otherwise.

Endpoints::

    GET  /               the page: form + the explorer (same JS/CSS as the saved file)
    POST /api/explore    {"model", "text", "text2"?} -> the explorer's data (JSON)
    GET  /api/models     the models this server holds
    GET  /healthz        {"status": "ok", ...}
    GET  /openapi.json   the schema (FastAPI)

Every refusal is a 4xx JSON body ``{"error": "what is wrong"}``. Model inference runs under
one lock (a model object is not assumed thread-safe); everything else a request computes is
its own. The server writes no file; model caches are pointed into ``cache_dir``.
"""

from __future__ import annotations

import html
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from attnlab.trace.trace import AttentionTrace
from attnlab.viz.explorer import Explorer, ExplorerConfig, json_for_html, static_asset

__all__ = ["ExploreRequest", "ServeConfig", "create_app", "model_tracer", "run"]

Tracer = Callable[[str], AttentionTrace]


class ExploreRequest(BaseModel):
    """Body of ``POST /api/explore``."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(description="one of GET /api/models")
    text: str = Field(description="the input text, 1 to max_chars characters")
    text2: str | None = Field(default=None, description="an optional second text")


@dataclass(frozen=True)
class ServeConfig:
    """Limits of one server."""

    max_chars: int = 2000  # ~400 English tokens: long enough to explore, pooled views above 256
    host: str = "127.0.0.1"  # local only unless the user asks for more
    port: int = 8000
    cache_dir: Path | None = None  # None: attnlab's model cache ($ATTNLAB_CACHE or ~/.cache)

    def __post_init__(self) -> None:
        if isinstance(self.max_chars, bool) or not isinstance(self.max_chars, int) \
                or self.max_chars < 1:
            raise ValueError(f"max_chars must be a positive int, got {self.max_chars!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int) \
                or not 0 <= self.port <= 65535:
            raise ValueError(f"port must be an int in [0, 65535], got {self.port!r}")


def model_tracer(name: str) -> Tracer:
    """Load ``name`` once (name or path, offline) and return ``text -> AttentionTrace``."""
    import attnlab.trace as trace_pkg
    from attnlab.models import load

    loaded = load(name, progress=False)
    return lambda text: trace_pkg.trace(loaded, text)


def _error(status: int, message: str) -> Any:
    from fastapi.responses import JSONResponse

    return JSONResponse(status_code=status, content={"error": message})


def create_app(tracers: Mapping[str, Tracer], *, max_chars: int = 2000,
               explorer: ExplorerConfig | None = None) -> Any:
    """A FastAPI app serving the explorer for the models in ``tracers``."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import HTMLResponse

    if not tracers:
        raise ValueError("tracers must name at least one model, got none")
    ServeConfig(max_chars=max_chars)  # checks the limit
    names = list(tracers)
    infer_lock = threading.Lock()
    cfg = explorer or ExplorerConfig()

    app = FastAPI(title="attnlab explorer", version="1",
                  description="Attention of real models, explored live. Local use.")

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Any:
        parts = []
        for e in exc.errors():
            where = ".".join(str(x) for x in e.get("loc", ()) if x != "body") or "body"
            parts.append(f"{where}: {e.get('msg', 'invalid')}")
        return _error(422, "invalid request: " + "; ".join(parts))

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "models": names, "max_chars": max_chars}

    @app.get("/api/models")
    def models() -> dict[str, Any]:
        return {"models": names, "max_chars": max_chars}

    @app.post("/api/explore")
    def explore(req: ExploreRequest) -> Any:
        if req.model not in tracers:
            return _error(404, f"unknown model {req.model!r}; this server has {names}")
        texts = [req.text] + ([req.text2] if req.text2 is not None else [])
        for field, text in zip(("text", "text2"), texts):
            if not text.strip():
                return _error(422, f"{field} is empty")
            if len(text) > max_chars:
                return _error(413, f"{field} has {len(text)} characters; the limit is "
                                   f"{max_chars}")
        traces = []
        try:
            with infer_lock:  # one forward pass at a time; the rest is per request
                for text in texts:
                    traces.append(tracers[req.model](text))
        except ValueError as exc:  # the model refuses this input (e.g. too many tokens)
            return _error(422, str(exc))
        return Explorer(traces, config=cfg).payload()

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        return _page(names, max_chars)

    return app


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


def _pin_caches(cache_dir: Path) -> None:
    """Point every library cache this process might write into ``cache_dir``."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    os.environ["ATTNLAB_CACHE"] = str(cache_dir)
    for var, sub in (("HF_HOME", "hf"), ("MPLCONFIGDIR", "matplotlib"),
                     ("TORCHINDUCTOR_CACHE_DIR", "torchinductor"), ("TRITON_CACHE_DIR", "triton"),
                     ("XDG_CACHE_HOME", "xdg")):
        os.environ[var] = str(cache_dir / sub)


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
        tracers[name] = model_tracer(name)
    app = create_app(tracers, max_chars=config.max_chars)
    if not quiet:
        print(f"attnlab serve: http://{config.host}:{config.port}/", flush=True)
    uvicorn.run(app, host=config.host, port=config.port,
                log_level="warning" if quiet else "info")
