"""one-relation-per-head: does one head learn only one relation?

Article 000 (section 三): 「如果我们只用一个单头注意力，模型虽然能融合上下文，但它只能学到一种
关系模式（比如语法上的主谓关系）」, while several heads catch several relations, one head each
(「Head 1 可能专门计算主谓关系。Head 2 可能专门计算形容词修饰名词的关系」).

Test: tasks whose every answer needs two relations at once (:class:`._heads.TwoRelationTask`:
the ordered pair (token at t − 1, token at t − 3), and (token at t − 1, the one marked
token)). Two one-block attnlab GPTs of the same width E learn each task from the same
initial seed and the same batches: one with a single head (d = E), one with two heads
(d = E/2). The claim predicts that the single head fails where the two heads succeed; it
holds when the held-out accuracy of two heads exceeds that of one head by ≥ 0.2 on every
task.

What the numbers say: a single softmax head is not limited to one relation. It puts part
of its weight on each source (about 0.7 / 0.27 on t − 1 / t − 3; 0.4 / 0.5 on t − 1 / the
mark) and the block after it reads the ordered pair from that weighted mix: 100 % held-out
accuracy, as with two heads, and about as fast. Two heads divide the relations between
them on the marked task (one head on each source, seeds 0–2 of 0–3); on the offsets task
only partly (split score 0.31–0.63 over seeds 0–3, :func:`split_score`). The table gives
each head's attention mass on each relation.

Control: the same accuracy gap between the two models at initialisation (both at chance,
gap 0), so that a gap, had one appeared, would be the heads' doing and not the models'
starting point.

Support check (``Check.support``): the two-head model learns every task (held-out accuracy
≥ ``min_accuracy``); otherwise the result is a defect, not a finding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

from attnlab.nn import GPT, GPTConfig

from ._common import check_ge, expect_type, label_axes, new_figure, seeded
from ._heads import TwoRelationTask, accuracy, read_hooks, relation_mass, train
from ._result import Check, Control, Result

NAME = "one-relation-per-head"
CLAIM = ("With a single attention head the model can fuse context but can learn only one "
         "relation pattern; with several heads, each head can capture a different relation.")
CLAIM_ZH = ("如果我们只用一个单头注意力，模型虽然能融合上下文，但它只能学到一种关系模式；"
            "多头注意力中，不同的头可以各自捕捉不同的关系。")

TASK_ZH = {"offsets": "双偏移", "marked": "前一词元与标记词元"}

ZH: dict[str, str] = {
    "1 head, d = E": "1 个头，d = E",
    "{} heads, d = E/{}": "{} 个头，d = E/{}",
    "1 head": "1 个头",
    "{} heads": "{} 个头",
    "on t − {}": "落在 t − {} 上",
    "on the second source": "落在第二个来源上",
    "attention mass (mean over scored queries)": "注意力质量（对计分查询取平均）",
    "Where each head looks": "各个头看向哪里",
}
for _k, _z in TASK_ZH.items():
    ZH.update({
        _k: _z,
        f"Task: {_k}": f"任务：{_z}",
        f"{_k}: held-out accuracy, {{}} heads": f"{_z}：留出集准确率，{{}} 个头",
        f"{_k}: held-out accuracy after {{}} steps": f"{_z}：训练 {{}} 步后的留出集准确率",
        f"{_k}: held-out accuracy at initialisation (control)":
            f"{_z}：初始化时的留出集准确率（对照）",
        f"{_k}: relations split between heads ({{}}–{{}})":
            f"{_z}：关系在各头之间的分工程度（{{}}–{{}}）",
        f"{_k}: {{}} head": f"{_z}：{{}} 个头",
        f"{_k}: head {{}} of {{}}": f"{_z}：头 {{}}（共 {{}} 个头）",
    })
    for _r, _rz in (("t − {}", "t − {}"), ("marked token", "标记词元")):
        ZH[f"{_k}: attention on {_r}, head {{}}"] = f"{_z}：落在 {_rz} 上的注意力，头 {{}}"


@dataclass(frozen=True)
class RelationConfig:
    """Tasks (each with its training steps) and the two models' shared settings."""

    runs: tuple[tuple[TwoRelationTask, int], ...] = (
        (TwoRelationTask("offsets"), 100),  # pilot, seeds 0–3: both models at 100 % by 75
        (TwoRelationTask("marked"), 150),  # pilot, seeds 0–3: both models at 100 % by 90
    )
    embed_dim: int = 64  # 1 head of d = 64 vs 2 heads of d = 32
    heads: int = 2
    batch: int = 64
    lr: float = 3e-3
    eval_batch: int = 256
    checkpoints: int = 5  # held-out accuracy measured this many times during training
    min_accuracy: float = 0.9  # the multi-head model must learn the task

    def __post_init__(self) -> None:
        if not self.runs or not all(
                isinstance(t, TwoRelationTask) and isinstance(s, int) and s >= 1
                for t, s in self.runs):
            raise ValueError(f"runs must be a non-empty tuple of (TwoRelationTask, steps >= 1) "
                             f"pairs, got {self.runs!r}")
        if self.heads < 2 or self.embed_dim % self.heads:
            raise ValueError(f"heads must be >= 2 and divide embed_dim={self.embed_dim}, got "
                             f"{self.heads}")


class _TieHeads(nn.Module):
    """Parametrization of a fused qkv weight or bias: every head's W_q and W_k rows (and
    q, k biases) are head 0's."""

    def __init__(self, embed_dim: int, heads: int) -> None:
        super().__init__()
        self.e, self.h = embed_dim, heads

    def forward(self, w: Tensor) -> Tensor:
        e, d = self.e, self.e // self.h
        return torch.cat([w[:d]] * self.h + [w[e:e + d]] * self.h + [w[2 * e:]], dim=0)


#: The control of the headline: ``"untrained"`` (the accuracy gap of the same two models
#: before training) or ``"trained"`` (a wrong control: the trained models themselves).
CONTROLS = ("untrained", "trained")


def train_model(task: TwoRelationTask, heads: int, steps: int, seed: int, c: RelationConfig,
                *, tie_attention: bool = False) -> dict:
    """One block, ``heads`` heads, trained on ``task``; accuracy curve and relation masses."""
    with seeded(seed):
        model = GPT(GPTConfig(vocab_size=task.vocab_size, block_size=task.seq_len,
                              num_layers=1, num_heads=heads, embed_dim=c.embed_dim))
    attn = model.attention(0)
    if tie_attention:
        for name in ("weight", "bias"):
            parametrize.register_parametrization(attn.qkv_proj, name,
                                                 _TieHeads(c.embed_dim, heads))
    held = task.batch(torch.Generator().manual_seed(10**6 + seed), c.eval_batch)
    inputs, targets, scored, sources = held
    g = torch.Generator().manual_seed(seed)  # the same batches for every model

    def batch_fn(step: int):
        return task.batch(g, c.batch)[:3]

    every = max(1, steps // c.checkpoints)
    curve: list[tuple[int, float]] = []

    def on_step(step: int) -> None:
        if step % every == 0 or step == steps:
            curve.append((step, accuracy(model, inputs, targets, scored)))

    with seeded(seed):
        losses = train(model, batch_fn, steps, c.lr, on_step=on_step)
    w = read_hooks(model, attn, inputs)["weights"]
    return dict(acc=curve[-1][1], curve=curve, losses=losses,
                mass=relation_mass(w, sources, scored))  # (H, 2)


def split_score(mass: Tensor) -> float:
    """How well two heads divide two relations: the best assignment of heads to relations,
    scored by the smaller of the two assigned masses (1: each head on its own relation;
    about 0.25–0.4 when both heads attend to both)."""
    a = min(float(mass[0, 0]), float(mass[1, 1]))
    b = min(float(mass[0, 1]), float(mass[1, 0]))
    return max(a, b)


@dataclass(frozen=True)
class ModelRun:
    """One trained model (see :func:`train_model`)."""

    acc: float  # held-out accuracy at the end
    curve: list[tuple[int, float]]  # (step, held-out accuracy) checkpoints, from step 0
    losses: list[float]
    mass: Tensor  # (H, 2) attention on each relation's source, per head

    def acc_at(self, step: int) -> float:
        """Accuracy at the last checkpoint at or before ``step``."""
        return _at(self.curve, step)


@dataclass(frozen=True)
class TaskRuns:
    """One task: the single-head model and the multi-head one."""

    task: TwoRelationTask
    steps: int
    one: ModelRun
    many: ModelRun


@dataclass(frozen=True)
class OneRelationMeasurement:
    """Per task, 1 head against ``config.heads`` heads of the same total width."""

    config: RelationConfig
    seed: int
    control: str
    tasks: tuple[TaskRuns, ...]

    @property
    def gaps(self) -> list[float]:
        """Held-out accuracy, many heads − 1 head, per task."""
        return [t.many.acc - t.one.acc for t in self.tasks]

    @property
    def gaps0(self) -> list[float]:
        """The control: the same gap at initialisation (or, for a wrong control, trained)."""
        if self.control == "trained":
            return self.gaps
        return [t.many.acc_at(0) - t.one.acc_at(0) for t in self.tasks]


def measure(
    seed: int = 0,
    *,
    config: RelationConfig = RelationConfig(),
    one_head_budget: float = 1.0,
    tie_attention: bool = False,
    control: str = "untrained",
) -> OneRelationMeasurement:
    """Train both models on each task (arguments: see :func:`run`)."""
    expect_type("config", config, RelationConfig)
    if not 0 < one_head_budget <= 1:
        raise ValueError(f"one_head_budget must be in (0, 1], got {one_head_budget!r}")
    if control not in CONTROLS:
        raise ValueError(f"control must be one of {CONTROLS}, got {control!r}")
    c = config
    tasks = []
    for task, steps in c.runs:
        one = ModelRun(**train_model(task, 1, max(1, round(one_head_budget * steps)), seed, c))
        many = ModelRun(**train_model(task, c.heads, steps, seed, c,
                                      tie_attention=tie_attention))
        tasks.append(TaskRuns(task, steps, one, many))
    return OneRelationMeasurement(c, seed, control, tuple(tasks))


def headline_control(m: OneRelationMeasurement) -> Control:
    """The same two models at initialisation."""
    if m.control == "untrained":
        return Control("the same two models at initialisation (untrained, both at chance)",
                       "初始化时（未训练、都处于随机水平）的同两个模型", min(m.gaps0))
    return Control("the trained models themselves (a wrong control)",
                   "训练后的模型本身（错误的对照）", min(m.gaps0))


def checks(m: OneRelationMeasurement) -> list[Check]:
    """The multi-head model learns each task (support)."""
    return [check_ge(f"{t.task.kind}: held-out accuracy, {m.config.heads} heads", t.many.acc,
                     m.config.min_accuracy, support=True, id=f"{t.task.kind}-accuracy")
            for t in m.tasks]


def _task_rows(t: TaskRuns, heads: int) -> list[list]:
    """One task's rows: accuracies, then the relation masses per head."""
    r0, r1 = t.task.relations
    k, steps, one, many = t.task.kind, t.steps, t.one, t.many
    rows = [[f"{k}: held-out accuracy after {steps} steps", one.acc, many.acc],
            [f"{k}: held-out accuracy at initialisation (control)", one.acc_at(0),
             many.acc_at(0)],
            [f"{k}: held-out accuracy after {steps // 2} steps",
             one.acc_at(steps // 2), many.acc_at(steps // 2)],
            [f"{k}: attention on {r0}, head 0", float(one.mass[0, 0]), float(many.mass[0, 0])],
            [f"{k}: attention on {r1}, head 0", float(one.mass[0, 1]), float(many.mass[0, 1])]]
    for h in range(1, heads):
        rows += [[f"{k}: attention on {r0}, head {h}", "—", float(many.mass[h, 0])],
                 [f"{k}: attention on {r1}, head {h}", "—", float(many.mass[h, 1])]]
    if heads == 2:
        rows.append([f"{k}: relations split between heads (0–1)", "—", split_score(many.mass)])
    return rows


def table(m: OneRelationMeasurement) -> tuple[list[str], list[list]]:
    heads = m.config.heads
    return (["task: quantity", "1 head, d = E", f"{heads} heads, d = E/{heads}"],
            [row for t in m.tasks for row in _task_rows(t, heads)])


def captions(m: OneRelationMeasurement) -> tuple[str, str]:
    """The caption in English and in Chinese."""
    c, seed = m.config, m.seed
    accs = ", ".join(f"{t.task.kind} {t.one.acc:.3f} vs {t.many.acc:.3f}" for t in m.tasks)
    accs_zh = "，".join(f"{TASK_ZH[t.task.kind]} {t.one.acc:.3f} 对 {t.many.acc:.3f}"
                       for t in m.tasks)
    return (f"One-block attnlab GPTs, E = {c.embed_dim}, seed {seed}, Adam lr {c.lr}, "
            f"batch {c.batch}, the same initial seed and batches for both models. Held-out "
            f"accuracy, 1 head vs {c.heads} heads: {accs}. One head learns both relations "
            f"by splitting its attention between the two sources.",
            f"单层 attnlab GPT，E = {c.embed_dim}，种子 {seed}，Adam 学习率 {c.lr}，"
            f"批大小 {c.batch}，两个模型的初始种子和数据批次相同。留出集准确率，1 个头对 "
            f"{c.heads} 个头：{accs_zh}。单个头把注意力分配到两个来源上，"
            f"同时学会了两种关系。")


EXPECT_WHY = ("Pilot runs (E = 64, seeds 0–3): a single head reaches 100 % held-out "
              "accuracy on both two-relation tasks, like two heads, by putting about "
              "0.7 / 0.27 (offsets) and 0.4 / 0.5 (marked) of its attention on the two "
              "sources.")
EXPECT_WHY_ZH = ("预实验（E = 64，种子 0–3）：单个头在两个双关系任务上的留出集准确率都达到 "
                 "100%，与两个头相同；它把约 0.7 / 0.27（两个偏移）和 0.4 / 0.5（标记）的"
                 "注意力分给两个来源。")


def run(
    seed: int = 0,
    *,
    config: RelationConfig = RelationConfig(),
    one_head_budget: float = 1.0,
    tie_attention: bool = False,
    control: str = "untrained",
    plot: bool = True,
) -> Result:
    """Train 1 head and ``config.heads`` heads on each task; compare held-out accuracies.

    Wrong variant: ``one_head_budget`` < 1 trains the single-head model for that fraction
    of the steps only (an unfair comparison): it fails for want of training, the claim
    appears to hold, and the expected verdict (refuted) is missed.
    ``tie_attention`` ties the multi-head model's heads to one W_q and one W_k (the same
    attention in every head): it shows in the relation masses, not in the verdict, since
    one head already learns both relations.

    Control (``control="untrained"``): the same accuracy gap between the two models at
    initialisation, before any step (both at chance): a gap that shows up there is not
    the heads' doing. ``control="trained"`` is a wrong control (the trained models as their
    own control).
    """
    m = measure(seed, config=config, one_head_budget=one_head_budget,
                tie_attention=tie_attention, control=control)
    caption, caption_zh = captions(m)
    heads = m.config.heads
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity=f"held-out accuracy, {heads} heads − 1 head (same width), lowest over tasks",
        quantity_zh=f"留出集准确率之差：{heads} 个头 − 1 个头（总宽度相同），各任务中的最小值",
        measured=min(m.gaps), expected=0.2, tolerance=0.0, relation=">=", checks=checks(m),
        control=headline_control(m), table=table(m), figure=figure(m) if plot else None,
        caption=caption, caption_zh=caption_zh, expect_holds=False, expect_why=EXPECT_WHY,
        expect_why_zh=EXPECT_WHY_ZH)


def _at(curve: list[tuple[int, float]], step: int) -> float:
    """Accuracy at the last checkpoint at or before ``step``."""
    return [a for s, a in curve if s <= step][-1]


def figure(m: OneRelationMeasurement):
    """Accuracy curves per task, and where each head looks."""
    c, tasks = m.config, m.tasks
    fig, axes = new_figure(4.2 * (len(tasks) + 1), 3.8, ncols=len(tasks) + 1)
    for ax, t in zip(axes, tasks):
        for res, lab, col in ((t.one, "1 head", "#b3261e"),
                              (t.many, f"{c.heads} heads", "#3451b2")):
            s, a = zip(*res.curve)
            ax.plot(s, a, marker="o", ms=3, color=col, label=lab)
        ax.axhline(1 / t.task.n_values ** 2, color="k", ls=":", lw=1, label="chance")
        ax.set_ylim(-0.02, 1.02)
        label_axes(ax, "training step", "held-out accuracy", f"Task: {t.task.kind}")
    ax = axes[-1]
    labels, first, second = [], [], []
    for t in tasks:
        labels.append(f"{t.task.kind}: 1 head")
        first.append(float(t.one.mass[0, 0]))
        second.append(float(t.one.mass[0, 1]))
        for h in range(c.heads):
            labels.append(f"{t.task.kind}: head {h} of {c.heads}")
            first.append(float(t.many.mass[h, 0]))
            second.append(float(t.many.mass[h, 1]))
    y = torch.arange(len(labels)).tolist()
    ax.barh(y, first, color="#3451b2", label="on t − 1")
    ax.barh(y, second, left=first, color="#e8a33d", label="on the second source")
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    label_axes(ax, "attention mass (mean over scored queries)", "",
               "Where each head looks")
    return fig
