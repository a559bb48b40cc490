"""The experiments' report sections, opened in a real headless Chromium; in Chinese, the
page shows no English word beyond names and symbols."""

from __future__ import annotations

import copy
import re

import pytest
import torch
from experiment_sizes import Unavailable

from attnlab._io import atomic_write_text
from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.experiments import EXPERIMENTS, run
from attnlab.report import Section, render_page
from attnlab.report import explorer as explorer_part
from attnlab.report import long_contexts as lc
from attnlab.report.experiments import section_for
from attnlab.tracing.attention import AttentionTrace
from attnlab.viz.explorer import VIEWS, Explorer


@pytest.mark.browser
def test_every_experiment_section_renders(fast_results, page, artifacts_dir, tmp_path):
    # a copy: the section draws, translates and drops the figure; the shared result keeps it
    sections = [section_for(copy.deepcopy(r), dpi=60) for r in fast_results.values()
                if not isinstance(r, Unavailable)]
    html = render_page(sections, title="attnlab experiments", generated="test")
    assert "http://" not in html and "https://" not in html
    path = tmp_path / "index.html"
    atomic_write_text(path, html)
    page.goto(path.as_uri())
    cards = page.locator("section.card")
    assert cards.count() == len(EXPERIMENTS)
    for name in EXPERIMENTS:
        card = page.locator(f"section#exp-{name}")
        assert card.get_attribute("data-passed") == "True"
        assert card.locator(".badge.pass, .badge.finding").first.is_visible()
        assert card.locator(".claim.en").first.inner_text().strip()
        img = card.locator("figure img").first  # English (or the one picture for both)
        img.scroll_into_view_if_needed()
        w = img.evaluate("i => i.complete ? i.naturalWidth : 0")
        assert w > 200, f"{name}: figure did not load"
        assert not any(z.is_visible() for z in card.locator("figure img.zh").all())
        assert card.locator("table.data").count() >= 2
    page.locator("#lang").click()
    zh = page.locator("section#exp-masking .claim.zh")
    assert zh.is_visible() and "因果" in zh.inner_text()
    zh_img = page.locator("section#exp-masking figure img.zh")
    zh_img.scroll_into_view_if_needed()
    assert zh_img.is_visible() and zh_img.evaluate("i => i.complete ? i.naturalWidth : 0") > 200
    page.locator("#lang").click()  # back to English for the picture
    page.evaluate("document.querySelector('nav').style.position = 'static'")
    page.locator("section#exp-softmax-saturation").screenshot(
        path=str(artifacts_dir / "experiments-report.png"))


# -- the page in Chinese -------------------------------------------------------------------

#: Words a Chinese page may show: names (of attnlab, models, libraries, formats, the other
#: language, Linux's peak-memory field VmHWM, number types as in fp64 and float32) and the
#: notation of the articles (function names, symbols, units).
ALLOWED = {
    "attnlab", "PyTorch", "Python", "GPT", "MiniLM", "SmolLM", "Hugging", "Face", "HF",
    "English", "Linux", "CPU", "SVG", "PNG", "VmHWM",
    "softmax", "QK", "RoPE", "PE", "pos", "FLOPs", "FLOP", "RNN", "elu", "NaN", "inf",
    "fp", "float", "log", "sum", "exp", "cos", "sin", "max", "min",
    "Var", "PCA", "eager", "GB", "MB", "ms",
}


def _english_words(texts: list[str]) -> set[str]:
    """Runs of two or more ASCII letters, less experiment names (identifiers, as on the
    command line), identifiers with an underscore (``out_t``, ``output_attentions``,
    ``long_contexts.json``) and :data:`ALLOWED`."""
    words: set[str] = set()
    for text in texts:
        for name in EXPERIMENTS:
            text = text.replace(name, " ")
        text = re.sub(r"[\w.\-]*_[\w.\-]*", " ", text)
        words |= set(re.findall(r"[A-Za-z]{2,}", text))
    return words - ALLOWED


_VISIBLE_TEXT = """() => {
  const out = [];
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    const el = n.parentElement, text = n.textContent.trim();
    if (!el || !text) continue;
    if (el.closest("script, style, title, noscript, option")) continue;
    if (el.checkVisibility({visibilityProperty: true})) out.push(text);
  }
  return out;
}"""


def _explorer_trace() -> AttentionTrace:
    """Two heads with known roles (head 0 looks at the first token, head 1 at itself) on
    Chinese tokens: the explorer's own words are then the only English it could show."""
    n, d = 8, 8
    q = torch.zeros(1, 2, n, d)
    k = torch.zeros(1, 2, n, d)
    q[0, 0, :, 0] = 4.0
    k[0, 0, 0, 0] = 4.0
    eye = torch.eye(d)[torch.arange(n) % d]
    q[0, 1], k[0, 1] = 4.0 * eye, 4.0 * eye
    shape = ScoreShape(scale=d ** -0.5, causal=True)
    lse = row_logsumexp(q[0], k[0], shape)[None]
    return AttentionTrace(tokens=list("注意力让模型看见全句"[:n]), q=q, k=k, lse=lse,
                          shapes=shape, model="GPT")


def _long_contexts_section() -> Section:
    doc = {"model": "SmolLM2", "sizes": [256, 512], "dense_budget_bytes": 8e9,
           "text": {"source": "course", "en": "attnlab's course", "zh": "attnlab 课程"},
           "dense_budget_origin": "default", "num_layers": 30, "num_heads": 9,
           "machine": {"cpus": 2, "memory_bytes": 16e9, "platform": "Linux",
                       "loadavg_start": [1.0, 1.0, 1.0], "loadavg_end": [1.5, 1.2, 1.1]},
           "dense_stop": {"tokens": 512, "predicted_bytes": 9e9, "reason": "over budget"},
           "target": {"tokens": 8192, "trace_peak_bytes": 3e9, "measured_bytes": None,
                      "passed": None},
           "points": [{"tokens": n, "eager_predicted_bytes": 2e9 if n == 512 else 1e9,
                       "trace": {"peak_rss_bytes": 1e9, "forward_seconds": 1.0,
                                 "kept_bytes": 1e6, "loadavg": [1.0, 1.0, 1.0]},
                       "eager": None if n == 512 else {"peak_rss_bytes": 1.5e9,
                                                       "forward_seconds": 2.0,
                                                       "kept_bytes": 1e8}}
                      for n in (256, 512)]}
    body, passed, rows = lc.render(doc)
    return Section("long-contexts", "Long contexts", "长上下文", body, passed, rows)


@pytest.mark.browser
def test_the_chinese_page_shows_no_untranslated_english(page, tmp_path):
    sections = [section_for(run(name, plot=True), dpi=40)  # two quick ones (< 1 s each)
                for name in ("convex-combination", "masking")]
    ex = Explorer(_explorer_trace(), uid="ax-zh")
    sections.append(explorer_part.section_for(ex, "注意力让模型看见全句", model="GPT"))
    sections.append(_long_contexts_section())
    path = tmp_path / "index.html"
    atomic_write_text(path, render_page(sections, generated="2026-11-30 12:00:00"))
    page.goto(path.as_uri())
    page.wait_for_selector("#ax-zh[data-ready='1']")

    def visible_words() -> dict[str, set[str]]:
        found = {}
        for view in VIEWS:  # every view of the explorer, each drawn in turn
            page.locator(f"#ax-zh .ax-tab[data-view='{view}']").click()
            found[view] = _english_words(page.evaluate(_VISIBLE_TEXT))
        return found

    english = visible_words()
    assert all(english.values()), english  # in English the check sees English
    page.locator("#lang").click()
    assert page.evaluate("document.documentElement.getAttribute('data-lang')") == "zh"
    chinese = visible_words()
    assert not any(chinese.values()), f"untranslated in Chinese: {chinese}"
    roles = page.locator("#ax-zh .ax-diag-row").all_text_contents()
    assert any("汇聚" in r for r in roles) and any("自身" in r for r in roles)
