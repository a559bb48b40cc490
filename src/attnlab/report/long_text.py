"""The long text the report's "Long contexts" part reads.

By default, attnlab's own course: the prose of its parts in English, then in Chinese
(``course_text.md`` beside this module, written by the course's generator from the same
source as the notebooks, and shipped in the package), about 6,600 + 11,100 SmolLM2 tokens,
so the curve reaches 8,192 tokens and the map fills SmolLM2's whole window on any fresh
install. A text attnlab wrote was chosen over a public-domain book from another package:
it is bilingual like the articles, about the same subject, and needs no dependency.

``ATTNLAB_ARTICLES=DIR`` reads the ``*.txt`` files of ``DIR`` (in name order, joined by
a blank line) instead, e.g. the two articles the course follows.

>>> t = long_text({})
>>> t.source, t.text.startswith("# 01 · "), "# 01 · 向量与投影" in t.text
('course', True, True)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ARTICLES_ENV", "COURSE_TEXT", "LongText", "long_text", "first_tokens"]

ARTICLES_ENV = "ATTNLAB_ARTICLES"
#: The course's prose, English then Chinese (generated with the notebooks).
COURSE_TEXT = Path(__file__).with_name("course_text.md")


@dataclass(frozen=True)
class LongText:
    """A long text and what it is: ``source`` is ``"course"`` or the folder read."""

    text: str
    source: str
    name_en: str
    name_zh: str


def long_text(environ: Mapping[str, str] = os.environ) -> LongText:
    """The course's text, or the ``*.txt`` files of ``$ATTNLAB_ARTICLES`` when it is set
    (``ValueError`` naming the variable when that folder is missing or holds none)."""
    raw = environ.get(ARTICLES_ENV, "").strip()
    if not raw:
        return LongText(COURSE_TEXT.read_text(encoding="utf-8"), "course",
                        "attnlab's course (its parts in English, then in Chinese)",
                        "attnlab 课程（各部分的英文版，然后是中文版）")
    folder = Path(raw)
    paths = sorted(folder.glob("*.txt")) if folder.is_dir() else []
    if not paths:
        what = "holds no *.txt file" if folder.is_dir() else "is not a folder"
        raise ValueError(f"{ARTICLES_ENV} must name a folder of *.txt texts, got {raw!r}, "
                         f"which {what}")
    names = ", ".join(p.name for p in paths)
    return LongText("\n\n".join(p.read_text(encoding="utf-8") for p in paths), str(folder),
                    f"the texts of {ARTICLES_ENV} ({names})",
                    f"{ARTICLES_ENV} 中的文本（{names}）")


def first_tokens(tokenizer: Any, text: str, n: int) -> list[int]:
    """The first ``n`` token ids of ``text``; ``ValueError`` if it has fewer."""
    ids = list(tokenizer(text)["input_ids"])
    if len(ids) < n:
        raise ValueError(f"tokens: the long text has {len(ids)} tokens, fewer than the {n} "
                         "asked")
    return ids[:n]
