"""Several-stack traces on the trace server (`attnlab serve --trace FILE`): each stack is a
trace of its own id, the explorer of any of them is the whole input with one API prefix per
stack, the stacks of one input stay and go together; in Chromium, a served long
encoder–decoder page fetches the exact rows of the stack on show."""

from __future__ import annotations

import pytest
import torch
from fastapi.testclient import TestClient
from test_explorer_stacks import SOURCE, TARGET, image_trace, stacked_trace

from attnlab.serve.trace_api import TraceStore, create_trace_app
from attnlab.tracing import load_trace
from attnlab.viz.explorer import decode_blob
from servers import serve_in_thread

LOCAL = "http://127.0.0.1"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("traces")
    st = stacked_trace()
    st.save(folder / "s2s.safetensors")
    img = image_trace()
    img.save(folder / "img.safetensors")
    return load_trace(folder / "s2s.safetensors"), load_trace(folder / "img.safetensors")


@pytest.fixture(scope="module")
def client(saved):
    return TestClient(create_trace_app(list(saved)), base_url=LOCAL)


def _get(client, path, **params):
    r = client.get(path, params=params)
    assert r.status_code == 200, r.text
    return r.json()


def test_each_stack_is_served_under_its_own_id(client, saved):
    st, img = saved
    listed = _get(client, "/api/traces")["traces"]
    assert [t["id"] for t in listed] == ["t1", "t2", "t3", "t4"]
    info = _get(client, "/api/traces/t3")
    assert info["tokens"] == TARGET and info["key_tokens"] == SOURCE  # the cross stack
    got = _get(client, "/api/traces/t3/rows", layer=2, head=1, queries="0,4")
    assert torch.equal(decode_blob(got["weights"]).float(), st["cross"].weights_rows(2, 1, [0, 4]))
    enc = _get(client, "/api/traces/t1/rows", layer=1, head=2, queries="3")
    assert torch.equal(decode_blob(enc["weights"]).float(), st["encoder"].weights_rows(1, 2, [3]))


def test_the_explorer_of_any_stack_is_the_whole_input(client):
    for tid in ("t1", "t2", "t3"):
        data = _get(client, f"/api/traces/{tid}/explorer")
        assert [s["name"] for s in data["inputs"][0]["stacks"]] == ["encoder", "decoder", "cross"]
        assert [tr["api"] for tr in data["traces"]] == [f"/api/traces/t{i}" for i in (1, 2, 3)]
    img = _get(client, "/api/traces/t4/explorer")
    assert img["traces"][0]["image"]["grid"] == [4, 5] and img["traces"][0]["api"] == \
        "/api/traces/t4"
    index = client.get("/").text
    assert index.count("<li>") == 2  # two inputs, not four traces
    assert "encoder 8×8, decoder 5×5, cross 5×8" in index
    assert 'id="ax-t1"' in client.get("/traces/t2").text


def test_the_stacks_of_one_input_stay_and_go_together():
    store = TraceStore(capacity=4)
    a = store.add_input(stacked_trace())
    b = store.add_input(image_trace())
    assert store.ids() == a + b
    c = store.add_input(stacked_trace())  # over capacity: the oldest input goes, all of it
    assert store.ids() == b + c and store.stack_ids(c[1]) == c
    with pytest.raises(KeyError, match="no trace 't2'"):
        store.explorer(a[1])
    with pytest.raises(TypeError, match="a StackedTrace goes through add_input"):
        store.add(stacked_trace())
    with pytest.raises(TypeError, match="item must be an AttentionTrace or a StackedTrace"):
        store.add_input({"cross": None})
    big = TraceStore(capacity=1)  # an input of more stacks than the capacity is kept whole
    assert big.add_input(stacked_trace()) == ["t1", "t2", "t3"] and len(big) == 3


@pytest.mark.browser
def test_served_long_stacked_page_fetches_the_rows_of_the_stack_on_show(page, artifacts_dir):
    st = stacked_trace(source=[f"s{i}" for i in range(600)])  # long: pooled, rows on demand
    with serve_in_thread(create_trace_app([st])) as url:
        page.goto(url + "/")
        page.wait_for_selector(".attnlab-explorer[data-ready]")
        page.set_viewport_size({"width": 1300, "height": 1000})
        page.select_option(".ax-stack", label="Cross-attention")
        assert page.get_attribute(".attnlab-explorer", "data-stack") == "cross"
        assert page.locator(".ax-sblock").count() == len(TARGET)  # one block per target token
        assert "blocks of 1 × 5 (queries × keys" in page.text_content(".ax-pooled")
        page.select_option(".ax-layer", "1")
        page.fill(".ax-query", "3")
        page.dispatch_event(".ax-query", "change")
        page.wait_for_selector(".ax-rowinfo[data-row='1:0:3']")
        tops = page.eval_on_selector_all(".ax-topkey", "els => els.map(e => +e.dataset.key)")
        exact = st["cross"].weights_rows(1, 0, [3])[0]
        assert tops == torch.topk(exact, 8).indices.tolist()  # the cross stack's own row
        page.screenshot(path=str(artifacts_dir / "explorer-stacks-served-cross.png"))


@pytest.mark.browser
def test_served_pooled_image_overlays_the_exact_row_from_the_server(page):
    from attnlab.viz.explorer import ExplorerConfig

    img = image_trace(rows=4, cols=5, prefix=1)
    app = create_trace_app([img], explorer=ExplorerConfig(max_tokens=8, view="image"))
    with serve_in_thread(app) as url:
        page.goto(url + "/")
        page.wait_for_selector(".attnlab-explorer[data-ready]")
        page.wait_for_selector(".ax-patch")  # the row 0 came from the server
        page.select_option(".ax-head", "1")
        page.wait_for_selector("svg[data-view=image][data-row='0:1:0']")
        page.click(".ax-patch[data-r='2'][data-c='3']")
        q = 1 + 2 * 5 + 3
        page.wait_for_selector(f"svg[data-view=image][data-row='0:1:{q}']")
        got = [float(x) for x in page.eval_on_selector_all(
            ".ax-patch", "els => els.map(e => e.getAttribute('data-w'))")]
        exact = img.weights_rows(0, 1, [q])[0]
        assert got == exact[1:].tolist()  # float32 from the server, as is
