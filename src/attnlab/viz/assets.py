"""The explorer page's static assets: the text of ``explorer.js`` and ``explorer.css``.

``explorer.js`` is one script joined from the parts in ``viz/static/explorer/``, in the
order of :data:`EXPLORER_PARTS`, inside one closure: the parts share its names (``core.js``
first: helpers, decoding, score shaping, the explorer's state; one file a view;
``main.js`` last: mounting and the one global, ``window.AttnlabExplorer``). The page's
words are data, ``i18n.json`` (``{"langs": ["en", "zh"], "words": {key: [English,
Chinese]}}``), joined as ``var LANGS = …; var I18N = …;``. No modules, no network: the
page inlines the joined text exactly as one ``<script>``.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

__all__ = ["EXPLORER_PARTS", "static_asset"]

_STATIC = Path(__file__).with_name("static")
_PARTS_DIR = _STATIC / "explorer"

#: The parts of ``explorer.js``, in the order they are joined (views in tab order).
EXPLORER_PARTS = (
    "core.js", "i18n.json", "frame.js", "strip.js", "generation.js",
    "model.js", "head.js", "matrix.js", "qk.js", "attribution.js", "geometry.js", "positional.js",
    "diagnostics.js", "image.js", "export.js", "main.js",
)

# One closure around the parts; a page that holds several explorers loads the script once.
_OPEN = '(function () {\n"use strict";\nif (window.AttnlabExplorer) return;\n\n'
_CLOSE = "})();\n"


def _words_js(text: str) -> str:
    """i18n.json as two declarations of the script (``</`` written ``<\\/``, so that no
    word can end the page's ``<script>``)."""
    table = json.loads(text)
    words = "{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}"
                                for k, v in table["words"].items()) + "\n}"
    return (f"var LANGS = {json.dumps(table['langs'])};\n"
            f"var I18N = {words};\n").replace("</", "<\\/")


def _explorer_js() -> str:
    parts = []
    for name in EXPLORER_PARTS:
        text = (_PARTS_DIR / name).read_text(encoding="utf-8")
        if name.endswith(".json"):
            text = _words_js(text)
        parts.append(f"/* -- viz/static/explorer/{name} -- */\n{text.rstrip()}\n")
    return _OPEN + "\n".join(parts) + _CLOSE


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
