"""The ``attnlab`` command. Thin: it builds the parser from the commands and dispatches.

Each command is one module (:mod:`attnlab.commands`, and :mod:`attnlab.train.command`)
whose docstring is the command's description, with ``HELP`` (its line in ``attnlab
--help``), ``add_arguments(parser)`` and ``run_from_args(args) -> int``. Bad input is one
line on stderr and exit code 2, naming the argument and the cause (a model folder that
cannot be read, an ``--out`` that cannot be written, a text too long for the memory
budget, ...); set ``ATTNLAB_DEBUG=1`` for the traceback.
``python -m attnlab`` is the same program. As a program (the ``attnlab`` script,
``python -m attnlab``) it freezes its objects before it exits
(:func:`attnlab._proc.run_as_program`: most of a second of CPU less per command).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn

from attnlab._cli import UsageError, run_command
from attnlab._proc import run_as_program
from attnlab.commands import (
    attribute,
    bench,
    claims,
    diagnose,
    explore,
    plot,
    report,
    serve,
    support,
    survey,
    trace,
    verify,
)
from attnlab.train import command as train

__all__ = ["COMMANDS", "UsageError", "build_parser", "main", "program"]

#: Every command by name, in the order ``attnlab --help`` lists them.
COMMANDS = {"report": report, "explore": explore, "serve": serve, "trace": trace,
            "plot": plot, "diagnose": diagnose, "train": train, "verify": verify,
            "claims": claims, "bench": bench, "survey": survey, "support": support,
            "attribute": attribute}


def _version() -> str:
    """The installed distribution's version (the root package is not imported here)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attnlab")
    except PackageNotFoundError:  # pragma: no cover (running from a bare source tree)
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnlab",
        description="attnlab, the attention laboratory: exact attention, every claim checked.",
    )
    parser.add_argument("--version", action="version", version=f"attnlab {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.HELP, description=command.__doc__)
        command.add_arguments(p)
        p.set_defaults(func=command.run_from_args)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``attnlab`` command; every expected failure is one line on stderr, exit 2."""
    return run_command(build_parser(), argv, name=lambda args: f"attnlab {args.command}")


def program() -> NoReturn:
    """The ``attnlab`` program: :func:`main` on the command line's arguments, its exit
    status the process's (:func:`attnlab._proc.run_as_program`)."""
    run_as_program(main)


if __name__ == "__main__":  # pragma: no cover
    program()
