"""What capturing costs: MiniLM on 128 tokens, capture vs a plain eager forward.

    .venv/bin/python benchmarks/capture_overhead.py [--tokens 128] [--repeats 30] [--json]

Contenders, interleaved in one process after warm-up, median of the repeats:

* ``baseline``: ``model(input_ids, output_attentions=True)`` (eager attention: the cheapest
  way the model itself returns every weight);
* ``capture``: ``with attnlab.capture(model) as cap: model(input_ids)`` and
  ``cap.trace()``: every weight plus per-head q, k, v and context, stacked into an
  AttentionTrace;
* ``capture_weights``: the same with ``qkv=False``.

Target (issue): capture <= 1.3 x baseline. The ratio, not the absolute time, is what to
compare between machines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    import attnlab
    from attnlab.models import load

    loaded = load("minilm", progress=False)
    model = loaded.model.eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, loaded.tokenizer.vocab_size, (1, args.tokens), generator=g)
    ids[0, 0], ids[0, -1] = loaded.tokenizer.cls_token_id, loaded.tokenizer.sep_token_id

    def baseline() -> None:
        out = model(input_ids=ids, output_attentions=True)
        assert len(out.attentions) == loaded.num_layers

    def capture(qkv: bool) -> None:
        with attnlab.capture(model, qkv=qkv) as cap:
            model(input_ids=ids)
        cap.trace()

    contenders = {"baseline": baseline, "capture": lambda: capture(True),
                  "capture_weights": lambda: capture(False)}
    times: dict[str, list[float]] = {k: [] for k in contenders}
    with torch.no_grad():
        for fn in contenders.values():  # warm-up
            fn()
            fn()
        for _ in range(args.repeats):
            for name, fn in contenders.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "model": "minilm", "tokens": args.tokens, "repeats": args.repeats,
        "threads": torch.get_num_threads(),
        "median_ms": {k: round(v * 1e3, 3) for k, v in med.items()},
        "ratio_capture": round(med["capture"] / med["baseline"], 3),
        "ratio_capture_weights": round(med["capture_weights"] / med["baseline"], 3),
        "target": 1.3,
    }
    result["passed"] = result["ratio_capture"] <= 1.3
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result["median_ms"].items():
            print(f"{k:16s} {v:9.2f} ms")
        print(f"capture / baseline = {result['ratio_capture']:.3f}  (target <= 1.3)   "
              f"weights only: {result['ratio_capture_weights']:.3f}")
    return result


if __name__ == "__main__":
    main()
