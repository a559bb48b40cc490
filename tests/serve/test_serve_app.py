"""The explorer API: every bad input gets a 4xx JSON error that says what is wrong."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from attnlab.serve import ServeConfig, create_app
from attnlab.viz.explorer import decode_blob


@pytest.fixture(scope="module")
def client(toy_tracer):
    return TestClient(create_app({"toy-gpt": toy_tracer}, max_chars=50))


def test_healthz_models_and_openapi(client):
    assert client.get("/healthz").json() == {"status": "ok", "models": ["toy-gpt"],
                                             "max_chars": 50}
    assert client.get("/api/models").json()["models"] == ["toy-gpt"]
    schema = client.get("/openapi.json").json()
    assert "/api/explore" in schema["paths"] and "/healthz" in schema["paths"]
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


@pytest.mark.parametrize("body, status, message", [
    (b"{not json", 422, "JSON"),
    (b'{"model": "toy-gpt"}', 422, "text: Field required"),
    (b'{"model": "toy-gpt", "text": 5}', 422, "text: Input should be a valid string"),
    (b'{"model": "toy-gpt", "text": "a", "extra": 1}', 422, "extra"),
    (b'{"model": "toy-gpt", "text": "   "}', 422, "text is empty"),
    (b'{"model": "toy-gpt", "text": "ok", "text2": ""}', 422, "text2 is empty"),
    (b'{"model": "toy-gpt", "text": "' + b"x" * 51 + b'"}', 413,
     "text has 51 characters; the limit is 50"),
    (b'{"model": "gpt-9", "text": "hi"}', 404, "unknown model 'gpt-9'"),
])
def test_bad_requests_get_4xx_with_a_message(client, body, status, message):
    r = client.post("/api/explore", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status
    assert message in r.json()["error"]


def test_model_refusal_is_a_4xx_not_a_crash(toy_tracer):
    c = TestClient(create_app({"toy-gpt": toy_tracer}, max_chars=5000))
    r = c.post("/api/explore", json={"model": "toy-gpt", "text": "x" * 600})
    assert r.status_code == 422 and "toy-gpt takes 512" in r.json()["error"]


def test_configuration_is_checked(toy_tracer):
    with pytest.raises(ValueError, match="at least one model"):
        create_app({})
    with pytest.raises(ValueError, match="max_chars"):
        create_app({"toy-gpt": toy_tracer}, max_chars=0)
    with pytest.raises(ValueError, match="port"):
        ServeConfig(port=70000)
    assert ServeConfig().host == "127.0.0.1"
