"""qkv-roles: separate W_Q and W_K let a token ask and answer differently.

Article 000 (section 二.1): 「一个词的“提问特征”、“索引特征”和“语义特征”通常不在同一个方向
上。通过三个不同的矩阵，模型允许词在三个不同的几何空间中表达不同的角色。」

The score of query i on key j is S_ij = (W_Q x_i)·(W_K x_j). With W_Q ≠ W_K, S_ij and S_ji
differ: i may look for j without j looking for i. With W_Q = W_K = W (tied), S = (XWᵀ)(XWᵀ)ᵀ
is a Gram matrix: symmetric, and S_ij ≤ √(S_ii·S_jj) (Cauchy–Schwarz). The cost: for any
two tokens, (w_ij/w_ii)·(w_ji/w_jj) = exp(−scale·‖q_i − q_j‖²) ≤ 1 — of two tokens, at most
one can put more weight on the other than on itself. A token cannot single out a partner
that singles it out in turn.

Measured on small bidirectional attnlab models (token and position embeddings, one
``TransformerEncoderLayer`` with one head, a linear readout), trained untied and tied
(W_K's rows are W_Q's through a parametrization) on two tasks: *swap* (output the token of
the partner position i XOR 1: a mutual relation) and *previous (cyclic)* (output the token
at i − 1 mod N: following the chain around the cycle needs ever larger query norms, which a
cycle cannot give). The untied model learns both, attending to the partner; the tied model
splits its weight between itself and the partner on *swap* (its residual stream still
recovers the partner's token from that mix) and stays below the untied model on the cyclic
task.

Control: the same models before training. Random untied W_Q, W_K already give asymmetric
scores (‖S − Sᵀ‖/‖S‖ ≈ √2 for independent random matrices, 1.36 untrained vs 1.44 trained
here, seed 0), so the size of the asymmetry says nothing about what training made of the
roles. Its *direction* does: the headline is the directed score gap on the cyclic
previous-token task, scale·(q_i·k_{i−1} − q_{i−1}·k_i) averaged over positions — query i
scores its previous token far above that token's score for i (6.9 nats trained, seed 0),
where the untrained model's random asymmetry averages out (0.13) and the tied model's is 0
by construction. The claim holds when that gap is ≥ 1 nat and the untrained model's is not;
when the tied score matrix is symmetric to rounding and the tied model obeys the Gram bound
(both by construction, each against the untied model at initialisation, which breaks them);
when the trained untied model prefers its swap partner over itself, mutually, as the
untrained one does not; and when tying costs accuracy on the cyclic task. Two properties
of separate matrices show: the scores can be asymmetric in a chosen direction (a directed
relation such as "the previous token"), and they need not form a Gram matrix (a token may
prefer another over itself, as *swap* needs, although that relation is symmetric: the
untied model's swap scores are only mildly asymmetric).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

from attnlab._errors import check_int
from attnlab.nn import MultiHeadAttention, TransformerEncoderLayer

from ._common import check_ge, check_le, expect_type, label_axes, new_figure, seeded
from ._heads import accuracy, read_hooks, train
from ._result import Check, Control, Result

NAME = "qkv-roles"
CLAIM = ("A token's query, key and value features usually point in different directions; "
         "with three different matrices the model lets a token play different roles in "
         "three different geometric spaces.")
CLAIM_ZH = ("一个词的“提问特征”、“索引特征”和“语义特征”通常不在同一个方向上。通过三个不同的矩阵，"
            "模型允许词在三个不同的几何空间中表达不同的角色。")

ZH: dict[str, str] = {
    "W_Q ≠ W_K (untied)": "W_Q ≠ W_K（未绑定）",
    "W_Q = W_K (tied)": "W_Q = W_K（绑定）",
    "tied: max ‖S − Sᵀ‖/‖S‖ (symmetric scores)": "绑定：‖S − Sᵀ‖/‖S‖ 的最大值（分数对称）",
    "tied: max log[(w_ip/w_ii)·(w_pi/w_pp)], swap (Gram bound ≤ {})":
        "绑定：log[(w_ip/w_ii)·(w_pi/w_pp)] 的最大值，交换任务（Gram 上界 ≤ {}）",
    "untied: mean log[(w_ip/w_ii)·(w_pi/w_pp)], swap":
        "未绑定：log[(w_ip/w_ii)·(w_pi/w_pp)] 的平均值，交换任务",
    "untied: attention on the partner, swap": "未绑定：落在伙伴上的注意力，交换任务",
    "untied: held-out accuracy, previous (cyclic)": "未绑定：留出集准确率，循环前一词元任务",
    "held-out accuracy, previous (cyclic): untied − tied":
        "留出集准确率，循环前一词元任务：未绑定 − 绑定",
    "swap: log[(w_ip/w_ii)·(w_pi/w_pp)], mean over pairs":
        "交换：log[(w_ip/w_ii)·(w_pi/w_pp)]，对词元对取平均",
    "swap: log[(w_ip/w_ii)·(w_pi/w_pp)], max over pairs":
        "交换：log[(w_ip/w_ii)·(w_pi/w_pp)]，对词元对取最大值",
    "Scores S, W_Q ≠ W_K (swap)": "分数矩阵 S，W_Q ≠ W_K（交换任务）",
    "Scores S, W_Q = W_K (swap)": "分数矩阵 S，W_Q = W_K（交换任务）",
    "score q·k·scale": "分数 q·k·缩放",
    "swap: on partner": "交换：伙伴",
    "swap: on itself": "交换：自身",
    "cyclic: on previous": "循环：前一词元",
    "cyclic: accuracy": "循环：准确率",
    "measurement": "测量项",
    "attention weight or accuracy": "注意力权重或准确率",
    "What tying W_Q and W_K costs": "绑定 W_Q 与 W_K 的代价",
    "untied, untrained (control)": "未绑定，未训练（对照）",
    "tied, untrained": "绑定，未训练",
    "previous (cyclic): scale·(q_i·k_{i−1} − q_{i−1}·k_i), mean (nats)":
        "循环前一词元：缩放·(q_i·k_{i−1} − q_{i−1}·k_i)，平均值（奈特）",
}

TASKS = ("swap", "previous (cyclic)")


@dataclass(frozen=True)
class RolesConfig:
    """The two models (untied, tied) and their training."""

    n_values: int = 16
    seq_len: int = 16  # even: positions pair up for swap
    embed_dim: int = 32  # one head of d = 32
    steps: int = 200
    batch: int = 64
    lr: float = 3e-3
    eval_batch: int = 256

    def __post_init__(self) -> None:
        for name in ("n_values", "seq_len", "embed_dim", "steps", "batch", "eval_batch"):
            check_int(name, getattr(self, name), minimum=1)
        if self.seq_len % 2:
            raise ValueError(f"seq_len must be even (swap pairs positions), got {self.seq_len}")


def partner(task: str, n: int) -> Tensor:
    """The key position each query must read: i XOR 1 (swap) or i − 1 mod n (cyclic)."""
    i = torch.arange(n)
    if task == "swap":
        return i ^ 1
    if task == "previous (cyclic)":
        return (i - 1) % n
    raise ValueError(f"task must be one of {TASKS}, got {task!r}")


class Encoder(nn.Module):
    """Token + position embeddings → one attnlab encoder layer (one head, no biases) →
    LayerNorm → linear readout over the values."""

    def __init__(self, c: RolesConfig) -> None:
        super().__init__()
        e = c.embed_dim
        self.tok = nn.Embedding(c.n_values, e)
        self.pos = nn.Embedding(c.seq_len, e)
        self.layer = TransformerEncoderLayer(e, 1, 4 * e, 0.0, "gelu", 1e-5, True, bias=False)
        self.norm = nn.LayerNorm(e, bias=False)
        self.out = nn.Linear(e, c.n_values, bias=False)
        for w in (self.tok.weight, self.pos.weight):
            nn.init.normal_(w, std=0.02)

    @property
    def attn(self) -> MultiHeadAttention:
        return self.layer.self_attn

    def forward(self, x: Tensor) -> Tensor:
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        return self.out(self.norm(self.layer(h)))  # (B, N, n_values)


class _SharedQK(nn.Module):
    """Parametrization of the fused qkv weight: W_K's rows are W_Q's (one shared matrix)."""

    def __init__(self, embed_dim: int) -> None:
        super().__init__()
        self.e = embed_dim

    def forward(self, w: Tensor) -> Tensor:
        e = self.e
        return torch.cat([w[:e], w[:e], w[2 * e:]], dim=0)


def tie_qk(attn: MultiHeadAttention) -> None:
    """Tie W_K to W_Q for good: both read one parameter, during training too."""
    parametrize.register_parametrization(attn.qkv_proj, "weight", _SharedQK(attn.embed_dim))


def copy_qk_once(attn: MultiHeadAttention) -> None:
    """Wrong variant: copy W_Q into W_K at initialisation only; training unties them."""
    e = attn.embed_dim
    with torch.no_grad():
        attn.qkv_proj.weight[e:2 * e] = attn.qkv_proj.weight[:e]


def asymmetry(q: Tensor, k: Tensor) -> Tensor:
    """‖S − Sᵀ‖_F / ‖S‖_F of each score matrix S = q kᵀ (float64); q, k (B, H, N, d)."""
    s = q.double() @ k.double().transpose(-1, -2)
    return (s - s.transpose(-1, -2)).flatten(-2).norm(dim=-1) / s.flatten(-2).norm(dim=-1)


def mutual_log_preference(w: Tensor, pairs: Tensor) -> Tensor:
    """log[(w_ip/w_ii)·(w_pi/w_pp)] for each position i and its partner p = pairs[i]: > 0
    when the two put more weight on each other than on themselves. w (B, H, N, N)."""
    i = torch.arange(w.shape[-1])
    lw = torch.log(w.double())
    return (lw[..., i, pairs] - lw[..., i, i]) + (lw[..., pairs, i] - lw[..., pairs, pairs])


def directed_gap(q: Tensor, k: Tensor, pairs: Tensor, scale: float) -> float:
    """Mean over positions i (and sequences) of scale·(q_i·k_p − q_p·k_i), p = pairs[i]:
    how much more query i scores its partner's key than the partner's query scores i, in
    nats of attention logit (float64). Zero for symmetric scores (tied W_Q = W_K); about
    zero for random untied ones, whose asymmetry points nowhere in particular; large when a
    trained model follows a directed relation. q, k (B, H, N, d)."""
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    i = torch.arange(s.shape[-1])
    return float((s[..., i, pairs] - s[..., pairs, i]).mean())


def _batch(task: str, c: RolesConfig, g: torch.Generator, size: int
           ) -> tuple[Tensor, Tensor, Tensor]:
    x = torch.randint(c.n_values, (size, c.seq_len), generator=g)
    return x, x[:, partner(task, c.seq_len)], torch.ones_like(x, dtype=torch.bool)


@dataclass(frozen=True)
class RoleStats:
    """What one model (trained or not) does on held-out sequences of one task."""

    accuracy: float
    asym: float  # ‖S − Sᵀ‖/‖S‖, mean over sequences
    asym_max: float  # its max
    gap: float  # directed score gap (:func:`directed_gap`), nats
    on_partner: float  # mean attention on the partner
    on_self: float  # mean attention on itself
    mutual_max: float  # log[(w_ip/w_ii)·(w_pi/w_pp)], max over pairs
    mutual_mean: float  # the same, mean over pairs
    scores: Tensor  # (N, N) scores q·k·scale of the first held-out sequence


def role_stats(model: Encoder, task: str, c: RolesConfig, seed: int) -> RoleStats:
    """What one model (trained or not) does on held-out sequences of ``task``."""
    x, y, scored = _batch(task, c, torch.Generator().manual_seed(10**6 + seed), c.eval_batch)
    seen = read_hooks(model, model.attn, x, ("q", "k", "weights"))
    w = seen["weights"]  # (B, 1, N, N)
    p = partner(task, c.seq_len)
    i = torch.arange(c.seq_len)
    asym = asymmetry(seen["q"], seen["k"])
    mutual = mutual_log_preference(w, p)
    return RoleStats(
        accuracy(model, x, y, scored), float(asym.mean()), float(asym.max()),
        directed_gap(seen["q"], seen["k"], p, model.attn.scale),
        on_partner=float(w[..., i, p].mean()), on_self=float(w[..., i, i].mean()),
        mutual_max=float(mutual.max()), mutual_mean=float(mutual.mean()),
        scores=(seen["q"][0, 0].double() @ seen["k"][0, 0].double().T) * model.attn.scale)


@dataclass(frozen=True)
class RolesModel:
    """One model, untied or tied, trained on one task; and the same before training."""

    task: str
    tied: bool
    losses: list[float]
    trained: RoleStats
    init: RoleStats


def train_model(task: str, tied: bool, seed: int, c: RolesConfig,
                tie: Callable[[MultiHeadAttention], None]) -> RolesModel:
    """One model, untied or tied with ``tie``, trained on ``task``; what it does trained,
    and what the same model did before training."""
    with seeded(seed):
        model = Encoder(c)
    if tied:
        tie(model.attn)
    model.eval()
    init = role_stats(model, task, c, seed)
    g = torch.Generator().manual_seed(seed)
    with seeded(seed):
        losses = train(model, lambda step: _batch(task, c, g, c.batch), c.steps, c.lr)
    return RolesModel(task, tied, losses, role_stats(model, task, c, seed), init)


#: Which model stands as the control: ``"untrained"`` (the same models before training:
#: random W_Q ≠ W_K) or ``"trained"`` (a wrong control: the trained models themselves).
CONTROLS = ("untrained", "trained")


@dataclass(frozen=True)
class QKVRolesMeasurement:
    """The four trained models (swap and cyclic, untied and tied), each with its untrained
    self; ``control`` says which stands as the control (see :data:`CONTROLS`)."""

    config: RolesConfig
    seed: int
    control: str
    swap_untied: RolesModel
    swap_tied: RolesModel
    cyclic_untied: RolesModel
    cyclic_tied: RolesModel

    def control_of(self, model: RolesModel) -> RoleStats:
        """The control's measurement of ``model``: untrained, or (a wrong control) trained."""
        return model.trained if self.control == "trained" else model.init


def measure(
    seed: int = 0,
    *,
    config: RolesConfig = RolesConfig(),
    tie: Callable[[MultiHeadAttention], None] = tie_qk,
    control: str = "untrained",
) -> QKVRolesMeasurement:
    """Train untied and tied models on both tasks, each measured before and after training
    (arguments: see :func:`run`)."""
    expect_type("config", config, RolesConfig)
    if control not in CONTROLS:
        raise ValueError(f"control must be one of {CONTROLS}, got {control!r}")
    res = {(t, tied): train_model(t, tied, seed, config, tie)
           for t in TASKS for tied in (False, True)}
    return QKVRolesMeasurement(config, seed, control, res[("swap", False)], res[("swap", True)],
                               res[("previous (cyclic)", False)], res[("previous (cyclic)", True)])


def _control_what(m: QKVRolesMeasurement) -> tuple[str, str]:
    if m.control == "untrained":
        return ("the untrained untied model (same init, W_Q ≠ W_K at random)",
                "未训练的未绑定模型（相同初始化，W_Q ≠ W_K 为随机矩阵）")
    return ("the trained untied model itself (a wrong control)",
            "训练后的未绑定模型本身（错误的对照）")


def headline_control(m: QKVRolesMeasurement) -> Control:
    """The directed gap of the untied model, untrained, on the cyclic task."""
    return Control(*_control_what(m), m.control_of(m.cyclic_untied).gap)


def checks(m: QKVRolesMeasurement) -> list[Check]:
    """Tied: symmetric scores, no mutual preference; untied: mutual preference, attention
    on the partner, accuracy, and beating the tied model."""
    su, st, pu, pt = (x.trained for x in (m.swap_untied, m.swap_tied, m.cyclic_untied,
                                          m.cyclic_tied))
    su0, pu0, pt0 = (m.control_of(x) for x in (m.swap_untied, m.cyclic_untied, m.cyclic_tied))
    what = _control_what(m)
    untrained = m.control == "untrained"
    return [
        check_le("tied: max ‖S − Sᵀ‖/‖S‖ (symmetric scores)", max(st.asym_max, pt.asym_max),
                 1e-6, id="tied-symmetric", by_construction=True,
                 control=Control(*what, pu0.asym_max)),
        check_le("tied: max log[(w_ip/w_ii)·(w_pi/w_pp)], swap (Gram bound ≤ 0)",
                 st.mutual_max, 1e-6, id="tied-no-mutual", by_construction=True,
                 control=Control(*what, su0.mutual_max)),
        check_ge("untied: mean log[(w_ip/w_ii)·(w_pi/w_pp)], swap", su.mutual_mean, 2.0,
                 id="untied-mutual", control=Control(*what, su0.mutual_mean)),
        check_ge("untied: attention on the partner, swap", su.on_partner, 0.8,
                 id="untied-partner", control=Control(*what, su0.on_partner)),
        check_ge("untied: held-out accuracy, previous (cyclic)", pu.accuracy, 0.95,
                 support=True, id="untied-accuracy"),
        check_ge("held-out accuracy, previous (cyclic): untied − tied",
                 pu.accuracy - pt.accuracy, 0.03, id="untied-beats-tied",
                 control=Control("the untrained untied and tied models (same init)"
                                 if untrained else
                                 "the trained models themselves (a wrong control)",
                                 "未训练的未绑定与绑定模型（相同初始化）"
                                 if untrained else "训练后的模型本身（错误的对照）",
                                 pu0.accuracy - pt0.accuracy)),
    ]


def table(m: QKVRolesMeasurement) -> tuple[list[str], list[list]]:
    """Per task: accuracy, attention on the partner and on itself, asymmetry, final loss;
    then the directed gap and the mutual preference."""
    rows = []
    for t, a, b in (("swap", m.swap_untied, m.swap_tied),
                    ("previous (cyclic)", m.cyclic_untied, m.cyclic_tied)):
        for label, field in (("held-out accuracy", "accuracy"),
                             ("attention on the partner", "on_partner"),
                             ("attention on itself", "on_self"),
                             ("‖S − Sᵀ‖/‖S‖, mean over sequences", "asym")):
            rows.append([f"{t}: {label}"] + [getattr(x, field) for x in (a.trained, b.trained,
                                                                         a.init, b.init)])
        rows.append([f"{t}: final training loss", a.losses[-1], b.losses[-1], "—", "—"])
    for label, field, a, b in (
            ("previous (cyclic): scale·(q_i·k_{i−1} − q_{i−1}·k_i), mean (nats)", "gap",
             m.cyclic_untied, m.cyclic_tied),
            ("swap: log[(w_ip/w_ii)·(w_pi/w_pp)], mean over pairs", "mutual_mean",
             m.swap_untied, m.swap_tied),
            ("swap: log[(w_ip/w_ii)·(w_pi/w_pp)], max over pairs", "mutual_max",
             m.swap_untied, m.swap_tied)):
        rows.append([label] + [getattr(x, field) for x in (a.trained, b.trained, a.init,
                                                            b.init)])
    return (["task: quantity", "W_Q ≠ W_K (untied)", "W_Q = W_K (tied)",
             "untied, untrained (control)", "tied, untrained"], rows)


def captions(m: QKVRolesMeasurement) -> tuple[str, str]:
    """The caption in English and in Chinese."""
    c, seed = m.config, m.seed
    su, st, pu, pt = (x.trained for x in (m.swap_untied, m.swap_tied, m.cyclic_untied,
                                          m.cyclic_tied))
    pu0, su0 = m.cyclic_untied.init, m.swap_untied.init
    en = (f"Bidirectional attnlab models (one encoder layer, one head, E = {c.embed_dim}, no "
          f"biases), {c.steps} Adam steps, seed {seed}, {c.seq_len} tokens of {c.n_values} "
          f"values. Random untied W_Q, W_K already give asymmetric scores (‖S − Sᵀ‖/‖S‖ = "
          f"{pu0.asym:.2f} untrained, {pu.asym:.2f} trained), so asymmetry alone shows "
          f"nothing; what training adds is its direction: on the cyclic previous-token task "
          f"query i scores its previous token {pu.gap:.1f} nats above that token's score for "
          f"i ({pu0.gap:+.2f} untrained, {pt.gap:.1f} tied). Swap: the untied model puts "
          f"{su.on_partner:.2f} of the weight on the partner ({su0.on_partner:.2f} "
          f"untrained). Tied: the scores are a Gram matrix, so a token cannot prefer a partner "
          f"that prefers it back over itself: {st.on_partner:.2f} on the partner, "
          f"{st.on_self:.2f} on itself; accuracy on the cyclic previous-token task "
          f"{pt.accuracy:.3f} tied vs {pu.accuracy:.3f} untied.")
    zh = (f"双向 attnlab 模型（一个编码层、一个头，E = {c.embed_dim}，无偏置），Adam 训练 "
          f"{c.steps} 步，种子 {seed}，序列 {c.seq_len} 个词元、取值 {c.n_values} 种。随机的"
          f"未绑定 W_Q、W_K 本来就给出不对称的分数（‖S − Sᵀ‖/‖S‖ 未训练时为 {pu0.asym:.2f}，"
          f"训练后为 {pu.asym:.2f}），所以不对称本身说明不了什么；训练带来的是它的方向：在循环"
          f"前一词元任务上，查询 i 对前一词元的分数比该词元对 i 的分数高 {pu.gap:.1f} 奈特"
          f"（未训练时 {pu0.gap:+.2f}，绑定模型 {pt.gap:.1f}）。交换任务：未绑定模型把 "
          f"{su.on_partner:.2f} 的权重放在伙伴上（未训练时 {su0.on_partner:.2f}）。绑定：分数"
          f"矩阵是 Gram 矩阵，两个互为伙伴的词元不可能都更关注对方而非自己：伙伴 "
          f"{st.on_partner:.2f}，自身 {st.on_self:.2f}；循环前一词元任务的准确率为绑定 "
          f"{pt.accuracy:.3f}、未绑定 {pu.accuracy:.3f}。")
    return en, zh


def run(
    seed: int = 0,
    *,
    config: RolesConfig = RolesConfig(),
    tie: Callable[[MultiHeadAttention], None] = tie_qk,
    control: str = "untrained",
    plot: bool = True,
) -> Result:
    """Train untied and tied models on both tasks; compare their scores and attention, and
    each measurement with the same on the untrained models (the control).

    Wrong variant: ``tie=copy_qk_once`` makes W_K equal to W_Q at initialisation only; the
    "tied" model drifts apart in training, its scores are no longer symmetric, and the
    claim's symmetric side fails. Wrong control: ``control="trained"`` measures the trained
    models in the control's place; the control passes too and the result does not hold.
    """
    m = measure(seed, config=config, tie=tie, control=control)
    caption, caption_zh = captions(m)
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity="directed score gap of the trained untied model (W_Q ≠ W_K) on the cyclic "
                 "previous-token task: scale·(q_i·k_{i−1} − q_{i−1}·k_i), mean over positions "
                 "(nats)",
        quantity_zh="训练后的未绑定模型（W_Q ≠ W_K）在循环前一词元任务上的有向分数差："
                    "缩放·(q_i·k_{i−1} − q_{i−1}·k_i)，对位置取平均（奈特）",
        measured=m.cyclic_untied.trained.gap, expected=1.0, tolerance=0.0, relation=">=",
        checks=checks(m), control=headline_control(m), table=table(m),
        figure=figure(m) if plot else None, caption=caption, caption_zh=caption_zh)


def figure(m: QKVRolesMeasurement):
    """The swap scores untied and tied; what tying costs."""
    su, st, pu, pt = (x.trained for x in (m.swap_untied, m.swap_tied, m.cyclic_untied,
                                          m.cyclic_tied))
    fig, (ax0, ax1, ax2) = new_figure(13, 4.0, ncols=3)
    for ax, r, title in ((ax0, su, "Scores S, W_Q ≠ W_K (swap)"),
                         (ax1, st, "Scores S, W_Q = W_K (swap)")):
        s = r.scores
        lim = float(s.abs().max())
        im = ax.imshow(s.numpy(), cmap="RdBu_r", vmin=-lim, vmax=lim)
        fig.colorbar(im, ax=ax, shrink=0.8, label="score q·k·scale")
        label_axes(ax, "key position", "query position", title, legend=False)
    groups = ["swap: on partner", "swap: on itself", "cyclic: on previous", "cyclic: accuracy"]
    un = [su.on_partner, su.on_self, pu.on_partner, pu.accuracy]
    ti = [st.on_partner, st.on_self, pt.on_partner, pt.accuracy]
    x = torch.arange(len(groups), dtype=torch.float64)
    ax2.bar((x - 0.2).tolist(), un, width=0.4, color="#3451b2", label="W_Q ≠ W_K (untied)")
    ax2.bar((x + 0.2).tolist(), ti, width=0.4, color="#b3261e", label="W_Q = W_K (tied)")
    ax2.set_xticks(x.tolist(), groups, fontsize=7, rotation=20, ha="right")
    ax2.set_ylim(0, 1.05)
    label_axes(ax2, "measurement", "attention weight or accuracy",
               "What tying W_Q and W_K costs")
    return fig


for _t, _z in (("swap", "交换"), ("previous (cyclic)", "循环前一词元")):
    ZH.update({
        f"{_t}: held-out accuracy": f"{_z}：留出集准确率",
        f"{_t}: attention on the partner": f"{_z}：落在伙伴上的注意力",
        f"{_t}: attention on itself": f"{_z}：落在自身上的注意力",
        f"{_t}: ‖S − Sᵀ‖/‖S‖, mean over sequences": f"{_z}：‖S − Sᵀ‖/‖S‖，对序列取平均",
        f"{_t}: final training loss": f"{_z}：最终训练损失",
    })
