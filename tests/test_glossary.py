"""One Chinese term per concept (attnlab.i18n.GLOSSARY): the checker's rules, each both
ways, then every Chinese text attnlab ships through it: the Chinese notebooks (prose and
what their code prints), the explorer's words, the report's own Chinese and the
experiments' Chinese. A failure quotes the text and says which term to write."""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from attnlab.i18n import (
    COMMON,
    GLOSSARY,
    WRONG_TERMS,
    bare_terms,
    english_words,
    term_problems,
    wrong_terms,
)

sys.path.insert(0, str(Path(__file__).resolve().parent / "experiments"))
from articles import SKIP_WHY, article_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "attnlab"
_CJK = re.compile(r"[\u3400-\u9fff]")


def _load_build():
    """docs/course/build.py, loaded as tests/course/test_course.py loads it."""
    spec = importlib.util.spec_from_file_location("attnlab_course_build_glossary",
                                                  ROOT / "docs" / "course" / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


build = _load_build()


# --------------------------------------------------------------------------------------
# the rules, each both ways
# --------------------------------------------------------------------------------------


def test_the_glossary_gives_each_concept_one_chinese_term():
    for en, zh in [("query", "查询"), ("key", "键"), ("value", "值"), ("head", "头"),
                   ("mask", "掩码"), ("principal angle", "主夹角"), ("control", "对照"),
                   ("explorer", "探索器"), ("token", "词元"), ("softmax", "softmax"),
                   ("attention weight", "注意力权重")]:
        assert GLOSSARY[en] == zh, en
    assert all(_CJK.search(zh) or zh == en for en, zh in GLOSSARY.items())
    # no wrong term is the glossary's own term, and every wrong term names a glossary term
    for pattern, right in WRONG_TERMS.items():
        assert right in GLOSSARY.values(), right
        assert not any(re.search(pattern, zh) for zh in GLOSSARY.values()), pattern


@pytest.mark.parametrize("text,found", [
    ("第 i 个 query 与第 j 个 key 的点积", ["query", "key"]),
    ("Query、Keys 与 VALUES", ["Query", "Keys", "VALUES"]),
    ("各头的 principal angles", ["principal angles"]),
    ("每个 head 都有自己的 mask", ["head", "mask"]),
    ("对 key/value 头求和", ["key", "value"]),
    ("self-attention 与 attention weights", ["self-attention", "attention weights"]),
    ("用 trace 读取；打开 explorer", ["trace", "explorer"]),
    ("**trace** 保存每个头的权重", ["trace"]),
])
def test_a_bare_term_is_caught(text, found):
    assert bare_terms(text) == found


@pytest.mark.parametrize("text", [
    "查询（query）与键（key）",                        # a gloss right after its term
    "查询、键、值（query、key、value）",               # one gloss of a run of terms
    "查询向量（query vectors）",                       # the term inside a longer word
    "**追踪**（trace）",                               # emphasis between term and gloss
    "主夹角（principal angles）",
    "`query` 与 `attn.key` 是代码",                    # inline code
    "```\nquery = key @ value\n```",                   # fenced code
    "$\\mathrm{key}$ 与 $$\\text{value}$$",            # math
    "q_proj、hook_q、HookPoint、trace.q、head=3、--mask、fp64、keys[0] 与 mask(n)",
    "文章写道「Key 向量」；《Attention Is All You Need》",  # quotations
    "[查询](https://example.org/query)",                # a link's target
    "softmax 与 Transformer 不译",                     # terms that stay English
    "分数 {score} 与 {key:.2f}",                       # format fields
])
def test_a_glossed_or_code_term_is_not_caught(text):
    assert bare_terms(text) == [], text


@pytest.mark.parametrize("text,found", [
    ("查询（query）……再一个查询（query）", ["query"]),  # a gloss is given once
    ("注意力（query）", ["query"]),                      # a gloss of the wrong term
    ("查询（query 向量）", ["query"]),                   # Chinese inside: not a gloss
    ("query（查询）", ["query"]),                        # English first: bare
    ("查询 。（query）", ["query"]),                     # not right after the term
])
def test_a_gloss_counts_only_once_and_only_after_its_own_term(text, found):
    assert bare_terms(text) == found


def test_which_quotations_are_exempt_can_be_decided_by_the_caller():
    text = "文章写道「Key 向量」"
    assert bare_terms(text) == []
    assert bare_terms(text, quotation=lambda q: False) == ["Key"]
    assert bare_terms(text, quotation=lambda q: q == "Key 向量") == []


@pytest.mark.parametrize("text,found", [
    ("两个子空间的主角", ["主角"]),
    ("在浏览器中打开注意力浏览器", ["浏览器", "浏览器"]),
    ("询问与查询混用", ["询问"]),
    ("被屏蔽的位置", ["屏蔽"]),
    ("前一词头（得分 0.9）", ["前一词头", "得分"]),
])
def test_a_wrong_chinese_term_is_caught(text, found):
    assert wrong_terms(text) == found


@pytest.mark.parametrize("text", [
    "两个子空间的主夹角", "注意力探索器", "在网页浏览器中打开 HTML", "被遮蔽的位置",
    "权重变得分散", "前一个词元头（分数 0.9）", "`主角` 是代码", "文章写道「浏览器」",
])
def test_the_right_chinese_term_is_not_caught(text):
    assert wrong_terms(text) == [], text


def test_a_problem_names_the_term_to_write_and_quotes_its_context():
    (line,) = term_problems("每个 query 都看得见", where="zh/02: ")
    assert line.startswith("zh/02: 'query' in «每个 query 都看得见»") and "查询" in line
    (line,) = term_problems("平均主角", where="x: ")
    assert "'主角'" in line and "主夹角" in line


# --------------------------------------------------------------------------------------
# the Chinese texts attnlab ships
# --------------------------------------------------------------------------------------


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                out.add(id(body[0].value))
    return out


def _skipped(tree: ast.AST) -> set[int]:
    """Nodes that are not Chinese prose: docstrings, the parts of an f-string (the f-string
    is read whole), a dict's keys (a catalog's English) and the verbatim listing lines of
    an ``Edit(old, new, ...)``."""
    out = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            out |= {id(n) for k in node.keys if k is not None for n in ast.walk(k)}
        if isinstance(node, ast.JoinedStr):
            out |= {id(n) for v in node.values for n in ast.walk(v)}
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "Edit"):
            out |= {id(n) for a in node.args[:2] for n in ast.walk(a)}
    return out


#: The English half of a bilingual HTML snippet (the report's <span class="en">…</span>)
_ENGLISH_HTML = re.compile(r'<(\w+) class="en"[^>]*>.*?</\1>', re.S)


def _is_chinese(text: str) -> bool:
    """Chinese text, not English that names a Chinese word ("The output vector of 苹果 …"):
    it holds Chinese and, when its prose starts with an English word, more Chinese
    characters than a third of its English letters."""
    cjk = len(_CJK.findall(text))
    words = english_words(text)
    if not cjk or not words:
        return bool(cjk)
    starts_english = text.find(words[0]) < _CJK.search(text).start()
    return not starts_english or 3 * cjk >= sum(map(len, words))


def _python(source: str) -> ast.AST:
    """A notebook cell or a module, parsed (IPython's %magic lines left out)."""
    return ast.parse(re.sub(r"(?m)^\s*[%!].*$", "", source))


def _chinese_literals(source: str, where: str) -> Iterator[tuple[str, str]]:
    """(where:line, text) for every string literal of Python ``source`` that is Chinese
    text (an f-string whole, each ``{…}`` written ``{}``), docstrings and dict keys
    excepted."""
    tree = _python(source)
    skip = _skipped(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        text = _ENGLISH_HTML.sub("", text)
        if _is_chinese(text):
            yield f"{where}:{node.lineno}", text


@functools.cache
def _notebook_prose() -> list[tuple[str, str]]:
    """Each Chinese notebook's markdown, one text per notebook (a gloss is given once in
    a notebook)."""
    out = []
    for part in build.PARTS:
        cells = build.notebook(part, "zh")["cells"]
        prose = "\n\n".join(c["source"] for c in cells if c["cell_type"] == "markdown")
        out.append((f"zh/{part.stem}.ipynb", prose))
    return out


@functools.cache
def _notebook_code() -> list[tuple[str, str]]:
    """The Chinese that each Chinese notebook's code prints (T(en, zh)'s zh, messages)."""
    out = []
    for part in build.PARTS:
        cells = build.notebook(part, "zh")["cells"]
        for c in cells:
            if c["cell_type"] == "code":
                out += _chinese_literals(c["source"], f"zh/{part.stem}.ipynb {c['id']}")
    return out


@functools.cache
def _explorer() -> list[tuple[str, str]]:
    table = json.loads((SRC / "viz" / "static" / "explorer" / "i18n.json")
                       .read_text(encoding="utf-8"))
    zh = table["langs"].index("zh")
    return [(f"explorer i18n.json {k}", v[zh]) for k, v in table["words"].items()]


@functools.cache
def _report() -> list[tuple[str, str]]:
    out = [(f"i18n.COMMON[{k!r}]", v) for k, v in COMMON.items()]
    for path in sorted((SRC / "report").glob("*.py")):
        out += _chinese_literals(path.read_text(encoding="utf-8"), f"report/{path.name}")
    return out


@functools.cache
def _claims() -> list[tuple[str, str]]:
    """The inventory's own Chinese: every *_zh field of a claim and its readings, but the
    quotation (``quote_zh`` is the article's words)."""
    from attnlab.experiments.claims_000 import CLAIMS_000
    from attnlab.experiments.claims_001 import CLAIMS_001

    out = []
    for c in (*CLAIMS_000, *CLAIMS_001):
        for f in dataclasses.fields(c):
            if f.name.endswith("_zh") and f.name != "quote_zh" and getattr(c, f.name):
                out.append((f"claim {c.id} {f.name}", getattr(c, f.name)))
        out += [(f"claim {c.id} reading", r.zh) for r in c.readings]
    return out


@functools.cache
def _experiments() -> list[tuple[str, str]]:
    """Each experiment module's Chinese (CLAIM_ZH, its ZH catalog, the Result's and the
    Control's *_zh texts), read from the source; the inventory is :func:`_claims`."""
    out = []
    for path in sorted((SRC / "experiments").glob("*.py")):
        if path.stem in ("claims_000", "claims_000_listing_views", "claims_001"):  # the inventory
            continue
        out += _chinese_literals(path.read_text(encoding="utf-8"), f"experiments/{path.name}")
    return out


@functools.cache
def _package() -> list[tuple[str, str]]:
    """The rest of the package's Chinese: figures (viz), the analysis's definitions, the
    CLI; the glossary itself (i18n.py) names the wrong terms on purpose."""
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(("report/", "experiments/")) or rel == "i18n.py":
            continue
        out += _chinese_literals(path.read_text(encoding="utf-8"), rel)
    return out


SOURCES = {
    "notebook prose": _notebook_prose,
    "notebook code": _notebook_code,
    "explorer": _explorer,
    "report": _report,
    "claims": _claims,
    "experiments": _experiments,
    "package": _package,
}


@pytest.mark.parametrize("name", SOURCES)
def test_the_chinese_texts_are_found(name):
    """The collectors find what they should: enough Chinese, holding the glossary's terms
    (a collector that found nothing would pass everything)."""
    texts = SOURCES[name]()
    assert len(texts) >= (10 if name.startswith("notebook") else 20), name
    joined = "".join(t for _, t in texts)
    assert sum(bool(_CJK.search(t)) for _, t in texts) >= len(texts) * 0.8, name
    assert any(zh in joined for zh in ("查询", "键", "头", "注意力")), name


@pytest.mark.parametrize("name", SOURCES)
def test_chinese_text_uses_the_glossarys_terms(name):
    problems = [p for where, text in SOURCES[name]()
                for p in term_problems(text, where=f"{where}: ")]
    assert not problems, f"{len(problems)} term(s) to fix:\n" + "\n".join(problems)


@pytest.mark.parametrize("name", ["notebook prose", "explorer", "report"])
def test_the_check_sees_a_bare_term_planted_in_the_real_text(name):
    """The real texts pass because they are right, not because the check skips them: a
    bare term added to each is caught there."""
    for where, text in SOURCES[name]()[:5]:
        assert bare_terms(text + "，每个 query 都") [-1:] == ["query"], where
        assert wrong_terms(text + "，平均主角")[-1:] == ["主角"], where


def _quotations(text: str) -> Iterator[str]:
    for m in re.finditer(r"「([^「」]*)」|“([^“”]*)”", text):
        yield next(g for g in m.groups() if g is not None)


def test_a_chinese_quotation_with_an_english_term_is_the_articles_words():
    """Quotations are exempt from the check because they are someone else's words: a
    Chinese quotation in the notebooks that holds a bare term is verbatim in an article."""
    articles = [article_text(n) for n in ("000", "001")]
    if None in articles:
        pytest.skip(SKIP_WHY)
    squash = re.compile(r"\s+")
    corpus = squash.sub("", "".join(articles))
    bad = [f"{where}: 「{q}」" for where, text in _notebook_prose() for q in _quotations(text)
           if _CJK.search(q) and bare_terms(q) and squash.sub("", q) not in corpus]
    assert not bad, "quotations that are not the articles' words:\n" + "\n".join(bad)


# --------------------------------------------------------------------------------------
# the Chinese notebooks print Chinese
# --------------------------------------------------------------------------------------

#: A Result's or Control's English fields: a Chinese notebook shows the *_zh twin instead.
_ENGLISH_FIELDS = {"quantity", "verdict", "claim", "caption", "expect_why",
                   "by_construction", "what"}


def _printed(node: ast.AST) -> Iterator[str]:
    """The English that the expression ``node`` puts on the screen when printed: its text
    (a string, an f-string's text and the values it formats, the two sides of a ``+``,
    both branches of a conditional) and a Result's English field; T(en, zh) and
    ``x.f_zh if zh else x.f`` choose the language, and what a call or a subscript does
    with a string is not printed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        if _has_english(node.value):
            yield repr(node.value)
    elif isinstance(node, ast.JoinedStr):
        for v in node.values:
            yield from _printed(v.value if isinstance(v, ast.FormattedValue) else v)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        yield from _printed(node.left)
        yield from _printed(node.right)
    elif isinstance(node, ast.IfExp):
        lang = _language_test(node.test)
        if lang == "zh":  # `zh_text if zh else en_text`: the Chinese notebook shows the first
            yield from _printed(node.body)
        elif lang == "en":
            yield from _printed(node.orelse)
        elif {_field(node.body), _field(node.orelse)} not in (
                {f, f + "_zh"} for f in _ENGLISH_FIELDS):
            yield from _printed(node.body)
            yield from _printed(node.orelse)
    elif isinstance(node, ast.Attribute) and node.attr in _ENGLISH_FIELDS:
        yield ast.unparse(node)


def _english_printed(source: str) -> Iterator[str]:
    """What a code cell prints in English whatever LANG is (:func:`_printed` of each
    argument of each print())."""
    for node in ast.walk(_python(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "print"):
            for arg in node.args:
                yield from _printed(arg)


def _language_test(test: ast.AST) -> str | None:
    """"zh" for a test that holds in the Chinese notebook (``zh``, ``LANG == "zh"``), "en"
    for one that holds in the English one (``LANG == "en"``), else None."""
    if isinstance(test, ast.Name) and test.id == "zh":
        return "zh"
    if (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "LANG" and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq) and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value in ("zh", "en")):
        return test.comparators[0].value
    return None


def _field(node: ast.AST) -> str | None:
    return node.attr if isinstance(node, ast.Attribute) else None


#: unit symbols read the same in Chinese
_UNITS = {"ms", "us", "ns", "MB", "KB", "GB", "MiB", "KiB", "GiB", "Hz", "kHz", "dB"}


def _has_english(text: str) -> bool:
    return any(w not in _UNITS for w in english_words(text))


def test_printed_english_is_caught_both_ways():
    assert list(_english_printed('print(r.quantity, "=", r.measured, "->", r.verdict)')) == [
        "r.quantity", "r.verdict"]
    assert list(_english_printed('print(x, "deg")')) == ["'deg'"]
    assert list(_english_printed('print(f"{n} heads", "a" + "key")')) == ["' heads'", "'key'"]
    assert list(_english_printed('print(f"{x} ms", d["scores"], [s for s in t if "key" in s])'
                                 )) == []
    assert list(_english_printed('print(T(r.quantity, r.quantity_zh), "=", r.measured)')) == []
    assert list(_english_printed('print(T("rank:", "秩："), "head_dim =", d, "Q-K:")')) == []
    assert list(_english_printed('print(f"{r.what_zh if zh else r.what}")')) == []
    assert list(_english_printed('print(f"{r.quantity_zh if x else r.verdict}")')) == [
        "r.verdict"]
    assert list(_english_printed('print(COMMON[r.verdict] if zh else r.verdict)')) == []
    assert list(_english_printed('print("键" if LANG == "zh" else "key")')) == []
    assert list(_english_printed('print("key" if LANG == "zh" else "键")')) == ["'key'"]


def test_the_chinese_notebooks_print_no_english_results():
    bad = []
    for part in build.PARTS:
        for c in build.notebook(part, "zh")["cells"]:
            if c["cell_type"] == "code":
                bad += [f"zh/{part.stem}.ipynb {c['id']}: print(... {x} ...)"
                        for x in _english_printed(c["source"])]
    assert not bad, ("a Chinese notebook prints English (use report(r), T(en, zh) or the "
                     "*_zh fields):\n" + "\n".join(bad))
