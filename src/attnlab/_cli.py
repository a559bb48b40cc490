"""What every attnlab command line shares (``attnlab`` and ``python -m attnlab.train``):
the contract with its caller.

* bad input is a :class:`UsageError` (or a ``ValueError``/``TypeError``/``OSError`` from
  the library), printed by :func:`run_command` as one line on stderr with exit code 2
  (``ATTNLAB_DEBUG=1`` re-raises it, for the traceback);
* machine-readable output is :func:`emit_json`, alone on stdout;
* an ``--out`` file is checked before any work (:func:`check_out`) and written through
  :func:`save`, whose ``OSError`` names ``--out``; a text file is read by
  :func:`read_text_file`, naming its argument.

Depends on ``_io`` and ``_text`` only (no torch: ``--help`` stays instant).

>>> check_out("figure.txt", (".png", ".svg"))
Traceback (most recent call last):
...
attnlab._cli.UsageError: --out must name a .png or .svg file, got 'figure.txt'
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

from attnlab._errors import Error
from attnlab._text import one_line

__all__ = ["UsageError", "check_out", "emit_json", "read_text_file", "run_command", "save"]

T = TypeVar("T")


class UsageError(Error):
    """A bad command-line value: printed as one line, exit code 2."""


def emit_json(obj: object) -> None:
    """Machine-readable output: alone on stdout, nothing else mixed in."""
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False) + "\n")


def check_out(path: str, suffixes: tuple[str, ...] = ()) -> None:
    """``--out`` can be written (and ends with one of ``suffixes``), checked before work."""
    from attnlab._io import check_output_file

    if suffixes and not path.lower().endswith(suffixes):
        raise UsageError(f"--out must name a {' or '.join(suffixes)} file, got {path!r}")
    check_output_file(path, arg="--out")


def save(write: Callable[[], T], out: str) -> T:
    """``write()``, with an OSError turned into one line naming ``--out``."""
    try:
        return write()
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write it ({exc.strerror or one_line(exc)})"
                         ) from exc


def read_text_file(path: str, arg: str = "--text-file") -> str:
    """The UTF-8 text of ``path`` (a byte-order mark is dropped); UsageError otherwise."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise UsageError(f"{arg} {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{arg} {path}: is a directory, not a text file") from None
    except OSError as exc:
        raise UsageError(f"{arg} {path}: cannot read it ({exc.strerror})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{arg} {path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at "
                         f"offset {exc.start}); convert it to UTF-8 first, e.g. with "
                         f"iconv -t UTF-8") from None


def run_command(parser: argparse.ArgumentParser, argv: Sequence[str] | None, *,
                name: Callable[[argparse.Namespace], str]) -> int:
    """Parse ``argv``, call the chosen ``func(args) -> int``; every expected failure is one
    line on stderr, ``"<name(args)>: error: <cause>"``, and exit code 2 (130 on Ctrl-C)."""
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (UsageError, ValueError, TypeError, OSError, MemoryError) as exc:
        if os.environ.get("ATTNLAB_DEBUG"):  # the full traceback, for bug reports
            raise
        msg = one_line(exc)
        if isinstance(exc, MemoryError):
            msg = ("ran out of memory; give a shorter text or a lower --max-memory "
                   "(the budget is checked before a model runs)")
        print(f"{name(args)}: error: {msg}", file=sys.stderr)
        return 2
