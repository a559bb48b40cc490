"""Traces larger than memory, read back: what a streamed trace file costs to open and to
analyse, on one process and on two, and what streaming costs a full-depth model of a large
family.

    .venv/bin/python benchmarks/past_memory.py --file FILE [--json]
    .venv/bin/python benchmarks/past_memory.py --wide-tokens N [--dir DIR] [--json]

``--file``: a trace file (e.g. SmolLM2 at 32,768 tokens, streamed by
``benchmarks/trace_streaming.py --tokens 32768 --memory-tokens --dir DIR --keep``). Each
measurement is a fresh process, so its peak resident set (``VmHWM``) is its own:

* ``open``: :meth:`AttentionTrace.open` (header and shapes), an exact row of a middle layer
  (first read, which checks that layer's chunks of a version-5 file, and the median of 51
  more) and one head's pooled map (64 x 64 blocks, exact: every weight of the head, tile by
  tile);
* ``diagnose_1`` / ``diagnose_2``: ``attnlab diagnose --trace FILE --json`` alone and under
  ``torchrun --standalone --nproc_per_node=2`` (``OMP_NUM_THREADS=1`` per process, the
  default of torchrun, against the 2 threads of the one process), wall time of the whole
  command, and the scores of the two compared (max absolute difference);
* ``explore_1`` / ``explore_2``: ``attnlab explore --trace FILE --out PAGE.html`` the same
  way, and whether the two pages' data are equal.

``--wide-tokens N``: a random-weight Llama with the attention of a large model, full depth
(``--wide-shape``: ``llama3-8b``, 32 layers, 32 query and 8 key/value heads of 128, or
``llama3-70b``, 80 layers, 64 query and 8 key/value heads of 128; hidden size 256 and
feed-forward 512 instead of 4,096/8,192 and 14,336/28,672, so that it runs here) traced at
N tokens with ``trace(..., out=FILE)``: wall time, peak resident set, file size, and one
layer's share of the file (what capture keeps). At 8,192 tokens the ``llama3-70b`` trace is
27 GB, more than this machine's memory; ``llama3-405b`` (126 layers, 128 query and 8
key/value heads of 128) is 28.7 GB at 3,072 tokens, for a third of the arithmetic.
``--measure`` then opens and analyses that file as ``--file`` does (``--procs 1`` and
``--no-explore`` leave out the two-process runs and the explorer).

A harness, not a test: it prints what it measured; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from attnlab._proc import load_average


def _opened(path: str) -> dict[str, Any]:
    from attnlab._proc import peak_rss_bytes
    from attnlab.tracing.attention import AttentionTrace

    t0 = time.perf_counter()
    t = AttentionTrace.open(path)
    out: dict[str, Any] = {"open_seconds": time.perf_counter() - t0, "tokens": t.seq_len,
                           "layers": t.num_layers, "heads": t.num_heads}
    layer, head, n = t.num_layers // 2, t.num_heads // 2, t.seq_len
    t0 = time.perf_counter()
    t.weights_rows(layer, head, [n - 1])
    out["row_first_seconds"] = time.perf_counter() - t0
    times = []
    for row in range(n - 52, n - 1):
        t0 = time.perf_counter()
        t.weights_rows(layer, head, [row])
        times.append(time.perf_counter() - t0)
    out["row_median_seconds"] = sorted(times)[len(times) // 2]
    t0 = time.perf_counter()
    m = t.pooled(layer + 1, head, -(-n // 64))  # 64 x 64 blocks
    out["pooled_head_map_seconds"] = time.perf_counter() - t0
    out["pooled_shape"] = list(m.shape)
    out["peak_rss_mib"] = round(peak_rss_bytes() / 2**20, 1)
    return out


def _command(args: list[str], procs: int) -> tuple[float, subprocess.CompletedProcess]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if procs > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={procs}", "-m", "attnlab", *args]
        env["OMP_NUM_THREADS"] = "1"
    else:
        cmd = [sys.executable, "-m", "attnlab", *args]
    t0 = time.perf_counter()
    run = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{run.stderr[-3000:]}")
    return wall, run


def _scores(doc: dict[str, Any]) -> dict[tuple[int, int, str], float]:
    skip = {"layer", "head", "cluster", "roles"}
    return {(r["layer"], r["head"], k): v for r in doc["heads"] for k, v in r.items()
            if k not in skip and isinstance(v, (int, float))}


def _payload(page: str) -> Any:
    import re

    m = re.search(r'<script type="application/json" id="([\w-]+)-data">(.*?)</script>',
                  page, re.S)
    data = json.loads(m.group(2))
    data.pop("uid")
    return data


def _file_measures(path: str, procs_list: tuple[int, ...] = (1, 2),
                   explore: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"file": path, "file_bytes": Path(path).stat().st_size}
    ctx = mp.get_context("spawn")
    with ctx.Pool(1, maxtasksperchild=1) as pool:
        out["open"] = {**pool.apply(_opened, (path,)), "load": load_average()}
    docs = {}
    for procs in procs_list:
        before = load_average()
        wall, run = _command(["diagnose", "--trace", path, "--json"], procs)
        docs[procs] = json.loads(run.stdout)
        out[f"diagnose_{procs}"] = {"wall_seconds": wall, "load_before": before,
                                    "load_after": load_average(),
                                    "peak_rss_rank0_mib": round(
                                        docs[procs]["run"]["peak_rss_bytes"] / 2**20, 1),
                                    "num_clusters": docs[procs].get("num_clusters"),
                                    "similarity_block":
                                        docs[procs]["meta"].get("similarity_block")}
    if len(docs) == 2:
        one, two = _scores(docs[1]), _scores(docs[2])
        out["diagnose_max_abs_difference"] = max(abs(one[k] - two[k]) for k in one)
    if not explore:
        return out
    with tempfile.TemporaryDirectory() as d:
        pages = {}
        for procs in procs_list:
            page = Path(d) / f"page-{procs}.html"
            before = load_average()
            wall, run = _command(["explore", "--trace", path, "--out", str(page), "--json"],
                                 procs)
            info = json.loads(run.stdout)
            pages[procs] = _payload(page.read_text(encoding="utf-8"))
            out[f"explore_{procs}"] = {"wall_seconds": wall, "load_before": before,
                                       "load_after": load_average(), "page_bytes": info["bytes"],
                                       "peak_rss_rank0_mib": round(
                                           info["peak_memory_bytes"] / 2**20, 1)}
        if len(pages) == 2:
            out["explore_pages_equal"] = pages[1] == pages[2]
    return out


#: (layers, query heads, key/value heads, head size) of the wide models' attention.
WIDE = {"llama3-8b": (32, 32, 8, 128), "llama3-70b": (80, 64, 8, 128),
        "llama3-405b": (126, 128, 8, 128)}


def _wide(n: int, folder: str, shape: str) -> dict[str, Any]:
    import torch
    import transformers

    from attnlab._proc import peak_rss_bytes
    from attnlab.tracing import trace

    layers, heads, kv, d = WIDE[shape]
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv, head_dim=d,
        max_position_embeddings=max(n, 8192))
    cfg._attn_implementation = "eager"
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(1, 1000, (n,), generator=torch.Generator().manual_seed(0)).tolist()
    base = peak_rss_bytes()
    path = Path(folder) / f"wide-{n}.safetensors"
    t0 = time.perf_counter()
    t = trace(model, ids, out=path)
    wall = time.perf_counter() - t0
    size = path.stat().st_size
    per_layer = 4 * n * (heads * d + 2 * kv * d + heads)
    return {"shape": shape, "tokens": n, "layers": t.num_layers, "heads": t.num_heads,
            "kv_heads": t.num_kv_heads, "head_dim": t.head_dim, "trace_seconds": wall,
            "file_bytes": size, "one_layer_bytes": per_layer,
            "peak_rss_mib": round(peak_rss_bytes() / 2**20, 1),
            "rss_before_trace_mib": round(base / 2**20, 1),
            "torch_threads": torch.get_num_threads()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", default=None, help="a trace file to open and analyse")
    ap.add_argument("--wide-tokens", type=int, default=None, metavar="N",
                    help="trace the wide random model at N tokens")
    ap.add_argument("--wide-shape", choices=sorted(WIDE), default="llama3-70b")
    ap.add_argument("--dir", default=None, help="where the wide model's file goes")
    ap.add_argument("--measure", action="store_true",
                    help="then open and analyse the wide model's file as --file does")
    ap.add_argument("--procs", default="1,2",
                    help="the process counts diagnose and explore run on (default 1,2)")
    ap.add_argument("--no-explore", action="store_true", help="leave explore out")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.file is None and args.wide_tokens is None:
        ap.error("give --file FILE and/or --wide-tokens N")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results: dict[str, Any] = {}
    procs = tuple(int(p) for p in args.procs.split(","))
    if args.file is not None:
        results["file"] = _file_measures(args.file, procs, not args.no_explore)
    if args.wide_tokens is not None:
        with tempfile.TemporaryDirectory(dir=args.dir) as d:
            before = load_average()
            ctx = mp.get_context("spawn")
            with ctx.Pool(1, maxtasksperchild=1) as pool:
                results["wide"] = pool.apply(_wide, (args.wide_tokens, d, args.wide_shape))
            results["wide"]["load_before"], results["wide"]["load_after"] = before, load_average()
            if args.measure:
                path = str(Path(d) / f"wide-{args.wide_tokens}.safetensors")
                results["wide_file"] = _file_measures(path, procs, not args.no_explore)
    print(json.dumps(results, indent=None if args.json else 1))
    return results


if __name__ == "__main__":
    main()
