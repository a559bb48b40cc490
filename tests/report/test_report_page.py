"""The report page, its assembly and the CLI around it (the parity part only: the other
parts have tests of their own)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys

import pytest

from attnlab import report
from attnlab.cli import main
from attnlab.experiments.parity import ParityCheck
from attnlab.report import parity as parity_part

PARITY = ["attnlab.report.parity:build"]


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
    # the written files: whole (no temp file left behind) and readable by others
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.html", "summary.json"]
    assert stat.S_IMODE(os.stat(tmp_path / "index.html").st_mode) & stat.S_IROTH


def test_a_failing_parity_check_fails_the_section_and_the_report(tmp_path, monkeypatch):
    bad = [ParityCheck("sdpa: planted error", 3e-3, 1e-5)]
    monkeypatch.setattr(parity_part, "run_parity", lambda seed: bad)
    result = report.build_report(tmp_path, quiet=True, providers=PARITY)
    (section,) = result.sections
    assert section.passed is False and not result.passed
    assert ("sdpa: planted error", "3.0e-03", False) in section.rows
    assert 'class="badge fail"' in (tmp_path / "index.html").read_text(encoding="utf-8")


def test_page_escapes_user_text():
    s = report.Section("x", "<script>alert(1)</script>", "标题", "<p>ok</p>", True)
    page = report.render_page([s])
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page


def test_failed_section_fails_the_report(tmp_path):
    bad = report.ReportResult(tmp_path, [report.Section("a", "A", "A", "", False)])
    assert not bad.passed
    assert report.ReportResult(tmp_path, [report.Section("a", "A", "A", "", None)]).passed


def test_every_part_is_a_builder_inside_the_report_package():
    import importlib

    for part, spec in report.PROVIDERS.items():
        module, _, func = spec.partition(":")
        assert module.startswith("attnlab.report."), part
        assert callable(getattr(importlib.import_module(module), func)), part


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


def test_only_builds_just_the_named_parts(tmp_path, capsys):
    result = report.build_report(tmp_path, only=["parity"], quiet=True)
    assert [s.id for s in result.sections] == ["parity"]
    assert main(["report", "--out", str(tmp_path), "--only", "parity", "--quiet"]) == 0
    assert main(["report", "--out", str(tmp_path), "--only", "nonsense", "--quiet"]) == 2
    assert "parts are" in capsys.readouterr().err


def test_attnlab_debug_shows_the_traceback(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("ATTNLAB_DEBUG", "1")
    with pytest.raises(ValueError, match="--out"):
        main(["report", "--out", str(blocker / "sub"), "--quiet"])


def test_each_part_states_its_time_at_its_top():
    from attnlab.report.html import Section
    from attnlab.report.page import render_page

    page = render_page([Section("a", "A", "甲", "<p>body-a</p>", seconds=3.21),
                        Section("b", "B", "乙", "<p>body-b</p>", seconds=7.0, seconds_shared=2),
                        Section("c", "C", "丙", "<p>body-c</p>")])
    a = page[page.index('id="a"'):page.index("body-a")]
    assert "computed in 3.2 s" in a and "用时 3.2 秒" in a
    b = page[page.index('id="b"'):page.index("body-b")]
    assert "computed in 7.0 s, with the 2 sections of its part" in b
    c = page[page.index('id="c"'):page.index("body-c")]
    assert "computed in" not in c  # a section not built by the report states no time
