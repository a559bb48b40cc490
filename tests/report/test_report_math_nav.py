"""The report's formulas are MathML (no raw TeX on the page, in English or Chinese) and the
report is navigable: a grouped table of contents with every section's badge, the page's
exact size and build time at the top, and a jump that leaves the section's title below the
sticky bar (in Chromium)."""

from __future__ import annotations

import re
import time
from html.parser import HTMLParser

import pytest
import quick_report

from attnlab._mathml import has_raw_tex, html_with_math
from attnlab.experiments import EXPERIMENTS
from attnlab.experiments.claims import CLAIMS
from attnlab.report import build_report, render_page
from attnlab.report import claims as claims_part
from attnlab.report.html import Section, bilingual, both, escape, table
from attnlab.report.page import EXPERIMENT_THEMES, GROUPS, group_of, status_of


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("quick-report")
    t0 = time.perf_counter()
    result = build_report(out, providers=quick_report.PROVIDERS, quiet=True)
    return result, out / "index.html", time.perf_counter() - t0


class _Visible(HTMLParser):
    """The text a reader sees in one language: outside <math>, <code>, <pre>, <script>,
    <style> and the other language's elements."""

    SKIP = {"math", "code", "pre", "script", "style"}
    VOID = {"br", "img", "meta", "col", "input", "hr", "link", "wbr"}

    def __init__(self, lang: str):
        super().__init__(convert_charrefs=True)
        self.hide = "zh" if lang == "en" else "en"
        self.stack: list[bool] = []
        self.parts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        self.stack.append(tag in self.SKIP or self.hide in classes)

    def handle_endtag(self, tag):
        if tag not in self.VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if not any(self.stack):
            self.parts.append(data)


def visible_text(page: str, lang: str) -> str:
    p = _Visible(lang)
    p.feed(page)
    return " ".join(p.parts)


# -- formulas ---------------------------------------------------------------------------------


def test_a_claim_quote_with_tex_becomes_mathml_and_raw_tex_would_be_caught():
    formula = next(c for c in CLAIMS if c.id == "000-attention-formula")
    inline = next(c for c in CLAIMS if "$V$" in c.quote_zh)
    for c in (formula, inline):
        results = [quick_report._result(n) for n in EXPERIMENTS]
        cell = claims_part._claims_table(
            [v for v in claims_part.verdicts(results) if v.claim.id == c.id], zh=True)
        assert "<math" in cell, c.id
        assert not has_raw_tex(visible_text(cell, "zh")), c.id
    # the other way: the same quote escaped only (a path that skips the converter) is caught
    assert has_raw_tex(visible_text(f"<td>{escape(formula.quote_zh)}</td>", "zh"))
    assert has_raw_tex(visible_text(f"<p>{escape(inline.quote_zh)}</p>", "zh"))
    assert not has_raw_tex(visible_text(f"<p>{html_with_math(inline.quote_zh)}</p>", "zh"))


def test_every_text_helper_renders_formulas_and_still_escapes():
    s = r"<b> & $\sqrt{d_k}$"
    for fragment in (both(s, s + "。"), bilingual(s, s), table([s], [(s,)])):
        assert "<math" in fragment and "&lt;b&gt; &amp; " in fragment and "<b>" not in fragment
        for lang in ("en", "zh"):
            assert not has_raw_tex(visible_text(fragment, lang))
    assert both("1 < 2", None) == "1 &lt; 2"  # no formula: plain escaping


def test_the_quick_report_has_mathml_and_no_raw_tex_in_either_language(quick):
    _, path, _ = quick
    page = path.read_text(encoding="utf-8")
    assert page.count("<math") >= 50 and "1998/Math/MathML" not in page  # no URL on the page
    for lang in ("en", "zh"):
        text = visible_text(page, lang)
        assert not has_raw_tex(text), [m for m in re.findall(r".{30}[$\\].{30}", text)][:5]


# -- navigation -------------------------------------------------------------------------------


def test_every_experiment_has_a_theme_and_every_part_a_group():
    themed = [n for _, _, _, names in EXPERIMENT_THEMES for n in names]
    assert sorted(themed) == sorted(EXPERIMENTS) and len(themed) == len(set(themed))
    from attnlab.report.page import PROVIDERS

    groups = {k for k, _, _ in GROUPS}
    ids = {"claims", "parity", "explorer", "real-models", "architectures", "long-contexts",
           "attribution", "survey", "trained-model"}
    assert {group_of(i)[0] for i in ids} <= groups and "other" not in {
        group_of(i)[0] for i in ids}
    assert len(PROVIDERS) == len(ids) + 1  # the experiments are the one part of many ids


def test_the_toc_has_every_section_with_its_badge_in_its_group(quick):
    result, path, _ = quick
    page = path.read_text(encoding="utf-8")
    toc = page[page.index('<nav class="toc"'):page.index("</nav>", page.index('<nav class="toc"'))]
    blocks = re.findall(r'<div class="toc-group [^"]*" data-group="([^"]+)">(.*?)</ul></div>',
                        toc, re.S)
    entries = {sid: (group, st) for group, block in blocks
               for sid, st in re.findall(r'<a href="#([^"]+)" data-status="(\w+)">', block)}
    assert set(entries) == {s.id for s in result.sections}
    for s in result.sections:
        group, theme = group_of(s.id)
        assert entries[s.id] == (group if theme is None else f"{group}-{theme}", status_of(s))
        assert f'id="{s.id}"' in page
    assert entries[f"exp-{quick_report.FINDING}"][1] == "finding"
    assert entries["long-contexts"][1] == "info"
    assert entries["exp-masking"][0] == "experiments-masks"
    expected = {"claims", "parity", "explorer", "real-models", "architectures",
                "long-contexts", "attribution", "survey", "trained"}
    expected |= {f"experiments-{k}" for k, _, _, names in EXPERIMENT_THEMES if names}
    assert {g for g, _ in blocks} == expected
    # compact: a grid of groups, and no experiment link in the sticky bar
    assert 'class="toc-grid"' in toc
    bar = page[page.index('<nav id="bar"'):page.index("</nav>", page.index('<nav id="bar"'))]
    assert bar.count("<a ") <= len(GROUPS) + 2 and "#exp-qk-variance" in bar


def test_a_failing_section_shows_fail_in_the_toc_and_its_group():
    page = render_page([Section("claims", "C", "C", "", True),
                        Section("exp-masking", "Experiment: masking", "实验：masking", "", False),
                        Section("exp-linear-attention", "Experiment: linear-attention",
                                "实验：linear-attention", "", True)], generated="t")
    assert '<a href="#exp-masking" data-status="fail">' in page
    assert 'class="toc-group has-fail" data-group="experiments-masks"' in page
    assert 'class="toc-group all-pass" data-group="claims"' in page


def test_the_top_states_the_exact_size_and_the_build_time(quick):
    result, path, seconds = quick
    page = path.read_text(encoding="utf-8")
    n = path.stat().st_size
    stated = re.findall(r'class="page-bytes">[^<]*\(([\d\u2009]+) bytes\)', page)
    stated_zh = re.findall(r'class="page-bytes">[^<]*（([\d\u2009]+) 字节）', page)
    assert stated and stated_zh
    assert {int(x.replace("\u2009", "")) for x in stated + stated_zh} == {n}
    built = re.search(r"built in ([\d.]+) s", page)
    assert built and 0 < float(built.group(1)) <= seconds + 0.05
    head = page[:page.index('<nav class="toc"')]
    assert "page size" in head and "构建用时" in head


@pytest.mark.browser
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_page_in_chromium_shows_mathml_and_no_raw_tex(quick, page, lang):
    _, path, _ = quick
    page.goto(path.as_uri())
    if lang == "zh":
        page.locator("#lang").click()
    assert page.evaluate("document.documentElement.getAttribute('data-lang')") == lang
    n_math = page.evaluate("""() => [...document.querySelectorAll('math')]
        .filter(m => m.getBoundingClientRect().width > 0).length""")
    assert n_math >= 20
    # the visible text, outside <code> and <pre> (and <math>, whose text is the rendering)
    text = page.evaluate("""() => {
        const c = document.body.cloneNode(true);
        c.querySelectorAll('code, pre, math, script, style').forEach(e => e.remove());
        document.body.appendChild(c);
        const hidden = document.documentElement.getAttribute('data-lang') === 'en' ? '.zh' : '.en';
        c.querySelectorAll(hidden).forEach(e => e.remove());
        const t = c.innerText; c.remove(); return t; }""")
    assert len(text) > 2000 and not has_raw_tex(text)
    # a formula renders as mathematics: a fraction or root is drawn taller than a line
    quote = page.locator(f'section#claims div.{lang} math[display="block"]').first
    quote.scroll_into_view_if_needed()
    assert quote.bounding_box()["height"] > 20


@pytest.mark.browser
def test_a_toc_jump_leaves_the_heading_below_the_sticky_bar(quick, page):
    _, path, _ = quick
    page.set_viewport_size({"width": 1100, "height": 700})
    page.goto(path.as_uri())
    for sid in ("exp-masking", "long-contexts", "claims", "trained-model"):
        page.locator(f'nav.toc a[href="#{sid}"]').click()
        page.wait_for_function(f"() => location.hash === '#{sid}'")
        page.wait_for_timeout(100)
        bar = page.evaluate("document.getElementById('bar').getBoundingClientRect().bottom")
        box = page.evaluate(f"""() => {{ const r = document.querySelector('section#{sid} h2')
            .getBoundingClientRect(); return [r.top, r.bottom]; }}""")
        assert bar > 0 and box[0] >= bar - 0.5, (sid, bar, box)  # not under the bar
        assert box[1] < 700, (sid, box)  # and on screen
        # the heading is what the reader sees at that point, not the bar covering it
        hit = page.evaluate(f"""() => {{ const e = document.elementFromPoint(
            100, {(box[0] + box[1]) / 2}); return !!(e && e.closest('section#{sid} h2')); }}""")
        assert hit, sid
