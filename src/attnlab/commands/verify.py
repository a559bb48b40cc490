"""Compute every claim of the articles on real numbers (qk-variance, softmax-saturation, ...),
print measured vs expected and the verdict. A claim the numbers refute, as its experiment
expected, is a finding (exit 0); a verdict other than the one expected is a defect (exit 1).
"""

from __future__ import annotations

import argparse

__all__ = ["HELP", "add_arguments", "run_from_args"]

HELP = "run the mathematical experiments and check each against the theory"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--only", action="append", default=None, metavar="NAME",
                   help="run only this experiment (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--json", action="store_true",
                   help="print only a JSON list of results on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress output")


def _verdict(r) -> str:
    """A result's verdict cell, with the checks that failed."""
    failed = [c.name for c in r.checks if not c.passed]
    if r.finding:
        mark = "[yellow]does not hold — finding[/]"
    elif r.passed:
        mark = f"[green]{r.verdict}[/]"
    else:
        mark = (f"[red]DEFECT: {r.verdict}, expected "
                f"{'holds' if r.expect_holds else 'does not hold'}[/]")
    if failed:
        colour = "yellow" if r.finding else "red"
        mark += f" [{colour}]({'; '.join(failed)})[/]"
    return mark


def _print_results(results: list) -> None:
    """The results as a rich table on stdout, then each finding's reason."""
    from rich.console import Console
    from rich.table import Table

    from attnlab.experiments._result import fmt_num

    table = Table(title="attnlab verify")
    for col in ("name", "origin", "measured", "expected", "control", "verdict", "s"):
        table.add_column(col, justify="right" if col in ("measured", "expected", "s")
                         else "left")
    for r in results:
        c = r.control
        control = ("—" if c is None else
                   f"{c.what}: {fmt_num(c.measured)} "
                   f"({'[red]passes too[/]' if c.holds else 'fails'})")
        table.add_row(r.name, r.origin, fmt_num(r.measured), r.expected_text, control,
                      _verdict(r), f"{r.seconds:.1f}")
    import sys

    # a terminal wraps the table to its width; piped output keeps each verdict on one line
    out = Console() if sys.stdout.isatty() else Console(width=200)
    out.print(table)
    for r in results:
        if r.finding:
            out.print(f"[yellow]finding[/] {r.name}: {r.expect_why}")


def run_from_args(args: argparse.Namespace) -> int:
    from attnlab._cli import UsageError, emit_json
    from attnlab.experiments import EXPERIMENTS, run_all

    unknown = [n for n in args.only or [] if n not in EXPERIMENTS]
    if unknown:
        raise UsageError(f"--only: unknown experiment {', '.join(map(repr, unknown))}; "
                         f"valid names: {', '.join(EXPERIMENTS)}")
    results = run_all(args.only, seed=args.seed, quiet=args.quiet or args.json)
    if args.json:
        emit_json([r.to_json() for r in results])
    else:
        _print_results(results)
    return 0 if all(r.passed for r in results) else 1
