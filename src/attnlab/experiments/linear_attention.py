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

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.core.functional import count_flops, scaled_dot_product_attention
from attnlab.core.linear import linear_attention

from ._common import check_ge, check_le, fit_exponent, label_axes, new_figure, seeded
from ._result import Control, Result

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
    with seeded(seed) as g:
        q, k, v = (torch.randn(2, 2, n_exact, 16, generator=g, dtype=torch.float64)
                   for _ in range(3))
        par = attnlab_parallel(q, k, v)
        rec = recurrent_fn(q, k, v)
        fast = attnlab_fast(q, k, v)
        soft = scaled_dot_product_attention(q, k, v, causal=True)
        err = float((rec - par).abs().max())
        control_err = float((control_fn(q, k, v) - par).abs().max())
        fast_err = float((fast - par).abs().max())
        stateless_err = float((chunks_without_state(q, k, v) - par).abs().max())
        theory_err = float((par - reference_parallel(q, k, v)).abs().max())
        non_causal_err = float((par - reference_non_causal(q, k, v)).abs().max())
        rel_soft = float((par - soft).norm() / soft.norm())

        t_lin, t_soft, f_lin, f_soft, f_par = [], [], [], [], []
        for n in lengths:
            qt, kt, vt = (torch.randn(1, 1, n, d, generator=g) for _ in range(3))  # (B, H, N, d)
            attnlab_fast(qt[..., :64, :], kt[..., :64, :], vt[..., :64, :])  # warm-up
            _softmax_causal(qt[..., :64, :], kt[..., :64, :], vt[..., :64, :])
            with torch.no_grad():  # interleaved; the fastest of the repeats (noise only adds)
                tl, ts = [], []
                for _ in range(repeats):
                    tl.append(_seconds(attnlab_fast, qt, kt, vt))
                    ts.append(_seconds(_softmax_causal, qt, kt, vt))
            t_lin.append(min(tl))
            t_soft.append(min(ts))
        for n in flop_lengths:  # FLOPs are exact polynomials in N: small N suffice
            qt, kt, vt = (torch.randn(1, 1, n, d, generator=g) for _ in range(3))  # (B, H, N, d)
            f_lin.append(_flops(attnlab_fast, qt, kt, vt))
            f_par.append(_flops(attnlab_parallel, qt, kt, vt))
            f_soft.append(_flops(_softmax_causal, qt, kt, vt, True))  # explicit: matmuls seen
    e_lin, e_soft = fit_exponent(lengths, t_lin), fit_exponent(lengths, t_soft)
    ef_lin, ef_soft = fit_exponent(flop_lengths, f_lin), fit_exponent(flop_lengths, f_soft)
    ef_par = fit_exponent(flop_lengths, f_par)
    checks = [
        check_le("max |attnlab parallel form − textbook formula| (fp64)", theory_err, 1e-12,
                 id="textbook-formula", by_construction=True,
                 control=Control("the textbook formula without the causal mask",
                                 "去掉因果掩码的教科书公式", non_causal_err)),
        check_le("max |backend='linear' (chunked scan) − parallel form| (fp64)", fast_err,
                 1e-10, id="chunked-scan", by_construction=True,
                 control=Control("chunks of 64 scanned with the state reset at each chunk",
                                 "每 64 个词元一块、每块重置状态的扫描", stateless_err)),
        check_le("FLOP exponent of linear attention (FLOPs ∝ N^e, counted)", ef_lin, 1.05,
                 id="linear-flop-exponent", by_construction=True,
                 control=Control("the same linear attention in its parallel form (an N × N "
                                 "matrix)", "同一线性注意力的并行形式（N × N 矩阵）", ef_par)),
        check_ge("FLOP exponent of softmax attention (counted)", ef_soft, 1.8,
                 id="softmax-flop-exponent", by_construction=True,
                 control=Control("linear attention (backend='linear')",
                                 "线性注意力（线性后端）", ef_lin)),
    ]
    rows = [[n, "", "", 1e3 * a, 1e3 * b, b / a] for n, a, b in zip(lengths, t_lin, t_soft)]
    rows = [[n, fl, fs, "", "", ""] for n, fl, fs in zip(flop_lengths, f_lin, f_soft)] + rows
    fig = (_figure(lengths, t_lin, t_soft, e_lin, e_soft, flop_lengths, f_lin, f_soft)
           if plot else None)
    return Result(
        NAME, CLAIM, CLAIM_ZH, origin="attnlab",  # attnlab's addition, not the articles'
        quantity="max |recurrent (RNN) form − parallel causal form| (fp64)",
        quantity_zh="递归（RNN）形式与并行因果形式之差的最大绝对值（fp64）",
        measured=err, expected=0.0, tolerance=1e-10, checks=checks,
        control=Control("an RNN that reads its state before adding the token",
                        "先读取状态、再加入当前词元的 RNN", control_err),
        by_construction=("The recurrent form adds φ(k_j)v_jᵀ and φ(k_j) to its state one token "
                         "at a time, the parallel form sums the same terms for j ≤ i at once: "
                         "the same sums in another order, whatever q, k, v (fp64 rounding "
                         "only); the FLOP counts are fixed by the two algorithms."),
        by_construction_zh=("递归形式每次向状态中加入一个词元的 φ(k_j)v_jᵀ 与 φ(k_j)，并行形式"
                            "一次性对 j ≤ i 求同样的和：只是求和顺序不同，与 q、k、v 无关"
                            "（只差 fp64 舍入）；FLOPs 计数由两种算法本身决定。"),
        table=(["N", "linear FLOPs", "softmax FLOPs", "linear (ms)", "softmax (ms)",
                "time softmax / linear"], rows),
        figure=fig,
        caption=f"Exactness: B·H = 4 sequences of {n_exact} tokens, d = 16, fp64; recurrent = "
                f"attnlab's RNN form (one token per step). "
                f"FLOPs counted by torch.utils.flop_counter (softmax on its explicit path). "
                f"Timing: one head, d = {d}, fp32, one thread, best of {repeats}; linear = "
                f"backend='linear'; fitted time exponents: linear {e_lin:.2f}, softmax "
                f"{e_soft:.2f}. "
                f"Distance from softmax attention's outputs: relative L2 error {rel_soft:.2f} "
                "(a different kernel, not an approximation that converges). Timings are shown, "
                "not judged: pass/fail rests on exact numbers and counted FLOPs.",
        caption_zh=f"精确性：B·H = 4 个长为 {n_exact} 的序列，d = 16，fp64；“递归”指 attnlab "
                   f"的 RNN 形式（每步一个词元）。FLOPs 由 PyTorch 的 FLOP 计数器统计（softmax "
                   f"走显式路径）。计时：单头，d = {d}，fp32，单线程，取 {repeats} 次中最快的"
                   f"一次；线性注意力走分块扫描的线性后端；拟合的时间指数：线性 {e_lin:.2f}，"
                   f"softmax {e_soft:.2f}。与 softmax 注意力输出的相对 L2 误差为 "
                   f"{rel_soft:.2f}：这是另一种核，而不是会收敛到 softmax 的近似。计时只作展示，"
                   "通过与否只看精确数值和计数得到的 FLOPs。",
    )


def _figure(lengths, t_lin, t_soft, e_lin, e_soft, flop_lengths, f_lin, f_soft):
    from matplotlib.ticker import NullFormatter

    fig, (ax0, ax) = new_figure(11, 3.9, ncols=2)
    ax0.loglog(flop_lengths, f_soft, "o-", color="#b3261e", label="softmax attention")
    ax0.loglog(flop_lengths, f_lin, "s-", color="#3451b2", label="elu+1 linear attention")
    ax0.set_xticks(list(flop_lengths), [str(n) for n in flop_lengths])
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
    ax.set_xticks(list(lengths), [str(n) for n in lengths])
    ax.xaxis.set_minor_formatter(NullFormatter())
    label_axes(ax, "sequence length N (tokens)", "time per forward (ms, log scale)",
               "Measured time, causal, one head, one thread", log_grid=True)
    return fig
