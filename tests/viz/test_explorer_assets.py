"""explorer.js is joined from the parts in viz/static/explorer/: every part listed exists and
is used, the joined text is one script that Chromium runs without a console error, each
part parses on its own, and every word the script asks for is in the i18n table."""

from __future__ import annotations

import json
import re

import pytest

from attnlab.viz import assets
from attnlab.viz.assets import EXPLORER_PARTS, static_asset

PARTS = assets._PARTS_DIR


def test_every_listed_part_exists_and_every_file_is_listed():
    assert len(set(EXPLORER_PARTS)) == len(EXPLORER_PARTS)
    assert all((PARTS / name).is_file() for name in EXPLORER_PARTS)
    assert sorted(p.name for p in PARTS.iterdir()) == sorted(EXPLORER_PARTS)
    assert EXPLORER_PARTS[0] == "core.js" and EXPLORER_PARTS[-1] == "main.js"


def test_the_script_holds_every_part_once_in_the_listed_order():
    js = static_asset("explorer.js")
    at = [js.index(f"/* -- viz/static/explorer/{name} -- */") for name in EXPLORER_PARTS]
    assert at == sorted(at)
    for name in EXPLORER_PARTS:
        assert js.count(f"/* -- viz/static/explorer/{name} -- */") == 1
        if name.endswith(".js"):  # the part's text, as written
            assert (PARTS / name).read_text(encoding="utf-8").rstrip() in js
    assert js.startswith("(function () {") and js.rstrip().endswith("})();")
    assert "</script" not in js.lower()  # inlined in a <script>: nothing may end it
    assert static_asset("explorer.js") is js  # read once


def test_no_part_is_over_600_lines():
    for p in [*PARTS.iterdir(), PARTS.parent / "explorer.css"]:
        n = len(p.read_text(encoding="utf-8").splitlines())
        assert n <= 600, f"{p.name}: {n} lines"


def test_the_words_have_every_language_and_every_key_the_script_asks_for():
    table = json.loads((PARTS / "i18n.json").read_text(encoding="utf-8"))
    langs, words = table["langs"], table["words"]
    assert langs == ["en", "zh"]
    assert all(isinstance(w, list) and len(w) == len(langs) and all(isinstance(x, str) and x
                                                                      for x in w)
               for w in words.values())
    code = "\n".join((PARTS / n).read_text(encoding="utf-8") for n in EXPLORER_PARTS
                     if n.endswith(".js"))
    asked = set(re.findall(r'\bt\("([^"]+)"\s*[,)]', code)) | set(
        re.findall(r'"data-i18n": "([^"]+)"\s*[,}]', code)) | set(
        re.findall(r'this\.math\([^;]*?, "([^"]+)"\)', code))
    assert {"exportSvg", "lang", "peNote", "maxErr", "imageLong"} <= asked  # the scan sees them
    assert asked - set(words) == set()
    # keys that are names: the tabs (the payload's views), stacks and roles
    from attnlab.viz.explorer import IMAGE_VIEW, VIEWS

    assert set(VIEWS) | {IMAGE_VIEW} <= set(words)
    assert {"stack:self", "stack:encoder", "stack:decoder", "stack:cross", "role:sink",
            "role:previous-token", "role:induction", "role:self"} <= set(words)


def test_a_bad_asset_name_is_refused_naming_it():
    with pytest.raises(ValueError, match="name must be 'explorer.js' or 'explorer.css', "
                                         "got 'explorer.mjs'"):
        static_asset("explorer.mjs")


def _blank(page, script: str) -> None:
    page.set_content(f"<!DOCTYPE html><html><body><div id='r'></div>"
                     f"<script>{script}</script></body></html>")


@pytest.mark.browser
def test_chromium_runs_the_joined_script_and_each_part_parses(page):
    _blank(page, static_asset("explorer.js"))  # the page fixture fails on console errors
    api = page.evaluate("Object.keys(window.AttnlabExplorer).sort()")
    assert api == ["commTransport", "httpTransport", "mount", "mountData", "scoreRow",
                   "softmaxRow"]
    for name in EXPLORER_PARTS:
        if name.endswith(".js"):  # a part is a function body: one parse each, nothing run
            text = (PARTS / name).read_text(encoding="utf-8")
            assert page.evaluate("t => { new Function(t); return true; }", text), name
    # loading the script twice (two explorers on one page) keeps the first
    page.evaluate("window.AttnlabExplorer.mark = 1")
    page.add_script_tag(content=static_asset("explorer.js"))
    assert page.evaluate("window.AttnlabExplorer.mark") == 1


@pytest.mark.browser
def test_a_payload_without_its_views_is_refused_naming_the_key(page):
    _blank(page, static_asset("explorer.js"))
    got = page.evaluate("""() => {
      try { window.AttnlabExplorer.mountData(document.getElementById('r'), {traces: []}); }
      catch (e) { return String(e.message); }
      return 'mounted';
    }""")
    assert got.startswith("payload.views: expected a list of view names") and "got undefined" in got
    got = page.evaluate("""() => {
      try {
        window.AttnlabExplorer.mountData(document.getElementById('r'),
                                         {views: ['model', 'nosuch'], view: 'model'});
      } catch (e) { return String(e.message); }
      return 'mounted';
    }""")
    assert got == 'payload.views: expected views this script draws, got "nosuch"'
