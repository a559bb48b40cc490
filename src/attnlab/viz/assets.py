"""The explorer page's static assets: the text of ``explorer.js`` and ``explorer.css``.

The explorer's script is written as modules, one file a part in ``viz/static/explorer/``:
each part says what it takes from another with an ``import { … } from "./core.js";`` line
and marks what it gives with ``export`` (``core.js``: helpers, decoding, score shaping, the
explorer's state; one file a view, each adding its ``Explorer.prototype.view_<name>``;
``main.js`` last: mounting and the one global, ``window.AttnlabExplorer``). The page's
words are data, ``i18n.json`` (``{"langs": ["en", "zh"], "words": {key: [English,
Chinese]}}``), a module that gives ``LANGS`` and ``I18N``.

No bundler, no network: :func:`bundle` joins the parts, in the order of
:data:`EXPLORER_PARTS`, into one script the page inlines. Each part runs in its own
function scope and sees only what it imports (a name it uses without importing it is an
error in the browser, and :func:`part_imports` lets a test check every use statically);
its exports are the object the function returns. An import from a part not listed
before it, or of a name that part does not export, is refused when the script is built.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

__all__ = ["EXPLORER_PARTS", "bundle", "part_body", "part_exports", "part_imports",
           "static_asset"]

_STATIC = Path(__file__).with_name("static")
_PARTS_DIR = _STATIC / "explorer"

#: The parts of ``explorer.js``, in the order they run (a part imports only from parts
#: before it; the views in tab order).
EXPLORER_PARTS = (
    "i18n.json", "core.js", "frame.js", "strip.js", "generation.js",
    "model.js", "head.js", "matrix.js", "qk.js", "attribution.js", "geometry.js", "positional.js",
    "diagnostics.js", "image.js", "export.js", "main.js",
)

# One closure around the parts; a page that holds several explorers loads the script once.
_OPEN = '(function () {\n"use strict";\nif (window.AttnlabExplorer) return;\nvar PARTS = {};\n\n'
_CLOSE = "})();\n"
_IMPORT = re.compile(r'^import\s*\{([^}]*)\}\s*from\s*"\./([\w.-]+)";[ \t]*\n?', re.M)
_EXPORT = re.compile(r"^export\s+(function|var)\s+([^\n]*)", re.M)
_NAME = re.compile(r"[A-Za-z_$][\w$]*")


def part_imports(text: str) -> dict[str, tuple[str, ...]]:
    r"""The names a part imports, by the part they come from.

    >>> part_imports('import { h, s } from "./core.js";\nh("p");')
    {'core.js': ('h', 's')}
    """
    out: dict[str, tuple[str, ...]] = {}
    for m in _IMPORT.finditer(text):
        out[m.group(2)] = out.get(m.group(2), ()) + tuple(
            n.strip() for n in m.group(1).split(",") if n.strip())
    return out


def part_exports(text: str) -> tuple[str, ...]:
    r"""The names a part exports: each ``export function NAME`` and each name an ``export
    var A = …, B = …;`` declares (on its line).

    >>> part_exports("export function h() {}\nexport var A = f(1, 2), B = 3;\nvar C = 1;")
    ('h', 'A', 'B')
    """
    names: list[str] = []
    for kind, rest in _EXPORT.findall(text):
        if kind == "function":
            names.append(_NAME.match(rest).group(0))  # type: ignore[union-attr]
        else:  # the first name, and the one after each top-level comma
            names.append(_NAME.match(rest).group(0))  # type: ignore[union-attr]
            depth = 0
            for i, ch in enumerate(rest):
                depth += ch in "([{"
                depth -= ch in ")]}"
                if ch == "," and depth == 0:
                    names.append(_NAME.match(rest[i + 1:].lstrip()).group(0))  # type: ignore[union-attr]
    return tuple(names)


def _words_js(text: str) -> str:
    """i18n.json as the module's two declarations (``</`` written ``<\\/``, so that no word
    can end the page's ``<script>``)."""
    table = json.loads(text)
    words = "{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}"
                                for k, v in table["words"].items()) + "\n}"
    return (f"export var LANGS = {json.dumps(table['langs'])};\n"
            f"export var I18N = {words};\n").replace("</", "<\\/")


def part_body(name: str, text: str) -> str:
    """A part as the function body it runs as: its imports bound from the parts before it,
    ``export`` dropped, its exports returned."""
    lines = [f"var {n} = PARTS[{json.dumps(src)}].{n};"
             for src, names in part_imports(text).items() for n in names]
    body = _EXPORT.sub(lambda m: f"{m.group(1)} {m.group(2)}", _IMPORT.sub("", text))
    exports = ", ".join(f"{n}: {n}" for n in part_exports(text))
    return "\n".join(lines + [body.rstrip(), f"return {{{exports}}};"])


def bundle(parts: dict[str, str]) -> str:
    r"""The one script of ``parts`` (name -> its text as written, in running order).

    >>> js = bundle({"a.js": "export function f() { return 1; }",
    ...              "b.js": 'import { f } from "./a.js";\nwindow.x = f();'})
    >>> "var f = PARTS[\"a.js\"].f;" in js
    True
    >>> bundle({"b.js": 'import { f } from "./a.js";'})
    Traceback (most recent call last):
    ...
    ValueError: b.js imports from a.js, which is not a part before it (parts so far: none)
    """
    seen: dict[str, tuple[str, ...]] = {}
    out = []
    for name, text in parts.items():
        if name.endswith(".json"):
            text = _words_js(text)
        for src, names in part_imports(text).items():
            if src not in seen:
                raise ValueError(f"{name} imports from {src}, which is not a part before it "
                                 f"(parts so far: {', '.join(seen) or 'none'})")
            missing = [n for n in names if n not in seen[src]]
            if missing:
                raise ValueError(f"{name} imports {missing} from {src}, which exports only "
                                 f"{list(seen[src])}")
        seen[name] = part_exports(text)
        out.append(f"/* -- viz/static/explorer/{name} -- */\n"
                   f"PARTS[{json.dumps(name)}] = (function () {{\n"
                   f"{part_body(name, text)}\n}})();\n")
    return _OPEN + "\n".join(out) + _CLOSE


def _explorer_js() -> str:
    return bundle({name: (_PARTS_DIR / name).read_text(encoding="utf-8")
                   for name in EXPLORER_PARTS})


@cache
def static_asset(name: str) -> str:
    """The text of the explorer's JS (its parts joined into one script) or CSS.

    >>> js = static_asset("explorer.js")
    >>> js.startswith("(function () {") and "window.AttnlabExplorer = {" in js
    True
    """
    if name == "explorer.js":
        return _explorer_js()
    if name == "explorer.css":
        return (_STATIC / name).read_text(encoding="utf-8")
    raise ValueError(f"name must be 'explorer.js' or 'explorer.css', got {name!r}")
