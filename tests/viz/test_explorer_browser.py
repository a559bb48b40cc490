"""The explorer in a real headless Chromium: views, links, live QK numbers, language,
export; long inputs as a saved page (pooled maps, token strip) and served by
`attnlab serve --trace` (exact rows, tiles and the QK view fetched from the server).
Screenshots go to test-artifacts/explorer-*.png."""

from __future__ import annotations

import pytest
import torch
from explorer_traces import TEXT, dense_pooled, synthetic_trace, toy_trace

from attnlab.analysis import diagnose
from attnlab.viz.explorer import VIEWS, Explorer, qk_row_probs
from limits import PAGE_MS
from servers import serve_in_thread

pytestmark = pytest.mark.browser


def _box(locator) -> dict:
    """The element's box once it is drawn: a view a click shows is laid out a moment later,
    and its box read before that is None (on a busy machine, the served attribution page's
    image once was)."""
    locator.wait_for(state="visible")
    box = locator.bounding_box()
    assert box is not None and box["width"] > 0, box
    return box


def _python_row(t, layer, head, i, scale=None):
    """The QK view's row as Python computes it (float64)."""
    n = t.seq_len
    return qk_row_probs(t.q[layer, head, i][None], t.k[layer, t.kv_head(head)],
                        t.score_shape(layer), rows=[i], lq=n, lk=t.key_len, head=head,
                        scale=scale)[0].tolist()


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    t = toy_trace()
    path = Explorer(t, uid="ax-toy").save(tmp_path_factory.mktemp("explorer") / "toy.html")
    return t, path


def _open(page, path, lang="en-US"):
    page.goto(path.as_uri())
    page.wait_for_selector(".attnlab-explorer[data-ready]")
    if page.get_attribute(".attnlab-explorer", "lang") != lang[:2]:
        page.click(".ax-lang")
    return page.locator(".attnlab-explorer")


def _root(page, name):
    return page.get_attribute(".attnlab-explorer", name)


def _qk_probs(page) -> list[float]:
    return [float(x) for x in page.eval_on_selector_all(
        ".ax-p", "els => els.map(e => e.getAttribute('data-p'))")]


def _slide(page, selector, value):
    page.eval_on_selector(selector, "(el, v) => { el.value = v; "
                          "el.dispatchEvent(new Event('input', {bubbles: true})); }", str(value))


def test_opens_offline_with_real_text_labels_and_every_view(page, toy, artifacts_dir):
    _, path = toy
    _open(page, path)
    page.set_viewport_size({"width": 1300, "height": 900})
    assert page.locator(".ax-thumb").count() == 2 * 4
    for view in VIEWS:
        page.click(f".ax-tab[data-view={view}]")
        assert _root(page, "data-view") == view
        # a view that decodes its data first (attribution) is drawn after the click returns
        page.locator(f"svg.ax-svg[data-view={view}]").first.wait_for(state="attached")
        assert page.locator(f"svg.ax-svg[data-view={view}]").count() == 1
        page.screenshot(path=str(artifacts_dir / f"explorer-toy-{view}.png"))
    page.click(".ax-tab[data-view=head]")
    labels = page.eval_on_selector_all(".ax-qtokens text", "els => els.map(e => e.textContent)")
    i = TEXT.index("</script>")
    assert labels[i:i + 9] == list("</script>") and labels[-3:] == ["注", "意", "力"]
    assert labels[3] == "␣"  # a space token gets a visible mark


def test_clicking_a_head_opens_it_and_links_the_views(page, toy):
    _, path = toy
    _open(page, path)
    page.click(".ax-thumb[data-layer='1'][data-head='2']")
    assert (_root(page, "data-view"), _root(page, "data-layer"), _root(page, "data-head")) == \
        ("head", "1", "2")
    page.click(".ax-qtokens text[data-row='7']")  # choose a query in the head view ...
    page.click(".ax-tab[data-view=qk]")  # ... and the QK view shows that query of that head
    assert _root(page, "data-query") == "7"
    assert page.locator(".ax-qkrow").count() == len(TEXT)
    page.click(".ax-tab[data-view=diagnostics]")
    page.click(".ax-sort[data-key=entropy]")  # highest entropy first, then lowest first
    order = [(int(page.get_attribute(r, "data-layer")), int(page.get_attribute(r, "data-head")))
             for r in [".ax-diag-row >> nth=0", ".ax-diag-row >> nth=-1"]]
    ent = diagnose(toy[0]).scores["entropy"]
    assert float(ent[order[0]]) == pytest.approx(float(ent.max()))
    assert float(ent[order[1]]) == pytest.approx(float(ent.min()))
    page.click(".ax-sort[data-key=entropy]")
    first = page.locator(".ax-diag-row").first
    lh = int(first.get_attribute("data-layer")), int(first.get_attribute("data-head"))
    assert float(ent[lh]) == pytest.approx(float(ent.min()))
    page.click(".ax-diag-row[data-layer='0'][data-head='3']")
    assert (_root(page, "data-view"), _root(page, "data-layer"), _root(page, "data-head")) == \
        ("head", "0", "3")


def test_scale_and_temperature_sliders_give_pythons_softmax(page, toy, artifacts_dir):
    t, path = toy
    _open(page, path)
    page.select_option(".ax-layer", "1")
    page.select_option(".ax-head", "2")
    page.select_option(".ax-query", "20")
    page.click(".ax-tab[data-view=qk]")
    python = lambda scale: _python_row(t, 1, 2, 20, scale)  # noqa: E731
    before = _qk_probs(page)
    assert before == pytest.approx(t.weights_rows(1, 2, [20])[0].tolist(), abs=1e-6)
    assert before == pytest.approx(python(t.score_shape(1).scale), abs=1e-9)
    for scale, temp in ((1.0, 1.0), (0.6, 1.3), (0.05, 0.25)):
        _slide(page, ".ax-scale", scale)
        _slide(page, ".ax-temp", temp)
        got = _qk_probs(page)
        assert got == pytest.approx(python(scale / temp), abs=1e-4)
        assert got != pytest.approx(before, abs=1e-3)  # the knob really moved it
    assert sum(p > 0 for p in got[21:]) == 0  # causal: keys after the query stay at 0
    page.screenshot(path=str(artifacts_dir / "explorer-toy-qk-scaled.png"))
    page.click(".ax-scale-default")
    _slide(page, ".ax-temp", 1)
    assert _qk_probs(page) == pytest.approx(before, abs=1e-12)


def test_language_toggle_switches_labels(page, toy, artifacts_dir):
    _, path = toy
    _open(page, path, lang="en")
    assert page.text_content(".ax-tab[data-view=model]") == "Model"
    page.click(".ax-lang")
    assert page.text_content(".ax-tab[data-view=model]") == "模型"
    assert page.text_content(".ax-export[data-format=svg]") == "导出 SVG"
    assert _root(page, "lang") == "zh"
    page.click(".ax-tab[data-view=diagnostics]")
    assert "熵" in page.text_content("svg.ax-svg")
    page.screenshot(path=str(artifacts_dir / "explorer-toy-diagnostics-zh.png"))
    page.click(".ax-lang")
    assert page.text_content(".ax-tab[data-view=model]") == "Model"


def test_chinese_browser_opens_in_chinese(browser, toy):
    _, path = toy
    context = browser.new_context(locale="zh-CN")
    context.set_default_timeout(PAGE_MS)  # as the page fixture's
    try:
        pg = context.new_page()
        pg.goto(path.as_uri())
        pg.wait_for_selector(".attnlab-explorer[data-ready]")
        assert pg.text_content(".ax-tab[data-view=positional]") == "位置编码"
    finally:
        context.close()


def test_export_buttons_download_svg_and_png(page, toy, tmp_path):
    _, path = toy
    _open(page, path)
    page.click(".ax-tab[data-view=matrix]")
    with page.expect_download() as d:
        page.click(".ax-export[data-format=svg]")
    svg = tmp_path / "m.svg"
    d.value.save_as(svg)
    text = svg.read_text(encoding="utf-8")
    assert d.value.suggested_filename == "attnlab-matrix-L0H0.svg"
    assert text.startswith("<svg") and "</svg>" in text and "注" in text
    with page.expect_download() as d:
        page.click(".ax-export[data-format=png]")
    png = tmp_path / "m.png"
    d.value.save_as(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000


def test_positional_view_rotation_matches_the_table(page, toy):
    _, path = toy
    _open(page, path)
    page.click(".ax-tab[data-view=positional]")
    _slide(page, ".ax-pos", 40)
    _slide(page, ".ax-off", 17)
    err = float(page.get_attribute(".ax-pe-err", "data-err"))
    assert err < 1e-5  # float32 table: M_k·PE[pos] equals PE[pos+k]


@pytest.mark.parametrize("lang", ["en-US", "zh-CN"])
def test_the_explorers_formulas_are_mathml_rendered_in_python(page, toy, lang):
    from attnlab._mathml import has_raw_tex
    from attnlab.viz.explorer import MATH_TEXTS, math_payload

    _, path = toy
    _open(page, path, lang)
    page.click(".ax-tab[data-view=positional]")
    note = page.locator(".ax-pe-note")
    assert note.locator("math").count() >= 5 and note.locator("msub").count() >= 3
    assert note.locator("math").count() == math_payload()[lang[:2]]["peNote"].count("<math")
    assert page.locator(".ax-pe-err-label math").count() == 1
    text = page.evaluate("""() => { const c = document.querySelector('.attnlab-explorer')
        .cloneNode(true); c.querySelectorAll('math, code, pre').forEach(e => e.remove());
        document.body.appendChild(c); const t = c.innerText; c.remove(); return t; }""")
    assert text.strip() and not has_raw_tex(text)
    assert has_raw_tex(MATH_TEXTS["peNote"][0])  # the source is TeX: unconverted, it shows


def test_hovering_isolates_a_row_and_shows_exact_values(page, toy):
    t, path = toy
    _open(page, path)
    page.select_option(".ax-layer", "1")
    page.click(".ax-tab[data-view=head]")
    page.hover(".ax-qtokens text[data-row='9']")
    rows = page.eval_on_selector_all(".ax-focus path", "els => els.map(e => +e.dataset.q)")
    assert rows and set(rows) == {9}  # only the hovered query's arcs
    assert page.eval_on_selector(".ax-arcs", "e => e.style.display") == "none"
    strong = (t.weights_rows(1, 0, [9])[0] >= 0.002).sum().item()
    assert len(rows) == strong
    page.click(".ax-tab[data-view=matrix]")
    page.set_viewport_size({"width": 1300, "height": 1400})
    box = _box(page.locator(".ax-heat"))
    n, i, j = t.seq_len, 30, 12
    page.mouse.move(box["x"] + (j + 0.5) * box["width"] / n,
                    box["y"] + (i + 0.5) * box["height"] / n)
    value = float(page.get_attribute(".ax-tip", "data-value"))
    exact = float(t.weights_tile(1, 0, [i], [j])[0, 0])
    assert value == pytest.approx(exact, abs=0.5 / 65535 + 1e-9)  # uint16 storage
    assert page.locator(".ax-tip").is_visible()


@pytest.mark.models
def test_minilm_views_and_live_qk_equal_python(page, tmp_path, artifacts_dir):
    pytest.importorskip("transformers")
    from attnlab.viz.explorer import explore

    ex = explore("minilm", "The cat sat on the mat because it was tired. 注意力")
    t = ex.traces[0]
    path = ex.save(tmp_path / "minilm.html")
    _open(page, path)
    page.set_viewport_size({"width": 1300, "height": 900})
    assert page.locator(".ax-thumb").count() == 6 * 12
    page.click(".ax-thumb[data-layer='2'][data-head='5']")
    page.select_option(".ax-query", "4")
    for view in VIEWS:
        page.click(f".ax-tab[data-view={view}]")
        page.screenshot(path=str(artifacts_dir / f"explorer-minilm-{view}.png"))
    page.click(".ax-tab[data-view=qk]")
    assert "float32" in page.text_content(".ax-storage")
    captured = t.weights_rows(2, 5, [4])[0].tolist()
    assert _qk_probs(page) == pytest.approx(captured, abs=1e-5)
    _slide(page, ".ax-scale", 1.0)
    assert _qk_probs(page) == pytest.approx(_python_row(t, 2, 5, 4, 1.0), abs=1e-9)
    assert _qk_probs(page) != pytest.approx(captured, abs=1e-3)
    page.click(".ax-lang")
    page.screenshot(path=str(artifacts_dir / "explorer-minilm-qk-scale1-zh.png"))


# -- long inputs ----------------------------------------------------------------------------

LONG = 1000


@pytest.fixture(scope="module")
def long_trace():
    return synthetic_trace(LONG, layers=2, heads=4, kv_heads=2, d=16)


@pytest.fixture(scope="module")
def long_page(long_trace, tmp_path_factory):
    ex = Explorer(long_trace, uid="ax-long")
    return ex, ex.save(tmp_path_factory.mktemp("explorer") / "long.html")


def test_long_page_opens_pooled_offline_and_the_strip_moves_through_it(page, long_trace,
                                                                        long_page, artifacts_dir):
    ex, path = long_page
    tr = ex.payload()["traces"][0]
    block, nb = tr["block"], len(tr["row_blocks"])
    _open(page, path)
    page.set_viewport_size({"width": 1300, "height": 1000})
    assert float(_root(page, "data-first-render-ms")) > 0
    assert page.locator(".ax-thumb").count() == 2 * 4
    assert f"blocks of {block} tokens" in page.text_content(".ax-pooled")
    assert page.locator(".ax-sblock").count() == nb
    assert page.locator(".ax-text .ax-t").count() == block  # the first block's tokens
    page.screenshot(path=str(artifacts_dir / "explorer-long1000-model.png"))
    page.click(f".ax-sblock[data-block='{nb - 1}']")
    assert _root(page, "data-block") == str(nb - 1)
    spans = page.eval_on_selector_all(".ax-text .ax-t", "els => els.map(e => +e.dataset.i)")
    assert spans == list(range((nb - 1) * block, LONG))
    page.click(f".ax-t[data-i='{LONG - 3}']")
    assert _root(page, "data-query") == str(LONG - 3)
    assert "attnlab serve --trace" in page.text_content(".ax-hint")  # no server: says so
    assert page.locator(".ax-rowinfo").count() == 0
    page.click(".ax-lang")
    assert "由服务器计算" in page.text_content(".ax-hint")
    assert f"每块 {block} 个词元" in page.text_content(".ax-pooled")
    assert page.text_content(".ax-strip-label").startswith(f"块 {nb - 1} / {nb}")
    page.click(".ax-lang")
    page.click(".ax-prev")
    assert _root(page, "data-block") == str(nb - 2)
    page.click(".ax-tab[data-view=matrix]")
    assert page.locator(".ax-heat").count() == 1
    page.screenshot(path=str(artifacts_dir / "explorer-long1000-matrix.png"))
    page.click(".ax-tab[data-view=qk]")
    assert "attnlab serve --trace FILE" in page.text_content(".ax-noqk")
    page.click(".ax-tab[data-view=geometry]")
    assert page.locator(".ax-noqk").count() == 1
    page.click(".ax-tab[data-view=head]")
    assert page.locator(".ax-qtokens text").count() == nb
    page.fill(".ax-query", "700")
    page.dispatch_event(".ax-query", "change")
    assert _root(page, "data-block") == str(700 // block)


def test_long_page_maps_are_the_pooled_definition(page, long_trace, long_page):
    ex, path = long_page
    block = ex.payload()["traces"][0]["block"]
    _open(page, path)
    page.click(".ax-thumb[data-layer='1'][data-head='1']")
    page.click(".ax-tab[data-view=matrix]")
    page.set_viewport_size({"width": 1400, "height": 1400})
    exact = dense_pooled(long_trace.head_weights(1, 1), block)
    n = exact.shape[0]
    heat = page.locator(".ax-heat")
    box = _box(heat)
    for i, j in ((n - 1, 0), (n - 1, n - 1), (n // 2, n // 3)):
        heat.hover(position={"x": (j + 0.5) * box["width"] / n,
                             "y": (i + 0.5) * box["height"] / n})
        value = float(page.get_attribute(".ax-tip", "data-value"))
        assert value == pytest.approx(float(exact[i, j]), abs=0.5 / 255 + 1e-6)


@pytest.fixture(scope="module")
def served(long_trace):
    """`attnlab serve --trace`'s app (uvicorn in a thread, 127.0.0.1): yields the base URL."""
    from attnlab.serve.trace_api import create_trace_app

    with serve_in_thread(create_trace_app([long_trace])) as url:
        yield url


def _wait_fetch(page, count):
    page.wait_for_function(
        f"+document.querySelector('.attnlab-explorer').getAttribute('data-fetches') >= {count}")


def test_served_page_fetches_exact_rows_and_tiles(page, long_trace, served, artifacts_dir):
    t = long_trace
    page.goto(served + "/")
    page.wait_for_selector(".attnlab-explorer[data-ready]")
    page.set_viewport_size({"width": 1300, "height": 1100})
    assert "Click a token" in page.text_content(".ax-hint")  # served: rows from the server
    page.wait_for_selector(".ax-rowinfo[data-row='0:0:0']")
    block = int(page.eval_on_selector(".attnlab-explorer",
                                      "e => e.__attnlab.cur().meta.block"))
    page.select_option(".ax-layer", "1")
    page.select_option(".ax-head", "3")
    page.wait_for_selector(".ax-rowinfo[data-row='1:3:0']")
    page.click(".ax-sblock[data-block='6']")
    i = 6 * block + 5
    page.click(f".ax-t[data-i='{i}']")
    page.wait_for_selector(f".ax-rowinfo[data-row='1:3:{i}']")
    exact = t.weights_rows(1, 3, [i])[0]
    got = page.eval_on_selector_all(".ax-t[data-w]", "els => els.map(e => [+e.dataset.i, "
                                    "+e.dataset.w])")
    assert got and all(w == float(exact[j]) for j, w in got)  # float32 from the server, as is
    assert {j for j, _ in got} == {j for j in range(6 * block, 7 * block) if exact[j] > 0}
    tops = page.eval_on_selector_all(".ax-topkey", "els => els.map(e => +e.dataset.key)")
    assert tops == torch.topk(exact, 8).indices.tolist()
    page.screenshot(path=str(artifacts_dir / "explorer-served-row.png"))
    # a click on a block of the pooled map brings that block's exact weights
    page.click(".ax-tab[data-view=matrix]")
    box = _box(page.locator(".ax-heat"))
    n = -(-t.seq_len // block)
    rb, cb = 9, 7
    page.mouse.click(box["x"] + (cb + 0.5) * box["width"] / n,
                     box["y"] + (rb + 0.5) * box["height"] / n)
    page.wait_for_selector(".ax-tile")
    tile = t.weights_tile(1, 3, range(rb * block, (rb + 1) * block),
                          range(cb * block, (cb + 1) * block))
    img = page.locator(".ax-tile")
    tb = img.bounding_box()
    for a, b in ((0, 0), (block - 1, block // 2), (block // 2, block - 1)):
        img.hover(position={"x": (b + 0.5) * tb["width"] / block,
                            "y": (a + 0.5) * tb["height"] / block})
        assert float(page.get_attribute(".ax-tip", "data-value")) == float(tile[a, b])
    page.screenshot(path=str(artifacts_dir / "explorer-served-tile.png"))


def test_served_qk_view_works_for_any_query_at_any_length(page, long_trace, served,
                                                           artifacts_dir):
    t = long_trace
    page.goto(served + "/")
    page.wait_for_selector(".attnlab-explorer[data-ready]")
    page.select_option(".ax-layer", "1")
    page.select_option(".ax-head", "1")
    i = 777
    page.fill(".ax-query", str(i))
    page.dispatch_event(".ax-query", "change")
    assert _root(page, "data-query") == str(i)
    page.click(".ax-tab[data-view=qk]")
    page.wait_for_selector(f"svg[data-view=qk][data-row='1:1:{i}']")
    keys = page.eval_on_selector_all(".ax-p", "els => els.map(e => +e.dataset.key)")
    exact = t.weights_rows(1, 1, [i])[0].double()
    assert set(torch.topk(exact, 20).indices.tolist()) <= set(keys)
    shown = _qk_probs(page)
    assert shown == pytest.approx(exact[keys].tolist(), abs=1e-6)
    rest = float(page.get_attribute(".ax-prest", "data-p"))
    assert rest == pytest.approx(1 - float(exact[keys].sum()), abs=1e-6)
    _slide(page, ".ax-scale", 1.0)
    python = torch.tensor(_python_row(t, 1, 1, i, 1.0), dtype=torch.float64)
    assert _qk_probs(page) == pytest.approx(python[keys].tolist(), abs=1e-9)
    assert _qk_probs(page) != pytest.approx(shown, abs=1e-3)
    page.screenshot(path=str(artifacts_dir / "explorer-served-qk.png"))


@pytest.mark.parametrize("sinks", [torch.tensor([2.5, 12.0, 4.0, 0.5]),
                                   torch.linspace(6, 12, 48).view(4, 12)],
                         ids=["per-head", "per-row"])
def test_qk_view_gives_the_sink_its_share(page, tmp_path, sinks):
    """A model with learned sink logits: the live QK view's row is the trace's own weights
    (the sink's share goes to no key), and at another temperature Python's arithmetic."""
    t = synthetic_trace(12, layers=1, heads=4, d=8, sinks=sinks)
    path = Explorer(t, uid="ax-sink").save(tmp_path / "sink.html")
    _open(page, path)
    page.select_option(".ax-head", "1")
    page.select_option(".ax-query", "9")
    page.click(".ax-tab[data-view=qk]")
    got = _qk_probs(page)
    want = t.weights_rows(0, 1, [9])[0]
    assert got == pytest.approx(want.tolist(), abs=1e-6)
    assert sum(got) < 0.96  # the sink took its share: the keys' weights sum below 1
    _slide(page, ".ax-temp", 1.7)
    python = qk_row_probs(t.q[0, 1, 9][None], t.k[0, 1], t.score_shape(0), rows=[9], lq=12,
                          lk=12, head=1, temperature=1.7)[0].tolist()
    assert _qk_probs(page) == pytest.approx(python, abs=1e-9)
