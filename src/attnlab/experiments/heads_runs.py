"""What :mod:`.multihead_cost` measures, apart from its verdict: the tiny attnlab GPTs
whose heads it trains (:class:`HeadsConfig`, :func:`train_run` → :class:`HeadsRun`: the
heads' subspaces and patterns at initialisation and after training), and the cost of h
heads against one (:func:`measure_cost` → :class:`CostMeasurement`: parameters, matmul
FLOPs counted by torch, each head's softmax and mask, the weights' bytes, the heads'
coordinate blocks after the split)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab._errors import check_int
from attnlab.core.functional import count_flops
from attnlab.nn import GPT, GPTConfig, MultiHeadAttention
from attnlab.train.tasks import get_task

from ._common import seeded
from ._heads import (
    accuracy,
    mean_pair_angle,
    pair_angles,
    principal_angles,
    read_hooks,
    train,
)

#: Elementwise operations counted per attention score: scale, mask, subtract the row
#: maximum, exp, divide by the row sum (the max and sum reductions are left out: a lower
#: bound).
SCORE_OPS = 5

#: The tasks a one-block GPT learns in a few hundred steps, and their Chinese names.
TASK_ZH = {"copy": "复制", "reverse": "反转", "sort": "排序"}

@dataclass(frozen=True)
class HeadsConfig:
    """The trained models: one attnlab GPT block per (task, seed)."""

    tasks: tuple[str, ...] = ("copy", "sort")  # a positional and a content relation
    seeds: int = 3  # seeds seed, seed+1, ... per task
    num_heads: int = 4  # six pairs of heads
    embed_dim: int = 64  # head_dim 16: random subspaces start ~63° apart
    steps: int = 120  # copy reaches 100 %, sort 89–92 % held-out accuracy (seeds 0–2)
    batch: int = 32
    lr: float = 3e-3  # Adam's usual range
    eval_batch: int = 256  # held-out sequences (the tasks' "eval" split)
    min_accuracy: float = 0.85  # a run below this learned nothing to test (chance 1/16)

    def __post_init__(self) -> None:
        if not self.tasks or any(t not in TASK_ZH for t in self.tasks):
            raise ValueError(f"tasks must be a non-empty tuple of {sorted(TASK_ZH)}, got "
                             f"{self.tasks!r}")
        for name in ("seeds", "num_heads", "embed_dim", "steps", "batch", "eval_batch"):
            check_int(name, getattr(self, name), minimum=0 if name == "steps" else 1)
        if self.embed_dim % self.num_heads:
            raise ValueError(f"embed_dim={self.embed_dim} must be divisible by "
                             f"num_heads={self.num_heads}")


def split_heads(w: Tensor, heads: int) -> list[Tensor]:
    """W_q (E, E) -> per head the (E/h, E) slice of rows that produces that head's q."""
    return list(w.chunk(heads, dim=0))


def qk_weights(model: GPT) -> tuple[Tensor, Tensor]:
    """Block 0's W_q and W_k (each E × E, rows grouped by head), detached copies."""
    e = model.config.embed_dim
    w = model.attention(0).qkv_proj.weight.detach()
    return w[:e].clone(), w[e:2 * e].clone()


def overlap_penalty(w: Tensor, heads: int) -> Tensor:
    """Σ over pairs of heads of ‖Ŵ_i Ŵ_jᵀ‖²_F with Ŵ = W/‖W‖_F: zero when the heads' row
    spaces are orthogonal. Added to the loss it pushes the subspaces apart."""
    parts = [p / p.norm() for p in w.chunk(heads, dim=0)]
    return sum((parts[i] @ parts[j].T).square().sum()
               for i in range(heads) for j in range(i + 1, heads))


def make_heads_identical(attn: MultiHeadAttention) -> None:
    """Copy head 0's slices of W_q, W_k, W_v (rows) and W_o (columns) into every head."""
    e, d = attn.embed_dim, attn.head_dim
    with torch.no_grad():
        w, o = attn.qkv_proj.weight, attn.out_proj.weight
        for part in range(3):
            rows = w[part * e:(part + 1) * e]
            for h in range(1, attn.num_heads):
                rows[h * d:(h + 1) * d] = rows[:d]
        for h in range(1, attn.num_heads):
            o[:, h * d:(h + 1) * d] = o[:, :d]


def head_divergence(weights: Tensor, scored: Tensor) -> float:
    """Mean total variation ½·Σ|w_a − w_b| between the attention rows of every pair of heads,
    over the scored queries. weights (B, H, N, N), scored (B, N)."""
    h = weights.shape[1]
    tv = [0.5 * (weights[:, a] - weights[:, b]).abs().sum(-1)[scored].mean()
          for a in range(h) for b in range(a + 1, h)]
    return float(sum(tv) / len(tv))


def top_angle(w: Tensor, heads: int, r: int = 2) -> float:
    """Mean principal angle (°) between heads' dominant subspaces: the top ``r`` right
    singular vectors of each head's slice (where the learned directions show first)."""
    tops = [torch.linalg.svd(p.double(), full_matrices=False).Vh[:r] for p in
            w.chunk(heads, dim=0)]
    return mean_pair_angle(tops)


#: The overlap penalty of the orthogonality test's positive control (:func:`overlap_penalty`).
POSITIVE_PENALTY = 1.0


@dataclass(frozen=True)
class HeadsRun:
    """One GPT block trained on a task: its accuracy, the heads' subspaces and attention
    patterns, at initialisation (``0``) and after training (``1``)."""

    task: str
    seed: int
    losses: list[float]
    chance_loss: float  # log of the number of values
    acc0: float  # held-out accuracy
    acc: float
    q0: float  # W_q: mean principal angle between heads (°)
    q1: float
    k0: float  # W_k: the same
    k1: float
    closest0: float  # closest pair of heads, W_q or W_k (°)
    closest1: float
    top0: float  # mean angle between heads' top 2 singular directions of W_q (°)
    top1: float
    tv0: float  # attention rows: mean total variation between heads
    tv1: float
    spec0: Tensor  # principal angles between heads 0 and 1, W_q (°, ascending)
    spec1: Tensor
    spread: float  # trained max |W_q(head h) − W_q(head 0)|

def train_run(task_name: str, seed: int, c: HeadsConfig, *, penalty: float = 0.0,
              identical: bool = False) -> HeadsRun:
    """Train one GPT block on ``task_name``; its weights, accuracy and heads before/after."""
    task = get_task(task_name)
    with seeded(seed):
        model = GPT(GPTConfig(vocab_size=task.vocab_size, block_size=task.seq_len,
                              num_layers=1, num_heads=c.num_heads, embed_dim=c.embed_dim))
    attn = model.attention(0)
    if identical:
        make_heads_identical(attn)
    model.eval()
    held = task.batch(0, c.eval_batch, seed, split="eval")
    wq0, wk0 = qk_weights(model)
    w0 = read_hooks(model, attn, held.inputs)["weights"]
    acc0 = accuracy(model, held.inputs, held.targets, held.scored)

    def batch_fn(step: int):
        b = task.batch(step, c.batch, seed)
        return b.inputs, b.targets, b.scored

    def extra() -> Tensor:
        w, e = attn.qkv_proj.weight, c.embed_dim
        return penalty * (overlap_penalty(w[:e], c.num_heads)
                          + overlap_penalty(w[e:2 * e], c.num_heads))

    with seeded(seed):
        losses = train(model, batch_fn, c.steps, c.lr, extra_loss=extra if penalty else None)
    wq, wk = qk_weights(model)
    w1 = read_hooks(model, attn, held.inputs)["weights"]
    h = c.num_heads
    return HeadsRun(
        task=task_name, seed=seed, losses=losses, chance_loss=math.log(task.n_values),
        acc0=acc0, acc=accuracy(model, held.inputs, held.targets, held.scored),
        q0=mean_pair_angle(split_heads(wq0, h)), q1=mean_pair_angle(split_heads(wq, h)),
        k0=mean_pair_angle(split_heads(wk0, h)), k1=mean_pair_angle(split_heads(wk, h)),
        closest0=min(min(pair_angles(split_heads(w, h))) for w in (wq0, wk0)),
        closest1=min(min(pair_angles(split_heads(w, h))) for w in (wq, wk)),
        top0=top_angle(wq0, h), top1=top_angle(wq, h),
        tv0=head_divergence(w0, held.scored), tv1=head_divergence(w1, held.scored),
        spec0=torch.rad2deg(principal_angles(*split_heads(wq0, h)[:2])),
        spec1=torch.rad2deg(principal_angles(*split_heads(wq, h)[:2])),
        spread=max(float((p - split_heads(wq, h)[0]).abs().max()) for p in split_heads(wq, h)),
    )


def softmax_mask_cost(weights: Tensor) -> tuple[int, int]:
    """(elementwise operations, bytes) of the per-head N × N work behind ``weights``
    (B, H, Lq, Lk): :data:`SCORE_OPS` operations per score, and the tensor's own bytes.

    >>> softmax_mask_cost(torch.zeros(2, 8, 4, 4))
    (1280, 1024)
    """
    return SCORE_OPS * weights.numel(), weights.numel() * weights.element_size()


class UnsplitHeads(nn.Module):
    """The wrong variant of multi-head attention for the cost: ``heads`` heads that are not
    slices of one E-wide projection but each a full single-head attention of width E (its
    own E × E W_q, W_k, W_v, W_o), their outputs summed. It costs h times the parameters and
    the projection FLOPs: the control that the "equal by construction" counts must reject."""

    def __init__(self, embed_dim: int, heads: int) -> None:
        super().__init__()
        self.heads = nn.ModuleList(MultiHeadAttention(embed_dim, 1) for _ in range(heads))

    def forward(self, x: Tensor, **kw) -> tuple[Tensor, None]:
        return sum(h(x, **kw)[0] for h in self.heads), None


@dataclass(frozen=True)
class HeadCount:
    """The cost of one attnlab MultiHeadAttention (see :func:`_count`)."""

    params: int
    module: MultiHeadAttention
    flops: int  # matmul FLOPs, no mask, the explicit path
    flops_masked: int  # matmul FLOPs, causal mask
    scores: int  # elements of the weights tensor
    ops: int  # softmax and mask operations
    weight_bytes: int  # the weights tensor's bytes

    @property
    def full(self) -> int:
        """Full compute: matmul FLOPs + softmax and mask."""
        return self.flops_masked + self.ops


@dataclass(frozen=True)
class ModuleCount:
    """Parameters and matmul FLOPs of any attention module (see :func:`_count_module`)."""

    params: int
    flops: int


def _count(embed_dim: int, heads: int, n: int, batch: int,
           score_cost: Callable[[Tensor], tuple[int, int]] = softmax_mask_cost) -> HeadCount:
    """Parameters, matmul FLOPs (no mask, the explicit path: every matmul counted), and
    with a causal mask: matmul FLOPs, scores, softmax and mask operations, weights bytes."""
    mha = MultiHeadAttention(embed_dim, heads)
    x = torch.randn(batch, n, embed_dim)
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    flops_masked = count_flops(mha, x, mask=mask, need_weights=True)
    with torch.no_grad():
        _, w = mha(x, mask=mask, need_weights=True)  # (B, h, N, N)
    ops, nbytes = score_cost(w)
    return HeadCount(params=sum(p.numel() for p in mha.parameters()), module=mha,
                     flops=count_flops(mha, x, need_weights=True), flops_masked=flops_masked,
                     scores=w.numel(), ops=ops, weight_bytes=nbytes)


def _count_module(module: nn.Module, embed_dim: int, n: int, batch: int) -> ModuleCount:
    """Parameters and matmul FLOPs (no mask, weights returned) of any attention module."""
    x = torch.randn(batch, n, embed_dim)
    return ModuleCount(params=sum(p.numel() for p in module.parameters()),
                       flops=count_flops(module, x, need_weights=True))


def head_blocks(embed_dim: int, heads: int) -> list[Tensor]:
    """Each head's block of the projected space, read from attnlab's MultiHeadAttention:
    with W_q = I and no bias, token i of the input is the basis vector e_i, and row r of
    head a's block (d, E) is what head a's query coordinate r reads from the E projected
    coordinates (hook ``q``). attnlab splits by ``view``/``transpose``: disjoint coordinates,
    so the blocks are orthogonal by construction."""
    mha = MultiHeadAttention(embed_dim, heads, bias=False)
    with torch.no_grad():
        mha.qkv_proj.weight[:embed_dim] = torch.eye(embed_dim)
    q = read_hooks(mha, mha, torch.eye(embed_dim)[None], ("q",))["q"]  # (1, h, E, d)
    return [q[0, a].T.contiguous() for a in range(heads)]


def overlapping_blocks(embed_dim: int, heads: int) -> list[Tensor]:
    """The wrong variant of the split: head a reads the d coordinates from a·d/2 on (mod E),
    so neighbouring heads share half their coordinates (blocks not orthogonal)."""
    d = embed_dim // heads
    eye = torch.eye(embed_dim)
    return [eye[[(a * d // 2 + r) % embed_dim for r in range(d)]] for a in range(heads)]


def largest_block_cosine(blocks: list[Tensor]) -> float:
    """The largest cosine of a principal angle between any two heads' blocks (0: every pair
    orthogonal; 1: two heads share a direction)."""
    return max(float(torch.cos(principal_angles(blocks[a], blocks[b])).max())
               for a in range(len(blocks)) for b in range(a + 1, len(blocks)))




@dataclass(frozen=True)
class CostMeasurement:
    """1 head against ``heads`` heads of attnlab's MultiHeadAttention, and the control."""

    embed_dim: int
    heads: int
    n: int
    batch: int
    one: HeadCount  # 1 head, d = E
    many: HeadCount  # ``heads`` heads, d = E/h
    unsplit: ModuleCount  # the control: unsplit heads of width E (or the module itself)
    t1: float  # forward time of one head, median of 7 (s)
    th: float  # and of ``heads`` heads

    @property
    def theory(self) -> int:
        """FLOPs by the formula 8NE² + 4N²E per sequence."""
        return self.batch * (8 * self.n * self.embed_dim**2 + 4 * self.n * self.n * self.embed_dim)

    @property
    def full_excess(self) -> float:
        return (self.many.full - self.one.full) / self.one.full

    @property
    def bytes_excess(self) -> float:
        one, many = self.one.weight_bytes, self.many.weight_bytes
        return (many - one) / one if one else 0.0


def _median_times(timed: tuple[tuple[int, nn.Module], ...], x: Tensor) -> dict[int, float]:
    """Median of 7 forward times per number of heads, the modules interleaved."""
    times: dict[int, list[float]] = {h: [] for h, _ in timed}
    with torch.no_grad():
        for _ in range(7):
            for h, m in timed:
                t0 = time.perf_counter()
                m(x)
                times[h].append(time.perf_counter() - t0)
    return {h: sorted(t)[3] for h, t in times.items()}


def measure_cost(seed: int, embed_dim: int, heads: int, n: int, batch: int,
                 score_cost: Callable[[Tensor], tuple[int, int]], proper: bool
                 ) -> CostMeasurement:
    """Count and time 1 head vs ``heads`` heads, and count the unsplit variant (or, for a
    wrong control, the ``heads``-head module itself)."""
    with seeded(seed):
        one = _count(embed_dim, 1, n, batch, score_cost)
        many = _count(embed_dim, heads, n, batch, score_cost)
        unsplit = _count_module(UnsplitHeads(embed_dim, heads) if proper else many.module,
                                embed_dim, n, batch)
        x = torch.randn(batch, n, embed_dim)
        t = _median_times(((1, one.module), (heads, many.module)), x)
    return CostMeasurement(embed_dim, heads, n, batch, one, many, unsplit, t[1], t[heads])
