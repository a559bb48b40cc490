"""The explorer API: every bad input gets one JSON error shape, and nothing it refuses runs
a model or takes the inference lock."""

from __future__ import annotations

import threading

import httpx
import pytest
from fastapi.testclient import TestClient
from serve_helpers import serve_in_thread

from attnlab.serve import ServeConfig, create_app
from attnlab.viz.explorer import decode_blob
from limits import CHILD_S

LOCAL = "http://127.0.0.1"


def _client(app, base_url: str = LOCAL) -> TestClient:
    return TestClient(app, base_url=base_url)


@pytest.fixture(scope="module")
def client(toy_tracer):
    return _client(create_app({"toy-gpt": toy_tracer}, max_chars=50))


def test_healthz_models_and_openapi(client, toy_tracer):
    assert client.get("/healthz").json() == {"status": "ok", "models": ["toy-gpt"],
                                             "max_chars": 50}
    models = client.get("/api/models").json()
    assert models["models"] == ["toy-gpt"] and models["limits"]["toy-gpt"]["max_length"] == 512
    schema = client.get("/openapi.json").json()
    assert "/api/explore" in schema["paths"] and "/healthz" in schema["paths"]
    body = schema["paths"]["/api/explore"]["post"]["requestBody"]["content"]["application/json"]
    assert set(body["schema"]["properties"]) == {"model", "text", "text2"}
    page = client.get("/")
    assert page.status_code == 200 and "AttnlabExplorer" in page.text
    assert "connect-src 'self'" in page.text  # the page may talk to this server only


def test_valid_request_returns_the_explorer_data(client, toy_tracer):
    r = client.post("/api/explore", json={"model": "toy-gpt", "text": "hello </script>",
                                          "text2": "你好"})
    assert r.status_code == 200
    data = r.json()
    assert [t["tokens"] for t in data["traces"]] == [list("hello </script>"), ["你", "好"]]
    expected = toy_tracer("hello </script>").weights.double()
    assert float((decode_blob(data["traces"][0]["weights"]) - expected).abs().max()) < 1e-4


BAD = [
    (b"{not json", 422, "JSON decode error"),
    (b'{"model": "toy-gpt"}', 422, "text: Field required"),
    (b'{"model": "toy-gpt", "text": 5}', 422, "text: Input should be a valid string"),
    (b'{"model": "toy-gpt", "text": "a", "extra": 1}', 422, "extra"),
    (b'["model", "text"]', 422, "invalid request"),
    (b'{"model": "toy-gpt", "text": "   "}', 422, "text has no visible character"),
    (b'{"model": "toy-gpt", "text": ""}', 422, "text is empty"),
    (b'{"model": "toy-gpt", "text": "ok", "text2": ""}', 422, "text2 is empty"),
    ('{"model": "toy-gpt", "text": "\u200b\u200d\ufeff\u2060"}'.encode(), 422,
     "text has no visible character"),
    (b'{"model": "toy-gpt", "text": "' + b"x" * 51 + b'"}', 413,
     "text has 51 characters; the limit is 50"),
    (b'{"model": "gpt-9", "text": "hi"}', 404, "unknown model 'gpt-9'"),
    # a lone surrogate: valid JSON, invalid Unicode
    (b'{"model": "toy-gpt", "text": "a\\ud800b"}', 400, "lone surrogate U+D800"),
    (b'{"model": "toy-gpt", "text": "ok", "text2": "\\udfff"}', 400, "text2 holds a lone"),
    # bytes that are not UTF-8 (latin-1, and a surrogate encoded as if UTF-8)
    (b'{"model": "toy-gpt", "text": "caf\xe9"}', 400, "body is not UTF-8"),
    (b'{"model": "toy-gpt", "text": "\xed\xa0\x80"}', 400, "body is not UTF-8"),
    # deep JSON: Python's parser would recurse until it fails
    (b"[" * 30_000 + b"]" * 30_000, 400, "too deeply"),
    (b'{"model": "toy-gpt", "text": ' + b"[" * 40 + b"]" * 40 + b"}", 400, "too deeply"),
    (b"x" * 5_000_000, 413, "the limit is"),
]


@pytest.mark.parametrize("body, status, message", BAD, ids=range(len(BAD)))
def test_bad_requests_get_one_json_error_shape(client, toy_tracer, body, status, message):
    calls = toy_tracer.calls
    r = client.post("/api/explore", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status
    assert r.headers["content-type"] == "application/json"
    assert list(r.json()) == ["error"] and message in r.json()["error"]
    assert toy_tracer.calls == calls  # no model ran


@pytest.mark.parametrize("method, path, status, message", [
    ("GET", "/nope", 404, "not found: /nope"),
    ("GET", "/api/explore", 405, "method GET is not allowed on /api/explore; use POST"),
    ("DELETE", "/healthz", 405, "method DELETE is not allowed"),
    ("POST", "/", 405, "use GET"),
])
def test_unknown_paths_and_methods_use_the_same_shape(client, method, path, status, message):
    r = client.request(method, path)
    assert r.status_code == status and r.json() == {"error": r.json()["error"]}
    assert message in r.json()["error"]


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.nip.io",
                                  "localhost.evil.example", "10.1.2.3"])
def test_dns_rebinding_is_refused_by_the_host_allow_list(toy_tracer, host):
    c = _client(create_app({"toy-gpt": toy_tracer}))
    calls = toy_tracer.calls
    for method, path in (("GET", "/"), ("GET", "/api/models"), ("POST", "/api/explore")):
        r = c.request(method, path, headers={"Host": host},
                      json={"model": "toy-gpt", "text": "hi"})
        assert r.status_code == 400, (host, path)
        assert r.json()["error"].startswith(f"Host header {host!r} is not allowed")
    assert toy_tracer.calls == calls


def test_local_names_the_bound_address_and_allowed_names_are_answered(toy_tracer):
    app = create_app({"toy-gpt": toy_tracer}, host="10.0.0.5", allowed_hosts=("box.lan",))
    c = _client(app)
    for host in ("localhost", "localhost:8000", "127.0.0.1:8000", "[::1]:8000", "LOCALHOST",
                 "10.0.0.5:8000", "box.lan"):
        assert c.get("/healthz", headers={"Host": host}).status_code == 200, host
    # bound to every interface: that address is no name, so only local names are answered
    wide = _client(create_app({"toy-gpt": toy_tracer}, host="0.0.0.0"))
    assert wide.get("/healthz", headers={"Host": "0.0.0.0"}).status_code == 400
    assert wide.get("/healthz", headers={"Host": "127.0.0.1"}).status_code == 200


def test_memory_budget_is_checked_in_tokens_before_any_model_runs(toy_tracer):
    budget = toy_tracer.estimate(100)
    c = _client(create_app({"toy-gpt": toy_tracer}, max_memory=budget))
    limits = c.get("/api/models").json()["limits"]["toy-gpt"]
    n = limits["max_tokens"]
    assert toy_tracer.estimate(n) <= budget < toy_tracer.estimate(n + 1) and n >= 100
    calls = toy_tracer.calls
    r = c.post("/api/explore", json={"model": "toy-gpt", "text": "a" * (n + 1)})
    assert r.status_code == 413 and "above this server's budget" in r.json()["error"]
    assert toy_tracer.calls == calls
    # two texts share the budget: each fits alone, the two together do not
    m = 3 * n // 4
    assert toy_tracer.estimate(m) <= budget < 2 * toy_tracer.estimate(m)
    part = "b" * m
    r = c.post("/api/explore", json={"model": "toy-gpt", "text": part, "text2": part})
    assert r.status_code == 413 and toy_tracer.calls == calls
    assert c.post("/api/explore", json={"model": "toy-gpt", "text": "a" * n}).status_code == 200


class _ByteTokens:
    """A tracer whose tokenizer makes 3 tokens of every character (like byte-level BPE on
    Chinese text): the character limit alone would let a text through."""

    def __init__(self, toy):
        self.toy, self.max_length = toy, 512

    def count_tokens(self, text):
        return 3 * len(text)

    def estimate(self, n):
        return self.toy.estimate(n)

    def __call__(self, text):
        return self.toy(text)


def test_tokens_not_characters_are_counted(toy_tracer):
    c = _client(create_app({"bpe": _ByteTokens(toy_tracer)}, max_chars=1000))
    calls = toy_tracer.calls
    r = c.post("/api/explore", json={"model": "bpe", "text": "注" * 200})  # 200 chars, 600 tok
    assert r.status_code == 413
    assert r.json() == {"error": "text has 600 tokens; bpe accepts at most 512"}
    assert toy_tracer.calls == calls


def test_model_refusal_is_a_4xx_not_a_crash(toy_tracer):
    c = _client(create_app({"toy-gpt": lambda text: toy_tracer(text)}, max_chars=5000))
    r = c.post("/api/explore", json={"model": "toy-gpt", "text": "x" * 600})
    assert r.status_code == 422 and "toy-gpt takes 512" in r.json()["error"]


def test_an_unexpected_crash_is_a_json_500(toy_tracer):
    def broken(text):
        raise RuntimeError("boom")

    c = TestClient(create_app({"broken": broken}), base_url=LOCAL,
                   raise_server_exceptions=False)
    r = c.post("/api/explore", json={"model": "broken", "text": "hi"})
    assert r.status_code == 500 and r.json() == {
        "error": "internal error (RuntimeError); the server log has the details"}


def test_a_refused_request_does_not_wait_for_the_inference_lock(toy_tracer):
    """While one request holds the model, the refusals are answered at once."""
    started, release = threading.Event(), threading.Event()

    def slow(text):
        started.set()
        release.wait(CHILD_S)
        return toy_tracer(text)

    app = create_app({"slow": slow, "toy-gpt": toy_tracer}, max_chars=100,
                     max_memory=toy_tracer.estimate(50))
    with serve_in_thread(app) as url:
        holder = threading.Thread(target=httpx.post, args=(f"{url}/api/explore",),
                                  kwargs={"json": {"model": "slow", "text": "hold"},
                                          "timeout": CHILD_S})
        holder.start()
        try:
            assert started.wait(CHILD_S)
            refusals = [
                ({"model": "toy-gpt", "text": "x" * 80}, {}, 413),  # over the budget
                ({"model": "toy-gpt", "text": "\u200b"}, {}, 422),
                ({"model": "toy-gpt", "text": "a\ud800"}, {}, 400),
                ({"model": "toy-gpt", "text": "hi"}, {"Host": "evil.example"}, 400),
            ]
            for body, headers, status in refusals:
                content = __import__("json").dumps(body).encode()
                r = httpx.post(f"{url}/api/explore", content=content, timeout=CHILD_S,
                               headers={"Content-Type": "application/json", **headers})
                assert r.status_code == status and "error" in r.json()
                # answered while the lock is held: the slow request has not ended
                assert holder.is_alive() and not release.is_set()
        finally:
            release.set()
            holder.join(timeout=CHILD_S)


def test_configuration_is_checked(toy_tracer):
    with pytest.raises(ValueError, match="at least one model"):
        create_app({})
    with pytest.raises(ValueError, match="max_chars"):
        create_app({"toy-gpt": toy_tracer}, max_chars=0)
    with pytest.raises(ValueError, match="max_memory"):
        create_app({"toy-gpt": toy_tracer}, max_memory=0)
    with pytest.raises(ValueError, match="allowed_hosts"):
        ServeConfig(allowed_hosts="localhost")
    with pytest.raises(ValueError, match="port"):
        ServeConfig(port=70000)
    assert ServeConfig().host == "127.0.0.1"


def test_the_saved_trace_server_has_the_same_guards(toy_tracer):
    from attnlab.serve.trace_api import create_trace_app

    c = _client(create_trace_app([toy_tracer("hello")]))
    assert c.get("/healthz").status_code == 200
    for method, path, headers, status in (
            ("GET", "/healthz", {"Host": "evil.example"}, 400),
            ("GET", "/nope", {}, 404), ("POST", "/healthz", {}, 405),
            ("GET", "/api/traces/none/rows", {}, 422)):
        r = c.request(method, path, headers=headers)
        assert r.status_code == status and list(r.json()) == ["error"], (path, r.text)
