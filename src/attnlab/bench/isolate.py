"""Run one named function in a fresh Python process and get its JSON result back.

Some measurements need a process of their own: the peak resident memory of one call is
only meaningful in a process that has done nothing else. :func:`call_isolated` starts
``python -m attnlab.bench.isolate``, which reads ``{"target": "module:function", "kwargs":
{...}}`` on stdin, imports the module, calls the function with the keyword arguments, and
writes its return value as one JSON line on stdout. Targets must live inside attnlab.

>>> call_isolated("attnlab.bench.isolate:echo", value=[1, "a"])
[1, 'a']
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from typing import Any

__all__ = ["IsolatedCallError", "call_isolated", "echo"]


class IsolatedCallError(RuntimeError):
    """The isolated call failed; the message holds the last line of its stderr."""


def echo(value: Any) -> Any:
    """Returns ``value``: the smallest target, for checking the helper itself."""
    return value


def _resolve(target: str) -> Any:
    module, _, func = target.partition(":")
    if not module.startswith("attnlab.") or not func:
        raise ValueError(f"target must be 'attnlab.module:function', got {target!r}")
    return getattr(importlib.import_module(module), func)


def call_isolated(target: str, *, timeout: float = 3600, **kwargs: Any) -> Any:
    """``target(**kwargs)`` run in a fresh interpreter (arguments and result: JSON)."""
    if not isinstance(target, str) or ":" not in target or not target.startswith("attnlab."):
        raise ValueError(f"target must be 'attnlab.module:function', got {target!r}")
    proc = subprocess.run(
        [sys.executable, "-m", "attnlab.bench.isolate"],
        input=json.dumps({"target": target, "kwargs": kwargs}),
        capture_output=True, text=True, timeout=timeout,
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no error output"])[-1]
        raise IsolatedCallError(f"{target} failed in its own process: {last}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _main() -> None:
    request = json.loads(sys.stdin.read())
    result = _resolve(request["target"])(**request["kwargs"])
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    _main()
