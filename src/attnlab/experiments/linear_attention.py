"""linear-attention: elu+1 linear attention is an RNN, and its cost grows linearly in N.

Replace exp(q·k) by the kernel φ(q)·φ(k) with φ(x) = elu(x) + 1 > 0 (Katharopoulos et al.).
The causal output

    out_i = φ(q_i)ᵀ S_i / φ(q_i)ᵀ z_i,    S_i = Σ_{j≤i} φ(k_j) v_jᵀ,   z_i = Σ_{j≤i} φ(k_j)

has a parallel form (an N × N masked matrix, like softmax attention) and a recurrent form
(update the state S, z one token at a time: an RNN), which must agree exactly. Computed in
chunks with the state carried between them, it costs O(N·d²) against softmax's O(N²·d).
It is a different kernel, so its outputs differ from softmax attention's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

import attnlab

from ._common import check_ge, check_le, fit_exponent, new_figure, seeded
from ._result import Result

NAME = "linear-attention"
CLAIM = ("elu+1 linear attention's recurrent (RNN) form equals its parallel causal form, its "
         "cost grows linearly in N while softmax attention's grows quadratically.")
CLAIM_ZH = ("elu+1 线性注意力的递归（RNN）形式与其并行因果形式完全相等；"
            "其计算量随 N 线性增长，而 softmax 注意力随 N 平方增长。")


def feature_map(x: Tensor) -> Tensor:
    """φ(x) = elu(x) + 1: positive, so the normaliser φ(q)ᵀz never vanishes."""
    return F.elu(x) + 1


def linear_parallel(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal linear attention as one masked N × N matrix. (..., N, d) -> (..., N, dv)."""
    a = feature_map(q) @ feature_map(k).transpose(-2, -1)  # (..., N, N)
    a = a.tril()  # causal
    return (a @ v) / a.sum(-1, keepdim=True)


def linear_recurrent(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The same as an RNN: state S (d, dv) and z (d,), one token at a time."""
    fq, fk = feature_map(q), feature_map(k)
    s = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype)
    z = torch.zeros(*q.shape[:-2], q.shape[-1], dtype=q.dtype)
    outs = []
    for i in range(q.shape[-2]):
        s = s + fk[..., i, :, None] * v[..., i, None, :]  # S_i = S_{i-1} + φ(k_i) v_iᵀ
        z = z + fk[..., i, :]
        num = (fq[..., i, :, None] * s).sum(-2)  # φ(q_i)ᵀ S_i
        outs.append(num / (fq[..., i, :] * z).sum(-1, keepdim=True))
    return torch.stack(outs, dim=-2)


def recurrent_reads_before_writing(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Wrong: reads the state before adding token i (each token misses itself)."""
    fq, fk = feature_map(q), feature_map(k)
    s = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=q.dtype) + 1e-6
    z = torch.zeros(*q.shape[:-2], q.shape[-1], dtype=q.dtype) + 1e-6
    outs = []
    for i in range(q.shape[-2]):
        outs.append((fq[..., i, :, None] * s).sum(-2) / (fq[..., i, :] * z).sum(-1, keepdim=True))
        s = s + fk[..., i, :, None] * v[..., i, None, :]
        z = z + fk[..., i, :]
    return torch.stack(outs, dim=-2)


def linear_chunked(q: Tensor, k: Tensor, v: Tensor, chunk: int = 64) -> Tensor:
    """O(N·(C + d)·d) causal linear attention: exact within chunks of C tokens, states between.

    The fast form: per chunk a C × C masked block, plus the state S (d, dv) and z (d,)
    carried over from all earlier chunks (an exclusive prefix sum over chunks).
    """
    core = _core_linear()
    if core is not None:
        return core(q, k, v)
    *batch, n, d = q.shape
    pad = (-n) % chunk
    fq, fk = feature_map(q), feature_map(k)
    if pad:
        fq, fk = F.pad(fq, (0, 0, 0, pad)), F.pad(fk, (0, 0, 0, pad))
        v = F.pad(v, (0, 0, 0, pad))
    m = (n + pad) // chunk
    fq = fq.reshape(*batch, m, chunk, d)  # (..., M, C, d)
    fk = fk.reshape(*batch, m, chunk, d)
    vc = v.reshape(*batch, m, chunk, v.shape[-1])  # (..., M, C, dv)
    a = (fq @ fk.transpose(-2, -1)).tril()  # (..., M, C, C) causal inside the chunk
    kv = fk.transpose(-2, -1) @ vc  # (..., M, d, dv) each chunk's φ(k)ᵀv
    s = torch.cumsum(kv, dim=-3) - kv  # (..., M, d, dv) state before each chunk
    z = torch.cumsum(fk.sum(-2), dim=-2) - fk.sum(-2)  # (..., M, d)
    num = a @ vc + fq @ s  # (..., M, C, dv)
    den = a.sum(-1, keepdim=True) + fq @ z[..., :, None]  # (..., M, C, 1)
    out = (num / den).reshape(*batch, m * chunk, v.shape[-1])
    return out[..., :n, :]


def _core_linear() -> Callable[[Tensor, Tensor, Tensor], Tensor] | None:
    """attnlab's own ``backend="linear"`` when the core provides it and it agrees."""
    try:
        q = torch.randn(1, 5, 4, dtype=torch.float64)
        out = attnlab.scaled_dot_product_attention(q, q, q, causal=True, backend="linear")
        if not torch.allclose(out, linear_parallel(q, q, q), atol=1e-10):
            return None
    except (ImportError, AttributeError, NotImplementedError, ValueError, TypeError):
        return None
    return lambda q_, k_, v_: attnlab.scaled_dot_product_attention(
        q_, k_, v_, causal=True, backend="linear")


def _softmax_causal(q: Tensor, k: Tensor, v: Tensor, weights: bool = False) -> object:
    return attnlab.scaled_dot_product_attention(q, k, v, causal=True, return_weights=weights)


def _flops(fn: Callable[..., object], *args: object) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        fn(*args)
    return fc.get_total_flops()


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
    d: int = 16,
    repeats: int = 2,
    recurrent_fn: Callable[[Tensor, Tensor, Tensor], Tensor] = linear_recurrent,
    plot: bool = True,
) -> Result:
    """Exactness in fp64 at ``n_exact`` tokens; timings (fp32, one thread) up to 8k tokens.

    Wrong variant: :func:`recurrent_reads_before_writing`.
    """
    with seeded(seed) as g:
        q, k, v = (torch.randn(2, 2, n_exact, 16, generator=g, dtype=torch.float64)
                   for _ in range(3))
        par = linear_parallel(q, k, v)
        rec = recurrent_fn(q, k, v)
        fast = linear_chunked(q, k, v)
        soft = attnlab.scaled_dot_product_attention(q, k, v, causal=True)
        err = float((rec - par).abs().max())
        fast_err = float((fast - par).abs().max())
        rel_soft = float((par - soft).norm() / soft.norm())

        t_lin, t_soft, f_lin, f_soft = [], [], [], []
        for n in lengths:
            qt, kt, vt = (torch.randn(1, n, d, generator=g) for _ in range(3))
            linear_chunked(qt[:, :64], kt[:, :64], vt[:, :64])  # warm-up
            attnlab.scaled_dot_product_attention(qt[:, :64], kt[:, :64], vt[:, :64],
                                                 causal=True)
            with torch.no_grad():  # interleaved; the fastest of the repeats (noise only adds)
                tl, ts = [], []
                for _ in range(repeats):
                    tl.append(_seconds(linear_chunked, qt, kt, vt))
                    ts.append(_seconds(_softmax_causal, qt, kt, vt))
            t_lin.append(min(tl))
            t_soft.append(min(ts))
        for n in flop_lengths:  # FLOPs are exact polynomials in N: small N suffice
            qt, kt, vt = (torch.randn(1, n, d, generator=g) for _ in range(3))
            f_lin.append(_flops(linear_chunked, qt, kt, vt))
            f_soft.append(_flops(_softmax_causal, qt, kt, vt, True))  # explicit: matmuls seen
    e_lin, e_soft = fit_exponent(lengths, t_lin), fit_exponent(lengths, t_soft)
    ef_lin, ef_soft = fit_exponent(flop_lengths, f_lin), fit_exponent(flop_lengths, f_soft)
    checks = [
        check_le("max |chunked form − parallel form| (fp64)", fast_err, 1e-10),
        check_le("FLOP exponent of linear attention (FLOPs ∝ N^e, counted)", ef_lin, 1.05),
        check_ge("FLOP exponent of softmax attention (counted)", ef_soft, 1.8),
        check_ge(f"time softmax / linear at N = {lengths[-1]}", t_soft[-1] / t_lin[-1], 4.0),
    ]
    rows = [[n, "", "", 1e3 * a, 1e3 * b, b / a] for n, a, b in zip(lengths, t_lin, t_soft)]
    rows = [[n, fl, fs, "", "", ""] for n, fl, fs in zip(flop_lengths, f_lin, f_soft)] + rows
    fig = _figure(lengths, t_lin, t_soft, e_lin, e_soft) if plot else None
    source = "attnlab backend='linear'" if _core_linear() is not None else "chunked prefix sums"
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity="max |recurrent (RNN) form − parallel causal form| (fp64)",
        quantity_zh="递归（RNN）形式与并行因果形式之差的最大绝对值（fp64）",
        measured=err, expected=0.0, tolerance=1e-10, checks=checks,
        table=(["N", "linear FLOPs", "softmax FLOPs", "linear (ms)", "softmax (ms)",
                "time softmax / linear"], rows),
        figure=fig,
        caption=f"Exactness: B·H = 4 sequences of {n_exact} tokens, d = 16, fp64, chunks of 64. "
                f"FLOPs counted by torch.utils.flop_counter (softmax on its explicit path). "
                f"Timing: one head, d = {d}, fp32, one thread, best of {repeats}; linear = "
                f"{source}; fitted time exponents: linear {e_lin:.2f}, softmax {e_soft:.2f}. "
                f"Distance from softmax attention's outputs: relative L2 error {rel_soft:.2f} "
                "(a different kernel, not an approximation that converges).",
        caption_zh=f"精确性：B·H = 4 个长 {n_exact} 的序列，d = 16，fp64，每块 64。FLOPs 由 "
                   f"torch.utils.flop_counter 计数（softmax 走显式路径）。计时：单头，d = {d}，"
                   f"fp32，单线程，取 {repeats} 次中的最快；线性 = {source}；拟合的时间指数："
                   f"线性 {e_lin:.2f}，softmax {e_soft:.2f}。与 softmax 注意力输出的相对 L2 "
                   f"误差为 {rel_soft:.2f}（这是另一种核，而非收敛的近似）。",
    )


def _figure(lengths, t_lin, t_soft, e_lin, e_soft):
    fig, (ax,) = new_figure(6.8, 3.9)
    ax.loglog(lengths, [1e3 * t for t in t_soft], "o-", color="#b3261e",
              label=f"softmax attention (fitted N^{e_soft:.2f})")
    ax.loglog(lengths, [1e3 * t for t in t_lin], "s-", color="#3451b2",
              label=f"elu+1 linear attention (fitted N^{e_lin:.2f})")
    n0, t0 = lengths[-1], 1e3 * t_soft[-1]
    ax.loglog(lengths, [t0 * (n / n0) ** 2 for n in lengths], "k:", lw=1, label="∝ N²")
    n1, t1 = lengths[-1], 1e3 * t_lin[-1]
    ax.loglog(lengths, [t1 * (n / n1) for n in lengths], "k--", lw=1, label="∝ N")
    ax.set_xticks(list(lengths), [str(n) for n in lengths])
    ax.set_xlabel("sequence length N (tokens)")
    ax.set_ylabel("time per forward (ms, log scale)")
    ax.set_title("Causal attention cost: linear vs softmax", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    return fig
