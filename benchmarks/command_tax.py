"""What `diagnose` and `explore` cost over the model itself: SmolLM2 at 8,192 tokens.

    .venv/bin/python benchmarks/command_tax.py [--tokens 8192] [--rounds 2] [--json]

SmolLM2-135M on attnlab's long text (``attnlab.report.long_text``) cut to ``--tokens``
(its whole window by default), one process, torch on 2 threads, the model loaded before any
clock starts, and one forward run untimed before the rounds. Each round times, in an order
that alternates between rounds:

* ``forward``: a plain forward of the same token ids, as a user runs the model: its own
  ``sdpa`` attention (a second copy of the weights loaded with
  ``attn_implementation="sdpa"``), under ``torch.no_grad()``;
* ``diagnose``: :func:`attnlab.analysis.diagnose_model` (what ``attnlab diagnose`` runs:
  the trace, the head-sum pass, the repeated-random-token probe, the roles);
* ``explore``: :func:`attnlab.viz.explorer.explore` and ``save`` (what ``attnlab explore
  --out page.html`` runs: the trace, whose forward takes the head sums in its attention,
  the scores, the pooled maps, the page written);
* ``explore_apart``: the same page from a trace without them, its sums by a pass of their
  own after the forward (as before the forward took them).

Printed: every time (with the tokens each step ran on: the commands tokenise the decoded
text themselves), the ratio of each command to the forward of its round, the medians,
and the 1-minute load average before and after each round. The aim: each command at most
1.5x the forward. A harness, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from _common import cpu_name


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM

    from attnlab.analysis import diagnose_model
    from attnlab.core._kernel import kernel_status
    from attnlab.models import load
    from attnlab.report.long_text import long_text
    from attnlab.tracing.tracer import trace
    from attnlab.viz.explorer import Explorer, explore

    torch.set_num_threads(2)
    kernel = kernel_status(build=True)  # a build is not timed
    loaded = load("smollm2", progress=False)
    text = long_text().text
    ids = loaded.tokenizer(text)["input_ids"][: args.tokens]
    if len(ids) < args.tokens:
        raise SystemExit(f"the long text gives {len(ids)} tokens, fewer than {args.tokens}")
    text = loaded.tokenizer.decode(ids)  # the commands' own tokenisation of this text
    plain = AutoModelForCausalLM.from_pretrained(loaded.path, attn_implementation="sdpa",
                                                 dtype=torch.float32).eval()
    tokens = torch.tensor([ids])

    def forward() -> int:
        with torch.no_grad():
            plain(tokens)
        return len(ids)

    def diagnose() -> int:
        tokens = diagnose_model(loaded, text, truncate=True).tokens
        return tokens if isinstance(tokens, int) else len(tokens)

    def explore_page() -> int:
        with tempfile.TemporaryDirectory() as tmp:
            ex = explore(loaded, text, truncate=True)
            ex.save(Path(tmp) / "page.html")
            return ex.traces[0].seq_len

    def explore_apart() -> int:  # the page's sums by their own pass after the forward
        with tempfile.TemporaryDirectory() as tmp:
            ex = Explorer([trace(loaded, text, truncate=True)])
            ex.save(Path(tmp) / "page.html")
            return ex.traces[0].seq_len

    steps = {"forward": forward, "diagnose": diagnose, "explore": explore_page,
             "explore_apart": explore_apart}
    # the process's first forward at this length pays for what later calls reuse (its
    # buffers' first pages, the libraries' set-up): 31.2 s against the next one's 23.9 s in
    # one run here, which made round 1's ratios the lowest; it runs once, untimed, first
    forward()
    rounds = []
    for r in range(args.rounds):
        order = list(steps) if r % 2 == 0 else list(reversed(steps))
        row: dict = {"load_before": os.getloadavg()[0]}
        for name in order:
            t0 = time.perf_counter()
            row[f"{name}_tokens"] = steps[name]()
            row[f"{name}_s"] = time.perf_counter() - t0
        row["load_after"] = os.getloadavg()[0]
        for name in ("diagnose", "explore", "explore_apart"):
            row[f"{name}_ratio"] = row[f"{name}_s"] / row["forward_s"]
        rounds.append(row)
        if not args.json:
            print(f"round {r + 1} (load {row['load_before']:.1f} -> {row['load_after']:.1f}): "
                  f"forward {row['forward_s']:.1f} s, diagnose {row['diagnose_s']:.1f} s "
                  f"({row['diagnose_ratio']:.2f}x), explore {row['explore_s']:.1f} s "
                  f"({row['explore_ratio']:.2f}x), the pass apart {row['explore_apart_s']:.1f} s "
                  f"({row['explore_apart_ratio']:.2f}x)", flush=True)
    out = {"cpu": cpu_name(), "threads": torch.get_num_threads(), "tokens": len(ids),
           "kernel": kernel["available"], "rounds": rounds,
           "median": {k: statistics.median(r[k] for r in rounds)
                      for k in ("forward_s", "diagnose_s", "explore_s", "explore_apart_s",
                                "diagnose_ratio", "explore_ratio", "explore_apart_ratio")}}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        m = out["median"]
        print(f"{out['cpu']}, {out['threads']} threads, {out['tokens']} tokens: medians "
              f"forward {m['forward_s']:.1f} s, diagnose {m['diagnose_ratio']:.2f}x, "
              f"explore {m['explore_ratio']:.2f}x, its pass apart "
              f"{m['explore_apart_ratio']:.2f}x (aim: <= 1.5x)")
    return out


if __name__ == "__main__":
    main()
