"""The cost of eviction losses on SmolLM2 (offline weights): the seconds and the peak memory
of :func:`attnlab.analysis.eviction_loss.eviction_losses` for every policy at the budgets
0.1, 0.25 and 0.5, and optionally the same call of another copy of the module beside it
(the losses of both compared, every one).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/eviction_loss_speed.py [--tokens 8192]
        [--other PATH] [--repeats 1] [--chunk 256] [--json]

The text is attnlab's long text (its course, or the ``*.txt`` files of
``$ATTNLAB_ARTICLES``), cut to ``--tokens``. The trace and the eviction result are made
once, in a process of their own; each module then runs in a fresh process (the model loaded,
the eviction result read back), so that its peak resident set (``VmHWM``, reset just before
the call) is its own. With ``--repeats`` each module runs that many times, the two in
turn, and the fastest of each is compared: on a shared machine a time can be several times
another of the same call. The machine's load average is printed beside each time.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BUDGETS = (0.1, 0.25, 0.5)


def _rss_gb() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / 1e9
    return float("nan")


def _prepare(tokens: int, path: str) -> dict[str, Any]:
    """The ids, trace and eviction result of ``tokens`` tokens, saved to ``path``."""
    import torch

    from attnlab.analysis.eviction import evict
    from attnlab.models import load
    from attnlab.report.long_text import long_text
    from attnlab.tracing import trace

    t0 = time.perf_counter()
    m = load("smollm2", progress=False)
    ids = m.tokenizer(long_text().text)["input_ids"][:tokens]
    t = trace(m, ids, merge_pieces=False)
    ev = evict(t, BUDGETS, seed=0)
    torch.save({"ids": list(ids), "ev": ev}, path)
    return {"tokens": len(ids), "context": ev.context, "later": ev.later,
            "policies": list(ev.policies), "prepare_s": round(time.perf_counter() - t0, 1)}


def _module(path: str | None) -> Any:
    if path is None:
        from attnlab.analysis import eviction_loss

        return eviction_loss
    spec = importlib.util.spec_from_file_location("eviction_loss_other", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"--other must name a Python file, got {path!r}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _measure(path: str, module_path: str | None, chunk: int) -> dict[str, Any]:
    """One module's ``eviction_losses`` on the saved eviction result: seconds, memory,
    load and every loss."""
    import torch

    from attnlab._proc import load_average, peak_rss_bytes, release_memory, reset_peak_rss
    from attnlab.models import load

    module = _module(module_path)
    m = load("smollm2", progress=False)
    saved = torch.load(path, weights_only=False)
    release_memory()
    before = _rss_gb()
    reset = reset_peak_rss()
    load_before = load_average()
    t0 = time.perf_counter()
    out = module.eviction_losses(m, saved["ids"], saved["ev"], chunk=chunk)
    seconds = time.perf_counter() - t0
    return {"module": module_path or "attnlab.analysis.eviction_loss",
            "seconds": round(seconds, 1), "rss_before_gb": round(before, 2),
            "peak_gb": round(peak_rss_bytes() / 1e9, 2), "peak_reset": reset,
            "load_before": load_before, "load_after": load_average(),
            "threads": torch.get_num_threads(), "losses": module.to_json(out)}


def _child(*args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                          check=False, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])} failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _flat(losses: dict[str, Any]) -> dict[str, float]:
    out = {"full": losses["full"]}
    for p, row in losses["loss"].items():
        out.update({f"{p}@{b}": v for b, v in row.items()})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--other", default=None,
                    help="another copy of eviction_loss.py to time and compare beside it")
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs of each module, the two in turn (the fastest compared)")
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--stage", choices=("prepare", "measure"), help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    ap.add_argument("--module", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.stage == "prepare":
        print(json.dumps(_prepare(args.tokens, args.file)))
        return 0
    if args.stage == "measure":
        print(json.dumps(_measure(args.file, args.module, args.chunk)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "eviction.pt")
        out: dict[str, Any] = {"prepared": _child("--stage", "prepare", "--file", path,
                                                  "--tokens", str(args.tokens))}
        measure = ("--stage", "measure", "--file", path, "--chunk", str(args.chunk))
        runs = []
        for _ in range(max(1, args.repeats)):
            runs.append(_child(*measure))
            if args.other:
                runs.append(_child(*measure, "--module", args.other))
    out["runs"] = runs
    if args.other:
        ours, theirs = runs[0::2], runs[1::2]
        a, b = _flat(ours[0]["losses"]), _flat(theirs[0]["losses"])
        diff = {k: abs(a[k] - b[k]) for k in a}
        out["largest_abs_difference"] = max(diff.values())
        out["abs_difference"] = diff
        fastest = min(r["seconds"] for r in ours), min(r["seconds"] for r in theirs)
        out["fastest_s"] = {"this": fastest[0], "other": fastest[1]}
        out["speedup"] = round(fastest[1] / fastest[0], 2)
    if not args.json:
        for r in runs:
            r["losses"] = _flat(r["losses"])
    print(json.dumps(out, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
