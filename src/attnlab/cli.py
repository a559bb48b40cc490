"""The ``attnlab`` command. Thin: it parses arguments and calls the library.

Each subcommand is one ``@_command`` function that adds its parser and sets ``func``;
``python -m attnlab`` is the same program.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

_REGISTRY: list[Callable[[argparse._SubParsersAction], None]] = []


def _command(add: Callable[[argparse._SubParsersAction], None]):
    _REGISTRY.append(add)
    return add


def _emit_json(obj: object) -> None:
    """Machine-readable output: alone on stdout, nothing else mixed in."""
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False) + "\n")


class UsageError(Exception):
    """A bad command-line value: printed as one line, exit code 2."""


# --------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------


@_command
def _report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="run every check and write a self-contained HTML report",
        description="Compute the parity checks and experiments, and write DIR/index.html "
        "(self-contained: no network request of any kind).",
    )
    p.add_argument("--out", default="report", help="output directory (default: report)")
    p.add_argument("--only", action="append", default=None, metavar="SECTION",
                   help="build only this section (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")

    def run(args: argparse.Namespace) -> int:
        from attnlab.report import build_report

        result = build_report(args.out, only=args.only, quiet=args.quiet or args.json)
        if args.json:
            _emit_json(result.to_json())
        return 0 if result.passed else 1

    p.set_defaults(func=run)


# -- subcommands above this line; each registers itself with @_command -------------------


def build_parser() -> argparse.ArgumentParser:
    from attnlab import __version__

    parser = argparse.ArgumentParser(
        prog="attnlab",
        description="attnlab, the attention laboratory: exact attention, every claim checked.",
    )
    parser.add_argument("--version", action="version", version=f"attnlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in _REGISTRY:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"attnlab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, FileNotFoundError) as exc:
        print(f"attnlab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
