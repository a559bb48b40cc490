"""multihead-cost: h heads of size d/h cost what one head of size d costs, but see more.

Parameters: W_q, W_k, W_v, W_o are E × E whatever h is — the heads only slice them.
FLOPs: the projections cost 8·N·E² per sequence; the scores and the weighted sum cost
h · 2·N²·(E/h) each = 4·N²·E in total, independent of h (the softmax adds h·N² elementwise
operations, negligible beside them). Both are counted with ``torch.utils.flop_counter``
on attnlab's ``MultiHeadAttention`` and timed.

What h buys: each head reads the input through its own d/h-dimensional subspace (the row
space of its slice W_q^h). In a trained model these subspaces differ: the principal angles
between the heads' subspaces are far from 0 (article 000: "heads as subspaces").
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from attnlab.nn import GPT, GPTConfig, MultiHeadAttention

from ._common import check_ge, check_le, new_figure, seeded
from ._result import Result

NAME = "multihead-cost"
CLAIM = ("h heads of size d/h cost the same parameters and FLOPs as one head of size d, yet "
         "in a trained model the heads read the input through different subspaces.")
CLAIM_ZH = ("h 个维度为 d/h 的头与一个维度为 d 的头参数量和 FLOPs 相同；"
            "但在训练后的模型中，各个头通过不同的子空间读取输入。")


@dataclass(frozen=True)
class CopyTaskConfig:
    vocab_size: int = 32  # small alphabet: the task is about positions, not words
    half: int = 12  # a random half, then its repeat: the second half is predictable
    num_layers: int = 1  # one block is enough to see heads specialise their W_q
    num_heads: int = 4  # six pairs of heads to compare
    embed_dim: int = 64  # head_dim 16
    steps: int = 80  # a few seconds on one CPU thread
    batch: int = 32  # the task is easy: small batches learn it in seconds
    lr: float = 3e-3  # Adam's usual range


def split_heads(w_q: Tensor, heads: int) -> list[Tensor]:
    """W_q (E, E) -> per head the (E/h, E) slice of rows that produces that head's q."""
    return list(w_q.chunk(heads, dim=0))


def principal_angles(a: Tensor, b: Tensor) -> Tensor:
    """Principal angles (radians, ascending) between the row spaces of a (r, E) and b (r, E)."""
    qa = torch.linalg.qr(a.T.double()).Q  # (E, r) orthonormal basis
    qb = torch.linalg.qr(b.T.double()).Q
    cos = torch.linalg.svdvals(qa.T @ qb).clamp(-1, 1)  # descending cosines
    return torch.acos(cos)


def train_copy_model(c: CopyTaskConfig, seed: int
                     ) -> tuple[GPT, list[float], Tensor]:
    """A tiny attnlab GPT trained to continue a repeated random sequence.

    Returns the model, its loss per step, and block 0's W_q at initialisation.
    """
    with seeded(seed) as g:
        model = GPT(GPTConfig(
            vocab_size=c.vocab_size, block_size=2 * c.half, num_layers=c.num_layers,
            num_heads=c.num_heads, embed_dim=c.embed_dim))
        w_q0 = model.blocks[0].attn.qkv_proj.weight.detach()[: c.embed_dim].clone()
        opt = torch.optim.Adam(model.parameters(), lr=c.lr)
        losses = []
        with torch.enable_grad():
            for _ in range(c.steps):
                first = torch.randint(0, c.vocab_size, (c.batch, c.half), generator=g)
                seq = torch.cat([first, first], dim=1)  # (B, 2·half)
                logits = model(seq[:, :-1])
                loss = F.cross_entropy(logits[:, c.half - 1:].reshape(-1, c.vocab_size),
                                       seq[:, c.half:].reshape(-1))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(loss.item())
    return model.eval(), losses, w_q0


def _count(embed_dim: int, heads: int, n: int, batch: int) -> tuple[int, int, float]:
    mha = MultiHeadAttention(embed_dim, heads)
    params = sum(p.numel() for p in mha.parameters())
    x = torch.randn(batch, n, embed_dim)
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        mha(x, need_weights=True)  # the explicit path: every matmul is visible
    return params, fc.get_total_flops(), mha


def run(
    seed: int = 0,
    *,
    embed_dim: int = 256,
    heads: int = 8,
    n: int = 128,
    batch: int = 4,
    config: CopyTaskConfig = CopyTaskConfig(),
    head_split: Callable[[Tensor, int], list[Tensor]] = split_heads,
    plot: bool = True,
) -> Result:
    """Count and time 1 head vs ``heads`` heads; train the copy model; measure the angles.

    Wrong variant: ``head_split`` that hands every head the same rows (angles 0).
    """
    with seeded(seed):
        p1, f1, m1 = _count(embed_dim, 1, n, batch)
        ph, fh, mh = _count(embed_dim, heads, n, batch)
        x = torch.randn(batch, n, embed_dim)
        times: dict[int, list[float]] = {1: [], heads: []}
        with torch.no_grad():
            for _ in range(7):  # interleaved, median
                for h, m in ((1, m1), (heads, mh)):
                    t0 = time.perf_counter()
                    m(x)
                    times[h].append(time.perf_counter() - t0)
    t1, th = sorted(times[1])[3], sorted(times[heads])[3]
    theory = batch * (8 * n * embed_dim**2 + 4 * n * n * embed_dim)

    model, losses, w_q0 = train_copy_model(config, seed)
    e, h = config.embed_dim, config.num_heads
    w_q = model.blocks[0].attn.qkv_proj.weight.detach()[:e]  # (E, E): the W_q rows
    parts = head_split(w_q, h)
    pairs, angles = [], {}
    for i in range(h):
        for j in range(i + 1, h):
            ang = torch.rad2deg(principal_angles(parts[i], parts[j]))
            angles[(i, j)] = ang
            pairs.append([f"{i}–{j}", float(ang.min()), float(ang.mean()), float(ang.max())])
    mean_angle = sum(float(a.mean()) for a in angles.values()) / len(angles)
    init_parts = head_split(w_q0, h)
    init_mean = sum(float(torch.rad2deg(principal_angles(init_parts[i], init_parts[j])).mean())
                    for i in range(h) for j in range(i + 1, h)) / len(angles)
    smallest = min(float(a.min()) for a in angles.values())

    checks = [
        check_le(f"|params(h={heads}) − params(h=1)|", abs(ph - p1), 0),
        check_le(f"|FLOPs(h={heads}) − FLOPs(h=1)| / FLOPs", abs(fh - f1) / f1, 0.0),
        check_le("|counted FLOPs − 8NE² − 4N²E| / FLOPs", abs(f1 - theory) / theory, 0.0),
        check_ge("smallest principal angle between any two heads (°)", smallest, 1.0),
        check_le("copy task: final loss / chance", sum(losses[-8:]) / 8
                 / math.log(config.vocab_size), 0.5),
    ]
    table = [["parameters", p1, ph], ["FLOPs (counted)", f1, fh],
             ["FLOPs (theory 8NE² + 4N²E per sequence)", theory, theory],
             ["forward time, median of 7 (ms)", 1e3 * t1, 1e3 * th],
             [f"copy-task GPT ({h} heads): mean principal angle (°) at init | trained",
              init_mean, mean_angle]]
    fig = _figure(angles, losses, h, config) if plot else None
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity="mean principal angle between heads' W_q subspaces, trained model (°)",
        quantity_zh="训练后模型中各头 W_q 子空间之间的平均主角（度）",
        measured=mean_angle, expected=30.0, tolerance=0.0, relation=">=", checks=checks,
        table=([f"E = {embed_dim}, N = {n}, batch {batch}", "1 head of d = E",
                f"{heads} heads of d = E/{heads}"], table + [
            [f"copy-task GPT, heads {p[0]}: principal angles min / mean / max (°)",
             f"{p[1]:.1f} / {p[2]:.1f} / {p[3]:.1f}", ""] for p in pairs]),
        figure=fig,
        caption=f"Cost: attnlab MultiHeadAttention, explicit path, counted by "
                f"torch.utils.flop_counter; time ratio h={heads} / h=1: {th / t1:.2f} "
                f"(shared machine, informative only). Angles: a {h}-head attnlab GPT "
                f"(E = {e}) trained {config.steps} steps on a repeat-the-sequence task.",
        caption_zh=f"代价：attnlab MultiHeadAttention 显式路径，由 torch.utils.flop_counter 计数；"
                   f"时间比 h={heads} / h=1：{th / t1:.2f}（共享机器，仅供参考）。主角：一个 "
                   f"{h} 头 attnlab GPT（E = {e}）在重复序列任务上训练 {config.steps} 步。",
    )


def _figure(angles, losses, h, c):
    fig, (ax0, ax1) = new_figure(10, 3.8, ncols=2)
    for (i, j), a in angles.items():
        ax0.plot(range(1, len(a) + 1), a.tolist(), marker="o", ms=3, label=f"heads {i}–{j}")
    ax0.set_xlabel("principal angle index (ascending)")
    ax0.set_ylabel("principal angle (degrees)")
    ax0.set_ylim(0, 90)
    ax0.set_title("Principal angles between heads' W_q subspaces", fontsize=10)
    ax0.legend(fontsize=7, ncol=2)
    ax0.grid(True, alpha=0.3)
    ax1.plot(range(1, len(losses) + 1), losses, color="#3451b2", label="training loss")
    ax1.axhline(math.log(c.vocab_size), color="k", ls=":", lw=1, label="chance")
    ax1.set_xlabel("training step")
    ax1.set_ylabel("cross-entropy on repeated half (nats)")
    ax1.set_title(f"Tiny attnlab GPT ({h} heads) on the copy task", fontsize=10)
    ax1.legend(fontsize=8)
    ax1.grid(True, alpha=0.3)
    return fig
