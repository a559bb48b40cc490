"""The reference site: `mkdocs build --strict` (what `make docs` runs) builds every page offline
and fails on a broken link, nav entry or API reference."""

from __future__ import annotations

import ast
import doctest
import importlib.util
import io
import json
import logging
import os
import re
import resource
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from limits import PAGE_MS, SLOW_CHILD_S

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"
PACKAGES = ("core", "nn", "tracing", "analysis", "train", "models", "experiments", "viz",
            "report", "serve", "bench")
# pages besides the API reference and the notebooks: README (home), DESIGN, CHANGELOG, the
# guide, the generated claims and support pages, the families page (its summary table is
# generated), the benchmark records, the architecture, the course index, the report page,
# the reference index and its errors page
PAGES = ("index", "design", "changelog", "guide", "claims", "families", "support",
         "benchmarks", "architecture", "course/index", "report", "site/reference",
         "site/errors")

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _mkdocs_installed():
    if MKDOCS.exists():
        return
    if os.environ.get("CI"):
        pytest.fail("mkdocs is not installed; `make test` installs the docs extra")
    # justified: outside CI only, a checkout without the docs extra runs the rest
    pytest.skip("the docs extra is not installed (pip install -e '.[docs]')")


@dataclass
class Built:
    """What `mkdocs build --strict` gives back: its exit status and what it printed."""

    returncode: int
    output: str


def build(config: Path, site: Path, report: Path, cwd: Path) -> Built:
    """`mkdocs build --strict -f config -d site`, run in ``cwd`` with the report at
    ``report``, as mkdocs' command runs it (its `build_command`: the configuration loaded,
    the plugins' start-up, the build, their shutdown), in this process: a new interpreter
    for each of the file's three builds imported mkdocs and its plugins again, 6 s of CPU
    each. The exit status is the command's (1 for the error that ends it: a strict build's
    warnings, a reference that cannot be collected), the output its log lines as it prints
    them (``WARNING -  ...``), then the error."""
    from mkdocs.commands.build import build as mkdocs_build
    from mkdocs.config import load_config
    from mkdocs.exceptions import MkDocsException

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)-7s -  %(message)s"))
    logger = logging.getLogger("mkdocs")
    code, level = 0, logger.level
    with pytest.MonkeyPatch.context() as mp:  # the variables and the folder put back
        mp.setenv("NO_MKDOCS_2_WARNING", "1")
        mp.setenv("ATTNLAB_REPORT_DIR", str(report))
        mp.chdir(cwd)
        logger.setLevel(logging.INFO)  # (setLevel: the loggers' cached levels cleared)
        logger.addHandler(handler)
        try:
            cfg = load_config(config_file=str(config), strict=True, site_dir=str(site))
            cfg.plugins.on_startup(command="build", dirty=False)
            try:
                mkdocs_build(cfg)
            finally:
                cfg.plugins.on_shutdown()
        except MkDocsException as exc:  # the command's exit 1, with this message
            code = 1
            out.write(f"Error: {exc}\n")
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
    return Built(code, out.getvalue())


def html_pages(site: Path) -> set[str]:
    """Every page of a built site, as its path without ``.html`` (assets, 404 and the
    embedded report left out)."""
    return {p.relative_to(site).with_suffix("").as_posix() for p in site.rglob("*.html")
            if p.parts[len(site.parts)] not in ("assets", "report") and p.name != "404.html"}


def notebooks() -> list[str]:
    return sorted(p.relative_to(ROOT / "docs").with_suffix("").as_posix()
                  for lang in ("en", "zh") for p in (ROOT / "docs/course" / lang).glob("*.ipynb"))


def public_names(package: str) -> list[str]:
    """``__all__`` of ``attnlab.<package>``, read from its source (nothing is imported)."""
    tree = ast.parse((ROOT / "src/attnlab" / package / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__"
                                                for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def _cpu() -> float:
    """This process's CPU seconds and its children's."""
    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("site")
    report = tmp / "report"
    report.mkdir()
    (report / "index.html").write_text("<!doctype html><title>r</title><p>report-marker-71</p>")
    # the course's executed notebooks, as tests/course keeps them (run here only if that
    # did not run first): the build time below is the site's, not the notebooks'
    spec = importlib.util.spec_from_file_location("attnlab_course_execute",
                                                  ROOT / "docs/course/execute.py")
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    runner.TIMEOUT_S = SLOW_CHILD_S  # a cell's limit (tests/limits.py), not the runner's own
    runner.ensure(runner.course_notebooks())
    start, cpu = time.perf_counter(), _cpu()
    result = build(ROOT / "mkdocs.yml", tmp / "site", report, ROOT)
    seconds, cpu = time.perf_counter() - start, _cpu() - cpu
    assert result.returncode == 0, result.output[-4000:]
    print(f"\nsite: {len(html_pages(tmp / 'site'))} pages built in {seconds:.1f} s "
          f"({cpu:.1f} s CPU)")
    return tmp / "site", cpu


def test_every_page_is_built(built):
    site, _ = built
    expected = {*PAGES, *(f"site/api/{p}" for p in PACKAGES), *notebooks()}
    assert html_pages(site) == expected


@pytest.mark.parametrize("package", [p for p in PACKAGES if public_names(p)])
def test_api_page_documents_the_public_names(built, package):
    page = (built[0] / "site/api" / f"{package}.html").read_text(encoding="utf-8")
    ids = set(re.findall(r'id="(attnlab\.[\w.]+)"', page))
    missing = [n for n in public_names(package) if f"attnlab.{package}.{n}" not in ids
               and not any(i.startswith(f"attnlab.{package}.{n}.") for i in ids)
               and not (ROOT / "src/attnlab" / package / f"{n}.py").exists()]  # a module
    assert not missing
    assert "<blockquote" not in page  # `>>>` examples are code, not quotes


def test_report_is_embedded_and_readme_links_rewritten(built):
    site, _ = built
    assert "report-marker-71" in (site / "report/index.html").read_text()
    assert 'src="report/index.html"' in (site / "report.html").read_text(encoding="utf-8")
    home = (site / "index.html").read_text(encoding="utf-8")
    assert 'href="claims.html"' in home and 'href="docs/' not in home
    course = (site / "course/index.html").read_text(encoding="utf-8")
    for nb in notebooks():
        assert f'href="{Path(nb).relative_to("course").as_posix()}.html"' in course


def _copy_sources(tmp: Path) -> Path:
    """A copy of what the site is built from (the notebooks left out), to break one thing."""
    repo = tmp / "repo"
    repo.mkdir()
    for name in ("mkdocs.yml", "README.md", "DESIGN.md", "CHANGELOG.md"):
        shutil.copy(ROOT / name, repo / name)
    shutil.copytree(ROOT / "docs", repo / "docs", ignore=shutil.ignore_patterns("*.ipynb"))
    (repo / "src").symlink_to(ROOT / "src")
    return repo


BREAKS = {
    "link in a page": ("docs/claims.md", "\n\nSee [the missing page](no-such-page-1.md).\n",
                       "no-such-page-1"),
    "anchor in a page": ("docs/support.md", "\n\nSee [a heading](claims.md#no-such-heading).\n",
                         "no-such-heading"),
    "link in the README": ("README.md", "\n\nSee [the design](docs/NO_SUCH.md).\n", "NO_SUCH"),
    "nav entry": ("mkdocs.yml", "  - Missing: no-such-page-4.md\n", "no-such-page-4"),
    "API reference": ("docs/site/api/core.md", "\n::: attnlab.core.no_such_function\n",
                      "no_such_function"),
}


def _add_notebook(repo: Path) -> str:
    """A notebook added to the copy's English course; the title its page must show."""
    lang = repo / "docs/course/en"
    lang.mkdir(parents=True, exist_ok=True)
    nb = {"cells": [{"cell_type": "markdown", "id": "zz-title", "metadata": {},
                     "source": ["# Zz test part\n"]},
                    {"cell_type": "code", "id": "zz-code", "metadata": {},
                     "execution_count": None, "outputs": [], "source": ["1 + 1"]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (lang / "99-zz-test.ipynb").write_text(json.dumps(nb))
    return "Zz test part"


def _names_a_break(line: str, breaks: list[str]) -> bool:
    """Whether a WARNING or ERROR line of the build names one of ``breaks``: its missing
    target, or the page it was appended to as the page mkdocs could not read."""
    return any(BREAKS[w][2] in line
               or line.endswith(f"Error reading page '{BREAKS[w][0].removeprefix('docs/')}':")
               for w in breaks)


@pytest.mark.parametrize("breaks", [
    # link checks run once every page is read; an API reference that cannot be collected
    # stops the build on its page before that, so it is broken in a build of its own
    [w for w in BREAKS if w != "API reference"], ["API reference"]], ids=["links", "api"])
def test_strict_build_fails_on_each_broken_reference(tmp_path, breaks):
    """A copy with the breaks appended: strict mode fails, and names every one of them (a
    break that went unnoticed would be missing from the output), and nothing else: every
    warning and error of the build is one of the breaks, so the copy itself builds and each
    build fails for its breaks only.

    The links' build reads every page before it fails, and writes them: a notebook added to
    the course is a page listed in the course index, and without a built report the report
    page says how to make one."""
    repo = _copy_sources(tmp_path)
    # the nav is last in mkdocs.yml, so an appended line is a nav entry
    assert (repo / "mkdocs.yml").read_text().rstrip().splitlines()[-1].startswith("  - ")
    title = _add_notebook(repo)
    for what in breaks:
        name, text, _ = BREAKS[what]
        with open(repo / name, "a", encoding="utf-8") as f:
            f.write(text)
    result = build(repo / "mkdocs.yml", tmp_path / "site", tmp_path / "none", repo)
    assert result.returncode != 0
    out = result.output
    unnoticed = [what for what in breaks if BREAKS[what][2] not in out]
    assert not unnoticed, out[-4000:]
    problems = [line for line in out.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert problems and all(_names_a_break(line, breaks) for line in problems), problems
    if "API reference" in breaks:
        return
    site = tmp_path / "site"
    assert (site / "course/en/99-zz-test.html").is_file()
    course = (site / "course/index.html").read_text(encoding="utf-8")
    assert title in course and "make report" not in course
    assert "make report" in (site / "report.html").read_text(encoding="utf-8")


def test_the_build_check_catches_a_warning_that_is_not_a_break():
    """The wrong variant of the check above: a warning about anything else is caught."""
    links = [w for w in BREAKS if w != "API reference"]
    assert _names_a_break("WARNING -  Doc file 'claims.md' contains a link "
                          "'no-such-page-1.md', but the target is not found", links)
    assert not _names_a_break("WARNING -  Doc file 'guide.md' contains a link 'x.md', but "
                              "the target is not found", links)
    assert not _names_a_break("WARNING -  Doc file 'claims.md' contains a link 'x.md', but "
                              "the target is not found", links)  # a break's page, not it
    assert _names_a_break("ERROR   -  Error reading page 'site/api/core.md':",
                          ["API reference"])


@pytest.mark.parametrize("module", ["hooks", "griffe_markup"])
def test_site_helpers_doctests(module):
    spec = importlib.util.spec_from_file_location(module, ROOT / "docs/site" / f"{module}.py")
    mod = importlib.util.module_from_spec(spec)
    # doctest finds a module's tests through sys.modules[name]: the site's builds in this
    # process load these files under the same names (mkdocs' hooks, griffe's extensions)
    saved = sys.modules.get(module)
    sys.modules[module] = mod
    try:
        spec.loader.exec_module(mod)
        result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    finally:
        if saved is None:
            sys.modules.pop(module, None)
        else:
            sys.modules[module] = saved
    assert result.attempted > 0 and result.failed == 0


# ------------------------------------------------------------------ offline, in a browser

# the pages a reader opens first, and a course part with figures, formulas and an explorer,
# in both languages
BROWSED = ("index", "claims", "course/index", "course/en/02_dot_product_and_scaling",
           "course/zh/02_dot_product_and_scaling", "course/en/09_real_models")


def test_no_page_names_anything_outside_the_site(built):
    """No script, style sheet, font or frame of any page comes from outside the site (the
    `offline` plugin's unpkg.com shim is vendored; nothing loads MathJax)."""
    site, _ = built
    outside = {}
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        found = re.findall(r'<(?:script|link|iframe|img)\b[^>]*\b(?:src|href)="(https?:[^"]*)"',
                           text) + re.findall(r"unpkg\.com|cdn\.jsdelivr|mathjax\.org", text)
        if found:
            outside[page.relative_to(site).as_posix()] = sorted(set(found))
    assert not outside


@pytest.mark.browser
@pytest.mark.parametrize("name", BROWSED)
def test_page_opens_offline_with_math_and_figures(built, browser, name):
    """Each page from file:// in Chromium: every request outside build/site refused and
    recorded (none may be made), formulas as MathML, no raw TeX in the visible text outside
    code; a course page shows its outputs' figures and folds its setup cell."""
    from attnlab._mathml import has_raw_tex

    site, _ = built
    root = site.resolve().as_uri() + "/"
    outside, errors = [], []

    def on_route(route):
        url = route.request.url
        if url.startswith(root) or url.startswith(("data:", "blob:", "about:")):
            route.continue_()
        else:
            outside.append(url)
            route.abort()

    context = browser.new_context()
    context.set_default_timeout(PAGE_MS)  # as the page fixture's
    context.set_default_navigation_timeout(PAGE_MS)
    try:
        context.route("**/*", on_route)
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(root + name + ".html", wait_until="load")
        page.wait_for_timeout(300)  # the search worker starts after load
        math = page.locator("math").count()
        # what a reader sees, code blocks left out: their `$` are shell prompts
        page.add_style_tag(content="code, pre, .highlight { display: none !important }")
        visible = page.inner_text("body")
        if name.startswith("course/") and name != "course/index":
            figures = page.evaluate(
                "() => [...document.querySelectorAll('.jp-OutputArea-output img')]"
                ".filter(i => i.naturalWidth > 0).length")
            assert figures >= 1
            assert math >= 1
            setup = page.locator("details.attnlab-setup")
            assert setup.count() == 1 and setup.get_attribute("open") is None
            assert "import torch" not in visible  # folded away
        if name in ("claims",):
            assert math >= 1
    finally:
        context.close()
    assert not outside, f"{name} requested outside the site: {outside}"
    assert not has_raw_tex(visible), [line for line in visible.splitlines()
                                      if has_raw_tex(line)][:5]
    assert not errors, errors
