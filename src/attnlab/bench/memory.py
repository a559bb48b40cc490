"""Peak extra memory of one attention call, measured in a process of its own.

On the CPU: after the inputs exist, ``/proc/self/clear_refs`` resets the kernel's
high-water mark (VmHWM) to the current resident size, the call runs, and ``VmHWM −
VmRSS_before`` is its peak (torch's CPU allocator returns large blocks to the OS, so the
resident size follows it; tracemalloc would not see torch at all). On CUDA it is
``torch.cuda.max_memory_allocated`` above what was allocated before. :func:`peak_memory`
is meant to run through :func:`attnlab._proc.call_isolated`, one fresh process per
measurement, so that nothing measured before inflates it.
"""

from __future__ import annotations

import time
from typing import TypedDict, final

import torch

from attnlab._proc import reset_peak_rss
from attnlab.bench.config import BenchConfig, BenchConfigJSON
from attnlab.bench.contenders import attention_contenders

__all__ = ["METHOD", "PeakMemory", "peak_memory"]

METHOD = ("fresh subprocess: reset VmHWM via /proc/self/clear_refs after the inputs exist, "
          "run once, peak = VmHWM - VmRSS before (MiB)")


@final
class PeakMemory(TypedDict):
    """What :func:`peak_memory` measured, by contender (final: it holds no other key)."""

    peak_mb: dict[str, float]  # peak extra MiB of one forward
    seconds: dict[str, float]  # its time
    #: whether VmHWM could be reset before each call on the CPU (False: each peak is an
    #: upper bound); None on CUDA
    hwm_reset: bool | None


def _status_kb(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise OSError(f"{field_name} not in /proc/self/status")


def peak_memory(config: BenchConfigJSON, n: int, causal: bool = False, device: str = "cpu",
                rows: int | None = None, only: list[str] | None = None) -> PeakMemory:
    """Peak extra MiB (and seconds) of one forward of each contender at length ``n``.

    ``config`` is :meth:`BenchConfig.to_json`; ``rows`` runs only the last ``rows`` queries
    against all ``n`` keys (causal stays bottom-right aligned); ``only`` names contenders.
    Returns ``{"peak_mb": {name: MiB}, "seconds": {name: s}, "hwm_reset": bool}``.
    """
    cfg = BenchConfig.from_json(config)
    rows = rows or n
    g = torch.Generator().manual_seed(cfg.seed)
    b, h, d = cfg.batch, cfg.heads, cfg.head_dim
    q = torch.randn(b, h, rows, d, generator=g).to(device)
    k = torch.randn(b, h, n, d, generator=g).to(device)
    v = torch.randn(b, h, n, d, generator=g).to(device)
    fns = attention_contenders(causal, n, cfg, device)
    if rows != n:  # only these take fewer queries than keys
        fns = {name: fns[name] for name in ("torch_sdpa", "chunked") if name in fns}
        if causal:
            fns.pop("torch_sdpa")  # its is_causal is top-left aligned
    names = [name for name in (only or list(fns)) if name in fns]
    result: PeakMemory = {"peak_mb": {}, "seconds": {}, "hwm_reset": None}
    small = torch.randn(b, h, 64, d, generator=g).to(device)
    warm = attention_contenders(causal, 64, cfg, device)
    for name in names:  # first calls allocate pools and caches: not the kernel's memory
        warm[name](small, small, small)
    for name in names:
        fn = fns[name]
        with torch.no_grad():
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
                # VmHWM reset to the current RSS; where it cannot be, the peak is an upper bound
                result["hwm_reset"] = reset_peak_rss()
                base = _status_kb("VmRSS")
                t0 = time.perf_counter()
                out = fn(q, k, v)
                dt = time.perf_counter() - t0
                peak = (_status_kb("VmHWM") - base) / 1024
        del out
        result["peak_mb"][name] = round(peak, 1)
        result["seconds"][name] = dt
    return result
