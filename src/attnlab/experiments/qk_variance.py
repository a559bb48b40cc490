"""qk-variance: E[q·k] = 0 and Var(q·k) = d_k under the articles' condition, and what
happens outside it.

The condition (articles 000 and 001): the components q_i, k_i are independent, with mean 0
and variance 1. Then the products q_i k_i are independent with mean 0 and variance
E[q_i²]E[k_i²] = 1, so E[q·k] = 0, Var(q·k) = Σ_i Var(q_i k_i) = d_k, and
Var(q·k / √d_k) = 1 whatever d_k is.

Outside the condition, with independent components of mean μ and variance 1:
E[q_i k_i] = μ² and Var(q_i k_i) = E[q_i²]E[k_i²] − μ⁴ = (1 + μ²)² − μ⁴ = 1 + 2μ², so
E[q·k] = d_k μ² and Var(q·k) = d_k (1 + 2μ²): dividing by √d_k then leaves 1 + 2μ², not 1.

The scaled scores are read back from ``attnlab.scaled_dot_product_attention`` itself (its
default scale), so the experiment checks attnlab's scaling, not a formula typed here.

The controls (the same measurements on components that break the condition, which the laws
must not fit): for the variance, components of mean 0 and variance 1 that are correlated
within each vector (a factor shared by the d_k components, correlation ρ): then
Var(q·k) = Σ_ij Cov(q_i, q_j)Cov(k_i, k_j) = d_k(1 + (d_k − 1)ρ²), not d_k; with mean μ
as well, Var(q·k) = d_k(1 + 2μ²) + d_k(d_k − 1)(ρ² + 2μ²ρ). For the mean, q and k whose
components are independent within each vector, of mean μ and variance 1, but correlated
with each other (a vector shared by the queries and keys of a block, correlation ρ per
component): E[q·k] = d_k(μ² + ρ), not d_k μ².

For information, the queries and keys of a real model (MiniLM, via :func:`attnlab.models.load`
and :func:`attnlab.tracing.trace`) are compared with the condition: per layer, their
component means and variances, and the score variance against what independent components
with those means and variances would give. No claim is made on them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ._common import check_le, label_axes, new_figure, scores_via_attnlab, seeded
from ._result import Check, Control, Result

NAME = "qk-variance"
CLAIM = ("If the components of q and k are independent with mean 0 and variance 1, "
         "E[q·k] = 0 and Var(q·k) = d_k, and attnlab's 1/√d_k scale brings the score variance "
         "to 1 for every d_k; with component mean μ instead, E[q·k] = d_k μ² and "
         "Var(q·k) = d_k(1 + 2μ²), so the scaled variance is 1 + 2μ², not 1.")
CLAIM_ZH = ("若 q、k 的各分量相互独立、均值为 0、方差为 1，则 E[q·k] = 0、Var(q·k) = d_k；"
            "attnlab 除以 √d_k 后，无论 d_k 多大，分数的方差都是 1。若各分量的均值为 μ，"
            "则 E[q·k] = d_k·μ²、Var(q·k) = d_k(1 + 2μ²)，缩放后的方差为 1 + 2μ²，而不是 1。")

#: The text whose queries and keys are measured on the real model (English: MiniLM's
#: vocabulary is English).
REAL_TEXT = ("Attention compares every query with every key, turns the scores into weights "
             "with a softmax, and returns the weighted average of the values. Dividing the "
             "scores by the square root of the head dimension keeps their variance near one "
             "when the components of the queries and keys are independent with mean zero and "
             "variance one.")

#: The models whose queries and keys can be reported, and how the table names them.
MODEL_LABELS = {"minilm": "MiniLM", "smollm2": "SmolLM2"}

ZH: dict[str, str] = {
    # table
    "q, k": "q、k",
    "component mean (RMS)": "分量均值（均方根）",
    "component variance": "分量方差",
    "Var(q·k) if independent": "分量独立时的 Var(q·k)",
    "Var(q·k) / that": "Var(q·k) / 独立时的值",
    "independent, mean μ = {}, variance {}": "独立，均值 μ = {}，方差 {}",
    "control: correlated within each vector (ρ = {}), mean {}, variance {}":
        "对照：每个向量内各分量相关（ρ = {}），均值 {}，方差 {}",
    "MiniLM layer {} (mean of {} heads)": "MiniLM 第 {} 层（{} 个头的平均）",
    "SmolLM{} layer {} (mean of {} heads)": "SmolLM{} 第 {} 层（{} 个头的平均）",
    # checks
    "μ = {}: max over d_k of |E[q·k]| / its standard error":
        "μ = {}：各 d_k 上 |E[q·k]| / 其标准误差 的最大值",
    "μ = {}: |E[q·k] − d_k μ²| / its standard error": "μ = {}：|E[q·k] − d_k μ²| / 其标准误差",
    "μ = {}: relative error of Var(q·k) and Var(q·k/√d_k) against d_k({} + {}μ²) and {} + {}μ²":
        "μ = {}：Var(q·k) 与 Var(q·k/√d_k) 相对 d_k({} + {}μ²) 与 {} + {}μ² 的相对误差",
    # figure
    "theory: Var = d_k": "理论：Var = d_k",
    "theory: Var = {}": "理论：Var = {}",
    "raw q·k": "未缩放的 q·k",
    "control, raw q·k: components correlated (ρ = {})": "对照，未缩放的 q·k：分量相关（ρ = {}）",
    "attnlab score q·k/√d_k": "attnlab 的分数 q·k/√d_k",
    "variance of the score": "分数的方差",
    "Mean 0, variance 1: Var grows as d_k unless scaled":
        "均值 0、方差 1：不缩放时 Var 随 d_k 增长",
    "component mean μ (variance {}, d_k = {})": "分量均值 μ（方差 {}，d_k = {}）",
    "Var(q·k)": "Var(q·k)",
    "Var(q·k/√d_k)": "Var(q·k/√d_k)",
    "per dimension of q·k": "q·k 每一维上的值",
    "theory {} + {}μ²": "理论 {} + {}μ²",
    "measured Var(q·k)/d_k": "实测 Var(q·k)/d_k",
    "theory μ²": "理论 μ²",
    "measured E[q·k]/d_k": "实测 E[q·k]/d_k",
    "Outside the condition: mean μ ≠ 0": "条件之外：均值 μ ≠ 0",
    "MiniLM: real q, k (d_k = {})": "MiniLM：真实的 q、k（d_k = {}）",
    "SmolLM{}: real q, k (d_k = {})": "SmolLM{}：真实的 q、k（d_k = {}）",
    "variance": "方差",
    "Var(q·k/√d_k) measured": "实测 Var(q·k/√d_k)",
    "same, if the components were independent": "同上，若各分量相互独立",
    "component variance (q and k)": "分量方差（q 与 k）",
    "the articles' assumption: {}": "文章的假设：{}",
    "MiniLM not available (see the caption)": "MiniLM 不可用（见图注）",
    "SmolLM{} not available (see the caption)": "SmolLM{} 不可用（见图注）",
    "no real model measured": "未测量真实模型",
}


@dataclass(frozen=True)
class ScoreStats:
    """One set of queries and keys (one table row): their component statistics and the
    statistics of their scores q·k."""

    label: str
    d_k: int
    component_rms: float  # RMS over components of the per-component mean
    component_var: float  # mean per-component variance, q and k pooled
    mean: float  # E[q·k]
    var: float  # Var(q·k)
    var_independent: float  # Var(q·k) if the components were independent
    var_scaled: float  # Var(q·k/√d_k)

    @property
    def ratio(self) -> float:
        """Var(q·k) / Var(q·k) if independent."""
        return self.var / self.var_independent

    @property
    def rel_errors(self) -> tuple[float, float]:
        """Mean 0: relative errors of Var(q·k)/d_k and Var(q·k/√d_k) against 1."""
        return abs(self.var / self.d_k - 1), abs(self.var_scaled - 1)

    def cells(self) -> list:
        return [self.label, self.d_k, self.component_rms, self.component_var, self.mean,
                self.var, self.var_independent, self.ratio, self.var_scaled]


@dataclass(frozen=True)
class CentredScores:
    """Mean 0, variance 1, one d_k: the scores and their sampling errors."""

    stats: ScoreStats
    mean_z: float  # |E[q·k]| / its standard error
    std_err: float  # standard error of the relative variance estimate


@dataclass(frozen=True)
class MuBlock:
    """Mean-μ statistics of blocks of queries and keys (see :func:`_mu_block`)."""

    mean: float
    mean_dev: float  # |E[q·k] − d_k μ²|
    var: float
    var_scaled: float
    theory: float
    rel: float  # largest relative error of the variances against the theory
    se_rel: float  # its standard error


@dataclass(frozen=True)
class ShiftedScores:
    """Mean μ ≠ 0 at d_k = mean_dim: the measurement and its two controls."""

    mu: float
    stats: ScoreStats
    block: MuBlock
    mean_se: float  # standard error of the block mean of q·k
    control_mean: MuBlock  # q and k correlated with each other
    control_var: MuBlock  # components correlated within each vector


@dataclass(frozen=True)
class QKVarianceMeasurement:
    """Everything :func:`run` shows: mean 0 per d_k, mean μ, the controls, a real model."""

    m: int
    rho: float
    mean_dim: int
    centred: tuple[CentredScores, ...]
    shifted: tuple[ShiftedScores, ...]
    control: tuple[ScoreStats, ...]  # mean 0, correlated within each vector, per d_k
    control_mean_dim: int
    control_mean_z: float  # q and k correlated with each other, at control_mean_dim
    real_model: str | None
    real: tuple[ScoreStats, ...]
    real_note: str

    @property
    def headline(self) -> float:
        """Max relative error of Var(q·k)/d_k and Var(q·k/√d_k) against 1 (mean 0)."""
        errors = [c.stats.rel_errors for c in self.centred]
        return max([e[0] for e in errors] + [e[1] for e in errors])

    @property
    def tolerance(self) -> float:
        return 6 * max(c.std_err for c in self.centred)

    @property
    def control_rel(self) -> float:
        return max(e for s in self.control for e in s.rel_errors)


def _moments(q: Tensor, k: Tensor) -> tuple[float, float, float]:
    """For (..., m, d) queries and keys: the RMS over components of the per-component mean
    (over the m vectors), the mean per-component variance (q and k pooled), and the score
    variance that independent components with these means and variances would give:
    Σ_i σ_qi²σ_ki² + σ_qi²μ_ki² + μ_qi²σ_ki², averaged over the leading dims."""
    mq, mk = q.mean(-2), k.mean(-2)  # (..., d)
    vq, vk = q.var(-2, unbiased=False), k.var(-2, unbiased=False)
    rms = float(torch.cat([mq.flatten(), mk.flatten()]).pow(2).mean().sqrt())
    var = float(torch.cat([vq.flatten(), vk.flatten()]).mean())
    indep = float((vq * vk + vq * mk**2 + mq**2 * vk).sum(-1).mean())
    return rms, var, indep


def real_model_scores(name: str = "minilm", text: str = REAL_TEXT) -> tuple[ScoreStats, ...]:
    """Per layer of model ``name``: its queries' and keys' statistics (the scaled variance
    is Var(q·k)/d_k). Raises :class:`attnlab.models.ModelNotAvailableError` when the model
    cannot be loaded here.
    """
    from attnlab.models import load
    from attnlab.tracing import one_stack, trace

    loaded = load(name, progress=False)
    t = one_stack(trace(loaded, text, merge_pieces=False))
    if t.q is None or t.k is None:  # (a trace keeps them unless told not to)
        raise ValueError(f"{name}'s trace kept no queries and keys")
    q, k = t.q.double(), t.k.double()  # (L, H, N, d)
    if t.num_kv_heads != t.num_heads:  # grouped keys: one key head per group of query heads
        k = k.repeat_interleave(t.num_heads // t.num_kv_heads, dim=1)
    d_k = q.shape[-1]
    layers = []
    for layer in range(q.shape[0]):
        ql, kl = q[layer], k[layer]  # (H, N, d)
        s = ql @ kl.transpose(-2, -1)  # (H, N, N) every query against every key, per head
        var_s = float(s.var(dim=(-2, -1), unbiased=False).mean())  # per head, averaged
        rms, var, indep = _moments(ql, kl)
        layers.append(ScoreStats(
            f"{MODEL_LABELS[name]} layer {layer} (mean of {ql.shape[0]} heads)", d_k, rms, var,
            float(s.mean()), var_s, indep, var_s / d_k))
    return tuple(layers)


def _mu_id(mu: float) -> str:
    """The check ids' name of a mean: ``mu-0.5``, ``mu-1``, ``mu-minus-1``."""
    return f"mu-{'minus-' if mu < 0 else ''}{abs(mu):g}".replace("e-", "e-minus-").replace("+", "")


def correlated_within(g: torch.Generator, groups: int, m: int, d_k: int, mu: float, rho: float
                      ) -> tuple[Tensor, Tensor]:
    """Control pairs (G, m, d) for the variance: q and k independent of each other, each
    component of mean ``mu`` and variance 1, but the d_k components of one vector share a
    factor (pairwise correlation ``rho``), so Var(q·k) = d_k(1 + 2μ²) + d_k(d_k − 1)(ρ² + 2μ²ρ).
    """
    def draw() -> Tensor:
        z = torch.randn(groups, m, 1, generator=g, dtype=torch.float64)  # one per vector
        e = torch.randn(groups, m, d_k, generator=g, dtype=torch.float64)
        return mu + math.sqrt(rho) * z + math.sqrt(1 - rho) * e

    return draw(), draw()


def correlated_across(g: torch.Generator, groups: int, m: int, d_k: int, mu: float, rho: float
                      ) -> tuple[Tensor, Tensor]:
    """Control pairs (G, m, d) for the mean: components independent within each vector, of
    mean ``mu`` and variance 1, but every query and key of a block shares a vector (each
    component of q correlated ``rho`` with the same component of k), so
    E[q·k] = d_k(μ² + ρ)."""
    c = torch.randn(groups, 1, d_k, generator=g, dtype=torch.float64)  # one per block

    def draw() -> Tensor:
        e = torch.randn(groups, m, d_k, generator=g, dtype=torch.float64)
        return mu + math.sqrt(rho) * c + math.sqrt(1 - rho) * e

    return draw(), draw()


def _centred(q: Tensor, k: Tensor, scale: float | None) -> tuple[float, float, float]:
    """Over all pairs of each block of (G, m, d) queries and keys: the mean of q·k, and the
    variances of q·k and of attnlab's scaled score around the mean 0 of the condition."""
    raw = q @ k.transpose(-2, -1)  # (G, m, m)
    scaled = scores_via_attnlab(q, k, scale)  # (G, m, m)
    return float(raw.mean()), float(raw.pow(2).mean()), float(scaled.pow(2).mean())


def _mu_block(q: Tensor, k: Tensor, mu: float, scale: float | None,
              variance_theory: Callable[[int, float], float]) -> MuBlock:
    """The mean-μ statistics of (G, m, d) queries and keys, every pair of each block: the
    mean of q·k and its distance from d_k μ², the variances of q·k and of the scaled score
    around the known mean, the theory's variance, their largest relative error against it,
    and that error's standard error from the spread of the G block estimates."""
    d_k, groups = q.shape[-1], q.shape[0]
    raw = q @ k.transpose(-2, -1)  # (G, m, m)
    scaled = scores_via_attnlab(q, k, scale)  # (G, m, m)
    mean_th = d_k * mu**2
    block_var = (raw - mean_th).pow(2).mean((-2, -1))  # (G,) per-block estimates
    block_var_s = (scaled - mean_th / math.sqrt(d_k)).pow(2).mean((-2, -1))
    var_raw, var_scaled = float(block_var.mean()), float(block_var_s.mean())
    theory = float(variance_theory(d_k, mu))
    mean_raw = float(raw.mean())
    return MuBlock(mean_raw, abs(mean_raw - mean_th), var_raw, var_scaled, theory,
                   max(abs(var_raw / theory - 1), abs(var_scaled / (theory / d_k) - 1)),
                   float(block_var.std() / math.sqrt(groups)) / theory)


def _centred_scores(g: torch.Generator, d_k: int, groups: int, m: int, scale: float | None
                    ) -> CentredScores:
    """G blocks of independent (q, k) of mean 0 and variance 1: all pairs of each block."""
    q = torch.randn(groups, m, d_k, generator=g, dtype=torch.float64)  # (G, m, d)
    k = torch.randn(groups, m, d_k, generator=g, dtype=torch.float64)  # (G, m, d)
    mean_raw, var_raw, var_scaled = _centred(q, k, scale)
    rms, var, _ = _moments(q, k)
    stats = ScoreStats("independent, mean μ = 0, variance 1", d_k, rms, var, mean_raw, var_raw,
                       float(d_k), var_scaled)
    return CentredScores(stats, abs(mean_raw) / math.sqrt(d_k / (m * m * groups)),
                         ((2 / m**2 + 4 / (d_k * m)) / groups) ** 0.5)


def _control_scores(g: torch.Generator, d_k: int, m: int, rho: float, scale: float | None
                    ) -> ScoreStats:
    """One block of mean-0 (q, k) whose components are correlated within each vector."""
    q, k = correlated_within(g, 1, m, d_k, 0.0, rho)
    mean_raw, var_raw, var_scaled = _centred(q, k, scale)
    rms, var, indep = _moments(q, k)
    return ScoreStats(f"control: correlated within each vector (ρ = {rho}), mean 0, "
                      "variance 1", d_k, rms, var, mean_raw, var_raw, indep, var_scaled)


def measure(
    seed: int = 0,
    *,
    dims: Sequence[int] = (16, 64, 256, 1024),
    pairs: int = 2_097_152,
    m: int = 256,
    scale_fn: Callable[[int], float | None] = lambda d_k: None,
    means: Sequence[float] = (0.5, 1.0),
    mean_dim: int = 64,
    mean_blocks: int = 32,
    variance_theory: Callable[[int, float], float] = lambda d_k, mu: d_k * (1 + 2 * mu**2),
    real_model: str | None = "minilm",
    control_rho: float = 0.1,
) -> QKVarianceMeasurement:
    """The scores of every measurement and control that :func:`run` describes (same
    arguments, drawn in this order: mean 0 per d_k, mean μ, then the controls)."""
    if not 0 < control_rho < 1:
        raise ValueError(f"control_rho must be in (0, 1) (a correlation that breaks the "
                         f"condition), got {control_rho!r}")
    if real_model is not None and real_model not in MODEL_LABELS:
        raise ValueError(f"real_model must be one of {sorted(MODEL_LABELS)} or None, "
                         f"got {real_model!r}")
    if mean_blocks < 8:
        raise ValueError(f"mean_blocks must be >= 8 (its spread gives the standard error), "
                         f"got {mean_blocks}")
    rho, d0, g0 = control_rho, dims[0], 4
    with seeded(seed) as g:
        centred = tuple(_centred_scores(g, d_k, max(4, pairs // (m * m) * min(dims) // d_k), m,
                                        scale_fn(d_k)) for d_k in dims)
        mu_blocks = []
        for mu in means:
            q = mu + torch.randn(mean_blocks, m, mean_dim, generator=g, dtype=torch.float64)
            k = mu + torch.randn(mean_blocks, m, mean_dim, generator=g, dtype=torch.float64)
            st = _mu_block(q, k, mu, scale_fn(mean_dim), variance_theory)
            rms, var, _ = _moments(q, k)
            mu_blocks.append((mu, st, ScoreStats(
                f"independent, mean μ = {mu}, variance 1", mean_dim, rms, var, st.mean, st.var,
                st.theory, st.var_scaled)))
        # the controls, drawn after the measurements (which keep their numbers): the same
        # statistics where the condition is broken, which the laws must not fit
        control = tuple(_control_scores(g, d_k, m, rho, scale_fn(d_k)) for d_k in dims)
        q, k = correlated_across(g, g0, m, d0, 0.0, rho)
        control_mean_z = abs(_centred(q, k, scale_fn(d0))[0]) / math.sqrt(d0 / (m * m * g0))
        shifted = []
        for mu, st, stats in mu_blocks:
            q, k = correlated_across(g, 8, m, mean_dim, mu, rho)
            c_mean = _mu_block(q, k, mu, scale_fn(mean_dim), variance_theory)
            q, k = correlated_within(g, 8, m, mean_dim, mu, rho)
            c_var = _mu_block(q, k, mu, scale_fn(mean_dim), variance_theory)
            mean_se = math.sqrt(mean_dim * (2 * mu**2 / m + 1 / m**2) / mean_blocks)
            shifted.append(ShiftedScores(mu, stats, st, mean_se, c_mean, c_var))
    real: tuple[ScoreStats, ...] = ()
    real_note = ""
    if real_model is not None:
        from attnlab.models import ModelNotAvailableError

        try:
            real = real_model_scores(real_model)
        except ModelNotAvailableError as e:
            real_note = str(e)
    return QKVarianceMeasurement(m, rho, mean_dim, centred, tuple(shifted), control, d0,
                                 control_mean_z, real_model, real, real_note)


def headline_control(m: QKVarianceMeasurement) -> Control:
    """The headline measured on components correlated within each vector."""
    return Control(f"components correlated within each vector (ρ = {m.rho}), mean 0, "
                   "variance 1", f"每个向量内各分量相关（ρ = {m.rho}），均值 0，方差 1",
                   m.control_rel)


def checks(m: QKVarianceMeasurement) -> list[Check]:
    """The mean-0 mean check, then per μ its mean and variance checks, each with its
    control."""
    rho, d0 = m.rho, m.control_mean_dim
    out = [check_le("μ = 0: max over d_k of |E[q·k]| / its standard error",
                    max(c.mean_z for c in m.centred), 5.0, id="centred-mean",
                    control=Control(f"q and k correlated with each other (ρ = {rho} per "
                                    f"component), mean 0, variance 1, d_k = {d0}",
                                    f"q 与 k 相互相关（每个分量 ρ = {rho}），均值 0，"
                                    f"方差 1，d_k = {d0}", m.control_mean_z))]
    for s in m.shifted:
        mu = s.mu
        out += [
            check_le(f"μ = {mu}: |E[q·k] − d_k μ²| / its standard error",
                     s.block.mean_dev / s.mean_se, 5.0, id=f"{_mu_id(mu)}-mean",
                     control=Control(
                         f"q and k correlated with each other (ρ = {rho} per component), "
                         f"mean {mu}, variance 1: E[q·k] = d_k(μ² + ρ)",
                         f"q 与 k 相互相关（每个分量 ρ = {rho}），均值 {mu}，方差 1："
                         "E[q·k] = d_k(μ² + ρ)", s.control_mean.mean_dev / s.mean_se)),
            check_le(f"μ = {mu}: relative error of Var(q·k) and Var(q·k/√d_k) against "
                     "d_k(1 + 2μ²) and 1 + 2μ²", s.block.rel, 6 * s.block.se_rel,
                     id=f"{_mu_id(mu)}-variance",
                     control=Control(
                         f"components correlated within each vector (ρ = {rho}), mean "
                         f"{mu}, variance 1", f"每个向量内各分量相关（ρ = {rho}），均值 "
                         f"{mu}，方差 1", s.control_var.rel)),
        ]
    return out


def table(m: QKVarianceMeasurement) -> tuple[list[str], list[list]]:
    rows = ([c.stats for c in m.centred] + [s.stats for s in m.shifted] + list(m.control)
            + list(m.real))
    return (["q, k", "d_k", "component mean (RMS)", "component variance", "E[q·k]",
             "Var(q·k)", "Var(q·k) if independent", "Var(q·k) / that", "Var(q·k/√d_k)"],
            [r.cells() for r in rows])


CAPTION = ("fp64 Gaussian (q, k): all pairs of blocks of m queries × m keys; the scaled "
           "scores are attnlab's own; tolerance = 6 standard errors of the variance "
           "estimate (mean 0); the means are checked within 5 standard errors. "
           "'Var(q·k) if independent' is Σ_i σ_qi²σ_ki² + σ_qi²μ_ki² + μ_qi²σ_ki² "
           "(d_k(1 + 2μ²) for the independent rows).")
CAPTION_ZH = ("fp64 高斯 (q, k)：每块 m 个查询 × m 个键的全部配对；缩放后的分数取自 "
              "attnlab 本身；容差为方差估计标准误差的 6 倍（均值为 0 时）；均值在 5 个"
              "标准误差内检验。“分量独立时的 Var(q·k)”为 Σ_i σ_qi²σ_ki² + σ_qi²μ_ki² + "
              "μ_qi²σ_ki²（各分量独立的各行即 d_k(1 + 2μ²)）。")


def captions(m: QKVarianceMeasurement) -> tuple[str, str]:
    """The caption in English and in Chinese: the method, the control, the real model."""
    rho, d0, last = m.rho, m.control_mean_dim, m.control[-1]
    d_last, ratio, theory = last.d_k, last.var / last.d_k, 1 + (last.d_k - 1) * m.rho**2
    ctrl, tol, z = m.control_rel, m.tolerance, m.control_mean_z
    en = (f" Control: components of mean 0 and variance 1 but correlated within each "
          f"vector (ρ = {rho}), where Var(q·k) = d_k(1 + (d_k − 1)ρ²): measured "
          f"Var(q·k)/d_k = {ratio:.3g} at d_k = {d_last} (theory {theory:.3g}), a largest "
          f"relative error against 1 of {ctrl:.3g} against the tolerance {tol:.3g}: the law "
          "Var = d_k fails without independence, as it must. The mean checks' control, q "
          f"and k correlated with each other, misses E[q·k] by {z:.3g} standard errors "
          f"(d_k = {d0}).")
    zh = (f" 对照：各分量均值 0、方差 1，但每个向量内各分量相关（ρ = {rho}），此时 "
          f"Var(q·k) = d_k(1 + (d_k − 1)ρ²)：d_k = {d_last} 时实测 Var(q·k)/d_k = "
          f"{ratio:.3g}（理论 {theory:.3g}），相对 1 的最大相对误差为 {ctrl:.3g}，容差为 "
          f"{tol:.3g}：分量不独立时 Var = d_k 不成立，正如应有的那样。均值各项检验的对照（q 与 k "
          f"相互相关）偏离 E[q·k] {z:.3g} 个标准误差（d_k = {d0}）。")
    if m.real:
        v = [r.var_scaled for r in m.real]
        c = [r.component_var for r in m.real]
        label, n = _model_label(m), len(REAL_TEXT)
        en += (f" {label} rows (information, no claim): its q, k over the {n}-character text "
               f"have component variances {min(c):.2f}–{max(c):.2f} but Var(q·k/√d_k) = "
               f"{min(v):.2f}–{max(v):.2f}, not 1: the components are correlated and have "
               "non-zero means.")
        zh += (f" {label} 各行（仅供参考，不作论断）：在这段 {n} 个字符的文本上，其 q、k 的分量"
               f"方差为 {min(c):.2f}–{max(c):.2f}，但 Var(q·k/√d_k) = {min(v):.2f}–"
               f"{max(v):.2f}，而不是 1：各分量相互相关，且均值不为 0。")
    elif m.real_model is not None:
        en += f" {m.real_model} was not measured: {m.real_note}"
        zh += f" 未测量 {m.real_model}：{m.real_note}"
    return CAPTION + en, CAPTION_ZH + zh


def run(
    seed: int = 0,
    *,
    dims: Sequence[int] = (16, 64, 256, 1024),
    pairs: int = 2_097_152,
    m: int = 256,
    scale_fn: Callable[[int], float | None] = lambda d_k: None,
    means: Sequence[float] = (0.5, 1.0),
    mean_dim: int = 64,
    mean_blocks: int = 32,
    variance_theory: Callable[[int, float], float] = lambda d_k, mu: d_k * (1 + 2 * mu**2),
    real_model: str | None = "minilm",
    control_rho: float = 0.1,
    plot: bool = True,
) -> Result:
    """Score blocks of ``m`` queries against ``m`` keys (all pairs), per d_k and per mean μ.

    ``scale_fn(d_k)`` is the scale handed to attnlab (None = attnlab's default 1/√d_k);
    a wrong one (e.g. ``lambda d: 1.0``) must fail. ``variance_theory(d_k, μ)`` is the
    variance the μ ≠ 0 rows are checked against; a wrong one (``lambda d, mu: d``, the
    formula without the condition) must fail. ``real_model``: the model whose queries and
    keys are reported (None: skip).

    Mean 0 (``dims``): the tolerance comes from the sampling error of the variance estimate:
    over all m² pairs of a block, Var(Ŝ)/d_k² ≈ 2/m² + 4/(d_k m) (pairs sharing a query or a
    key are correlated through |q|², |k|²), divided by the number of blocks G; six standard
    errors of the worst d_k. Small d_k are cheap, so they get ``pairs / m²`` blocks; large
    d_k, whose pairs are nearly independent, get fewer (G ≥ 4). The block mean of q·k has
    variance d_k/m² exactly (it is (Σ_a q_a)·(Σ_b k_b)/m²).

    Mean μ ≠ 0 (``means``, at d_k = ``mean_dim``, ``mean_blocks`` blocks): the variance is
    measured around the known mean d_k μ², its standard error from the spread of the block
    estimates (batch means); the block mean of q·k has variance d_k(2μ²/m + 1/m²).

    Controls (``control_rho`` = ρ, drawn after the measurements): the headline and the
    variance checks on components correlated within each vector (:func:`correlated_within`,
    one block per d_k, 8 per μ), the mean checks on q and k correlated with each other
    (:func:`correlated_across`: 4 blocks at the smallest d_k, 8 per μ). Each must fail the
    test its measurement passes.
    """
    meas = measure(seed, dims=dims, pairs=pairs, m=m, scale_fn=scale_fn, means=means,
                   mean_dim=mean_dim, mean_blocks=mean_blocks,
                   variance_theory=variance_theory, real_model=real_model,
                   control_rho=control_rho)
    caption, caption_zh = captions(meas)
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity="mean 0: max relative error of Var(q·k)/d_k and Var(q·k/√d_k) against 1",
        quantity_zh="均值为 0 时：Var(q·k)/d_k 与 Var(q·k/√d_k) 相对于 1 的最大相对误差",
        measured=meas.headline, expected=0.0, tolerance=meas.tolerance, checks=checks(meas),
        control=headline_control(meas), table=table(meas),
        figure=figure(meas) if plot else None, caption=caption, caption_zh=caption_zh)


def figure(m: QKVarianceMeasurement):
    """Variance against d_k (mean 0 and its control), against μ, and on the real model."""
    from matplotlib.ticker import NullFormatter

    fig, (ax0, ax1, ax2) = new_figure(13, 3.8, ncols=3)
    zero = [c.stats for c in m.centred]
    d = [s.d_k for s in zero]
    ax0.loglog(d, d, "k--", lw=1, label="theory: Var = d_k")
    ax0.loglog(d, [1.0] * len(d), "k:", lw=1, label="theory: Var = 1")
    ax0.loglog(d, [s.var for s in zero], "o-", color="#b3261e", label="raw q·k")
    ax0.loglog(d, [s.var_scaled for s in zero], "s-", color="#3451b2",
               label="attnlab score q·k/√d_k")
    ax0.loglog([s.d_k for s in m.control], [s.var for s in m.control], "x:", color="#7a5c00",
               label=f"control, raw q·k: components correlated (ρ = {m.rho})")
    ax0.set_xticks(d, [str(x) for x in d])
    ax0.xaxis.set_minor_formatter(NullFormatter())
    label_axes(ax0, "head dimension d_k", "variance of the score",
               "Mean 0, variance 1: Var grows as d_k unless scaled", log_grid=True)

    points = [(0.0, s.var / s.d_k, s.mean / s.d_k) for s in zero if s.d_k == m.mean_dim]
    points += [(s.mu, s.stats.var / s.stats.d_k, s.stats.mean / s.stats.d_k) for s in m.shifted]
    mus = torch.linspace(0, max(p[0] for p in points), 50)
    ax1.plot(mus, 1 + 2 * mus**2, "k--", lw=1, label="theory 1 + 2μ²")
    ax1.plot([p[0] for p in points], [p[1] for p in points], "o", color="#b3261e",
             label="measured Var(q·k)/d_k")
    ax1.plot(mus, mus**2, "k:", lw=1, label="theory μ²")
    ax1.plot([p[0] for p in points], [p[2] for p in points], "s", color="#3451b2",
             label="measured E[q·k]/d_k")
    label_axes(ax1, f"component mean μ (variance 1, d_k = {m.mean_dim})",
               "per dimension of q·k", "Outside the condition: mean μ ≠ 0")
    _real_panel(ax2, m)
    return fig


def _model_label(m: QKVarianceMeasurement) -> str:
    """The real model's label (asked for only where a real model was measured or tried)."""
    if m.real_model is None:
        raise ValueError("no real model was measured or tried")
    return MODEL_LABELS[m.real_model]


def _real_panel(ax, m: QKVarianceMeasurement) -> None:
    """The real model's scaled score variance per layer against the articles' 1."""
    if m.real:
        layers = list(range(len(m.real)))
        ax.plot(layers, [s.var_scaled for s in m.real], "o-", color="#b3261e",
                label="Var(q·k/√d_k) measured")
        ax.plot(layers, [s.var_independent / s.d_k for s in m.real], "s--", color="#137a3a",
                label="same, if the components were independent")
        ax.plot(layers, [s.component_var for s in m.real], "^:", color="#3451b2",
                label="component variance (q and k)")
        ax.axhline(1.0, color="k", ls=":", lw=1, label="the articles' assumption: 1")
        ax.set_xticks(layers)
        label_axes(ax, "layer", "variance",
                   f"{_model_label(m)}: real q, k (d_k = {m.real[0].d_k})")
    else:
        ax.text(0.5, 0.5, f"{_model_label(m)} not available (see the caption)"
                if m.real_note else "no real model measured", ha="center", va="center",
                fontsize=9)
        ax.set_axis_off()
