"""``attnlab bench``: every attention backend timed against its rival, in one process.

Method (the machine is shared and noisy, so only ratios measured side by side count):

* contenders of one cell (length N, causal or not, forward or forward+backward) run
  interleaved in one process, in a rotating order, after one warm-up call each; a time is
  the median of the repeats;
* achieved GFLOP/s counts the two attention GEMMs, ``4·B·H·N²·d`` (half of it under
  ``causal``), times 3.5 for forward+backward (FlashAttention's convention), against the
  machine's GEMM rate measured with ``torch.mm`` on square fp32 matrices *inside each
  cell*, interleaved with the kernels it judges (a busy machine moves both alike);
  ``gemm_gflops`` reports the best rate seen;
* peak memory is the extra resident memory of one call, measured in a fresh subprocess:
  after the inputs exist, ``/proc/self/clear_refs`` resets the kernel's high-water mark
  (VmHWM) to the current RSS, the call runs, and ``VmHWM − VmRSS_before`` is its peak.
  (torch's CPU allocator returns large blocks to the OS, so RSS follows it; tracemalloc
  would not see torch at all.) On CUDA it is ``torch.cuda.max_memory_allocated``.

Ratios are speed-ups: > 1 means attnlab is faster. Headline ratios are geometric means
over the cells with N ≥ 1024 (or the largest N measured, if none).

>>> cfg = BenchConfig.quick()
>>> cfg.sizes
(256, 1024)
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

import attnlab
from attnlab.core.chunked import chunked_attention
from attnlab.core.linear import linear_attention

__all__ = ["BenchConfig", "run_bench", "render_table", "naive_attention", "TARGETS"]

#: (key, target, direction): what the README and the issue promise.
TARGETS: list[tuple[str, float, str]] = [
    ("fused_vs_sdpa", 0.95, ">="),
    ("explicit_vs_naive", 1.5, ">="),
    ("mha_weights_vs_torch", 1.5, ">="),
    ("chunked_peak_mb_n32k", 1024.0, "<="),
    ("chunked_n32k_time_vs_sdpa", 2.5, "<="),
    ("fused_frac_peak_n4096", 0.8, ">="),
]


@dataclass(frozen=True)
class BenchConfig:
    """What to measure. Defaults are the full suite of the README table."""

    sizes: tuple[int, ...] = (256, 1024, 4096, 16384)  # N: from cache-sized to long
    batch: int = 1  # B = 1: the latency case; heads give the parallel work
    heads: int = 8  # H = 8, d = 64: a GPT-2-small-like head layout
    head_dim: int = 64
    repeats: int = 5  # median of 5 shrugs off one preempted run
    backward: bool = True  # also forward+backward
    causal: tuple[bool, ...] = (False, True)
    #: explicit/naive/torch-MHA need B·H·N² weights (naive several copies): skip above this
    max_weights_bytes: int = 1 << 30
    long_n: int = 32768  # chunked: length of the memory probe (naive would need 32 GB)
    #: the probe runs only this many query rows against all long_n keys (None = all of them)
    long_rows: int | None = None
    mha_embed_dim: int = 512  # E for the module comparison (H = heads)
    gemm_n: int = 2048  # the GEMM peak is measured on (n x n) @ (n x n)
    devices: tuple[str, ...] = field(default_factory=lambda: (
        ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)))
    seed: int = 0

    @classmethod
    def quick(cls, **kw: Any) -> BenchConfig:
        """A smoke run of ~20 s: two sizes, forward only, the long probe on 256 query rows
        (its tiles, hence its peak, are then smaller than the full run's)."""
        base = dict(sizes=(256, 1024), repeats=3, backward=False, long_rows=256, gemm_n=1024,
                    devices=("cpu",))
        base.update(kw)
        return cls(**base)


# --------------------------------------------------------------------------------------
# contenders
# --------------------------------------------------------------------------------------


def naive_attention(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Article 000's code, as written there: matmul, divide by √d_k, softmax, matmul."""
    d_k = q.shape[-1]
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_k)
    weights = F.softmax(scores, dim=-1)
    return torch.matmul(weights, v), weights


def _causal_mask(n: int, device: str) -> Tensor:
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def _attention_contenders(causal: bool, n: int, cfg: BenchConfig, device: str,
                          ) -> dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]]:
    sdpa = attnlab.scaled_dot_product_attention
    c: dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]] = {
        "torch_sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        "fused": lambda q, k, v: sdpa(q, k, v, causal=causal),
        "chunked": lambda q, k, v: chunked_attention(q, k, v, causal=causal)[0],
        "linear": lambda q, k, v: linear_attention(q, k, v, causal=causal),
    }
    weights_bytes = cfg.batch * cfg.heads * n * n * 4
    if weights_bytes <= cfg.max_weights_bytes:
        if causal:
            mask = _causal_mask(n, device)

            def naive(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
                # article 001's way to be causal: masked_fill the scores before softmax
                s = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
                s = s.masked_fill(~mask, float("-inf"))
                return torch.matmul(F.softmax(s, dim=-1), v)
        else:
            def naive(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
                return naive_attention(q, k, v)[0]
        c["naive"] = naive
        c["explicit"] = lambda q, k, v: sdpa(q, k, v, causal=causal, return_weights=True)[0]
    return c


def _mha_contenders(n: int, cfg: BenchConfig, device: str
                    ) -> dict[str, tuple[torch.nn.Module, Callable[[torch.nn.Module, Tensor],
                                                                   Tensor]]] | None:
    if cfg.batch * cfg.heads * n * n * 4 > cfg.max_weights_bytes:
        return None
    torch.manual_seed(cfg.seed)
    theirs = torch.nn.MultiheadAttention(cfg.mha_embed_dim, cfg.heads, batch_first=True)
    ours = attnlab.MultiHeadAttention.from_torch(theirs)
    theirs, ours = theirs.to(device), ours.to(device)
    return {
        "torch_mha": (theirs, lambda m, x: m(x, x, x, need_weights=True,
                                             average_attn_weights=False)[0]),
        "attnlab_mha": (ours, lambda m, x: m(x, need_weights=True)[0]),
    }


# --------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _interleaved(fns: dict[str, Callable[[], Any]], repeats: int, device: str
                 ) -> dict[str, float]:
    """Median seconds of each fn: one warm-up each, then rounds in a rotating order."""
    names = list(fns)
    for name in names:
        fns[name]()
    _sync(device)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            _sync(device)
            t0 = time.perf_counter()
            fns[name]()
            _sync(device)
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _fwd_bwd(fn: Callable[[], Tensor], leaves: Sequence[Tensor]) -> Callable[[], None]:
    def run() -> None:
        out = fn()
        out.sum().backward()
        for t in leaves:
            t.grad = None

    return run


def measure_gemm_gflops(n: int = 2048, repeats: int = 5, device: str = "cpu") -> float:
    """The machine's GEMM rate: fp32 (n x n) @ (n x n), median of ``repeats``."""
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device)
    b = torch.randn(n, n, generator=g).to(device)
    t = _interleaved({"mm": lambda: torch.mm(a, b)}, repeats, device)["mm"]
    return 2 * n**3 / t / 1e9


def attention_flops(n: int, cfg: BenchConfig, causal: bool, mode: str) -> float:
    f = 4.0 * cfg.batch * cfg.heads * n * n * cfg.head_dim
    return f * (0.5 if causal else 1.0) * (3.5 if mode == "fwd+bwd" else 1.0)


# --------------------------------------------------------------------------------------
# peak memory, in a fresh process
# --------------------------------------------------------------------------------------


def _rss_kb(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise OSError(f"{field_name} not in /proc/self/status")


def _probe(spec: dict[str, Any]) -> dict[str, Any]:
    """Run in a subprocess: peak extra MB of each contender (and long-N times if asked)."""
    cfg = BenchConfig(**{k: tuple(v) if isinstance(v, list) else v
                         for k, v in spec["config"].items()})
    n, causal, device = spec["n"], spec["causal"], spec["device"]
    rows = spec.get("rows") or n
    g = torch.Generator().manual_seed(cfg.seed)
    b, h, d = cfg.batch, cfg.heads, cfg.head_dim
    q = torch.randn(b, h, rows, d, generator=g).to(device)
    k = torch.randn(b, h, n, d, generator=g).to(device)
    v = torch.randn(b, h, n, d, generator=g).to(device)
    fns = _attention_contenders(causal, n, cfg, device)
    if rows != n:  # queries are the last `rows` positions: causal stays bottom-right aligned
        fns = {name: fns[name] for name in ("torch_sdpa", "chunked") if name in fns}
        if causal:
            fns.pop("torch_sdpa")
    result: dict[str, Any] = {"peak_mb": {}, "seconds": {}}
    names = spec.get("only") or list(fns)
    small = torch.randn(b, h, 64, d, generator=g).to(device)
    warm = _attention_contenders(causal, 64, cfg, device)
    for name in names:  # first calls allocate pools and caches: not the kernel's memory
        warm[name](small, small, small)
    for name in names:
        fn = fns[name]
        if device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            t0 = time.perf_counter()
            out = fn(q, k, v)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        else:
            try:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")  # reset VmHWM to the current RSS
                reset = True
            except OSError:
                reset = False
            base = _rss_kb("VmRSS")
            t0 = time.perf_counter()
            out = fn(q, k, v)
            dt = time.perf_counter() - t0
            hwm = _rss_kb("VmHWM")
            peak = (hwm - base) / 1024  # without the reset: an upper bound
            result["hwm_reset"] = reset
        del out
        result["peak_mb"][name] = round(peak, 1)
        result["seconds"][name] = dt
    return result


def _run_probe(spec: dict[str, Any], timeout: float = 3600) -> dict[str, Any]:
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-m", "attnlab.bench", "--probe", json.dumps(spec)],
        capture_output=True, text=True, timeout=timeout, env=env,
    )
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1:] or ["failed"]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------
# the suite
# --------------------------------------------------------------------------------------


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and math.isfinite(x) and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def _machine() -> dict[str, Any]:
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(),
            "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}
    if torch.cuda.is_available():
        info["cuda"] = torch.cuda.get_device_name(0)
    return info


def run_bench(cfg: BenchConfig = BenchConfig(), progress: Any = None) -> dict[str, Any]:
    """Measure everything in ``cfg``; returns the JSON-ready result (see module doc)."""
    rows: list[dict[str, Any]] = []
    machine = _machine()
    modes = ["fwd", "fwd+bwd"] if cfg.backward else ["fwd"]
    plan = [(dev, n, c, m) for dev in cfg.devices for n in cfg.sizes for c in cfg.causal
            for m in modes]
    task = None
    if progress is not None:
        task = progress.add_task("bench", total=len(plan) + 2 + len(cfg.devices))
    say = (lambda text: progress.update(task, description=text)) if task is not None else (
        lambda text: None)
    step = (lambda: progress.advance(task)) if task is not None else (lambda: None)

    peaks: dict[str, float] = {}
    cell_peaks: dict[str, list[float]] = {}
    gemm_a: dict[str, Tensor] = {}
    gemm_b: dict[str, Tensor] = {}
    for dev in cfg.devices:
        say(f"GEMM peak ({dev})")
        peaks[dev] = measure_gemm_gflops(cfg.gemm_n, cfg.repeats, dev)
        gemm_a[dev] = torch.randn(cfg.gemm_n, cfg.gemm_n).to(dev)
        gemm_b[dev] = torch.randn(cfg.gemm_n, cfg.gemm_n).to(dev)
        step()
    g = torch.Generator().manual_seed(cfg.seed)
    for dev, n, causal, mode in plan:
        say(f"{dev} N={n} {'causal' if causal else 'full'} {mode}")
        b, h, d = cfg.batch, cfg.heads, cfg.head_dim
        grad = mode == "fwd+bwd"
        q, k, v = (torch.randn(b, h, n, d, generator=g).to(dev).requires_grad_(grad)
                   for _ in range(3))
        attn = _attention_contenders(causal, n, cfg, dev)
        fns: dict[str, Callable[[], Any]] = {}
        for name, fn in attn.items():
            call = (lambda fn=fn, q=q, k=k, v=v: fn(q, k, v))
            fns[name] = _fwd_bwd(call, (q, k, v)) if grad else call
        mha = _mha_contenders(n, cfg, dev) if not causal else None
        x = None
        if mha is not None:
            x = torch.randn(b, n, cfg.mha_embed_dim, generator=g).to(dev).requires_grad_(grad)
            for name, (module, call) in mha.items():
                module.requires_grad_(grad)
                f = (lambda module=module, call=call, x=x: call(module, x))
                fns[name] = _fwd_bwd(f, (x,)) if grad else f
        # the GEMM peak runs in every cell, interleaved with the kernels it judges
        fns["_gemm"] = lambda a=gemm_a[dev], b=gemm_b[dev]: torch.mm(a, b)
        ctx = torch.enable_grad() if grad else torch.no_grad()
        with ctx:
            secs = _interleaved(fns, cfg.repeats, dev)
        cell_peak = 2 * cfg.gemm_n**3 / secs.pop("_gemm") / 1e9
        cell_peaks.setdefault(dev, []).append(cell_peak)
        flops = attention_flops(n, cfg, causal, mode)
        for name, s in secs.items():
            is_mha = name.endswith("_mha")
            gflops = None if is_mha or name == "linear" else flops / s / 1e9
            rows.append({"device": dev, "n": n, "causal": causal, "mode": mode,
                         "contender": name, "ms": round(s * 1e3, 3),
                         "gflops": None if gflops is None else round(gflops, 2),
                         "frac_peak": None if gflops is None else round(gflops / cell_peak, 3),
                         "cell_gemm_gflops": round(cell_peak, 2)})
        del q, k, v, x, fns
        step()

    # peak memory of each forward, one subprocess per size (CPU only; CUDA in-process stats)
    mem: dict[tuple[str, int, bool], dict[str, float]] = {}
    say("peak memory")
    for dev in cfg.devices:
        for n in cfg.sizes:
            spec = {"config": asdict(cfg), "n": n, "causal": False, "device": dev}
            res = _run_probe(spec)
            mem[(dev, n, False)] = res.get("peak_mb", {})
    for r in rows:
        if r["mode"] == "fwd" and not r["causal"]:
            r["peak_mb"] = mem.get((r["device"], r["n"], False), {}).get(r["contender"])
    step()

    say(f"chunked at N={cfg.long_n}")
    long_spec = {"config": asdict(cfg), "n": cfg.long_n, "causal": False, "device": "cpu",
                 "rows": cfg.long_rows,
                 "only": ["chunked"] if cfg.long_rows else ["chunked", "torch_sdpa"]}
    long = _run_probe(long_spec)
    step()
    # the peak: the best of the standalone and the per-cell GEMM rates
    peaks = {dev: max([p, *cell_peaks.get(dev, [])]) for dev, p in peaks.items()}
    return _summarize(cfg, machine, peaks, rows, long)


def _ratio_cells(rows: list[dict[str, Any]], ours: str, theirs: str, min_n: int = 1024,
                 **where: Any) -> list[float]:
    by: dict[tuple, dict[str, float]] = {}
    for r in rows:
        if all(r[k] == v for k, v in where.items()):
            by.setdefault((r["device"], r["n"], r["causal"], r["mode"]), {})[r["contender"]] = (
                r["ms"])
    cells = {key: t for key, t in by.items() if ours in t and theirs in t}
    big = {key: t for key, t in cells.items() if key[1] >= min_n}
    if not big and cells:  # nothing that long: use the longest measured
        longest = max(key[1] for key in cells)
        big = {key: t for key, t in cells.items() if key[1] == longest}
    return [t[theirs] / t[ours] for t in big.values()]


def _summarize(cfg: BenchConfig, machine: dict[str, Any], peaks: dict[str, float],
               rows: list[dict[str, Any]], long: dict[str, Any]) -> dict[str, Any]:
    cpu_rows = [r for r in rows if r["device"] == "cpu"]
    frac4096 = [r["frac_peak"] for r in cpu_rows if r["contender"] == "fused"
                and r["n"] == 4096 and not r["causal"] and r["mode"] == "fwd"]
    secs = long.get("seconds", {})
    chunk_peak = long.get("peak_mb", {}).get("chunked")
    out: dict[str, Any] = {
        "fused_vs_sdpa": _geomean(_ratio_cells(cpu_rows, "fused", "torch_sdpa")),
        "explicit_vs_naive": _geomean(_ratio_cells(cpu_rows, "explicit", "naive")),
        "mha_weights_vs_torch": _geomean(_ratio_cells(cpu_rows, "attnlab_mha", "torch_mha")),
        "chunked_peak_mb_n32k": chunk_peak,
        "chunked_vs_sdpa": _geomean(_ratio_cells(cpu_rows, "chunked", "torch_sdpa")),
        "linear_vs_softmax": _geomean(_ratio_cells(cpu_rows, "linear", "fused")),
        "chunked_n32k_time_vs_sdpa": (secs["chunked"] / secs["torch_sdpa"]
                                      if {"chunked", "torch_sdpa"} <= secs.keys() else None),
        "fused_frac_peak_n4096": frac4096[0] if frac4096 else None,
        "gemm_gflops": {dev: round(p, 2) for dev, p in peaks.items()},
        "long_probe": {"n": cfg.long_n, "query_rows": cfg.long_rows or cfg.long_n,
                       "seconds": secs, "peak_mb": long.get("peak_mb"),
                       "error": long.get("error")},
        "machine": machine,
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(cfg).items()},
        "memory_method": "fresh subprocess: reset VmHWM via /proc/self/clear_refs after the "
                         "inputs exist, run once, peak = VmHWM - VmRSS before (MiB)",
        "results": rows,
    }
    for key, val in out.items():  # JSON has no NaN: what could not be measured is null
        if isinstance(val, float):
            out[key] = round(val, 3) if math.isfinite(val) else None
    targets = {}
    for key, target, op in TARGETS:
        val = out.get(key)
        met = None
        if isinstance(val, (int, float)) and math.isfinite(val):
            met = val >= target if op == ">=" else val <= target
        targets[key] = {"value": val, "target": f"{op} {target}", "met": met}
    out["targets"] = targets
    return out


def render_table(result: dict[str, Any]) -> Any:
    """A rich Table: one row per cell, one column per contender (ms), ratios at the end."""
    from rich.table import Table

    rows = result["results"]
    names = ["torch_sdpa", "fused", "chunked", "linear", "naive", "explicit", "torch_mha",
             "attnlab_mha"]
    present = [nm for nm in names if any(r["contender"] == nm for r in rows)]
    t = Table(title="attnlab bench (ms, median; ×: speed-up of attnlab, >1 = faster)")
    for col in ["device", "N", "causal", "mode", *present, "fused×", "explicit×", "mha×",
                "fused %peak"]:
        t.add_column(col, justify="right")
    cells: dict[tuple, dict[str, dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["device"], r["n"], r["causal"], r["mode"]), {})[r["contender"]] = r

    def ratio(c: dict[str, dict[str, Any]], ours: str, theirs: str) -> str:
        if ours in c and theirs in c:
            return f"{c[theirs]['ms'] / c[ours]['ms']:.2f}"
        return "-"

    for (dev, n, causal, mode), c in cells.items():
        frac = c.get("fused", {}).get("frac_peak")
        t.add_row(dev, str(n), "yes" if causal else "no", mode,
                  *[f"{c[nm]['ms']:.1f}" if nm in c else "-" for nm in present],
                  ratio(c, "fused", "torch_sdpa"), ratio(c, "explicit", "naive"),
                  ratio(c, "attnlab_mha", "torch_mha"),
                  f"{100 * frac:.0f}%" if frac is not None else "-")
    return t


def render_summary(result: dict[str, Any]) -> str:
    lines = [f"GEMM peak: {result['gemm_gflops']} GFLOP/s   machine: {result['machine']}"]
    for key, tgt in result["targets"].items():
        val = tgt["value"]
        shown = f"{val:.3f}" if isinstance(val, float) else str(val)
        mark = {True: "met", False: "NOT met", None: "not measured"}[tgt["met"]]
        lines.append(f"  {key:28s} {shown:>10s}   target {tgt['target']:8s} {mark}")
    lp = result["long_probe"]
    lines.append(f"  long probe: N={lp['n']}, {lp['query_rows']} query rows, peak MiB "
                 f"{lp['peak_mb']}, seconds {lp['seconds']}")
    return "\n".join(lines)


def main_cli(*, quick: bool, json_out: bool, quiet: bool, sizes: Sequence[int] | None,
             repeats: int | None, no_backward: bool) -> dict[str, Any]:
    """What ``attnlab bench`` runs (the CLI only parses and calls this)."""
    kw: dict[str, Any] = {}
    if sizes:
        if any(isinstance(s, bool) or s < 1 for s in sizes):
            raise ValueError(f"sizes must be positive ints, got {list(sizes)}")
        kw["sizes"] = tuple(sizes)
    if repeats is not None:
        if repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {repeats}")
        kw["repeats"] = repeats
    if no_backward:
        kw["backward"] = False
    cfg = BenchConfig.quick(**kw) if quick else replace(BenchConfig(), **kw)
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True, quiet=quiet)
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=quiet) as progress:
        result = run_bench(cfg, progress=None if quiet else progress)
    if not json_out:
        out = Console(width=max(160, Console().width))
        out.print(render_table(result))
        out.print(render_summary(result))
    return result


if __name__ == "__main__":  # the memory probe's subprocess
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":
        print(json.dumps(_probe(json.loads(sys.argv[2]))))
    else:
        raise SystemExit("usage: python -m attnlab.bench --probe SPEC (internal); "
                         "use `attnlab bench`")
