"""Every 「…」 quote attnlab attributes to an article is in that article, verbatim.

Quotes come from the inventory (each item's ``quote_zh``, and any 「…」 in its other texts)
and from every module of :mod:`attnlab.experiments`: its docstrings (module, classes,
functions), its ``#:`` attribute comments and its ``CLAIM`` / ``CLAIM_ZH`` texts. There,
「…」 means a quote of an article; attnlab's own example sentences are written “…”. A quote
belongs to the article named last before it in the same text ("article 000", "文章 001"),
else to the articles whose inventory items the module's experiment decides, else to either
article. It must be a substring of that article's text once all whitespace is removed from
both (a docstring breaks lines where the article does not).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from articles import SKIP_WHY, article_text

import attnlab.experiments as experiments_pkg
from attnlab.experiments import EXPERIMENTS
from attnlab.experiments import claims as inv

PACKAGE = Path(experiments_pkg.__file__).resolve().parent
MENTION = re.compile(r"(?:\b[Aa]rticles?|文章)\s*(000|001)")
TEXT_FIELDS = ("claim_en", "claim_zh", "conditions_en", "conditions_zh", "not_testable_en",
               "not_testable_zh")


@dataclass(frozen=True)
class Quote:
    """One quote: where it was found, the articles it may come from, its text."""

    where: str
    articles: tuple[str, ...]
    text: str


def quotes_in(text: str) -> list[tuple[int, str]]:
    """``(start, quote)`` of each outermost 「…」 in ``text`` (nested 「」 stay inside)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "「":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "」" and depth:
            depth -= 1
            if depth == 0:
                out.append((start, text[start + 1:i]))
    return out


def attributed(where: str, text: str, default: tuple[str, ...]) -> list[Quote]:
    """The quotes of ``text``, each given the article named last before it, or ``default``."""
    out = []
    for start, q in quotes_in(text):
        named = MENTION.findall(text[:start])
        out.append(Quote(where, (named[-1],) if named else default, q))
    return out


def module_texts(source: str) -> list[str]:
    """A module's docstrings, ``#:`` comment blocks (consecutive lines joined) and
    ``CLAIM`` / ``CLAIM_ZH`` strings."""
    texts = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                texts.append(doc)
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in ("CLAIM", "CLAIM_ZH") for t in node.targets):
            value = ast.literal_eval(node.value)
            if isinstance(value, str):
                texts.append(value)
    block: list[str] = []
    last_row = -2
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and tok.string.startswith("#:"):
            if tok.start[0] != last_row + 1 and block:
                texts.append("\n".join(block))
                block = []
            block.append(tok.string[2:])
            last_row = tok.start[0]
    if block:
        texts.append("\n".join(block))
    return texts


def _experiment_articles() -> dict[str, tuple[str, ...]]:
    """module path -> the articles whose inventory items its experiment decides."""
    out: dict[str, set[str]] = {}
    for c in inv.CLAIMS:
        for name in c.covered_by:
            out.setdefault(EXPERIMENTS[name], set()).add(c.article)
    return {m: tuple(sorted(a)) for m, a in out.items()}


def module_quotes(path: Path, root: Path = PACKAGE) -> list[Quote]:
    """Every quote in the module at ``path`` (inside the package folder ``root``)."""
    rel = path.relative_to(root).with_suffix("")
    module = ".".join(("attnlab", "experiments", *rel.parts))
    default = _experiment_articles().get(module, inv.ARTICLES)
    where = f"{path.name}"
    return [q for t in module_texts(path.read_text(encoding="utf-8"))
            for q in attributed(where, t, default)]


def inventory_quotes(claims: Iterable[inv.Claim] = inv.CLAIMS) -> list[Quote]:
    """Each item's ``quote_zh`` (its article's) and the 「…」 in its other texts."""
    out = []
    for c in claims:
        out.append(Quote(f"{c.id}.quote_zh", (c.article,), c.quote_zh))
        for field in TEXT_FIELDS:
            out += attributed(f"{c.id}.{field}", getattr(c, field), (c.article,))
    return out


def all_quotes() -> list[Quote]:
    return inventory_quotes() + [q for p in sorted(PACKAGE.rglob("*.py"))
                                 for q in module_quotes(p)]


def _flat(text: str) -> str:
    return re.sub(r"\s+", "", text)


def misquoted(quotes: Iterable[Quote], texts: Mapping[str, str]) -> list[Quote]:
    """The quotes found verbatim (whitespace aside) in none of their articles."""
    flat = {a: _flat(t) for a, t in texts.items()}
    return [q for q in quotes if not any(_flat(q.text) in flat[a] for a in q.articles)]


def _articles() -> dict[str, str] | None:
    texts = {a: article_text(a) for a in inv.ARTICLES}
    return texts if all(t is not None for t in texts.values()) else None


# Quotes known not to be verbatim yet, (module, quote) -> why: each runs as a strict xfail,
# which fails as soon as the quote is right (then remove it from here). None today.
PENDING: dict[tuple[str, str], str] = {}

QUOTES = all_quotes()


_PENDING = {(where, _flat(text)): why for (where, text), why in PENDING.items()}


def _param(q: Quote):
    why = _PENDING.get((q.where, _flat(q.text)))
    marks = [pytest.mark.xfail(strict=True, reason=f"not verbatim: {why}")] if why else []
    return pytest.param(q, id=f"{q.where}:{_flat(q.text)[:24]}", marks=marks)


@pytest.mark.parametrize("quote", [_param(q) for q in QUOTES])
def test_every_attributed_quote_is_in_its_article(quote):
    texts = _articles()
    if texts is None:
        # justified: the articles' text is not in the repository (only beside a checkout)
        pytest.skip(SKIP_WHY)
    assert not misquoted([quote], texts), (
        f"{quote.where}: 「{quote.text}」 is not in article {' or '.join(quote.articles)} "
        "verbatim; quote the article exactly, or write attnlab's own example as “…”")


def test_pending_quotes_are_still_there():
    """Each PENDING entry names a quote the collector finds (a stale entry is an error)."""
    found = {(q.where, _flat(q.text)) for q in QUOTES}
    assert set(_PENDING) <= found, sorted(set(_PENDING) - found)


def test_the_collector_reads_the_inventory_docstrings_comments_and_claims():
    wheres = {q.where for q in QUOTES}
    assert sum(w.endswith(".quote_zh") for w in wheres) == len(inv.CLAIMS)
    assert {"contextualisation.py", "softmax_saturation.py", "dot_product_geometry.py",
            "fused_qkv_speed.py"} <= wheres
    by_text = {q.text: q for q in QUOTES}
    assert by_text["发布会"].where == "contextualisation.py"  # from a #: comment block
    assert by_text["发布会"].articles == ("000",)
    assert by_text["线性投影：升维与子空间切割"].articles == ("000",)
    # attnlab's own examples are no quotes
    assert not {"我吃了一个苹果", "苹果公司的发布会", "这是水果"} & set(by_text)


def test_a_planted_wrong_quote_fails_and_a_right_one_passes(tmp_path):
    """Both ways, on a tmp article: the collector finds each kind of quote and the check
    flags exactly the ones the article does not contain."""
    texts = {"000": "第一篇：注意力的\n数学本质。", "001": "第二篇：位置编码的波长。"}
    pkg = tmp_path / "experiments"
    pkg.mkdir()
    (pkg / "toy.py").write_text(
        '"""toy: article 000 says 「注意力的数学\n    本质」 and 「编造的句子」; article 001: '
        '「位置编码的波长」."""\n\n'
        '#: attnlab\'s example “我吃了一个苹果”, after article\n#: 001\'s 「第一篇」.\n'
        'X = 1\n'
        'CLAIM_ZH = "文章 000 的「位置编码」"\n\n'
        'def f():\n    """「第二篇」"""\n', encoding="utf-8")
    found = module_quotes(pkg / "toy.py", pkg)
    assert {(q.text.replace("\n    ", ""), q.articles) for q in found} == {
        ("注意力的数学本质", ("000",)), ("编造的句子", ("000",)), ("位置编码的波长", ("001",)),
        ("第一篇", ("001",)), ("位置编码", ("000",)), ("第二篇", inv.ARTICLES)}
    bad = misquoted(found, texts)
    assert {q.text for q in bad} == {"位置编码", "编造的句子", "第一篇"} and len(bad) == 3
    # the inventory's quotes, both ways
    right = inv.Claim("000-t", "000", "claim", "注意力的数学本质", "A test claim.", "测试论断。",
                      not_testable_en="a test", not_testable_zh="测试")
    wrong = inv.Claim("001-t", "001", "claim", "注意力的数学本质",
                      "A test claim, quoting 「波长」.", "测试论断：文章 000 的「编造」。",
                      not_testable_en="a test", not_testable_zh="测试")
    bad = misquoted(inventory_quotes([right, wrong]), texts)
    assert [(q.where, q.text) for q in bad] == [("001-t.quote_zh", "注意力的数学本质"),
                                                ("001-t.claim_zh", "编造")]
