"""Explorer size and first-render time on MiniLM (6 layers × 12 heads), with q/k stored.

    .venv/bin/python benchmarks/explorer_size.py [--tokens 128 512] [--repeats 3] [--json]

For each length: the HTML size (target <= 3 MB at 128 tokens) and the first render in
headless Chromium (target <= 1.5 s at 128 tokens): ``page`` = navigation start to the
explorer drawn, ``explorer`` = the explorer's own decode + first view. Medians of the
repeats, after one warm-up load. Then a view switch at that length (is it still usable?).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

WORDS = ("the quick brown fox jumps over the lazy dog while attention weights flow between "
         "every token of the sentence").split()


def text_of(n_tokens: int) -> str:
    """English text that MiniLM tokenizes to exactly ``n_tokens`` (with [CLS] and [SEP])."""
    from attnlab.models import load

    tok = load("minilm", progress=False).tokenizer
    words = [WORDS[i % len(WORDS)] for i in range(n_tokens)]
    while len(tok(" ".join(words))["input_ids"]) > n_tokens:
        words.pop()
    return " ".join(words)


def measure(path: Path, repeats: int) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        raise SystemExit("chromium not found (apt-get install -y chromium)")
    page_ms, own_ms, switch_ms = [], [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, headless=True,
                                    args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            for i in range(repeats + 1):
                pg = browser.new_page(viewport={"width": 1300, "height": 900})
                t0 = time.perf_counter()
                pg.goto(path.as_uri())
                pg.wait_for_selector(".attnlab-explorer[data-ready]", timeout=60_000)
                wall = (time.perf_counter() - t0) * 1000
                own = float(pg.get_attribute(".attnlab-explorer", "data-first-render-ms"))
                nav = pg.evaluate("performance.now()")
                t1 = time.perf_counter()
                pg.click(".ax-tab[data-view=matrix]")
                pg.click(".ax-tab[data-view=head]")
                sw = (time.perf_counter() - t1) * 1000
                pg.close()
                if i == 0:
                    continue  # warm-up
                page_ms.append(min(wall, nav))
                own_ms.append(own)
                switch_ms.append(sw / 2)
        finally:
            browser.close()
    return {"first_render_page_ms": statistics.median(page_ms),
            "first_render_explorer_ms": statistics.median(own_ms),
            "view_switch_ms": statistics.median(switch_ms)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from attnlab.viz.explorer import explore

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.tokens:
            t0 = time.perf_counter()
            ex = explore("minilm", text_of(n))
            path = ex.save(Path(tmp) / f"minilm-{n}.html")
            build_s = time.perf_counter() - t0
            tr = ex.payload()["traces"][0]
            row = {"tokens": ex.traces[0].seq_len, "html_mb": path.stat().st_size / 1e6,
                   "build_s": build_s, "pooled": tr["pooled"],
                   "weights": tr["weights"]["dtype"],
                   "qk": (f"{tr['qk']['dtype']} x {len(tr['qk']['heads'])} heads" if tr["qk"]
                          else f"none ({tr['qk_missing']})"),
                   "qk_float16_max_dp": max(tr["qk"]["storage_error"]) if tr["qk"] else 0.0,
                   **measure(path, args.repeats)}
            rows.append(row)
            if not args.json:
                print(json.dumps(row), file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['tokens']:4d} tokens: {r['html_mb']:.2f} MB (weights {r['weights']}, "
                  f"q/k {r['qk']}, max |Δp| {r['qk_float16_max_dp']:.1e}), first render "
                  f"{r['first_render_page_ms']:.0f} ms page / "
                  f"{r['first_render_explorer_ms']:.0f} ms explorer, view switch "
                  f"{r['view_switch_ms']:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
