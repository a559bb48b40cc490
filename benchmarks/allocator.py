"""What the memory allocator costs SmolLM2's long forwards: glibc's and PyTorch's defaults
against transparent huge pages, and against huge pages with the freed heap kept.

    .venv/bin/python benchmarks/allocator.py [--eager 2048] [--trace 4096] [--rounds 2] [--json]

Each point is one job of the report's long-contexts part (:func:`attnlab.report._measure.
run_job`: SmolLM2 loaded, then one forward timed) in a fresh process, under one of three
environments, the order of the three rotating between rounds:

* ``system``: the process as it starts (glibc gives each allocation of 32 MiB and more a
  mapping of its own, unmapped when freed, and hands the heap's freed top back; PyTorch
  asks for no huge pages);
* ``huge``: ``THP_MEM_ALLOC_ENABLE=1`` (PyTorch asks for transparent huge pages on its
  tensors of 2 MiB and more, where ``/sys/kernel/mm/transparent_hugepage/enabled`` is at
  ``madvise`` or ``always``);
* ``huge+kept``: the same with ``MALLOC_MMAP_MAX_=0`` and ``MALLOC_TRIM_THRESHOLD_`` at
  64 GiB (glibc maps nothing apart and keeps what is freed for the next tensors).

The jobs: ``eager`` (Hugging Face's eager attention with ``output_attentions=True``, the
attention matrices of every layer kept) at ``--eager`` tokens, and attnlab's ``trace`` at
``--trace`` tokens, on torch's default threads. Printed: each job's forward seconds, its
page faults and peak resident set (the child's, from ``wait4``), the medians, and the
1-minute load average before each round. A harness, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from _common import cpu_name

ENVS = {
    "system": {},
    "huge": {"THP_MEM_ALLOC_ENABLE": "1"},
    "huge+kept": {"THP_MEM_ALLOC_ENABLE": "1", "MALLOC_MMAP_MAX_": "0",
                  "MALLOC_TRIM_THRESHOLD_": str(64 * 2**30)},
}
_DECIDES = ("THP_MEM_ALLOC_ENABLE", "MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_",
            "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")
_CHILD = ("import json, sys\n"
          "from attnlab.report._measure import run_job\n"
          "print(json.dumps(run_job(json.loads(sys.argv[1]))))\n")


def _job(kind: str, tokens: int, extra: dict[str, str]) -> dict:
    """One job in a fresh process: its forward seconds, page faults and peak memory."""
    env = {k: v for k, v in os.environ.items() if k not in _DECIDES}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", **extra)
    job = {"kind": kind, "model": "smollm2", "tokens": tokens, "text": None, "save": None}
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(job)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)  # the child's own resources, as it ends
    code = proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    if code != 0:
        raise SystemExit(f"{kind} at {tokens} tokens failed (exit {code})")
    result = json.loads(out.strip().splitlines()[-1])
    return {"forward_s": round(result["forward_seconds"], 2),
            "faults": usage.ru_minflt, "peak_gb": round(usage.ru_maxrss / 2**20, 2),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "sys_s": round(usage.ru_stime, 1)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eager", type=int, default=2048, help="tokens of the eager job")
    ap.add_argument("--trace", type=int, default=4096, help="tokens of the trace job")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    thp = "unknown"
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            thp = f.read().strip()
    except OSError:
        pass
    names = list(ENVS)
    runs: dict[str, dict[str, list[dict]]] = {
        job: {name: [] for name in names} for job in ("eager", "trace")}
    loads = []
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        loads.append(os.getloadavg()[0])
        for name in order:
            for kind, tokens in (("eager", args.eager), ("trace", args.trace)):
                got = _job(kind, tokens, ENVS[name])
                runs[kind][name].append(got)
                if not args.json:
                    print(f"round {r + 1} {name:10s} {kind:5s} {tokens:5d} tokens: "
                          f"forward {got['forward_s']:6.2f} s, {got['faults']:9,d} faults, "
                          f"sys {got['sys_s']:5.1f} s, peak {got['peak_gb']:.2f} GB",
                          flush=True)
    medians = {kind: {name: statistics.median(x["forward_s"] for x in runs[kind][name])
                      for name in names} for kind in runs}
    out = {"cpu": cpu_name(), "cores": os.cpu_count(), "thp": thp, "eager_tokens": args.eager,
           "trace_tokens": args.trace, "rounds": args.rounds, "loadavg_1min": loads,
           "runs": runs, "median_forward_s": medians}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"\n{out['cpu']}, {out['cores']} cores, transparent huge pages: {thp}; "
              f"1-min load before each round {loads}")
        for kind in runs:
            base = medians[kind]["system"]
            print(f"{kind:5s}: " + ", ".join(
                f"{name} {m:.2f} s ({m / base:.2f}x)" for name, m in medians[kind].items()))
    return out


if __name__ == "__main__":
    main()
