"""One Chinese term per concept on the claims page (attnlab.i18n.TERMS): the inventory's
*_zh fields, the experiments' ZH catalogs and the Chinese text of docs/claims.md use the
term (词元, 掩码), never a variant (令牌, 遮罩 …); and the page's Chinese cells read in
Chinese. The check is shown to catch a planted variant."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

import pytest

from attnlab.experiments.claims import CLAIMS, EXTENSIONS
from attnlab.experiments.registry import EXPERIMENTS
from attnlab.i18n import TERMS, english_words, term_variants

DOC = Path(__file__).resolve().parents[1] / "docs" / "claims.md"
_HAN = re.compile(r"[\u4e00-\u9fff]")


def _claims_zh() -> list[tuple[str, str]]:
    """Every *_zh field of every claim and its readings, but the quotation (quote_zh is the
    article's own words)."""
    out = []
    for c in CLAIMS:
        for f in dataclasses.fields(c):
            if f.name.endswith("_zh") and f.name != "quote_zh" and getattr(c, f.name):
                out.append((f"claim {c.id} {f.name}", getattr(c, f.name)))
        out += [(f"claim {c.id} reading", r.zh) for r in c.readings]
    out += [(f"extension {e.experiment}", e.what_zh) for e in EXTENSIONS]
    return out


def _catalogs() -> list[tuple[str, str]]:
    """Every Chinese entry of each experiment module's ZH dict."""
    out = []
    for module in EXPERIMENTS.values():
        zh = getattr(importlib.import_module(module), "ZH", {})
        out += [(f"{module}.ZH[{en!r}]", text) for en, text in zh.items()]
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]


def _page_zh() -> list[tuple[str, str]]:
    """docs/claims.md's Chinese: the Chinese paragraphs and lines, and in each table row
    its Chinese cells (论断 and 实测; 内容 and 实测 for an extension), not the quotation."""
    out = []
    header: list[str] = []
    for i, line in enumerate(DOC.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("| id |") or line.startswith("| experiment |"):
            header = _cells(line)
        elif line.startswith("| `"):
            for name, cell in zip(header, _cells(line)):
                if name in ("论断", "内容", "实测"):
                    out.append((f"docs/claims.md:{i} {name}", cell))
        elif " · " in line and not line.startswith(("|", "#")):  # English · 中文
            out.append((f"docs/claims.md:{i}", line.split(" · ", 1)[1]))
        elif line and not line.startswith(("|", "#")) and _HAN.search(line) and (
                len(_HAN.findall(line)) > len(re.findall(r"[A-Za-z]+", line))):
            out.append((f"docs/claims.md:{i}", line))
    return out


SOURCES = {"claims": _claims_zh, "catalogs": _catalogs, "page": _page_zh}


def _problems(texts: list[tuple[str, str]]) -> list[str]:
    return [f"{where}: {variant!r} -> write {term}"
            for where, text in texts for variant, term in term_variants(text)]


def test_the_terms_are_the_glossarys():
    assert TERMS["token"][0] == "词元" and "令牌" in TERMS["token"][1]
    assert TERMS["mask"][0] == "掩码" and "遮罩" in TERMS["mask"][1]
    assert all("词" != v for _, vs in TERMS.values() for v in vs)  # 词 alone is no variant


@pytest.mark.parametrize("name", SOURCES)
def test_the_sources_are_found(name):
    """A scan that read nothing would pass everything."""
    texts = SOURCES[name]()
    assert len(texts) >= 50, name
    joined = "".join(t for _, t in texts)
    assert "词元" in joined or "掩码" in joined, name


@pytest.mark.parametrize("name", SOURCES)
def test_no_variant_of_a_term(name):
    problems = _problems(SOURCES[name]())
    assert not problems, f"{len(problems)} variant(s) to fix:\n" + "\n".join(problems)


def test_the_check_catches_a_planted_variant():
    assert term_variants("每个令牌都看得见") == [("令牌", "词元")]
    assert term_variants("对分数加上遮罩") == [("遮罩", "掩码")]
    # 词 inside other words, and a variant beside the term it modifies, are no variants
    assert term_variants("词元、词汇、单词与标记词元") == []
    for name, collect in SOURCES.items():
        where, text = collect()[0]
        planted = [(where, text + "，每个令牌")]
        assert _problems(planted) == [f"{where}: '令牌' -> write 词元"], name


#: English that Chinese cells may keep: names, code and formulas' words.
_NAMES = {"Transformer", "BERT", "GPT", "attnlab", "softmax", "QK", "cos", "sin", "exp",
          "GNN", "Nadaraya", "Watson", "Spearman", "Mamba", "RWKV", "AI", "RNN", "CPU", "attn",
          "forward", "einsum", "torch", "elu", "pos", "view", "transpose", "permute",
          "reshape", "SmolLM", "fp", "max", "min", "one", "hot", "Linear", "Attention",
          "linear", "attention", "FLOPs", "KiB", "MiB", "PyTorch", "Blue", "Brown", "fp32",
          "argmax", "mean", "std", "log", "tanh", "ReLU", "GELU", "nn", "LayerNorm",
          # notation inside the experiments' formulas: pp (p·pᵀ, w_pp), NE (N·E), and code
          # (assert, True, inf)
          "pp", "NE", "assert", "True", "inf"}


def test_the_pages_chinese_cells_hold_no_english_prose():
    left = {(where, w) for where, text in _page_zh() for w in english_words(text)
            if w not in _NAMES}
    assert not left, "English in the page's Chinese text:\n" + "\n".join(
        f"{where}: {w}" for where, w in sorted(left))


#: The projections' notation in prose: W^Q, W^K, W^V, W^O (article 000's), never W_Q or
#: W_q, which stand only for code (`W_q`, `self.W_q`) inside backticks.
_SUBSCRIPT = re.compile(r"(?<![`\w.])W_([qkvoQKVO])(?![\w`])")


def _notation_problems(texts: list[tuple[str, str]]) -> list[str]:
    out = []
    for where, text in texts:
        prose = re.sub(r"`[^`]*`", "", text)
        out += [f"{where}: {m.group(0)} -> write W^{m.group(1).upper()}"
                for m in _SUBSCRIPT.finditer(prose)]
    return out


def _inventory_prose() -> list[tuple[str, str]]:
    """Every text of the inventory in both languages but the quotation."""
    out = []
    for c in CLAIMS:
        for f in dataclasses.fields(c):
            v = getattr(c, f.name)
            if f.name != "quote_zh" and isinstance(v, str) and v:
                out.append((f"claim {c.id} {f.name}", v))
        out += [(f"claim {c.id} reading", r.en + " " + r.zh) for r in c.readings]
    return out


def test_the_inventory_writes_the_projections_one_way():
    texts = _inventory_prose()
    assert sum("W^Q" in t for _, t in texts) >= 5  # the scan reads the inventory
    problems = _notation_problems(texts)
    assert not problems, "\n".join(problems)
    planted = [("x", "the gradient reaching W_q grows"), ("y", "`self.W_q` is code")]
    assert _notation_problems(planted) == ["x: W_q -> write W^Q"]
