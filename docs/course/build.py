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

    python docs/course/build.py             # (re)write the notebooks, README.md, solutions.md
    python docs/course/build.py --execute   # the same, the notebooks with their outputs
    python docs/course/build.py --check     # exit 1 if a committed file differs

It also writes the course's prose as one text into the package
(``src/attnlab/report/course_text.md``, :data:`LONG_TEXT`): the long text the report's
"Long contexts" part traces.

The notebooks are committed with their outputs, so that a reader of the repository sees
their figures, tables and printouts without running them. ``--execute`` (``make course``)
runs each notebook its source makes (in one kernel, ``execute.py``, whose cache keeps the
copies run before: a notebook runs again only when its cells or attnlab's sources change)
and writes it with the outputs of that run, made stable and small (:func:`with_outputs`).
Without ``--execute``, a notebook whose cells are current keeps its outputs, and one whose
cells changed is written without outputs until ``make course`` runs it. The outputs are
derived, never a source: ``--check`` compares the cells (sources, ids, tags, metadata) and
ignores the outputs, and ``tests/course`` runs every notebook from its source.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LANGS = ("en", "zh")


if str(HERE) not in sys.path:  # cells.py and parts/ sit beside this file
    sys.path.insert(0, str(HERE))

from cells import Code, Exercise, Part, Predict, Text  # noqa: E402
from execute import without_outputs  # noqa: E402


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


#: The output formats whose text Jupyter writes as a list of lines, besides ``text/*``.
_LINES = ("image/svg+xml", "application/javascript")


def dumps(nb: dict) -> str:
    """The notebook's file text (as Jupyter writes it: 1-space indent, sorted keys, each
    source and each text of an output a list of lines)."""
    def lines(value):
        return value.splitlines(keepends=True) if isinstance(value, str) else value

    def split_output(o: dict) -> dict:
        if "text" in o:
            o = {**o, "text": lines(o["text"])}
        if "data" in o:
            o = {**o, "data": {k: lines(v) if k.startswith("text/") or k in _LINES else v
                               for k, v in o["data"].items()}}
        return o

    def split(c: dict) -> dict:
        c = {**c, "source": lines(c["source"])}
        if "outputs" in c:
            c["outputs"] = [split_output(o) for o in c["outputs"]]
        return c

    return json.dumps({**nb, "cells": [split(c) for c in nb["cells"]]}, indent=1,
                      sort_keys=True, ensure_ascii=False) + "\n"


def notebook_differences(committed: dict, expected: dict) -> list[str]:
    """Where the notebook ``committed`` (as read from its file) differs from ``expected``
    (what the source makes), outputs and execution counts aside: its format, its metadata,
    its number of cells, and each cell's type, id, source, metadata or other field, by
    the cell's id (``cell c05: source``); empty when the cells are the source's."""
    a, b = without_outputs(committed), without_outputs(expected)
    found = [key for key in ("nbformat", "nbformat_minor", "metadata")
             if a.get(key) != b.get(key)]
    found += [f"notebook: {sorted(set(a) ^ set(b))}"] if set(a) != set(b) else []
    cells_a, cells_b = a.get("cells", []), b.get("cells", [])
    if len(cells_a) != len(cells_b):
        found.append(f"{len(cells_a)} cells, expected {len(cells_b)}")
    for i, (x, y) in enumerate(zip(cells_a, cells_b)):
        name = y.get("id", f"#{i}")
        found += [f"cell {name}: {key}" for key in sorted(set(x) | set(y))
                  if x.get(key) != y.get(key)]
    return found


# ======================================================================================
# the outputs committed with the notebooks
# ======================================================================================

#: The formats of a rich output that only do something in a live, trusted notebook (a
#: page's script, JavaScript): neither GitHub nor an untrusted notebook runs them, so the
#: committed notebook keeps the output's other formats (its ``text/plain`` at least).
_SCRIPT = re.compile(r"<script\b", re.I)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
#: An object's address in its repr (``<Explorer at 0x7f3a…>``): a new one every run.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
#: The file a kernel compiles a cell into (``/tmp/ipykernel_6768/1828758385.py``), named
#: in warnings: its folder is the kernel's process id.
_KERNEL_FILE = re.compile(r"(?:/[^\s/'\"\x1b:]+)*/ipykernel_\d+/\d+\.py")


def _machine_paths() -> list[tuple[str, str]]:
    """The folders of this machine an output may name, each with what replaces it: the
    repository (its paths become relative to it), the Python environment, the home
    folder; the longest first."""
    pairs = {str(ROOT): "", str(Path(sys.prefix)): "<python>",
             str(Path(sys.base_prefix)): "<python>", str(Path.home()): "~"}
    return sorted(((folder + os.sep, (to + os.sep) if to else "")
                   for folder, to in pairs.items() if len(folder) > 1),
                  key=lambda pair: -len(pair[0]))


def scrub(text: str) -> str:
    """An output's text without what belongs to this machine or this run: the folders of
    :func:`_machine_paths`, the file a kernel compiled a cell into (``<cell>``) and the
    objects' addresses.

    >>> scrub(f"File {ROOT}/src/attnlab/course.py:271, <Explorer at 0x7fde1fcaa750>")
    'File src/attnlab/course.py:271, <Explorer>'
    >>> scrub("/tmp/ipykernel_6768/1828758385.py:12: UserWarning: ...")
    '<cell>:12: UserWarning: ...'
    """
    text = _KERNEL_FILE.sub("<cell>", text)
    for folder, to in _machine_paths():
        text = text.replace(folder, to)
    return _ADDRESS.sub("", text)


def _committed_output(output: dict, where: str, n: int, k: int) -> dict | None:
    """The ``k``-th output of the notebook ``where`` (``en/09_real_models``), in its
    ``n``-th code cell, as committed: texts scrubbed (:func:`scrub`), formats that only run
    live left out, a widget's view given a model id of its place (the widget itself is not
    stored: the id a run gives it would change the file at every run), a result numbered
    ``n``; None when no format is left."""
    out = json.loads(json.dumps(output))
    kind = out.get("output_type")
    if kind == "stream":
        out["text"] = scrub("".join(out["text"]) if isinstance(out["text"], list)
                            else out["text"])
    elif kind == "error":
        out["evalue"] = scrub(out.get("evalue", ""))
        out["traceback"] = [scrub(line) for line in out.get("traceback", [])]
    elif "data" in out:
        data = {}
        for mime, value in out["data"].items():
            if isinstance(value, list):
                value = "".join(value)
            if mime == "application/javascript" or (
                    mime != "text/plain" and isinstance(value, str) and _SCRIPT.search(value)):
                continue
            if mime == WIDGET_VIEW:
                place = hashlib.sha256(f"{where}/{k}".encode()).hexdigest()[:32]
                value = {**value, "model_id": place}
            elif isinstance(value, str) and not mime.startswith("image/"):
                value = scrub(value)
            data[mime] = value
        if not data:
            return None
        out["data"] = data
        if kind == "execute_result":
            out["execution_count"] = n
    return out


def with_outputs(nb: dict, executed: dict, where: str) -> dict:
    """The notebook ``nb`` (as its source makes it) with the outputs of ``executed``, its
    run (``execute.py``): each code cell numbered 1, 2, ... in order, with its outputs made
    stable and small (:func:`_committed_output`); ``where`` (``en/09_real_models``) names
    the notebook in the widgets' ids. Nothing of the run but the outputs is kept (no
    timing, no kernel, no execution key)."""
    if notebook_differences(executed, nb):
        raise ValueError(f"{where}: the executed copy is not of this notebook's cells: "
                         f"{notebook_differences(executed, nb)[:5]}")
    out = without_outputs(nb)
    ran = [c for c in executed["cells"] if c.get("cell_type") == "code"]
    code = [c for c in out["cells"] if c["cell_type"] == "code"]
    k = 0
    for n, (cell, run) in enumerate(zip(code, ran), 1):
        outputs = []
        for output in run.get("outputs", []):
            committed = _committed_output(output, where, n, k)
            k += 1
            if committed is not None:
                outputs.append(committed)
        cell["outputs"], cell["execution_count"] = outputs, n
    return out


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
stored with the outputs of a run (`make course` writes them), so that its figures show
before you run it; `tests/course` runs them all again from their source. The exercises ship
blank; their reference answers are in [solutions.md](solutions.md).

两篇文章的论证，一步一步，由 attnlab 完成计算：{zh}个笔记本，每个都有英文版和中文版，
每个都以练习结束，练习的答案由一个单元格检查。用项目的环境运行（先 `make setup`，再用 `.venv`
的内核打开笔记本）；不需要网络。这里的每个笔记本都由 `build.py` 生成，
并连同一次运行的输出一起保存（由 `make course` 写入），不运行也能看到其中的图；
`tests/course` 会按源代码重新运行全部笔记本。练习以空白形式提供，
参考答案见 [solutions.md](solutions.md)。

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
    of the course text) -> the text written there (a notebook's as its source makes it,
    without outputs: ``--execute`` writes it with the outputs of its run)."""
    files = {path_of(p, lang, root): dumps(notebook(p, lang)) for p in PARTS for lang in LANGS}
    files[(HERE if root is None else root) / "README.md"] = index()
    files[(HERE if root is None else root) / SOLUTIONS.name] = solutions_text()
    files[LONG_TEXT if root is None else root / LONG_TEXT.name] = long_text()
    return files


def exercises(part: Part) -> list[Exercise]:
    return [c for c in part.cells if isinstance(c, Exercise)]


def _notebooks() -> dict[Path, tuple[str, dict]]:
    """Every notebook's path -> its name (``en/09_real_models``) and what the source makes."""
    return {path_of(p, lang): (f"{lang}/{p.stem}", notebook(p, lang))
            for p in PARTS for lang in LANGS}


def _committed(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _executed(notebooks: dict[Path, tuple[str, dict]]) -> dict[Path, str]:
    """Run (``execute.py``: one kernel, the cache) the notebooks the cache does not hold
    current for their source; each one's file text with the outputs of its run. A copy
    that another run stored meanwhile for other cells (the tests run the notebooks of a
    part being written) is run again, twice at most."""
    import execute

    todo = {path: nb for path, (_, nb) in notebooks.items()}
    texts: dict[Path, str] = {}
    for _ in range(3):
        copies = execute.ensure(todo)
        for path in list(todo):
            where, nb = notebooks[path]
            executed = json.loads(copies[path].read_text(encoding="utf-8"))
            if not notebook_differences(executed, nb):
                texts[path] = dumps(with_outputs(nb, executed, where))
                del todo[path]
        if not todo:
            return texts
    raise RuntimeError(f"the cache {execute.CACHE} keeps receiving copies of other cells for "
                       f"{sorted(str(p) for p in todo)}: is the source changing meanwhile?")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="exit 1 if a committed file differs from the generator's output "
                           "(a notebook's cells; its outputs are not compared)")
    mode.add_argument("--execute", action="store_true",
                      help="also run the notebooks (those whose cells or attnlab changed) "
                           "and write them with their outputs (make course)")
    args = ap.parse_args(argv)
    notebooks = _notebooks()
    stale: list[tuple[Path, str]] = []
    for path, text in expected_files().items():
        if path in notebooks:
            continue
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != text:
            stale.append((path, ""))
            if not args.check:
                _write(path, text)
    if args.execute:
        for path, text in _executed(notebooks).items():
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append((path, ""))
                _write(path, text)
    else:
        for path, (_, nb) in notebooks.items():
            committed = _committed(path)
            found = (["unreadable"] if committed is None
                     else notebook_differences(committed, nb))
            if not found:
                continue  # its cells are the source's: the outputs it holds stay
            if args.check:
                stale.append((path, f" ({', '.join(found[:4])})"))
            else:
                stale.append((path, " (without outputs: `make course` runs it)"))
                _write(path, dumps(nb))
    for path, why in stale:
        print(("differs: " if args.check else "wrote: ") + str(path) + why)
    return 1 if (args.check and stale) else 0


def _write(path: Path, text: str) -> None:
    from attnlab._io import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)


if __name__ == "__main__":
    sys.exit(main())
