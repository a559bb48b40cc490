"""The trace server (attnlab.serve.trace_api) on a saved trace, through FastAPI's TestClient:
every answer equals the trace's own on-demand methods; every refusal is a 4xx JSON error."""

from __future__ import annotations

import pytest
import torch
from explorer_traces import synthetic_trace
from fastapi.testclient import TestClient

from attnlab.serve.trace_api import (
    MAX_ROWS,
    TraceStore,
    create_trace_app,
    qk_data,
    trace_bytes,
)
from attnlab.tracing.attention import AttentionTrace
from attnlab.viz.explorer import decode_blob, qk_row_probs
from limits import CHILD_S

LOCAL = "http://127.0.0.1"  # the server answers local names only
N = 300  # above the explorer's max_tokens: the page is pooled, the server gives the rest


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> AttentionTrace:
    t = synthetic_trace(N, layers=2, heads=4, kv_heads=2, window=64)
    path = t.save(tmp_path_factory.mktemp("trace") / "t.safetensors")
    return AttentionTrace.load(path)


@pytest.fixture(scope="module")
def client(saved):
    return TestClient(create_trace_app([saved]), base_url=LOCAL)


def _get(client, path, **params):
    r = client.get(path, params=params)
    assert r.status_code == 200, r.text
    return r.json()


def test_lists_and_describes_the_trace(client, saved):
    listed = _get(client, "/api/traces")["traces"]
    assert [t["id"] for t in listed] == ["t1"] and listed[0]["seq_len"] == N
    info = _get(client, "/api/traces/t1")
    assert info["num_kv_heads"] == 2 and info["tokens"] == saved.tokens
    assert info["score_shape"][0] == saved.score_shape(0).describe()
    assert _get(client, "/healthz") == {"status": "ok", "traces": ["t1"]}


def test_rows_are_the_traces_exact_rows(client, saved):
    got = _get(client, "/api/traces/t1/rows", layer=1, head=3, queries="5,150,299", top=4)
    w = decode_blob(got["weights"]).float()
    assert torch.equal(w, saved.weights_rows(1, 3, [5, 150, 299]))  # float32, bit for bit
    assert torch.allclose(w.sum(-1), torch.ones(3), atol=1e-5)
    vals, idx = torch.topk(w[0], 4)
    assert got["top_indices"] == idx.tolist() and got["top_values"] == pytest.approx(vals.tolist())
    span = _get(client, "/api/traces/t1/rows", layer=0, head=0, queries="10:13",
                encoding="list")
    assert span["queries"] == [10, 11, 12]
    assert torch.equal(torch.tensor(span["weights"]), saved.weights_rows(0, 0, range(10, 13)))
    other = decode_blob(_get(client, "/api/traces/t1/rows", layer=1, head=2,
                             queries="5")["weights"])
    assert not torch.allclose(other[0].float(), w[0])  # another head is another row


def test_tiles_pooled_and_topk_are_the_traces(client, saved):
    tile = _get(client, "/api/traces/t1/tile", layer=0, head=1, rows="100:164", cols="40:110")
    assert tile["rows"] == [100, 164] and tile["cols"] == [40, 110]
    assert torch.equal(decode_blob(tile["weights"]).float(),
                       saved.weights_tile(0, 1, range(100, 164), range(40, 110)))
    pooled = decode_blob(_get(client, "/api/traces/t1/pooled", layer=1, head=0,
                              block=32)["weights"])
    assert torch.allclose(pooled.float(), saved.pooled(1, 0, 32))
    assert torch.allclose(pooled.sum(-1), torch.ones(pooled.shape[0], dtype=torch.float64),
                          atol=1e-5)
    top = _get(client, "/api/traces/t1/topk", layer=1, head=1, query=200, k=5)
    vals, idx = saved.topk(1, 1, 200, 5)
    assert top["indices"] == idx.tolist() and top["values"] == pytest.approx(vals.tolist())
    assert top["tokens"] == [saved.tokens[i] for i in idx.tolist()]


def test_qk_view_data_recomputes_the_row_at_any_scale(client, saved):
    layer, head, i = 1, 3, 250
    got = _get(client, "/api/traces/t1/qk", layer=layer, head=head, query=i, top=8)
    dots, ok = decode_blob(got["dots"]), decode_blob(got["allowed"]).bool()
    assert got["bias"] is None and got["softcap"] is None
    exact = saved.weights_rows(layer, head, [i])[0]
    assert torch.equal(decode_blob(got["weights"]).float(), exact)
    assert ok.sum() == 64 and bool(ok[i]) and not bool(ok[i - 64])  # the sliding window

    def page(scale: float) -> torch.Tensor:  # what explorer.js computes from this answer
        z = (dots * scale).masked_fill(~ok, float("-inf"))
        return torch.softmax(z, -1)

    assert torch.allclose(page(got["scale"]), exact.double(), atol=1e-6)
    shape = saved.score_shape(layer)
    q, k = saved.q[layer, head, i][None], saved.k[layer, saved.kv_head(head)]
    python = qk_row_probs(q, k, shape, rows=[i], lq=N, lk=N, head=head, scale=1.0)[0]
    assert torch.allclose(page(1.0), python, atol=1e-9)
    assert (page(1.0) - exact.double()).abs().max() > 1e-3  # the scale really matters
    strongest = torch.topk(exact, 8).indices.tolist()
    assert set(strongest) <= set(got["keys"]) and i in got["keys"]
    assert got["keys"] == sorted(got["keys"])
    kv = decode_blob(got["k"]).float()
    assert torch.equal(kv, k[got["keys"]])


def test_qk_data_carries_alibi_and_softcap_so_the_page_is_exact():
    t = synthetic_trace(40, layers=1, heads=2, softcap=1.5,
                        alibi_slopes=torch.tensor([0.3, 0.05]))
    got = qk_data(t, 0, 1, 30, top=5)
    dots, ok = decode_blob(got["dots"]), decode_blob(got["allowed"]).bool()
    bias = decode_blob(got["bias"])
    z = torch.tanh(dots * got["scale"] / got["softcap"]) * got["softcap"] + bias
    p = torch.softmax(z.masked_fill(~ok, float("-inf")), -1)
    exact = t.weights_rows(0, 1, [30])[0].double()
    assert torch.allclose(p, exact, atol=1e-6)
    no_bias = torch.softmax((torch.tanh(dots * got["scale"] / got["softcap"]) * got["softcap"])
                            .masked_fill(~ok, float("-inf")), -1)
    assert (no_bias - exact).abs().max() > 1e-3


def test_served_page_and_explorer_data_point_at_this_server(client, saved):
    page = client.get("/")
    assert page.status_code == 200 and "AttnlabExplorer" in page.text
    assert "connect-src 'self'" in page.text  # the page may talk to this server only
    data = _get(client, "/api/traces/t1/explorer")
    tr = data["traces"][0]
    assert tr["api"] == "/api/traces/t1" and tr["pooled"] and len(tr["tokens"]) == N
    assert client.get("/traces/t1").text == page.text


@pytest.mark.parametrize("path, params, status, message", [
    ("/api/traces/t9/rows", {"layer": 0, "head": 0, "queries": "1"}, 404, "no trace 't9'"),
    ("/api/traces/t1/rows", {"layer": 2, "head": 0, "queries": "1"}, 422,
     "layer must be in [0, 2), got 2"),
    ("/api/traces/t1/rows", {"layer": 0, "head": 4, "queries": "1"}, 422,
     "head must be in [0, 4), got 4"),
    ("/api/traces/t1/rows", {"layer": 0, "head": 0, "queries": "300"}, 422,
     "queries must be in [0, 300), got 300"),
    ("/api/traces/t1/rows", {"layer": 0, "head": 0, "queries": "a,b"}, 422,
     "queries must be 'i', 'i,j,…' or 'start:stop'"),
    ("/api/traces/t1/rows", {"layer": 0, "head": 0, "queries": f"0:{MAX_ROWS + 1}"}, 413,
     f"the limit is {MAX_ROWS}"),
    ("/api/traces/t1/rows", {"layer": "x", "head": 0, "queries": "1"}, 422,
     "layer: Input should be a valid integer"),
    ("/api/traces/t1/rows", {"head": 0, "queries": "1"}, 422, "layer: Field required"),
    ("/api/traces/t1/rows", {"layer": 0, "head": 0, "queries": "1", "encoding": "xml"}, 422,
     "encoding must be 'b64' or 'list'"),
    ("/api/traces/t1/tile", {"layer": 0, "head": 0, "rows": "5:2", "cols": "0:4"}, 422,
     "rows must satisfy 0 <= start < stop <= 300"),
    ("/api/traces/t1/tile", {"layer": 0, "head": 0, "rows": "0:4", "cols": "x"}, 422,
     "cols must be a span 'start:stop'"),
    ("/api/traces/t1/pooled", {"layer": 0, "head": 0, "block": 0}, 422,
     "block must be in [1, 300]"),
    ("/api/traces/t1/topk", {"layer": 0, "head": 0, "query": 3, "k": 0}, 422,
     "k must be in [1, 256]"),
    ("/api/traces/t1/qk", {"layer": 0, "head": 0, "query": -1}, 422,
     "query must be in [0, 300), got -1"),
])
def test_bad_requests_get_4xx_with_a_message(client, path, params, status, message):
    r = client.get(path, params=params)
    assert r.status_code == status
    assert message in r.json()["error"]


def test_only_local_host_names_are_answered(saved):
    c = TestClient(create_trace_app([saved], allowed_hosts=["lab.example"]), base_url=LOCAL)
    assert c.get("/healthz", headers={"Host": "localhost:8000"}).status_code == 200
    assert c.get("/healthz", headers={"Host": "lab.example"}).status_code == 200
    r = c.get("/api/traces", headers={"Host": "evil.example"})
    assert r.status_code == 400 and "Host header 'evil.example' is not allowed" in \
        r.json()["error"]


def test_qk_of_a_trace_without_q_and_k_is_refused():
    w = torch.softmax(torch.randn(1, 1, 4, 4), -1)
    dense = AttentionTrace(tokens=list("abcd"), weights=w)
    c = TestClient(create_trace_app([dense]), base_url=LOCAL)
    r = c.get("/api/traces/t1/qk", params={"layer": 0, "head": 0, "query": 1})
    assert r.status_code == 409 and "made without qkv" in r.json()["error"]
    rows = c.get("/api/traces/t1/rows", params={"layer": 0, "head": 0, "queries": "1"})
    assert torch.equal(decode_blob(rows.json()["weights"]).float(), w[0, 0, 1:2])


def test_store_keeps_the_newest_traces():
    store = TraceStore(capacity=2)
    t = synthetic_trace(8, layers=1, heads=1)
    ids = [store.add(t) for _ in range(3)]
    assert ids == ["t1", "t2", "t3"] and store.ids() == ["t2", "t3"]
    with pytest.raises(KeyError, match="no trace 't1'"):
        store.get("t1")
    small = TraceStore(max_bytes=trace_bytes(t) + 1)
    small.add(t)
    assert small.ids() == ["t1"] and [small.add(t) for _ in range(2)] == ["t2", "t3"]
    assert small.ids() == ["t3"]  # one trace's worth of bytes: only the newest stays
    with pytest.raises(ValueError, match="capacity must be a positive int"):
        TraceStore(capacity=0)
    with pytest.raises(TypeError, match="trace must be an AttentionTrace"):
        store.add("t")
    with pytest.raises(ValueError, match="at least one AttentionTrace"):
        create_trace_app([])


def test_attnlab_serve_trace_opens_a_saved_file(saved, tmp_path, capsys):
    """The command: `attnlab serve --trace FILE` serves it; no --model/--trace is a usage error."""
    import json
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    from attnlab.cli import main

    assert main(["serve"]) == 2
    assert "serve needs --model NAME or --trace FILE" in capsys.readouterr().err
    path = saved.save(tmp_path / "t.safetensors")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "attnlab", "serve", "--trace", str(path),
                             "--port", str(port), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/api/traces/t1/rows?layer=1&head=2&queries=7&encoding=list"
        deadline = time.monotonic() + CHILD_S
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    got = json.load(r)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError(proc.stderr.read().decode() if proc.poll() is not None
                                         else "the server did not answer") from None
                time.sleep(0.25)
        assert torch.equal(torch.tensor(got["weights"]), saved.weights_rows(1, 2, [7]))
    finally:
        proc.terminate()
        proc.wait(timeout=CHILD_S)
