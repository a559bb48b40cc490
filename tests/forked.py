"""``python -c CODE`` in a new process that starts with torch already imported.

A test that needs attnlab fresh (nothing of it imported, its kernel not loaded, its
environment variables read anew) starts a process; starting Python and importing torch
is most of such a process's time (about 1.5 s of CPU, on each of them). :func:`python_c`
runs the code in a process forked from a server that has imported torch and nothing of
attnlab, once per test process: the child takes the environment, folder and arguments it
is given (the environment replaced whole, torch's thread count set from its
``OMP_NUM_THREADS``), then runs the code as ``python -c`` runs it, as ``__main__``, its
output in files of its own and its exit status (or signal) what the caller gets back.

What differs from a new interpreter: torch is imported before the environment is set, so
what torch reads from the environment at import (its threads' variables aside) is the
server's; ``PYTHONPATH`` is not read (``sys.path`` is the server's); and the child's
objects are frozen before it exits (``gc.freeze``, as ``attnlab._proc.run_as_program``
does), so cycles left at its end are not collected. The tests that use it need none of
these.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = ["python_c"]

# the server: one request per line on stdin; for each, a fork, the child's pid, then its
# exit status (as subprocess gives it: minus the signal's number for a signal); the child
# leaves the loop and runs the request as the main program
_SERVER = r"""
import json, os, sys
import torch

def _serve():
    while line := sys.stdin.readline():
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            return request
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)
    __import__("gc").freeze()  # as a child ends (below)
    raise SystemExit(0)

_request = _serve()
del _serve
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.dup2(os.open(_request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
os.dup2(os.open(_request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
sys.stdin = open(0, closefd=False)
os.environ.clear()
os.environ.update(_request["env"])
if "OMP_NUM_THREADS" in os.environ:
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
os.chdir(_request["cwd"])
sys.argv = ["-c", *_request["args"]]
import types
_main = types.ModuleType("__main__")
_code = compile(_request["code"], "<string>", "exec")
sys.modules["__main__"] = _main
del _null, _request, types
# the objects alive at the end frozen (gc.freeze): the interpreter's exit then does not
# walk every object torch brought in (half a second of a short child's CPU)
try:
    exec(_code, _main.__dict__)
finally:
    __import__("gc").freeze()
"""

_server: subprocess.Popen | None = None
_pending = bytearray()  # what the server wrote past the last line read


def _started() -> subprocess.Popen:
    global _server
    if _server is None or _server.poll() is not None:
        _server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, bufsize=0)
        _pending.clear()
        atexit.register(_stop, _server)
    return _server


def _stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.stdin.close()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _line(server: subprocess.Popen, timeout: float | None) -> dict | None:
    """The server's next line, or None when ``timeout`` seconds pass first."""
    fd = server.stdout.fileno()
    deadline = None if timeout is None else time.monotonic() + timeout
    while b"\n" not in _pending:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            raise RuntimeError(f"the forking server ended (exit status {server.wait()})")
        _pending.extend(chunk)
    end = _pending.index(b"\n") + 1
    line = bytes(_pending[:end])
    del _pending[:end]
    return json.loads(line)


def python_c(code: str, *args: str, env: Mapping[str, str] | None = None,
             cwd: str | Path | None = None, timeout: float) -> subprocess.CompletedProcess:
    """What ``subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=cwd,
    capture_output=True, text=True, timeout=timeout)`` returns, the code run in a process
    forked from one that imported torch (the module's docstring says what differs); raises
    :class:`subprocess.TimeoutExpired` after killing the process, as ``run`` does.
    """
    server = _started()
    with tempfile.TemporaryDirectory(prefix="attnlab-forked-") as tmp:
        out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
        request = {"code": code, "args": [str(a) for a in args],
                   "env": dict(os.environ if env is None else env),
                   "cwd": str(cwd if cwd is not None else os.getcwd()),
                   "stdout": str(out), "stderr": str(err)}
        server.stdin.write(json.dumps(request).encode() + b"\n")
        pid = _line(server, None)["pid"]
        done = _line(server, timeout)
        if done is None:
            os.kill(pid, signal.SIGKILL)
            _line(server, None)
            raise subprocess.TimeoutExpired([sys.executable, "-c", code, *args], timeout,
                                            out.read_text(errors="replace"),
                                            err.read_text(errors="replace"))
        return subprocess.CompletedProcess([sys.executable, "-c", code, *args],
                                           done["returncode"], out.read_text(),
                                           err.read_text())
