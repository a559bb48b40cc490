"""tests/forked.py: ``python -c`` in a process forked from one that imported torch gives what
``subprocess.run`` gives a new interpreter: the output, the exit status, the environment,
folder and arguments handed to it, a timeout."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from forked import python_c
from limits import CHILD_S

CODE = ("import os, sys, torch\n"
        "print(sys.argv[1:], os.environ.get('FORKED_X'), os.getcwd(), torch.get_num_threads(),"
        " 'attnlab' in sys.modules, __name__)\n"
        "print('to stderr', file=sys.stderr)\n")


def test_it_gives_what_a_new_interpreter_gives(tmp_path):
    env = {**os.environ, "FORKED_X": "7", "OMP_NUM_THREADS": "1"}
    want = subprocess.run([sys.executable, "-c", CODE, "a", "b c"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=CHILD_S)
    got = python_c(CODE, "a", "b c", env=env, cwd=tmp_path, timeout=CHILD_S)
    assert (got.returncode, got.stdout, got.stderr) == (0, want.stdout, want.stderr)
    assert got.stdout.split()[-2:] == ["False", "__main__"]  # attnlab fresh, as a program


@pytest.mark.parametrize("code,status,err", [
    ("raise SystemExit(3)", 3, ""), ("1 / 0", 1, "ZeroDivisionError"),
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -9, "")])
def test_exit_statuses_and_tracebacks_are_the_interpreters(code, status, err):
    got = python_c(code, timeout=CHILD_S)
    assert got.returncode == status and err in got.stderr


def test_a_child_past_its_timeout_is_killed_and_the_next_one_runs():
    with pytest.raises(subprocess.TimeoutExpired):
        python_c("import time; time.sleep(60)", timeout=0.5)
    assert python_c("print('next')", timeout=CHILD_S).stdout == "next\n"
