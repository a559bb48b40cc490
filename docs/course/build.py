"""Build the attnlab course: one source, two notebooks per part (English and Chinese).

Every part is a list of cells (one module per part in ``parts/``, the cell types in
``cells.py``). A text cell carries its English and its Chinese; a code cell is shared by
both languages (its only difference is the first cell's ``LANG``, which the figures and
messages follow); an exercise is a prompt, an answer cell the learner fills in (shipped
blank: the names to compute are ``...``) and a check cell that asserts the answer, failing
until it is right. The reference answers are not in the notebooks: this script writes them
into ``docs/course/solutions.md`` (:func:`solutions_text`), which the tests read back
(:func:`read_solutions`) and run in place of the blanks. Each exercise also keeps a
deliberately wrong answer (:attr:`Exercise.wrong`, in neither): the tests run it and
require the check to fail, as on the blank.

    python docs/course/build.py           # (re)write the notebooks, README.md, solutions.md
    python docs/course/build.py --check   # exit 1 if a committed file differs

It also writes the course's prose as one text into the package
(``src/attnlab/report/course_text.md``, :data:`LONG_TEXT`): the long text the report's
"Long contexts" part traces.

The notebooks are written without outputs; ``tests/course`` executes every one of them.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
LANGS = ("en", "zh")


if str(HERE) not in sys.path:  # cells.py and parts/ sit beside this file
    sys.path.insert(0, str(HERE))

from cells import Code, Exercise, Part, Predict, Text  # noqa: E402


def _load_parts() -> tuple[Part, ...]:
    """The parts, from ``parts/pNN_*.py`` in order (each defines ``PART``)."""
    import importlib

    names = sorted(p.stem for p in (HERE / "parts").glob("p[0-9][0-9]_*.py"))
    return tuple(importlib.import_module(f"parts.{n}").PART for n in names)



_CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")
_PUNCT = re.compile(r"[\u3000-\u303f\uff00-\uffef]")  # CJK punctuation, full-width forms
_BLOCK = re.compile(r"^(\s*[-*>|#]|\s*\d+\.\s|\s*\$\$|\s*```|\s{4})")


def _flow(text: str, lang: str) -> str:
    """Dedent ``text`` and join the lines of each paragraph (the source wraps them at 100
    columns; Chinese lines are joined with no space between them)."""
    lines = textwrap.dedent(text).strip("\n").split("\n")
    out: list[str] = []
    for line in lines:
        prev = out[-1] if out else ""
        joinable = (prev.strip() and line.strip() and not _BLOCK.match(line)
                    and not prev.strip().startswith(("$$", "```", "|", "#"))
                    and not prev.endswith("  "))
        if joinable and out:
            a, b = prev.strip()[-1:], line.strip()[:1]
            glue = "" if lang == "zh" and ((_CJK.match(a) and _CJK.match(b))
                                           or _PUNCT.match(a) or _PUNCT.match(b)) else " "
            out[-1] = prev.rstrip() + glue + line.strip()
        else:
            out.append(line.rstrip())
    return "\n".join(out)


def _code(src: str) -> str:
    return textwrap.dedent(src).strip("\n")


#: What the setup cell may import, in its order: the modules, then attnlab.course's helpers
#: (a notebook imports those its cells, exercises and answers use; ``setup`` always).
_MODULES = (("math", "import math"), ("plt", "import matplotlib.pyplot as plt"),
            ("torch", "import torch"), ("attnlab", "import attnlab"))
#: (``show_code`` and ``slider`` are imported by the cells that use them, so that the setup
#: line stays one line)
_HELPERS = ("T", "answered", "check_line", "fmt_num", "predicted", "report", "run", "show",
            "show_checks")
#: The most lines the setup cell may have.
SETUP_MAX_LINES = 10


def _names_used(part: Part) -> set[str]:
    """Every name the part's code reads: its code cells, and its exercises' blanks, checks,
    reference and wrong answers (the tests run those in the notebook's kernel too)."""
    import ast

    sources = []
    for cell in part.cells:
        if isinstance(cell, Code):
            sources.append(cell.src)
        elif isinstance(cell, Exercise):
            sources += [cell.blank, cell.check, cell.answer, cell.wrong]
    return {n.id for src in sources for n in ast.walk(ast.parse(_code(src)))
            if isinstance(n, ast.Name)}


def setup_cell(part: Part, lang: str) -> str:
    """The notebook's first code cell: the imports its cells use and
    ``LANG = setup(lang)`` (:func:`attnlab.course.setup`: the language of the figures and
    messages, the fonts, the seed, inline figures). The helpers live in
    :mod:`attnlab.course`; the cell holds no definition."""
    used = _names_used(part)
    stdlib = [line for name, line in _MODULES[:1] if name in used]
    third = [line for name, line in _MODULES[1:3] if name in used]
    ours = [line for name, line in _MODULES[3:] if name in used]
    helpers = sorted({"setup", *(h for h in _HELPERS if h in used)})
    ours.append("from attnlab.course import " + ", ".join(helpers))
    blocks = [b for b in (stdlib, third, ours) if b]
    lines = [line for block in blocks for line in [*block, ""]]
    lines.append(f'LANG = setup("{lang}")  # "en" or "zh": the language of this notebook\'s '
                 "figures and messages")
    return "\n".join(lines)


PARTS: tuple[Part, ...] = _load_parts()


# ======================================================================================
# writing the notebooks
# ======================================================================================

_NAV = Text("""
    *attnlab course, part {n} of {total}.* Run the cells from top to bottom; every number and
    figure is computed here. Each exercise at the end leaves what to compute as `...`:
    write your answer there, then run the check cell below it, which fails until the
    answer is right (the reference answers are in `docs/course/solutions.md`).
    """, """
    *attnlab 课程，第 {n} 部分（共 {total} 部分）。* 从上到下运行各单元格；
    所有数字与图都在这里算出。最后的每道练习都把要算的东西留作 `...`：在那里写下你的答案，
    再运行下面的检查单元格——答案不对时它会报错（参考答案在 `docs/course/solutions.md` 中）。
    """)


def notebook(part: Part, lang: str) -> dict:
    """The notebook of ``part`` in ``lang`` as a JSON-ready dict (nbformat 4.5, no
    outputs, deterministic cell ids)."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {LANGS}, got {lang!r}")
    cells: list[dict] = []

    def md(text: str, tags: tuple[str, ...] = ()) -> None:
        meta = {"tags": list(tags)} if tags else {}
        cells.append({"cell_type": "markdown", "id": f"c{len(cells):02d}", "metadata": meta,
                      "source": text})

    def code(src: str, tags: tuple[str, ...] = ()) -> None:
        meta = {"tags": list(tags)} if tags else {}
        cells.append({"cell_type": "code", "execution_count": None, "id": f"c{len(cells):02d}",
                      "metadata": meta, "outputs": [], "source": src})

    title = part.title_zh if lang == "zh" else part.title_en
    md(f"# {part.number:02d} · {title}\n\n"
       + _flow(getattr(_NAV, lang), lang).replace("{n}", str(part.number))
       .replace("{total}", str(len(PARTS))))
    code(setup_cell(part, lang), ("setup",))
    heading = False
    for cell in part.cells:
        if isinstance(cell, Text):
            md(_flow(getattr(cell, lang), lang))
        elif isinstance(cell, Code):
            code(_code(cell.src))
        elif isinstance(cell, Predict):  # in the body, before the measurement it predicts
            md(_flow(getattr(cell, lang), lang), ("exercise-prompt", "predict-then-check"))
            code(_code(cell.blank), ("exercise", cell.key))
            code(_code(cell.check), ("check", cell.key, "raises-exception"))
        else:
            if not heading:
                md("## 练习" if lang == "zh" else "## Exercises")
                heading = True
            md(_flow(getattr(cell, lang), lang), ("exercise-prompt",))
            code(_code(cell.blank), ("exercise", cell.key))
            # the check fails until the answer is filled in: tools that run the notebook
            # as shipped (nbclient, nbconvert) read the tag and go on
            code(_code(cell.check), ("check", cell.key, "raises-exception"))
    return {"cells": cells, "metadata": {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "attnlab": {"part": part.number, "lang": lang},
    }, "nbformat": 4, "nbformat_minor": 5}


def dumps(nb: dict) -> str:
    """The notebook's file text (as Jupyter writes it: 1-space indent, sorted keys)."""
    def split(c: dict) -> dict:
        src = c["source"]
        return {**c, "source": src.splitlines(keepends=True)}

    return json.dumps({**nb, "cells": [split(c) for c in nb["cells"]]}, indent=1,
                      sort_keys=True, ensure_ascii=False) + "\n"


def path_of(part: Part, lang: str, root: Path | None = None) -> Path:
    return (HERE if root is None else root) / lang / f"{part.stem}.ipynb"


def _in_words(n: int) -> tuple[str, str]:
    """``n`` (the number of parts) written out in English and in Chinese; digits from 20 on
    in English, from 100 on in Chinese."""
    en = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
          "fourteen fifteen sixteen seventeen eighteen nineteen").split()
    digits = "零一二三四五六七八九"
    tens, ones = divmod(n, 10)
    zh = (digits[n] if n < 10 else str(n) if n >= 100
          else ("" if tens == 1 else digits[tens]) + "十" + (digits[ones] if ones else ""))
    return (en[n] if n < 20 else str(n)), zh


def index() -> str:
    """docs/course/README.md: the parts, each in both languages."""
    rows = "\n".join(f"| {p.number:02d} | [{p.title_en}](en/{p.stem}.ipynb) | "
                     f"[{p.title_zh}](zh/{p.stem}.ipynb) |" for p in PARTS)
    en, zh = _in_words(len(PARTS))
    return f"""# The attnlab course · attnlab 课程

The two articles' argument, step by step, with attnlab doing the computation: {en} notebooks,
each in English and in Chinese, each ending with exercises whose answers a cell checks.
Run them with the project's environment (`make setup`, then open a notebook with the
`.venv` kernel); they need no network. Every notebook here is generated by `build.py` and
stored without outputs; `tests/course` runs them all. The exercises ship blank; their
reference answers are in [solutions.md](solutions.md).

两篇文章的论证，一步一步，由 attnlab 完成计算：{zh}个笔记本，每个都有英文版和中文版，
每个都以练习结束，练习的答案由一个单元格检查。用项目的环境运行（先 `make setup`，再用 `.venv`
的内核打开笔记本）；不需要网络。这里的每个笔记本都由 `build.py` 生成，不带输出保存；
`tests/course` 会运行全部笔记本。练习以空白形式提供，参考答案见 [solutions.md](solutions.md)。

| part | English | 中文 |
|---|---|---|
{rows}
"""


#: The course's prose as one long text, shipped with the package: what the report's "Long
#: contexts" part reads (a text attnlab wrote, in English then in Chinese).
LONG_TEXT = HERE.parents[1] / "src" / "attnlab" / "report" / "course_text.md"


def long_text() -> str:
    """Every text cell of the course (titles, prose, exercise prompts), the parts in
    English, then the parts in Chinese; no code and no navigation line. Part 00 (the
    beginner's start, which came later) is left out: the text is the articles' argument,
    from part 01 on, the one the report's long-context measurements were made on."""
    blocks = []
    for lang in LANGS:
        for part in PARTS:
            if part.number == 0:
                continue
            title = part.title_zh if lang == "zh" else part.title_en
            blocks.append(f"# {part.number:02d} · {title}")
            blocks += [_flow(getattr(c, lang), lang) for c in part.cells
                       if isinstance(c, (Text, Exercise))]
    return "\n\n".join(blocks) + "\n"


_SOLUTION = re.compile(r"^### (\d\d) · (\S+)\n\n```python\n(.*?)\n```$", re.M | re.S)


def solutions_text() -> str:
    """docs/course/solutions.md: every exercise's reference answer, part by part (the code
    that replaces the notebook's blank answer cell)."""
    out = ["# The attnlab course: reference answers · attnlab 课程：参考答案", "",
           "Generated by `docs/course/build.py` (do not edit). Each answer replaces the "
           "exercise's cell of `...`; the check cell below it then passes. `tests/course` "
           "runs every notebook with these answers.", "",
           "由 `docs/course/build.py` 生成（请勿手改）。每个答案替换练习中写着 `...` 的单元格，"
           "其下的检查单元格随即通过。`tests/course` 用这些答案运行每个笔记本。", ""]
    for part in PARTS:
        out += [f"## {part.number:02d} · {part.title_en} · {part.title_zh}", ""]
        for ex in exercises(part):
            out += [f"### {part.number:02d} · {ex.key}", "", "```python", _code(ex.answer),
                    "```", ""]
    return "\n".join(out)


def read_solutions(text: str) -> dict[tuple[int, str], str]:
    """The answers of a solutions file (:func:`solutions_text`): (part number, exercise
    key) -> the answer cell's code."""
    found: dict[tuple[int, str], str] = {}
    for number, key, code_ in _SOLUTION.findall(text):
        if (int(number), key) in found:
            raise ValueError(f"solutions: exercise {number} · {key} appears twice")
        found[(int(number), key)] = code_
    return found


#: The reference answers, outside the notebooks (the tests read them back).
SOLUTIONS = HERE / "solutions.md"


def expected_files(root: Path | None = None) -> dict[Path, str]:
    """Every generated path (the notebooks, README.md, the solutions and the package's copy
    of the course text) -> the text written there."""
    files = {path_of(p, lang, root): dumps(notebook(p, lang)) for p in PARTS for lang in LANGS}
    files[(HERE if root is None else root) / "README.md"] = index()
    files[(HERE if root is None else root) / SOLUTIONS.name] = solutions_text()
    files[LONG_TEXT if root is None else root / LONG_TEXT.name] = long_text()
    return files


def exercises(part: Part) -> list[Exercise]:
    return [c for c in part.cells if isinstance(c, Exercise)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if a committed notebook differs from the generator's output")
    args = ap.parse_args(argv)
    stale = []
    for path, text in expected_files().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not args.check:
            from attnlab._io import atomic_write_text

            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, text)
    for path in stale:
        print(("differs: " if args.check else "wrote: ") + str(path))
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
