"""Streamed traces against traces in memory: SmolLM2 at 8,192 tokens (and 32,768).

    .venv/bin/python benchmarks/trace_streaming.py [--tokens 8192 32768] [--memory-tokens 8192]
                                                  [--dir DIR [--keep]] [--json]

The text is attnlab's long text (``attnlab.report.long_text.long_text()``), repeated as
needed and cut to N tokens; past SmolLM2's window (8,192) the trace is made with
``max_tokens=N`` (rotary positions: the model computes them, but was never trained there).
Each run is a fresh process (multiprocessing, spawn), so its peak resident set (``VmHWM``,
:func:`attnlab._proc.peak_rss_bytes`) is its own:

* ``stream``: ``trace(loaded, ids, out=FILE)``: each layer written to the file as it is
  recorded (format version 5), the trace returned opened from it;
* ``memory``: ``trace(loaded, ids)`` then ``save(FILE)`` (format version 4).

Measured: the model's loading, the tracing (and saving) wall time, the peak resident set of
the whole process (model included) and its growth over the resident set after loading, the
file's size, and the time of an exact row (``weights_rows``: one query of a middle layer
against every key) from the file opened memory-mapped: the first read of the layer (which,
for a version-5 file, checks that layer's chunks of q, k and lse against their sha256) and
the median of the next 201 rows of that layer (the last ones: the longest). For ``memory``,
also that median from the trace in memory.

A harness, not a test: it prints what it measured; nothing is asserted. Needs the SmolLM2
weights offline (``attnlab.models.load("smollm2")``) and, at 32,768 tokens, about 4 GB of
disk and many minutes of CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from attnlab._proc import in_fresh_process, load_average


def _mib(n: float) -> float:
    return round(n / 2**20, 1)


def _ids(loaded: Any, n: int) -> list[int]:
    from attnlab.report.long_text import long_text

    ids = loaded.tokenizer(long_text().text)["input_ids"]
    return (ids * (n // len(ids) + 1))[:n]


def _row_seconds(t: Any, layer: int, head: int, rows: range) -> float:
    """The median seconds of ``weights_rows`` over ``rows``, one row a call."""
    times = []
    for row in rows:
        t0 = time.perf_counter()
        w = t.weights_rows(layer, head, [row])
        times.append(time.perf_counter() - t0)
        if abs(float(w.sum()) - 1.0) > 1e-4:
            raise AssertionError(f"row {row} of layer {layer}, head {head} sums to "
                                 f"{float(w.sum())}")
    return sorted(times)[len(times) // 2]


def run(mode: str, n: int, folder: str) -> dict[str, Any]:
    """One measurement in this (fresh) process: ``mode`` "stream" or "memory"."""
    import torch

    from attnlab._proc import peak_rss_bytes, reset_peak_rss
    from attnlab.models import load
    from attnlab.tracing.attention import AttentionTrace
    from attnlab.tracing.tracer import BeyondWindowWarning, trace

    t0 = time.perf_counter()
    loaded = load("smollm2", progress=False)
    ids = _ids(loaded, n)
    loaded_rss = peak_rss_bytes()
    reset = reset_peak_rss()
    base = peak_rss_bytes()
    path = Path(folder) / f"{mode}-{n}.safetensors"
    max_tokens = n if n > int(loaded.max_length) else None
    t1 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BeyondWindowWarning)
        if mode == "stream":
            t = trace(loaded, ids, out=path, max_tokens=max_tokens)
            t2 = t3 = time.perf_counter()
        else:
            t = trace(loaded, ids, max_tokens=max_tokens)
            t2 = time.perf_counter()
            t.save(path)
            t3 = time.perf_counter()
    peak = peak_rss_bytes()
    layer, head = t.num_layers // 2, t.num_heads // 2
    out: dict[str, Any] = {
        "mode": mode, "tokens": n, "layers": t.num_layers, "load_seconds": t1 - t0,
        "trace_seconds": t2 - t1, "save_seconds": t3 - t2, "trace_and_file_seconds": t3 - t1,
        "peak_process_mib": _mib(peak), "loaded_model_peak_mib": _mib(loaded_rss),
        "peak_growth_after_load_mib": _mib(peak - base) if reset else None,
        "file_bytes": path.stat().st_size, "torch_threads": torch.get_num_threads()}
    warm = range(n - 202, n - 1)
    if mode == "memory":
        out["row_in_memory_median_seconds"] = _row_seconds(t, layer, head, warm)
    del t
    opened = AttentionTrace.open(path)
    out["row_opened_first_seconds"] = _row_seconds(opened, layer, head, range(n - 1, n))
    out["row_opened_median_seconds"] = _row_seconds(opened, layer, head, warm)
    out["format_version"] = 5 if opened._layer_digests is not None else 4
    return out


@contextlib.contextmanager
def _kept(folder: str) -> Any:
    Path(folder).mkdir(parents=True, exist_ok=True)
    yield folder


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[8192],
                    help="lengths streamed (e.g. 8192 32768)")
    ap.add_argument("--memory-tokens", type=int, nargs="*", default=[8192],
                    help="lengths traced in memory, for comparison")
    ap.add_argument("--dir", default=None, help="where the trace files go (default: a temp "
                    "folder, deleted at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the streamed files in --dir "
                    "(stream-N.safetensors), e.g. for benchmarks/past_memory.py")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.keep and args.dir is None:
        ap.error("--keep needs --dir (the folder the files stay in)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    runs = [("memory", n) for n in args.memory_tokens] + [("stream", n) for n in args.tokens]
    results: dict[str, Any] = {}
    with (tempfile.TemporaryDirectory(dir=args.dir) if not args.keep
          else _kept(args.dir)) as folder:
        for mode, n in runs:
            print(f"[trace_streaming] {mode} {n} tokens (load {load_average()}) ...",
                  file=sys.stderr, flush=True)
            before = load_average()
            got = in_fresh_process(run, mode, n, folder)
            got["loadavg_before"], got["loadavg_after"] = before, load_average()
            results[f"{mode}_{n}"] = got
            if not args.json:
                print(f"{mode}_{n}", json.dumps(got, indent=1), flush=True)
            if not (args.keep and mode == "stream"):
                (Path(folder) / f"{mode}-{n}.safetensors").unlink(missing_ok=True)
    if args.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
