"""explorer.js is built from the modules in viz/static/explorer/: every part listed exists
and is used, each imports what it uses from another part (checked statically, and by
Chromium, where a part sees only its imports), the built text is one script that Chromium
runs without a console error, each part parses on its own, and every word the script asks
for is in the i18n table."""

from __future__ import annotations

import json
import re

import pytest

from attnlab.viz import assets
from attnlab.viz.assets import (
    EXPLORER_PARTS,
    bundle,
    part_body,
    part_exports,
    part_imports,
    static_asset,
)

PARTS = assets._PARTS_DIR


def test_every_listed_part_exists_and_every_file_is_listed():
    assert len(set(EXPLORER_PARTS)) == len(EXPLORER_PARTS)
    assert all((PARTS / name).is_file() for name in EXPLORER_PARTS)
    assert sorted(p.name for p in PARTS.iterdir()) == sorted(EXPLORER_PARTS)
    assert EXPLORER_PARTS[:2] == ("i18n.json", "core.js") and EXPLORER_PARTS[-1] == "main.js"


def test_the_script_holds_every_part_once_in_the_listed_order():
    js = static_asset("explorer.js")
    at = [js.index(f"/* -- viz/static/explorer/{name} -- */") for name in EXPLORER_PARTS]
    assert at == sorted(at)
    for name in EXPLORER_PARTS:
        assert js.count(f"/* -- viz/static/explorer/{name} -- */") == 1
        if name.endswith(".js"):  # the part's text, as it runs
            assert part_body(name, (PARTS / name).read_text(encoding="utf-8")) in js
    assert js.startswith("(function () {") and js.rstrip().endswith("})();")
    assert "</script" not in js.lower()  # inlined in a <script>: nothing may end it
    assert static_asset("explorer.js") is js  # read once


def _code(text: str) -> str:
    """A part without its comments and the contents of its strings."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(?:\\.|[^'\\\n])*'", "''", text)
    return re.sub(r"//[^\n]*", "", text)


def _declared(text: str) -> set[str]:
    """The names a part declares at its top level (exported or not)."""
    code = _code(text)
    return set(re.findall(r"^(?:export\s+)?(?:function|var)\s+([A-Za-z_$][\w$]*)", code,
                          re.M)) | set(part_exports(text))


def _unimported(name: str, text: str, exported: dict[str, str]) -> set[str]:
    """The names another part declares that ``text`` uses but neither imports nor
    declares itself (``exported``: each top-level name -> the part declaring it)."""
    code = _code(text)
    used = set(re.findall(r"(?<![\w$.])([A-Za-z_$][\w$]*)(?!\s*:)", code))
    own = set(re.findall(r"\b(?:function|var)\s+([A-Za-z_$][\w$]*)", code)) | set(
        re.findall(r"function\s*[\w$]*\(([^)]*)\)", code) and
        [a.strip() for args in re.findall(r"function\s*[\w$]*\(([^)]*)\)", code)
         for a in args.split(",")])
    imported = {n for names in part_imports(text).values() for n in names}
    return {n for n in used if exported.get(n, name) != name} - own - imported


def test_every_part_imports_what_it_uses_from_another():
    texts = {n: (PARTS / n).read_text(encoding="utf-8") for n in EXPLORER_PARTS
             if n.endswith(".js")}
    exported = {"LANGS": "i18n.json", "I18N": "i18n.json"} | {
        x: n for n, t in texts.items() for x in _declared(t)}
    assert {"h", "Explorer", "softmaxRow", "BLUE", "DIVERGE"} <= set(exported)
    for n, t in texts.items():
        assert not _unimported(n, t, exported), n
        for src in part_imports(t):  # only from parts before it
            assert EXPLORER_PARTS.index(src) < EXPLORER_PARTS.index(n), (n, src)
    # the check sees a use without its import
    frame = texts["frame.js"].replace("import { Explorer, clamp, fmt, h, s }",
                                      "import { Explorer, clamp, fmt, s }")
    assert _unimported("frame.js", frame, exported) == {"h"}
    # and a use of a name another part declares without exporting it (core.js's lut)
    assert _unimported("frame.js", texts["frame.js"] + "\nlut(h, 0, 1);", exported) == {"lut"}


def test_the_build_refuses_an_import_it_cannot_bind():
    with pytest.raises(ValueError, match=r"b.js imports \['g'\] from a.js, which exports only "
                                         r"\['f'\]"):
        bundle({"a.js": "export function f() {}", "b.js": 'import { g } from "./a.js";'})
    with pytest.raises(ValueError, match="not a part before it"):
        bundle({"b.js": 'import { f } from "./a.js";', "a.js": "export function f() {}"})


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
        if name.endswith(".js"):  # a part runs as a function body: one parse each
            text = part_body(name, (PARTS / name).read_text(encoding="utf-8"))
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
