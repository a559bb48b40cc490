"""The support matrix: every model family of the installed transformers; each text decoder,
encoder and encoder-decoder is built as a tiny random model and its trace (encoder, decoder
and cross-attention stacks apart) checked against the model's own eager attention (exact,
refused with the reason, no attention, not built); other kinds are listed as not yet. Exit 1
if a family is traced wrongly (a defect).
"""

from __future__ import annotations

import argparse

__all__ = ["HELP", "add_arguments", "run_from_args"]

HELP = "which Hugging Face architecture families attnlab traces exactly"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--family", action="append", default=None, metavar="MODEL_TYPE",
                   help="only this family, e.g. llama (repeatable)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print only JSON on stdout")
    out.add_argument("--markdown", action="store_true",
                     help="print only the matrix as a Markdown table, one row per family "
                          "(docs/support.md)")
    out.add_argument("--summary", action="store_true",
                     help="print only the matrix in brief as Markdown, one row per status "
                          "and kind (the table of docs/families.md)")


def run_from_args(args: argparse.Namespace) -> int:
    import sys

    from attnlab._cli import emit_json
    from attnlab.tracing import support

    results = support.support_matrix(args.family)
    if args.json:
        emit_json(support.to_json(results))
    elif args.markdown:
        sys.stdout.write(support.to_markdown(results))
    elif args.summary:
        sys.stdout.write(support.to_summary(results))
    else:
        for r in results:
            print(f"{r.family:28} {r.kind:16} {r.status:13} {r.detail()}")
        print(", ".join(f"{n} {s}" for s, n in support.counts(results).items() if n))
    return 1 if any(r.status == "wrong" for r in results) else 0
