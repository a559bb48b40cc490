"""Exact attention of loaded traces over HTTP: rows, tiles, pooled blocks, top-k, the QK view.

A trace keeps what determines attention (q, k, the log-sum-exp and the score shaping), so
the server computes any weight exactly when the page asks, whatever the length: the
explorer of a long input carries pooled maps only and fetches the rest from here.

``TraceStore`` holds traces by id — each stack of a ``StackedTrace`` (encoder, decoder and
cross-attention of one input) is a trace of its own, and the explorer of any of them shows
the whole input with its stack selector; :func:`trace_router` is a FastAPI ``APIRouter`` over
a store; :func:`create_trace_app` and :func:`run_traces` serve saved trace files of either
kind (``attnlab serve --trace FILE``).

Endpoints (``{tid}`` a trace id; ``layer``, ``head`` query parameters on every one that
reads weights)::

    GET /api/traces                      the traces held: id, model, shape
    GET /api/traces/{tid}                one trace: shape, tokens, score shaping
    GET /api/traces/{tid}/explorer       the explorer's data for it (JSON, served mode)
    GET /api/traces/{tid}/rows           queries=3 | 3,7,9 | 10:20 [top=K]  exact rows
    GET /api/traces/{tid}/tile           rows=a:b & cols=c:d                  exact tile
    GET /api/traces/{tid}/pooled         block=B                              pooled map
    GET /api/traces/{tid}/topk           query=i & k=K                        top-k keys
    GET /api/traces/{tid}/qk             query=i [top=K]    the QK view's data for query i
    GET /api/traces/{tid}/attribution/rows  kind=weights|value|rollout & rows=3 | 3,7 | 10:20
                                         (layer, head for weights and value; value without
                                         head: the layer's heads summed; rollout: neither)
    GET /api/traces/{tid}/score_parts    layer, head, i, j [pairing]  one score taken apart
    GET /traces/{tid}                    the explorer page of a trace (fetches from here)

Arrays come as ``{"dtype", "gz", "shape", "b64"}`` (little-endian bytes in base64, what the
page decodes; :func:`attnlab.viz.codec.decode_blob` in Python), or as plain JSON lists
with ``encoding=list``. Every refusal is a 4xx JSON body ``{"error": "what is wrong"}``.
Every weight is float32 and exact (the trace's ``weights_rows`` / ``weights_tile`` /
``pooled`` / ``topk``); nothing computes more than the rows or tile asked for, except
``pooled``, which reads the whole head once. The attribution endpoints answer what
:func:`attnlab.viz.attribution_payload.attribution_rows` and
:func:`~attnlab.viz.attribution_payload.score_parts_json` compute (a trace without what a
kind needs, e.g. v and the output projection for ``value``: 409, saying so).
"""

from __future__ import annotations

import html
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch  # noqa: F401  (the doctests)

# pydantic, which turns a route's return type into its response model, reads
# typing_extensions' TypedDict on Python < 3.12
from typing_extensions import TypedDict

from attnlab._errors import Refused, check_int, check_optional_int
from attnlab.serve._common import error
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.stacks import StackedTrace, open_trace
from attnlab.viz.api import (
    MAX_POOLED_BLOCKS,
    MAX_ROWS,
    MAX_TILE,
    MAX_TOP,
    pooled_data,
    qk_data,
    rows_data,
    tile_data,
    topk_data,
)
from attnlab.viz.attribution_payload import attribution_rows, score_parts_json
from attnlab.viz.codec import json_for_html
from attnlab.viz.explorer import Explorer
from attnlab.viz.payload import ExplorerConfig

__all__ = ["TraceStore", "trace_bytes", "trace_router", "create_trace_app", "run_traces",
           "rows_data", "tile_data", "pooled_data", "topk_data", "qk_data", "MAX_ROWS",
           "MAX_TILE", "MAX_POOLED_BLOCKS", "MAX_TOP"]

def trace_bytes(trace: AttentionTrace) -> int:
    """Bytes of the tensors a trace holds in memory (what keeping it costs): q, k, v, lse,
    context, each head's output projection, or a dense trace's weights. An opened trace
    (:meth:`AttentionTrace.open`) holds none: its tensors are mapped from its file, read
    where a request asks, and their pages are the system's to drop.

    >>> t = AttentionTrace(["a", "b"], q=torch.ones(1, 2, 2, 4), k=torch.ones(1, 1, 2, 4),
    ...                    lse=torch.zeros(1, 2, 2), causal=True)
    >>> trace_bytes(t) == 4 * (16 + 8 + 4)
    True
    """
    if getattr(trace, "opened_from", None) is not None:
        return 0
    ts = [trace.q, trace.k, trace.v, trace.lse, trace.context, trace.out_proj]
    if not trace.has_qk:
        ts.append(trace.weights)  # a dense trace: the weights it holds
    return sum(t.numel() * t.element_size() for t in ts if t is not None)


class TraceStore:
    """Traces held by a server, by id (``t1``, ``t2`` …).

    The oldest go when there are more than ``capacity``, or when together they hold more
    than ``max_bytes`` (the newest is always kept).

    >>> w = torch.softmax(torch.randn(1, 1, 3, 3), -1)
    >>> store = TraceStore(capacity=1)
    >>> a = store.add(AttentionTrace(tokens=list("abc"), weights=w))
    >>> b = store.add(AttentionTrace(tokens=list("xyz"), weights=w))
    >>> (a, b), store.ids()
    (('t1', 't2'), ['t2'])
    """

    def __init__(self, capacity: int = 16, *, max_bytes: int | None = None,
                 explorer: ExplorerConfig | None = None) -> None:
        check_int("capacity", capacity, minimum=1)
        check_optional_int("max_bytes", max_bytes, minimum=1)
        self.capacity, self.max_bytes = capacity, max_bytes
        self._bytes: dict[str, int] = {}
        self.config = explorer or ExplorerConfig()
        self._traces: OrderedDict[str, AttentionTrace] = OrderedDict()
        self._explorers: dict[str, Explorer] = {}
        #: the stacks of one several-stack input: each of its ids -> (all its ids, the input)
        self._groups: dict[str, tuple[list[str], StackedTrace]] = {}
        self._next = 1
        self._lock = threading.Lock()

    def add(self, trace: AttentionTrace) -> str:
        """Keep ``trace``; returns its id."""
        if not isinstance(trace, AttentionTrace):
            raise TypeError(f"trace must be an AttentionTrace, got {type(trace).__name__} "
                            "(a StackedTrace goes through add_input)")
        return self._add([trace])[0]

    def add_input(self, item: AttentionTrace | StackedTrace) -> list[str]:
        """Keep one input: an AttentionTrace (one id) or each stack of a StackedTrace (one
        id per stack, in its order; they stay and go together). Returns the ids.

        >>> w = lambda lq, lk: torch.softmax(torch.randn(1, 1, lq, lk), -1)
        >>> st = StackedTrace({"encoder": AttentionTrace(list("ab"), weights=w(2, 2),
        ...                                              stack="encoder"),
        ...                    "cross": AttentionTrace(["x"], key_tokens=list("ab"),
        ...                                            weights=w(1, 2), stack="cross")})
        >>> store = TraceStore()
        >>> store.add_input(st), store.stack_ids("t2")
        (['t1', 't2'], ['t1', 't2'])
        """
        if isinstance(item, AttentionTrace):
            return self._add([item])
        if not isinstance(item, StackedTrace):
            raise TypeError(f"item must be an AttentionTrace or a StackedTrace, got "
                            f"{type(item).__name__}")
        return self._add([item[name] for name in item.names], item)

    def _add(self, traces: list[AttentionTrace], group: StackedTrace | None = None
             ) -> list[str]:
        with self._lock:
            tids = []
            for trace in traces:
                tid = f"t{self._next}"
                self._next += 1
                self._traces[tid] = trace
                self._bytes[tid] = trace_bytes(trace)
                tids.append(tid)
            if group is not None:
                for tid in tids:
                    self._groups[tid] = (tids, group)
            while len(self._traces) > len(tids) and (
                    len(self._traces) > max(self.capacity, len(tids)) or
                    (self.max_bytes is not None and sum(self._bytes.values()) > self.max_bytes)):
                oldest = next(iter(self._traces))
                for old in self._groups.get(oldest, ([oldest], None))[0]:
                    self._traces.pop(old, None)
                    self._explorers.pop(old, None)
                    self._bytes.pop(old, None)
                    self._groups.pop(old, None)
        return tids

    def stack_ids(self, tid: str) -> list[str]:
        """The ids of every stack of ``tid``'s input (``[tid]`` for a one-stack trace)."""
        self.get(tid)
        with self._lock:
            return list(self._groups.get(tid, ([tid], None))[0])

    def get(self, tid: str) -> AttentionTrace:
        """The trace ``tid``; ``KeyError`` naming the ids held if there is none."""
        with self._lock:
            if tid not in self._traces:
                raise KeyError(f"no trace {tid!r} on this server; it holds "
                               f"{list(self._traces) or 'none'}")
            return self._traces[tid]

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._traces)

    def __len__(self) -> int:
        return len(self._traces)

    @staticmethod
    def api_url(tid: str) -> str:
        """The URL prefix the explorer page fetches trace ``tid`` from."""
        return f"/api/traces/{tid}"

    def explorer(self, tid: str, *, progress: bool = False) -> Explorer:
        """The explorer of trace ``tid`` in served mode (built once: pooled maps are slow);
        for a stack of a several-stack input, the explorer of the whole input."""
        trace = self.get(tid)
        with self._lock:
            tids, group = self._groups.get(tid, ([tid], None))
            tid = tids[0]
            ex = self._explorers.get(tid)
        if ex is None:
            ex = Explorer(trace if group is None else group, config=self.config,
                          uid=f"ax-{tid}", api=[self.api_url(t) for t in tids])
            ex.payload(progress)
            with self._lock:
                if tid in self._traces:
                    self._explorers[tid] = ex
        return ex


# --------------------------------------------------------------------------------------
# what each endpoint computes: the plain functions of attnlab.viz.api (the widget's too)
# --------------------------------------------------------------------------------------


class TraceSummary(TypedDict):
    """One held trace, as ``/api/traces`` lists it."""

    id: str
    model: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    seq_len: int
    key_len: int
    head_dim: int | None  # None: a trace of weights alone
    causal: bool
    has_qk: bool
    page: str  # the URL path of its explorer page


class TraceList(TypedDict):
    """What ``/api/traces`` answers."""

    traces: list[TraceSummary]


class TraceInfo(TraceSummary):
    """One trace, as ``/api/traces/{tid}`` describes it."""

    tokens: list[str]
    key_tokens: list[str] | None  # None: the keys are the tokens
    #: each layer's score shaping (:meth:`attnlab.core.scores.ScoreShape.describe`)
    score_shape: list[dict[str, float | int | bool | None]]


class TracesHealth(TypedDict):
    """What ``/healthz`` of the traces server answers."""

    status: str  # "ok"
    traces: list[str]  # the ids held


def _summary(tid: str, t: AttentionTrace) -> TraceSummary:
    return {"id": tid, "model": t.model, "num_layers": t.num_layers, "num_heads": t.num_heads,
            "num_kv_heads": t.num_kv_heads, "seq_len": t.seq_len, "key_len": t.key_len,
            "head_dim": t.head_dim, "causal": bool(t.causal), "has_qk": bool(t.has_qk),
            "page": f"/traces/{tid}"}


# --------------------------------------------------------------------------------------
# the router and the app
# --------------------------------------------------------------------------------------


def _answer(store: TraceStore, tid: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(trace tid, *args, **kwargs)``, or the error response of a trace ``store`` does
    not hold (404) or of a refusal (its status)."""
    try:
        return fn(store.get(tid), *args, **kwargs)
    except KeyError as exc:
        return error(404, str(exc.args[0]))
    except Refused as exc:  # the viz functions' refusals too (one class)
        return error(exc.status, exc.message)


def _add_trace_routes(router: Any, store: TraceStore) -> None:
    """The list of ``store``'s traces, one trace's summary, tokens and score shapes, and its
    explorer's payload."""

    @router.get("/api/traces")
    def traces() -> TraceList:
        return {"traces": [_summary(tid, store.get(tid)) for tid in store.ids()]}

    @router.get("/api/traces/{tid}")
    def trace_info(tid: str) -> Any:
        def info(t: AttentionTrace) -> TraceInfo:
            shapes = [t.score_shape(layer).describe() for layer in range(t.num_layers)]
            return {**_summary(tid, t), "tokens": list(t.tokens),
                    "key_tokens": None if t.key_tokens is None else list(t.key_tokens),
                    "score_shape": shapes}
        return _answer(store, tid, info)

    @router.get("/api/traces/{tid}/explorer")
    def explorer(tid: str) -> Any:
        return _answer(store, tid, lambda t: store.explorer(tid).payload())


def _add_data_routes(router: Any, store: TraceStore) -> None:
    """What a page fetches of one trace: weight rows, tiles and pooled maps, a query's top
    keys and QK view, attribution rows and one score's parts."""

    @router.get("/api/traces/{tid}/rows")
    def rows(tid: str, layer: int, head: int, queries: str, top: int = 0,
             encoding: str = "b64") -> Any:
        return _answer(store, tid, rows_data, layer, head, queries, top=top, encoding=encoding)

    @router.get("/api/traces/{tid}/tile")
    def tile(tid: str, layer: int, head: int, rows: str, cols: str,
             encoding: str = "b64") -> Any:
        return _answer(store, tid, tile_data, layer, head, rows, cols, encoding=encoding)

    @router.get("/api/traces/{tid}/pooled")
    def pooled(tid: str, layer: int, head: int, block: int, encoding: str = "b64") -> Any:
        return _answer(store, tid, pooled_data, layer, head, block, encoding=encoding)

    @router.get("/api/traces/{tid}/topk")
    def topk(tid: str, layer: int, head: int, query: int, k: int = 10) -> Any:
        return _answer(store, tid, topk_data, layer, head, query, k)

    @router.get("/api/traces/{tid}/qk")
    def qk(tid: str, layer: int, head: int, query: int, top: int = 48) -> Any:
        return _answer(store, tid, qk_data, layer, head, query, top=top)

    @router.get("/api/traces/{tid}/attribution/rows")
    def attribution(tid: str, kind: str, rows: str, layer: int | None = None,
                    head: int | None = None, encoding: str = "b64") -> Any:
        return _answer(store, tid, attribution_rows, kind, layer, head, rows,
                       encoding=encoding)

    @router.get("/api/traces/{tid}/score_parts")
    def score_parts(tid: str, layer: int, head: int, i: int, j: int,
                    pairing: str | None = None) -> Any:
        return _answer(store, tid, score_parts_json, layer, head, i, j, pairing=pairing)


def trace_router(store: TraceStore) -> Any:
    """A FastAPI ``APIRouter`` serving the traces of ``store`` (endpoints: module docstring)."""
    from fastapi import APIRouter
    from fastapi.responses import HTMLResponse

    router = APIRouter()
    _add_trace_routes(router, store)
    _add_data_routes(router, store)

    @router.get("/traces/{tid}", response_class=HTMLResponse)
    def page(tid: str) -> Any:
        try:
            ex = store.explorer(tid)
        except KeyError as exc:
            return error(404, str(exc.args[0]))
        return HTMLResponse(ex.to_page(connect_self=True))

    return router


def create_trace_app(traces: Sequence[AttentionTrace | StackedTrace] | TraceStore, *,
                     explorer: ExplorerConfig | None = None, host: str | None = None,
                     allowed_hosts: Sequence[str] = ()) -> Any:
    """A FastAPI app serving saved traces: ``/`` lists the inputs (or opens the only one);
    a ``StackedTrace`` is one input of several stacks.

    Like the model server, it answers only requests addressed to a local name, the bound
    ``host`` or one of ``allowed_hosts`` (no DNS rebinding).
    """
    from fastapi import FastAPI
    from fastapi.responses import HTMLResponse

    from attnlab.serve._common import allowed_hosts_for, install_guards

    if isinstance(traces, TraceStore):
        store = traces
    else:
        traces = list(traces)
        if not traces:
            raise ValueError("traces must hold at least one AttentionTrace, got none")
        n = sum(len(t) if isinstance(t, StackedTrace) else 1 for t in traces)
        store = TraceStore(capacity=max(n, 1), explorer=explorer)
        for t in traces:
            store.add_input(t)

    app = FastAPI(title="attnlab traces", version="1",
                  description="Exact attention of saved traces, on demand. Local use.")
    install_guards(app, allowed_hosts_for(host, tuple(allowed_hosts)))

    @app.get("/healthz")
    def healthz() -> TracesHealth:
        return {"status": "ok", "traces": store.ids()}

    @app.get("/", response_class=HTMLResponse)
    def index() -> Any:
        ids = store.ids()
        firsts = list(dict.fromkeys(store.stack_ids(tid)[0] for tid in ids))  # one per input
        if len(firsts) == 1:
            return HTMLResponse(store.explorer(firsts[0]).to_page(connect_self=True))

        def about(tid: str) -> str:
            stacks = store.stack_ids(tid)
            ts = [store.get(t) for t in stacks]
            parts = ([f"{t.stack} {t.seq_len}×{t.key_len}" for t in ts] if len(ts) > 1
                     else [f"{ts[0].seq_len} tokens"])
            model = ts[0].model or "trace"
            return f"{html.escape(model)} · {html.escape(', '.join(parts))}"

        items = "".join(f'<li><a href="traces/{tid}">{html.escape(tid)}</a> · {about(tid)}</li>'
                        for tid in firsts)
        return HTMLResponse(
            "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>attnlab traces</title></head><body><h1>attnlab traces</h1>"
            f"<ul>{items}</ul>"
            f'<script type="application/json" id="ax-traces">{json_for_html(ids)}</script>'
            "</body></html>")

    app.include_router(trace_router(store))
    app.state.traces = store
    return app


def run_traces(paths: Sequence[str | os.PathLike[str]], config: Any = None, *,
               quiet: bool = False) -> None:
    """Open each saved trace (mapped: :func:`attnlab.tracing.open_trace`), build its explorer
    (pooled maps), and serve until interrupted.

    ``config`` is a :class:`attnlab.serve.ServeConfig` (host, port; ``max_chars`` is
    not used: nothing is traced here).
    """
    import uvicorn

    from attnlab.serve._common import ServeConfig

    config = config or ServeConfig()
    if not paths:
        raise ValueError("paths must name at least one trace file (--trace FILE)")
    loaded = []
    for p in paths:
        if not quiet:
            print(f"attnlab serve: loading {p}", flush=True)
        loaded.append(open_trace(Path(p)))  # mapped and checked, one stack or several
    n = sum(len(t) if isinstance(t, StackedTrace) else 1 for t in loaded)
    store = TraceStore(capacity=n)
    for t in loaded:
        tid = store.add_input(t)[0]
        if not quiet:
            print(f"attnlab serve: the explorer of {tid} ({store.get(tid).seq_len} tokens)",
                  flush=True)
        store.explorer(tid, progress=not quiet)  # pooled maps and diagnostics: one pass
    app = create_trace_app(store, host=config.host, allowed_hosts=config.allowed_hosts)
    if not quiet:
        print(f"attnlab serve: http://{config.host}:{config.port}/", flush=True)
    uvicorn.run(app, host=config.host, port=config.port,
                log_level="warning" if quiet else "info")
