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
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

# top-level files of the repository that become pages, and their names in the site
TOP_PAGES = {"README.md": "index.md", "DESIGN.md": "design.md", "CHANGELOG.md": "changelog.md"}
COURSE_LANGS = (("en", "English"), ("zh", "中文"))
REPORT_ENV = "ATTNLAB_REPORT_DIR"
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
        "number and run them again; the pages below show them without their outputs.", "",
        "两篇文章改写成的课程：每一部分一个笔记本，中英文各一套。"
        "每个笔记本都使用 attnlab 自己的 API，图直接画在笔记本里，最后附有可以核对答案的练习。", "",
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
    return files


