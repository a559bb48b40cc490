"""MkDocs hooks of attnlab's reference site (``make docs``; configured in ``mkdocs.yml``).

* The repository's top-level pages join the site as generated pages: ``README.md`` is the
  home page, ``DESIGN.md`` and ``CHANGELOG.md`` follow. Their links are written relative to
  the repository root (``docs/claims.md``); they are rewritten relative to the site
  (``claims.md``), so ``mkdocs build --strict`` still checks every one of them.
* The course (``docs/course/en`` and ``docs/course/zh``, one notebook per part) gets an
  index page listing its notebooks by title, and the notebooks go into the navigation.
* The report: when a built report exists (``$ATTNLAB_REPORT_DIR``, default ``report/``,
  as ``make report`` writes it), it is copied into the site under ``report/`` and the
  report page embeds it (the link to it is checked like any other); otherwise the page
  says how to build it.
* The course's notebooks are committed with the outputs of ``make course``, made small
  for a reader of the repository (the explorer's inlined page, which only runs in a live
  notebook, left out). Each page is rendered from the runner's executed copy instead
  (``docs/course/execute.py``: the runner ``make course`` and ``tests/course`` use, whose
  copies it reuses when they are current for the notebook's cells), so the pages show
  their figures, tables and explorers whole. The setup cell (tagged ``setup``) is folded
  away in a ``<details>``.
* Formulas are MathML, converted when the site is built (``attnlab._mathml``): no script,
  no font and no request. In Markdown pages the ``$...$`` and ``$$...$$`` outside code are
  set aside before Markdown reads them (so that ``_`` or ``\\`` in TeX stay TeX) and put
  back as MathML; in every page's HTML (the notebooks, the API pages) a text outside
  ``<code>``, ``<pre>``, ``<script>`` and ``<style>`` that holds one is converted too.
  Nothing loads MathJax (the notebook template's loader is removed).
"""

from __future__ import annotations

import html
import importlib.util
import json
import logging
import os
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File, Files

# top-level files of the repository that become pages, and their names in the site
TOP_PAGES = {"README.md": "index.md", "DESIGN.md": "design.md", "CHANGELOG.md": "changelog.md"}
COURSE_LANGS = (("en", "English"), ("zh", "中文"))
REPORT_ENV = "ATTNLAB_REPORT_DIR"
log = logging.getLogger("mkdocs.hooks.attnlab")
_LINK = re.compile(r"(\]\(|<img [^>]*src=\"|<a [^>]*href=\")([^)\"\s]+)")


def _repo_root(config) -> Path:
    return Path(config["config_file_path"]).resolve().parent


def site_link(target: str) -> str:
    """A link written relative to the repository root, rewritten relative to the site root.

    >>> site_link("docs/claims.md#verdicts")
    'claims.md#verdicts'
    >>> site_link("DESIGN.md"), site_link("docs/course/"), site_link("https://x.org/a.md")
    ('design.md', 'course/index.md', 'https://x.org/a.md')
    """
    if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):
        return target
    path, sep, anchor = target.partition("#")
    if path in TOP_PAGES:
        path = TOP_PAGES[path]
    elif path.startswith("docs/"):
        path = path[len("docs/"):]
        if path.endswith("/"):
            path += "index.md"
    return path + sep + anchor


def rewrite_links(markdown: str) -> str:
    """Every relative link and image of a top-level page, rewritten by :func:`site_link`."""
    return _LINK.sub(lambda m: m.group(1) + site_link(m.group(2)), markdown)


def notebooks(docs_dir: Path) -> dict[str, list[Path]]:
    """The course notebooks per language folder, in file-name order (the order of the parts)."""
    course = docs_dir / "course"
    return {lang: sorted((course / lang).glob("*.ipynb")) for lang, _ in COURSE_LANGS}


def notebook_title(path: Path) -> str:
    """The first Markdown heading of a notebook, else its file name."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError):
        return path.stem
    for cell in cells:
        if cell.get("cell_type") != "markdown":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else source
        for line in text.splitlines():
            if line.startswith("#"):
                return line.lstrip("#").strip()
    return path.stem


def on_config(config):
    docs_dir = Path(config["docs_dir"])
    found = notebooks(docs_dir)
    course = [{"Course · 课程": "course/index.md"}]
    for lang, label in COURSE_LANGS:
        if found[lang]:
            course.append({label: [
                {notebook_title(p): p.relative_to(docs_dir).as_posix()} for p in found[lang]]})
    for entry in config["nav"] or []:
        if isinstance(entry, dict) and "Course" in entry:
            entry["Course"] = course
    return config


def _course_index(docs_dir: Path) -> str:
    found = notebooks(docs_dir)
    lines = [
        "# Course · 课程", "",
        "The two articles as a course, one notebook per part, in English and in Chinese. "
        "Each uses attnlab's own API, draws its figures inline and ends with exercises "
        "whose answers are checked. Open them from `docs/course/` in Jupyter to change a "
        "number and run them again; the pages below show them with their outputs, run on the "
        "code this site was built from.", "",
        "两篇文章改写成的课程：每一部分一个笔记本，中英文各一套。"
        "每个笔记本都使用 attnlab 自己的 API，图直接画在笔记本里，最后附有可以核对答案的练习；"
        "下面的页面显示笔记本在构建本站所用代码上运行的输出。", "",
    ]
    for lang, label in COURSE_LANGS:
        lines += [f"## {label}", ""]
        if not found[lang]:
            lines += ["(no notebook yet · 暂无)", ""]
        for i, path in enumerate(found[lang], 1):
            rel = path.relative_to(docs_dir / "course").as_posix()
            lines.append(f"{i}. [{notebook_title(path)}]({rel})")
        lines.append("")
    return "\n".join(lines)


def report_dir(config) -> Path:
    """The built report to embed: ``$ATTNLAB_REPORT_DIR`` or ``report/`` beside mkdocs.yml."""
    path = Path(os.environ.get(REPORT_ENV) or "report")
    return path if path.is_absolute() else _repo_root(config) / path


def _report_page(config) -> str:
    head = "# Report · 报告\n\n"
    if (report_dir(config) / "index.html").is_file():
        return head + (
            "The report as `make report` built it, embedded whole (one self-contained page). "
            "[Open it alone](report/index.html).\n\n"
            "`make report` 生成的报告，完整嵌入本页；也可以[单独打开](report/index.html)。\n\n"
            '<iframe src="report/index.html" title="attnlab report" '
            'style="width:100%;height:85vh;border:1px solid #ccc"></iframe>\n')
    return head + (
        "No built report was found when this site was built. Build it with `make report` "
        "(it writes `report/index.html`), then `make docs` again: the site copies it under "
        f"`report/` and embeds it here (`{REPORT_ENV}=DIR` names another folder).\n\n"
        "构建本站时没有找到已生成的报告。先运行 `make report`（生成 `report/index.html`），"
        "再运行 `make docs`，报告就会复制到站点的 `report/` 下并嵌入本页。\n")


def on_files(files: Files, config) -> Files:
    root = _repo_root(config)
    docs_dir = Path(config["docs_dir"])
    for source, name in TOP_PAGES.items():
        if (root / source).is_file():
            text = rewrite_links((root / source).read_text(encoding="utf-8"))
            files.append(File.generated(config, name, content=text))
    if not files.get_file_from_path("course/index.md"):
        files.append(File.generated(config, "course/index.md", content=_course_index(docs_dir)))
    files.append(File.generated(config, "report.md", content=_report_page(config)))
    built = report_dir(config)
    if (built / "index.html").is_file():  # a self-contained page: its HTML files are all
        for page in sorted(built.glob("*.html")):
            files.append(File.generated(config, f"report/{page.name}", abs_src_path=str(page)))
    _use_executed_notebooks(files, config)
    return files




# ---------------------------------------------------------------- the executed notebooks


def _course_runner(docs_dir: Path):
    """``docs/course/execute.py`` of the site being built, as a module."""
    path = docs_dir / "course" / "execute.py"
    spec = importlib.util.spec_from_file_location("attnlab_course_execute", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _use_executed_notebooks(files: Files, config) -> None:
    docs_dir = Path(config["docs_dir"])
    course = [f for f in files if f.src_uri.startswith("course/")
              and f.src_uri.endswith(".ipynb") and f.abs_src_path]
    if not course:
        return
    runner = _course_runner(docs_dir)
    copies = runner.ensure([Path(f.abs_src_path) for f in course],
                           cache=_repo_root(config) / "build" / "course-executed",
                           log=lambda line: log.info(line))
    for f in course:
        f.abs_src_path = str(copies[Path(f.abs_src_path)])


# ---------------------------------------------------------------- the setup cell, folded

_SETUP_CELL = re.compile(r'<div class="jp-Cell [^"]*\bcelltag_setup\b[^"]*"[^>]*>\s*'
                         r'(?=<div class="jp-Cell-inputWrapper")')
_DIV = re.compile(r"<(/?)div\b[^>]*>")
SETUP_SUMMARY = {"en": "Setup: imports and helpers (the same in every part)",
                 "zh": "准备：导入与辅助函数（每一部分都相同）"}


def fold_setup_cell(page_html: str, lang: str = "en") -> str:
    """The input of the notebook's setup cell (tagged ``setup``) inside a closed
    ``<details>``; its outputs, if any, stay visible.

    >>> cell = ('<div class="jp-Cell jp-CodeCell celltag_setup" id="c1">'
    ...         '<div class="jp-Cell-inputWrapper"><div>import torch</div></div>'
    ...         '<div class="jp-Cell-outputWrapper">out</div></div>')
    >>> folded = fold_setup_cell(cell)
    >>> folded.index("<details") < folded.index("import torch") < folded.index("</details>")
    True
    >>> folded.index("</details>") < folded.index("out</div>")
    True
    >>> fold_setup_cell("<p>no setup cell</p>")
    '<p>no setup cell</p>'
    """
    m = _SETUP_CELL.search(page_html)
    if not m:
        return page_html
    start, depth = m.end(), 0
    for tag in _DIV.finditer(page_html, start):
        depth += -1 if tag.group(1) else 1
        if depth == 0:
            end = tag.end()
            break
    else:
        return page_html
    summary = SETUP_SUMMARY.get(lang, SETUP_SUMMARY["en"])
    return (page_html[:start] + f'<details class="attnlab-setup"><summary>{summary}</summary>'
            + page_html[start:end] + "</details>" + page_html[end:])


_MATHJAX = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)


def drop_mathjax(page_html: str) -> str:
    """The notebook template's MathJax loader and configuration, removed: the formulas are
    MathML already, and the loader would be a request (or an empty ``<script src="">``).

    >>> drop_mathjax('a<!-- Load mathjax --><script src=""></script>'
    ...              '<!-- End of mathjax configuration -->b')
    'ab'
    """
    return _MATHJAX.sub("", page_html)


# ---------------------------------------------------------------- formulas as MathML

_FENCE = re.compile(r"^([ \t]*)(`{3,}|~{3,})[^\n]*\n.*?^\1\2[ \t]*$", re.S | re.M)
_CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.S)
_TOKEN = re.compile(r"ATTNLABMATH(\d+)X")
# the articles quote a formula of theirs alone between corner brackets, without `$`
_QUOTED = re.compile(r"(?<=「)([^」\n$]+)(?=」)")
_RAW_TEXT = {"script", "style", "textarea"}
_SKIP_TAGS = {"code", "pre", "script", "style", "math", "textarea", "svg", "kbd", "samp"}
_TAG = re.compile(r"<!--.*?-->|<(/?)([A-Za-z][\w-]*)\b[^>]*?(/?)>", re.S)


def _to_mathml(tex: str, display: bool) -> str:
    from attnlab._mathml import to_mathml

    return to_mathml(tex, display)


def protect_math(markdown: str, store: list[str]) -> str:
    r"""Each ``$...$`` and ``$$...$$`` of a Markdown text outside code, replaced by a token
    that Markdown leaves alone; ``store`` receives its MathML (see :func:`restore_math`).

    >>> store = []
    >>> protect_math("a $x_1$ b `$y$`\n```sh\n$ make\n```\n", store)
    'a ATTNLABMATH0X b `$y$`\n```sh\n$ make\n```\n'
    >>> store[0].startswith("<math") and "x_1" in store[0]
    True
    >>> protect_math("「\\frac{a}{b}」 and 「词 \\frac」", store)
    '「ATTNLABMATH1X」 and 「词 \\frac」'
    """
    from attnlab._mathml import SEGMENT, is_formula

    def math(m: re.Match) -> str:
        display = m.group(1) is not None
        store.append(_to_mathml(m.group(1) if display else m.group(2), display))
        return f"ATTNLABMATH{len(store) - 1}X"

    def quoted(m: re.Match) -> str:
        if not is_formula(m.group(1)):
            return m.group(0)
        store.append(_to_mathml(m.group(1), False))
        return f"ATTNLABMATH{len(store) - 1}X"

    def formulas(text: str) -> str:
        return _QUOTED.sub(quoted, SEGMENT.sub(math, text))

    def prose(text: str) -> str:  # outside inline code spans
        return _outside(_CODE_SPAN, text, formulas)

    return _outside(_FENCE, markdown, prose)  # outside fenced code blocks


def _outside(pattern: re.Pattern, text: str, fn) -> str:
    """``text`` with ``fn`` applied to every stretch between matches of ``pattern`` (the
    matches kept as they are)."""
    out, last = [], 0
    for m in pattern.finditer(text):
        out.append(fn(text[last:m.start()]))
        out.append(m.group(0))
        last = m.end()
    out.append(fn(text[last:]))
    return "".join(out)


def restore_math(page_html: str, store: list[str]) -> str:
    """The tokens of :func:`protect_math`, replaced by their MathML."""
    return _TOKEN.sub(lambda m: store[int(m.group(1))], page_html) if store else page_html


def math_in_html(page_html: str) -> str:
    r"""Every text of an HTML page outside code, scripts and styles that holds ``$...$``
    or ``$$...$$``, with its formulas as MathML.

    >>> math_in_html('<p>the scale $1/\\sqrt{d_k}$ &amp; more</p><code>$x$</code>')
    ... # doctest: +ELLIPSIS
    '<p>the scale <math ...>...</math> &amp; more</p><code>$x$</code>'
    >>> math_in_html("<td>「\\sqrt{d}」</td>")  # doctest: +ELLIPSIS
    '<td>「<math ...>...</math>」</td>'
    >>> math_in_html("<pre>$ make docs</pre><p>costs 5 $</p>")
    '<pre>$ make docs</pre><p>costs 5 $</p>'
    >>> math_in_html('<script>/* <script id="x"> */</script><p>$x$</p>')  # doctest: +ELLIPSIS
    '<script>/* <script id="x"> */</script><p><math ...>...</math></p>'
    """
    from attnlab._mathml import SEGMENT, is_formula

    out, pos, skip, depth = [], 0, None, 0

    def plain(raw: str) -> str:  # escaped, a formula quoted alone converted
        parts, last = [], 0
        for m in _QUOTED.finditer(raw):
            if is_formula(m.group(1)):
                parts += [html.escape(raw[last:m.start()], quote=False),
                          _to_mathml(m.group(1), False)]
                last = m.end()
        return "".join(parts) + html.escape(raw[last:], quote=False)

    def text(segment: str) -> str:
        if skip is not None or ("$" not in segment and "\\" not in segment):
            return segment
        raw = html.unescape(segment)
        if not SEGMENT.search(raw) and not any(is_formula(q) for q in _QUOTED.findall(raw)):
            return segment
        parts, last = [], 0
        for m in SEGMENT.finditer(raw):
            parts.append(plain(raw[last:m.start()]))
            display = m.group(1) is not None
            parts.append(_to_mathml(m.group(1) if display else m.group(2), display))
            last = m.end()
        parts.append(plain(raw[last:]))
        return "".join(parts)

    for tag in _TAG.finditer(page_html):
        out.append(text(page_html[pos:tag.start()]))
        out.append(tag.group(0))
        pos = tag.end()
        name = (tag.group(2) or "").lower()
        if not name or tag.group(3):  # a comment, or a self-closing tag
            continue
        if skip is None and name in _SKIP_TAGS and not tag.group(1):
            skip, depth = name, 1
        elif skip == name:
            # a raw-text element (script, style, textarea) ends at its first closing tag:
            # a "<script" inside a script's text opens nothing
            depth += -1 if tag.group(1) else (0 if name in _RAW_TEXT else 1)
            if depth == 0:
                skip = None
    out.append(text(page_html[pos:]))
    return "".join(out)


_MATH_STORES: dict[str, list[str]] = {}


def _is_notebook(page) -> bool:
    return page.file.src_uri.endswith(".ipynb")


def on_page_markdown(markdown: str, page, config, files):
    if _is_notebook(page):
        return markdown
    store: list[str] = []
    markdown = protect_math(markdown, store)
    _MATH_STORES[page.file.src_uri] = store
    return markdown


def on_page_content(page_html: str, page, config, files):
    page_html = math_in_html(page_html)
    page_html = restore_math(page_html, _MATH_STORES.pop(page.file.src_uri, []))
    if _is_notebook(page):
        lang = page.file.src_uri.split("/")[1] if page.file.src_uri.count("/") > 1 else "en"
        page_html = fold_setup_cell(drop_mathjax(page_html), lang)
    return page_html
