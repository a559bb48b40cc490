"""The experiments' report sections, opened in a real headless Chromium."""

from __future__ import annotations

import pytest

from attnlab._io import atomic_write_text
from attnlab.experiments import EXPERIMENTS
from attnlab.report import render_page
from attnlab.report.experiments import section_for


@pytest.mark.browser
def test_every_experiment_section_renders(fast_results, page, artifacts_dir, tmp_path):
    sections = [section_for(fast_results[name], dpi=60) for name in EXPERIMENTS]
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
        assert card.locator(".badge.pass").is_visible()
        assert card.locator(".claim.en").inner_text().strip()
        img = card.locator("figure img")
        img.scroll_into_view_if_needed()
        w = img.evaluate("i => i.complete ? i.naturalWidth : 0")
        assert w > 200, f"{name}: figure did not load"
        assert card.locator("table.data").count() >= 2
    page.locator("#lang").click()
    zh = page.locator("section#exp-masking .claim.zh")
    assert zh.is_visible() and "因果" in zh.inner_text()
    page.locator("#lang").click()  # back to English for the picture
    page.evaluate("document.querySelector('nav').style.position = 'static'")
    page.locator("section#exp-softmax-saturation").screenshot(
        path=str(artifacts_dir / "experiments-report.png"))
