"""Timing side by side: interleaved, rotating order, median of repeats; FLOP counts.

>>> attention_flops(1024, BenchConfig(), causal=False, mode="fwd") == 4 * 8 * 1024**2 * 64
True
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from attnlab.bench.config import BenchConfig

__all__ = ["interleaved", "fwd_bwd", "measure_gemm_gflops", "attention_flops"]


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int, device: str
                ) -> dict[str, float]:
    """Median seconds of each fn: one warm-up each, then rounds in a rotating order."""
    names = list(fns)
    for name in names:
        fns[name]()
    sync(device)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            sync(device)
            t0 = time.perf_counter()
            fns[name]()
            sync(device)
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def fwd_bwd(fn: Callable[[], Tensor], leaves: Sequence[Tensor]) -> Callable[[], None]:
    """``fn`` followed by a backward pass of its sum (the leaves' gradients reset)."""
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
    t = interleaved({"mm": lambda: torch.mm(a, b)}, repeats, device)["mm"]
    return 2 * n**3 / t / 1e9


def attention_flops(n: int, cfg: BenchConfig, causal: bool, mode: str) -> float:
    """The two attention GEMMs, ``4·B·H·N²·d``; half under ``causal``; x3.5 for
    forward+backward (FlashAttention's convention)."""
    f = 4.0 * cfg.batch * cfg.heads * n * n * cfg.head_dim
    return f * (0.5 if causal else 1.0) * (3.5 if mode == "fwd+bwd" else 1.0)
