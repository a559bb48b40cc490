"""``attnlab bench``: every attention backend timed against its rival.

Method (the machine is shared and noisy, so only ratios measured side by side count):

* contenders of one cell (length N, causal or not, forward or forward+backward) run
  interleaved in one process, in a rotating order, after one warm-up call each; a time is
  the median of the repeats;
* achieved GFLOP/s counts the two attention GEMMs, ``4·B·H·N²·d`` (half of it under
  ``causal``), times 3.5 for forward+backward (FlashAttention's convention), against the
  machine's GEMM rate measured with ``torch.mm`` on square fp32 matrices *inside each
  cell*, interleaved with the kernels it judges (a busy machine moves both alike);
* peak memory is measured in a fresh process per measurement
  (:mod:`attnlab.bench.memory`, run through :func:`attnlab._proc.call_isolated`).

Ratios are speed-ups: > 1 means attnlab is faster. Headline ratios are geometric means
over the cells with N ≥ 1024 (or the largest N measured, if none).

The default run (``attnlab bench``: N = 256, 1024, 4096, forward, plus the chunked
backend against torch SDPA at N = 32768 keys, on the last 4096 query rows) takes about
two minutes on two quiet cores; ``--sizes``, ``--backward`` and ``--long-rows 32768``
measure more, ``--quick`` less. Progress goes to stderr: a bar on a
terminal, one plain line per step otherwise; ``--quiet`` silences it.

``--json`` prints one object whose keys are stable (``format_version`` 1):

======================================  ==================================================
key                                     value
======================================  ==================================================
``format_version``                      1
``fused_vs_sdpa``                       torch SDPA time / attnlab fused time (geomean)
``explicit_vs_naive``                   article 000's code / attnlab with weights
``mha_weights_vs_torch``                ``nn.MultiheadAttention(need_weights=True)`` /
                                        ``attnlab.MultiHeadAttention(need_weights=True)``
``chunked_vs_sdpa``                     torch SDPA time / chunked time
``linear_vs_softmax``                   fused softmax time / linear attention time
``chunked_peak_mb_n32k``                chunked's peak extra MiB at ``long_probe.n`` keys
                                        (``long_probe.query_rows`` queries)
``chunked_n32k_time_vs_sdpa``           chunked / torch SDPA time, same probe
``fused_frac_peak_n4096``               fused GFLOP/s / GEMM GFLOP/s at N = 4096
``mha_weights_vs_torch_min``            the smallest ``mha_weights_vs_torch`` of one cell
                                        (forward, N ≥ 1024)
``weights_vs_naive_min``                the smallest naive / explicit (weights returned)
                                        of one forward cell with N ≥ 2048
``explicit_fwd_bwd_vs_naive_min``       the smallest naive / explicit of one
                                        forward+backward cell with N ≥ 1024
``explicit_grad_max_err``               largest |explicit − naive| gradient entry over
                                        the forward+backward cells
``load_avg``                            {start, end}: the 1/5/15-minute load averages
``kernel``                              :func:`attnlab.core.functional.kernel_status`
``gemm_gflops``                         {device: best GEMM rate seen}
``long_probe``                          {n, query_rows, seconds, peak_mb, error}
``machine``                             {cpu, cores, torch_threads, torch, python,
                                        load_avg_1m, cuda}
``config``                              the :class:`BenchConfig`, as JSON
``memory_method``                       how peak memory was measured, in words
``results``                             one row per (cell, contender): device, n, causal,
                                        mode, contender, ms, gflops, frac_peak,
                                        cell_gemm_gflops, peak_mb
``targets``                             {key: {value, target, met}} for :data:`TARGETS`
======================================  ==================================================

A ratio or measurement that could not be made is ``null`` (the ``_min`` keys need cells
of their sizes and mode: ``--sizes 1024 2048 4096 --backward`` measures all of them).

>>> BenchConfig().sizes
(256, 1024, 4096)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import IO, Any

from attnlab.bench.config import BenchConfig
from attnlab.bench.contenders import naive_attention
from attnlab.bench.render import render_summary, render_table
from attnlab.bench.suite import FORMAT_VERSION, TARGETS, BenchResult, OnStep, run_bench
from attnlab.bench.timing import attention_flops

__all__ = ["FORMAT_VERSION", "TARGETS", "BenchConfig", "attention_flops", "main_cli",
           "naive_attention", "plain_progress", "render_summary", "render_table",
           "run_bench"]


def plain_progress(stream: IO[str] | None = None) -> OnStep:
    """Progress as one line per step on ``stream`` (default stderr), for logs and pipes::

        bench [3/12] cpu N=1024 full fwd (after 4.2 s)
    """
    t0 = time.perf_counter()

    def on_step(i: int, total: int, text: str) -> None:
        out = stream if stream is not None else sys.stderr
        out.write(f"bench [{i}/{total}] {text} (after {time.perf_counter() - t0:.1f} s)\n")
        out.flush()

    return on_step


def main_cli(*, quick: bool = False, json_out: bool = False, quiet: bool = False,
             sizes: Sequence[int] | None = None, repeats: int | None = None,
             backward: bool = False, long_rows: int | None = None) -> BenchResult:
    """What ``attnlab bench`` runs (the CLI only parses and calls this): measure, then
    print the whole table and the summary on stdout unless ``json_out``."""
    kw: dict[str, Any] = {}
    if sizes:
        kw["sizes"] = tuple(sizes)
    if repeats is not None:
        kw["repeats"] = repeats
    if long_rows is not None:
        kw["long_rows"] = long_rows
    if backward:
        kw["backward"] = True
    cfg = BenchConfig.quick(**kw) if quick else BenchConfig(**kw)
    if quiet:
        result = run_bench(cfg)
    elif sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("{task.description}"), BarColumn(),
                      TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                      console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task("bench", total=None)

            def on_step(i: int, total: int, text: str) -> None:
                bar.update(task, description=text, completed=i - 1, total=total)

            result = run_bench(cfg, on_step)
    else:
        result = run_bench(cfg, plain_progress())
    if not json_out:
        from rich.console import Console
        from rich.measure import Measurement

        table = render_table(result)
        out = Console()
        need = Measurement.get(out, out.options.update(max_width=10_000), table).maximum
        if need > out.width:  # nothing is cut: the table is as wide as it needs to be
            out = Console(width=need)
        out.print(table)
        out.print(render_summary(result), highlight=False, soft_wrap=True)
    return result
