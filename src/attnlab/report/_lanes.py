"""The report's parts in two processes: the long text's parts here, the others beside them.

Most of the report's arithmetic is in two parts, ``long-contexts`` and ``attribution``
(:data:`MAIN_PARTS`): they run SmolLM2 over the long text, share its trace, and use every
thread of this process. The other parts are many small computations, most of them on one
thread at a time; :func:`build_beside` runs them in a second process, started fresh
(``spawn``), on one thread and at a lower priority (``nice`` :data:`SIDE_NICE`), so that
the long parts keep the cores they use and the other parts fill the cycles they leave.
What each part computes is unchanged; only the wall clock of the whole report shrinks.

The second process says what it is doing through a queue that a thread of this one reads
into the progress display, and returns its sections (plain data) when it is done; an error
in one of its parts is raised here, as it would be in one process.

The parts beside are taken in page order by the second process, and from the end by this
one once its own parts are built (:meth:`Beside.take_last`; on one thread, as beside), so
that neither process waits idle while the other has parts left; parts that share results
(:data:`TOGETHER`) are taken together.

A part here may also have work that needs nothing the report makes before it (:data:`AHEAD`:
attribution's ablation study, a model's forwards on the first 512 tokens): with two
processes it starts in a third one as the report starts (:func:`start_ahead`; one thread,
the lower priority), so that it runs while the long text's curve leaves a core idle, and the
part reads its result when it needs it (``ctx.cache[key]``, a callable that waits for it).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from attnlab.report.html import ReportContext, Section

__all__ = ["AHEAD", "MAIN_PARTS", "SIDE_NICE", "TOGETHER", "Ahead", "Beside", "ahead_key",
           "build_beside", "build_part", "lanes_for", "load_provider", "start_ahead", "units_of"]

#: The parts that stay in the report's own process (every thread) when it builds in two.
MAIN_PARTS = ("long-contexts", "attribution")
#: How much lower the second process's priority is (``os.nice``): the long parts first.
SIDE_NICE = 10
_DONE = "\x00done"  # the queue's message that one part of the second process is built
#: A main part -> the ``"module:function"`` of its work started ahead (called with the
#: report's seed, returning plain data), read by the part at ``ctx.cache[ahead_key(part)]``.
AHEAD = {"attribution": "attnlab.report.attribution:ablation_ahead"}
#: Section builders (``"module:function"``) that share results through ``ctx.cache``: built
#: by one process, in the order given (the experiments' sections read the claims' results).
TOGETHER = (("attnlab.report.claims:build", "attnlab.report.experiments:build"),)


def units_of(specs: Sequence[str]) -> list[list[str]]:
    """``specs`` cut into what one process builds at a time: each alone, except those of a
    :data:`TOGETHER` group, which go together at the first one's place.

    >>> units_of(["attnlab.report.claims:build", "p:parity", "attnlab.report.experiments:build",
    ...           "p:survey"])  # doctest: +NORMALIZE_WHITESPACE
    [['attnlab.report.claims:build', 'attnlab.report.experiments:build'], ['p:parity'],
     ['p:survey']]
    """
    units: list[list[str]] = []
    placed: dict[str, list[str]] = {}
    for spec in specs:
        group = next((g for g in TOGETHER if spec in g), None)
        if group is None:
            units.append([spec])
        elif group[0] in placed:
            placed[group[0]].append(spec)
        else:
            placed[group[0]] = [spec]
            units.append(placed[group[0]])
    return units


def ahead_key(part: str) -> str:
    """Where ``ctx.cache`` holds the part's work started ahead (a callable that waits for
    its result).

    >>> ahead_key("attribution")
    'attribution: ahead'
    """
    return f"{part}: ahead"


def lanes_for(keys: Sequence[str], processes: int) -> tuple[list[str], list[str]]:
    """The parts this process builds and those a second one builds beside it, each in page
    order: all here with one process, or where either side would be empty.

    >>> lanes_for(["claims", "long-contexts", "attribution", "survey"], 2)
    (['long-contexts', 'attribution'], ['claims', 'survey'])
    >>> lanes_for(["claims", "survey"], 2)
    (['claims', 'survey'], [])
    >>> lanes_for(["claims", "attribution"], 1)
    (['claims', 'attribution'], [])
    """
    main = [k for k in keys if k in MAIN_PARTS]
    side = [k for k in keys if k not in MAIN_PARTS]
    if processes < 2 or not main or not side:
        return list(keys), []
    return main, side


def load_provider(spec: str) -> Callable[..., Any]:
    """The section builder a ``"module:function"`` string names, its module imported."""
    import importlib

    module, _, func = spec.partition(":")
    builder: Callable[..., Any] = getattr(importlib.import_module(module), func)
    return builder


def build_part(provider: Callable[[ReportContext], Any], ctx: ReportContext,
               clock: Callable[[], float]) -> list[Section]:
    """One part's sections, each with the seconds the part took (and how many sections
    shared them)."""
    t0 = clock()
    result = provider(ctx)
    built = result if isinstance(result, list) else [result]
    for s in built:
        s.seconds, s.seconds_shared = clock() - t0, len(built)
    return built


_QUEUE: Any = None  # the second process's queue to the first (set by _side_start)
_NEXT: Any = None  # the units' shared [first untaken, one past the last untaken] (_side_start)


def _end_with_parent(parent: int) -> None:
    """Have the kernel end this process when the report's process ends (Linux's
    ``PR_SET_PDEATHSIG``), so that a report killed does not leave its helpers running; if
    it has already ended, end now."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # (no prctl to call: the helper ends with its work)
        return
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def _helper_start(parent: int) -> None:
    """A helper process's start: it ends with the report, runs torch on one thread and at
    the lower priority :data:`SIDE_NICE` (the long parts keep the cores they use)."""
    _end_with_parent(parent)
    import torch

    torch.set_num_threads(1)
    try:
        os.nice(SIDE_NICE)
    except OSError:  # a priority this process may not lower: its work still runs
        pass


def _side_start(queue: Any, parent: int, untaken: Any) -> None:
    """The second process's start: one thread, a lower priority, its messages queued."""
    _helper_start(parent)
    global _QUEUE, _NEXT
    _QUEUE, _NEXT = queue, untaken


def _take(untaken: Any, last: bool) -> int | None:
    """The index of the first (or last) unit no process has taken, now taken; None when
    every unit is."""
    with untaken.get_lock():
        if untaken[0] >= untaken[1]:
            return None
        if last:
            untaken[1] -= 1
            return int(untaken[1])
        untaken[0] += 1
        return int(untaken[0]) - 1


def _side_build(units: list[list[str]], out_dir: str, seed: int
                ) -> list[tuple[str, list[Section]]]:
    """In the second process: build the units (lists of ``"module:function"``) in order,
    each one no process has taken yet; (spec, its sections) for each part built."""
    import time

    ctx = ReportContext(out_dir=Path(out_dir), quiet=True, seed=seed, say=_QUEUE.put)
    built = []
    while (i := _take(_NEXT, last=False)) is not None:
        for spec in units[i]:
            built.append((spec, build_part(load_provider(spec), ctx, time.perf_counter)))
            _QUEUE.put(_DONE)
    _last_task_done()
    return built


def _last_task_done() -> None:
    """In a helper process whose one task is done (its pool's only one; the process ends
    once its result is sent): every object it holds frozen (``gc.freeze``), so that its
    exit, which the report waits for, does not walk them all looking for cycles (as
    :func:`attnlab._proc.run_as_program` does for the report's own process)."""
    import gc

    gc.freeze()


class Beside:
    """The parts being built in the second process (:func:`build_beside`)."""

    def __init__(self, pool: ProcessPoolExecutor,
                 future: Future[list[tuple[str, list[Section]]]], reader: threading.Thread,
                 queue: Any, units: list[list[str]], untaken: Any) -> None:
        self._pool, self._future, self._reader, self._queue = pool, future, reader, queue
        self._units, self._untaken = units, untaken

    def take_last(self) -> list[str] | None:
        """The last unit (its specs, in order) the second process has not taken, now taken
        for this process to build; None when none is left."""
        i = _take(self._untaken, last=True)
        return None if i is None else self._units[i]

    def result(self) -> list[tuple[str, list[Section]]]:
        """(spec, its sections) of each part the second process built, in the order it
        built them, once it is done (its error raised here)."""
        try:
            return self._future.result()
        finally:
            self._end()

    def stop(self) -> None:
        """End the second process now, its parts unfinished (a part here failed)."""
        for process in list(getattr(self._pool, "_processes", {}).values()):
            process.terminate()
        self._end(wait=False)

    def _end(self, wait: bool = True) -> None:
        self._queue.put(None)  # the reader's end
        self._reader.join()
        self._pool.shutdown(wait=wait, cancel_futures=True)


def build_beside(specs: list[str], out_dir: Path, seed: int, *, log: Callable[[str], Any],
                 part_done: Callable[[], Any]) -> Beside:
    """Start building ``specs`` (``"module:function"``, in order, cut by :func:`units_of`)
    in a second process, which takes them from the first while this one may take them
    from the last (:meth:`Beside.take_last`); what it says goes to ``log``, and
    ``part_done`` is called as each of its parts is built."""
    context = multiprocessing.get_context("spawn")
    queue = context.SimpleQueue()
    units = units_of(specs)
    untaken = context.Array("i", [0, len(units)])
    pool = ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=_side_start,
                               initargs=(queue, os.getpid(), untaken))
    future = pool.submit(_side_build, units, str(out_dir), seed)

    def read() -> None:
        while (message := queue.get()) is not None:
            if message == _DONE:
                part_done()
            else:
                log(message)

    reader = threading.Thread(target=read, name="attnlab-report-beside", daemon=True)
    reader.start()
    return Beside(pool, future, reader, queue, units, untaken)


def _ahead_call(spec: str, seed: int) -> Any:
    result = load_provider(spec)(seed)
    _last_task_done()
    return result


class Ahead:
    """One part's work started ahead in its own process (:func:`start_ahead`)."""

    def __init__(self, pool: ProcessPoolExecutor, future: Future[Any]) -> None:
        self._pool, self._future = pool, future

    def result(self) -> Any:
        """What the work returned, once it is done (its error raised here)."""
        try:
            return self._future.result()
        finally:
            self.stop()

    def stop(self) -> None:
        """End the process (at once, if the work is not done: nothing will read it)."""
        if not self._future.done():
            for process in list(getattr(self._pool, "_processes", {}).values()):
                process.terminate()
        self._pool.shutdown(wait=self._future.done(), cancel_futures=True)


def start_ahead(keys: Sequence[str], seed: int) -> dict[str, Ahead]:
    """Start the work of :data:`AHEAD` of each of ``keys`` (the parts built here), each in
    a fresh process (``spawn``): :func:`ahead_key` of the part -> its :class:`Ahead`."""
    context = multiprocessing.get_context("spawn")
    out = {}
    for key in keys:
        if key in AHEAD:
            # one thread at the lower priority, as the parts beside: the work fills the
            # cycles the long parts leave while the curve runs, and its time is not theirs
            pool = ProcessPoolExecutor(max_workers=1, mp_context=context,
                                       initializer=_helper_start, initargs=(os.getpid(),))
            out[ahead_key(key)] = Ahead(pool, pool.submit(_ahead_call, AHEAD[key], seed))
    return out
