"""``python -m attnlab.train`` and ``torchrun --nproc_per_node=N -m attnlab.train``.

The same options and run as ``attnlab train`` (:mod:`attnlab.train.command`); bad input is
one line on stderr and exit code 2 (``ATTNLAB_DEBUG=1`` shows the traceback).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from attnlab._cli import run_command
    from attnlab.train import command

    parser = argparse.ArgumentParser(
        prog="python -m attnlab.train",
        description="Train a tiny attnlab GPT on a synthetic task (torchrun-aware).")
    command.add_arguments(parser)
    parser.set_defaults(func=command.run_from_args)
    return run_command(parser, argv, name=lambda _: "attnlab.train")


if __name__ == "__main__":
    from attnlab._proc import run_as_program

    run_as_program(main)  # its objects frozen before the exit
