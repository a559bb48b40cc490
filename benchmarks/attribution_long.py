"""What attention moves, at length: value-weighted rows, the score's decomposition, rollout
and KV-cache eviction on SmolLM2 at 8,192 tokens (offline weights).

    .venv/bin/python benchmarks/attribution_long.py [--tokens 8192] [--trace FILE]
        [--save FILE] [--repeats 20] [--json]

The text is attnlab's long text (its course, or the ``*.txt`` files of
``$ATTNLAB_ARTICLES``), cut to ``--tokens``. Targets (2 cores): value-weighted rows and one
pair's score decomposition <= 50 ms each; one rollout row through all 30 layers <= 60 s;
every eviction policy's key scores for all 270 heads <= 2 min; peak memory <= 3 GB. The
machine's load average is printed beside the numbers: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path


def _peak_gb() -> float:
    from attnlab._proc import peak_rss_bytes  # this process's own (VmHWM)

    return peak_rss_bytes() / 1e9


def _ms(fn, repeats: int) -> dict[str, float]:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": round(statistics.median(times), 2), "max_ms": round(max(times), 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--trace", default=None, help="a saved SmolLM2 trace to read instead")
    ap.add_argument("--save", default=None, help="save the trace made here")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from attnlab.analysis.eviction import evict
    from attnlab.tracing import trace
    from attnlab.tracing.attention import AttentionTrace
    from attnlab.tracing.attribution import band_lift

    torch.set_num_threads(2)
    out: dict[str, object] = {"load_before": os.getloadavg()}
    t0 = time.perf_counter()
    if args.trace:
        t = AttentionTrace.load(args.trace)
    else:
        from attnlab.models import load
        from attnlab.report.long_text import long_text

        m = load("smollm2")
        ids = m.tokenizer(long_text().text)["input_ids"][: args.tokens]
        t = trace(m, ids, merge_pieces=False)
        if args.save:
            t.save(Path(args.save))
    out["trace_s"] = round(time.perf_counter() - t0, 1)
    out["tokens"] = t.seq_len
    out["peak_gb_after_trace"] = round(_peak_gb(), 2)
    rng = random.Random(0)
    n = t.seq_len

    def pick() -> tuple[int, int, int]:
        return rng.randrange(t.num_layers), rng.randrange(t.num_heads), rng.randrange(n)

    def vw_head() -> None:
        layer, head, row = pick()
        t.value_weighted_rows(layer, head, [row])

    def vw_all() -> None:
        layer, _, row = pick()
        t.value_weighted_rows(layer, None, [row])

    def parts() -> None:
        layer, head, row = pick()
        t.score_parts(layer, head, row, rng.randrange(row + 1))

    out["value_weighted_row_head"] = _ms(vw_head, args.repeats)
    out["value_weighted_row_all_heads"] = _ms(vw_all, args.repeats)
    out["score_parts"] = _ms(parts, args.repeats)
    t0 = time.perf_counter()
    t.rollout_rows([n - 1])
    out["rollout_row_s"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    ev = evict(t)
    out["eviction_s"] = round(time.perf_counter() - t0, 1)
    out["eviction"] = ev.table()
    bands = {}
    for name, (layer, head) in {"induction L18 H6": (18, 6), "previous-token L3 H0": (3, 0)
                                }.items():
        got = band_lift(t, layer, head, rows=range(n - 512, n))
        top = sorted(got["bands"], key=lambda b: -abs(b["share"]))[:4]
        bands[name] = [{"dims": b["dims"], "wavelength": b["wavelength"],
                        "share": round(b["share"], 3)} for b in top]
    out["bands"] = bands
    out["peak_gb"] = round(_peak_gb(), 2)
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
