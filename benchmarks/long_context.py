"""Long-context traces: exactness against Hugging Face eager, time and peak memory.

    .venv/bin/python benchmarks/long_context.py [--tokens 1024] [--gpt-tokens 32768]
                                               [--smollm2-8k] [--json]

Each measurement runs in a fresh process (multiprocessing, spawn), so its peak resident
set (``VmHWM``, :func:`attnlab._proc.peak_rss_bytes`) is its own, model loading included:

* ``smollm2_exact``: SmolLM2 on the first ``--tokens`` tokens of attnlab's long text (its
  course, or ``$ATTNLAB_ARTICLES``): max |trace rows - eager ``output_attentions``| over
  every layer, head and row; max |logits under capture - eager logits|; seconds of each.
* ``smollm2_trace``: the same trace alone (time, peak memory, file bytes).
* ``gpt_trace``: an attnlab GPT (2 layers, 4 heads of 16, 2 key/value heads, RoPE) at
  ``--gpt-tokens`` tokens (target: <= 2 GB peak at 32,768 tokens).
* with ``--smollm2-8k``: SmolLM2's whole window (8,192 tokens): the trace and a plain SDPA
  forward of the causal LM on the same ids, each as a whole process (minutes).

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

from attnlab._proc import in_fresh_process


def _peak_mib() -> float:
    from attnlab._proc import peak_rss_bytes  # this process's own (VmHWM)

    return peak_rss_bytes() / 2**20


def _smollm2_ids(loaded: Any, n: int) -> list[int]:
    from attnlab.report.long_text import long_text

    ids = loaded.tokenizer(long_text().text)["input_ids"]
    if len(ids) < n:
        ids = (ids * (n // len(ids) + 1))
    return ids[:n]


def smollm2_exact(n: int) -> dict[str, Any]:
    import torch

    from attnlab.models import load
    from attnlab.tracing import capture
    from attnlab.tracing.tracer import trace

    loaded = load("smollm2", progress=False)
    ids = _smollm2_ids(loaded, n)
    x = torch.tensor([ids])
    t0 = time.perf_counter()
    t = trace(loaded, ids)
    trace_s = time.perf_counter() - t0
    with torch.no_grad():
        t0 = time.perf_counter()
        ref = loaded.model(input_ids=x, output_attentions=True)
        eager_s = time.perf_counter() - t0
        rows_err = max(float((t.head_weights(li, h) - ref.attentions[li][0, h]).abs().max())
                       for li in range(t.num_layers) for h in range(t.num_heads))
        with capture(loaded.model):
            t0 = time.perf_counter()
            logits = loaded.model(input_ids=x).logits
            capture_s = time.perf_counter() - t0
    return {"tokens": n, "rows_max_abs_err": rows_err,
            "logits_max_abs_err": float((logits - ref.logits).abs().max()),
            "trace_seconds": trace_s, "eager_output_attentions_seconds": eager_s,
            "capture_forward_seconds": capture_s, "peak_mib": _peak_mib()}


def smollm2_trace(n: int) -> dict[str, Any]:
    from attnlab.models import load
    from attnlab.tracing.tracer import trace

    t0 = time.perf_counter()
    loaded = load("smollm2", progress=False)
    ids = _smollm2_ids(loaded, n)
    t1 = time.perf_counter()
    t = trace(loaded, ids)
    t2 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        size = t.save(Path(d) / "t.safetensors").stat().st_size
    t3 = time.perf_counter()
    return {"tokens": n, "load_seconds": t1 - t0, "trace_seconds": t2 - t1,
            "save_seconds": t3 - t2, "process_seconds": t3 - t0, "file_bytes": size,
            "peak_mib": _peak_mib()}


def smollm2_plain_sdpa(n: int) -> dict[str, Any]:
    import torch

    from attnlab.models import load

    t0 = time.perf_counter()
    loaded = load("smollm2", progress=False)
    ids = _smollm2_ids(loaded, n)
    loaded.model.set_attn_implementation("sdpa")
    t1 = time.perf_counter()
    with torch.no_grad():
        loaded.model(input_ids=torch.tensor([ids]), use_cache=False)
    t2 = time.perf_counter()
    return {"tokens": n, "load_seconds": t1 - t0, "forward_seconds": t2 - t1,
            "process_seconds": t2 - t0, "peak_mib": _peak_mib()}


def gpt_trace(n: int) -> dict[str, Any]:
    import torch

    from attnlab.nn.transformer import GPT, GPTConfig
    from attnlab.tracing.tracer import trace

    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=64, block_size=n, num_layers=2, num_heads=4,
                        embed_dim=64, num_kv_heads=2, positional="rope")).eval()
    ids = torch.randint(0, 64, (n,)).tolist()
    t0 = time.perf_counter()
    t = trace(gpt, ids)
    t1 = time.perf_counter()
    pooled = t.pooled(1, 0, max(1, n // 512))
    t2 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        size = t.save(Path(d) / "t.safetensors").stat().st_size
    dense_gib = t.num_layers * t.num_heads * n * n * 4 / 2**30
    return {"tokens": n, "trace_seconds": t1 - t0, "pooled_one_head_seconds": t2 - t1,
            "pooled_rows_sum_max_err": float((pooled.sum(-1) - 1).abs().max()),
            "file_bytes": size, "dense_weights_would_be_gib": dense_gib,
            "peak_mib": _peak_mib()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=1024, help="SmolLM2 exactness run")
    ap.add_argument("--gpt-tokens", type=int, default=32768)
    ap.add_argument("--smollm2-8k", action="store_true", help="also the 8,192-token runs")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    runs: list[tuple[str, Any, int]] = [
        ("smollm2_exact", smollm2_exact, args.tokens),
        ("smollm2_trace", smollm2_trace, args.tokens),
        ("gpt_trace", gpt_trace, args.gpt_tokens),
    ]
    if args.smollm2_8k:
        runs += [("smollm2_trace_8k", smollm2_trace, 8192),
                 ("smollm2_plain_sdpa_8k", smollm2_plain_sdpa, 8192)]
    results: dict[str, Any] = {}
    for name, fn, n in runs:
        print(f"[long_context] {name} ({n} tokens) ...", file=sys.stderr, flush=True)
        results[name] = in_fresh_process(fn, n)
        if not args.json:
            print(name, json.dumps(results[name], indent=1))
    if args.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
