"""The README's top, for a newcomer: the two commands first, then what attnlab is, the two
screenshots (small PNGs under docs/img/) and the links to the course and the reference."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
LIMIT = 150_000


def _top() -> str:
    """The README up to its first list of features."""
    return README.split("\n- ", 1)[0]


def test_title_and_the_two_commands_come_first():
    lines = README.splitlines()
    assert lines[0].startswith("# attnlab")
    assert lines[2] == "```sh" and lines[5] == "```"
    assert lines[3].startswith("make report") and lines[4].startswith("make test")


def test_screenshots_are_small_pngs_that_exist():
    images = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", _top())
    assert images == ["docs/img/explorer.png", "docs/img/report-figure.png"]
    for rel in images:
        data = (ROOT / rel).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < LIMIT, rel
    assert (ROOT / "docs/img/make_screenshots.py").is_file()  # how they are taken


def test_links_to_the_course_and_the_reference_resolve():
    links = dict((text.lower(), target) for text, target
                 in re.findall(r"(?<!!)\[([^\]]+)\]\(([^)#]+)\)", _top()))
    assert (ROOT / links["course"]).is_dir()
    assert list((ROOT / links["course"]).glob("*/*.ipynb"))
    assert (ROOT / links["api reference"]).is_file()
    assert (ROOT / links["changelog"]).is_file()


def test_changelog_starts_at_0_1_0():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    versions = re.findall(r"^## \[([^\]]+)\]", text, re.MULTILINE)
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(),
                        re.MULTILINE).group(1)
    assert versions[-1] == "0.1.0" and version in versions
