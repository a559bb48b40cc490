"""A trace of several stacks (encoder, decoder, cross), loaded against opened.

    .venv/bin/python benchmarks/stacked_open.py [--source 4096] [--target 256]
        [--layers 12] [--heads 8] [--dim 64] [--dir DIR] [--json]

Writes a :class:`~attnlab.tracing.StackedTrace` of random q, k, v (an encoder over
``--source`` tokens, a causal decoder over ``--target`` tokens, the cross-attention
between them; ``--layers`` x ``--heads`` heads of ``--dim``), then, each in a fresh process
(multiprocessing, spawn) so that its peak resident set is its own: ``StackedTrace.load``
(every tensor read and checked) and ``StackedTrace.open`` (memory-mapped, the header and
manifests checked), each followed by one exact row of the encoder. Measured: the time to
load or open, the row's time, and the growth of the process's peak resident set over its
resident set before (:func:`attnlab._proc.peak_rss_bytes`); then ``verify()`` of the opened
file (every stack's sha256 and values).

A harness, not a test: it prints what it measured; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from attnlab._proc import in_fresh_process, load_average


def _mib(n: float) -> float:
    return round(n / 2**20, 1)


def write(path: str, source: int, target: int, layers: int, heads: int, dim: int) -> int:
    """The stacked trace at ``path``; returns the file's size in bytes."""
    import torch

    from attnlab.core.scores import ScoreShape, row_logsumexp
    from attnlab.tracing import AttentionTrace, StackedTrace

    def stack(name: str, rows: list[str], keys: list[str], causal: bool) -> AttentionTrace:
        g = torch.Generator().manual_seed(len(rows) * 7 + len(keys))
        q = torch.randn(layers, heads, len(rows), dim, generator=g)
        k = torch.randn(layers, heads, len(keys), dim, generator=g)
        v = torch.randn(layers, heads, len(keys), dim, generator=g)
        shape = ScoreShape(scale=dim ** -0.5, causal=causal)
        lse = torch.stack([row_logsumexp(q[i], k[i], shape) for i in range(layers)])
        return AttentionTrace(rows, q=q, k=k, v=v, lse=lse, shapes=shape, stack=name,
                              key_tokens=None if keys is rows else keys, model="random")

    src = [f"s{i}" for i in range(source)]
    tgt = [f"t{i}" for i in range(target)]
    StackedTrace({"encoder": stack("encoder", src, src, False),
                  "decoder": stack("decoder", tgt, tgt, True),
                  "cross": stack("cross", tgt, src, False)}, model="random").save(path)
    return os.path.getsize(path)


def measure(path: str, how: str) -> dict[str, Any]:
    """``how`` ("load" or "open") the file in this (fresh) process, then one exact row."""
    from attnlab._proc import peak_rss_bytes, reset_peak_rss
    from attnlab.tracing import StackedTrace

    reset_peak_rss()
    base = peak_rss_bytes()
    t0 = time.perf_counter()
    st = StackedTrace.load(path) if how == "load" else StackedTrace.open(path)
    t1 = time.perf_counter()
    enc = st["encoder"]
    enc.weights_rows(enc.num_layers // 2, 0, [enc.seq_len // 2])
    t2 = time.perf_counter()
    out = {"how": how, "seconds": round(t1 - t0, 3), "row_ms": round(1e3 * (t2 - t1), 2),
           "peak_growth_mib": _mib(peak_rss_bytes() - base)}
    if how == "open":
        t3 = time.perf_counter()
        st.verify()
        out["verify_seconds"] = round(time.perf_counter() - t3, 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=int, default=4096)
    ap.add_argument("--target", type=int, default=256)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--dir", type=Path, default=None, help="where the file goes (a temporary "
                    "folder by default)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        path = str(Path(d) / "stacked.safetensors")
        size = write(path, args.source, args.target, args.layers, args.heads, args.dim)
        before = load_average()
        runs = [in_fresh_process(measure, path, how) for how in ("load", "open")]
        report = {"file_mib": _mib(size), "load_average": [before, load_average()],
                  "runs": runs}
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"stacked trace: {report['file_mib']} MiB; load average {before} "
          f"-> {report['load_average'][1]}")
    for r in runs:
        extra = f", verify {r['verify_seconds']} s" if "verify_seconds" in r else ""
        print(f"  {r['how']}: {r['seconds']} s, a row {r['row_ms']} ms, peak growth "
              f"{r['peak_growth_mib']} MiB{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
