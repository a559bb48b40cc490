"""multihead-cost: h heads cost more than one head (only the parameters and the matmul
FLOPs are equal, by construction); trained heads stay in different subspaces, but training
does not push them apart and they are not orthogonal.

Article 000 (section 三) says three things of multi-head attention:
「多头注意力的数学本质，是将高维语义空间正交分解为多个低秩子空间」,
「多头注意力不仅没有增加计算复杂度（总维度不变）」 and
「由于各个头的 $W$ 矩阵初始化不同，梯度下降会驱使它们收敛到不同的表征子空间」.

**Cost.** W_q, W_k, W_v, W_o are E × E whatever h is: the heads only slice them. The
projections cost 8·N·E² FLOPs per sequence; the scores and the weighted sum cost
h · 2·N²·(E/h) each = 4·N²·E in total, independent of h. These two are equal *by
construction* (the heads slice the same matrices and split d = E into h parts); they are
counted with ``torch.utils.flop_counter`` on attnlab's ``MultiHeadAttention``, and timed.
The control these counts must reject is the wrong variant :class:`UnsplitHeads` (h heads,
each a full attention of width E: h times the parameters and the projection FLOPs).
What the heads do not split is the N × N work: every head scales, masks and normalises its
own N × N scores, so the softmax and the mask cost h·N² elementwise operations per
sequence, ×h, and the weights tensor (B, h, N, N) holds h times the bytes. The full compute
count is the matmul FLOPs plus :data:`SCORE_OPS` operations per score (scale, mask, subtract
the row maximum, exp, divide by the row sum; the row maximum and sum reductions are not
counted, so the excess is a lower bound), the scores counted in the weights tensor attnlab
returns (with a causal mask, so the mask work runs). Counted in full, h heads cost more
(by a small fraction: ``SCORE_OPS``·h / (4·E) of the N² part) and the weights take h times
the memory.

**Orthogonal, two readings.** After the split (``view``/``transpose``) each head owns a
block of coordinates of the projected space: the blocks are orthogonal by construction
(:func:`head_blocks`, read from attnlab's module; the wrong variant, an overlapping split,
is not). In the input space, head h reads its queries through the rows of its slice W_q^h
(E/h × E), and those subspaces are what training shapes: the mean principal angle between
two heads' row spaces says how different they are (0°: the same, 90°: orthogonal).

**Subspaces in training.** The angles are measured at initialisation and after training,
on tiny attnlab GPTs (one block, 4 heads) that learn two tasks of :mod:`attnlab.train.tasks`
(copy: a positional relation; sort: a content relation) from several seeds, beside a run
whose heads start identical (the control: the same training, no difference at
initialisation). Every measurement of training is a change from the same models at
initialisation, whose null is 0 (an untrained model has not moved). The closest pair of
trained heads is still far apart (about 47°, where heads started identical stay at 0°, bit
for bit, since they receive identical gradients), but that distance alone shows nothing
about training: independent random initialisations are already about 63° apart
(16-dimensional subspaces of R^64). What training does to the subspaces (the headline: the
change of the closest pair) is to bring the heads closer (47–56°), the learned directions
being shared: the claim that gradient descent drives them further apart does not hold, and
the separation comes from the initialisation. What training does separate is the heads'
patterns: they attend differently once trained (mean total variation between their rows,
against the same models at initialisation, whose rows are near uniform).

Support checks (``Check.support``): the cost counts agree and every run learned its task
(held-out accuracy ≥ ``min_accuracy``). Should one fail, the result is a defect, not a
finding: an untrained model refutes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ._common import check_ge, check_le, expect_type, label_axes, new_figure
from ._heads import (
    mean_pair_angle,
    plot_losses,
)
from ._heads import principal_angles as principal_angles  # (re-exported: the subspaces' angle)
from ._result import Check, Control, Result
from .heads_runs import (
    POSITIVE_PENALTY,
    SCORE_OPS,
    TASK_ZH,
    CostMeasurement,
    HeadsConfig,
    HeadsRun,
    head_blocks,
    largest_block_cosine,
    measure_cost,
    overlapping_blocks,
    softmax_mask_cost,
    split_heads,
    train_run,
)

NAME = "multihead-cost"
CLAIM = ("Multi-head attention decomposes the semantic space orthogonally into low-rank "
         "subspaces, one per head; it does not add computational cost (the total dimension "
         "is unchanged): counting every operation (the matmuls and each head's softmax and "
         "mask) and the bytes of the attention weights, h heads cost what one head costs; "
         "and because the heads' W matrices are initialised differently, gradient descent "
         "drives them to converge to different representation subspaces, further apart "
         "than they started.")
CLAIM_ZH = ("多头注意力把语义空间正交分解为若干低秩子空间，每个头一个；总维度不变时，它并不增加"
            "计算量：计入全部运算（矩阵乘法以及每个头的 softmax 和掩码）和注意力权重张量的"
            "字节数，h 个头的代价与一个头相同；而且由于各个头的 W 矩阵初始化不同，梯度下降会"
            "驱使它们收敛到不同的表征子空间，比初始时相距更远。")

#: The controls: ``"proper"`` (the wrong variants and untrained or identical heads that must
#: fail each test) or ``"self"`` (a wrong control: each measurement stands as its own
#: control, so every control passes and nothing is shown).
CONTROLS = ("proper", "self")
#: The trained models by default.
DEFAULT_HEADS = HeadsConfig()

ZH: dict[str, str] = {
    # table
    "quantity (cost: E = {}, N = {}, batch {})": "量（代价：E = {}，N = {}，批大小 {}）",
    "1 head, d = E | at initialisation": "1 个头，d = E | 初始化时",
    "{} heads, d = E/{} | after training": "{} 个头，d = E/{} | 训练后",
    "parameters": "参数量",
    "FLOPs (counted)": "FLOPs（计数）",
    "FLOPs (theory 8NE² + 4N²E per sequence)": "FLOPs（理论值，每个序列 8NE² + 4N²E）",
    "matmul FLOPs (counted, causal mask)": "矩阵乘法 FLOPs（计数，因果掩码）",
    "scores (elements of the weights tensor)": "分数个数（权重张量的元素数）",
    "softmax and mask operations ({} per score)": "softmax 与掩码运算（每个分数 {} 次）",
    "full compute: matmul FLOPs + softmax and mask": "全部计算量：矩阵乘法 FLOPs + softmax 与掩码",
    "attention weights tensor (bytes)": "注意力权重张量（字节）",
    "(full compute(h={}) − full compute(h={})) / full compute(h={})":
        "(全部计算量(h={}) − 全部计算量(h={})) / 全部计算量(h={})",
    "(weights bytes(h={}) − weights bytes(h={})) / weights bytes(h={})":
        "(权重张量字节数(h={}) − 权重张量字节数(h={})) / 权重张量字节数(h={})",
    "|scores(h={}) − h·B·N²| (causal mask)": "|分数个数(h={}) − h·B·N²|（因果掩码）",
    "forward time, median of {} (ms)": "前向时间，{} 次中位数（毫秒）",
    # checks
    "|params(h={}) − params(h={})|": "|参数量(h={}) − 参数量(h={})|",
    "|FLOPs(h={}) − FLOPs(h={})| / FLOPs": "|FLOPs(h={}) − FLOPs(h={})| / FLOPs",
    "|counted FLOPs − 8NE² − 4N²E| / FLOPs": "|计数 FLOPs − 8NE² − 4N²E| / FLOPs",
    "W_q: mean principal angle, trained − init (°)": "W_q：平均主夹角，训练后 − 初始化（度）",
    "positive control: heads trained with an overlap penalty, mean principal angle between "
    "heads (°; orthogonal: {})": "阳性对照：加重叠惩罚训练的头，各头之间的平均主夹角"
                                 "（度；正交为 {}）",
    "W_k: mean principal angle, trained − init (°)": "W_k：平均主夹角，训练后 − 初始化（度）",
    "attention rows: mean total variation between heads, lowest over runs":
        "注意力分布（逐行）：各头之间的平均全变差距离，各次训练中的最小值",
    "attention rows: mean total variation between heads, trained − init, lowest over runs":
        "注意力分布（逐行）：各头之间的平均全变差距离，训练后 − 初始化，各次训练中的最小值",
    "trained heads' W_q, W_k: mean principal angle between heads, lowest over runs "
    "(°; orthogonal: {})": "训练后各头的 W_q、W_k：各头之间的平均主夹角，各次训练中的最小值"
                           "（度；正交为 {}）",
    "heads' coordinate blocks after the split: largest cosine between two heads":
        "切分后各头的坐标块：两个头之间的最大余弦",
    "control: {} unsplit heads of width E: parameters": "对照：{} 个宽度为 E 的不切分的头：参数量",
    "control: {} unsplit heads of width E: FLOPs (counted)":
        "对照：{} 个宽度为 E 的不切分的头：FLOPs（计数）",
    "heads' coordinate blocks: largest cosine (attnlab split | overlapping split)":
        "各头的坐标块：最大余弦（attnlab 的切分 | 重叠的切分）",
    "random E/h × E blocks: mean principal angle between heads (°)":
        "随机的 E/h × E 块：各头之间的平均主夹角（度）",
    # figure
    "after training": "训练后",
    "training": "训练",
    "identical initial heads": "初始完全相同的头",
    "mean principal angle between heads (°)": "各头之间的平均主夹角（度）",
    "Heads' subspaces: W_q (solid), W_k (dashed)": "各头的子空间：W_q（实线），W_k（虚线）",
    "principal angle index (ascending)": "主夹角序号（升序）",
    "principal angle (°)": "主夹角（度）",
    "Heads {} and {}, W_q, seed {}": "头 {} 与头 {}，W_q，种子 {}",
    "One-block GPTs, {} heads, seed {}": "单层 GPT，{} 个头，种子 {}",
    "chance: log {}": "随机猜测：log {}",
}
for _t, _z in TASK_ZH.items():
    ZH.update({
        _t: f"{_z}任务",
        f"{_t}, at init": f"{_z}，初始化时",
        f"{_t}, trained": f"{_z}，训练后",
        f"{_t}: lowest held-out accuracy over seeds": f"{_z}：各种子中最低的留出集准确率",
        f"{_t}, seed {{}}: held-out accuracy": f"{_z}，种子 {{}}：留出集准确率",
        f"{_t}, seed {{}}: mean principal angle between heads, W_q (°)":
            f"{_z}，种子 {{}}：各头之间的平均主夹角，W_q（度）",
        f"{_t}, seed {{}}: mean principal angle between heads, W_k (°)":
            f"{_z}，种子 {{}}：各头之间的平均主夹角，W_k（度）",
        f"{_t}: mean angle between heads' top {{}} singular directions of W_q (°)":
            f"{_z}：各头 W_q 前 {{}} 个奇异方向之间的平均夹角（度）",
        f"{_t}: attention rows, mean total variation between heads":
            f"{_z}：各头注意力分布（逐行）之间的平均全变差距离",
        f"{_t}, identical initial heads: mean principal angle, W_q (°)":
            f"{_z}，初始完全相同的头：平均主夹角，W_q（度）",
        f"{_t}, identical initial heads: max |W_q(head h) − W_q(head {{}})|":
            f"{_z}，初始完全相同的头：max |W_q(头 h) − W_q(头 {{}})|",
        f"{_t}, identical initial heads: held-out accuracy":
            f"{_z}，初始完全相同的头：留出集准确率",
        f"{_t}, identical initial heads: attention rows, mean total variation between heads":
            f"{_z}，初始完全相同的头：各头注意力分布（逐行）之间的平均全变差距离",
        f"{_t}, seed {{}}: closest pair of heads, W_q or W_k (°)":
            f"{_z}，种子 {{}}：最接近的一对头，W_q 或 W_k（度）",
    })


@dataclass(frozen=True)
class MultiheadCostMeasurement:
    """The cost counts, the heads' coordinate blocks, and the trained models: per task and
    seed, with identical initial heads, and with an overlap penalty (positive control)."""

    config: HeadsConfig
    proper: bool  # proper controls (False: each measurement is its own control)
    cost: CostMeasurement
    blocks: float  # largest cosine between two heads' coordinate blocks, attnlab's split
    wrong_blocks: float  # the same, overlapping split (or attnlab's, for a wrong control)
    random_angle: float  # random E/h × E blocks: mean principal angle between heads (°)
    runs: tuple[HeadsRun, ...]  # per task, per seed
    same: HeadsRun  # heads started identical (the first task, the seed)
    pushed: HeadsRun  # trained with the overlap penalty

    @property
    def dq(self) -> float:
        """W_q: mean principal angle, trained − init, mean over runs (°)."""
        return sum(r.q1 - r.q0 for r in self.runs) / len(self.runs)

    @property
    def dk(self) -> float:
        return sum(r.k1 - r.k0 for r in self.runs) / len(self.runs)

    @property
    def closest(self) -> float:
        """The closest pair of trained heads (°)."""
        return min(r.closest1 for r in self.runs)

    @property
    def closest_change(self) -> float:
        """The headline: what training did to the closest pair ("further apart than they
        started"); its null is the same heads before any step, which changed by nothing."""
        return min(r.closest1 - r.closest0 for r in self.runs)

    @property
    def tv_trained(self) -> float:
        return min(r.tv1 for r in self.runs)

    @property
    def tv_init(self) -> float:
        return max(r.tv0 for r in self.runs) if self.proper else self.tv_trained

    @property
    def tv_change(self) -> float:
        """What training did to the patterns, lowest over runs."""
        return min(r.tv1 - r.tv0 for r in self.runs)

    @property
    def same_tv_change(self) -> float:
        return self.same.tv1 - self.same.tv0 if self.proper else self.tv_change

    @property
    def ortho(self) -> float:
        return min(min(r.q1, r.k1) for r in self.runs)

    @property
    def ortho_init(self) -> float:
        return max(max(r.q0, r.k0) for r in self.runs) if self.proper else self.ortho

    @property
    def ortho_pushed(self) -> float:
        return min(self.pushed.q1, self.pushed.k1)

    @property
    def same_dq(self) -> float:
        return self.same.q1 - self.same.q0 if self.proper else self.dq

    @property
    def same_dk(self) -> float:
        return self.same.k1 - self.same.k0 if self.proper else self.dk

    def task_runs(self, task: str) -> list[HeadsRun]:
        return [r for r in self.runs if r.task == task]


def measure(
    seed: int = 0,
    *,
    embed_dim: int = 256,
    heads: int = 8,
    n: int = 128,
    batch: int = 4,
    config: HeadsConfig = DEFAULT_HEADS,
    separation_penalty: float = 0.0,
    score_cost: Callable[[Tensor], tuple[int, int]] = softmax_mask_cost,
    control: str = "proper",
) -> MultiheadCostMeasurement:
    """The cost counts and the trained models (arguments: see :func:`run`)."""
    expect_type("config", config, HeadsConfig)
    if not math.isfinite(separation_penalty) or separation_penalty < 0:
        raise ValueError(f"separation_penalty must be a finite float >= 0, got "
                         f"{separation_penalty!r}")
    if control not in CONTROLS:
        raise ValueError(f"control must be one of {CONTROLS}, got {control!r}")
    proper = control == "proper"
    cost = measure_cost(seed, embed_dim, heads, n, batch, score_cost, proper)
    c = config
    e_, h_ = c.embed_dim, c.num_heads  # the trained models' width and heads
    blocks = largest_block_cosine(head_blocks(e_, h_))
    wrong_blocks = largest_block_cosine(overlapping_blocks(e_, h_) if proper
                                        else head_blocks(e_, h_))
    # independent Gaussian blocks: what random subspaces of the same size give
    random_angle = mean_pair_angle(split_heads(
        torch.randn(e_, e_, generator=torch.Generator().manual_seed(seed)), h_))
    runs = tuple(train_run(t, seed + i, c, penalty=separation_penalty)
                 for t in c.tasks for i in range(c.seeds))
    same = train_run(c.tasks[0], seed, c, identical=True)
    # the positive control of the orthogonality test: the same training with a penalty on
    # the heads' overlap, so that orthogonal heads do appear (the test can see them)
    pushed = runs[0] if separation_penalty else train_run(c.tasks[0], seed, c,
                                                           penalty=POSITIVE_PENALTY)
    return MultiheadCostMeasurement(c, proper, cost, blocks, wrong_blocks, random_angle, runs,
                                    same, pushed)


def headline_control(m: MultiheadCostMeasurement) -> Control:
    """The same heads before any training step (a change of 0)."""
    return Control("the same heads before any training step (untrained: a change of 0)"
                   if m.proper else "the trained heads' change itself (a wrong control)",
                   "训练开始之前的同一批头（未训练：变化为 0）" if m.proper
                   else "训练后的头的变化本身（错误的对照）",
                   0.0 if m.proper else m.closest_change)


def _unsplit_control(m: MultiheadCostMeasurement, value: float) -> Control:
    heads = m.cost.heads
    return Control(f"{heads} unsplit heads, each a full single-head attention of width E "
                   f"(the wrong variant)" if m.proper else f"the {heads}-head module itself "
                   f"(a wrong control)",
                   f"{heads} 个不切分的头，每个都是宽度为 E 的完整单头注意力（错误变体）"
                   if m.proper else f"{heads} 个头的模块本身（错误的对照）", value)


def _same_control(m: MultiheadCostMeasurement, value: float) -> Control:
    return Control(*(("heads started identical, trained alike", "初始完全相同的头，同样训练")
                     if m.proper else ("the trained heads themselves (a wrong control)",
                                       "训练后的头本身（错误的对照）")), value)


def _init_control(m: MultiheadCostMeasurement, value: float) -> Control:
    return Control(*(("the same models at initialisation (untrained)",
                      "初始化时（未训练）的同一批模型") if m.proper
                     else ("the trained models themselves (a wrong control)",
                           "训练后的模型本身（错误的对照）")), value)


def _support_checks(m: MultiheadCostMeasurement) -> list[Check]:
    """What holds, and what makes the test sound: a failure is a defect."""
    cost, heads = m.cost, m.cost.heads
    p1, f1, theory, unsplit = cost.one.params, cost.one.flops, cost.theory, cost.unsplit
    return [
        check_le(f"|params(h={heads}) − params(h=1)|", abs(cost.many.params - p1), 0,
                 support=True, id="params", by_construction=True,
                 control=_unsplit_control(m, abs(unsplit.params - p1))),
        check_le(f"|FLOPs(h={heads}) − FLOPs(h=1)| / FLOPs", abs(cost.many.flops - f1) / f1,
                 0.0, support=True, id="flops", by_construction=True,
                 control=_unsplit_control(m, abs(unsplit.flops - f1) / f1)),
        check_le("|counted FLOPs − 8NE² − 4N²E| / FLOPs", abs(f1 - theory) / theory, 0.0,
                 support=True, id="flops-formula", by_construction=True,
                 control=_unsplit_control(m, abs(unsplit.flops - theory) / theory)),
        check_le(f"|scores(h={heads}) − h·B·N²| (causal mask)",
                 abs(cost.many.scores - heads * cost.batch * cost.n * cost.n), 0, support=True,
                 id="scores-count"),
    ] + [check_ge(f"{t}: lowest held-out accuracy over seeds",
                  min(r.acc for r in m.task_runs(t)), m.config.min_accuracy, support=True,
                  id=f"{t}-accuracy")
         for t in m.config.tasks]


def _claim_checks(m: MultiheadCostMeasurement) -> list[Check]:
    """The cost counted in full, the heads' patterns and subspaces, the coordinate blocks."""
    heads, proper = m.cost.heads, m.proper
    return [
        check_le(f"(full compute(h={heads}) − full compute(h=1)) / full compute(h=1)",
                 m.cost.full_excess, 0.0, id="full-compute"),
        check_le(f"(weights bytes(h={heads}) − weights bytes(h=1)) / weights bytes(h=1)",
                 m.cost.bytes_excess, 0.0,
                 id="weights-bytes"),
        check_ge("attention rows: mean total variation between heads, lowest over runs",
                 m.tv_trained, 0.05, id="patterns-diverge",
                 control=_init_control(m, m.tv_init)),
        check_ge("attention rows: mean total variation between heads, trained − init, lowest "
                 "over runs", m.tv_change, 0.05, id="patterns-diverge-change",
                 control=_same_control(m, m.same_tv_change)),
        check_ge("W_q: mean principal angle, trained − init (°)", m.dq, 1.0,
                 id="wq-angle-change", control=_same_control(m, m.same_dq)),
        check_ge("W_k: mean principal angle, trained − init (°)", m.dk, 1.0,
                 id="wk-angle-change", control=_same_control(m, m.same_dk)),
        check_ge("trained heads' W_q, W_k: mean principal angle between heads, lowest over runs "
                 "(°; orthogonal: 90)", m.ortho, 75.0, id="heads-orthogonal",
                 control=_init_control(m, m.ortho_init)),
        check_ge("positive control: heads trained with an overlap penalty, mean principal angle "
                 "between heads (°; orthogonal: 90)", m.ortho_pushed, 75.0, support=True,
                 id="heads-orthogonal-penalised",
                 control=_init_control(m, m.ortho_init)),
        check_le("heads' coordinate blocks after the split: largest cosine between two heads",
                 m.blocks, 1e-12, id="head-blocks-orthogonal", by_construction=True,
                 control=Control("a split into overlapping blocks (head a reads coordinates "
                                 "a·d/2 … a·d/2 + d − 1), the wrong variant" if proper else
                                 "attnlab's split itself (a wrong control)",
                                 "切分成相互重叠的块（头 a 读取坐标 a·d/2 … a·d/2 + d − 1），"
                                 "错误变体" if proper else "attnlab 的切分本身（错误的对照）",
                                 m.wrong_blocks)),
    ]


def checks(m: MultiheadCostMeasurement) -> list[Check]:
    """The support checks, then the claim's, each beside its control."""
    return _support_checks(m) + _claim_checks(m)


def _cost_rows(m: MultiheadCostMeasurement) -> list[list]:
    """1 head against h heads, the unsplit control, the timing and the coordinate blocks."""
    cost, heads = m.cost, m.cost.heads
    one, many, unsplit = cost.one, cost.many, cost.unsplit
    return [
        ["parameters", one.params, many.params], ["FLOPs (counted)", one.flops, many.flops],
        ["FLOPs (theory 8NE² + 4N²E per sequence)", cost.theory, cost.theory],
        ["matmul FLOPs (counted, causal mask)", one.flops_masked, many.flops_masked],
        ["scores (elements of the weights tensor)", one.scores, many.scores],
        [f"softmax and mask operations ({SCORE_OPS} per score)", one.ops, many.ops],
        ["full compute: matmul FLOPs + softmax and mask", one.full, many.full],
        ["attention weights tensor (bytes)", one.weight_bytes, many.weight_bytes],
        [f"control: {heads} unsplit heads of width E: parameters", one.params, unsplit.params],
        [f"control: {heads} unsplit heads of width E: FLOPs (counted)", one.flops,
         unsplit.flops],
        ["forward time, median of 7 (ms)", 1e3 * cost.t1, 1e3 * cost.th],
        ["heads' coordinate blocks: largest cosine (attnlab split | overlapping split)",
         m.blocks, m.wrong_blocks],
        ["random E/h × E blocks: mean principal angle between heads (°)", m.random_angle,
         m.random_angle],
    ]


def _run_rows(m: MultiheadCostMeasurement) -> list[list]:
    """Per run, per task, and the identical initial heads: at initialisation | trained."""
    rows: list[list] = []
    for r in m.runs:
        t, s = r.task, r.seed
        rows += [[f"{t}, seed {s}: held-out accuracy", r.acc0, r.acc],
                 [f"{t}, seed {s}: mean principal angle between heads, W_q (°)", r.q0, r.q1],
                 [f"{t}, seed {s}: mean principal angle between heads, W_k (°)", r.k0, r.k1],
                 [f"{t}, seed {s}: closest pair of heads, W_q or W_k (°)", r.closest0,
                  r.closest1]]
    for t in m.config.tasks:
        mine = m.task_runs(t)
        rows += [[f"{t}: mean angle between heads' top 2 singular directions of W_q (°)",
                  _mean(r.top0 for r in mine), _mean(r.top1 for r in mine)],
                 [f"{t}: attention rows, mean total variation between heads",
                  _mean(r.tv0 for r in mine), _mean(r.tv1 for r in mine)]]
    same = m.same
    t0_ = same.task
    rows += [[f"{t0_}, identical initial heads: mean principal angle, W_q (°)", same.q0,
              same.q1],
             [f"{t0_}, identical initial heads: max |W_q(head h) − W_q(head 0)|", 0.0,
              same.spread],
             [f"{t0_}, identical initial heads: attention rows, mean total variation between "
              f"heads", same.tv0, same.tv1],
             [f"{t0_}, identical initial heads: held-out accuracy", same.acc0, same.acc]]
    return rows


def table(m: MultiheadCostMeasurement) -> tuple[list[str], list[list]]:
    cost = m.cost
    return ([f"quantity (cost: E = {cost.embed_dim}, N = {cost.n}, batch {cost.batch})",
             "1 head, d = E | at initialisation",
             f"{cost.heads} heads, d = E/{cost.heads} | after training"],
            _cost_rows(m) + _run_rows(m))


def _cost_captions(m: MultiheadCostMeasurement) -> tuple[str, str]:
    """The cost half of the caption, in English and in Chinese."""
    cost, heads = m.cost, m.cost.heads
    p1, c1, ch, full_excess = cost.one.params, cost.one, cost.many, cost.full_excess
    unsplit_ratio, t1, th = cost.unsplit.params / p1, cost.t1, cost.th
    bytes_ratio = ch.weight_bytes / max(c1.weight_bytes, 1)
    mib_h, mib_1 = ch.weight_bytes / 2**20, c1.weight_bytes / 2**20
    en = (f"Cost: attnlab MultiHeadAttention, explicit path, matmuls counted by "
          f"torch.utils.flop_counter: parameters and matmul FLOPs are equal by "
          f"construction (the heads slice the same E × E matrices; {heads} unsplit heads "
          f"of width E would take {unsplit_ratio:.1f}× the parameters). With a "
          f"causal mask, each head's softmax and mask add {SCORE_OPS} operations per "
          f"score: the full compute of {heads} heads is {full_excess:+.2%} that of one "
          f"head, and the weights tensor takes {bytes_ratio:.0f}× "
          f"the bytes ({mib_h:.2f} MiB vs {mib_1:.2f} MiB): "
          f"more, not the same. Time ratio h={heads} / h=1: {th / t1:.2f} "
          f"(shared machine, informative only). ")
    zh = (f"代价：attnlab MultiHeadAttention 显式路径，矩阵乘法由 "
          f"torch.utils.flop_counter 计数：参数量和矩阵乘法 FLOPs 按构造相等（各头切分的是"
          f"同一组 E × E 矩阵；{heads} 个宽度为 E 的不切分的头需要 "
          f"{unsplit_ratio:.1f} 倍的参数）。加因果掩码时，每个头的 softmax "
          f"与掩码对每个分数另需 {SCORE_OPS} 次运算：{heads} 个头的全部计算量比一个头多 "
          f"{full_excess:+.2%}，权重张量的字节数是一个头的 "
          f"{bytes_ratio:.0f} 倍"
          f"（{mib_h:.2f} MiB 对 {mib_1:.2f} MiB）：代价更大，"
          f"而不是相同。时间比 h={heads} / h=1：{th / t1:.2f}（共享机器，仅供参考）。")
    return en, zh


def _subspace_captions(m: MultiheadCostMeasurement) -> tuple[str, str]:
    """The coordinate blocks and the subspaces half of the caption, in English and Chinese."""
    c, runs, same = m.config, m.runs, m.same
    lo_acc, tv0_max = min(r.acc for r in runs), max(r.tv0 for r in runs)
    en = (f"After the split, the heads' coordinate "
          f"blocks are orthogonal by construction (largest cosine {m.blocks:.1g}; "
          f"overlapping blocks: {m.wrong_blocks:.1g}). Subspaces in the input space: "
          f"{len(runs)} one-block attnlab GPTs ({c.num_heads} heads, E = "
          f"{c.embed_dim}), tasks {', '.join(c.tasks)} × {c.seeds} seeds, {c.steps} Adam "
          f"steps each (lowest held-out accuracy {lo_acc:.3f}). Trained heads stay in "
          f"different subspaces (closest pair {m.closest:.1f}°; heads started identical: "
          f"{same.closest1:.1g}°) and attend differently (total variation between "
          f"heads ≥ {m.tv_trained:.2f}, ≤ {tv0_max:.3f} at "
          f"initialisation), but they are not orthogonal (mean angle ≥ {m.ortho:.1f}°, "
          f"random blocks: {m.random_angle:.1f}°) and training does not push them apart: "
          f"it changes the mean principal angle by {m.dq:+.1f}° (W_q) and {m.dk:+.1f}° "
          f"(W_k), and the closest pair by {m.closest_change:+.1f}° at least (the "
          f"headline; untrained heads change by 0, the heads at initialisation are as "
          f"far apart as random blocks: a distance alone does not show that training "
          f"separated them). Heads started identical stay identical (max difference "
          f"{same.spread:.1e}).")
    zh = (f"切分之后，各头的坐标块按构造正交（最大余弦 {m.blocks:.1g}；重叠的块："
          f"{m.wrong_blocks:.1g}）。输入空间中的子空间："
          f"{len(runs)} 个单层 attnlab GPT（{c.num_heads} 个头，E = {c.embed_dim}），"
          f"任务 {'、'.join(TASK_ZH[t] for t in c.tasks)} × {c.seeds} 个种子，"
          f"各训练 {c.steps} 步 Adam（留出集准确率最低 {lo_acc:.3f}）。训练后的头处在不同"
          f"的子空间中（最接近的一对 {m.closest:.1f}°；初始完全相同的头："
          f"{same.closest1:.1g}°），注意力模式也不同（各头之间的全变差 ≥ "
          f"{m.tv_trained:.2f}，初始化时 ≤ {tv0_max:.3f}），但并不正交"
          f"（平均主夹角 ≥ {m.ortho:.1f}°，随机块为 {m.random_angle:.1f}°），训练也没有把它们"
          f"推开：各头之间的平均主夹角变化 {m.dq:+.1f}°（W_q）和 {m.dk:+.1f}°（W_k），最接近的一对"
          f"至少变化 {m.closest_change:+.1f}°（首要指标；未训练的头变化为 0，初始化时的头"
          f"与随机块相距一样远：只看距离并不能说明是训练把它们分开的）。"
          f"初始完全相同的头训练后仍相同（最大差 {same.spread:.1e}）。")
    return en, zh


def captions(m: MultiheadCostMeasurement) -> tuple[str, str]:
    """The caption in English and in Chinese: the cost, then the heads' subspaces."""
    (cost_en, cost_zh), (sub_en, sub_zh) = _cost_captions(m), _subspace_captions(m)
    return cost_en + sub_en, cost_zh + sub_zh


QUANTITY = ("mean principal angle between the closest pair of heads' W_q or W_k "
            "subspaces: trained − at initialisation, lowest over tasks and seeds (°)")
QUANTITY_ZH = ("最接近的一对头的 W_q 或 W_k 子空间之间的平均主夹角：训练后减去初始化时，"
               "各任务与种子中的最小值（度）")
EXPECT_WHY = ("Cost: only the parameters and the matmul FLOPs are equal, by "
              "construction; every head scales, masks and normalises its own N × N "
              "scores, so with E = 256, N = 128 and 8 heads the full compute is about "
              "+0.7 % (5 operations per score) and the weights tensor takes 8× the bytes. "
              "Subspaces: pilot runs (E = 64, 4 heads, 120 steps, copy and sort, 3 seeds "
              "each): trained heads stay in different subspaces and attend differently, "
              "but the mean principal angle between heads' W_q falls from 63° at "
              "initialisation to 47–48° (copy) and 55–56° (sort) after training, W_k "
              "likewise: not orthogonal, and not pushed apart. Different initialisations "
              "make the heads different; training makes them more alike.")
EXPECT_WHY_ZH = ("代价：只有参数量和矩阵乘法 FLOPs 相等，这是按构造成立的；每个头都要对自己的 "
                 "N × N 分数做缩放、掩码和归一化，所以 E = 256、N = 128、8 个头时全部计算量"
                 "约多 0.7%（每个分数 5 次运算），权重张量的字节数是 8 倍。子空间：预实验"
                 "（E = 64，4 个头，120 步，复制与排序任务各 3 个种子）：训练后的头仍处在不同"
                 "的子空间中，注意力模式也不同，但各头 W_q 之间的平均主夹角从初始化时的 63° "
                 "降到训练后的 47–48°（复制）和 55–56°（排序），W_k 同样如此：既不正交，"
                 "也没有被推开。使各头不同的是初始化，训练反而使它们更相似。")


def run(
    seed: int = 0,
    *,
    embed_dim: int = 256,
    heads: int = 8,
    n: int = 128,
    batch: int = 4,
    config: HeadsConfig = DEFAULT_HEADS,
    separation_penalty: float = 0.0,
    score_cost: Callable[[Tensor], tuple[int, int]] = softmax_mask_cost,
    control: str = "proper",
    plot: bool = True,
) -> Result:
    """Count and time 1 head vs ``heads`` heads (and the unsplit variant); train the task
    models; measure the heads' subspaces and attention patterns trained, at initialisation,
    and for heads that start identical.

    Wrong variants, each flipping the checks of one part of the claim:
    ``separation_penalty`` > 0 trains with a loss term that pushes the heads' W_q and W_k
    subspaces apart (:func:`overlap_penalty`), so the separation grows (towards orthogonal);
    ``score_cost=lambda w: (0, 0)`` counts the matmuls only (the softmax, the mask and the
    weights tensor left out), so the cost looks equal. With both, the article's claim
    appears to hold and the expected verdict (refuted) is missed. ``control="self"``: every
    control is the measurement itself, so the controls pass and the support checks that
    need a failing control (the by-construction counts) fail.
    """
    m = measure(seed, embed_dim=embed_dim, heads=heads, n=n, batch=batch, config=config,
                separation_penalty=separation_penalty, score_cost=score_cost, control=control)
    caption, caption_zh = captions(m)
    return Result(
        NAME, CLAIM, CLAIM_ZH, quantity=QUANTITY, quantity_zh=QUANTITY_ZH,
        measured=m.closest_change, expected=1.0, tolerance=0.0, relation=">=", checks=checks(m),
        control=headline_control(m), table=table(m), figure=figure(m) if plot else None,
        caption=caption, caption_zh=caption_zh, expect_holds=False, expect_why=EXPECT_WHY,
        expect_why_zh=EXPECT_WHY_ZH)


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


_COLORS = {"copy": "#3451b2", "sort": "#b3261e", "reverse": "#2e7d32"}


def figure(m: MultiheadCostMeasurement):
    """The heads' mean principal angles before and after training, the principal angles of
    one pair, and the training losses."""
    runs, same, c = m.runs, m.same, m.config
    fig, (ax0, ax1, ax2) = new_figure(13, 3.9, ncols=3)
    done = set()
    for r in runs:
        col = _COLORS[r.task]
        lab = None if r.task in done else r.task
        done.add(r.task)
        ax0.plot([0, 1], [r.q0, r.q1], color=col, marker="o", ms=4, label=lab)
        ax0.plot([0, 1], [r.k0, r.k1], color=col, marker="s", ms=4, ls="--", lw=0.8)
    ax0.plot([0, 1], [same.q0, same.q1], color="0.4", marker="^", ms=5,
             label="identical initial heads")
    ax0.set_xticks([0, 1], ["at initialisation", "after training"])
    ax0.set_xlim(-0.3, 1.3)
    ax0.set_ylim(-3, 90)
    label_axes(ax0, "training", "mean principal angle between heads (°)",
               "Heads' subspaces: W_q (solid), W_k (dashed)")
    for t in c.tasks:
        r = m.task_runs(t)[0]
        idx = range(1, len(r.spec0) + 1)
        ax1.plot(idx, r.spec0.tolist(), color=_COLORS[t], ls=":", label=f"{t}, at init")
        ax1.plot(idx, r.spec1.tolist(), color=_COLORS[t], label=f"{t}, trained")
    ax1.set_ylim(0, 90)
    label_axes(ax1, "principal angle index (ascending)", "principal angle (°)",
               f"Heads 0 and 1, W_q, seed {runs[0].seed}")
    first = [m.task_runs(t)[0] for t in c.tasks]
    plot_losses(ax2, [(r.losses, _COLORS[r.task], r.task) for r in first],
                f"One-block GPTs, {c.num_heads} heads, seed {runs[0].seed}",
                chance=runs[0].chance_loss)
    return fig
