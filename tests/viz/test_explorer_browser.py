"""The saved explorer in a real headless Chromium: views, links, live QK numbers, language,
export, long inputs. Screenshots go to test-artifacts/explorer-*.png."""

from __future__ import annotations

import pytest
import torch

import attnlab
from attnlab.analysis import diagnose
from attnlab.trace import AttentionTrace, capture
from attnlab.viz.explorer import VIEWS, Explorer, _softmax_rows

pytestmark = pytest.mark.browser

TEXT = "The cat sat </script><b>on</b> the mat 注意力"


def toy_trace(text: str = TEXT, seed: int = 0) -> AttentionTrace:
    """A seeded character-level attnlab GPT (2 layers × 4 heads), traced with q/k."""
    torch.manual_seed(seed)
    cfg = attnlab.GPTConfig(vocab_size=128, block_size=1024, n_layer=2, n_head=4, n_embd=64)
    model = attnlab.GPT(cfg).eval()
    with torch.no_grad():
        for block in model.blocks:  # sharper than the default init: the scale knob matters
            for prm in block.attn.parameters():
                prm.mul_(6.0)
    with torch.no_grad(), capture(model) as cap:
        model(torch.tensor([[ord(c) % 128 for c in text]]))
    return cap.trace(tokens=list(text), model="toy-gpt", text=text)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    t = toy_trace()
    path = Explorer(t, uid="ax-toy").save(tmp_path_factory.mktemp("explorer") / "toy.html")
    return t, path


def _open(page, path, lang="en-US"):
    page.goto(path.as_uri())
    page.wait_for_selector(".attnlab-explorer[data-ready]", timeout=20_000)
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
    q, k = t.q[1, 2], t.k[1, 2]
    python = lambda scale: _softmax_rows(q[None], k[None], scale, True)[0, 20].tolist()
    before = _qk_probs(page)
    assert before == pytest.approx(python(t.scale), abs=1e-4)
    for scale, temp in ((1.0, 1.0), (0.6, 1.3), (0.05, 0.25)):
        _slide(page, ".ax-scale", scale)
        _slide(page, ".ax-temp", temp)
        got = _qk_probs(page)
        assert got == pytest.approx(python(scale / temp), abs=1e-4)
        assert got != pytest.approx(python(t.scale), abs=1e-3)  # the knob really moved it
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


def test_long_input_is_pooled_and_renders(page, tmp_path, artifacts_dir):
    n, g = 512, torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 4, n, 16, generator=g), torch.randn(2, 4, n, 16, generator=g)
    w = _softmax_rows(q.flatten(0, 1), k.flatten(0, 1), 0.25, True).float().view(2, 4, n, n)
    t = AttentionTrace(tokens=[f"w{i}" for i in range(n)], weights=w, q=q, k=k, causal=True,
                       scale=0.25, model="synthetic-512")
    path = Explorer(t).save(tmp_path / "long.html")
    _open(page, path)
    assert "pooled" in page.text_content(".ax-controls")
    page.click(".ax-tab[data-view=matrix]")
    assert page.locator(".ax-heat").count() == 1
    page.screenshot(path=str(artifacts_dir / "explorer-long512-matrix.png"))
    page.select_option(".ax-query", "300")
    page.click(".ax-tab[data-view=qk]")
    assert _qk_probs(page)[:301] == pytest.approx(
        _softmax_rows(q[0, 0][None], k[0, 0][None], 0.25, True)[0, 300, :301].tolist(), abs=1e-3)


def test_hovering_isolates_a_row_and_shows_exact_values(page, toy):
    t, path = toy
    _open(page, path)
    page.select_option(".ax-layer", "1")
    page.click(".ax-tab[data-view=head]")
    page.hover(".ax-qtokens text[data-row='9']")
    rows = page.eval_on_selector_all(".ax-focus path", "els => els.map(e => +e.dataset.q)")
    assert rows and set(rows) == {9}  # only the hovered query's arcs
    assert page.eval_on_selector(".ax-arcs", "e => e.style.display") == "none"
    strong = (t.weights[1, 0, 9] >= 0.002).sum().item()
    assert len(rows) == strong
    page.click(".ax-tab[data-view=matrix]")
    page.set_viewport_size({"width": 1300, "height": 1400})
    box = page.locator(".ax-heat").bounding_box()
    n, i, j = t.seq_len, 30, 12
    page.mouse.move(box["x"] + (j + 0.5) * box["width"] / n,
                    box["y"] + (i + 0.5) * box["height"] / n)
    value = float(page.get_attribute(".ax-tip", "data-value"))
    assert value == pytest.approx(float(t.weights[1, 0, i, j]), abs=1e-5)  # uint16 storage
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
    q, k = t.q[2, 5], t.k[2, 5]
    live = lambda scale: _softmax_rows(q[None], k[None], scale, False)[0, 4].tolist()
    assert _qk_probs(page) == pytest.approx(t.weights[2, 5, 4].tolist(), abs=1e-4)
    _slide(page, ".ax-scale", 1.0)
    assert _qk_probs(page) == pytest.approx(live(1.0), abs=1e-4)
    assert _qk_probs(page) != pytest.approx(t.weights[2, 5, 4].tolist(), abs=1e-3)
    page.click(".ax-lang")
    page.screenshot(path=str(artifacts_dir / "explorer-minilm-qk-scale1-zh.png"))
