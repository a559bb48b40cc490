"""Fused vs torch SDPA, explicit-with-weights vs the naive code and vs
nn.MultiheadAttention(need_weights=True), chunked and linear vs softmax; measured
interleaved in one process, median of repeats, against the measured GEMM rate. The default
run (forward, N = 256 1024 4096; chunked and torch SDPA at N = 32768 keys on 4096 query
rows) takes about two minutes on two quiet cores and prints the whole table.
"""

from __future__ import annotations

import argparse

__all__ = ["HELP", "add_arguments", "run_from_args"]

HELP = "time every attention backend against its rival (ratios, GFLOP/s, memory)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="a ~20 s smoke run (N=256, 1024)")
    p.add_argument("--sizes", type=int, nargs="+", default=None, metavar="N",
                   help="sequence lengths (default 256 1024 4096)")
    p.add_argument("--backward", action="store_true",
                   help="also time forward+backward (about 4x longer)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats per contender")
    p.add_argument("--long-rows", type=int, default=None, metavar="ROWS",
                   help="query rows of the N = 32768 probe (default 4096; 32768: all, 8x "
                   "longer)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (keys: see `pydoc attnlab.bench`)")


def run_from_args(args: argparse.Namespace) -> int:
    from attnlab._cli import emit_json
    from attnlab.bench import main_cli

    result = main_cli(quick=args.quick, json_out=args.json, quiet=args.quiet,
                      sizes=args.sizes, repeats=args.repeats, backward=args.backward,
                      long_rows=args.long_rows)
    if args.json:
        emit_json(result)
    return 0
