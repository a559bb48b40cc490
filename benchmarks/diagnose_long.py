"""`diagnose` and the explorer's page on a long trace, two versions of attnlab side by side.

    .venv/bin/python benchmarks/diagnose_long.py --baseline REV [--candidate REV]
        [--trace FILE | --tokens 8192] [--save FILE] [--rounds 2] [--json]

1. A trace: SmolLM2-135M (30 layers x 9 heads, 3 key/value heads, d = 64) on attnlab's long
   text (``attnlab.report.long_text``) cut to ``--tokens``, traced with
   ``merge_pieces=False``; or a saved trace (``--trace``).
2. Two versions of ``src/attnlab``: ``--baseline REV`` (``git archive REV src``, unpacked in a
   temporary folder) and ``--candidate`` (another revision, or by default this checkout's
   ``src``). Each measurement is a fresh process with that version first on ``sys.path``
   (its compiled kernel built or loaded before any clock starts) that loads the trace, then
   times ``diagnose(trace)`` and, separately, the explorer's page
   (``Explorer(trace).payload()`` and ``save``, which diagnoses again inside).
3. ``--rounds`` rounds, each running both versions (the order alternating), so that both
   see the same machine; the 1-minute load average (``/proc/loadavg``) is recorded before
   and after each process. Printed: every measurement, the medians and, per round and as a
   median, the ratio baseline / candidate (> 1: the candidate is faster).

torch runs on 2 threads in every process. A harness, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from _common import cpu_name

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
import torch
torch.set_num_threads(2)
import attnlab
from attnlab.core._kernel import kernel_status
kernel = kernel_status(build=True)  # a build is not timed
from attnlab.analysis import diagnose
from attnlab.tracing.attention import AttentionTrace
from attnlab.viz.explorer import Explorer
trace = AttentionTrace.load(sys.argv[1])
out = {"attnlab": attnlab.__file__, "kernel": kernel["available"]}
t0 = time.perf_counter()
d = diagnose(trace)
out["diagnose_s"] = time.perf_counter() - t0
out["entropy_mean"] = float(d.scores["entropy"].mean())
out["previous_max"] = float(d.scores["previous"].max())
with tempfile.TemporaryDirectory() as tmp:
    t0 = time.perf_counter()
    ex = Explorer(trace)
    ex.payload()
    path = ex.save(Path(tmp) / "page.html")
    out["explore_s"] = time.perf_counter() - t0
    out["html_bytes"] = path.stat().st_size
print(json.dumps(out))
"""


def export(rev: str, into: Path) -> Path:
    """``src/`` of revision ``rev`` unpacked under ``into``; returns the folder to import."""
    archive = into / "src.tar"
    with open(archive, "wb") as f:
        subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev, "src"],
                       stdout=f, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def smollm2_trace(n: int, path: Path) -> None:
    """Trace SmolLM2 on the long text's first ``n`` tokens into ``path``."""
    import torch

    from attnlab.models import load
    from attnlab.report.long_text import long_text
    from attnlab.tracing.tracer import trace

    torch.set_num_threads(2)
    loaded = load("smollm2", progress=False)
    ids = loaded.tokenizer(long_text().text)["input_ids"][:n]
    if len(ids) < n:
        raise SystemExit(f"the long text gives {len(ids)} tokens, fewer than {n}")
    trace(loaded, ids, merge_pieces=False).save(path)


def measure(src: Path, trace: Path) -> dict:
    """One fresh process of the version in ``src``: its timings and the load around it."""
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "2"}
    before = os.getloadavg()[0]
    run = subprocess.run([sys.executable, "-c", CHILD, str(trace)], env=env,
                         capture_output=True, text=True, check=False)
    if run.returncode:
        raise SystemExit(f"the measurement of {src} failed:\n{run.stderr[-3000:]}")
    row = json.loads(run.stdout.strip().splitlines()[-1])
    if not row["attnlab"].startswith(str(src)):
        raise SystemExit(f"{src}: the process imported {row['attnlab']} instead")
    row.update(load_before=before, load_after=os.getloadavg()[0])
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, metavar="REV",
                    help="the git revision measured against")
    ap.add_argument("--candidate", default=None, metavar="REV",
                    help="another revision (default: this checkout's src)")
    ap.add_argument("--trace", default=None, metavar="FILE", help="a saved trace")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--save", default=None, metavar="FILE", help="keep the trace made")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        trace = Path(args.trace) if args.trace else Path(args.save or tmp / "trace.safetensors")
        if not args.trace:
            t0 = time.perf_counter()
            smollm2_trace(args.tokens, trace)
            print(f"trace: {args.tokens} tokens in {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr)
        (tmp / "base").mkdir()
        sides = {"baseline": export(args.baseline, tmp / "base")}
        if args.candidate:
            (tmp / "cand").mkdir()
            sides["candidate"] = export(args.candidate, tmp / "cand")
        else:
            sides["candidate"] = ROOT / "src"
        rows: dict[str, list[dict]] = {name: [] for name in sides}
        start = os.getloadavg()[0]
        for r in range(args.rounds):
            order = list(sides) if r % 2 == 0 else list(sides)[::-1]
            for name in order:
                row = measure(sides[name], trace)
                rows[name].append(row)
                print(f"round {r + 1} {name}: diagnose {row['diagnose_s']:.1f} s, explore "
                      f"{row['explore_s']:.1f} s (load {row['load_before']:.2f} -> "
                      f"{row['load_after']:.2f})", file=sys.stderr)
    out: dict = {"machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "torch_threads": 2},
                 "baseline": args.baseline, "candidate": args.candidate or "checkout",
                 "load_avg_start": start, "load_avg_end": os.getloadavg()[0], "rows": rows}
    for key in ("diagnose_s", "explore_s"):
        base = [x[key] for x in rows["baseline"]]
        cand = [x[key] for x in rows["candidate"]]
        out[key] = {"baseline_median": statistics.median(base),
                    "candidate_median": statistics.median(cand),
                    "ratio_per_round": [b / c for b, c in zip(base, cand)],
                    "ratio_median": statistics.median(b / c for b, c in zip(base, cand))}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{out['machine']['cpu']}, {out['machine']['cores']} cores, torch on 2 threads; "
              f"load average {start:.2f} at the start, {out['load_avg_end']:.2f} at the end")
        for key, what in (("diagnose_s", "diagnose"), ("explore_s", "explorer page")):
            s = out[key]
            print(f"  {what}: baseline {s['baseline_median']:.1f} s, candidate "
                  f"{s['candidate_median']:.1f} s (medians), baseline / candidate "
                  + ", ".join(f"{x:.2f}" for x in s["ratio_per_round"])
                  + f" per round, median {s['ratio_median']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
