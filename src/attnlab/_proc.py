"""Run one named attnlab function in a fresh Python process and get its JSON result back.

Some measurements need a process of their own: the peak resident memory of one call is
only meaningful in a process that has done nothing else. :func:`call_isolated` starts
``python -m attnlab._proc``, which reads ``{"target": "module:function", "kwargs": {...}}``
on stdin, imports the module, calls the function with the keyword arguments, and writes its
return value as one JSON line on stdout. Targets must live inside attnlab. Depends on
nothing.

>>> call_isolated("attnlab._proc:echo", value=[1, "a"])
[1, 'a']
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import subprocess
import sys
from typing import Any

from attnlab._errors import Error

__all__ = ["IsolatedCallError", "call_isolated", "echo", "in_fresh_process", "load_average",
           "peak_rss_bytes", "release_memory", "reset_peak_rss"]


class IsolatedCallError(Error, RuntimeError):
    """The isolated call failed; ``reason`` says how (the exit status or signal and the last
    line of its stderr, or the timeout)."""

    def __init__(self, target: str, reason: str) -> None:
        super().__init__(f"{target} failed in its own process: {reason}")
        self.reason = reason


def echo(value: Any) -> Any:
    """Returns ``value``: the smallest target, for checking the helper itself."""
    return value


def peak_rss_bytes() -> int:
    """This process's peak resident set so far, in bytes: its own, since it started.

    On Linux this is ``VmHWM`` of ``/proc/self/status``: ``getrusage``'s ``ru_maxrss``
    survives ``execve`` and starts from the parent's resident set at ``fork``, so a fresh
    interpreter started by a large process would report the parent's peak.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # bytes on macOS, KiB else


def reset_peak_rss() -> bool:
    """Reset this process's peak resident set (``VmHWM``) to its current one, so that
    :func:`peak_rss_bytes` measures from here on: True where it was reset (Linux's
    ``/proc/self/clear_refs``), False where it cannot be (the peak is then an upper bound).
    """
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def load_average() -> str:
    """The machine's load averages as ``/proc/loadavg`` gives them (1, 5 and 15 minutes,
    running/all tasks, last pid), for a measurement to state; ``"unknown"`` where it
    cannot be read."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def in_fresh_process(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` in a fresh interpreter (multiprocessing, spawn), so that its peak
    resident set is its own; ``fn`` must be importable (a module-level function) and its
    arguments and result picklable."""
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
        return pool.apply(fn, args)


def release_memory() -> bool:
    """Hand the heap's freed pages back to the system (glibc's ``malloc_trim(0)``), so that
    the next phase of a long job starts from what is live, not from the previous phase's
    peak; True where it ran (Linux with glibc), False elsewhere (nothing is done).

    PyTorch's CPU tensors come from malloc: after a large transient (a forward pass of
    thousands of tokens) glibc keeps most of the freed memory mapped in its arenas, counted
    in the resident set; trimmed, it is the system's again.
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # musl or another libc: no malloc_trim
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
    return True


def _resolve(target: str) -> Any:
    module, _, func = target.partition(":")
    if not module.startswith("attnlab.") or not func:
        raise ValueError(f"target must be 'attnlab.module:function', got {target!r}")
    return getattr(importlib.import_module(module), func)


def call_isolated(target: str, *, timeout: float = 3600, env: dict[str, str] | None = None,
                  **kwargs: Any) -> Any:
    """``target(**kwargs)`` run in a fresh interpreter (arguments and result: JSON).

    ``env`` adds to (or overrides) this process's environment for the child. Raises
    :class:`IsolatedCallError` when the child fails or runs past ``timeout`` seconds.
    """
    if not isinstance(target, str) or ":" not in target or not target.startswith("attnlab."):
        raise ValueError(f"target must be 'attnlab.module:function', got {target!r}")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "attnlab._proc"],
            input=json.dumps({"target": target, "kwargs": kwargs}),
            env={**os.environ, **(env or {})}, capture_output=True, text=True,
            timeout=timeout, check=False,
        )
    except subprocess.TimeoutExpired:
        raise IsolatedCallError(target, f"stopped after the {timeout:.0f} s timeout") from None
    if proc.returncode != 0:
        why = (f"killed by signal {-proc.returncode}" if proc.returncode < 0
               else f"exit status {proc.returncode}")
        last = (proc.stderr.strip().splitlines() or ["no error output"])[-1]
        raise IsolatedCallError(target, f"{why}: {last[:300]}")
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise IsolatedCallError(target, "it wrote no result")
    return json.loads(lines[-1])


def _main() -> None:
    request = json.loads(sys.stdin.read())
    result = _resolve(request["target"])(**request["kwargs"])
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    _main()
