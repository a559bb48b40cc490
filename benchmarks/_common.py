"""What several benchmark scripts share: the machine's CPU name and a median timing.

The scripts run as files (``.venv/bin/python benchmarks/NAME.py``), so this folder is the
first entry of ``sys.path`` and they import this module as ``_common``.
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable

__all__ = ["cpu_name", "median_seconds"]


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """The median wall time of ``repeats`` calls of ``fn``, after one call not timed."""
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)
