"""A page on another site cannot use the server: the requests a browser sends from any page
without a preflight (a text/plain or form body, an Origin that is not the server's own) are
refused before any model runs, a preflight grants nothing, and the server's own page and
clients without an Origin (curl, scripts) still work. Real uvicorn, real HTTP."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import httpx
import pytest

from limits import CHILD_S

EVIL = "http://evil.example"
BODY = json.dumps({"model": "toy-gpt", "text": "hello there"})


def _post(url, content, content_type, origin=None, host=None):
    headers = {} if content_type is None else {"Content-Type": content_type}
    if origin is not None:
        headers["Origin"] = origin
    if host is not None:
        headers["Host"] = host
    return httpx.post(f"{url}/api/explore", content=content, headers=headers, timeout=CHILD_S)


def _error(r, status, *parts):
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    assert list(r.json()) == ["error"]
    message = r.json()["error"]
    assert "\n" not in message
    for part in parts:
        assert part in message, (part, message)
    assert "access-control-allow-origin" not in r.headers
    return message


@pytest.mark.parametrize(("content", "content_type"), [
    (BODY, "text/plain"),  # JSON inside a "simple" body: no preflight before it is sent
    (BODY, "text/plain;charset=UTF-8"),  # what fetch() with a string body sends
    ("model=toy-gpt&text=hello", "application/x-www-form-urlencoded"),  # a <form> post
    ("--b\r\nContent-Disposition: form-data; name=model\r\n\r\ntoy-gpt\r\n--b--\r\n",
     "multipart/form-data; boundary=b"),
])
def test_a_cross_site_simple_request_runs_no_model(live_server, toy_tracer, content,
                                                   content_type):
    calls = toy_tracer.calls
    r = _post(live_server, content, content_type, origin=EVIL)
    _error(r, 403, "Origin", EVIL, urlsplit(live_server).netloc)
    # the same body without an Origin (as a script sends it): the wrong type, said so
    r = _post(live_server, content, content_type)
    _error(r, 415, "Content-Type", "application/json", content_type.split(";")[0])
    assert toy_tracer.calls == calls


def test_a_missing_content_type_is_refused(live_server, toy_tracer):
    calls = toy_tracer.calls
    r = _post(live_server, BODY, None)
    _error(r, 415, "Content-Type must be application/json", "none")
    assert toy_tracer.calls == calls


@pytest.mark.parametrize("origin", [EVIL, "null", "http://127.0.0.1:1",
                                    "https://127.0.0.1:{port}", "http://localhost:{port}"])
def test_any_origin_but_the_servers_own_is_refused(live_server, toy_tracer, origin):
    port = urlsplit(live_server).port
    origin = origin.format(port=port)
    calls = toy_tracer.calls
    r = _post(live_server, BODY, "application/json", origin=origin)
    _error(r, 403, "Origin", origin)
    r = httpx.get(f"{live_server}/api/models", headers={"Origin": origin}, timeout=CHILD_S)
    _error(r, 403, "Origin")
    assert toy_tracer.calls == calls


def test_a_preflight_grants_nothing(live_server):
    r = httpx.options(f"{live_server}/api/explore", timeout=CHILD_S, headers={
        "Origin": EVIL, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"})
    assert r.status_code >= 400
    assert not [h for h in r.headers if h.lower().startswith("access-control-")]


def test_same_origin_and_origin_less_requests_still_work(live_server, toy_tracer):
    port = urlsplit(live_server).port
    for origin, host, content_type in [
            (None, None, "application/json"),  # curl, scripts
            (live_server, None, "application/json"),  # the served page's own fetch()
            (live_server, None, "application/json; charset=utf-8"),
            (f"http://localhost:{port}", f"localhost:{port}", "Application/JSON")]:
        calls = toy_tracer.calls
        r = _post(live_server, BODY, content_type, origin=origin, host=host)
        assert r.status_code == 200, (origin, r.text)
        assert "access-control-allow-origin" not in r.headers
        assert toy_tracer.calls == calls + 1
    r = httpx.get(f"{live_server}/api/models", headers={"Origin": live_server}, timeout=CHILD_S)
    assert r.status_code == 200 and r.json()["models"] == ["toy-gpt"]
