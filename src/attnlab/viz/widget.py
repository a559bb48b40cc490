"""The explorer as a live Jupyter widget: the page of :class:`~attnlab.viz.explorer.Explorer`
in a notebook cell, which asks the running kernel for what it shows exactly.

``widget(trace)`` returns an ``anywidget.AnyWidget`` (anywidget's convention, which
JupyterLab, Notebook 7 and VS Code render; ``pip install 'attnlab[widget]'``). Its front end
is the explorer's own script (:func:`attnlab.viz.assets.static_asset`, the same JS and CSS
as the page), mounted with the *comm transport*: where a page served by ``attnlab serve``
fetches ``/api/traces/{tid}/rows`` over HTTP, the widget sends the same request as a message
over the widget's comm, and the kernel answers it with the same function the server's route
calls (:func:`attnlab.viz.api.answer`). So a long trace, whose page carries pooled maps
only, shows exact rows, tiles, QK data and attribution rows in a notebook with no server to
start; a short one carries every weight, as the page does.

The messages (JSON, one answer per request, matched by ``id``)::

    front end -> kernel   {"kind": "attnlab-request", "id", "api", "path", "params"}
    kernel -> front end   {"kind": "attnlab-response", "id", "status", "body"}

``api`` names one trace of the widget (one per stack of a several-stack input: the
payload's ``traces[i].api``), ``path`` and ``params`` are those of the server's endpoint
(``rows`` with ``layer``, ``head``, ``queries`` …), ``status`` is the HTTP status the
server would answer with and ``body`` its JSON (``{"error": …}`` when ``status`` >= 400).

说明：``widget(trace)`` 在 Jupyter 中显示探索器；页面所需的精确行、块与 QK 数据通过小部件的
comm 向正在运行的内核请求，由与 ``attnlab serve`` 相同的函数计算，无需启动服务器。

>>> import torch
>>> from attnlab.tracing.attention import AttentionTrace
>>> w = torch.softmax(torch.randn(1, 2, 4, 4), -1)
>>> wd = widget(AttentionTrace(tokens=list("abcd"), weights=w))
>>> reply = wd.answer({"kind": "attnlab-request", "id": "1", "api": "kernel:0",
...                    "path": "rows", "params": {"layer": 0, "head": 1,
...                    "queries": "2", "encoding": "list"}})
>>> reply["status"], reply["body"]["queries"]
(200, [2])
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, TypedDict

from attnlab._errors import Refused
from attnlab.tracing.attention import AttentionTrace
from attnlab.viz.api import Answer, answer
from attnlab.viz.assets import static_asset
from attnlab.viz.codec import json_for_html
from attnlab.viz.explorer import Explorer
from attnlab.viz.payload import FORMAT_VERSION, ExplorerConfig

__all__ = ["widget", "answer_message", "widget_esm", "API_PREFIX", "Reply",
           "ErrorBody"]  # + ExplorerWidget, on demand

_LOG = logging.getLogger(__name__)

class ErrorBody(TypedDict):
    """The body of a refused or failed request: what is wrong."""

    error: str


class Reply(TypedDict):
    """The kernel's answer to one request of the front end (:func:`answer_message`)."""

    kind: str  # "attnlab-response"
    id: Any  # the request's id, as the front end sent it
    status: int  # the HTTP status the server's route would answer with
    body: Answer | ErrorBody  # the route's JSON, or what is wrong (status >= 400)


#: The ``api`` of the widget's trace ``i`` is ``f"{API_PREFIX}{i}"`` (page order).
API_PREFIX = "kernel:"

# The widget's front end: the explorer's script (it defines window.AttnlabExplorer once a
# page), then the module anywidget loads, which mounts it on the widget's element with the
# comm transport (core.js) and stops listening when the view goes.
_RENDER = """
export default {
  render({ model, el }) {
    var AX = window.AttnlabExplorer;
    var root = document.createElement("div");
    root.className = "attnlab-explorer";
    root.setAttribute("data-format-version", "%(version)s");
    root.setAttribute("data-transport", "kernel");
    el.appendChild(root);
    if (!AX || typeof AX.commTransport !== "function") {
      root.textContent = "attnlab explorer: an older explorer script is loaded in this page; " +
        "reload the page.";
      return;
    }
    var transport = AX.commTransport(model);
    var data;
    try { data = JSON.parse(model.get("_payload")); }
    catch (e) { root.textContent = "attnlab explorer: the payload is not JSON: " + e; return; }
    root.id = data.uid + "-" + Math.random().toString(36).slice(2, 8);  // one id a view
    AX.mountData(root, data, transport).catch(function (e) {
      root.textContent = "attnlab explorer: " + (e && e.message || e);
      console.error(e);
    });
    return function () { transport.close(); };
  }
};
"""


@cache
def widget_esm() -> str:
    """The widget's ES module: the explorer's joined script, then the ``render`` that mounts
    it with the comm transport."""
    return static_asset("explorer.js") + _RENDER % {"version": FORMAT_VERSION}


def answer_message(traces: Mapping[str, AttentionTrace], message: Any) -> Reply | None:
    """The kernel's reply to one message of the widget's front end, or None for a message
    that is not a request (``kind`` other than ``"attnlab-request"``).

    ``traces`` maps each ``api`` to its trace. The reply carries the request's ``id``, the
    ``status`` the server's route answers with and the ``body``: the route's JSON
    (:func:`attnlab.viz.api.answer`), or ``{"error": what is wrong}`` — 404 for an unknown
    ``api`` or ``path``, 422 for a missing, unknown or mistyped parameter or a value out of
    range (naming it), 500 for a failure of the computation itself (logged).

    >>> import torch
    >>> t = AttentionTrace(tokens=list("ab"), weights=torch.tensor([[[[1.0, 0.0],
    ...                                                              [0.5, 0.5]]]]))
    >>> r = answer_message({"kernel:0": t}, {"kind": "attnlab-request", "id": 7,
    ...     "api": "kernel:0", "path": "topk", "params": {"layer": 0, "head": 0, "query": 1,
    ...     "k": 1}})
    >>> r["id"], r["status"], r["body"]["indices"]
    (7, 200, [0])
    >>> answer_message({"kernel:0": t}, {"kind": "attnlab-request", "id": 8,
    ...     "api": "kernel:0", "path": "rows", "params": {"layer": 2, "head": 0,
    ...     "queries": "1"}})["body"]
    {'error': 'layer must be in [0, 1), got 2'}
    """
    if not isinstance(message, Mapping) or message.get("kind") != "attnlab-request":
        return None
    rid = message.get("id")
    body: Answer | ErrorBody
    try:
        api = message.get("api")
        if not isinstance(api, str) or api not in traces:
            raise Refused(404, f"api must be one of {list(traces)}, got {api!r}")
        path: Any = message.get("path")  # as the front end sent it: answer() checks it
        body = answer(traces[api], path, message.get("params") or {})
        status = 200
    except Refused as exc:
        status, body = exc.status, {"error": exc.message}
    except Exception as exc:  # the page shows the error instead of waiting for ever
        _LOG.exception("attnlab widget: request %r failed", {k: message.get(k) for k in
                                                             ("path", "params")})
        status, body = 500, {"error": f"{type(exc).__name__}: {exc}"}
    return {"kind": "attnlab-response", "id": rid, "status": status, "body": body}


@cache
def _widget_class() -> type:
    try:
        import anywidget
        import traitlets
    except ImportError:
        raise ImportError("attnlab.viz.widget needs anywidget (the 'widget' extra): pip "
                          "install 'attnlab[widget]'") from None

    class ExplorerWidget(anywidget.AnyWidget):
        """The explorer of one or more traces as a Jupyter widget (:func:`widget` makes
        one). ``explorer`` is its :class:`~attnlab.viz.explorer.Explorer`, ``traces`` its
        traces by ``api``; :meth:`answer` is the kernel's reply to one request."""

        _esm = traitlets.Unicode(widget_esm()).tag(sync=True)
        _css = traitlets.Unicode(static_asset("explorer.css")).tag(sync=True)
        #: the page's data (``Explorer.payload()``) as JSON text
        _payload = traitlets.Unicode("").tag(sync=True)

        def __init__(self, explorer: Explorer, **kwargs: Any) -> None:
            if not isinstance(explorer, Explorer):
                raise TypeError(f"explorer must be an attnlab Explorer, got "
                                f"{type(explorer).__name__}")
            self.explorer = explorer
            # each trace the page can ask about, by its URL prefix (one without none is
            # never asked about)
            self.traces = {a: t for a, t in zip(explorer.api, explorer.traces) if a is not None}
            super().__init__(_payload=json_for_html(explorer.payload()), **kwargs)
            self.on_msg(self._on_request)

        def answer(self, message: Any) -> Reply | None:
            """The reply to one message of the front end (:func:`answer_message`)."""
            return answer_message(self.traces, message)

        def _on_request(self, _widget: Any, content: Any, buffers: Sequence[bytes]) -> None:
            reply = self.answer(content)
            if reply is not None:
                self.send(reply)

    ExplorerWidget.__module__ = __name__
    return ExplorerWidget


def __getattr__(name: str) -> Any:
    """``ExplorerWidget``: the widget class, made when first asked for (anywidget is an
    optional dependency)."""
    if name == "ExplorerWidget":
        return _widget_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def widget(traces: Any, *, config: ExplorerConfig | None = None, layer: int = 0,
           head: int = 0, stack: str | None = None, progress: bool = False) -> Any:
    """The explorer of ``traces`` as a live Jupyter widget (an ``anywidget.AnyWidget``).

    ``traces``, ``config``, ``layer``, ``head`` and ``stack`` are those of
    :class:`~attnlab.viz.explorer.Explorer` (an AttentionTrace, a StackedTrace or a list of
    them); ``progress`` shows a progress bar over the one pass that builds the page's data.
    Display it (the cell's last value, or ``IPython.display.display``): the page asks this
    kernel for exact rows, tiles, QK data and attribution rows as ``attnlab serve`` would
    answer them, for as long as the kernel runs. Needs ``anywidget``
    (``pip install 'attnlab[widget]'``).
    """
    cls = _widget_class()
    probe = Explorer(traces, config=config, layer=layer, head=head, stack=stack)
    api = [f"{API_PREFIX}{i}" for i in range(len(probe.traces))]
    ex = Explorer(traces, config=config, layer=layer, head=head, stack=stack, api=api)
    ex.payload(progress)
    return cls(ex)
