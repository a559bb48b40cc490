"""Each task's default run: wall time and held-out accuracy (and the heads found: the
previous-token and induction heads of induction, the lookup head of assoc-recall).

    python benchmarks/train_tasks.py [--tasks induction copy ...] [--out DIR] [--threads N]

Run it on a quiet machine: the times are wall-clock seconds of the training loop alone.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from attnlab.train.config import TrainConfig
from attnlab.train.tasks import get_task, task_names
from attnlab.train.trainer import train


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="*", default=task_names())
    p.add_argument("--out", default=None, help="keep the run directories here")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: TrainConfig's, 1)")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="attnlab-train-bench-"))
    rows = []
    for name in args.tasks:
        cfg = TrainConfig.for_task(name, threads=args.threads)
        t0 = time.perf_counter()
        r = train(cfg, root / name, quiet=args.quiet)
        total = time.perf_counter() - t0
        row = {"task": name, "steps": cfg.steps, "train_s": round(r.seconds, 1),
               "total_s": round(total, 1), "eval_accuracy": round(r.eval_accuracy, 4),
               "chance": round(get_task(name).chance, 4),
               "tokens_per_s": round(r.tokens_per_s)}
        if r.heads:  # the heads the task is about (attnlab.train.trainer._find_heads)
            for key, label in [("previous_token", "previous_token_head"),
                               ("induction", "induction_head"),
                               ("query_to_value", "lookup_head")]:
                if key in r.heads:
                    row[label] = {k: r.heads[key][k] for k in ("layer", "head", "score")}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{'task':<14}{'steps':>7}{'train s':>10}{'held-out acc':>14}{'chance':>9}  heads")
    for r in rows:
        heads = "  ".join(f"{k.removesuffix('_head')} L{v['layer']}H{v['head']} {v['score']:.2f}"
                          for k, v in r.items() if k.endswith("_head"))
        print(f"{r['task']:<14}{r['steps']:>7}{r['train_s']:>10}{r['eval_accuracy']:>14}"
              f"{r['chance']:>9}  {heads}")
    print(f"threads={cfg.threads} runs in {root}")


if __name__ == "__main__":
    main()
