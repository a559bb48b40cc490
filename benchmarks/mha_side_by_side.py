"""attnlab's ``MultiHeadAttention`` with weights against ``nn.MultiheadAttention``, measured
two ways: as ``attnlab bench`` measures its cell, and as a plain side-by-side script does.

    .venv/bin/python benchmarks/mha_side_by_side.py [--runs 6] [--baseline REV]
        [--contend none|cpu|memory] [--json]

The cell: N = 1,024, E = 512, 8 heads, B = 1, ``need_weights=True`` (torch:
``average_attn_weights=False``), the modules sharing their weights
(``MultiHeadAttention.from_torch``), torch on 2 threads. Each measurement is a fresh process:

* ``bench``: the way ``attnlab bench`` times the cell (``attnlab.bench``: every contender of
  the N = 1,024 forward cell and the GEMM interleaved, in a rotating order, under
  ``torch.no_grad()`` with frozen parameters; median of 3 after one warm-up each);
* ``side-by-side``: a plain script (autograd on, parameters requiring grad, as the modules
  come): one warm-up, then 5 calls of torch's module in a row and 5 of attnlab's, medians;
* ``paired``: the same script and calls, but one call of each in turn (the order
  alternating), so that both modules are timed under the same load, as the bench does.

``--runs`` rounds, each running both ways (and both versions with ``--baseline REV``, a git
revision unpacked in a temporary folder, against this checkout), the 1-minute load average
read before each process. ``--contend`` runs a competing process for the whole measurement
on the shared cores (``cpu``: a busy loop; ``memory``: a loop copying 256 MiB), the load the
machine's other jobs put on it, on purpose. Printed: each ratio torch / attnlab, and per way
and version the median and the smallest. A harness, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, statistics, sys, time
import torch
torch.set_num_threads(2)
import attnlab
from attnlab.core._kernel import kernel_status
kernel_status(build=True)  # a build is not timed
way = sys.argv[1]
n, e, h = 1024, 512, 8
if way == "bench":
    from attnlab.bench.config import BenchConfig
    from attnlab.bench.contenders import attention_contenders, mha_contenders
    from attnlab.bench.timing import interleaved
    cfg = BenchConfig()
    g = torch.Generator().manual_seed(cfg.seed)
    q, k, v = (torch.randn(cfg.batch, cfg.heads, n, cfg.head_dim, generator=g) for _ in range(3))
    fns = {name: (lambda fn=fn: fn(q, k, v))
           for name, fn in attention_contenders(False, n, cfg, "cpu").items()}
    x = torch.randn(cfg.batch, n, cfg.mha_embed_dim, generator=g)
    for name, (module, call) in mha_contenders(n, cfg, "cpu").items():
        module.requires_grad_(False)
        fns[name] = lambda module=module, call=call: call(module, x)
    a, b = torch.randn(cfg.gemm_n, cfg.gemm_n), torch.randn(cfg.gemm_n, cfg.gemm_n)
    fns["_gemm"] = lambda: torch.mm(a, b)
    with torch.no_grad():
        secs = interleaved(fns, cfg.repeats, "cpu")
    theirs, ours = secs["torch_mha"], secs["attnlab_mha"]
else:
    from attnlab.nn import MultiHeadAttention
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(e, h, batch_first=True)
    am = MultiHeadAttention.from_torch(tm)
    x = torch.randn(1, n, e)
    def median_of_5(f):
        f()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    ft = lambda: tm(x, x, x, need_weights=True, average_attn_weights=False)
    fo = lambda: am(x, need_weights=True)
    if way == "side-by-side":
        theirs, ours = median_of_5(ft), median_of_5(fo)
    else:  # paired: the same calls, one of each in turn (the order alternating)
        ft(), fo()
        times = {ft: [], fo: []}
        for r in range(5):
            for f in (ft, fo) if r % 2 == 0 else (fo, ft):
                t0 = time.perf_counter()
                f()
                times[f].append(time.perf_counter() - t0)
        theirs, ours = statistics.median(times[ft]), statistics.median(times[fo])
print(json.dumps({"attnlab": attnlab.__file__, "torch_ms": theirs * 1e3,
                  "attnlab_ms": ours * 1e3, "ratio": theirs / ours}))
"""

WAYS = ("bench", "side-by-side", "paired")

CONTENDERS = {
    "cpu": "while True: pass",
    "memory": ("import numpy as np\na = np.ones(64 << 20, dtype=np.float32)\n"
               "b = np.empty_like(a)\nwhile True: np.copyto(b, a)"),
}


def _load1() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def _export(rev: str, into: Path) -> Path:
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev, "src"],
                         capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)
    return into / "src"


def _measure(src: Path, way: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "2"}
    load = _load1()
    run = subprocess.run([sys.executable, "-c", CHILD, way], env=env, capture_output=True,
                         text=True, check=False)
    if run.returncode:
        raise SystemExit(f"{way} with {src} failed:\n{run.stderr[-3000:]}")
    row = json.loads(run.stdout.strip().splitlines()[-1])
    if not row["attnlab"].startswith(str(src)):
        raise SystemExit(f"{src}: the process imported {row['attnlab']} instead")
    return {**row, "load_before": load}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--baseline", default=None, metavar="REV",
                    help="also measure this git revision, alternating with the checkout")
    ap.add_argument("--contend", choices=("none", *CONTENDERS), default="none")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        versions = {"checkout": ROOT / "src"}
        if args.baseline:
            versions = {"baseline": _export(args.baseline, Path(tmp)), **versions}
        rival = None
        if args.contend != "none":
            rival = subprocess.Popen([sys.executable, "-c", CONTENDERS[args.contend]])
        rows: dict[str, list[dict]] = {}
        start = _load1()
        try:
            for r in range(args.runs):
                order = [(v, w) for v in versions for w in WAYS]
                for version, way in order if r % 2 == 0 else order[::-1]:
                    row = _measure(versions[version], way)
                    rows.setdefault(f"{version} {way}", []).append(row)
                    print(f"run {r + 1} {version} {way}: torch {row['torch_ms']:.1f} ms, "
                          f"attnlab {row['attnlab_ms']:.1f} ms, ratio {row['ratio']:.2f} "
                          f"(load {row['load_before']:.2f})", file=sys.stderr)
        finally:
            if rival is not None:
                rival.kill()
                rival.wait()
    out = {"contend": args.contend, "baseline": args.baseline, "load_avg_start": start,
           "load_avg_end": _load1(), "rows": rows,
           "summary": {key: {"ratio_median": statistics.median(x["ratio"] for x in v),
                             "ratio_min": min(x["ratio"] for x in v),
                             "torch_ms_median": statistics.median(x["torch_ms"] for x in v),
                             "attnlab_ms_median": statistics.median(x["attnlab_ms"] for x in v)}
                       for key, v in rows.items()}}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"contending process: {args.contend}; load average {start:.2f} at the start, "
              f"{out['load_avg_end']:.2f} at the end")
        for key, s in out["summary"].items():
            ratios = ", ".join(f"{x['ratio']:.2f}" for x in rows[key])
            print(f"  {key}: torch / attnlab {ratios}; median {s['ratio_median']:.2f}, "
                  f"smallest {s['ratio_min']:.2f} (torch {s['torch_ms_median']:.1f} ms, "
                  f"attnlab {s['attnlab_ms_median']:.1f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
