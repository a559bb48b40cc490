"""The report page and the CLI around it (parity section only: other sections test apart)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from attnlab import report
from attnlab.cli import main

PARITY = ["attnlab.experiments.parity:report_section"]


def test_parity_report_is_self_contained_and_passes(tmp_path):
    result = report.build_report(tmp_path, quiet=True, providers=PARITY)
    assert result.passed
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert 'id="parity"' in page and "PASS" in page
    # no external resource of any kind
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "@import" not in page and "url(http" not in page
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["passed"] and summary["sections"][0]["id"] == "parity"
    assert len(summary["sections"][0]["rows"]) >= 20


def test_page_escapes_user_text():
    s = report.Section("x", "<script>alert(1)</script>", "标题", "<p>ok</p>", True)
    page = report.render_page([s])
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page


def test_failed_section_fails_the_report(tmp_path):
    bad = report.ReportResult(tmp_path, [report.Section("a", "A", "A", "", False)])
    assert not bad.passed
    assert report.ReportResult(tmp_path, [report.Section("a", "A", "A", "", None)]).passed


def test_atomic_write_leaves_no_temp_files(tmp_path):
    report.atomic_write_text(tmp_path / "f.txt", "hello")
    report.atomic_write_text(tmp_path / "f.txt", "again")
    assert (tmp_path / "f.txt").read_text() == "again"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_cli_report_unwritable_out_is_a_clear_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = main(["report", "--out", str(blocker / "sub"), "--quiet"])
    assert code == 2
    assert "--out" in capsys.readouterr().err


def test_python_dash_m_attnlab_is_the_cli():
    out = subprocess.run([sys.executable, "-m", "attnlab", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "report" in out and "attnlab" in out
    version = subprocess.run([sys.executable, "-m", "attnlab", "--version"],
                             capture_output=True, text=True, check=True).stdout
    assert version.startswith("attnlab ")


def test_cli_starts_without_matplotlib_and_plot_kinds_match_figures():
    code = ("import sys, attnlab.cli as c; c.build_parser(); "
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"
    from attnlab.viz import figures

    parser = __import__("attnlab.cli", fromlist=["build_parser"]).build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    kind = next(a for a in sub.choices["plot"]._actions if a.dest == "kind")
    assert tuple(kind.choices) == tuple(figures.KINDS)


def test_written_files_are_readable_by_others(tmp_path):
    import os
    import stat

    report.atomic_write_text(tmp_path / "page.html", "x")
    mode = stat.S_IMODE(os.stat(tmp_path / "page.html").st_mode)
    assert mode & stat.S_IROTH


def test_only_builds_just_the_named_parts(tmp_path, capsys):
    result = report.build_report(tmp_path, only=["parity"], quiet=True)
    assert [s.id for s in result.sections] == ["parity"]
    assert main(["report", "--out", str(tmp_path), "--only", "nonsense", "--quiet"]) == 2
    assert "parts are" in capsys.readouterr().err


def test_attnlab_debug_shows_the_traceback(tmp_path, monkeypatch):
    import pytest

    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("ATTNLAB_DEBUG", "1")
    with pytest.raises(ValueError, match="--out"):
        main(["report", "--out", str(blocker / "sub"), "--quiet"])
