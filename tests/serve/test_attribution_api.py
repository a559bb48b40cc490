"""The trace server's attribution endpoints (/attribution/rows, /score_parts) on saved
traces: every answer is AttentionTrace's own value-weighted rows, rollout and score parts;
every bad parameter a 4xx naming it; a trace that lacks what a kind needs a 409 saying so;
and the explorer served for a long trace, in a real headless Chromium, shows the server's
numbers."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from attnlab.serve.trace_api import create_trace_app
from attnlab.tracing.attention import AttentionTrace
from attnlab.viz.codec import decode_blob
from attnlab.viz.explorer import ExplorerConfig
from servers import serve_in_thread

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "viz"))
from explorer_traces import synthetic_trace  # noqa: E402

LOCAL = "http://127.0.0.1"
N = 600  # above the explorer's max_tokens: the page is pooled and fetches the view's rows
TOL = 1e-5


def with_values(t: AttentionTrace, seed: int = 5, rotary: int = 12) -> AttentionTrace:
    """``t`` with random v and each head's slice of an output projection, and RoPE recorded
    as "half" pairing over ``rotary`` of its dimensions."""
    g = torch.Generator().manual_seed(seed)
    nl, nkv, lk, d = t.k.shape
    v = torch.randn(nl, nkv, lk, d, generator=g)
    out_proj = 0.4 * torch.randn(nl, t.num_heads, d, 24, generator=g)
    meta = {"positional": {"kind": "rope", "pairing": "half", "rotary_dim": rotary,
                           "freqs": [10000.0 ** (-2 * p / rotary) for p in range(rotary // 2)],
                           "base": 10000.0}}
    return AttentionTrace(t.tokens, q=t.q, k=t.k, lse=t.lse, v=v, out_proj=out_proj,
                          shapes=t.shapes, meta=meta, model="values")


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> AttentionTrace:
    t = with_values(synthetic_trace(N, layers=2, heads=4, kv_heads=2, d=16))
    return AttentionTrace.load(t.save(tmp_path_factory.mktemp("trace") / "values.safetensors"))


@pytest.fixture(scope="module")
def lacking():
    """A q/k trace without v, a trace of weights only, and a cross-attention stack."""
    no_v = synthetic_trace(20, layers=1, heads=2, d=8)
    w = torch.softmax(torch.randn(1, 2, 6, 6, generator=torch.Generator().manual_seed(1)), -1)
    dense = AttentionTrace(list("abcdef"), weights=w)
    cross = AttentionTrace(list("xy"), key_tokens=list("abc"), stack="cross",
                           weights=torch.softmax(torch.randn(1, 1, 2, 3), -1))
    return no_v, dense, cross


@pytest.fixture(scope="module")
def client(saved, lacking):
    return TestClient(create_trace_app([saved, *lacking]), base_url=LOCAL)


def _get(client, path, status=200, **params):
    r = client.get(path, params=params)
    assert r.status_code == status, r.text
    return r.json()


def test_rows_of_each_kind_are_the_traces(client, saved):
    rows = [5, 450, N - 1]
    got = _get(client, "/api/traces/t1/attribution/rows", kind="weights", layer=1, head=3,
               rows="5,450,599")
    assert torch.equal(decode_blob(got["values"]).float(), saved.weights_rows(1, 3, rows))
    assert (got["kind"], got["layer"], got["head"], got["rows"]) == ("weights", 1, 3, rows)
    value = decode_blob(_get(client, "/api/traces/t1/attribution/rows", kind="value", layer=1,
                             head=2, rows="5,450,599")["values"]).float()
    assert torch.equal(value, saved.value_weighted_rows(1, 2, rows))
    summed = _get(client, "/api/traces/t1/attribution/rows", kind="value", layer=1,
                  rows="5,450,599")
    whole = decode_blob(summed["values"]).float()
    assert summed["head"] is None and torch.equal(whole, saved.value_weighted_rows(1, None, rows))
    # the norm of the sum over heads is not any one head's, nor the sum of the heads' norms
    per_head = torch.stack([saved.value_weighted_rows(1, h, rows) for h in range(4)])
    assert (whole - value).abs().max() > 1e-2
    assert (per_head.sum(0) - whole).min() >= -1e-4 and (per_head.sum(0) - whole).max() > 1e-2
    roll = _get(client, "/api/traces/t1/attribution/rows", kind="rollout", rows="590:593")
    assert roll["values"]["dtype"] == "f64" and roll["layer"] is None
    assert torch.equal(decode_blob(roll["values"]), saved.rollout_rows(range(590, 593)))
    listed = _get(client, "/api/traces/t1/attribution/rows", kind="rollout", rows="7",
                  encoding="list")
    assert listed["values"] == saved.rollout_rows([7]).tolist()


def test_score_parts_are_the_traces(client, saved):
    got = _get(client, "/api/traces/t1/score_parts", layer=0, head=1, i=500, j=480)
    want = saved.score_parts(0, 1, 500, 480)
    assert got["bands"] == want["bands"] and got["layout"] == want["layout"]
    for name in ("score", "shaped", "q_norm", "k_norm", "cos", "angle_deg", "scale"):
        assert got[name] == want[name], name
    assert got["visible"] is True and (got["query_token"], got["key_token"]) == ("w500", "w480")
    assert math.isclose(got["band_sum"], got["score"], abs_tol=TOL)
    later = _get(client, "/api/traces/t1/score_parts", layer=0, head=1, i=100, j=480)
    assert later["visible"] is False and later["shaped"] is None  # causal: −∞, JSON-safe
    assert saved.score_parts(0, 1, 100, 480)["shaped"] == -math.inf
    other = _get(client, "/api/traces/t1/score_parts", layer=0, head=1, i=500, j=480,
                 pairing="interleaved")
    assert other["bands"] == saved.score_parts(0, 1, 500, 480, pairing="interleaved")["bands"]
    assert max(abs(a["value"] - b["value"]) for a, b in zip(got["bands"], other["bands"])) > 1e-3


@pytest.mark.parametrize("path, params, status, message", [
    ("attribution/rows", dict(kind="norms", layer=0, head=0, rows="1"), 422,
     "kind must be one of 'weights', 'value', 'rollout', got 'norms'"),
    ("attribution/rows", dict(layer=0, head=0, rows="1"), 422, "kind: Field required"),
    ("attribution/rows", dict(kind="weights", head=0, rows="1"), 422,
     "layer is required for kind 'weights'"),
    ("attribution/rows", dict(kind="weights", layer=0, rows="1"), 422,
     "head is required for kind 'weights'"),
    ("attribution/rows", dict(kind="value", layer=2, head=0, rows="1"), 422,
     "layer must be an int in [0, 2), got 2"),
    ("attribution/rows", dict(kind="value", layer=0, head=4, rows="1"), 422,
     "head must be an int in [0, 4), got 4"),
    ("attribution/rows", dict(kind="value", layer="one", head=0, rows="1"), 422, "layer:"),
    ("attribution/rows", dict(kind="rollout", head=1, rows="1"), 422,
     "head must be omitted for kind 'rollout'"),
    ("attribution/rows", dict(kind="rollout", rows="3;4"), 422,
     "rows must be an int, a list of ints, or 'i', 'i,j,…', 'start:stop', got '3;4'"),
    ("attribution/rows", dict(kind="rollout", rows="10:5"), 422,
     "rows must satisfy 0 <= start < stop <= 600, got '10:5'"),
    ("attribution/rows", dict(kind="rollout", rows=str(N)), 422, "rows must lie in [0, 600)"),
    ("attribution/rows", dict(kind="weights", layer=0, head=0, rows="0:300"), 413,
     "300 rows in one request; the limit is 256"),
    ("attribution/rows", dict(kind="weights", layer=0, head=0, rows="1", encoding="csv"), 422,
     "encoding must be 'b64' or 'list', got 'csv'"),
    ("score_parts", dict(layer=0, head=0, i=N, j=0), 422, "i must be an int in [0, 600)"),
    ("score_parts", dict(layer=0, head=0, i=0), 422, "j: Field required"),
    ("score_parts", dict(layer=0, head=0, i=1, j=1, pairing="rotate"), 422,
     "pairing must be one of 'half', 'interleaved', 'adjacent' or omitted, got 'rotate'"),
])
def test_bad_parameters_are_refused_naming_them(client, path, params, status, message):
    got = _get(client, f"/api/traces/t1/{path}", status, **params)
    assert message in got["error"]


def test_a_trace_lacking_what_a_kind_needs_says_so(client, lacking):
    no_v, dense, _ = lacking
    msg = _get(client, "/api/traces/t2/attribution/rows", 409, kind="value", layer=0, head=0,
               rows="3")["error"]
    assert msg.startswith("value-weighted attention needs the trace's v and each head's output "
                          "projection (out_proj); this trace has neither v nor out_proj")
    roll = _get(client, "/api/traces/t2/attribution/rows", kind="rollout", rows="3")
    assert torch.equal(decode_blob(roll["values"]), no_v.rollout_rows([3]))  # weights suffice
    assert "holds weights only" in _get(client, "/api/traces/t3/score_parts", 409, layer=0,
                                        head=0, i=1, j=0)["error"]
    weights = _get(client, "/api/traces/t3/attribution/rows", kind="weights", layer=0, head=1,
                   rows="0:6", encoding="list")
    assert torch.equal(torch.tensor(weights["values"]), dense.weights_rows(0, 1, range(6)))
    cross = _get(client, "/api/traces/t4/attribution/rows", 409, kind="rollout", rows="0")
    assert "rows and keys must be the same tokens; this trace is 'cross'" in cross["error"]
    assert "no trace 't9'" in _get(client, "/api/traces/t9/score_parts", 404, layer=0, head=0,
                                   i=0, j=0)["error"]


# -- the served page in Chromium ------------------------------------------------------------


@pytest.fixture(scope="module")
def served(saved):
    """`attnlab serve --trace`'s app for the long trace and a short one whose page embeds
    nothing of the view (attribution_budget=0): both fetch their rows from the server."""
    short = with_values(synthetic_trace(30, layers=1, heads=2, d=16), seed=9)
    app = create_trace_app([saved, short], explorer=ExplorerConfig(attribution_budget=0))
    with serve_in_thread(app) as url:
        yield url, short


def _wait_row(page, row):
    page.wait_for_selector(f"svg[data-view=attribution][data-row='{row}']")


def _top(page) -> list[tuple[int, float]]:
    return page.eval_on_selector_all(".ax-attr-top", "els => els.map(e => [+e.dataset.key, "
                                     "+e.dataset.value])")


@pytest.mark.browser
def test_the_served_long_page_shows_the_servers_rows_and_parts(page, saved, served,
                                                               artifacts_dir):
    url, _ = served
    page.goto(url + "/traces/t1")
    page.wait_for_selector(".attnlab-explorer[data-ready]")
    page.set_viewport_size({"width": 1300, "height": 1100})
    page.select_option(".ax-layer", "1")
    page.select_option(".ax-head", "2")
    page.fill(".ax-query", "500")
    page.dispatch_event(".ax-query", "change")
    page.click(".ax-tab[data-view=attribution]")
    rows = {"weights": saved.weights_rows(1, 2, [500])[0].double(),
            "value": saved.value_weighted_rows(1, 2, [500])[0].double(),
            "rollout": saved.rollout_rows([500])[0]}
    for kind, row in rows.items():
        page.click(f".ax-attr-kind[data-kind={kind}]")
        _wait_row(page, f"{kind}:{'*:*' if kind == 'rollout' else '1:2'}:500")
        top = _top(page)
        assert [j for j, _ in top] == torch.topk(row, 8).indices.tolist(), kind
        assert max(abs(v - float(row[j])) for j, v in top) <= TOL, kind
        other = rows["weights"] if kind != "weights" else rows["value"]
        assert max(abs(v - float(other[j])) for j, v in top) > 100 * TOL, kind
        # 600 keys: one image; the pointer names the key under it and its value
        img = page.locator(".ax-attr-img")
        img.wait_for(state="visible")  # (drawn after the row's numbers: a busy machine lags)
        box = img.bounding_box()
        assert box is not None, kind
        img.hover(position={"x": (123.5) * box["width"] / N, "y": box["height"] / 2})
        assert page.get_attribute(".ax-tip", "data-key") == "123"
        assert float(page.get_attribute(".ax-tip", "data-value")) == pytest.approx(
            float(row[123]), abs=TOL)
    assert "from the server" in page.text_content(".ax-controls")
    page.screenshot(path=str(artifacts_dir / "explorer-served-attribution.png"))
    j = _top(page)[1][0]
    page.click(f".ax-attr-top[data-key='{j}']")
    page.wait_for_selector(f".ax-parts[data-pair='1:2:500:{j}'][data-source=server]")
    bands = page.eval_on_selector_all(".ax-band", "els => els.map(e => +e.dataset.value)")
    want = saved.score_parts(1, 2, 500, j)
    assert bands == pytest.approx([b["value"] for b in want["bands"]], abs=1e-12)
    parts = dict(page.eval_on_selector_all(
        ".ax-part", "els => els.map(e => [e.dataset.part, +e.dataset.value])"))
    for name in ("score", "shaped", "q_norm", "k_norm", "cos", "angle_deg"):
        assert parts[name] == pytest.approx(want[name], abs=1e-12), name


@pytest.mark.browser
def test_a_served_short_page_fetches_what_it_does_not_embed(page, served):
    url, short = served
    page.goto(url + "/traces/t2")
    page.wait_for_selector(".attnlab-explorer[data-ready]")
    page.select_option(".ax-head", "1")
    page.select_option(".ax-query", "25")
    page.click(".ax-tab[data-view=attribution]")
    page.click(".ax-attr-kind[data-kind=value]")
    _wait_row(page, "value:0:1:25")
    got = torch.tensor(page.eval_on_selector_all(
        ".ax-attr-cell", "els => els.map(e => +e.dataset.value)"), dtype=torch.float64)
    assert (got - short.value_weighted_rows(0, 1, [25])[0].double()).abs().max() <= TOL
    assert "from the server" in page.text_content(".ax-controls")
    page.click(".ax-attr-cell[data-key='20']")  # q and k are on the page: computed there
    page.wait_for_selector(".ax-parts[data-pair='0:1:25:20'][data-source=page]")
    bands = page.eval_on_selector_all(".ax-band", "els => els.map(e => +e.dataset.value)")
    assert bands == pytest.approx([b["value"] for b in short.score_parts(0, 1, 25, 20)["bands"]],
                                  abs=1e-9)
