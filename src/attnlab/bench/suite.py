"""The whole measurement: every cell timed side by side, peak memory in fresh processes, the
long-sequence probe, and the summary keys (see :mod:`attnlab.bench` for their meaning)."""

from __future__ import annotations

import functools
import math
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict, final

import torch
from torch import Tensor

from attnlab._proc import IsolatedCallError, call_isolated
from attnlab.bench.config import BenchConfig, BenchConfigJSON
from attnlab.bench.contenders import attention_contenders, mha_contenders, naive_attention
from attnlab.bench.memory import METHOD, PeakMemory
from attnlab.bench.timing import attention_flops, fwd_bwd, interleaved, measure_gemm_gflops
from attnlab.core._kernel import KernelStatus
from attnlab.core.functional import kernel_status, scaled_dot_product_attention
from attnlab.core.masks import causal as causal_mask

__all__ = ["FORMAT_VERSION", "TARGETS", "run_bench", "summarize", "BenchResult", "Headline",
           "ResultRow", "Machine", "LongProbe", "LoadAvg", "Target", "BenchExtra"]

FORMAT_VERSION = 1

#: (key, target, direction): what docs/benchmarks.md promises.
TARGETS: list[tuple[str, float, str]] = [
    ("fused_vs_sdpa", 0.95, ">="),
    ("explicit_vs_naive", 1.5, ">="),
    ("mha_weights_vs_torch", 1.5, ">="),
    ("chunked_peak_mb_n32k", 1024.0, "<="),
    ("chunked_n32k_time_vs_sdpa", 2.5, "<="),
    ("fused_frac_peak_n4096", 0.8, ">="),
    # with weights: each cell on its own, not a mean
    ("mha_weights_vs_torch_min", 1.5, ">="),  # N >= 1024, forward
    ("weights_vs_naive_min", 2.5, ">="),  # explicit vs naive, N >= 2048, forward
    ("explicit_fwd_bwd_vs_naive_min", 1.2, ">="),  # N >= 1024, forward + backward
    ("explicit_grad_max_err", 1e-4, "<="),  # |explicit grad - naive grad|, fwd+bwd cells
]

#: A step of the run: (step number from 1, number of steps, what it is about to do).
OnStep = Callable[[int, int, str], None]


# --------------------------------------------------------------------------------------
# the result (``--json``; the keys are listed in :mod:`attnlab.bench`)
# --------------------------------------------------------------------------------------


class ResultRow(TypedDict):
    """One contender in one cell."""

    device: str
    n: int
    causal: bool
    mode: str  # "fwd" or "fwd+bwd"
    contender: str
    ms: float  # the median time
    gflops: float | None  # achieved rate of the attention GEMMs (None: not counted)
    frac_peak: float | None  # gflops / cell_gemm_gflops
    cell_gemm_gflops: float  # the GEMM rate measured between the cell's kernels
    peak_mb: float | None  # peak extra MiB of one forward (None: not measured)


class Machine(TypedDict):
    """Where the run ran."""

    cpu: str
    cores: int | None
    torch_threads: int
    torch: str
    python: str
    load_avg_1m: float | None
    cuda: str | None  # the first CUDA device's name


@final
class _PeakError(TypedDict):
    """A peak-memory process that failed (final: it holds no other key)."""

    error: str


class LongProbe(TypedDict):
    """Chunked against torch SDPA at ``n`` keys, on the last ``query_rows`` queries."""

    n: int
    query_rows: int
    seconds: dict[str, float]  # by contender
    peak_mb: dict[str, float] | None  # by contender (None: the process failed)
    error: str | None  # why the process failed


class LoadAvg(TypedDict):
    """The 1, 5 and 15-minute load averages at the start and at the end of the run."""

    start: list[float] | None
    end: list[float] | None


class Target(TypedDict):
    """A promise of :data:`TARGETS` and whether the run kept it."""

    value: float | None
    target: str  # e.g. ">= 0.95"
    met: bool | None  # None: not measured


class BenchExtra(TypedDict, total=False):
    """What :func:`summarize` adds to the measured rows."""

    load_avg: LoadAvg
    kernel: KernelStatus
    explicit_grad_max_err: float | None


class Headline(TypedDict):
    """The ratios and measurements the targets judge (None: not measured)."""

    fused_vs_sdpa: float | None
    explicit_vs_naive: float | None
    mha_weights_vs_torch: float | None
    chunked_peak_mb_n32k: float | None
    chunked_vs_sdpa: float | None
    linear_vs_softmax: float | None
    chunked_n32k_time_vs_sdpa: float | None
    fused_frac_peak_n4096: float | None
    mha_weights_vs_torch_min: float | None
    weights_vs_naive_min: float | None
    explicit_fwd_bwd_vs_naive_min: float | None
    explicit_grad_max_err: float | None


class BenchResult(Headline):
    """What ``attnlab bench --json`` prints (:func:`summarize`)."""

    format_version: int
    gemm_gflops: dict[str, float]  # by device: the best GEMM rate seen
    long_probe: LongProbe
    machine: Machine
    load_avg: LoadAvg | None
    kernel: KernelStatus | None  # :func:`attnlab.core.functional.kernel_status`
    config: BenchConfigJSON
    memory_method: str
    results: list[ResultRow]
    targets: dict[str, Target]  # by key of TARGETS


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and math.isfinite(x) and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def _machine() -> Machine:
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = _load()
    return {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(),
            "load_avg_1m": load[0] if load else None,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def _load() -> list[float] | None:
    """The 1, 5 and 15-minute load averages (how busy the shared machine was)."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def grad_error(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> float:
    """Largest |explicit − naive| over the gradients of q, k, v (upstream: a fixed random
    gradient of the output), the naive code's autograd being the judge."""
    mask = causal_mask(q.shape[-2], device=q.device) if causal else None
    g_out = torch.randn(q.shape[:-1] + v.shape[-1:], generator=torch.Generator().manual_seed(1))
    lq, lk, lv = leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with torch.enable_grad():
        want = torch.autograd.grad((naive_attention(lq, lk, lv, mask)[0] * g_out).sum(), leaves)
        out = scaled_dot_product_attention(lq, lk, lv, causal=causal, return_weights=True)[0]
        got = torch.autograd.grad((out * g_out).sum(), leaves)
    return max(float((a - b).abs().max()) for a, b in zip(got, want))


def _peak(config: BenchConfig, **spec: Any) -> PeakMemory | _PeakError:
    try:
        return call_isolated("attnlab.bench.memory:peak_memory", config=config.to_json(),
                             **spec)
    except IsolatedCallError as exc:
        return {"error": str(exc)}


@dataclass(frozen=True)
class _Cell:
    """One measured cell: a row per contender (``peak_mb`` still None), the GEMM rate
    (GFLOP/s) measured between its kernels, and the largest error of explicit's gradients
    (None when not measured)."""

    rows: list[ResultRow]
    gemm_gflops: float
    grad_error: float | None


def _measure_cell(cfg: BenchConfig, g: torch.Generator, gemm: tuple[Tensor, Tensor],
                  dev: str, n: int, causal: bool, mode: str) -> _Cell:
    """Time every contender of the cell (``dev``, ``n``, ``causal``, ``mode``) on inputs
    drawn from ``g``, interleaved with the GEMM ``gemm`` whose rate judges them."""
    b, h, d = cfg.batch, cfg.heads, cfg.head_dim
    grad = mode == "fwd+bwd"
    q, k, v = (torch.randn(b, h, n, d, generator=g).to(dev).requires_grad_(grad)
               for _ in range(3))
    fns: dict[str, Callable[[], Any]] = {}
    for name, fn in attention_contenders(causal, n, cfg, dev).items():
        call = functools.partial(fn, q, k, v)
        fns[name] = fwd_bwd(call, (q, k, v)) if grad else call
    mha = mha_contenders(n, cfg, dev) if not causal else None
    if mha is not None:
        x = torch.randn(b, n, cfg.mha_embed_dim, generator=g).to(dev).requires_grad_(grad)
        for name, (module, forward) in mha.items():
            module.requires_grad_(grad)
            run = functools.partial(forward, module, x)
            fns[name] = fwd_bwd(run, (x,)) if grad else run
    # the GEMM rate runs in every cell, interleaved with the kernels it judges
    fns["_gemm"] = functools.partial(torch.mm, *gemm)
    with torch.enable_grad() if grad else torch.no_grad():
        secs = interleaved(fns, cfg.repeats, dev)
    error = None
    if grad and dev == "cpu" and {"naive", "explicit"} <= fns.keys():
        error = grad_error(q, k, v, causal)
    cell_peak = 2 * cfg.gemm_n**3 / secs.pop("_gemm") / 1e9
    flops = attention_flops(n, cfg, causal, mode)
    rows: list[ResultRow] = []
    for name, s in secs.items():
        rate = None if name.endswith("_mha") or name == "linear" else flops / s / 1e9
        rows.append({"device": dev, "n": n, "causal": causal, "mode": mode,
                     "contender": name, "ms": round(s * 1e3, 3),
                     "gflops": None if rate is None else round(rate, 2),
                     "frac_peak": None if rate is None else round(rate / cell_peak, 3),
                     "cell_gemm_gflops": round(cell_peak, 2), "peak_mb": None})
    return _Cell(rows, cell_peak, error)


def _add_peak_memory(cfg: BenchConfig, rows: list[ResultRow],
                     next_step: Callable[[str], None]) -> None:
    """Fill ``peak_mb`` of the forward full-attention rows: one fresh process per device
    and size."""
    for dev in cfg.devices:
        for n in cfg.sizes:
            next_step(f"peak memory on {dev}, N={n} (own process)")
            measured = _peak(cfg, n=n, causal=False, device=dev)
            peak = {} if "error" in measured else measured.get("peak_mb", {})
            for r in rows:
                if (r["device"], r["n"], r["mode"], r["causal"]) == (dev, n, "fwd", False):
                    r["peak_mb"] = peak.get(r["contender"])


def run_bench(cfg: BenchConfig | None = None, on_step: OnStep | None = None
              ) -> BenchResult:
    """Measure everything in ``cfg`` (default :class:`BenchConfig`); ``on_step`` hears of
    each step before it runs. Returns the JSON-ready result."""
    cfg = cfg or BenchConfig()
    say = on_step or (lambda i, total, text: None)
    rows: list[ResultRow] = []
    machine = _machine()
    load_start = _load()
    kernel = kernel_status(build=True)  # a first build is not timed with the kernels
    grad_errors: list[float] = []
    modes = ["fwd", "fwd+bwd"] if cfg.backward else ["fwd"]
    plan = [(dev, n, c, m) for dev in cfg.devices for n in cfg.sizes for c in cfg.causal
            for m in modes]
    total = len(cfg.devices) + len(plan) + len(cfg.devices) * len(cfg.sizes) + 1
    step = 0

    def next_step(text: str) -> None:
        nonlocal step
        step += 1
        say(step, total, text)

    peaks: dict[str, float] = {}
    cell_peaks: dict[str, list[float]] = {}
    gemm: dict[str, tuple[Tensor, Tensor]] = {}
    for dev in cfg.devices:
        next_step(f"GEMM rate on {dev} ({cfg.gemm_n}x{cfg.gemm_n})")
        peaks[dev] = measure_gemm_gflops(cfg.gemm_n, cfg.repeats, dev)
        gemm[dev] = (torch.randn(cfg.gemm_n, cfg.gemm_n).to(dev),
                     torch.randn(cfg.gemm_n, cfg.gemm_n).to(dev))
    g = torch.Generator().manual_seed(cfg.seed)
    for dev, n, causal, mode in plan:
        next_step(f"{dev} N={n} {'causal' if causal else 'full'} {mode}")
        cell = _measure_cell(cfg, g, gemm[dev], dev, n, causal, mode)
        if cell.grad_error is not None:
            grad_errors.append(cell.grad_error)
        cell_peaks.setdefault(dev, []).append(cell.gemm_gflops)
        rows.extend(cell.rows)
    _add_peak_memory(cfg, rows, next_step)
    rows_note = f", {cfg.long_rows} query rows" if cfg.long_rows else ""
    next_step(f"chunked vs torch SDPA at N={cfg.long_n}{rows_note} (own process)")
    long = _peak(cfg, n=cfg.long_n, causal=False, device="cpu", rows=cfg.long_rows,
                 only=["chunked", "torch_sdpa"])
    # the GEMM rate: the best of the standalone and the per-cell measurements
    peaks = {dev: max([p, *cell_peaks.get(dev, [])]) for dev, p in peaks.items()}
    extra: BenchExtra = {"load_avg": {"start": load_start, "end": _load()}, "kernel": kernel,
                         "explicit_grad_max_err": max(grad_errors) if grad_errors else None}
    return summarize(cfg, machine, peaks, rows, long, extra)


def _ratio_cells(rows: list[ResultRow], ours: str, theirs: str, min_n: int = 1024
                 ) -> list[float]:
    by: dict[tuple, dict[str, float]] = {}
    for r in rows:
        key = (r["device"], r["n"], r["causal"], r["mode"])
        by.setdefault(key, {})[r["contender"]] = r["ms"]
    cells = {key: t for key, t in by.items() if ours in t and theirs in t}
    big = {key: t for key, t in cells.items() if key[1] >= min_n}
    if not big and cells:  # nothing that long: use the longest measured
        longest = max(key[1] for key in cells)
        big = {key: t for key, t in cells.items() if key[1] == longest}
    return [t[theirs] / t[ours] for t in big.values()]


def _cell_min(rows: list[ResultRow], ours: str, theirs: str, mode: str, min_n: int
              ) -> float | None:
    """The smallest speed-up ``theirs / ours`` over the CPU cells of ``mode`` with N >=
    ``min_n`` (causal or not); None when no such cell was measured."""
    by: dict[tuple, dict[str, float]] = {}
    for r in rows:
        if r["device"] == "cpu" and r["mode"] == mode and r["n"] >= min_n:
            by.setdefault((r["n"], r["causal"]), {})[r["contender"]] = r["ms"]
    ratios = [t[theirs] / t[ours] for t in by.values() if ours in t and theirs in t]
    return min(ratios) if ratios else None


def _probe(long: PeakMemory | _PeakError
           ) -> tuple[dict[str, float], dict[str, float] | None, str | None]:
    """(seconds, peak MiB, why it failed) of a peak-memory measurement, by contender."""
    if "error" in long:
        return {}, None, long["error"]
    return long.get("seconds", {}), long.get("peak_mb"), None


def _rounded(val: float | None, *, significant: bool = False) -> float | None:
    """A measurement as the result holds it: 3 decimals, or 3 significant digits for an
    error bound (``significant``); None where it is not finite (JSON has no NaN)."""
    if not isinstance(val, float):
        return val
    keep = float(f"{val:.3g}") if significant else round(val, 3)
    return keep if math.isfinite(val) else None


def summarize(cfg: BenchConfig, machine: Machine, peaks: dict[str, float],
              rows: list[ResultRow], long: PeakMemory | _PeakError,
              extra: BenchExtra | None = None) -> BenchResult:
    """The result object from the measured rows (the keys :mod:`attnlab.bench` lists)."""
    extra = extra or {}
    cpu_rows = [r for r in rows if r["device"] == "cpu"]
    frac4096 = [r["frac_peak"] for r in cpu_rows if r["contender"] == "fused"
                and r["n"] == 4096 and not r["causal"] and r["mode"] == "fwd"]
    secs, peak_mb, error = _probe(long)
    headline: Headline = {
        "fused_vs_sdpa": _rounded(_geomean(_ratio_cells(cpu_rows, "fused", "torch_sdpa"))),
        "explicit_vs_naive": _rounded(_geomean(_ratio_cells(cpu_rows, "explicit", "naive"))),
        "mha_weights_vs_torch": _rounded(_geomean(_ratio_cells(cpu_rows, "attnlab_mha",
                                                               "torch_mha"))),
        "chunked_peak_mb_n32k": _rounded((peak_mb or {}).get("chunked")),
        "chunked_vs_sdpa": _rounded(_geomean(_ratio_cells(cpu_rows, "chunked", "torch_sdpa"))),
        "linear_vs_softmax": _rounded(_geomean(_ratio_cells(cpu_rows, "linear", "fused"))),
        "chunked_n32k_time_vs_sdpa": _rounded(secs["chunked"] / secs["torch_sdpa"]
                                              if {"chunked", "torch_sdpa"} <= secs.keys()
                                              else None),
        "fused_frac_peak_n4096": _rounded(frac4096[0] if frac4096 else None),
        "mha_weights_vs_torch_min": _rounded(_cell_min(cpu_rows, "attnlab_mha", "torch_mha",
                                                       "fwd", 1024)),
        "weights_vs_naive_min": _rounded(_cell_min(cpu_rows, "explicit", "naive", "fwd", 2048)),
        "explicit_fwd_bwd_vs_naive_min": _rounded(_cell_min(cpu_rows, "explicit", "naive",
                                                            "fwd+bwd", 1024)),
        "explicit_grad_max_err": _rounded(extra.get("explicit_grad_max_err"), significant=True),
    }
    targets: dict[str, Target] = {}
    for key, target, op in TARGETS:
        val = headline.get(key)
        value = val if isinstance(val, (int, float)) else None
        met = None
        if value is not None and math.isfinite(value):
            met = value >= target if op == ">=" else value <= target
        targets[key] = {"value": value, "target": f"{op} {target}", "met": met}
    return {
        "format_version": FORMAT_VERSION,
        **headline,
        "gemm_gflops": {dev: round(p, 2) for dev, p in peaks.items()},
        "long_probe": {"n": cfg.long_n, "query_rows": cfg.long_rows or cfg.long_n,
                       "seconds": secs, "peak_mb": peak_mb, "error": error},
        "machine": machine,
        "load_avg": extra.get("load_avg"),
        "kernel": extra.get("kernel"),
        "config": cfg.to_json(),
        "memory_method": METHOD,
        "results": rows,
        "targets": targets,
    }
