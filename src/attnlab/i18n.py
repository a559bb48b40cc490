"""English → Chinese for everything attnlab shows: catalogs, templates, figures.

A *catalog* is a plain ``dict[str, str]``, English → Chinese. A string is looked up first
as it is, then as its *template*: every number (:data:`NUMBER`) replaced by ``{}``. The
Chinese template holds the same number of ``{}``, filled with the same numbers, in order:

>>> template("heads 0–3 of 12")
'heads {}–{} of {}'
>>> translate("heads 0–3 of 12", {"heads {}–{} of {}": "第 {}–{} 个头（共 {} 个）"})
'第 0–3 个头（共 12 个）'

A string needs an entry only when it has a run of two or more ASCII letters outside
``$…$`` math (:func:`needs_translation`); any other string (numbers, symbols, one-letter
variables) reads the same in both languages and translates to itself:

>>> [needs_translation(s) for s in ("$\\\\sqrt{d_k}$ = 8", "q·k = 0.5", "loss")]
[False, False, True]
>>> translate("N = 64", {}), translate("loss", {})
('N = 64', None)

:func:`figure_texts` lists every text a matplotlib figure shows (titles, axis labels,
legends, annotations, colour-bar labels, categorical tick labels), and
:func:`translate_figure` translates them in place. :data:`COMMON` holds the words the
report itself shows (pass/FAIL, holds, measured, theory …).

This module is on the lowest layer: it imports nothing from attnlab and nothing heavy
(matplotlib is only touched through the figure handed in).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

__all__ = ["NUMBER", "COMMON", "template", "needs_translation", "translate", "merge",
           "missing", "figure_texts", "translate_figure"]

#: A number inside a string: an optional sign (ASCII or the typographic minus −),
#: digits, an optional fraction and an optional exponent.
NUMBER = re.compile(r"[-+−]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
_MATH = re.compile(r"(?<!\\)\$.*?(?<!\\)\$")
_WORD = re.compile(r"[A-Za-z]{2,}")

#: The words the report's own machinery shows around every experiment and table.
COMMON: dict[str, str] = {
    # verdicts and results
    "pass": "通过",
    "PASS": "通过",
    "FAIL": "失败",
    "holds": "成立",
    "does not hold": "不成立",
    "holds by construction": "按构造成立",
    "finding": "发现",
    "yes": "是",
    "no": "否",
    "True": "是",
    "False": "否",
    # table headers
    "check": "检查项",
    "value": "数值",
    "result": "结果",
    "measured": "测得值",
    "theory": "理论值",
    "measured quantity": "测量的量",
    "quantity": "量",
    "verdict": "结论",
    "expected verdict": "预期结论",
    "tolerance": "容差",
    "max |error|": "最大 |误差|",
    # expected values as Result.expected_text and the check helpers write them
    "≤ {} (slack {})": "≤ {}（余量 {}）",
    "≥ {} (slack {})": "≥ {}（余量 {}）",
    "in [{}, {}]": "∈ [{}, {}]",
    # the lines under each experiment
    "computed in {} s": "用时 {} 秒",
}


def template(text: str) -> str:
    """``text`` with every number (:data:`NUMBER`) replaced by ``{}``.

    >>> template("E = 64, N = 1e-6, scale −0.5"), template("L2H11 · fp64")
    ('E = {}, N = {}, scale {}', 'L{}H{} · fp{}')
    """
    return NUMBER.sub("{}", text)


def needs_translation(text: str) -> bool:
    """True when ``text`` holds a run of at least two ASCII letters outside ``$…$`` math:
    a word a reader must be able to read in Chinese too.

    >>> [needs_translation(s) for s in ("k", "d_k = 64", "log q", "$\\\\log q$", "")]
    [False, False, True, False, False]
    """
    return bool(_WORD.search(_MATH.sub("", text)))


def _fill(zh: str, numbers: Sequence[str], key: str) -> str:
    parts = zh.split("{}")
    if len(parts) - 1 != len(numbers):
        raise ValueError(f"catalog entry {key!r}: its Chinese {zh!r} has {len(parts) - 1} "
                         f"'{{}}' placeholder(s), expected {len(numbers)} (one per number)")
    out = [parts[0]]
    for number, part in zip(numbers, parts[1:]):
        out += [number, part]
    return "".join(out)


def translate(text: str, catalog: Mapping[str, str]) -> str | None:
    """The Chinese of ``text`` from ``catalog``: the exact entry, else its template's entry
    filled with ``text``'s numbers in order; ``text`` itself when it needs no translation
    (:func:`needs_translation`); None when it needs one and the catalog has none.

    >>> cat = {"loss": "损失", "step {} of {}": "第 {} 步，共 {} 步"}
    >>> translate("loss", cat), translate("step 3 of 10", cat), translate("step", cat)
    ('损失', '第 3 步，共 10 步', None)

    Raises ValueError when a template entry's Chinese holds a different number of ``{}``
    than the English has numbers.
    """
    if text in catalog:
        return catalog[text]
    numbers = NUMBER.findall(text)
    if numbers:
        key = template(text)
        if key in catalog:
            return _fill(catalog[key], numbers, key)
    return None if needs_translation(text) else text


def merge(*catalogs: Mapping[str, str] | None) -> dict[str, str]:
    """One catalog from several, later ones winning, :data:`COMMON` first.

    >>> merge({"loss": "损失"})["pass"], merge({"pass": "过"})["pass"]
    ('通过', '过')
    """
    out = dict(COMMON)
    for c in catalogs:
        if c:
            out.update(c)
    return out


def missing(texts: Sequence[str], catalog: Mapping[str, str]) -> list[str]:
    """The strings of ``texts`` that need a translation and have none (each once, in order).

    >>> missing(["loss", "step 3", "N = 4", "loss"], {"step {}": "第 {} 步"})
    ['loss']
    """
    out: dict[str, None] = {}
    for t in texts:
        if translate(t, catalog) is None:
            out[t] = None
    return list(out)


# --------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------


class _Slot:
    """One visible text of a figure: its string, how to replace it, and how to give it a
    font family."""

    __slots__ = ("key", "text", "set", "family")

    def __init__(self, key: Any, text: str, set_: Callable[[str], None],
                 family: Callable[[Sequence[str]], None]) -> None:
        self.key, self.text, self.set, self.family = key, text, set_, family


def _text_slot(t: Any) -> _Slot | None:
    if t is None or not t.get_visible() or not t.get_text():
        return None
    return _Slot(id(t), t.get_text(), t.set_text, t.set_fontfamily)


def _legend_slots(legend: Any) -> Iterator[_Slot | None]:
    if legend is None or not legend.get_visible():
        return
    yield _text_slot(legend.get_title())
    for t in legend.get_texts():
        yield _text_slot(t)


def _fixed_labels(fmt: Any) -> tuple[list[str], Callable[[int, str], None]] | None:
    """The labels of a formatter of fixed strings, and how to replace label i; None for a
    numeric formatter. ``set_xticks(ticks, labels)`` makes a FixedFormatter (matplotlib
    < 3.10) or a FuncFormatter over a {location: label} dict (3.10 and later)."""
    from matplotlib.ticker import FixedFormatter, FuncFormatter

    if isinstance(fmt, FixedFormatter):
        def set_seq(i: int, s: str) -> None:
            fmt.seq = [*fmt.seq[:i], s, *fmt.seq[i + 1:]]
        return [str(x) for x in fmt.seq], set_seq
    func = getattr(fmt, "func", None)
    if (isinstance(fmt, FuncFormatter) and isinstance(func, functools.partial)
            and getattr(func.func, "__name__", "") == "_format_with_dict"
            and func.args and isinstance(func.args[0], dict)):
        table = func.args[0]
        locs = list(table)

        def set_dict(i: int, s: str) -> None:
            table[locs[i]] = s
        return [str(table[k]) for k in locs], set_dict
    return None


def _tick_slots(ax: Any) -> Iterator[_Slot]:
    """Categorical tick labels, set as fixed strings (``set_xticks(ticks, labels)``);
    numeric ticks read the same in both languages."""
    for axis in (ax.xaxis, ax.yaxis):
        if not axis.get_visible():
            continue
        for which in ("major", "minor"):
            fmt = axis.get_major_formatter() if which == "major" else axis.get_minor_formatter()
            fixed = _fixed_labels(fmt)
            if fixed is None:
                continue
            labels, set_label = fixed
            for i, label in enumerate(labels):
                if not label:
                    continue

                def family(f: Sequence[str], axis: Any = axis, which: str = which) -> None:
                    axis.set_tick_params(which=which, labelfontfamily=list(f))

                yield _Slot((id(fmt), i), label, functools.partial(set_label, i), family)


def _figures(fig: Any) -> Iterator[Any]:
    yield fig
    for sub in getattr(fig, "subfigs", ()):
        yield from _figures(sub)


def _slots(fig: Any) -> list[_Slot]:
    found: list[_Slot | None] = []
    seen: set[int] = set()
    for f in _figures(fig):
        for attr in ("_suptitle", "_supxlabel", "_supylabel"):
            found.append(_text_slot(getattr(f, attr, None)))
        found += [_text_slot(t) for t in f.texts]
        for leg in f.legends:
            found += list(_legend_slots(leg))
        for ax in f.axes:
            if id(ax) in seen or not ax.get_visible():
                continue
            seen.add(id(ax))
            for attr in ("title", "_left_title", "_right_title"):
                found.append(_text_slot(getattr(ax, attr, None)))
            if ax.axison:
                found += [_text_slot(ax.xaxis.label) if ax.xaxis.get_visible() else None,
                          _text_slot(ax.yaxis.label) if ax.yaxis.get_visible() else None]
                found += list(_tick_slots(ax))
            found += list(_legend_slots(ax.get_legend()))
            found += [_text_slot(t) for t in ax.texts]
    out: dict[Any, _Slot] = {}  # each text once: a suptitle is also one of the figure's texts
    for s in found:
        if s is not None:
            out.setdefault(s.key, s)
    return list(out.values())


def figure_texts(fig: Any) -> list[str]:
    """Every text a matplotlib ``Figure`` shows, in drawing order: suptitle (and super
    labels), figure texts and legends, then per axes its titles (centre, left, right),
    axis labels, categorical tick labels (fixed strings, as ``set_xticks(ticks, labels)`` or
    a FixedFormatter sets them), legend title and entries, and
    texts and annotations. Colour bars are axes too: their labels come with them.
    Hidden texts, empty ones and numeric ticks are left out.

    >>> from matplotlib.figure import Figure
    >>> fig = Figure()
    >>> ax = fig.subplots()
    >>> _ = ax.plot([0, 1], label="train")
    >>> _ = ax.set_title("loss"), ax.set_xlabel("step"), ax.set_xticks([0, 1], ["a", "b"])
    >>> _ = ax.legend(); _ = ax.annotate("min", (0, 0))
    >>> figure_texts(fig)
    ['loss', 'step', 'a', 'b', 'train', 'min']
    """
    return [s.text for s in _slots(fig)]


def translate_figure(fig: Any, catalog: Mapping[str, str], *,
                     family: Sequence[str] | None = None) -> list[str]:
    """Translate every text of ``fig`` (:func:`figure_texts`) in place with ``catalog``;
    a text with no translation stays as it is. ``family``: the font family list to give
    each translated text (one that covers Chinese, e.g. ``[cjk_font(), "DejaVu Sans"]``).
    Returns the strings left untranslated (each once, in order).

    >>> from matplotlib.figure import Figure
    >>> fig = Figure()
    >>> ax = fig.subplots()
    >>> _ = ax.set_title("loss at step 3"), ax.set_ylabel("accuracy")
    >>> translate_figure(fig, {"loss at step {}": "第 {} 步的损失"})
    ['accuracy']
    >>> ax.get_title(), ax.get_ylabel()
    ('第 3 步的损失', 'accuracy')
    """
    left: dict[str, None] = {}
    for slot in _slots(fig):
        zh = translate(slot.text, catalog)
        if zh is None:
            left[slot.text] = None
        elif zh != slot.text:
            slot.set(zh)
            if family:
                slot.family(list(family))
    return list(left)
