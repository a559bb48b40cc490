"""Report parts for the two-process build's tests (this module is on the test path, so a
spawned process imports it too): each says where it ran, on how many threads, at what
priority."""

from __future__ import annotations

import os

from attnlab.report.html import ReportContext, Section


def _where(name: str, ctx: ReportContext) -> Section:
    import torch

    ctx.log(f"{name} says hello from {os.getpid()}")
    return Section(name, name.upper(), name, f"{os.getpid()} {torch.get_num_threads()} "
                   f"{os.nice(0)}", passed=True)


def _wait_for(path, what: str) -> None:
    import time

    for _ in range(6000):
        if path.is_file():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} never came")


def first(ctx: ReportContext) -> Section:
    (ctx.out_dir / "first.started").write_text("")
    return _where("first", ctx)


def first_waits_for_last(ctx: ReportContext) -> Section:
    """``first``, built only once ``last`` is (a part beside still running when the parts
    here are done)."""
    (ctx.out_dir / "first.started").write_text("")
    _wait_for(ctx.out_dir / "last.done", "the last part")
    return _where("first", ctx)


def long_part(ctx: ReportContext) -> Section:
    """Built once ``first`` has started (with two processes: beside, as the process there
    takes the parts from the first)."""
    _wait_for(ctx.out_dir / "first.started", "the first part")
    return _where("long", ctx)


def attribution_part(ctx: ReportContext) -> list[Section]:
    """Two sections; what its work started ahead returned (if it was) in ``ahead.txt``."""
    from attnlab.report._lanes import ahead_key

    work = ctx.cache.pop(ahead_key("attribution"), None)
    if work is not None:
        (ctx.out_dir / "ahead.txt").write_text(work())
    return [_where("attribution", ctx), _where("attribution-2", ctx)]


def ahead(seed: int) -> str:
    """Work ahead: where it ran, on how many threads, at what priority, and the seed."""
    import torch

    return f"{os.getpid()} {torch.get_num_threads()} {os.nice(0)} {seed}"


def slow_ahead(seed: int) -> str:
    """Work ahead that says its pid (``ahead.pid`` in ``$LANES_PARTS_DIR``), then takes
    minutes."""
    import time
    from pathlib import Path

    (Path(os.environ["LANES_PARTS_DIR"]) / "ahead.pid").write_text(str(os.getpid()))
    time.sleep(600)
    return "never"


def last(ctx: ReportContext) -> Section:
    section = _where("last", ctx)
    (ctx.out_dir / "last.done").write_text("")
    return section


def broken(ctx: ReportContext) -> Section:
    raise ArithmeticError("this part fails on purpose")


def slow(ctx: ReportContext) -> Section:
    """A part beside that says its pid (``slow.pid`` in the report's folder), then takes
    minutes."""
    import time

    (ctx.out_dir / "slow.pid").write_text(str(os.getpid()))
    time.sleep(600)
    return _where("slow", ctx)


def broken_once_slow_runs(ctx: ReportContext) -> Section:
    """A part here that fails once the slow part beside (and the slow work ahead, when
    ``$LANES_PARTS_DIR`` is set) has started."""
    import time

    for _ in range(600):
        if (ctx.out_dir / "slow.pid").is_file() and (
                "LANES_PARTS_DIR" not in os.environ
                or (ctx.out_dir / "ahead.pid").is_file()):
            break
        time.sleep(0.1)
    raise ArithmeticError("this part fails on purpose, the slow part running beside it")


def waits(ctx: ReportContext) -> Section:
    """A part here that takes minutes (and says nothing)."""
    import time

    time.sleep(600)
    return _where("waits", ctx)
