"""The survey's memory against its estimate: SmolLM2, batches of long texts.

    .venv/bin/python benchmarks/survey_memory.py [--runs 1x1024 1x2048 1x4096 4x1024]
                                                 [--json]

Each run ``BxN`` surveys a corpus of ``B`` texts of at least ``N`` tokens (attnlab's long
text, repeated, one text a line) in one batch (``batch_size=B, max_tokens=N``, no probes)
in a fresh process (multiprocessing, spawn), so its peak resident set (``VmHWM``,
:func:`attnlab._proc.peak_rss_bytes`) is its own. Measured: the survey's wall time and the
growth of the peak over the resident set once the model is loaded and the corpus written,
beside :func:`attnlab.tracing.budget.estimate_survey_bytes`, the estimate the survey checks
against its memory budget before it runs.

A harness, not a test: it prints what it measured; nothing is asserted. Needs the SmolLM2
weights offline (``attnlab.models.load("smollm2")``).
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

from attnlab._proc import in_fresh_process, load_average


def _mib(n: float) -> float:
    return round(n / 2**20, 1)


def run(batch: int, n: int, folder: str) -> dict[str, Any]:
    """One survey of ``batch`` texts of ``n`` tokens in this (fresh) process."""
    import torch

    from attnlab._proc import peak_rss_bytes, reset_peak_rss
    from attnlab.analysis.survey import Corpus, SurveyConfig, survey
    from attnlab.models import load
    from attnlab.report.long_text import long_text
    from attnlab.tracing.budget import estimate_survey_bytes

    loaded = load("smollm2", progress=False)
    text = long_text().text
    ids = loaded.tokenizer(text)["input_ids"]
    line = " ".join([text.replace("\n", " ")] * (n // len(ids) + 2))
    path = Path(folder) / f"corpus-{batch}x{n}.txt"
    path.write_text("\n".join([line] * batch) + "\n", encoding="utf-8")
    cfg = SurveyConfig(batch_size=batch, max_tokens=n, probes=False)
    est = estimate_survey_bytes(loaded, batch, n)
    reset = reset_peak_rss()
    base = peak_rss_bytes()
    t0 = time.perf_counter()
    r = survey(loaded, Corpus(path), Path(folder) / f"out-{batch}x{n}", config=cfg)
    seconds = time.perf_counter() - t0
    peak = peak_rss_bytes()
    return {"batch": batch, "tokens": n, "texts": int(r.sums["texts"]),
            "truncated": int(r.sums["truncated"]), "survey_seconds": round(seconds, 2),
            "peak_growth_mib": _mib(peak - base) if reset else None,
            "estimate_mib": _mib(est.total), "estimate_parts_mib": {
                "weights": _mib(est.weights), "reduce": _mib(est.reduce),
                "forward": _mib(est.forward)},
            "peak_process_mib": _mib(peak), "torch_threads": torch.get_num_threads()}


def _run_spec(text: str) -> tuple[int, int]:
    b, _, n = text.partition("x")
    if not (b.isdigit() and n.isdigit()) or int(b) < 1 or int(n) < 2:
        raise argparse.ArgumentTypeError(f"a run is BxN (texts x tokens, e.g. 1x4096), "
                                         f"got {text!r}")
    return int(b), int(n)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=_run_spec, nargs="+",
                    default=[(1, 1024), (1, 2048), (1, 4096), (4, 1024)],
                    help="BxN: B texts of N tokens in one batch")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        for b, n in args.runs:
            print(f"[survey_memory] {b}x{n} (load {load_average()}) ...", file=sys.stderr,
                  flush=True)
            before = load_average()
            got = in_fresh_process(run, b, n, folder)
            got["loadavg_before"], got["loadavg_after"] = before, load_average()
            results[f"{b}x{n}"] = got
            if not args.json:
                print(f"{b}x{n}", json.dumps(got, indent=1), flush=True)
    if args.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
