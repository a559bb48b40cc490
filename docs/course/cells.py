"""The course's cells: text in two languages, shared code, exercises, parts (build.py
writes the notebooks from them; each part is a module of ``parts/``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Text", "Code", "Exercise", "Part"]


@dataclass(frozen=True)
class Text:
    """A markdown cell, in English and in Chinese."""

    en: str
    zh: str


@dataclass(frozen=True)
class Code:
    """A code cell, the same in both languages."""

    src: str


@dataclass(frozen=True)
class Exercise:
    """A prompt, the learner's answer cell (filled with a working ``answer``) and a
    ``check`` cell that asserts it; ``wrong`` replaces ``answer`` in the tests, where the
    check must then fail."""

    key: str
    en: str
    zh: str
    answer: str
    check: str
    wrong: str


@dataclass(frozen=True)
class Part:
    number: int
    slug: str
    title_en: str
    title_zh: str
    cells: tuple[Text | Code | Exercise, ...]
    needs_models: bool = False

    @property
    def stem(self) -> str:
        return f"{self.number:02d}_{self.slug}"
