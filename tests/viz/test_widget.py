"""The explorer as a Jupyter widget (attnlab.viz.widget): the kernel answers the page's
requests with the functions the trace server's routes call, so every answer equals the
server's and the trace's own on-demand methods; a bad request gets an error naming the
parameter. In a real JupyterLab with a real kernel, the widget renders in Chromium and a
click on a token shows the exact row the kernel computed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from test_attribution_view import value_trace

from attnlab.serve.trace_api import create_trace_app, trace_router
from attnlab.viz.api import ENDPOINTS
from attnlab.viz.assets import static_asset
from attnlab.viz.codec import decode_blob
from attnlab.viz.payload import ExplorerConfig
from attnlab.viz.widget import API_PREFIX, widget, widget_esm
from limits import CHILD_S, PAGE_S
from servers import free_port

TESTS = Path(__file__).resolve().parent.parent
N = 40  # above max_tokens below: the page is pooled, exact rows come from the kernel
CONFIG = ExplorerConfig(max_tokens=16)


@pytest.fixture(scope="module")
def trace():
    """q, k, v, the output projection and RoPE: every request has something to answer."""
    return value_trace(N, layers=2, heads=4, kv_heads=2)


@pytest.fixture(scope="module")
def wd(trace):
    return widget(trace, config=CONFIG)


@pytest.fixture(scope="module")
def client(trace):
    return TestClient(create_trace_app([trace], explorer=CONFIG), base_url="http://127.0.0.1")


def _ask(wd, path, params, *, api=f"{API_PREFIX}0", rid="r1"):
    """One request through the widget's comm handler (what a message from the front end
    runs); returns what the widget sent back."""
    sent = []
    wd.send = lambda content, buffers=None: sent.append(content)
    try:
        wd._handle_custom_msg({"kind": "attnlab-request", "id": rid, "api": api,
                               "path": path, "params": params}, [])
    finally:
        del wd.send
    assert len(sent) == 1, sent
    assert sent[0]["kind"] == "attnlab-response" and sent[0]["id"] == rid
    return sent[0]


def test_the_page_asks_the_kernel(wd, trace):
    data = json.loads(wd._payload)
    assert [t["api"] for t in data["traces"]] == [f"{API_PREFIX}0"]
    assert data["traces"][0]["pooled"]  # the page has pooled maps only: rows come on demand
    assert wd.traces == {f"{API_PREFIX}0": trace}
    esm = widget_esm()
    assert esm.startswith(static_asset("explorer.js"))  # the page's own script, whole
    assert "export default" in esm and "AX.commTransport(model)" in esm
    assert wd._css == static_asset("explorer.css")


@pytest.mark.parametrize("queries,qs", [("3", [3]), (7, [7]), ("3,7,9", [3, 7, 9]),
                                        ("10:20", list(range(10, 20)))])
def test_rows_are_the_traces_exact_rows(wd, trace, queries, qs):
    got = _ask(wd, "rows", {"layer": 1, "head": 2, "queries": queries, "top": 5})
    assert got["status"] == 200
    body = got["body"]
    assert body["queries"] == qs and body["weights"]["dtype"] == "f32"
    w = decode_blob(body["weights"]).float()  # float32 values, exactly
    assert torch.equal(w, trace.weights_rows(1, 2, qs).float())  # bit for bit: the same call
    shifted = trace.weights_rows(1, 2, [q + 1 for q in qs]).float()
    assert not torch.equal(w, shifted)  # the comparison tells one row from the next
    vals, idx = torch.topk(trace.weights_rows(1, 2, qs).float()[0], 5)  # the first row's
    assert body["top_indices"] == idx.tolist() and body["top_values"] == vals.tolist()


@pytest.mark.parametrize("path,params", [
    ("rows", {"layer": 0, "head": 3, "queries": "0:40", "encoding": "list"}),
    ("tile", {"layer": 1, "head": 0, "rows": "5:17", "cols": "0:9"}),
    ("pooled", {"layer": 0, "head": 1, "block": 8}),
    ("topk", {"layer": 1, "head": 3, "query": 33, "k": 6}),
    ("topk", {"layer": 1, "head": 3, "query": 33}),  # the route's default k
    ("qk", {"layer": 0, "head": 2, "query": 30, "top": 7}),
    ("attribution/rows", {"kind": "value", "layer": 1, "head": 2, "rows": "3,30"}),
    ("attribution/rows", {"kind": "value", "layer": 0, "rows": 12}),  # the layer's heads
    ("attribution/rows", {"kind": "rollout", "rows": "0:40"}),
    ("attribution/rows", {"kind": "weights", "layer": 1, "head": 0, "rows": "39",
                          "encoding": "list"}),
    ("score_parts", {"layer": 1, "head": 3, "i": 30, "j": 4}),
    ("score_parts", {"layer": 0, "head": 1, "i": 20, "j": 20, "pairing": "interleaved"}),
])
def test_every_answer_is_the_servers(wd, client, path, params):
    got = _ask(wd, path, params)
    served = client.get(f"/api/traces/t1/{path}", params=params)
    assert served.status_code == 200 and got["status"] == 200
    assert got["body"] == served.json()


def test_the_widget_answers_every_request_the_server_routes():
    """ENDPOINTS declares each route's parameters as FastAPI reads them from the router."""
    from fastapi.routing import APIRoute

    from attnlab.serve.trace_api import TraceStore

    prefix = "/api/traces/{tid}/"
    routes = {r.path[len(prefix):]: r for r in trace_router(TraceStore()).routes
              if isinstance(r, APIRoute) and r.path.startswith(prefix)}
    routes.pop("explorer")  # the page's data itself: the widget carries it
    assert set(routes) == set(ENDPOINTS)
    for path, route in routes.items():
        declared = [(f.name, f.field_info.is_required(),
                     None if f.field_info.is_required() else f.field_info.default)
                    for f in route.dependant.query_params]
        mine = [(p.name, p.required, None if p.required else p.default)
                for p in ENDPOINTS[path].params]
        assert mine == declared, path


@pytest.mark.parametrize("path,params,api,status,message", [
    ("rows", {"head": 0, "queries": "1"}, None, 422,
     "layer is required for 'rows' (an integer), got none"),
    ("rows", {"layer": "x", "head": 0, "queries": "1"}, None, 422,
     "layer must be an integer, got 'x'"),
    ("rows", {"layer": True, "head": 0, "queries": "1"}, None, 422,
     "layer must be an integer, got True"),
    ("rows", {"layer": 2, "head": 0, "queries": "1"}, None, 422,
     "layer must be in [0, 2), got 2"),
    ("rows", {"layer": 0, "head": 0, "queries": "40"}, None, 422,
     "queries must be in [0, 40), got 40"),
    ("rows", {"layer": 0, "head": 0, "queries": [1, 2]}, None, 422,
     "queries must be a string, got [1, 2]"),
    ("rows", {"layer": 0, "head": 0, "queries": "1", "row": 3}, None, 422,
     "got unknown parameter(s) ['row']"),
    ("rows", {"layer": 0, "head": 0, "queries": "1", "encoding": "xml"}, None, 422,
     "encoding must be 'b64' or 'list', got 'xml'"),
    ("tile", {"layer": 0, "head": 0, "rows": "5:2", "cols": "0:4"}, None, 422,
     "rows must satisfy 0 <= start < stop <= 40"),
    ("topk", {"layer": 0, "head": 0, "query": 3, "k": 0}, None, 422, "k must be in [1, 256]"),
    ("attribution/rows", {"kind": "rollout", "layer": 0, "rows": "1"}, None, 422,
     "layer must be omitted for kind 'rollout'"),
    ("attribution/rows", {"kind": "value", "layer": 0, "head": 0}, None, 422,
     "rows is required for 'attribution/rows' (a string), got none"),
    ("score_parts", {"layer": 0, "head": 0, "i": 3, "j": 40}, None, 422,
     "j must be an int in [0, 40), got 40"),
    ("rows", {"layer": 0, "head": 0, "queries": "1"}, "kernel:9", 404,
     "api must be one of ['kernel:0'], got 'kernel:9'"),
    ("weights", {"layer": 0}, None, 404, "path must be one of"),
])
def test_bad_requests_get_an_error_naming_the_parameter(wd, path, params, api, status,
                                                        message):
    got = _ask(wd, path, params, **({"api": api} if api else {}))
    assert got["status"] == status
    assert message in got["body"]["error"]


def test_value_errors_have_the_servers_status_and_message(wd, client):
    bad = {"layer": 0, "head": 0, "queries": "0:300"}
    got, served = _ask(wd, "rows", bad), client.get("/api/traces/t1/rows", params=bad)
    assert got["status"] == served.status_code == 422
    assert got["body"] == served.json()


def test_other_messages_are_not_answered(wd):
    sent = []
    wd.send = lambda content, buffers=None: sent.append(content)
    try:
        wd._handle_custom_msg({"kind": "something-else", "id": 1}, [])
        wd._handle_custom_msg("text", [])
    finally:
        del wd.send
    assert sent == []


def test_without_anywidget_the_error_names_the_extra(monkeypatch, trace):
    from attnlab.viz import widget as module

    module._widget_class.cache_clear()
    monkeypatch.setitem(sys.modules, "anywidget", None)  # as if it were not installed
    try:
        with pytest.raises(ImportError, match=r"pip install 'attnlab\[widget\]'"):
            widget(trace)
    finally:
        module._widget_class.cache_clear()
    monkeypatch.undo()
    assert type(widget(trace, config=CONFIG)).__name__ == "ExplorerWidget"


@pytest.mark.browser
def test_the_comm_transport_matches_answers_to_requests(page):
    """core.js's commTransport on a stand-in model (what anywidget hands render): an answer
    resolves its own request only, a refusal rejects with the kernel's message, silence
    times out, close() stops listening and rejects what waits."""
    page.set_content("<!DOCTYPE html><html><body><script>" + static_asset("explorer.js") +
                     "</script></body></html>")
    got = page.evaluate("""async () => {
      const sent = [], handlers = [];
      const model = {send: m => sent.push(m), on: (ev, f) => handlers.push([ev, f]),
                     off: (ev, f) => handlers.splice(handlers.findIndex(h => h[1] === f), 1)};
      const emit = m => handlers.forEach(([ev, f]) => ev === "msg:custom" && f(m, []));
      const ask = window.AttnlabExplorer.commTransport(model, 300);
      const a = ask("kernel:0", "rows", {layer: 1, head: 2, queries: 5});
      const b = ask("kernel:0", "tile", {layer: 0, head: 0, rows: "0:2", cols: "0:2"});
      emit({kind: "attnlab-response", id: sent[1].id, status: 422,
            body: {error: "rows must be a span"}});
      emit({kind: "attnlab-response", id: "someone-else:1", status: 200, body: {x: 0}});
      emit({kind: "other", id: sent[0].id, status: 200, body: {x: 1}});
      emit({kind: "attnlab-response", id: sent[0].id, status: 200, body: {queries: [5]}});
      const out = {sent: sent.map(m => [m.kind, m.api, m.path, m.params]),
                   ids: new Set(sent.map(m => m.id)).size,
                   a: await a, b: await b.catch(e => "rejected: " + e.message)};
      out.late = await ask("kernel:0", "qk", {query: 1}).catch(e => e.message);
      const pending = ask("kernel:0", "qk", {query: 2});
      ask.close();
      out.closed = await pending.catch(e => e.message);
      out.listening = handlers.length;
      return out;
    }""")
    assert got["sent"] == [
        ["attnlab-request", "kernel:0", "rows", {"layer": 1, "head": 2, "queries": 5}],
        ["attnlab-request", "kernel:0", "tile",
         {"layer": 0, "head": 0, "rows": "0:2", "cols": "0:2"}]]
    assert got["ids"] == 2
    assert got["a"] == {"queries": [5]}  # its own answer, not another request's or kind's
    assert got["b"] == "rejected: rows must be a span"
    assert got["late"] == "the kernel did not answer within 0.3 s"
    assert got["closed"] == "the widget was closed" and got["listening"] == 0


# --------------------------------------------------------------------------------------
# a real JupyterLab, a real kernel, a real browser
# --------------------------------------------------------------------------------------

LAYER, HEAD, QUERY = 1, 2, 5

CELL = f"""\
import json, sys
sys.path.insert(0, {str(TESTS)!r})
import torch
from random_models import random_llama
from attnlab.tracing import trace
from attnlab.viz.payload import ExplorerConfig
from attnlab.viz.widget import widget

model = random_llama(layers=2, heads=4, kv_heads=2, hidden=32, positions=64)
ids = torch.randint(1, 97, (24,), generator=torch.Generator().manual_seed(0)).tolist()
t = trace(model, ids)
rows = t.weights_rows({LAYER}, {HEAD}, list(range(t.seq_len))).float()
with open("kernel_rows.json", "w") as f:
    json.dump({{"rows": rows.tolist(), "pid": __import__("os").getpid()}}, f)
# pooled: 4 blocks of 6 tokens, so the page holds no exact row
widget(t, config=ExplorerConfig(max_tokens=8, pooled_blocks=4), layer={LAYER}, head={HEAD})
"""


@contextlib.contextmanager
def jupyter_lab(folder: Path):
    """JupyterLab on a free local port with its own config, data and runtime folders (the
    venv's lab extensions, anywidget's among them, are found through sys.prefix); yields
    (base URL, token)."""
    token, port = os.urandom(12).hex(), free_port()
    env = dict(os.environ)
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        (folder / name.lower()).mkdir()
        env[name] = str(folder / name.lower())
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--IdentityProvider.token={token}",
           "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
           "--ServerApp.port_retries=0", f"--ServerApp.root_dir={folder}",
           "--LabApp.news_url=None", "--LabApp.check_for_updates_class="
           "jupyterlab.NeverCheckForUpdate", "--LabApp.extension_manager=readonly"]
    if os.geteuid() == 0:  # CI's containers run as root
        cmd.append("--allow-root")
    log = open(folder / "lab.log", "wb")
    proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + CHILD_S
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("JupyterLab did not start:\n" + (
                        folder / "lab.log").read_text(errors="replace")[-3000:]) from None
                time.sleep(0.2)
        yield url, token
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # the server and its kernel: our own group
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _run_first_cell(page) -> None:
    """Run the notebook's first cell once its kernel is connected (the status bar says
    Idle); a run pressed while the front end is still connecting is dropped, so it is
    pressed again until the cell's prompt shows it queued or running. Each press waits
    10 s for the prompt (a retry interval, not a limit); the presses go on for PAGE_S."""
    page.wait_for_selector(".jp-StatusBar-Item >> text=/Python 3.*Idle/")
    prompt = page.locator(".jp-Notebook .jp-Cell").first.locator(".jp-InputPrompt")
    deadline = time.monotonic() + PAGE_S
    while time.monotonic() < deadline:
        page.locator(".jp-Notebook .jp-Cell .cm-content").first.click()
        page.keyboard.press("Control+Enter")  # run, stay on the cell
        try:
            page.wait_for_function("e => /\\[(\\*|\\d+)\\]/.test(e.textContent)",
                                   arg=prompt.element_handle(), timeout=10_000)
            return
        except Exception:
            continue
    raise AssertionError(f"the cell never ran; its prompt reads {prompt.text_content()!r}")


@pytest.mark.slow
@pytest.mark.browser
def test_in_jupyterlab_a_click_shows_the_row_the_kernel_computed(page, tmp_path,
                                                                  artifacts_dir):
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CELL)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, tmp_path / "widget.ipynb")
    http_paths: list[str] = []
    page.on("request", lambda r: http_paths.append(r.url.split("?")[0]))
    with jupyter_lab(tmp_path) as (url, token):
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.goto(f"{url}/lab/tree/widget.ipynb?token={token}")
        page.wait_for_selector(".jp-Notebook .jp-Cell .cm-content")
        _run_first_cell(page)
        root = ".jp-OutputArea .attnlab-explorer[data-transport='kernel'][data-ready]"
        try:
            page.wait_for_selector(root)
        except Exception:
            page.screenshot(path=str(artifacts_dir / "explorer-widget-jupyterlab-failed.png"))
            raise
        kernel = json.loads((tmp_path / "kernel_rows.json").read_text())
        assert kernel["pid"] != os.getpid()  # computed in the notebook's kernel, not here
        assert page.locator(f"{root} .ax-sblock").count() == 4  # pooled, 4 blocks of 6
        page.click(f"{root} .ax-t[data-i='{QUERY}']")
        page.wait_for_selector(f"{root} .ax-rowinfo[data-row='{LAYER}:{HEAD}:{QUERY}']")
        shown = page.eval_on_selector_all(
            f"{root} .ax-t[data-w]", "els => els.map(e => [+e.dataset.i, e.dataset.w])")
        tops = page.eval_on_selector_all(f"{root} .ax-topkey",
                                         "els => els.map(e => +e.dataset.key)")
        page.screenshot(path=str(artifacts_dir / "explorer-widget-jupyterlab.png"))
        page.goto("about:blank")  # leave before the server stops (no reconnection errors)
    row = kernel["rows"][QUERY]
    # causal: row 5 sees keys 0..5, every one in the block on show (tokens 0..5)
    assert [i for i, _ in shown] == list(range(QUERY + 1))
    assert [float(w) for _, w in shown] == row[:QUERY + 1]  # float32 from the kernel, as is
    assert [float(w) for _, w in shown] != kernel["rows"][QUERY - 1][:QUERY + 1]
    seen = sorted(range(QUERY + 1), key=lambda j: -row[j])  # the keys of weight > 0 first
    assert tops[:QUERY + 1] == seen and len(tops) == 8  # (the rest: zeros, in any order)
    assert not [p for p in http_paths if p.endswith(("/rows", "/tile", "/qk"))]  # no HTTP
