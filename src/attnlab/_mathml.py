"""Mathematics as MathML: TeX written in the project's texts, rendered offline.

Every page attnlab writes (the report, the explorer, the reference site) shows formulas
as MathML, which browsers render natively: no script, no font and no request leaves the
page. The TeX is converted when the page is written, by ``latex2mathml`` (pure Python).

Two forms are recognised in a text:

* ``$...$`` (inline) and ``$$...$$`` (display) segments, as the articles and the course
  write them;
* a text that is one formula and nothing else (a TeX command such as ``\\frac``, no
  ``$`` and no Chinese character), as the articles print their display formulas on a
  line of their own: it becomes one display formula.

>>> html_with_math("a $x^2$ b").startswith('a <math')
True
>>> "&lt;" in html_with_math("1 < 2, no formula")
True
>>> is_formula(r"\\text{Attention}(Q, K, V) = \\text{softmax}(QK^T)V")
True
>>> is_formula("比对得分越高的词，其 $V$ 就会被分配更大的权重")
False
"""

from __future__ import annotations

import html
import re
from functools import lru_cache

from attnlab._errors import Error

__all__ = ["SEGMENT", "to_mathml", "html_with_math", "is_formula", "has_raw_tex", "MathError"]

#: A formula in a text: ``$$display$$`` (group 1) or ``$inline$`` (group 2); an inline one
#: has no word just outside its dollars and no space just inside ("$5 and $6" is none).
SEGMENT = re.compile(r"\$\$(.+?)\$\$|(?<![\\$\w])\$(?![\s$])(.+?)(?<![\s\\$])\$(?![\w$])",
                     re.S)
# what a reader would take for TeX source: any $...$ at all (the check is the looser one)
_ANY_SEGMENT = re.compile(r"\$\$(.+?)\$\$|(?<![\\$])\$(?!\$)(.+?)(?<![\\$])\$", re.S)
_COMMAND = re.compile(r"\\[A-Za-z]+")
_CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")


class MathError(Error):
    """A formula that ``latex2mathml`` cannot convert (the message quotes it)."""


@lru_cache(maxsize=4096)
def to_mathml(tex: str, display: bool = False) -> str:
    """The MathML element of one TeX formula (without its ``$`` delimiters)."""
    if not isinstance(tex, str) or not tex.strip():
        raise MathError(f"tex must be a non-empty TeX formula, got {tex!r}")
    from latex2mathml.converter import convert

    try:
        out = convert(tex.strip(), display="block" if display else "inline")
    except Exception as exc:  # the converter raises several types on bad TeX
        raise MathError(f"cannot convert the formula {tex!r} to MathML ({exc})") from None
    # HTML knows <math> without its namespace URL (attnlab's pages name no URL); the
    # alttext keeps the source for copy and for readers that do not render MathML
    out = out.replace(' xmlns="http://www.w3.org/1998/Math/MathML"', "")
    return out.replace('display="inline">', f'display="inline" alttext="{html.escape(tex)}">'
                       ).replace('display="block">',
                                 f'display="block" alttext="{html.escape(tex)}">')


def is_formula(text: str) -> bool:
    """Whether ``text`` is one display formula on its own: a TeX command, no ``$``, no
    Chinese character."""
    return (isinstance(text, str) and "$" not in text and not _CJK.search(text)
            and bool(_COMMAND.search(text)))


def html_with_math(text: str) -> str:
    """``text`` as HTML: escaped, with its formulas as MathML (see the module's doc)."""
    if is_formula(text):
        return to_mathml(text, display=True)
    out, last = [], 0
    for m in SEGMENT.finditer(text):
        out.append(html.escape(text[last:m.start()]))
        tex, display = (m.group(1), True) if m.group(1) is not None else (m.group(2), False)
        out.append(to_mathml(tex, display))
        last = m.end()
    out.append(html.escape(text[last:]))
    return "".join(out)


def has_raw_tex(visible_text: str) -> bool:
    """Whether a page's visible text still shows TeX source: a ``$...$`` segment or a
    TeX command such as ``\\frac`` (what a browser test asks of a rendered page).

    >>> has_raw_tex("softmax(QKᵀ/√d_k)"), has_raw_tex(r"$QK^T$"), has_raw_tex(r"\\sqrt{d}")
    (False, True, True)
    """
    return bool(_ANY_SEGMENT.search(visible_text) or _COMMAND.search(visible_text))
