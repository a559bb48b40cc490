"""Run one named attnlab function in a fresh Python process and get its JSON result back.

Some measurements need a process of their own: the peak resident memory of one call is
only meaningful in a process that has done nothing else. :func:`call_isolated` starts
``python -m attnlab._proc``, which reads ``{"target": "module:function", "kwargs": {...}}``
on stdin, imports the module, calls the function with the keyword arguments, and writes its
return value as one JSON line on stdout. Targets must live inside attnlab. Also the
process's resources: its peak memory, its load, torch's threads for a block
(:func:`torch_threads`). Depends on nothing.

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
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

from attnlab._errors import Error

__all__ = ["IsolatedCallError", "call_forked", "call_isolated", "echo", "in_fresh_process",
           "load_average", "passive_waits", "peak_rss_bytes", "release_memory",
           "reset_peak_rss", "run_as_program", "torch_threads"]


class IsolatedCallError(Error, RuntimeError):
    """The isolated call failed; ``reason`` says how (the exit status or signal and the last
    line of its stderr, or the timeout)."""

    def __init__(self, target: str, reason: str) -> None:
        super().__init__(f"{target} failed in its own process: {reason}")
        self.reason = reason


def echo(value: Any, after: float = 0.0) -> Any:
    """Returns ``value``, ``after`` seconds from now: the smallest target, for checking the
    helper itself (``after``: a call still running when its timeout comes, whatever the
    machine's load)."""
    if after:
        time.sleep(after)
    return value


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Run the block on ``threads`` of torch's intra-op threads, then restore the count
    this process had.

    >>> import torch
    >>> before = torch.get_num_threads()
    >>> with torch_threads(1):
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads() == before
    True
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def passive_waits() -> bool:
    """Have OpenMP's threads (torch's intra-op threads) sleep when they wait for work, as
    ``OMP_WAIT_POLICY=PASSIVE`` says, unless the environment names a policy already: for a
    program that runs several processes on the same cores, where a thread that spins
    waiting holds a core another process's work needs. Set in the environment, so the
    processes this one starts inherit it; this process's own threads follow it when torch
    is not imported yet (OpenMP reads it as torch loads). Returns whether they do.

    ``attnlab report`` runs its long parts on every thread while two processes beside them
    run the others (:mod:`attnlab.report._lanes`): there the spinning threads cost 10 % of
    its CPU (a 2-core AMD EPYC: 6 min 12 s and 520 s of user CPU with them sleeping, against
    6 min 51-54 s and 566-587 s spinning, its claims part 230 s against 305-315 s).
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return "torch" not in sys.modules and os.environ["OMP_WAIT_POLICY"].upper() == "PASSIVE"


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


def run_as_program(main: Callable[[], Any]) -> NoReturn:
    """``raise SystemExit(main())``, the entry point of a program: with every object alive
    when ``main`` ends (returning or raising) frozen first (:func:`gc.freeze`), so that the
    interpreter's exit, which then runs as always (the threads it waits for, the
    :mod:`atexit` functions, each module torn down, the streams flushed), does not walk
    them all once more looking for cycles.

    A program that imported torch spends 0.6-0.9 s of CPU on that walk when it exits (1.2 s
    with transformers and a model class; the whole teardown then takes 0.15 s), measured on
    a 2-core Xeon: `attnlab diagnose` on MiniLM 5.2 -> 4.3 s. What it leaves undone: the
    garbage in reference cycles at that moment is not collected at the exit (Python does
    not promise to finalize it then).
    """
    import gc

    try:
        raise SystemExit(main())
    finally:
        gc.freeze()


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


def _forked(target: str, kwargs: dict[str, Any], env: dict[str, str], conn: Any) -> None:
    """In the forked child: the environment, the peak memory from here, the call, and its
    JSON result (or its error) through ``conn``."""
    os.environ.update(env)
    reset_peak_rss()
    try:
        result = json.dumps(_resolve(target)(**kwargs))
    except BaseException as exc:  # the parent reports it; the child's exit status says 1
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        raise SystemExit(1) from None
    conn.send(("result", result))


_SERVER: dict[str, Any] = {}  # the preload the forkserver was started with, and its context


def _forkserver(preload: Sequence[str], env: dict[str, str]) -> Any:
    """multiprocessing's ``forkserver`` context, its server started once with ``preload``
    imported and ``env`` in its environment (None where this platform has none)."""
    import multiprocessing

    if "context" not in _SERVER:
        try:
            context = multiprocessing.get_context("forkserver")
        except ValueError:
            return None
        context.set_forkserver_preload(list(preload))
        saved = dict(os.environ)
        os.environ.update(env)  # the server's environment is this one when it starts
        try:
            from multiprocessing import forkserver

            forkserver.ensure_running()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        _SERVER.update(context=context, preload=tuple(preload))
    return _SERVER["context"]


def call_forked(target: str, *, preload: Sequence[str], timeout: float = 3600,
                env: dict[str, str] | None = None, **kwargs: Any) -> Any:
    """``target(**kwargs)`` (arguments and result: JSON) in a new process forked from a
    server that imported the modules of ``preload`` once (multiprocessing's
    ``forkserver``): what :func:`call_isolated` does, without starting Python and importing
    torch for every call. The child's peak resident set is reset when it starts
    (:func:`reset_peak_rss`), so :func:`peak_rss_bytes` measures it from a process that
    has done nothing but those imports, as a fresh one would have after them. Where there
    is no forkserver, :func:`call_isolated` runs it.

    The server starts on the first call, with the first call's ``preload`` and ``env``;
    ``env`` is also set in each child. Raises :class:`IsolatedCallError` when the child
    fails (its exception, exit status or signal) or runs past ``timeout`` seconds.
    """
    if not isinstance(target, str) or ":" not in target or not target.startswith("attnlab."):
        raise ValueError(f"target must be 'attnlab.module:function', got {target!r}")
    env = dict(env or {})
    context = _forkserver(preload, env)
    if context is None:
        return call_isolated(target, timeout=timeout, env=env, **kwargs)
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_forked, args=(target, kwargs, env, send), daemon=True)
    child.start()
    send.close()
    if not receive.poll(timeout):  # neither an answer nor the child's end in time
        child.kill()
        child.join()
        raise IsolatedCallError(target, f"stopped after the {timeout:.0f} s timeout")
    try:
        message = receive.recv()
    except EOFError:  # the child died before it answered
        message = None
    child.join()
    if message is not None and message[0] == "result":
        return json.loads(message[1])
    code = child.exitcode or 0
    why = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
    raise IsolatedCallError(target, f"{why}: {message[1][:300] if message else 'no answer'}")


def _main() -> None:
    request = json.loads(sys.stdin.read())
    result = _resolve(request["target"])(**request["kwargs"])
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    run_as_program(_main)
