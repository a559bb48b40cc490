"""The explorer on a long input: page size, first render, and the server's request latency.

    .venv/bin/python benchmarks/explorer_long.py [--source smollm2|synthetic] [--tokens 8192]
        [--trace FILE] [--save FILE] [--repeats 3] [--requests 30] [--json]

1. A trace of ``--tokens`` tokens: SmolLM2-135M (30 layers x 9 heads, 3 key/value heads,
   d = 64) on attnlab's long text (its course, or the ``*.txt`` files of
   ``$ATTNLAB_ARTICLES``) cut to the length (``smollm2``; the
   real model, offline), or a synthetic trace of the same shape (``synthetic``: seeded
   q/k with local, sink and diffuse heads), or a saved trace (``--trace``).
2. ``attnlab explore``'s page for it: build time, peak memory of this process, HTML bytes
   (target <= 3 MB at 8,192 tokens), block size and encoding of the pooled maps.
3. First render in headless Chromium (target <= 1.5 s, no console error, no request):
   ``page`` = navigation start to the explorer drawn, ``explorer`` = its own decode +
   first view; medians over ``--repeats`` loads after one warm-up.
4. ``attnlab serve --trace``'s API over HTTP (uvicorn on 127.0.0.1, torch on 2 threads):
   latency of an exact row (+ top 8), an exact tile (one block x one block of the page)
   and the QK view's data, ``--requests`` random queries each, after warm-up; median,
   95th percentile and max (target <= 200 ms a request at 8,192 tokens on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path


def _peak_mb() -> float:
    from attnlab._proc import peak_rss_bytes  # this process's own (VmHWM)

    return peak_rss_bytes() / 2**20


def smollm2_trace(n: int):
    """SmolLM2 on the long text, cut to ``n`` tokens (q, k, lse kept; pieces unmerged)."""
    from attnlab.models import load
    from attnlab.report.long_text import long_text
    from attnlab.tracing.tracer import trace

    loaded = load("smollm2", progress=False)
    ids = loaded.tokenizer(long_text().text)["input_ids"][:n]
    if len(ids) < n:
        raise SystemExit(f"the long text gives {len(ids)} tokens, fewer than {n}")
    t = trace(loaded, ids, merge_pieces=False, progress=True)
    t.text = None  # ids in, no text: the page carries the tokens
    return t


def synthetic_trace(n: int, *, layers: int = 30, heads: int = 9, kv_heads: int = 3,
                    d: int = 64, seed: int = 0):
    """SmolLM2's shape with seeded q/k: local heads (a slowly turning positional direction
    shared by q and k), a sink on key 0, sharpness growing with the head index."""
    import torch

    from attnlab.core.scores import ScoreShape, row_logsumexp
    from attnlab.tracing.attention import AttentionTrace

    g = torch.Generator().manual_seed(seed)
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    freq = torch.logspace(-3, -0.5, d // 2)[None, :]
    wave = torch.cat([torch.sin(pos * freq), torch.cos(pos * freq)], -1)  # (n, d)
    q = torch.empty(layers, heads, n, d)
    k = torch.empty(layers, kv_heads, n, d)
    sharp = torch.linspace(0.3, 1.6, heads)[:, None, None]
    for li in range(layers):
        k[li] = torch.randn(kv_heads, n, d, generator=g) * 0.7 + 3 * wave
        k[li, :, 0] += 4 * torch.randn(d, generator=g)
        q[li] = (torch.randn(heads, n, d, generator=g) * 0.7 + 3 * wave) * sharp
    shape = ScoreShape(scale=d ** -0.5, causal=True)
    lse = torch.stack([row_logsumexp(q[li], k[li], shape) for li in range(layers)])
    return AttentionTrace(tokens=[f" w{i}" for i in range(n)], q=q, k=k, lse=lse,
                          shapes=shape, model=f"synthetic SmolLM2-shaped, {n} tokens")


def first_render(path: Path, repeats: int) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        raise SystemExit("chromium not found (apt-get install -y chromium)")
    page_ms, own_ms, errors, outside = [], [], [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, headless=True,
                                    args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            for i in range(repeats + 1):
                ctx = browser.new_context(viewport={"width": 1300, "height": 900})
                ctx.route("**/*", lambda route: route.continue_() if route.request.url
                          .startswith(("file:", "data:", "blob:", "about:"))
                          else (outside.append(route.request.url), route.abort()))
                pg = ctx.new_page()
                pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                pg.on("pageerror", lambda e: errors.append(str(e)))
                pg.goto(path.as_uri())
                pg.wait_for_selector(".attnlab-explorer[data-ready]", timeout=120_000)
                nav = pg.evaluate("performance.now()")
                own = float(pg.get_attribute(".attnlab-explorer", "data-first-render-ms"))
                ctx.close()
                if i:  # the first load warms the browser up
                    page_ms.append(nav)
                    own_ms.append(own)
        finally:
            browser.close()
    return {"first_render_page_ms": statistics.median(page_ms),
            "first_render_explorer_ms": statistics.median(own_ms),
            "console_errors": len(errors), "outside_requests": len(outside)}


def latency(trace, block: int, requests: int) -> dict[str, dict[str, float]]:
    """Milliseconds per request of /rows, /tile and /qk over HTTP, random queries."""
    import socket

    import torch
    import uvicorn

    from attnlab.serve.trace_api import create_trace_app

    torch.set_num_threads(2)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_trace_app([trace]), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}/api/traces/t1"
    rng = random.Random(0)
    n, nl, nh = trace.seq_len, trace.num_layers, trace.num_heads
    out: dict[str, dict[str, float]] = {}
    try:
        kinds = {
            "row": lambda l_, h, i: f"rows?layer={l_}&head={h}&queries={i}&top=8",
            "tile": lambda l_, h, i: (f"tile?layer={l_}&head={h}&rows={i // block * block}:"
                                      f"{min(n, i // block * block + block)}&cols=0:"
                                      f"{min(n, block)}"),
            "qk": lambda l_, h, i: f"qk?layer={l_}&head={h}&query={i}&top=48",
        }
        for name, url in kinds.items():
            times, size = [], 0
            for r in range(requests + 3):
                l_, h, i = rng.randrange(nl), rng.randrange(nh), rng.randrange(n)
                t0 = time.perf_counter()
                with urllib.request.urlopen(f"{base}/{url(l_, h, i)}", timeout=60) as resp:
                    body = resp.read()
                if r >= 3:  # warm-up requests are not counted
                    times.append((time.perf_counter() - t0) * 1000)
                    size = len(body)
            times.sort()
            out[name] = {"median_ms": statistics.median(times),
                         "p95_ms": times[min(len(times) - 1, math.ceil(0.95 * len(times)) - 1)],
                         "max_ms": times[-1], "bytes": size}
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", choices=("smollm2", "synthetic"), default="smollm2")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--trace", default=None, metavar="FILE", help="a saved trace instead")
    ap.add_argument("--save", default=None, metavar="FILE", help="keep the trace made")
    ap.add_argument("--only-save", action="store_true",
                    help="stop after saving the trace (measure the explorer in a second run "
                    "with --trace FILE, so that its peak memory is its own)")
    ap.add_argument("--page", default=None, metavar="FILE.html", help="keep the page")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(2)
    from attnlab.tracing.attention import AttentionTrace
    from attnlab.viz.explorer import Explorer

    row: dict[str, object] = {}
    t0 = time.perf_counter()
    if args.trace:
        trace = AttentionTrace.load(args.trace)
        row["source"] = f"file {args.trace}"
    elif args.source == "smollm2":
        trace = smollm2_trace(args.tokens)
        row["source"] = "SmolLM2-135M on the seed articles"
    else:
        trace = synthetic_trace(args.tokens)
        row["source"] = "synthetic, SmolLM2's shape"
    row["trace_s"] = time.perf_counter() - t0
    row["trace_peak_mb"] = _peak_mb()
    if args.save:
        trace.save(args.save)
        if args.only_save:
            print(json.dumps({k: row[k] for k in ("source", "trace_s", "trace_peak_mb")}))
            return 0
    row.update({"tokens": trace.seq_len, "layers": trace.num_layers, "heads": trace.num_heads,
                "kv_heads": trace.num_kv_heads})
    print(f"trace: {trace!r} in {row['trace_s']:.0f} s", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        ex = Explorer(trace)
        ex.payload(progress=True)
        path = ex.save(Path(tmp) / "long.html")
        tr = ex.payload()["traces"][0]
        if args.page:
            shutil.copyfile(path, args.page)
        row.update({"explore_s": time.perf_counter() - t0, "explore_peak_mb": _peak_mb(),
                    "html_bytes": path.stat().st_size, "block": tr["block"],
                    "blocks": len(tr["row_blocks"] or []), "maps": tr["weights"]["dtype"]})
        print(f"page: {row['html_bytes'] / 1e6:.2f} MB, blocks of {row['block']} tokens "
              f"({row['blocks']} a side, {row['maps']}), built in {row['explore_s']:.0f} s",
              file=sys.stderr)
        row.update(first_render(path, args.repeats))
    row["latency"] = latency(trace, int(row["block"]), args.requests)
    if args.json:
        print(json.dumps(row, indent=2))
    else:
        lat = row["latency"]
        print(f"{row['source']}: {row['tokens']} tokens, {row['layers']} x {row['heads']} heads\n"
              f"  page {row['html_bytes'] / 1e6:.2f} MB (blocks of {row['block']} tokens, "
              f"{row['maps']}), built in {row['explore_s']:.0f} s, peak "
              f"{row['explore_peak_mb']:.0f} MB\n  first render "
              f"{row['first_render_page_ms']:.0f} ms page / "
              f"{row['first_render_explorer_ms']:.0f} ms explorer, console errors "
              f"{row['console_errors']}, requests {row['outside_requests']}\n  " + ", ".join(
                  f"{k} {v['median_ms']:.0f} ms median / {v['p95_ms']:.0f} p95 / "
                  f"{v['max_ms']:.0f} max" for k, v in lat.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
