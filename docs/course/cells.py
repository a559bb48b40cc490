"""The course's cells: text in two languages, shared code, exercises, parts (build.py
writes the notebooks from them; each part is a module of ``parts/``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Text", "Code", "Exercise", "Predict", "Part", "measured", "by_hand"]


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
    """A prompt, the learner's answer cell and a ``check`` cell that asserts it.

    ``blank`` is the answer cell as the notebook ships it: the names to compute assigned
    ``...`` (or a function whose body returns ``...``), with a comment saying what to
    compute. ``answer`` is the reference answer: not in the notebooks, build.py writes it
    into the solutions file (``docs/course/solutions.md``). ``check`` is the check cell: an
    ``assert`` that fails (AssertionError, with a clear message) on the blank, on
    ``wrong`` and on any wrong value, and passes on ``answer``. ``wrong`` is a deliberately
    wrong answer, for the tests only.
    """

    key: str
    en: str
    zh: str
    blank: str
    answer: str
    check: str
    wrong: str

    def __post_init__(self) -> None:
        for name in ("key", "en", "zh", "blank", "answer", "check", "wrong"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"Exercise {self.key!r}: {name} must be a non-empty string, "
                                 f"got {value!r}")
        if "..." not in self.blank:
            raise ValueError(f"Exercise {self.key!r}: blank must leave what to compute as "
                             f"`...`, got {self.blank!r}")
        if self.blank.strip() == self.answer.strip():
            raise ValueError(f"Exercise {self.key!r}: blank must not be the answer")


@dataclass(frozen=True)
class Predict(Exercise):
    """Predict, then check: an exercise placed in the body of a part, *before* the cells
    that make the measurement, not among the exercises at the end. The learner writes a
    number (``blank``: ``name = ...``); the ``check`` runs the measurement itself and passes
    it to ``attnlab.course.predicted(guess, truth, within=...)``, which prints the guess, the
    measured value and the gap, and fails on ``...``, on a value that is not a number and on
    a guess further from the truth than ``within``. ``wrong`` is the misconception the part
    corrects (it must fail); ``answer`` is a reasoned guess (it must pass)."""


@dataclass(frozen=True)
class Part:
    """One notebook: its number, file-name slug, titles in both languages and cells;
    ``needs_models``: it loads real models (their packages may be missing)."""

    number: int
    slug: str
    title_en: str
    title_zh: str
    cells: tuple[Text | Code | Exercise, ...]
    needs_models: bool = False

    @property
    def stem(self) -> str:
        return f"{self.number:02d}_{self.slug}"


def measured(module: str, en: str, zh: str, call: str) -> tuple[Text, Code, Code]:
    """The cells placed before an experiment's verdict (``run("...")`` and ``report``):
    what its ``measure`` does (``en`` / ``zh``, a sentence or two), that function's source
    as attnlab holds it (``attnlab.course.show_code``: the page cannot drift from what the
    verdict runs), and ``call``, a cell that runs it at a small size and prints a few of
    its named fields (``m = <module>.measure(...)``)."""
    return (Text(en, zh),
            Code(f"from attnlab.course import show_code\nfrom attnlab.experiments import {module}"
                 f"\n\nshow_code({module}.measure)"),
            Code(call))


#: The first line of a code cell that makes an experiment's measurement by hand, in plain
#: torch, where its module has no ``measure`` yet: ``BY_HAND.format(name="rope-relative")``.
BY_HAND = '# what run("{name}") measures, by hand in plain torch'


def by_hand(name: str, src: str) -> Code:
    """A code cell of plain torch that makes the measurement of the experiment ``name``
    (placed before its ``run``), marked with :data:`BY_HAND` as its first line."""
    import textwrap

    return Code(BY_HAND.format(name=name) + "\n" + textwrap.dedent(src).strip("\n"))
