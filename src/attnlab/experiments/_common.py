"""Helpers shared by the experiments: seeding, scores read back from attnlab, figures."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
from torch import Tensor

from attnlab._proc import torch_threads
from attnlab.core.functional import scaled_dot_product_attention

from ._result import Check, Control, fmt_num

__all__ = ["one_thread", "seeded", "scores_via_attnlab", "entropy", "new_figure", "fit_exponent",
           "check_le", "check_ge", "check_between", "expect_type", "ZH"]

#: Chinese for the words several experiments show (tables, checks, axes); each module's own
#: ``ZH`` adds its strings (:func:`attnlab.experiments.registry.catalog` merges the two).
ZH: dict[str, str] = {
    "quantity": "量",
    "value": "数值",
    "value (fp64)": "数值（fp64）",
    "max |row sum − 1|": "|行和 − 1| 的最大值",
    "attention weight": "注意力权重",
    "weight": "权重",
    "score": "分数",
    "query position": "查询的位置",
    "key position": "键的位置",
    "query token": "查询词元",
    "key token": "键词元",
    "head dimension d_k": "头维度 d_k",
    "mean max weight": "平均最大权重",
    "training step": "训练步数",
    "chance": "随机水平",
    "layer": "层",
    "chance = log {}": "随机水平 = log {}",
    "at initialisation": "初始化时",
    "cross-entropy at scored positions (nats)": "计分位置上的交叉熵（奈特）",
    "task: quantity": "任务：量",
    "held-out accuracy": "留出集准确率",
}


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run the block on one intra-op thread, then restore the previous count.

    The experiments are many small ops, which one thread runs fastest on a shared machine
    (several threads spin against each other), and their numbers do not depend on the
    number of cores.
    """
    with torch_threads(1):
        yield


def flushing_subnormals() -> bool:
    """Whether this thread's float arithmetic flushes subnormal numbers to zero (as
    ``torch.set_flush_denormal(True)`` sets it): a float32 subnormal doubled reads as 0."""
    return bool((torch.tensor([1e-39]) * 2).item() == 0.0)


@contextlib.contextmanager
def subnormals_flushed() -> Iterator[None]:
    """Run the block with this thread's subnormal floats flushed to zero
    (``torch.set_flush_denormal``: below 1.18e-38 in float32 a number counts as 0), then
    restore what was set before. Where the CPU cannot, the block runs as it is.

    For training whose softmax saturates: its gradients become subnormal, and an x86 CPU
    computes those tens of times slower than other floats. The unscaled run of
    ``scaling-training`` (100 Adam steps) took 4.3 s instead of 0.6, and gave the same
    losses, bit for bit, flushed or not: an update of 10⁻³⁸ is lost in weights of 10⁻².
    The experiments' block runs on one thread (:func:`seeded`), the one this setting is for.
    """
    if flushing_subnormals() or not torch.set_flush_denormal(True):
        yield
        return
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[torch.Generator]:
    """Seed torch's global RNG (module init) for the block, restore it after; yield a generator.

    The block runs on one thread (:func:`one_thread`).
    """
    with one_thread(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield torch.Generator().manual_seed(seed)


def scores_via_attnlab(q: Tensor, k: Tensor, scale: float | None = None) -> Tensor:
    """The score matrix ``q kᵀ · scale`` exactly as attnlab's attention computes it.

    attnlab returns probabilities, not scores; appending one zero key (score 0) makes the
    scores recoverable: ``s_j = log w_j − log w_zero``. Use fp64 inputs so nothing underflows.
    q: (..., Lq, d), k: (..., Lk, d) -> (..., Lq, Lk)
    """
    zero = torch.zeros(*k.shape[:-2], 1, k.shape[-1], dtype=k.dtype)
    k1 = torch.cat([k, zero], dim=-2)  # (..., Lk+1, d)
    v1 = torch.zeros(*k1.shape[:-1], 1, dtype=k.dtype)
    _, w = scaled_dot_product_attention(q, k1, v1, scale=scale, return_weights=True)
    logw = torch.log(w)
    return logw[..., :-1] - logw[..., -1:]


def entropy(p: Tensor) -> Tensor:
    """Shannon entropy (nats) over the last dim, with 0·log 0 = 0."""
    return -(p * torch.log(p.clamp_min(1e-300))).sum(-1)


def new_figure(width: float = 9.0, height: float = 3.4, ncols: int = 1, nrows: int = 1):
    """A backend-free matplotlib Figure (no pyplot state) and its axes."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def label_axes(ax, xlabel: str, ylabel: str, title: str, *, legend: bool = True,
               log_grid: bool = False) -> None:
    """The experiments' axes: labels, a 10-pt title, a 7-pt legend, a light grid (on the
    minor ticks of a log axis too with ``log_grid``)."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if legend:
        ax.legend(fontsize=7)
    ax.grid(True, which="both" if log_grid else "major", alpha=0.3)


def fit_exponent(ns: list[int], ts: list[float]) -> float:
    """Slope of log t against log n (least squares): t ∝ n^slope."""
    x = torch.log(torch.tensor(ns, dtype=torch.float64))
    y = torch.log(torch.tensor(ts, dtype=torch.float64))
    x = x - x.mean()
    return float((x * (y - y.mean())).sum() / (x * x).sum())


def expect_type(arg: str, value: object, cls: type) -> None:
    """TypeError naming ``arg`` unless ``value`` is a ``cls`` (e.g. an experiment's config).

    >>> expect_type("config", 3, float)
    Traceback (most recent call last):
    ...
    TypeError: config must be a float, got int
    """
    if not isinstance(value, cls):
        raise TypeError(f"{arg} must be a {cls.__name__}, got {type(value).__name__}")


def _ok(x: float) -> bool:
    return math.isfinite(x)


def _check(name: str, value: float, expected: str, test, *, id: str, support: bool,
           control: Control | None, by_construction: bool) -> Check:
    """A check of ``value`` by ``test``; with a ``control``, the same test is applied to the
    control's value and the check passes only when the value passes and the control
    fails."""
    value = float(value)
    ok = _ok(value) and test(value)
    if control is not None:
        if not isinstance(control, Control):
            raise TypeError(f"check {name!r}: control must be a Control, got "
                            f"{type(control).__name__}")
        control = control.judged(_ok(control.measured) and test(control.measured))
        ok = ok and not control.holds
    return Check(name, value, expected, ok, support, id, control, by_construction)


def check_le(name: str, value: float, bound: float, *, id: str, support: bool = False,
             control: Control | None = None, by_construction: bool = False) -> Check:
    """A check that ``value`` ≤ ``bound``; ``id`` is its stable id (:attr:`Check.id`). With
    a ``control`` (:class:`~attnlab.experiments.Control`), it also needs the control's value
    to fail the same test."""
    return _check(name, value, f"≤ {fmt_num(bound)}", lambda x: x <= bound, id=id,
                  support=support, control=control, by_construction=by_construction)


def check_ge(name: str, value: float, bound: float, *, id: str, support: bool = False,
             control: Control | None = None, by_construction: bool = False) -> Check:
    """A check that ``value`` ≥ ``bound``; ``id`` is its stable id (:attr:`Check.id`). With
    a ``control``, it also needs the control's value to fail the same test."""
    return _check(name, value, f"≥ {fmt_num(bound)}", lambda x: x >= bound, id=id,
                  support=support, control=control, by_construction=by_construction)


def check_between(name: str, value: float, lo: float, hi: float, *, id: str,
                  support: bool = False, control: Control | None = None,
                  by_construction: bool = False) -> Check:
    """A check that ``lo`` ≤ ``value`` ≤ ``hi``; ``id`` is its stable id. With a
    ``control``, it also needs the control's value to fail the same test."""
    return _check(name, value, f"in [{fmt_num(lo)}, {fmt_num(hi)}]", lambda x: lo <= x <= hi,
                  id=id, support=support, control=control, by_construction=by_construction)
