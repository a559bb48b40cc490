"""linear-attention: elu+1 linear attention is an RNN, and its cost grows linearly in N.

Replace exp(q·k) by the kernel φ(q)·φ(k) with φ(x) = elu(x) + 1 > 0 (Katharopoulos et al.).
The causal output

    out_i = φ(q_i)ᵀ S_i / φ(q_i)ᵀ z_i,    S_i = Σ_{j≤i} φ(k_j) v_jᵀ,   z_i = Σ_{j≤i} φ(k_j)

has a parallel form (an N × N masked matrix, like softmax attention) and a recurrent form
(update the state S, z one token at a time: an RNN), which must agree exactly. Scanned in
chunks with the state carried between them, it costs O(N·d²) against softmax's O(N²·d).
It is a different kernel, so its outputs differ from softmax attention's.

Both forms are attnlab's own (``attnlab.core.linear.linear_attention``, ``form="parallel"``
and ``form="recurrent"`` with ``chunk=1``: the step-by-step RNN); the textbook formula
below (:func:`reference_parallel`) is the theory they are checked against.

The equalities are identities (the same sums in another order: no input can break them) and
the FLOP counts are fixed by the algorithms (polynomials in N whatever the numbers): they hold
by construction, each beside the deliberately wrong variant the same test must reject — an
RNN that reads its state before adding the token (:func:`recurrent_reads_before_writing`),
the textbook formula without the causal mask, chunks scanned with the state reset at each
chunk (:func:`chunks_without_state`), and for the exponents the other algorithm: the
parallel form of the same linear attention (an N × N matrix, quadratic) must fail the
linear exponent, the linear backend must fail softmax's quadratic one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.core.functional import count_flops, scaled_dot_product_attention
from attnlab.core.linear import linear_attention

from ._common import check_ge, check_le, fit_exponent, label_axes, new_figure, seeded
from ._result import Check, Control, Result

NAME = "linear-attention"
CLAIM = ("elu+1 linear attention's recurrent (RNN) form equals its parallel causal form, its "
         "cost grows linearly in N while softmax attention's grows quadratically.")
CLAIM_ZH = ("elu+1 线性注意力的递归（RNN）形式与其并行因果形式相等（只差浮点舍入）；"
            "其计算量随 N 线性增长，而 softmax 注意力的计算量随 N 平方增长。")

ZH = {
    "max |attnlab parallel form − textbook formula| (fp64)":
        "attnlab 并行形式与教科书公式之差的最大绝对值（fp64）",
    "max |backend='linear' (chunked scan) − parallel form| (fp64)":
        "线性后端（分块扫描）与并行形式之差的最大绝对值（fp64）",
    "FLOP exponent of linear attention (FLOPs ∝ N^e, counted)":
        "线性注意力的 FLOPs 指数（FLOPs ∝ N^e，计数所得）",
    "FLOP exponent of softmax attention (counted)": "softmax 注意力的 FLOPs 指数（计数所得）",
    "linear FLOPs": "线性注意力 FLOPs",
    "softmax FLOPs": "softmax 注意力 FLOPs",
    "linear (ms)": "线性注意力（ms）",
    "softmax (ms)": "softmax 注意力（ms）",
    "time softmax / linear": "耗时之比 softmax / 线性",
    "Counted FLOPs: ∝ N² vs ∝ N": "计数得到的 FLOPs：∝ N² 与 ∝ N",
    "sequence length N (tokens)": "序列长度 N（词元数）",
    "FLOPs per forward (counted, log scale)": "每次前向的 FLOPs（计数所得，对数坐标）",
    "softmax attention": "softmax 注意力",
    "elu+1 linear attention": "elu+1 线性注意力",
    "softmax attention (fitted N^{})": "softmax 注意力（拟合为 N^{}）",
    "elu{} linear attention (fitted N^{})": "elu{} 线性注意力（拟合为 N^{}）",
    "Measured time, causal, one head, one thread": "实测耗时（因果，单头，单线程）",
    "time per forward (ms, log scale)": "每次前向的耗时（ms，对数坐标）",
}


def feature_map(x: Tensor) -> Tensor:
    """φ(x) = elu(x) + 1: positive, so the normaliser φ(q)ᵀz never vanishes."""
    return F.elu(x) + 1


def reference_parallel(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The textbook causal formula as one masked N × N matrix. (..., N, d) -> (..., N, dv)."""
    a = (feature_map(q) @ feature_map(k).transpose(-2, -1)).tril()  # (..., N, N) causal
    return (a @ v) / a.sum(-1, keepdim=True)


def attnlab_parallel(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return linear_attention(q, k, v, causal=True, form="parallel")


def attnlab_recurrent(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """attnlab's recurrent form, one token per step (an RNN)."""
    return linear_attention(q, k, v, causal=True, form="recurrent", chunk=1)


def attnlab_fast(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """What users call: ``scaled_dot_product_attention(..., backend="linear")``."""
    return scaled_dot_product_attention(q, k, v, causal=True, backend="linear")


def reference_non_causal(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Wrong: the textbook formula without the causal mask (each token sees every token)."""
    a = feature_map(q) @ feature_map(k).transpose(-2, -1)  # (..., N, N)
    return (a @ v) / a.sum(-1, keepdim=True)


def chunks_without_state(q: Tensor, k: Tensor, v: Tensor, chunk: int = 64) -> Tensor:
    """Wrong: each chunk of ``chunk`` tokens scanned on its own, the state not carried from
    the chunks before it."""
    return torch.cat([attnlab_fast(q[..., i:i + chunk, :], k[..., i:i + chunk, :],
                                   v[..., i:i + chunk, :])
                      for i in range(0, q.shape[-2], chunk)], dim=-2)


def recurrent_reads_before_writing(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Wrong: an RNN that reads the state before adding token i (each token misses itself)."""
    fq, fk = feature_map(q), feature_map(k)
    s = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype) + 1e-6
    z = torch.zeros(*q.shape[:-2], q.shape[-1], dtype=q.dtype) + 1e-6
    outs = []
    for i in range(q.shape[-2]):
        outs.append((fq[..., i, :, None] * s).sum(-2) / (fq[..., i, :] * z).sum(-1, keepdim=True))
        s = s + fk[..., i, :, None] * v[..., i, None, :]
        z = z + fk[..., i, :]
    return torch.stack(outs, dim=-2)


def _softmax_causal(q: Tensor, k: Tensor, v: Tensor, weights: bool = False) -> object:
    return scaled_dot_product_attention(q, k, v, causal=True, return_weights=weights)


def _flops(fn: Callable[..., object], *args: object) -> int:
    return count_flops(fn, *args)


def _seconds(fn: Callable[..., object], *args: object) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


#: Why the claim holds whatever the input.
BY_CONSTRUCTION = ("The recurrent form adds φ(k_j)v_jᵀ and φ(k_j) to its state one token at a "
                   "time, the parallel form sums the same terms for j ≤ i at once: the same sums "
                   "in another order, whatever q, k, v (fp64 rounding only); the FLOP counts are "
                   "fixed by the two algorithms.")
BY_CONSTRUCTION_ZH = ("递归形式每次向状态中加入一个词元的 φ(k_j)v_jᵀ 与 φ(k_j)，并行形式"
                      "一次性对 j ≤ i 求同样的和：只是求和顺序不同，与 q、k、v 无关"
                      "（只差 fp64 舍入）；FLOPs 计数由两种算法本身决定。")


@dataclass(frozen=True)
class Timing:
    """One sequence length timed: the fastest of the repeats, in seconds."""

    n: int
    linear: float
    softmax: float

    def cells(self) -> list:
        return [self.n, "", "", 1e3 * self.linear, 1e3 * self.softmax,
                self.softmax / self.linear]


@dataclass(frozen=True)
class FlopCount:
    """One sequence length's FLOPs per forward, counted."""

    n: int
    linear: int  # backend="linear" (chunked scan)
    softmax: int  # softmax attention, explicit path
    parallel: int  # the parallel form of the same linear attention

    def cells(self) -> list:
        return [self.n, self.linear, self.softmax, "", "", ""]


@dataclass(frozen=True)
class LinearAttentionMeasurement:
    """Exactness of the forms in fp64 (with their wrong variants), counted FLOPs and
    timings per sequence length."""

    n_exact: int
    d: int
    repeats: int
    recurrent_error: float  # max |recurrent_fn − parallel form|
    control_error: float  # the same for control_fn
    chunked_error: float  # max |backend='linear' − parallel form|
    stateless_error: float  # the same, chunks scanned with the state reset
    textbook_error: float  # max |parallel form − textbook formula|
    non_causal_error: float  # the same against the formula without the causal mask
    softmax_distance: float  # relative L2 distance from softmax attention's outputs
    timings: tuple[Timing, ...]
    flops: tuple[FlopCount, ...]

    def _fit(self, rows: Sequence, field: str) -> float:
        return fit_exponent([r.n for r in rows], [getattr(r, field) for r in rows])

    @property
    def time_exponents(self) -> tuple[float, float]:
        """Fitted exponents of the time, linear and softmax."""
        return self._fit(self.timings, "linear"), self._fit(self.timings, "softmax")

    @property
    def flop_exponents(self) -> tuple[float, float, float]:
        """Fitted exponents of the FLOPs: linear, softmax, linear's parallel form."""
        return (self._fit(self.flops, "linear"), self._fit(self.flops, "softmax"),
                self._fit(self.flops, "parallel"))


def _timings(g: torch.Generator, lengths: Sequence[int], d: int, repeats: int
             ) -> tuple[Timing, ...]:
    """fp32, one head: the fastest of ``repeats`` interleaved runs per length."""
    out = []
    for n in lengths:
        qt, kt, vt = (torch.randn(1, 1, n, d, generator=g) for _ in range(3))  # (B, H, N, d)
        attnlab_fast(qt[..., :64, :], kt[..., :64, :], vt[..., :64, :])  # warm-up
        _softmax_causal(qt[..., :64, :], kt[..., :64, :], vt[..., :64, :])
        with torch.no_grad():  # interleaved; the fastest of the repeats (noise only adds)
            tl, ts = [], []
            for _ in range(repeats):
                tl.append(_seconds(attnlab_fast, qt, kt, vt))
                ts.append(_seconds(_softmax_causal, qt, kt, vt))
        out.append(Timing(n, min(tl), min(ts)))
    return tuple(out)


def _flop_counts(g: torch.Generator, lengths: Sequence[int], d: int) -> tuple[FlopCount, ...]:
    """FLOPs are exact polynomials in N: small N suffice."""
    out = []
    for n in lengths:
        qt, kt, vt = (torch.randn(1, 1, n, d, generator=g) for _ in range(3))  # (B, H, N, d)
        out.append(FlopCount(n, _flops(attnlab_fast, qt, kt, vt),
                             _flops(_softmax_causal, qt, kt, vt, True),  # explicit: matmuls
                             _flops(attnlab_parallel, qt, kt, vt)))
    return tuple(out)


def measure(
    seed: int = 0,
    *,
    n_exact: int = 150,
    lengths: Sequence[int] = (1024, 2048, 4096, 8192),
    flop_lengths: Sequence[int] = (256, 512, 1024, 2048),
    d: int = 32,
    repeats: int = 3,
    recurrent_fn: Callable[[Tensor, Tensor, Tensor], Tensor] = attnlab_recurrent,
    control_fn: Callable[[Tensor, Tensor, Tensor], Tensor] = recurrent_reads_before_writing,
) -> LinearAttentionMeasurement:
    """Exactness in fp64, timings, counted FLOPs (arguments: see :func:`run`)."""
    with seeded(seed) as g:
        q, k, v = (torch.randn(2, 2, n_exact, 16, generator=g, dtype=torch.float64)
                   for _ in range(3))
        par = attnlab_parallel(q, k, v)
        rec = recurrent_fn(q, k, v)
        fast = attnlab_fast(q, k, v)
        soft = scaled_dot_product_attention(q, k, v, causal=True)

        def error(x: Tensor) -> float:  # from attnlab's parallel form
            return float((x - par).abs().max())

        exact = (error(rec), error(control_fn(q, k, v)), error(fast),
                 error(chunks_without_state(q, k, v)), error(reference_parallel(q, k, v)),
                 error(reference_non_causal(q, k, v)), float((par - soft).norm() / soft.norm()))
        timings = _timings(g, lengths, d, repeats)
        flops = _flop_counts(g, flop_lengths, d)
    return LinearAttentionMeasurement(n_exact, d, repeats, *exact, timings, flops)


def headline_control(m: LinearAttentionMeasurement) -> Control:
    """An RNN that reads its state before adding the token."""
    return Control("an RNN that reads its state before adding the token",
                   "先读取状态、再加入当前词元的 RNN", m.control_error)


def checks(m: LinearAttentionMeasurement) -> list[Check]:
    """The textbook formula, the chunked scan, the two FLOP exponents; each beside its
    wrong variant."""
    ef_lin, ef_soft, ef_par = m.flop_exponents
    return [
        check_le("max |attnlab parallel form − textbook formula| (fp64)", m.textbook_error,
                 1e-12, id="textbook-formula", by_construction=True,
                 control=Control("the textbook formula without the causal mask",
                                 "去掉因果掩码的教科书公式", m.non_causal_error)),
        check_le("max |backend='linear' (chunked scan) − parallel form| (fp64)",
                 m.chunked_error, 1e-10, id="chunked-scan", by_construction=True,
                 control=Control("chunks of 64 scanned with the state reset at each chunk",
                                 "每 64 个词元一块、每块重置状态的扫描", m.stateless_error)),
        check_le("FLOP exponent of linear attention (FLOPs ∝ N^e, counted)", ef_lin, 1.05,
                 id="linear-flop-exponent", by_construction=True,
                 control=Control("the same linear attention in its parallel form (an N × N "
                                 "matrix)", "同一线性注意力的并行形式（N × N 矩阵）", ef_par)),
        check_ge("FLOP exponent of softmax attention (counted)", ef_soft, 1.8,
                 id="softmax-flop-exponent", by_construction=True,
                 control=Control("linear attention (backend='linear')",
                                 "线性注意力（线性后端）", ef_lin)),
    ]


def table(m: LinearAttentionMeasurement) -> tuple[list[str], list[list]]:
    """The counted FLOPs per length, then the timings per length."""
    return (["N", "linear FLOPs", "softmax FLOPs", "linear (ms)", "softmax (ms)",
             "time softmax / linear"],
            [r.cells() for r in m.flops] + [r.cells() for r in m.timings])


def captions(m: LinearAttentionMeasurement) -> tuple[str, str]:
    """The caption in English and in Chinese: the settings, the fitted time exponents, the
    distance from softmax attention."""
    e_lin, e_soft = m.time_exponents
    n_exact, d, repeats, rel_soft = m.n_exact, m.d, m.repeats, m.softmax_distance
    en = (f"Exactness: B·H = 4 sequences of {n_exact} tokens, d = 16, fp64; recurrent = "
          f"attnlab's RNN form (one token per step). FLOPs counted by torch.utils.flop_counter "
          f"(softmax on its explicit path). Timing: one head, d = {d}, fp32, one thread, best "
          f"of {repeats}; linear = backend='linear'; fitted time exponents: linear "
          f"{e_lin:.2f}, softmax {e_soft:.2f}. Distance from softmax attention's outputs: "
          f"relative L2 error {rel_soft:.2f} (a different kernel, not an approximation that "
          "converges). Timings are shown, not judged: pass/fail rests on exact numbers and "
          "counted FLOPs.")
    zh = (f"精确性：B·H = 4 个长为 {n_exact} 的序列，d = 16，fp64；“递归”指 attnlab "
          f"的 RNN 形式（每步一个词元）。FLOPs 由 PyTorch 的 FLOP 计数器统计（softmax "
          f"走显式路径）。计时：单头，d = {d}，fp32，单线程，取 {repeats} 次中最快的"
          f"一次；线性注意力走分块扫描的线性后端；拟合的时间指数：线性 {e_lin:.2f}，"
          f"softmax {e_soft:.2f}。与 softmax 注意力输出的相对 L2 误差为 "
          f"{rel_soft:.2f}：这是另一种核，而不是会收敛到 softmax 的近似。计时只作展示，"
          "通过与否只看精确数值和计数得到的 FLOPs。")
    return en, zh


def run(
    seed: int = 0,
    *,
    n_exact: int = 150,
    lengths: Sequence[int] = (1024, 2048, 4096, 8192),
    flop_lengths: Sequence[int] = (256, 512, 1024, 2048),
    d: int = 32,
    repeats: int = 3,
    recurrent_fn: Callable[[Tensor, Tensor, Tensor], Tensor] = attnlab_recurrent,
    control_fn: Callable[[Tensor, Tensor, Tensor], Tensor] = recurrent_reads_before_writing,
    plot: bool = True,
) -> Result:
    """Exactness in fp64 at ``n_exact`` tokens; FLOPs counted; timings (fp32, one thread)
    up to 8k tokens. The verdict rests on exact numbers and counted FLOPs; timings on a
    shared machine are shown, not judged (they belong to benchmarks).

    Wrong variant: :func:`recurrent_reads_before_writing`, which is also the headline's
    control (``control_fn``); handing :func:`attnlab_recurrent` as the control makes it
    pass and the result not hold.
    """
    m = measure(seed, n_exact=n_exact, lengths=lengths, flop_lengths=flop_lengths, d=d,
                repeats=repeats, recurrent_fn=recurrent_fn, control_fn=control_fn)
    caption, caption_zh = captions(m)
    return Result(
        NAME, CLAIM, CLAIM_ZH, origin="attnlab",  # attnlab's addition, not the articles'
        quantity="max |recurrent (RNN) form − parallel causal form| (fp64)",
        quantity_zh="递归（RNN）形式与并行因果形式之差的最大绝对值（fp64）",
        measured=m.recurrent_error, expected=0.0, tolerance=1e-10, checks=checks(m),
        control=headline_control(m), by_construction=BY_CONSTRUCTION,
        by_construction_zh=BY_CONSTRUCTION_ZH, table=table(m),
        figure=figure(m) if plot else None, caption=caption, caption_zh=caption_zh)


def figure(m: LinearAttentionMeasurement):
    """Counted FLOPs and measured time against N, linear and softmax."""
    from matplotlib.ticker import NullFormatter

    e_lin, e_soft = m.time_exponents
    flop_lengths = [r.n for r in m.flops]
    lengths = [r.n for r in m.timings]
    t_lin, t_soft = [r.linear for r in m.timings], [r.softmax for r in m.timings]
    fig, (ax0, ax) = new_figure(11, 3.9, ncols=2)
    ax0.loglog(flop_lengths, [r.softmax for r in m.flops], "o-", color="#b3261e",
               label="softmax attention")
    ax0.loglog(flop_lengths, [r.linear for r in m.flops], "s-", color="#3451b2",
               label="elu+1 linear attention")
    ax0.set_xticks(flop_lengths, [str(n) for n in flop_lengths])
    ax0.xaxis.set_minor_formatter(NullFormatter())
    label_axes(ax0, "sequence length N (tokens)", "FLOPs per forward (counted, log scale)",
               "Counted FLOPs: ∝ N² vs ∝ N", log_grid=True)
    ax.loglog(lengths, [1e3 * t for t in t_soft], "o-", color="#b3261e",
              label=f"softmax attention (fitted N^{e_soft:.2f})")
    ax.loglog(lengths, [1e3 * t for t in t_lin], "s-", color="#3451b2",
              label=f"elu+1 linear attention (fitted N^{e_lin:.2f})")
    n0, t0 = lengths[-1], 1e3 * t_soft[-1]
    ax.loglog(lengths, [t0 * (n / n0) ** 2 for n in lengths], "k:", lw=1, label="∝ N²")
    n1, t1 = lengths[-1], 1e3 * t_lin[-1]
    ax.loglog(lengths, [t1 * (n / n1) for n in lengths], "k--", lw=1, label="∝ N")
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.xaxis.set_minor_formatter(NullFormatter())
    label_axes(ax, "sequence length N (tokens)", "time per forward (ms, log scale)",
               "Measured time, causal, one head, one thread", log_grid=True)
    return fig
