"""The compiled head-sums pass (`attnlab.core.weights.head_sums`) on one SmolLM2-shaped layer,
this checkout's kernel beside the kernel of another revision, in one process.

    .venv/bin/python benchmarks/head_sums_speed.py [--tokens 8192] [--threads 2]
        [--pool-block 32] [--repeats 5] [--rounds 3] [--baseline HEAD | --baseline none]
        [--json]

One layer of SmolLM2-135M's shape: 9 query heads sharing 3 key/value heads, d = 64, causal,
``--tokens`` query rows against as many keys, random q and k (the scores about N(0, 1))
and their exact logsumexp. The pass is what ``attnlab diagnose`` runs per layer: every head,
the rows in the tiles :func:`attnlab.core.scores.row_tiles` cuts (as
``attnlab.analysis.scores.scan`` does), blocks of ``--pool-block`` keys pooled (32 is the
block ``diagnose`` takes at 8,192 tokens; 0 pools nothing); no pair keys.

* ``current``: this checkout's kernel (``attnlab.core._kernel``, built or loaded from its
  cache before any clock starts);
* ``baseline``: ``src/attnlab/core/_cpp/attention.cpp`` of ``--baseline REV`` (``git show``),
  its operator library renamed ``attnlab_kernel_base`` so that both load in one process,
  compiled with the same flags into ``<kernel cache>/bench-baseline-<hash>`` (about a minute
  the first time, reused after), and called through the same ``head_sums`` (its
  ``_kernel.get`` pointed at the baseline's operators while it runs).

Each round times both (the order alternating), each the median of ``--repeats`` passes
after one unmeasured pass; printed are the medians over the rounds in seconds, and GFLOP/s
counting 2·d FLOPs for each (query, key) pair a row sees (H · N(N + 1)/2 pairs: the
q·kᵀ of the weights the pass sums; the kernel computes a few more, the parts of its tiles
past the diagonal), the ratio baseline / current (> 1: this checkout is faster), whether
the two kernels' sums and pooled blocks are the same bits, torch's threads and the 1-minute
load average before and after. A harness, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from _common import cpu_name, median_seconds

ROOT = Path(__file__).resolve().parent.parent
KERNEL_SOURCE = "src/attnlab/core/_cpp/attention.cpp"
BASE_NAME = "attnlab_kernel_base"


def baseline_ops(rev: str) -> Any:
    """The kernel of revision ``rev`` as ``torch.ops.attnlab_kernel_base`` (built once per
    source and flags into the kernel cache, loaded from there after)."""
    from torch.utils.cpp_extension import load

    from attnlab.core import _kernel

    run = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{KERNEL_SOURCE}"],
                         capture_output=True, text=True, check=False)
    if run.returncode:
        raise SystemExit(f"--baseline {rev}: git show failed: {run.stderr.strip()}")
    source = run.stdout
    for macro in ("TORCH_LIBRARY", "TORCH_LIBRARY_IMPL"):
        old = f"{macro}(attnlab_kernel,"
        if source.count(old) != 1:
            raise SystemExit(f"--baseline {rev}: its kernel does not define {old} once; "
                             "it cannot be renamed to load beside this checkout's")
        source = source.replace(old, f"{macro}({BASE_NAME},")
    flags = _kernel._flags()
    key = hashlib.sha256("\0".join([source, torch.__version__, *flags]).encode()).hexdigest()
    folder = _kernel._cache_root() / f"bench-baseline-{key[:16]}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "attention_base.cpp"
    if not path.is_file() or path.read_text(encoding="utf-8") != source:
        path.write_text(source, encoding="utf-8")
    t0 = time.perf_counter()
    load(name=BASE_NAME, sources=[str(path)], extra_cflags=flags, extra_ldflags=["-fopenmp"],
         build_directory=str(folder), is_python_module=False, verbose=False)
    print(f"baseline kernel ({rev}) ready in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return getattr(torch.ops, BASE_NAME)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pool-block", type=int, default=32,
                    help="keys (and rows) per pooled block; 0: no pooling")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", default="HEAD", metavar="REV",
                    help="the revision whose kernel is measured beside (none: only this one)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    for name in ("tokens", "threads", "repeats", "rounds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.pool_block < 0:
        ap.error(f"--pool-block must be 0 (no pooling) or more, got {args.pool_block}")
    torch.set_num_threads(args.threads)

    from attnlab.core import _kernel
    from attnlab.core.scores import ScoreShape, row_logsumexp, row_tiles
    from attnlab.core.weights import HEAD_SUMS, head_sums

    current = _kernel.get()
    if current is None:
        raise SystemExit(f"the compiled kernel is not available here: "
                         f"{_kernel.kernel_status()['reason']}")
    base = None if args.baseline.lower() == "none" else baseline_ops(args.baseline)

    h, h_kv, d, n, pb = 9, 3, 64, args.tokens, args.pool_block
    g = torch.Generator().manual_seed(0)
    q = torch.randn(h, n, d, generator=g)
    k = torch.randn(h_kv, n, d, generator=g)
    shape = ScoreShape(scale=d ** -0.5, causal=True)
    lse = row_logsumexp(q, k, shape)
    heads = torch.arange(h)
    tiles = [range(r0, r1) for r0, r1 in row_tiles(n, n)]
    nb = -(-n // pb) if pb else 0

    def one_pass() -> tuple[torch.Tensor, torch.Tensor | None]:
        sums = torch.zeros(h, len(HEAD_SUMS), dtype=torch.float64)
        pooled = torch.zeros(h, nb, nb) if pb else None
        for rows in tiles:
            if not head_sums(q, k, lse, shape, heads=heads, rows=rows, sums=sums,
                             pooled=pooled, pool_block=pb):
                raise SystemExit("head_sums refused the pass (the kernel does not apply)")
        return sums, pooled

    def on_base() -> tuple[torch.Tensor, torch.Tensor | None]:
        with mock.patch.object(_kernel, "get", lambda: base):
            return one_pass()

    fns: dict[str, Callable[[], tuple[torch.Tensor, torch.Tensor | None]]] = {
        "current": one_pass}
    if base is not None:
        fns["baseline"] = on_base
    outputs = {name: fn() for name, fn in fns.items()}
    load0 = os.getloadavg()[0]
    times: dict[str, list[float]] = {name: [] for name in fns}
    for rnd in range(args.rounds):  # interleaved, the order alternating
        names = list(fns)[rnd % len(fns):] + list(fns)[:rnd % len(fns)]
        for name in names:
            times[name].append(median_seconds(fns[name], args.repeats))
    load1 = os.getloadavg()[0]
    med = {name: statistics.median(v) for name, v in times.items()}
    flops = 2.0 * d * h * n * (n + 1) / 2
    res: dict[str, Any] = {
        "shape": {"heads": h, "kv_heads": h_kv, "dim": d, "tokens": n, "causal": True,
                  "pool_block": pb, "row_tiles": len(tiles)},
        "seconds": {name: round(v, 4) for name, v in med.items()},
        "gflops": {name: round(flops / v / 1e9, 2) for name, v in med.items()},
        "rounds_seconds": {name: [round(x, 4) for x in v] for name, v in times.items()},
    }
    if base is not None:
        (s_cur, p_cur), (s_base, p_base) = outputs["current"], outputs["baseline"]
        res["baseline"] = args.baseline
        res["speedup"] = round(med["baseline"] / med["current"], 3)
        res["same_bits"] = bool(torch.equal(s_cur, s_base) and (
            p_cur is None or p_base is None or torch.equal(p_cur, p_base)))
    res.update({"capability": current.capability(), "threads": torch.get_num_threads(),
                "cpu": cpu_name(), "load_avg": [round(load0, 2), round(load1, 2)]})
    if args.json:
        print(json.dumps(res, indent=1))
        return 0
    for key, v in res.items():
        print(f"{key}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
