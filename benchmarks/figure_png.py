"""A figure as a PNG: matplotlib's ``savefig(bbox_inches="tight")`` (two drawings) against
``attnlab._render.figure_png`` (one), on the figures the report and ``attnlab plot`` draw.

    .venv/bin/python benchmarks/figure_png.py [--rounds 5] [--dpi 90] [--json]

The figures: five experiments' (at small sizes: what they draw does not depend on the
sizes) and the five ``attnlab plot`` kinds of MiniLM on one sentence (when the model
package is installed), each saved both ways in turn, the order alternating per round, in
one process on one thread; both ways encode the same way (RGB where opaque, Pillow's
``optimize``), so the difference is the drawing. Printed per figure: the median seconds of
each way and their ratio, the image sizes (equal), then the sums. A harness, not a test:
nothing is asserted.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _figures() -> list[tuple[str, object]]:
    from attnlab.experiments import run

    figs: list[tuple[str, object]] = []
    for name, kw in [("qk-variance", dict(pairs=2**14, dims=(16, 64))),
                     ("softmax-saturation", dict(rows=64)),
                     ("pe-frequency-roles", dict(samples=200)),
                     ("linear-attention", dict(lengths=(128, 256), repeats=1, n_exact=20)),
                     ("contextualisation", dict(permutations=19))]:
        figs.append((name, run(name, **kw).figure))
    try:
        from attnlab.models import load
        from attnlab.tracing import one_stack, trace
        from attnlab.viz.figures import KINDS, plot
    except ImportError:
        return figs
    try:
        model = load("minilm", progress=False)
    except Exception:  # the model package is not installed
        return figs
    t = one_stack(trace(model, "The animal didn't cross the street because it was too tired."))
    figs += [(f"plot {kind}", plot(t, kind, 1, 2)) for kind in KINDS]
    return figs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dpi", type=int, default=90)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import torch
    from PIL import Image

    from attnlab._render import _two_passes, figure_png

    torch.set_num_threads(1)
    ways = {"savefig tight (two drawings)": lambda f: _two_passes(f, args.dpi, True),
            "figure_png (one drawing)": lambda f: figure_png(f, dpi=args.dpi)}
    rows = []
    for name, fig in _figures():
        times: dict[str, list[float]] = {w: [] for w in ways}
        sizes = {}
        for r in range(args.rounds + 1):  # the first round warms up
            order = list(ways) if r % 2 == 0 else list(reversed(ways))
            for way in order:
                t0 = time.perf_counter()
                data = ways[way](fig)
                dt = time.perf_counter() - t0
                if r:
                    times[way].append(dt)
                sizes[way] = Image.open(io.BytesIO(data)).size
        two, one = (statistics.median(times[w]) for w in ways)
        rows.append({"figure": name, "two_s": two, "one_s": one, "ratio": one / two,
                     "sizes": sorted(set(sizes.values()))})
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"dpi": args.dpi, "rounds": args.rounds, "loadavg_1min": load,
                          "figures": rows}, indent=1))
        return
    print(f"dpi {args.dpi}, {args.rounds} rounds, medians; load average {load:.2f}")
    for row in rows:
        print(f"{row['figure']:22s} {row['two_s']:.3f} s -> {row['one_s']:.3f} s "
              f"({row['ratio']:.2f}x)  {row['sizes']}")
    two, one = sum(r["two_s"] for r in rows), sum(r["one_s"] for r in rows)
    print(f"{'all':22s} {two:.3f} s -> {one:.3f} s ({one / two:.2f}x)")


if __name__ == "__main__":
    main()
