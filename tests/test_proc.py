"""attnlab._proc: one named function in a fresh process, JSON in and out."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from attnlab._proc import (
    IsolatedCallError,
    call_forked,
    call_isolated,
    in_fresh_process,
    load_average,
    peak_rss_bytes,
    reset_peak_rss,
)
from limits import CHILD_S


def test_the_call_runs_in_a_child_that_gets_the_environment_given():
    assert call_isolated("attnlab._proc:echo", value={"a": [1, 2.5]},
                         timeout=CHILD_S) == {"a": [1, 2.5]}
    assert call_isolated("attnlab._proc:peak_rss_bytes", timeout=CHILD_S) > 0
    with pytest.raises(IsolatedCallError, match="exit status"):  # the child saw it
        call_isolated("attnlab._proc:echo", value=1, timeout=CHILD_S,
                      env={"PYTHONHASHSEED": "not a seed"})
    with pytest.raises(ValueError, match="attnlab.module:function"):
        call_isolated("os:getpid")  # only attnlab's own functions


def test_failures_and_timeouts_are_isolated_call_errors():
    with pytest.raises(IsolatedCallError, match="echo failed in its own process: exit "
                       "status 1: TypeError") as info:
        call_isolated("attnlab._proc:echo", wrong=1, timeout=CHILD_S)
    assert info.value.reason.startswith("exit status 1: TypeError")
    # the timeout path itself: the child sleeps far past the timeout, whatever the load
    with pytest.raises(IsolatedCallError, match="stopped after the 1 s timeout"):
        call_isolated("attnlab._proc:echo", value=1, after=3600, timeout=1)


#: What the forked calls' server imports (as the long contexts' jobs' does, in part).
PRELOAD = ("attnlab.report.long_contexts",)


def test_a_forked_call_runs_in_another_process_that_gets_the_environment_given():
    assert call_forked("attnlab._proc:echo", preload=PRELOAD, value={"a": [1, 2.5]},
                       timeout=CHILD_S) == {"a": [1, 2.5]}
    seen = call_forked("attnlab.report.long_contexts:max_tokens_from_env", preload=PRELOAD,
                       env={"ATTNLAB_REPORT_LONG_TOKENS": "1234"}, timeout=CHILD_S)
    assert seen == 1234 and "ATTNLAB_REPORT_LONG_TOKENS" not in os.environ
    # its peak is its own from its start: not this process's
    assert 0 < call_forked("attnlab._proc:peak_rss_bytes", preload=PRELOAD,
                           timeout=CHILD_S) < peak_rss_bytes() + 2**30
    with pytest.raises(ValueError, match="attnlab.module:function"):
        call_forked("os:getpid", preload=PRELOAD)


def test_a_forked_call_s_failures_and_timeouts_are_isolated_call_errors():
    with pytest.raises(IsolatedCallError, match="echo failed in its own process: exit "
                       "status 1: TypeError: echo.. got an unexpected keyword"):
        call_forked("attnlab._proc:echo", preload=PRELOAD, wrong=1, timeout=CHILD_S)
    # the timeout path itself: the child sleeps far past the timeout, whatever the load
    with pytest.raises(IsolatedCallError, match="stopped after the 1 s timeout"):
        call_forked("attnlab._proc:echo", preload=PRELOAD, value=1, after=3600, timeout=1)
    # and one that answers while the caller waits is not cut off
    assert call_forked("attnlab._proc:echo", preload=PRELOAD, value=2, after=0.5,
                       timeout=CHILD_S) == 2


def test_peak_rss_is_in_bytes():
    before = peak_rss_bytes()
    block = bytearray(64 << 20)
    block[::4096] = b"x" * len(range(0, len(block), 4096))  # touch every page: resident
    assert peak_rss_bytes() >= max(before, 64 << 20)


# -- release_memory: glibc's freed pages handed back, on a fresh process's resident set
TRIM_SCRIPT = """
import torch
from attnlab._proc import release_memory
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024
base = rss()
keep = [torch.ones(2000) for _ in range(40000)]  # 8 KB each, from malloc's arenas: 320 MB
grown = rss() - base
del keep
kept = rss() - base
ran = release_memory()
print(grown, kept, rss() - base, ran)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_small_tensors_stay_resident_until_released():
    out = subprocess.run([sys.executable, "-c", TRIM_SCRIPT], capture_output=True, text=True,
                         timeout=CHILD_S, check=True).stdout.split()
    grown, kept, after = (int(x) for x in out[:3])
    assert out[3] == "True"
    assert grown > 250e6
    assert kept > 0.8 * grown  # the wrong belief: freeing alone gives the pages back
    assert after < 0.2 * grown  # released: what is live is what stays


def test_a_fresh_process_is_another_interpreter_with_its_own_peak():
    pid, peak = in_fresh_process(_pid_and_peak)
    assert pid != os.getpid() and 0 < peak < peak_rss_bytes() + 2**30


def _pid_and_peak():
    return os.getpid(), peak_rss_bytes()


def _peak_before_and_after_a_reset() -> tuple[int, int, bool]:
    """256 MiB touched, then freed (the peak stays above the resident set); the peak then,
    and after a reset."""
    big = bytearray(256 << 20)
    big[::4096] = b"x" * len(big[::4096])
    before = peak_rss_bytes()
    del big
    reset = reset_peak_rss()
    return before, peak_rss_bytes(), reset


def test_the_load_average_is_the_kernels_line_and_the_peak_resets_to_the_resident_set():
    load = load_average()
    assert load == "unknown" or len(load.split()) == 5
    # in a process of its own: a test worker's resident set moves with what its other
    # threads and earlier tests do (once it did not fall by the 256 MiB freed)
    before, after, reset = in_fresh_process(_peak_before_and_after_a_reset)
    if reset:
        assert after < before - (128 << 20)
    else:
        assert after >= before


# a program run by run_as_program: its main returns or raises what argv[1] says; at exit, a
# non-daemon thread still writing, an atexit function that reports whether the objects
# were frozen, and a line printed but not flushed
PROGRAM = r"""
import atexit, gc, sys, threading, time
from attnlab._proc import run_as_program

def late():
    time.sleep(0.3)
    print("thread done", file=sys.stderr, flush=True)

def at_exit():
    print(f"frozen {gc.get_freeze_count() > 0}", file=sys.stderr, flush=True)

def main():
    atexit.register(at_exit)
    threading.Thread(target=late).start()
    sys.stdout.write("unflushed")
    return {"3": 3, "none": None, "true": True, "text": "a message",
            "exit": SystemExit(4), "raise": ValueError("boom")}[sys.argv[1]]

def entry():
    what = main()
    if isinstance(what, BaseException):
        raise what
    return what

run_as_program(entry)
"""


@pytest.mark.parametrize("what,status,stderr", [
    ("3", 3, ""), ("none", 0, ""), ("true", 1, ""), ("text", 1, "a message"),
    ("exit", 4, ""), ("raise", 1, "ValueError: boom")])
def test_a_program_exits_as_the_interpreter_would_its_objects_frozen(what, status, stderr):
    """The exit status SystemExit gives, the traceback of an uncaught exception, the
    threads waited for, the exit functions run (the objects frozen by then), the output
    flushed: what ``raise SystemExit(main())`` does, less the walk over the objects."""
    r = subprocess.run([sys.executable, "-c", PROGRAM, what], capture_output=True,
                       text=True, timeout=CHILD_S)
    assert r.returncode == status, r.stderr
    assert r.stdout == "unflushed"
    lines = r.stderr.splitlines()
    assert "thread done" in lines and "frozen True" in lines, lines
    assert lines.index("thread done") < lines.index("frozen True")  # as at any exit
    assert stderr in r.stderr


@pytest.mark.parametrize("ending", ["import os\nentry()\nos._exit(0)",
                                    "raise SystemExit(entry())"], ids=["os-exit", "plain"])
def test_an_ending_without_the_freeze_or_the_exit_fails_the_check(ending):
    """The wrong variants: ``os._exit`` right after main loses the exit functions and the
    unflushed output; a plain ``SystemExit`` leaves the objects unfrozen. The check above
    requires both."""
    wrong = PROGRAM.replace("run_as_program(entry)", ending)
    r = subprocess.run([sys.executable, "-c", wrong, "none"], capture_output=True,
                       text=True, timeout=CHILD_S)
    assert r.stdout != "unflushed" or "frozen True" not in r.stderr.splitlines()


_WAITS = ("import json, os, sys\n{before}from attnlab._proc import passive_waits\n"
          "print(json.dumps([passive_waits(), os.environ['OMP_WAIT_POLICY']]))")


@pytest.mark.parametrize("given,before,expected", [
    (None, "", [True, "PASSIVE"]),            # unset: set, and this process follows it
    ("ACTIVE", "", [False, "ACTIVE"]),        # the user's policy is kept
    ("passive", "", [True, "passive"]),       # (OpenMP reads it in either case)
    (None, "import torch\n", [False, "PASSIVE"]),  # set for the children only: too late here
])
def test_passive_waits_sets_the_policy_unless_one_is_given(given, before, expected):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    r = subprocess.run([sys.executable, "-c", _WAITS.format(before=before)], env=env,
                       capture_output=True, text=True, timeout=CHILD_S)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == expected


@pytest.mark.parametrize("given", [None, "ACTIVE"])
def test_the_report_command_sets_it_before_it_builds(monkeypatch, tmp_path, given):
    """``attnlab report`` runs its parts with the policy set (its processes beside inherit
    it), or with the one the user gave."""
    import attnlab.report as report
    from attnlab.cli import main

    monkeypatch.setenv("OMP_WAIT_POLICY", given or "")  # restored after the test
    if given is None:
        monkeypatch.delenv("OMP_WAIT_POLICY")
    seen = []

    class _Result:
        passed = True

    def fake_build(out, **kwargs):
        seen.append(os.environ.get("OMP_WAIT_POLICY"))
        return _Result()

    monkeypatch.setattr(report, "build_report", fake_build)
    assert main(["report", "--out", str(tmp_path), "--quiet"]) == 0
    assert seen == [given or "PASSIVE"]
