"""What bounds an exact row of a long trace: the kernel's `shaped_weights` (the rows of
`AttentionTrace.weights_rows`) beside the GEMM of the same shape, the square GEMM rate, and
the rate at which this machine writes memory.

    .venv/bin/python benchmarks/rows_roofline.py [--rows 256] [--keys 16384] [--heads 4]
        [--dim 64] [--repeats 15] [--json]

The weights of ``rows`` query rows of ``heads`` heads against ``keys`` keys (causal: the
last rows, every key seen) cost 2·d FLOPs each for the scores, and 4 bytes each written:
at d = 64 that is 32 FLOPs a byte, far below what a GEMM needs to run at its square rate,
so the rows are bounded by the writing, not by the arithmetic. Measured side by side,
interleaved, medians of ``--repeats``, torch on its default threads:

* ``kernel``: `attnlab.core.weights.shaped_weights` on the compiled kernel (one pass: GEMM
  tile, scale, subtract the lse, exp, written once);
* ``torch``: the same weights by PyTorch (``ATTNLAB_NO_KERNEL`` path: `q @ kᵀ`, scale,
  subtract, exp);
* ``mm``: `torch.mm` of the same shape (the scores alone, written once, no exp);
* ``fill``: `Tensor.fill_` of an output of the same size (what writing it costs);
* ``square``: the GEMM rate on (n x n) fp32, as `attnlab bench` measures it.

Printed: each time, the kernel's GFLOP/s for the scores, its share of the square rate and
of the same-shape GEMM, and its bytes written per second against ``fill``'s. A harness,
not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics

import torch
from _common import median_seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--keys", type=int, default=16384)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--square", type=int, default=2048)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from attnlab.core import _kernel
    from attnlab.core.scores import ScoreShape
    from attnlab.core.weights import shaped_weights

    if _kernel.get() is None:
        raise SystemExit("the compiled kernel is not available here: nothing to measure")
    h, r, n, d = args.heads, args.rows, args.keys, args.dim
    g = torch.Generator().manual_seed(0)
    q = torch.randn(h, r, d, generator=g)
    k = torch.randn(h, n, d, generator=g)
    shape = ScoreShape(scale=d ** -0.5, causal=True)
    rows = range(n - r, n)
    s = (q @ k.transpose(1, 2)) * shape.scale
    lse = torch.logsumexp(s.masked_fill(torch.ones(r, n).triu(n - r + 1).bool(),
                                        float("-inf")), -1)
    out = torch.empty(h, r, n)
    a, b = torch.randn(args.square, args.square), torch.randn(args.square, args.square)

    def kernel() -> None:
        shaped_weights(q, k, lse, shape, rows=rows, lq=n, lk=n)

    def torch_path() -> None:
        w = (q @ k.transpose(1, 2)) * shape.scale
        w.sub_(lse[..., None]).exp_()

    def mm() -> None:
        for i in range(h):
            torch.mm(q[i], k[i].T, out=out[i])

    def fill() -> None:
        out.fill_(1.0)

    def square() -> None:
        torch.mm(a, b)

    want = torch.softmax(s.masked_fill(torch.ones(r, n).triu(n - r + 1).bool(),
                                       float("-inf")), -1)
    err = float((shaped_weights(q, k, lse, shape, rows=rows, lq=n, lk=n) - want).abs().max())
    load0 = os.getloadavg()[0]
    times: dict[str, list[float]] = {x: [] for x in ("kernel", "torch", "mm", "fill", "square")}
    fns = {"kernel": kernel, "torch": torch_path, "mm": mm, "fill": fill, "square": square}
    for rep in range(3):  # interleaved, the order rotating
        names = list(fns)[rep:] + list(fns)[:rep]
        for x in names:
            times[x].append(median_seconds(fns[x], args.repeats))
    med = {x: statistics.median(v) for x, v in times.items()}
    flops = 2.0 * h * r * n * d
    written = 4.0 * h * r * n
    square_rate = 2.0 * args.square ** 3 / med["square"] / 1e9
    res = {
        "shape": {"heads": h, "rows": r, "keys": n, "dim": d},
        "ms": {x: round(1e3 * v, 3) for x, v in med.items()},
        "kernel_gflops": round(flops / med["kernel"] / 1e9, 1),
        "mm_gflops": round(flops / med["mm"] / 1e9, 1),
        "square_gflops": round(square_rate, 1),
        "kernel_share_of_square": round(flops / med["kernel"] / 1e9 / square_rate, 3),
        "kernel_share_of_same_shape_mm": round(med["mm"] / med["kernel"], 3),
        "kernel_gb_per_s": round(written / med["kernel"] / 1e9, 2),
        "fill_gb_per_s": round(written / med["fill"] / 1e9, 2),
        "kernel_vs_fill": round(med["kernel"] / med["fill"], 2),
        "kernel_vs_torch": round(med["torch"] / med["kernel"], 2),
        "max_error_vs_softmax": err,
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "load_avg": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }
    if args.json:
        print(json.dumps(res, indent=1))
        return
    for key, v in res.items():
        print(f"{key}: {v}")


if __name__ == "__main__":
    main()
