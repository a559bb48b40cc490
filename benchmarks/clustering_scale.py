"""The similarity of every pair of heads and their clusters, at the head counts of large
models: time and peak memory of `pattern_cosine` and `cluster_heads` (the nearest-neighbour
chain), and beside them the greedy average linkage attnlab used before (merge the most
similar pair, O(n³)) where it is affordable.

    .venv/bin/python benchmarks/clustering_scale.py [--heads 270 2048 5120 16128]
        [--greedy-up-to 2048] [--json]

Each head count runs in a fresh process: pooled patterns of that many heads, capped as
`diagnose` caps them (`pooled_block`, 3,072 tokens, at most 256 blocks a side and
`POOLED_BYTES` in all), made of 64 kinds of pattern plus noise, so that clusters exist.
Peak memory is the process's high-water mark (VmHWM) over its resident set before the
step. A harness, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

CHILD = r"""
import json, sys, time
import torch
torch.set_num_threads(2)
from attnlab.analysis.heads import cluster_heads, pooled_block
from attnlab.analysis.scores import pattern_cosine

def hwm():
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmHWM'):
                return int(line.split()[1]) * 1024
def rss():
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmRSS'):
                return int(line.split()[1]) * 1024
def reset():
    with open('/proc/self/clear_refs', 'w') as f:
        f.write('5')

n, greedy = int(sys.argv[1]), sys.argv[2] == '1'
tokens = 3072
block = pooled_block(n, tokens, tokens, 256)
side = -(-tokens // block)
g = torch.Generator().manual_seed(0)
kinds = torch.rand(64, side, side, generator=g)
pooled = kinds[torch.randint(64, (n,), generator=g)]
pooled += 0.15 * torch.rand(n, side, side, generator=g)
pooled = pooled.reshape(1, n, side, side)
out = {"heads": n, "side": side, "pooled_mb": pooled.numel() * 4 / 1e6}
reset(); base = rss(); t = time.perf_counter()
sim = pattern_cosine(pooled)
out["cosine_s"] = time.perf_counter() - t
out["cosine_peak_mb"] = (hwm() - base) / 1e6
del pooled
reset(); base = rss(); t = time.perf_counter()
got = cluster_heads(sim, 0.9)
out["chain_s"] = time.perf_counter() - t
out["chain_peak_mb"] = (hwm() - base) / 1e6
out["clusters"] = len(set(got))
if greedy:
    import numpy as np
    sys.path.insert(0, sys.argv[3])
    from test_clustering import _greedy_sums
    t = time.perf_counter()
    ref = _greedy_sums(sim, 0.9)
    out["greedy_s"] = time.perf_counter() - t
    out["same_clusters"] = ref == got
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heads", type=int, nargs="+", default=[270, 2048, 5120, 16128])
    ap.add_argument("--greedy-up-to", type=int, default=2048)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tests = os.path.join(root, "tests", "analysis")
    print(f"# {platform.processor() or platform.machine()}, load {os.getloadavg()}",
          file=sys.stderr)
    rows = []
    for n in args.heads:
        res = subprocess.run([sys.executable, "-c", CHILD, str(n),
                              "1" if n <= args.greedy_up_to else "0", tests],
                             capture_output=True, text=True, check=True)
        row = json.loads(res.stdout)
        row["load_avg"] = os.getloadavg()[0]
        rows.append(row)
        if not args.json:
            print(row, flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
