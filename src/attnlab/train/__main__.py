"""``python -m attnlab.train`` and ``torchrun --nproc_per_node=N -m attnlab.train``.

The same arguments as ``attnlab train`` (one argument builder serves both); bad input is
one line on stderr and exit code 2 (``ATTNLAB_DEBUG=1`` shows the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from attnlab.train.config import add_arguments

    parser = add_arguments(argparse.ArgumentParser(
        prog="python -m attnlab.train",
        description="Train a tiny attnlab GPT on a synthetic task (torchrun-aware)."))
    args = parser.parse_args(argv)
    from attnlab.train.trainer import run_from_args

    try:
        result = run_from_args(args)
    except (ValueError, TypeError, OSError) as exc:
        if os.environ.get("ATTNLAB_DEBUG"):  # the full traceback, for bug reports
            raise
        print(f"attnlab.train: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    if args.json and _rank() == 0:
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
    return 0


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


if __name__ == "__main__":
    raise SystemExit(main())
