"""The explorer's stack selector and image view in a real headless Chromium: an
encoder–decoder trace (cross-attention drawn target rows × source columns; QK, geometry and
diagnostics from the cross stack itself) and an image trace whose overlay, after a click on
a patch, holds exactly the trace's weights of that query. Screenshots go to
test-artifacts/explorer-stacks-*.png."""

from __future__ import annotations

import pytest
from test_explorer_stacks import SOURCE, TARGET, image_trace, stacked_trace

from attnlab.viz.explorer import Explorer

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def stacked():
    return stacked_trace()


@pytest.fixture(scope="module")
def stacked_page(stacked, tmp_path_factory):
    return Explorer(stacked, uid="ax-s2s").save(tmp_path_factory.mktemp("ex") / "s2s.html")


@pytest.fixture(scope="module")
def img():
    return image_trace(rows=4, cols=5, prefix=2)


@pytest.fixture(scope="module")
def image_page(img, tmp_path_factory):
    return Explorer(img, uid="ax-img").save(tmp_path_factory.mktemp("ex") / "image.html")


def _open(page, path, lang="en"):
    page.set_viewport_size({"width": 1300, "height": 900})
    page.goto(path.as_uri())
    page.wait_for_selector(".attnlab-explorer[data-ready]")
    if page.get_attribute(".attnlab-explorer", "lang") != lang:
        page.click(".ax-lang")


def _root(page, name):
    return page.get_attribute(".attnlab-explorer", name)


def _texts(page, selector):
    return page.eval_on_selector_all(selector, "els => els.map(e => e.textContent)")


def _floats(page, selector, attr):
    return [float(x) for x in page.eval_on_selector_all(
        selector, f"els => els.map(e => e.getAttribute('{attr}'))")]


def test_stack_selector_names_the_stacks_in_both_languages(page, stacked_page, artifacts_dir):
    _open(page, stacked_page)
    assert _texts(page, ".ax-stack option") == ["Encoder self-attention",
                                                 "Decoder self-attention", "Cross-attention"]
    assert _root(page, "data-stack") == "encoder"
    assert page.locator(".ax-thumb").count() == 2 * 3  # the encoder: 2 layers × 3 heads
    page.click(".ax-lang")
    assert _texts(page, ".ax-stack option") == ["编码器自注意力", "解码器自注意力", "交叉注意力"]
    page.select_option(".ax-stack", label="交叉注意力")
    assert _root(page, "data-stack") == "cross"
    assert "行：目标词元" in page.text_content(".ax-info")
    page.screenshot(path=str(artifacts_dir / "explorer-stacks-cross-model-zh.png"))
    assert page.locator(".ax-thumb").count() == 3 * 2  # the cross stack: 3 layers × 2 heads
    assert page.locator(".ax-tab[data-view=image]").is_hidden()  # text: no image view


def test_cross_attention_rows_are_target_tokens_and_columns_source_tokens(
        page, stacked, stacked_page, artifacts_dir):
    _open(page, stacked_page)
    page.select_option(".ax-stack", label="Cross-attention")
    assert _texts(page, ".ax-query option") == [f"{i}: {t}" for i, t in enumerate(TARGET)]
    page.click(".ax-tab[data-view=matrix]")
    assert _texts(page, ".ax-tok[data-row]") == TARGET
    assert _texts(page, ".ax-tok[data-col]") == SOURCE
    page.screenshot(path=str(artifacts_dir / "explorer-stacks-cross-matrix.png"))
    page.click(".ax-tab[data-view=head]")
    assert _texts(page, ".ax-qtokens text") == TARGET
    assert _texts(page, ".ax-ktokens text") == SOURCE
    # the decoder's own matrix: target × target, causal
    page.select_option(".ax-stack", label="Decoder self-attention")
    page.click(".ax-tab[data-view=matrix]")
    assert _texts(page, ".ax-tok[data-col]") == TARGET


def test_cross_qk_view_recomputes_the_cross_weights(page, stacked, stacked_page):
    t = stacked["cross"]
    _open(page, stacked_page)
    page.select_option(".ax-stack", label="Cross-attention")
    page.select_option(".ax-layer", "2")
    page.select_option(".ax-head", "1")
    page.select_option(".ax-query", "3")
    page.click(".ax-tab[data-view=qk]")
    assert page.locator(".ax-qkrow").count() == len(SOURCE)
    probs = _floats(page, ".ax-p", "data-p")
    assert probs == pytest.approx(t.weights_rows(2, 1, [3])[0].tolist(), abs=1e-6)
    other = stacked["decoder"].weights_rows(2, 1, [3])[0].tolist()
    assert len(other) != len(probs)  # the decoder's row would not even have these keys
    keys = _texts(page, ".ax-qkrow .ax-tok")
    assert keys == SOURCE
    page.click(".ax-tab[data-view=geometry]")
    assert page.locator(".ax-pt[data-kind=q]").count() == len(TARGET)
    assert page.locator(".ax-pt[data-kind=k]").count() == len(SOURCE)
    page.click(".ax-tab[data-view=diagnostics]")
    assert page.locator(".ax-crossdiag").count() == 1
    sorts = page.eval_on_selector_all(".ax-sort", "els => els.map(e => e.dataset.key)")
    assert "previous" not in sorts and "diagonal" not in sorts and "entropy" in sorts
    page.select_option(".ax-stack", label="Encoder self-attention")
    page.click(".ax-tab[data-view=diagnostics]")
    assert page.locator(".ax-crossdiag").count() == 0
    sorts = page.eval_on_selector_all(".ax-sort", "els => els.map(e => e.dataset.key)")
    assert "previous" in sorts and "diagonal" in sorts


def _overlay(page):
    return _floats(page, ".ax-patch", "data-w"), _floats(page, ".ax-prefix", "data-w")


def test_clicking_a_patch_overlays_exactly_that_querys_weights(page, img, image_page,
                                                               artifacts_dir):
    _open(page, image_page)
    assert page.locator(".ax-tab[data-view=image]").is_visible()
    page.click(".ax-tab[data-view=image]")
    assert page.locator(".ax-patch").count() == 4 * 5
    assert _texts(page, ".ax-prefix .ax-tok") == ["[CLS]", "[DIST]"]
    page.select_option(".ax-layer", "1")
    page.select_option(".ax-head", "2")
    for r, c in ((2, 3), (0, 0), (3, 4)):
        page.click(f".ax-patch[data-r='{r}'][data-c='{c}']")
        q = 2 + r * 5 + c
        assert _root(page, "data-query") == str(q)
        assert page.get_attribute(".ax-qpatch", "data-key") == str(q)
        patches, prefix = _overlay(page)
        row = img.weights_rows(1, 2, [q])[0]
        assert patches == pytest.approx(row[2:].tolist(), abs=1e-5)
        assert prefix == pytest.approx(row[:2].tolist(), abs=1e-5)
        other = img.weights_rows(1, 2, [q - 1])[0]
        assert patches != pytest.approx(other[2:].tolist(), abs=1e-3)  # a row of its own
        # opacity follows the weights: the heaviest patch is the most opaque
        op = _floats(page, ".ax-patch", "fill-opacity")
        assert op.index(max(op)) == int(row[2:].argmax())
    page.screenshot(path=str(artifacts_dir / "explorer-stacks-image.png"))
    page.click(".ax-prefix[data-key='0']")  # a prefix token as the query
    assert _root(page, "data-query") == "0"
    assert _overlay(page)[0] == pytest.approx(img.weights_rows(1, 2, [0])[0][2:].tolist(),
                                              abs=1e-5)
    page.click(".ax-lang")
    assert page.text_content(".ax-tab[data-view=image]") == "图像"
    assert "前缀词元" in page.text_content("svg.ax-svg[data-view=image]")
    page.screenshot(path=str(artifacts_dir / "explorer-stacks-image-zh.png"))


def test_a_pooled_image_page_without_a_server_says_why_it_has_no_overlay(page, img, tmp_path):
    from attnlab.viz.explorer import ExplorerConfig

    path = Explorer(img, uid="ax-imgp", config=ExplorerConfig(max_tokens=8, view="image")
                    ).save(tmp_path / "pooled.html")
    _open(page, path)
    assert _root(page, "data-view") == "image"
    assert page.locator(".ax-patch").count() == 0  # pooled rows are not one query's weights
    assert "more than the page keeps every weight for" in page.text_content(".ax-noimage")
    page.click(".ax-lang")
    assert "超过页面保存全部权重的上限" in page.text_content(".ax-noimage")


def test_inputs_of_different_kinds_on_one_page(page, img, stacked, tmp_path):
    path = Explorer([img, stacked], uid="ax-mix").save(tmp_path / "mix.html")
    _open(page, path)
    options = _texts(page, ".ax-input option")
    assert options[0] == "1: Image stripes.png"
    assert options[1].startswith("2: ▁The ▁cat") and "→" in options[1]
    assert page.locator(".ax-stack").count() == 0  # one stack: no selector
    assert page.locator(".ax-tab[data-view=image]").is_visible()
    page.select_option(".ax-input", "1")
    assert _texts(page, ".ax-stack option")[2] == "Cross-attention"
    assert page.locator(".ax-tab[data-view=image]").is_hidden()
    assert _root(page, "data-stack") == "encoder"
    page.select_option(".ax-stack", label="Cross-attention")
    page.click(".ax-tab[data-view=matrix]")
    assert _texts(page, ".ax-tok[data-col]") == SOURCE
    page.select_option(".ax-input", "0")
    assert _root(page, "data-stack") == "self" and page.locator(".ax-stack").count() == 0
    page.click(".ax-lang")  # the input selector follows the language too
    assert _texts(page, ".ax-input option")[0] == "1: 图像 stripes.png"
    page.click(".ax-lang")
    assert _texts(page, ".ax-input option")[0] == "1: Image stripes.png"
