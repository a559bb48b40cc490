"""Draw one figure of a trace written by `attnlab trace` as PNG or SVG.
"""

from __future__ import annotations

import argparse

__all__ = ["HELP", "KINDS", "add_arguments", "run_from_args"]

HELP = "draw a saved trace: heatmap, grid, arcs, qk or decomposition"

#: attnlab.viz.figures.KINDS, named here so that --help imports no matplotlib (a test
#: keeps the two equal)
KINDS = ("heatmap", "grid", "arcs", "qk", "decomposition")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a trace (.safetensors)")
    p.add_argument("--kind", choices=KINDS, default="heatmap")
    p.add_argument("--layer", type=int, default=0)
    p.add_argument("--head", type=int, default=0)
    p.add_argument("--stack", default=None, metavar="NAME",
                   help="the stack of an encoder–decoder trace: encoder, decoder or cross "
                        "(required for such a trace)")
    p.add_argument("--out", required=True, metavar="PNG_OR_SVG")


def run_from_args(args: argparse.Namespace) -> int:
    from attnlab._cli import UsageError, check_out, save
    from attnlab.commands.model_run import read_saved_trace
    from attnlab.tracing import StackedTrace
    from attnlab.viz.figures import plot, save_figure

    check_out(args.out, (".png", ".svg"))
    t = read_saved_trace(args.file, "FILE")
    if isinstance(t, StackedTrace):
        if args.stack not in t:
            raise UsageError(f"--stack must be one of {', '.join(t.names)} for this "
                             f"encoder–decoder trace, got {args.stack!r}")
        t = t[args.stack]
    elif args.stack is not None and args.stack != t.stack:
        raise UsageError(f"--stack: this trace holds one stack ({t.stack!r}), "
                         f"got {args.stack!r}")
    try:
        fig = plot(t, args.kind, args.layer, args.head)
    except IndexError as exc:
        raise UsageError(str(exc)) from None
    print(save(lambda: save_figure(fig, args.out), args.out))
    return 0
