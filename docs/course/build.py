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


SETUP = '''\
%matplotlib inline
import math  # noqa: F401 (the setup is the same in every part; not every part uses all)
import os

import matplotlib.pyplot as plt
import torch

import attnlab  # noqa: F401
from attnlab.experiments import run  # noqa: F401
from attnlab.experiments._result import fmt_num
from attnlab.experiments.registry import catalog
from attnlab.i18n import COMMON, translate, translate_figure
from attnlab.viz.figures import cjk_font

LANG = "{lang}"  # "en" or "zh": the language of this notebook's figures and messages
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the real models load offline
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
torch.manual_seed(0)
if LANG == "zh" and cjk_font():
    plt.rcParams["font.family"] = ["DejaVu Sans", cjk_font()]
plt.rcParams["figure.dpi"] = 80


def T(en, zh):
    """The text in this notebook's language."""
    return zh if LANG == "zh" else en


def show(result):
    """An experiment's figure, its texts in this notebook's language."""
    if LANG == "zh":
        cat = {{**COMMON, **catalog(result.name)}}
        translate_figure(result.figure, cat, family=["DejaVu Sans", cjk_font() or "sans-serif"])
    return result.figure


def report(result):
    """An experiment's result in this notebook's language: the quantity measured against
    what is expected, the control (the same measurement on something that should not show
    the property) and the verdict."""
    zh = LANG == "zh"
    expected = result.expected_text.replace("slack", "容差") if zh else result.expected_text
    print(T("measured: ", "测量：") + f"{{result.quantity_zh if zh else result.quantity}}")
    print(f"  = {{fmt_num(result.measured)}}   " + T("expected: ", "预期：") + expected)
    c = result.control
    if c is None:
        print(T("control: none for this experiment", "对照：该实验没有对照"))
    else:
        judged = (T("passes too — the measurement does not tell", "同样满足——该测量无法区分")
                  if c.holds else T("fails, as it should", "不满足，符合预期"))
        print(T("control: ", "对照：") + f"{{c.what_zh if zh else c.what}}")
        print(f"  = {{fmt_num(c.measured)}}   {{judged}}")
    if result.by_construction:
        why = result.by_construction_zh if zh else result.by_construction
        print(T("why: ", "原因：") + why)
    verdict = COMMON.get(result.verdict, result.verdict) if zh else result.verdict
    print(T("verdict: ", "结论：") + verdict)
    if not result.passed:
        print(T("unexpected: attnlab expected the other verdict",
                "出乎预期：attnlab 预期的是另一个结论"))


def check_line(check, en, zh):
    """One of an experiment's checks (``result.check(id)``) in this notebook's language:
    what it measures (``en`` / ``zh``), its value, what it must be and whether it passes;
    then its control, when it has one."""
    ok = T("yes", "是") if check.passed else T("no", "否")
    print(T(f"{{en}}: {{fmt_num(check.value)}} ({{check.expected}}) → {{ok}}",
            f"{{zh}}：{{fmt_num(check.value)}}（{{check.expected}}）→ {{ok}}"))
    if check.control is not None:
        c = check.control
        print("    " + T(f"control: {{c.what}} = {{fmt_num(c.measured)}}",
                          f"对照：{{c.what_zh}} = {{fmt_num(c.measured)}}"))


def show_checks(result):
    """Every check behind an experiment's verdict, in this notebook's language: each value
    against what it must be, and its control when it has one."""
    cat = {{**COMMON, **catalog(result.name)}}
    tr = (lambda s: translate(s, cat) or s) if LANG == "zh" else str
    for c in result.checks:
        ok = T("pass", "通过") if c.passed else T("fail", "未通过")
        print(T(f"- {{c.name}}: {{fmt_num(c.value)}} ({{c.expected}}) {{ok}}",
                f"- {{tr(c.name)}}：{{fmt_num(c.value)}}（{{tr(c.expected)}}）{{ok}}"))
        if c.control is not None:
            judged = (T("passes too", "同样满足") if c.control.holds
                      else T("fails, as it should", "不满足，符合预期"))
            print("    " + T(f"control: {{c.control.what}} = "
                             f"{{fmt_num(c.control.measured)}}, {{judged}}",
                             f"对照：{{c.control.what_zh}} = "
                             f"{{fmt_num(c.control.measured)}}，{{judged}}"))


def answered(**answers):
    """Fails (AssertionError) while an exercise's answer is still `...`."""
    for name, value in answers.items():
        assert value is not ..., T(f"{{name}} is still `...`: compute it in the cell above",
                                   f"{{name}} 仍是 `...`：请先在上面的单元格中算出它")


def predicted(guess, truth, *, within, why_en="", why_zh=""):
    """Predict, then check: prints the prediction ``guess``, the measured ``truth`` and
    the gap between them; fails (AssertionError) while the guess is `...` or not a number,
    and when it is further than ``within`` from the truth (the message says why)."""
    assert guess is not ..., T("your prediction is still `...`: write a number in the cell "
                               "above before the measurement runs",
                               "你的预测仍是 `...`：请先在上面的单元格中写下一个数，再运行测量")
    assert (isinstance(guess, (int, float)) and not isinstance(guess, bool)
            and math.isfinite(guess)), T(f"write your prediction as a number, not {{guess!r}}",
                                         f"请把预测写成一个数，而不是 {{guess!r}}")
    truth = float(truth)
    gap = abs(guess - truth)
    print(T(f"your prediction {{fmt_num(guess)}}, measured {{fmt_num(truth)}}: "
            f"off by {{fmt_num(gap)}}",
            f"你的预测 {{fmt_num(guess)}}，实测 {{fmt_num(truth)}}：相差 {{fmt_num(gap)}}"))
    assert gap <= within, T(f"off by more than {{fmt_num(within)}}. {{why_en}}",
                            f"相差超过 {{fmt_num(within)}}。{{why_zh}}")
    print(T("close enough (within ", "足够接近（相差不超过 ") + fmt_num(within)
          + T("). ", "）。") + T(why_en, why_zh))


SLIDERS = []  # every slider cell's figure function and controls (what the tests move)


def slider(draw, **controls):
    """A figure with sliders. ``draw(**values)`` draws it; each control is
    ``(low, high, step, default)`` or ``([choices], default)``. The figure is drawn once at
    the defaults (a still figure, which a page without a kernel shows too), then offered
    again under ipywidgets sliders, redrawn as they move, where a Jupyter front end is."""
    from types import SimpleNamespace

    defaults = {{name: spec[-1] for name, spec in controls.items()}}
    SLIDERS.append(SimpleNamespace(draw=draw, controls=controls, defaults=defaults))
    draw(**defaults)
    try:
        import ipywidgets as w
    except ImportError:  # the course extra installs it
        print(T("(ipywidgets is not installed: the figure stays still)",
                "（未安装 ipywidgets：图不能拖动）"))
        return
    widgets = {{}}
    for name, spec in controls.items():
        if len(spec) == 2:
            widgets[name] = w.SelectionSlider(options=spec[0], value=spec[1], description=name,
                                              continuous_update=False)
        elif all(isinstance(x, int) for x in spec):
            widgets[name] = w.IntSlider(min=spec[0], max=spec[1], step=spec[2], value=spec[3],
                                        description=name, continuous_update=False)
        else:
            widgets[name] = w.FloatSlider(min=spec[0], max=spec[1], step=spec[2],
                                          value=spec[3], description=name,
                                          continuous_update=False)
    w.interact(draw, **widgets)'''
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
    code(SETUP.format(lang=lang), ("setup",))
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

两篇文章的论证，一步一步，由 attnlab 完成计算：{zh}个 notebook，每个都有英文版和中文版，
每个都以练习结束，练习的答案由一个单元格检查。用项目的环境运行（先 `make setup`，再用 `.venv`
的内核打开 notebook）；不需要网络。这里的每个 notebook 都由 `build.py` 生成，不带输出保存；
`tests/course` 会运行全部 notebook。练习以空白形式提供，参考答案见 [solutions.md](solutions.md)。

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
           "其下的检查单元格随即通过。`tests/course` 用这些答案运行每个 notebook。", ""]
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
