"""The report built in two processes (attnlab.report._lanes): the long text's parts here,
the others in a spawned process on one thread at a lower priority; the page the same, in
page order, every part's lines shown, a part's error raised here. Work of a part here that
needs nothing before it (_lanes.AHEAD) runs in a third process from the start, at the lower
priority, and only with two processes."""

from __future__ import annotations

import os
import time

import pytest

from attnlab import ArgumentError
from attnlab.report import _lanes, page
from attnlab.report._lanes import SIDE_NICE, build_beside
from limits import CHILD_S

PARTS = {"claims": "lanes_parts:first", "long-contexts": "lanes_parts:long_part",
         "attribution": "lanes_parts:attribution_part", "survey": "lanes_parts:last"}


@pytest.fixture(autouse=True)
def ahead(monkeypatch):
    """The work ahead of these parts (never the real one: SmolLM2's ablations)."""
    monkeypatch.setattr(_lanes, "AHEAD", {"attribution": "lanes_parts:ahead"})


def _where(section):
    pid, threads, nice = (int(x) for x in section.html.split())
    return pid, threads, nice


def test_the_other_parts_run_beside_on_one_thread_at_a_lower_priority(tmp_path, monkeypatch):
    monkeypatch.setattr(page, "PROVIDERS", PARTS)
    result = page.build_report(tmp_path, quiet=True, processes=2)
    assert [s.id for s in result.sections] == ["first", "long", "attribution",
                                               "attribution-2", "last"]  # page order
    where = {s.id: _where(s) for s in result.sections}
    assert where["long"][0] == where["attribution"][0] == os.getpid()
    assert where["first"][0] != os.getpid()
    assert where["first"][1] == 1 and where["first"][2] >= min(19, os.nice(0) + SIDE_NICE)
    assert where["last"][1] == 1  # beside, or here once the parts here were done: one thread
    assert [s.seconds_shared for s in result.sections] == [1, 1, 2, 2, 1]
    assert all(s.seconds > 0 for s in result.sections)
    assert (tmp_path / "index.html").is_file() and result.passed
    # the part's work ahead: a third process, one thread, the lower priority, the seed
    pid, threads, nice, seed = (int(x) for x in (tmp_path / "ahead.txt").read_text().split())
    assert pid not in (os.getpid(), where["first"][0])
    assert (threads, seed) == (1, 0) and nice >= min(19, os.nice(0) + SIDE_NICE)


def test_the_parts_beside_left_when_the_parts_here_are_done_are_built_here(tmp_path,
                                                                           monkeypatch):
    """The process beside takes its parts from the first, this one from the last once its
    own are built: the last part beside is built here (on one thread, as beside), while
    the first still runs beside (it waits for the last)."""
    monkeypatch.setattr(page, "PROVIDERS", {"claims": "lanes_parts:first_waits_for_last",
                                            "long-contexts": "lanes_parts:long_part",
                                            "survey": "lanes_parts:last"})
    result = page.build_report(tmp_path, quiet=True, processes=2)
    assert [s.id for s in result.sections] == ["first", "long", "last"]  # page order
    where = {s.id: _where(s) for s in result.sections}
    assert where["long"][0] == where["last"][0] == os.getpid() != where["first"][0]
    assert where["last"][1] == 1 and where["first"][1] == 1
    assert result.passed


def test_together_parts_are_one_unit_at_the_first_one_s_place():
    claims, experiments = _lanes.TOGETHER[0]
    assert _lanes.units_of(["a:b", experiments, "c:d", claims]) == [
        ["a:b"], [experiments, claims], ["c:d"]]
    assert _lanes.units_of(["a:b", "c:d"]) == [["a:b"], ["c:d"]]


def test_one_process_builds_every_part_here_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr(page, "PROVIDERS", PARTS)
    result = page.build_report(tmp_path, quiet=True, processes=1)
    assert [s.id for s in result.sections] == ["first", "long", "attribution",
                                               "attribution-2", "last"]
    assert {_where(s)[0] for s in result.sections} == {os.getpid()}
    assert not (tmp_path / "ahead.txt").exists()  # nothing ahead: the part does it all here
    # named providers run here, in the order given, whatever the processes
    named = page.build_report(tmp_path, quiet=True, processes=2,
                              providers=["lanes_parts:last", "lanes_parts:first"])
    assert [s.id for s in named.sections] == ["last", "first"]
    assert {_where(s)[0] for s in named.sections} == {os.getpid()}


def test_the_parts_beside_say_what_they_do_and_their_errors_are_raised_here(tmp_path):
    said, done = [], []
    side = build_beside(["lanes_parts:first", "lanes_parts:last"], tmp_path, 0,
                        log=said.append, part_done=lambda: done.append(1))
    parts = side.result()
    pid = _where(parts[0][1][0])[0]
    assert said == [f"first says hello from {pid}", f"last says hello from {pid}"]
    assert done == [1, 1] and [spec for spec, _ in parts] == ["lanes_parts:first",
                                                               "lanes_parts:last"]
    assert [sections[0].id for _, sections in parts] == ["first", "last"]
    failing = build_beside(["lanes_parts:first", "lanes_parts:broken"], tmp_path, 0,
                           log=lambda _m: None, part_done=lambda: None)
    with pytest.raises(ArithmeticError, match="fails on purpose"):
        failing.result()


def test_a_failing_part_here_ends_the_parts_beside_and_ahead_without_waiting(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setattr(page, "PROVIDERS", {"claims": "lanes_parts:slow",
                                            "long-contexts": "lanes_parts:broken_once_slow_runs"})
    monkeypatch.setattr(_lanes, "AHEAD", {"long-contexts": "lanes_parts:slow_ahead"})
    monkeypatch.setenv("LANES_PARTS_DIR", str(tmp_path))
    with pytest.raises(ArithmeticError, match="slow part running beside it"):
        page.build_report(tmp_path, quiet=True, processes=2)
    for name in ("slow.pid", "ahead.pid"):
        pid = int((tmp_path / name).read_text())
        for _ in range(int(CHILD_S * 10)):  # its end is asked for before the error is raised
            if not _alive(pid):
                break
            time.sleep(0.1)
        assert not _alive(pid), f"the process of {name} still runs its slow work"


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("bad", [0, 3, "2", True])
def test_processes_is_one_or_two(tmp_path, bad):
    with pytest.raises((ArgumentError, TypeError), match="processes"):
        page.build_report(tmp_path, quiet=True, processes=bad, providers=[])


_KILLED = r"""
import sys
sys.path[:0] = sys.argv[2].split("|")
from attnlab.report import _lanes, page
page.PROVIDERS = {"claims": "lanes_parts:slow", "long-contexts": "lanes_parts:waits"}
_lanes.AHEAD = {"long-contexts": "lanes_parts:slow_ahead"}
page.build_report(sys.argv[1], quiet=True, processes=2)
"""


def test_a_killed_report_takes_its_helper_processes_with_it(tmp_path, monkeypatch):
    """The report's process killed outright (SIGKILL, no cleanup of its own): the kernel
    ends the process beside and the one ahead (PR_SET_PDEATHSIG), not left to run on."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    monkeypatch.setenv("LANES_PARTS_DIR", str(tmp_path))
    here = str(Path(__file__).parent)
    report = subprocess.Popen([sys.executable, "-c", _KILLED, str(tmp_path),
                               "|".join([here, *sys.path])])
    try:
        pids = {}
        for _ in range(int(CHILD_S * 10)):  # the slow part beside and the slow work ahead
            pids = {n: tmp_path / n for n in ("slow.pid", "ahead.pid")}
            if all(p.is_file() and p.read_text() for p in pids.values()):
                break
            time.sleep(0.1)
        helpers = [int(p.read_text()) for p in pids.values()]
        assert all(_alive(pid) for pid in helpers)
    finally:
        report.send_signal(signal.SIGKILL)
        report.wait()
    for pid in helpers:
        for _ in range(int(CHILD_S * 10)):
            if not _alive(pid):
                break
            time.sleep(0.1)
        assert not _alive(pid), f"helper process {pid} outlived the report"


def test_the_parts_taken_first_beside_are_parts_built_beside():
    assert set(page.BESIDE_FIRST) <= set(page.PROVIDERS) - set(_lanes.MAIN_PARTS)
