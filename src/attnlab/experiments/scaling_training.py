"""scaling-training: with a large head dim, the 1/√d_k scale is what lets attention learn.

A one-layer attention model learns associative recall: the input is N (key, value) pairs,
one token per pair, followed by a query key; the answer is the value stored with that key.
One attention head must put its weight on the matching pair. Two copies of the same model,
same initial weights, same batches, same steps; the only difference is the scale handed to
``attnlab.scaled_dot_product_attention``: 1/√d_k (attnlab's default) or 1. Unscaled, the
initial scores have standard deviation ~√d_k, the softmax saturates on random pairs and
its gradient vanishes (see ``softmax-saturation``); scaled, the model learns.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.core.functional import scaled_dot_product_attention

from ._common import check_le, new_figure, seeded
from ._result import Result

NAME = "scaling-training"
CLAIM = ("Trained on the same task with the same initial weights and batches, a model with "
         "a large head dimension reaches a lower loss with the 1/√d_k scale than without it.")
CLAIM_ZH = ("头维度较大时，在同一任务上从相同的初始权重出发、用相同的训练批次训练，"
            "按 1/√d_k 缩放的模型最终损失低于不缩放的模型。")

ZH = {
    "final loss, scaled / chance log(n_keys)": "缩放模型的最终损失 / 随机水平 log(键数)",
    "run": "训练",
    "first-step loss": "第一步的损失",
    "final loss (last {} steps)": "最终损失（最后 {} 步平均）",
    "scaled 1/√d_k": "按 1/√d_k 缩放",
    "unscaled": "不缩放",
    "Associative recall, one head, d_k = {}": "关联回忆任务，单头，d_k = {}",
    "cross-entropy loss (nats)": "交叉熵损失（奈特）",
    "without scaling (scale = {})": "不缩放（缩放系数 = {}）",
    "with 1/√d_k scaling": "按 1/√d_k 缩放",
}


@dataclass(frozen=True)
class RecallConfig:
    n_keys: int = 16  # distinct keys and values: chance loss is log 16 = 2.77
    n_pairs: int = 8  # pairs per sequence: the head must pick 1 of 9 positions
    embed_dim: int = 256  # = d_k: one head as wide as the model, where scaling matters
    steps: int = 100  # enough for the scaled model to be well below chance in a few seconds
    batch: int = 64  # enough sequences per step for a smooth loss curve
    lr: float = 3e-3  # Adam's usual range; the same for both runs


class RecallModel(nn.Module):
    """Embedding → one attention head (scale chosen by the caller) → value readout."""

    def __init__(self, c: RecallConfig, scale: float | None) -> None:
        super().__init__()
        self.scale = scale
        n = c.n_keys
        self.embed = nn.Embedding(n * n + n, c.embed_dim)  # pair tokens, then query tokens
        self.W_q = nn.Linear(c.embed_dim, c.embed_dim, bias=False)
        self.W_k = nn.Linear(c.embed_dim, c.embed_dim, bias=False)
        self.W_v = nn.Linear(c.embed_dim, c.embed_dim, bias=False)
        self.readout = nn.Linear(c.embed_dim, n)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)  # (B, N+1, E)
        q = self.W_q(x[:, -1:])  # (B, 1, E): only the query token asks
        k, v = self.W_k(x), self.W_v(x)  # (B, N+1, E)
        ctx = scaled_dot_product_attention(q, k, v, scale=self.scale)  # (B, 1, E)
        return self.readout(ctx[:, 0])  # (B, n_keys)


def recall_batch(c: RecallConfig, g: torch.Generator) -> tuple[Tensor, Tensor]:
    """Tokens (B, n_pairs+1) and targets (B,): pair token = key·n + value, query = n² + key."""
    n = c.n_keys
    keys = torch.rand(c.batch, n, generator=g).argsort(-1)[:, : c.n_pairs]  # distinct
    vals = torch.randint(0, n, (c.batch, c.n_pairs), generator=g)
    pick = torch.randint(0, c.n_pairs, (c.batch,), generator=g)
    qkey = keys.gather(1, pick[:, None])  # (B, 1)
    tokens = torch.cat([keys * n + vals, n * n + qkey], dim=1)
    return tokens, vals.gather(1, pick[:, None])[:, 0]


def fit_recall(model: nn.Module, c: RecallConfig, g: torch.Generator, steps: int,
               lr: float) -> list[float]:
    """Train ``model`` with Adam on ``steps`` recall batches drawn from ``g``; loss per step."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        tokens, target = recall_batch(c, g)
        loss = F.cross_entropy(model(tokens), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train(c: RecallConfig, scale: float | None, seed: int) -> list[float]:
    """Loss per step of one run (initial weights and batches fixed by ``seed``)."""
    with seeded(seed) as g:
        return fit_recall(RecallModel(c, scale), c, g, c.steps, c.lr)


def run(
    seed: int = 0,
    *,
    config: RecallConfig = RecallConfig(),
    scale_fn: Callable[[int], float | None] = lambda d_k: None,
    plot: bool = True,
) -> Result:
    """Train the scaled (``scale_fn``) and the unscaled model; compare final losses.

    Wrong variant: ``scale_fn=lambda d: 1.0`` trains two identical unscaled models, whose
    loss ratio is exactly 1, and must fail.
    """
    with torch.enable_grad():
        scaled = train(config, scale_fn(config.embed_dim), seed)
        unscaled = train(config, 1.0, seed)
    tail = max(1, config.steps // 10)
    end_s = sum(scaled[-tail:]) / tail
    end_u = sum(unscaled[-tail:]) / tail
    ratio = end_s / end_u
    chance = math.log(config.n_keys)
    checks = [check_le("final loss, scaled / chance log(n_keys)", end_s / chance, 0.5,
                       id="scaled-vs-chance")]
    rows = [["scaled 1/√d_k", scaled[0], end_s], ["unscaled", unscaled[0], end_u]]
    fig = _figure(scaled, unscaled, chance, config) if plot else None
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity=f"final loss ratio scaled / unscaled (mean of the last {tail} steps)",
        quantity_zh=f"最终损失之比：缩放 / 不缩放（取最后 {tail} 步的平均）",
        measured=ratio, expected=0.8, tolerance=0.0, relation="<=", checks=checks,
        table=(["run", "first-step loss", f"final loss (last {tail} steps)"], rows),
        figure=fig,
        caption=f"Associative recall, {config.n_pairs} pairs of {config.n_keys} keys/values, "
                f"one head with d_k = {config.embed_dim}, Adam lr {config.lr}, batch "
                f"{config.batch}, {config.steps} steps.",
        caption_zh=f"关联回忆任务：每个序列 {config.n_pairs} 个键值对（键与值各有 "
                   f"{config.n_keys} 种），单头，d_k = {config.embed_dim}；Adam 优化器，学习率 "
                   f"{config.lr}，批大小 {config.batch}，共 {config.steps} 步。",
    )


def _figure(scaled, unscaled, chance, c):
    fig, (ax,) = new_figure(6.8, 3.8)
    steps = range(1, len(scaled) + 1)
    ax.plot(steps, unscaled, color="#b3261e", lw=1.2, label="without scaling (scale = 1)")
    ax.plot(steps, scaled, color="#3451b2", lw=1.2, label="with 1/√d_k scaling")
    ax.axhline(chance, color="k", ls=":", lw=1, label=f"chance = log {c.n_keys}")
    ax.set_xlabel("training step")
    ax.set_ylabel("cross-entropy loss (nats)")
    ax.set_title(f"Associative recall, one head, d_k = {c.embed_dim}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig
