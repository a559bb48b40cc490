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

:data:`GLOSSARY` gives each concept its one Chinese term (query → 查询, principal angle →
主夹角, explorer → 探索器 …) and :data:`WRONG_TERMS` the Chinese words to replace by them;
:func:`bare_terms`, :func:`wrong_terms` and :func:`term_problems` find, in Chinese text, an
English term used bare (not as code, math, a quotation or a gloss) and a wrong Chinese term:

>>> bare_terms("每个 query 与每个键（key）比较"), wrong_terms("平均主角")
(['query'], ['主角'])

This module is on the lowest layer: it imports nothing from attnlab and nothing heavy
(matplotlib is only touched through the figure handed in).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

__all__ = ["NUMBER", "COMMON", "GLOSSARY", "WRONG_TERMS", "template", "needs_translation",
           "translate", "merge", "missing", "figure_texts", "translate_figure",
           "english_words", "bare_terms", "wrong_terms", "term_problems", "TERMS",
           "term_variants"]

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


# --------------------------------------------------------------------------------------
# terms: one Chinese word per concept
# --------------------------------------------------------------------------------------

#: One Chinese term per concept: English → the Chinese every Chinese text of attnlab uses
#: for it (the course, the explorer, the report, the experiments). A term whose Chinese is
#: its English (softmax, Transformer) stays English in Chinese text too. The entries are the
#: attention concepts: "value" is the value vector 值 (a number in a table is 数值, a word of
#: :data:`COMMON`); "masked" is the verb 遮蔽 (a masked position is 被遮蔽的位置), "mask" the
#: noun 掩码. Chinese prose uses the Chinese term; the English may follow once, in
#: parentheses, as a gloss: 查询（query）. :func:`bare_terms` finds the rest.
GLOSSARY: dict[str, str] = {
    # attention itself
    "attention": "注意力",
    "self-attention": "自注意力",
    "cross-attention": "交叉注意力",
    "multi-head attention": "多头注意力",
    "attention weight": "注意力权重",
    "attention score": "注意力分数",
    "weight": "权重",
    "score": "分数",
    "query": "查询",
    "key": "键",
    "value": "值",
    "head": "头",
    "attention head": "注意力头",
    "induction head": "归纳头",
    "previous-token head": "前一个词元头",
    "induction": "归纳",
    "softmax": "softmax",
    "Transformer": "Transformer",
    "temperature": "温度",
    "scale": "缩放",
    "dot product": "点积",
    "entropy": "熵",
    "saturation": "饱和",
    "kernel": "核",
    "convex combination": "凸组合",
    "convex hull": "凸包",
    # masks and positions
    "mask": "掩码",
    "masked": "遮蔽",
    "causal": "因果",
    "position": "位置",
    "positional encoding": "位置编码",
    # tokens, layers, models
    "token": "词元",
    "embedding": "嵌入",
    "layer": "层",
    "residual stream": "残差流",
    "encoder": "编码器",
    "decoder": "解码器",
    "cache": "缓存",
    "bias": "偏置",
    "loss": "损失",
    "gradient": "梯度",
    # linear algebra
    "matrix": "矩阵",
    "vector": "向量",
    "dimension": "维度",
    "sequence": "序列",
    "subspace": "子空间",
    "principal angle": "主夹角",
    "projection": "投影",
    "null space": "零空间",
    "rank": "秩",
    "variance": "方差",
    # attnlab's own words
    "trace": "追踪",
    "hook": "钩子",
    "explorer": "探索器",
    "heatmap": "热力图",
    "claim": "论断",
    "verdict": "结论",
    "experiment": "实验",
    "control": "对照",
}

#: Chinese words that name a concept of :data:`GLOSSARY` with another term: a pattern
#: (a regular expression) → the term to write instead. 浏览器 is a web browser (网页浏览器
#: may say so); attnlab's explorer is 探索器.
WRONG_TERMS: dict[str, str] = {
    "主角": "主夹角",
    "(?<!网页)浏览器": "探索器",
    "询问": "查询",
    "令牌": "词元",
    "遮罩|掩膜|蒙版": "掩码",
    "屏蔽": "遮蔽",
    "权值": "权重",
    "(?<![变使显觉记])得分(?![散布])": "分数",
    "控制组|控制实验": "对照",
    "前一词头|前一词元头": "前一个词元头",
}

#: The claims page's terms, one per concept: English concept → (the Chinese term to write,
#: the variants that must not stand for it). A variant is a whole word: it counts only where
#: it does not stand right beside the term itself (标记词元, "a marked token", uses 词元 and
#: is right); 词 alone is not a variant (词元, 词汇, 单词 hold it). tests/test_terms.py
#: scans the inventory's Chinese, the experiments' ZH catalogs and docs/claims.md with it.
TERMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "token": ("词元", ("令牌", "标记", "词符", "记号", "符元")),
    "mask": ("掩码", ("遮罩", "蒙版", "掩膜", "屏蔽")),
    "previous-token head": ("前一个词元头", ("前一词头", "前一词元头", "前词元头", "上一词元头")),
    "induction head": ("归纳头", ("感应头", "归纳注意力头")),
}


def term_variants(text: str) -> list[tuple[str, str]]:
    """(variant, the term to write) for each variant of :data:`TERMS` in ``text``, in
    order; a variant right beside its term (标记词元) is a modifier, not a variant.

    >>> term_variants("每个令牌的掩码；落在标记词元上；蒙版")
    [('令牌', '词元'), ('蒙版', '掩码')]
    """
    found = []
    for term, variants in TERMS.values():
        for v in variants:
            for m in re.finditer(re.escape(v), text):
                beside = (text[m.end():m.end() + len(term)] == term
                          or text[max(0, m.start() - len(term)):m.start()] == term)
                if not beside:
                    found.append((m.start(), v, term))
    return [(v, t) for _, v, t in sorted(found)]


_IDEOGRAPH = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_HIDE = "\x00"
# spans that are not prose: code, math, markup, addresses, format fields
_NOT_PROSE = re.compile(
    r"```.*?```"                      # fenced code
    r"|(`+).*?\1"                     # inline code
    r"|(?<!\\)\$\$.*?(?<!\\)\$\$"     # display math
    r"|(?<!\\)\$[^$\n]*?(?<!\\)\$"    # inline math
    r"|\\\(.*?\\\)|\\\[.*?\\\]"       # \( … \) and \[ … \] math
    r"|</?[A-Za-z][^<>\n]*>"          # markup
    r"|\]\([^)\s]*\)"                 # a markdown link's target
    r"|\b(?:https?|file)://\S+"       # addresses
    r"|\{[^{}\s]*\}"                 # format fields: {}, {n}, {x:.2f}
    r"|\b[A-Za-z_][\w.]*\((?:[^()\n]|\([^()\n]*\))*\)"  # a call with its arguments
    r"|\b[a-z0-9]+(?:-[a-z0-9]+){2,}\b",   # an id: multihead-cost, 000-head-low-dim
    re.S | re.A)
#: quotations: Chinese corner brackets, curly and straight double quotes, book titles
_QUOTE = re.compile(r"「([^「」]*)」|『([^『』]*)』|“([^“”]*)”|‘([^‘’]*)’|《([^《》]*)》"
                    r"|\"([^\"\n]*)\"")
_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_ASSIGNED = re.compile(r" ?(?:[=!<>]=|=)")  # name = …, name=…, name == …
_ASSIGNS = re.compile(r"= ?$")               # … = name, …=name
_GLOSS = re.compile(r"[（(]([^（）()\n]*)[）)]")
#: what a gloss may hold: English words, separators, hidden code or math
_GLOSS_TEXT = re.compile(r"[\w\s\-/,，、;；'’.\x00]*", re.A)
_RUN = frozenset("、/／")  # what a run of Chinese terms may hold besides ideographs


def _plural(word: str) -> str:
    if word == "matrix":
        return "matrices"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    if word.endswith(("s", "x", "ch", "sh")):
        return word + "es"
    return word + "s"


def _norm(words: str) -> str:
    return re.sub(r"[\s\-]+", " ", words.strip().lower())


def _forms() -> dict[str, str]:
    """Every written form of a term that must not stand bare (normalised) → its entry."""
    out: dict[str, str] = {}
    for en, zh in GLOSSARY.items():
        if en == zh:
            continue
        *head, last = _norm(en).split(" ")
        for w in (last, _plural(last)):
            out[" ".join([*head, w])] = en
    return out


_FORMS = _forms()
_TERM = re.compile(
    r"(?<![A-Za-z0-9_])(?:"
    + "|".join(r"[\s\-]+".join(map(re.escape, f.split(" ")))
               for f in sorted(_FORMS, key=len, reverse=True))
    + r")(?![A-Za-z0-9_])", re.I)


def _mask(text: str, quotation: Callable[[str], bool] | None) -> str:
    """``text`` with what is not the prose's own words replaced by NULs (same length, so
    positions still point into ``text``): code, math, markup, addresses, format fields,
    quotations that ``quotation`` exempts (all when it is None), and identifiers."""
    out = _NOT_PROSE.sub(lambda m: _HIDE * len(m.group()), text)
    buf = list(out)

    def hide(start: int, end: int) -> None:
        buf[start:end] = _HIDE * (end - start)

    for m in _QUOTE.finditer(out):
        inner = next(g for g in m.groups() if g is not None)
        if quotation is None or quotation(inner):
            hide(m.start(), m.end())
    for m in _TOKEN.finditer(out):
        word, s, e = m.group(), m.start(), m.end()
        before, after = out[max(0, s - 2):s], out[e:e + 2]
        camel = any(c.isupper() for c in word[1:]) and any(c.islower() for c in word)
        if ("_" in word or any(c.isdigit() for c in word) or camel
                or after[:1] in ("(", "[") or _ASSIGNED.match(out, e)
                or _ASSIGNS.search(out, max(0, s - 3), s)
                or (after[:1] in (".", ":") and after[1:2].isalpha())
                or (before[-1:] in (".", ":") and before[:1].isalnum())
                or (before[-1:] == "-" and not before[:1].isalpha())):
            hide(s, e)
    return "".join(buf)


def _run_before(text: str, end: int) -> str:
    """The run of Chinese (ideographs, and 、 or / between terms) that ends at ``end``,
    spaces and emphasis (``**``) before ``end`` skipped: what a parenthesis there glosses."""
    i = end
    while i > 0 and text[i - 1] in " *":
        i -= 1
    j = i
    while j > 0 and (_IDEOGRAPH.match(text[j - 1]) or text[j - 1] in _RUN):
        j -= 1
    return text[j:i]


def _findings(text: str, quotation: Callable[[str], bool] | None
              ) -> Iterator[tuple[int, int, str]]:
    """(start, end, why) for each bare glossary term of ``text``."""
    masked = _mask(text, quotation)
    glosses: list[tuple[int, int, str]] = []
    for m in _GLOSS.finditer(masked):
        run = _run_before(masked, m.start())
        if run and _GLOSS_TEXT.fullmatch(m.group(1)):
            glosses.append((m.start(1), m.end(1), run))
    glossed: set[str] = set()
    for m in _TERM.finditer(masked):
        en = _FORMS[_norm(m.group())]
        gloss = next((g for g in glosses if g[0] <= m.start() and m.end() <= g[1]), None)
        if gloss is None:
            yield m.start(), m.end(), f"write {GLOSSARY[en]}"
        elif GLOSSARY[en] not in gloss[2]:
            yield m.start(), m.end(), f"a gloss of {gloss[2]!r}, not of {GLOSSARY[en]}"
        elif en in glossed:
            yield m.start(), m.end(), f"glossed once already: write {GLOSSARY[en]}"
        else:
            glossed.add(en)


def english_words(text: str, quotation: Callable[[str], bool] | None = None) -> list[str]:
    """The English words (two letters or more) of ``text``'s prose: what is left outside
    code, math, markup, format fields, identifiers and quotations (as in
    :func:`bare_terms`).

    >>> english_words("用 `q_proj` 与 head_dim 算出 $QK^T$ 的 scores，「Key 向量」")
    ['scores']
    """
    return _WORD.findall(_mask(text, quotation).replace(_HIDE, " "))


def bare_terms(text: str, quotation: Callable[[str], bool] | None = None) -> list[str]:
    """The English terms of :data:`GLOSSARY` that Chinese ``text`` uses bare, as written,
    in order: a Chinese reader must find the Chinese term there.

    Not prose, so never bare: code (fenced or in backticks), ``$…$`` math, markup, link
    targets, format fields ``{…}``, identifiers (a word with ``_`` or a digit, camelCase,
    a call ``f(``, a keyword ``k=``, an attribute ``a.b``, an option ``--mask``), and
    quotations (「…」, “…”, "…", 《…》: another's words, or a word mentioned as a word);
    ``quotation``, when given, decides which quotations are exempt (it gets a quotation's
    inside). The English may gloss its Chinese term once, in parentheses right after it:

    >>> bare_terms("每个 query 与每个 key 比较。")
    ['query', 'key']
    >>> bare_terms("每个查询（query）与每个键（key）比较；`q_proj` 与 $W_Q$ 都是代码。")
    []
    >>> bare_terms("查询（query）…… 又一个查询（query）。")
    ['query']
    >>> bare_terms("注意力（query）"), bare_terms("查询（query 向量）")
    (['query'], ['query'])
    >>> bare_terms("查询、键、值（query、key、value）；Query Vectors 与 queries。")
    ['Query', 'Vectors', 'queries']
    >>> bare_terms("文章写道「Key 向量」；用 trace.q、head=3 或 --mask 读取。")
    []
    >>> bare_terms("文章写道「Key 向量」", quotation=lambda s: "Key" not in s)
    ['Key']
    >>> bare_terms("多头注意力（multi-head attention）算出 attention weights。")
    ['attention weights']
    >>> bare_terms("softmax 之后是 Transformer 的下一层。")
    []
    """
    return [text[s:e] for s, e, _ in _findings(text, quotation)]


def wrong_terms(text: str, quotation: Callable[[str], bool] | None = None) -> list[str]:
    """The Chinese words of ``text`` that :data:`WRONG_TERMS` replaces by the glossary's
    term, in order (code, math, identifiers and quotations excepted, as in
    :func:`bare_terms`).

    >>> wrong_terms("两个子空间的主角；在浏览器中打开；用网页浏览器打开。")
    ['主角', '浏览器']
    >>> wrong_terms("主夹角与注意力探索器；分数变得分散；`主角`。")
    []
    """
    masked = _mask(text, quotation)
    found = [(m.start(), m.group()) for p in WRONG_TERMS for m in re.finditer(p, masked)]
    return [w for _, w in sorted(found)]


def term_problems(text: str, quotation: Callable[[str], bool] | None = None,
                  *, where: str = "") -> list[str]:
    """Every bare English term (:func:`bare_terms`) and every wrong Chinese term
    (:func:`wrong_terms`) of ``text``, each as a line that quotes its context and says
    what to write instead; ``where`` starts each line.

    >>> for line in term_problems("两个子空间的主角与 key", where="p04: "):
    ...     print(line)
    p04: 'key' in «两个子空间的主角与 key»: write 键
    p04: '主角' in «两个子空间的主角与 key»: write 主夹角
    """
    def context(s: int, e: int) -> str:
        return text[max(0, s - 20):e + 20].replace("\n", " ")

    out = [f"{where}{text[s:e]!r} in «{context(s, e)}»: {why}"
           for s, e, why in _findings(text, quotation)]
    masked = _mask(text, quotation)
    for pattern, right in WRONG_TERMS.items():
        for m in re.finditer(pattern, masked):
            out.append(f"{where}{m.group()!r} in «{context(m.start(), m.end())}»: write {right}")
    return out
