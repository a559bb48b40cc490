"""The claim inventory: each claim, code listing and recommendation of the two articles with a
verbatim quote, the experiments whose numbers decide it (run now, without figures) and the
verdict they give: holds, holds under stated conditions, does not hold, or not testable
(with the reason). attnlab's own extensions are listed apart. Exit 1 only when an experiment
gives a verdict other than the one it expected (a defect); a claim that does not hold is a
result, exit 0.
"""

from __future__ import annotations

import argparse

__all__ = ["HELP", "add_arguments", "run_from_args"]

HELP = "every claim of the two articles, the experiments that decide it, its verdict"

_COLOUR = {"holds": "green", "holds under stated conditions": "cyan",
           "holds by construction": "blue", "depends on the reading": "magenta",
           "does not hold": "yellow", "not decided here": "red", "not testable": "dim"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--only", action="append", default=None, metavar="ID",
                   help="only this claim, e.g. 001-pe-linear-shift (repeatable): runs only the "
                   "experiments that decide it")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print only JSON on stdout")
    out.add_argument("--markdown", action="store_true",
                     help="print only the inventory as Markdown tables on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress output")


def _print_claims(verdicts: list, extensions: list, results: list) -> None:
    """The inventory as rich tables on stdout, then the verdict counts and any defect."""
    from rich.console import Console
    from rich.table import Table

    from attnlab.experiments.claims import counts

    table = Table(title="attnlab claims", show_lines=True)
    for col in ("id", "quote", "experiments", "verdict", "measured or reason"):
        table.add_column(col, overflow="fold")
    for v in verdicts:
        c = v.claim
        if c.testable:
            note = "\n".join(f"{m.experiment}{' (against)' if m.against else ''}: {m.text()}"
                             for m in v.measurements)
            if c.conditions_en:
                note += f"\nconditions: {c.conditions_en}"
        else:
            note = c.not_testable_en
        table.add_row(c.id, c.quote_zh, "\n".join(c.covered_by) or "—",
                      f"[{_COLOUR[v.verdict]}]{v.verdict}[/]", note)
    out = Console()
    out.print(table)
    if extensions:
        ext = Table(title="attnlab's own extensions (not claims of the articles)")
        for col in ("experiment", "what it adds", "verdict", "measured"):
            ext.add_column(col, overflow="fold")
        for e in extensions:
            ext.add_row(e.extension.experiment, e.extension.what_en, e.verdict,
                        e.measurement.text())
        out.print(ext)
    out.print(", ".join(f"{n} {name}" for name, n in counts(verdicts).items()))
    for r in results:
        if not r.passed:
            out.print(f"[red]DEFECT[/] {r.name}: {r.verdict}, expected "
                      f"{'holds' if r.expect_holds else 'does not hold'}")


def run_from_args(args: argparse.Namespace) -> int:
    import sys

    from attnlab._cli import UsageError, emit_json
    from attnlab.experiments import claims as inventory
    from attnlab.experiments import run_all
    from attnlab.report.claims_markdown import markdown

    try:
        chosen = ([inventory.claim(i) for i in dict.fromkeys(args.only)]
                  if args.only else list(inventory.CLAIMS))
    except ValueError as exc:
        raise UsageError(f"--only: {exc}") from None
    names = inventory.covering_experiments(chosen)
    if not args.only:
        names += [e.experiment for e in inventory.EXTENSIONS if e.experiment not in names]
    results = (run_all(names, seed=args.seed, quiet=args.quiet or args.json or args.markdown)
               if names else [])
    verdicts = inventory.verdicts(results, chosen)
    extensions = inventory.extension_verdicts(results) if not args.only else []
    if args.json:
        emit_json(inventory.to_json(verdicts, extensions))
    elif args.markdown:
        sys.stdout.write(markdown(verdicts, extensions))
    else:
        _print_claims(verdicts, extensions, results)
    return 0 if all(r.passed for r in results) else 1
