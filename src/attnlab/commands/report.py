"""Compute the parity checks and experiments, and write DIR/index.html (self-contained: no
network request of any kind).
"""

from __future__ import annotations

import argparse

__all__ = ["HELP", "add_arguments", "run_from_args"]

HELP = "run every check and write a self-contained HTML report"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="report", help="output directory (default: report)")
    p.add_argument("--only", action="append", default=None, metavar="PART",
                   help="build only this part: claims, parity, experiments, explorer, "
                   "real-models, architectures, long-contexts, attribution, survey, trained "
                   "(repeatable)")
    p.add_argument("--processes", type=int, choices=(1, 2), default=None,
                   help="2: the long text's parts in this process and the others in a second "
                   "one beside them; 1: every part in turn (default: 2 on two cores or more)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def run_from_args(args: argparse.Namespace) -> int:
    from attnlab._cli import emit_json
    from attnlab._proc import passive_waits

    # the report's processes share the cores: a thread waiting for work sleeps (before
    # torch loads: OpenMP reads it then)
    passive_waits()
    from attnlab.report import build_report

    result = build_report(args.out, only=args.only, quiet=args.quiet or args.json,
                          processes=args.processes)
    if args.json:
        emit_json(result.to_json())
    return 0 if result.passed else 1
