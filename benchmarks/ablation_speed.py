"""The key ablation of ``attnlab report`` (attnlab.analysis.ablation.ablate_keys) on SmolLM2,
timed: 512 tokens of attnlab's long text, the targets rows 384..510, 128 keys spread evenly
over [0, 511) (offline weights).

    .venv/bin/python benchmarks/ablation_speed.py [--old FILE] [--first old|new]
        [--tokens 512] [--keys 128] [--json]

``--old`` names another copy of ``ablation.py`` (the module as it was, say) to time beside
the installed one, on the same input, and to compare with it: the largest difference of
the effects and both clean losses. Each run is a child process of its own, so its peak
resident memory (VmHWM) is its own; the model's load is timed apart from the ablation.
The machine's load average is printed beside each timing: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def _module(path: str | None):
    """The installed ablation module, or the copy at ``path``."""
    if path is None:
        from attnlab.analysis import ablation

        return ablation
    import importlib.util

    spec = importlib.util.spec_from_file_location("ablation_under_test", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--old: {path} is not a Python module")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (its dataclasses look their module up)
    spec.loader.exec_module(mod)
    return mod


def _child(args: argparse.Namespace) -> int:
    """One timed ablation, written to ``args.save`` as JSON."""
    import torch

    from attnlab._proc import peak_rss_bytes
    from attnlab.analysis.attribute import _spread
    from attnlab.models import load
    from attnlab.report.long_text import long_text

    torch.set_num_threads(os.cpu_count() or 1)
    mod = _module(args.module)
    t0 = time.perf_counter()
    m = load("smollm2", progress=False)
    ids = m.tokenizer(long_text().text)["input_ids"][: args.tokens]
    n = len(ids)
    targets = list(range((3 * n) // 4, n - 1))
    keys = _spread(max(targets) + 1, args.keys)
    load_s = time.perf_counter() - t0
    rss_loaded = peak_rss_bytes()
    before = os.getloadavg()
    t0 = time.perf_counter()
    ab = mod.ablate_keys(m, ids, targets=targets, keys=keys)
    seconds = time.perf_counter() - t0
    out = {"module": args.module or "installed", "tokens": n,
           "targets": [targets[0], targets[-1]], "keys": len(keys),
           "settings": dict(ab.settings), "load_s": round(load_s, 1),
           "ablate_s": round(seconds, 1), "peak_rss_gb": round(peak_rss_bytes() / 1e9, 2),
           "rss_after_load_gb": round(rss_loaded / 1e9, 2),
           "load_avg_before": [round(x, 2) for x in before],
           "load_avg_after": [round(x, 2) for x in os.getloadavg()],
           "clean": ab.clean, "effect": ab.effect.tolist()}
    with open(args.save, "w") as f:
        json.dump(out, f)
    return 0


def _run(module: str | None, args: argparse.Namespace, save: str) -> dict:
    cmd = [sys.executable, __file__, "--child", "--save", save, "--tokens", str(args.tokens),
           "--keys", str(args.keys)]
    if module is not None:
        cmd += ["--module", module]
    subprocess.run(cmd, check=True)
    with open(save) as f:
        return json.load(f)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default=None, help="another copy of ablation.py to compare")
    ap.add_argument("--first", choices=("old", "new"), default="old",
                    help="which runs first (default old)")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--keys", type=int, default=128)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--module", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--save", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.child:
        return _child(args)
    runs: dict[str, dict] = {}
    order = ["new"] if args.old is None else (
        ["old", "new"] if args.first == "old" else ["new", "old"])
    with tempfile.TemporaryDirectory() as tmp:
        for which in order:
            runs[which] = _run(args.old if which == "old" else None, args,
                               os.path.join(tmp, f"{which}.json"))
    report: dict[str, object] = {}
    for which, r in runs.items():
        report[which] = {k: v for k, v in r.items() if k != "effect"}
    if "old" in runs:
        import torch

        old, new = (torch.tensor(runs[w]["effect"], dtype=torch.float64) for w in ("old", "new"))
        report["max_abs_effect_difference"] = float((old - new).abs().max())
        report["max_abs_effect"] = float(old.abs().max())
        report["clean_difference"] = runs["new"]["clean"] - runs["old"]["clean"]
        report["same_ranking"] = bool(torch.equal(old.argsort(stable=True),
                                                  new.argsort(stable=True)))
        report["speedup"] = round(runs["old"]["ablate_s"] / runs["new"]["ablate_s"], 2)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    for which, r in runs.items():
        print(f"{which:4s} ablate {r['ablate_s']:7.1f} s  peak RSS {r['peak_rss_gb']:.2f} GB "
              f"(after load {r['rss_after_load_gb']:.2f})  clean {r['clean']:.7f}  "
              f"load {r['load_avg_before'][0]:.2f} -> {r['load_avg_after'][0]:.2f}  "
              f"[{r['settings'].get('forward', 'whole input')}]")
    if "old" in runs:
        print(f"max |effect difference| {report['max_abs_effect_difference']:.3g} "
              f"(largest |effect| {report['max_abs_effect']:.3g}); clean difference "
              f"{report['clean_difference']:.3g}; same ranking: {report['same_ranking']}; "
              f"speed-up x{report['speedup']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
