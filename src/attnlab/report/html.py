"""The pieces every report section is made of: :class:`Section`, :class:`ReportContext`, and
small helpers for HTML fragments. Every string is escaped here.

Formulas are mathematics on the page: every text a reader sees (:func:`both`,
:func:`bilingual`, :func:`table` headers and cells, captions; :func:`text` for a
section's own fragments) goes through :func:`attnlab._mathml.html_with_math`, which
escapes it and turns its ``$...$`` / ``$$...$$`` segments, or a text that is one bare
formula, into MathML (rendered by the browser, offline). :func:`escape` stays plain
HTML escaping, for attributes and code.

Everything a reader sees comes in English and Chinese (the page shows one at a time):
:func:`bilingual` for prose, :func:`table` translates its headers and string cells with a
catalog (:mod:`attnlab.i18n`; its :data:`~attnlab.i18n.COMMON` words always), and
:func:`figure` draws a figure twice, the second time with its texts translated.

>>> fmt(1.234e-7), fmt(0.98123), fmt(1024), fmt(True)
('1.23e-07', '0.981', '1024', 'True')
>>> html_table = table(["check", "result"], [("<b>", True)], passed_col=1)
>>> "<td>&lt;b&gt;</td>" in html_table
True
>>> '<span class="en">pass</span><span class="zh" lang="zh">通过</span>' in html_table
True
>>> text("a $x$ < b").startswith("a <math") and "&lt; b" in text("a $x$ < b")
True
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from attnlab._mathml import MathError, html_with_math
from attnlab.i18n import figure_texts, merge, translate, translate_figure

__all__ = ["ReportContext", "Section", "BiText", "table", "fmt", "figure", "figure_to_data_uri",
           "figure_to_svg", "bilingual", "both", "escape", "text"]

escape = html.escape


def text(s: str) -> str:
    """A text a reader sees, as HTML: escaped, its formulas as MathML
    (:func:`attnlab._mathml.html_with_math`). A formula the converter cannot read is shown
    escaped as written (the page still builds; the browser tests catch raw TeX)."""
    try:
        return html_with_math(s)
    except MathError:
        return escape(s)


def fmt(x: Any, digits: int = 3) -> str:
    """Numbers for humans: 1.23e-07, 0.981, 1024, True."""
    if isinstance(x, bool) or x is None:
        return str(x)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if x == 0:
            return "0"
        if abs(x) < 1e-3 or abs(x) >= 1e5:
            return f"{x:.{digits - 1}e}"
        return f"{x:.{digits}g}" if abs(x) < 1 else f"{x:.{digits + 1}g}"
    return str(x)


class BiText(NamedTuple):
    """A table cell (or header) given in both languages."""

    en: str
    zh: str


def both(en: str, zh: str | None) -> str:
    """``en`` and ``zh`` as two spans the page shows one at a time; ``en`` alone (escaped)
    when ``zh`` is None or the same.

    >>> both("loss", "损失")
    '<span class="en">loss</span><span class="zh" lang="zh">损失</span>'
    >>> both("N = 4", "N = 4")
    'N = 4'
    """
    if zh is None or zh == en:
        return text(en)
    return f'<span class="en">{text(en)}</span><span class="zh" lang="zh">{text(zh)}</span>'


def _cell_html(v: Any, catalog: Mapping[str, str]) -> str:
    if isinstance(v, BiText):
        return both(v.en, v.zh)
    shown = fmt(v)
    return both(shown, translate(shown, catalog))


def table(headers: Sequence[Any], rows: Iterable[Sequence[Any]],
          passed_col: int | None = None, catalog: Mapping[str, str] | None = None) -> str:
    """An HTML table; ``passed_col`` (index) renders booleans as pass/FAIL cells.

    Headers and string cells are shown in English and in Chinese: a :class:`BiText` as
    given, any other string translated with ``catalog`` (merged over
    :data:`attnlab.i18n.COMMON`); a string with no translation stays as it is.
    """
    cat = merge(catalog)
    head = "".join(f"<th>{_cell_html(h, cat)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            if i == passed_col and isinstance(v, bool):
                word = "pass" if v else "FAIL"
                cells.append(f'<td class="{"ok" if v else "bad"}">{both(word, cat[word])}</td>')
            else:
                cells.append(f"<td>{_cell_html(v, cat)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    rows_html = "".join(body)
    return f'<table class="data"><thead><tr>{head}</tr></thead><tbody>{rows_html}</tbody></table>'


def bilingual(en: str, zh: str, tag: str = "p", cls: str = "") -> str:
    """The same text in English and Chinese; the page shows one at a time."""
    c = f" {cls}" if cls else ""
    return (f'<{tag} class="en{c}">{text(en)}</{tag}>'
            f'<{tag} class="zh{c}" lang="zh">{text(zh)}</{tag}>')


def figure_to_data_uri(fig: Any, dpi: int = 110, *, tight: bool = True) -> str:
    """A matplotlib figure as a PNG data URI, cut to its artists (``tight``) or whole.

    Drawn once by :func:`attnlab._render.figure_png` (``savefig`` draws a figure twice
    when the box is tight or the figure has a layout engine), lossless and small: an opaque
    figure is stored as RGB and compressed with Pillow's ``optimize`` (the report draws
    every figure twice, once per language).
    """
    from attnlab._render import figure_png

    data = figure_png(fig, dpi=dpi, tight=tight)
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def figure_to_svg(fig: Any) -> str:
    """A matplotlib figure as an inline <svg> element (no XML prolog)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]


def _cjk_family() -> list[str] | None:
    """The font family list for Chinese figure texts (None when no such font is installed:
    matplotlib then draws boxes and warns)."""
    from attnlab.viz.figures import cjk_font

    font = cjk_font()
    return [font, "DejaVu Sans"] if font else None


def figure(fig: Any, caption_en: str, caption_zh: str, *, catalog: Mapping[str, str] | None = None,
           zh: Any = None, alt: str | None = None, alt_zh: str | None = None, dpi: int = 90,
           svg: bool = False, tight: bool = True) -> str:
    """A ``<figure>`` with the figure inline (PNG data URI, or ``svg``) in English and in
    Chinese, and a bilingual caption.

    The Chinese figure is ``zh`` (a second figure, drawn in Chinese by its maker) or, with
    ``catalog``, ``fig`` itself: drawn once in English, then its texts translated in place
    (:func:`attnlab.i18n.translate_figure`, :data:`~attnlab.i18n.COMMON` merged in, with a
    font that covers Chinese) and drawn again. A figure with nothing to translate, or with
    neither ``zh`` nor ``catalog``, is drawn once for both languages. The matplotlib
    figures are closed afterwards (their memory freed).
    """
    import matplotlib.pyplot as plt

    def draw(f: Any, cls: str, text: str) -> str:
        lang = ' lang="zh"' if cls == "zh" else ""
        klass = f' class="{cls}"' if cls else ""
        if svg:
            return f"<div{klass}{lang}>{figure_to_svg(f)}</div>"
        uri = figure_to_data_uri(f, dpi, tight=tight)
        return f'<img{klass}{lang} alt="{escape(text)}" src="{uri}">'

    alt_en = alt if alt is not None else caption_en
    alt_zh = alt_zh if alt_zh is not None else caption_zh
    cat = merge(catalog) if catalog is not None else None
    try:
        if zh is None and cat is not None and any(
                translate(t, cat) not in (None, t) for t in figure_texts(fig)):
            inner = draw(fig, "en", alt_en)
            translate_figure(fig, cat, family=_cjk_family())
            inner += draw(fig, "zh", alt_zh)
        elif zh is not None:
            inner = draw(fig, "en", alt_en) + draw(zh, "zh", alt_zh)
        else:
            inner = draw(fig, "", alt_en)
    finally:
        plt.close(fig)
        if zh is not None:
            plt.close(zh)
    return (f"<figure>{inner}<figcaption>{bilingual(caption_en, caption_zh, tag='span')}"
            f"</figcaption></figure>")


@dataclass
class Section:
    """One part of the report.

    ``html`` is a trusted fragment built by attnlab (every user string inside it must have
    been escaped). ``passed`` is None for sections that only show things; ``finding`` marks
    a section whose claim does not hold, as its experiment expected (passed, shown apart).
    ``rows`` are the terminal summary: (check, value, passed-or-None).
    """

    id: str
    title: str
    title_zh: str
    html: str
    passed: bool | None = None
    rows: list[tuple[str, str, bool | None]] = field(default_factory=list)
    seconds: float = 0.0
    #: how many sections the part that built this one built in those ``seconds`` (the
    #: experiments are one part of many sections)
    seconds_shared: int = 1
    #: the section reports a claim the numbers refute, as expected: badge "FINDING"
    finding: bool = False


@dataclass
class ReportContext:
    """What every section builder receives: where the report goes, the seed, and where
    to say what it is doing."""

    out_dir: Path
    quiet: bool = False
    seed: int = 0
    progress: Any = None  # rich.progress.Progress or None
    #: results shared between the sections of one build (e.g. ``"experiments"``: the
    #: experiment results, computed once for the claim inventory and the experiments)
    cache: dict[str, Any] = field(default_factory=dict)
    #: where :meth:`log` sends its lines instead of the progress display (a part built in
    #: a second process sends them back to the first)
    say: Any = None  # Callable[[str], Any] or None

    def log(self, message: str) -> None:
        if self.say is not None:
            self.say(message)
        elif self.progress is not None:
            self.progress.console.log(message)
