"""kernel-smoothing: attention is Nadaraya–Watson kernel regression.

With queries x, keys x_i, values y_i and the score −(x − x_i)²/(2σ²), softmax attention is
exactly the Nadaraya–Watson estimator with a Gaussian kernel,

    f̂(x) = Σ_i K(x, x_i) y_i / Σ_j K(x, x_j),    K(x, x_i) = exp(−(x − x_i)²/(2σ²)).

The score is a dot product: with q = (x/σ, 1) and k_i = (x_i/σ, −x_i²/(2σ²)),
q·k_i = −(x − x_i)²/(2σ²) + x²/(2σ²), and the last term is the same for every key, so the
softmax ignores it. In general −|q − k|²/2 = q·k − |q|²/2 − |k|²/2: for keys of equal norm,
plain dot-product attention softmax(q·k/τ) *is* a Gaussian kernel smoother with σ² = τ
(article 000). Here the Gaussian is fixed and the keys are built for it; the kernel that
attention itself uses is exp(q·k/√d) with q, k from learned W_Q, W_K, a Gaussian only when
the keys have equal norms (see ``learned-kernel``).

Both equalities are identities (algebra, whatever the data): they hold by construction. Each
is put beside the deliberately wrong variant the same test must reject: the NW estimate with
another kernel, the Laplace kernel exp(−|x − x_i|/σ) (:func:`laplace_kernel`), for the first;
keys of unequal norms for the second.

Three support checks read article 000's section 五 against what it compares:

* its formula Output = Σ_i softmax(q·k_i) v_i (:func:`article_output`) is printed without
  the 1/√d_k of the attention it defines in section 一 (「对比我们的注意力公式」): at d = 16
  its output differs from attnlab's attention by far more than rounding, while the same
  formula with the 1/√d_k restored (:func:`scaled_output`, the control) agrees to fp64
  rounding;
* it calls K(·,·) 「衡量距离的核函数」 (a kernel that measures distance), but a kernel
  measures similarity: for the Gaussian kernel of the regression and for the attention
  kernel exp(q·k/√d) on unit vectors, K(x, ·) is largest at x itself (distance 0) and
  falls as the distance grows (within-row Spearman rank correlation with the distance −1),
  while a distance, the control, is smallest there and rises with itself (+1). Both hold
  by construction: each kernel is a decreasing function of the distance.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from attnlab.core.functional import default_scale, scaled_dot_product_attention

from ._common import check_ge, check_le, label_axes, new_figure, seeded
from ._result import Check, Control, Result
from .dot_product_geometry import row_spearman

NAME = "kernel-smoothing"
CLAIM = ("Attention with score −(x−x_i)²/(2σ²) is exactly the Nadaraya–Watson estimator; "
         "with equal-norm keys, dot-product attention is a Gaussian kernel smoother.")
CLAIM_ZH = ("以 −(x−x_i)²/(2σ²) 为分数的注意力恰好就是 Nadaraya–Watson 核回归估计量；"
            "当所有键的范数相等时，点积注意力就是高斯核平滑器。")

ZH: dict[str, str] = {
    # checks
    "equal-norm keys: max |softmax(q·k/√d) − Gaussian weights, σ² = √d|":
        "键范数相等时：|softmax(q·k/√d) − 高斯核权重（σ² = √d）| 的最大值",
    "article {}'s Output = Σ softmax(q·k_i) v_i (no {}/√d_k): max |it − attention| "
    "(d = {}, fp{})": "文章 {} 的 Output = Σ softmax(q·k_i) v_i（没有 {}/√d_k）："
    "|它 − 注意力| 的最大值（d = {}，fp{}）",
    "Gaussian kernel and exp(q·k/√d) on unit vectors: rows whose largest K(x, ·) is at x "
    "itself (distance 0), fraction": "高斯核与单位向量上的 exp(q·k/√d)：K(x, ·) 的最大值恰在 x "
    "自身（距离为 0）的行所占比例",
    "Gaussian kernel and exp(q·k/√d) on unit vectors: within-row Spearman(K(x, x_j), "
    "‖x − x_j‖), the larger of the two": "高斯核与单位向量上的 exp(q·k/√d)：行内 "
    "Spearman(K(x, x_j), ‖x − x_j‖)，取两者中较大者",
    # table
    "max |attention − NW|": "|注意力 − Nadaraya–Watson 估计| 的最大值",
    "MSE against 2 sin x + x": "相对 2 sin x + x 的均方误差",
    # figure
    "training data (x_i, y_i)": "训练数据 (x_i, y_i)",
    "truth 2 sin x + x": "真值 2 sin x + x",
    "attention, σ = {}": "注意力，σ = {}",
    "input x": "输入 x",
    "output y": "输出 y",
    "Attention as Nadaraya–Watson regression": "作为 Nadaraya–Watson 回归的注意力",
    "training example i (sorted by x_i)": "训练样本 i（按 x_i 排序）",
    "query x": "查询 x",
    "Attention weights, σ = {}": "注意力权重，σ = {}",
}


Kernel = Callable[[Tensor, float], Tensor]
Formula = Callable[[Tensor, Tensor, Tensor], Tensor]


def article_output(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Article 000's Output = Σ_i softmax(q·k_i) v_i as printed: no 1/√d_k."""
    return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v


def scaled_output(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The same formula with the 1/√d_k restored (the control: attention as defined)."""
    return torch.softmax(q @ k.transpose(-2, -1) * default_scale(q.shape[-1]), dim=-1) @ v


def sphere_kernel(x: Tensor, y: Tensor) -> Tensor:
    """The attention kernel exp(x·y/√d) between rows of ``x`` and ``y`` (M, N)."""
    return torch.exp(x @ y.T * default_scale(x.shape[-1]))


def distance(x: Tensor, y: Tensor) -> Tensor:
    """‖x − y‖ between rows (the control: a distance, not a similarity)."""
    return torch.cdist(x, y)


def kernel_vs_distance(kernel: Tensor, dist: Tensor) -> tuple[float, float]:
    """For square (N, N) matrices of K(x_i, x_j) and ‖x_i − x_j‖: the fraction of rows whose
    largest entry is the diagonal (x itself), and the mean within-row Spearman correlation
    of K with the distance."""
    top = float((kernel.argmax(-1) == torch.arange(len(kernel))).double().mean())
    return top, float(row_spearman(kernel, dist).mean())


def gaussian_kernel(diff: Tensor, sigma: float) -> Tensor:
    """exp(−(x − x_i)²/(2σ²)) of the differences ``diff``."""
    return torch.exp(-(diff**2) / (2 * sigma**2))


def laplace_kernel(diff: Tensor, sigma: float) -> Tensor:
    """Another kernel: exp(−|x − x_i|/σ) (the control, which attention does not compute)."""
    return torch.exp(-diff.abs() / sigma)


def nadaraya_watson(x: Tensor, xi: Tensor, yi: Tensor, sigma: float,
                    kernel: Kernel = gaussian_kernel) -> tuple[Tensor, Tensor]:
    """NW estimate at x (M,) from (xi, yi) (N,) with ``kernel`` (default Gaussian):
    (estimate (M,), weights (M,N))."""
    kern = kernel(x[:, None] - xi[None, :], sigma)  # (M, N)
    w = kern / kern.sum(-1, keepdim=True)
    return w @ yi, w


def attention_regression(x: Tensor, xi: Tensor, yi: Tensor, sigma: float
                         ) -> tuple[Tensor, Tensor]:
    """The same estimate by attnlab attention, with the Gaussian score as a dot product."""
    q = torch.stack([x / sigma, torch.ones_like(x)], -1)  # (M, 2)
    k = torch.stack([xi / sigma, -(xi**2) / (2 * sigma**2)], -1)  # (N, 2)
    out, w = scaled_dot_product_attention(q, k, yi[:, None], scale=1.0,
                                                  return_weights=True)
    return out[:, 0], w


@dataclass(frozen=True)
class SigmaFit:
    """The 1-D regression at one bandwidth σ: attention against Nadaraya–Watson."""

    sigma: float
    estimate: Tensor  # (M,) attention's estimate on the grid
    weights: Tensor  # (M, N) its weights
    err: float  # max |attention − NW (Gaussian)|
    control_err: float  # max |attention − NW with the control kernel|
    mse: float  # MSE against 2 sin x + x

    def cells(self) -> list:
        return [self.sigma, self.err, self.mse]


def _fit(x: Tensor, xi: Tensor, yi: Tensor, sigma: float, control_kernel: Kernel) -> SigmaFit:
    att, w_att = attention_regression(x, xi, yi, sigma)
    ref, _ = nadaraya_watson(x, xi, yi, sigma)
    other, _ = nadaraya_watson(x, xi, yi, sigma, control_kernel)
    truth = 2 * torch.sin(x) + x
    return SigmaFit(sigma, att, w_att, float((att - ref).abs().max()),
                    float((att - other).abs().max()), float(((att - truth) ** 2).mean()))


@dataclass(frozen=True)
class KernelSmoothingMeasurement:
    """The regression per σ, the equal-norm-key identity, article 000's formula and the
    kernels against the distance, each beside its control."""

    n_train: int
    sigmas: tuple[float, ...]
    d: int
    xi: Tensor  # (N,) training inputs, sorted
    yi: Tensor  # (N,) noisy targets
    x: Tensor  # (M,) the grid
    fits: tuple[SigmaFit, ...]  # per σ
    gauss_err: float  # max |softmax(q·k/√d) − Gaussian weights| (keys as the variant says)
    gauss_err_unequal: float  # the same with keys of unequal norms (the control)
    article_gap: float  # max |article 000's unscaled formula − attention|
    restored_gap: float  # the same with the 1/√d_k restored (the control)
    kernel_top: float  # kernels: fraction of rows largest at distance 0, the smaller
    kernel_spearman: float  # kernels: Spearman(K, distance), the larger
    null_top: float  # the distance in place of the kernel: the larger fraction
    null_spearman: float  # and the smaller Spearman

    @property
    def nw_err(self) -> float:
        """max |attention − Nadaraya–Watson| over x and σ."""
        return max([0.0] + [f.err for f in self.fits])

    @property
    def control_err(self) -> float:
        return max([0.0] + [f.control_err for f in self.fits])


def measure(
    seed: int = 0,
    *,
    n_train: int = 50,
    sigmas: Sequence[float] = (0.1, 0.3, 1.0),
    d: int = 16,
    equal_norm_keys: bool = True,
    control_kernel: Kernel = laplace_kernel,
    article_fn: Formula = article_output,
    restored_fn: Formula = scaled_output,
    similarity_fn: Callable[[Tensor, Tensor], Tensor] = sphere_kernel,
) -> KernelSmoothingMeasurement:
    """The regression and the identities (arguments: see :func:`run`)."""
    with seeded(seed) as g:
        xi = (torch.rand(n_train, generator=g, dtype=torch.float64) * 5).sort().values
        yi = 2 * torch.sin(xi) + xi + 0.5 * torch.randn(n_train, generator=g,
                                                         dtype=torch.float64)
        x = torch.linspace(0, 5, 101, dtype=torch.float64)
        fits = tuple(_fit(x, xi, yi, sigma, control_kernel) for sigma in sigmas)
        # equal-norm keys in d dims: softmax(q·k/τ) = Gaussian weights with σ² = τ
        q = torch.randn(32, d, generator=g, dtype=torch.float64)
        k_raw = torch.randn(40, d, generator=g, dtype=torch.float64)
        k_equal = 2.0 * k_raw / k_raw.norm(dim=-1, keepdim=True)
        v = torch.randn(40, 3, generator=g, dtype=torch.float64)
        unit = torch.randn(40, d, generator=g, dtype=torch.float64)
        unit = unit / unit.norm(dim=-1, keepdim=True)
    attended = scaled_dot_product_attention(q, k_raw, v)  # attnlab: softmax(q·k/√d) V
    # the regression's Gaussian kernel (its widest σ: no entry underflows) on the training
    # points, and the attention kernel on unit vectors, each beside the distance
    wide = max(sigmas)
    pairs = [(gaussian_kernel(xi[:, None] - xi[None, :], wide), (xi[:, None] - xi[None, :]).abs()),
             (similarity_fn(unit, unit), distance(unit, unit))]
    measured = [kernel_vs_distance(kern, dist) for kern, dist in pairs]
    nulls = [kernel_vs_distance(dist, dist) for _, dist in pairs]
    tau = 1 / default_scale(d)  # the temperature: softmax(q·k / τ), τ = √d

    def gauss_error(k: Tensor) -> float:
        _, w = scaled_dot_product_attention(q, k, k, return_weights=True)  # 1/√d
        gauss = torch.softmax(-torch.cdist(q, k) ** 2 / (2 * tau), dim=-1)
        return float((w - gauss).abs().max())

    return KernelSmoothingMeasurement(
        n_train, tuple(sigmas), d, xi, yi, x, fits,
        gauss_error(k_equal if equal_norm_keys else k_raw), gauss_error(k_raw),
        float((article_fn(q, k_raw, v) - attended).abs().max()),
        float((restored_fn(q, k_raw, v) - attended).abs().max()),
        min(m[0] for m in measured), max(m[1] for m in measured),
        max(n[0] for n in nulls), min(n[1] for n in nulls))


def headline_control(m: KernelSmoothingMeasurement) -> Control:
    """The NW estimate with another kernel."""
    return Control("the NW estimate with another kernel, Laplace exp(−|x − x_i|/σ)",
                   "换一个核的 Nadaraya–Watson 估计：拉普拉斯核 exp(−|x − x_i|/σ)", m.control_err)


def checks(m: KernelSmoothingMeasurement) -> list[Check]:
    """The equal-norm identity, article 000's unscaled formula, and the kernels against the
    distance; each beside its control."""
    return [check_le("equal-norm keys: max |softmax(q·k/√d) − Gaussian weights, σ² = √d|",
                     m.gauss_err, 1e-12, id="gaussian-equal-norms", by_construction=True,
                     control=Control("keys of unequal norms (Gaussian keys, unnormalised)",
                                     "范数不等的键（未归一化的高斯随机键）",
                                     m.gauss_err_unequal)),
            check_ge(f"article 000's Output = Σ softmax(q·k_i) v_i (no 1/√d_k): max |it − "
                     f"attention| (d = {m.d}, fp64)", m.article_gap, 0.1,
                     id="article-formula-unscaled", support=True,
                     control=Control("the same formula with the 1/√d_k restored, "
                                     "softmax(q·k_i/√d_k)",
                                     "恢复 1/√d_k 的同一公式 softmax(q·k_i/√d_k)",
                                     m.restored_gap)),
            check_ge("Gaussian kernel and exp(q·k/√d) on unit vectors: rows whose largest "
                     "K(x, ·) is at x itself (distance 0), fraction",
                     m.kernel_top, 0.99, id="kernel-largest-at-zero-distance",
                     support=True, by_construction=True,
                     control=Control("the distance ‖x − x_j‖ in place of the kernel",
                                     "以距离 ‖x − x_j‖ 代替核", m.null_top)),
            check_le("Gaussian kernel and exp(q·k/√d) on unit vectors: within-row "
                     "Spearman(K(x, x_j), ‖x − x_j‖), the larger of the two",
                     m.kernel_spearman, -0.9, id="kernel-falls-with-distance",
                     support=True, by_construction=True,
                     control=Control("the distance ‖x − x_j‖ in place of the kernel",
                                     "以距离 ‖x − x_j‖ 代替核", m.null_spearman))]


def table(m: KernelSmoothingMeasurement) -> tuple[list[str], list[list]]:
    return (["σ", "max |attention − NW|", "MSE against 2 sin x + x"],
            [f.cells() for f in m.fits])


BY_CONSTRUCTION = ("q·k_i = −(x − x_i)²/(2σ²) + x²/(2σ²) is algebra and the last term, "
                   "the same for every key, cancels in the softmax; for keys of equal "
                   "norm, q·k/τ = −|q − k|²/(2τ) + terms that cancel likewise. No data can "
                   "break either (fp64 rounding only).")
BY_CONSTRUCTION_ZH = ("q·k_i = −(x − x_i)²/(2σ²) + x²/(2σ²) 是代数恒等式，最后一项对所有键"
                      "都相同，在 softmax 中相消；键范数相等时，q·k/τ = −|q − k|²/(2τ) "
                      "加上同样会相消的项。任何数据都无法打破它们（只差 fp64 舍入）。")


def captions(m: KernelSmoothingMeasurement) -> tuple[str, str]:
    """The caption in English and in Chinese."""
    return (f"{m.n_train} noisy samples of y = 2 sin x + x (noise sd 0.5), estimates on 101 "
            "points by attnlab attention with q = (x/σ, 1), k_i = (x_i/σ, −x_i²/2σ²).",
            f"y = 2 sin x + x 的 {m.n_train} 个带噪样本（噪声标准差 0.5），由 attnlab "
            "注意力在 101 个点上估计，q = (x/σ, 1)，k_i = (x_i/σ, −x_i²/2σ²)。")


def run(
    seed: int = 0,
    *,
    n_train: int = 50,
    sigmas: Sequence[float] = (0.1, 0.3, 1.0),
    d: int = 16,
    equal_norm_keys: bool = True,
    control_kernel: Kernel = laplace_kernel,
    article_fn: Formula = article_output,
    restored_fn: Formula = scaled_output,
    similarity_fn: Callable[[Tensor, Tensor], Tensor] = sphere_kernel,
    plot: bool = True,
) -> Result:
    """The 1-D regression of noisy y = 2 sin x + x, then the d-dim equal-norm-key identity.

    Wrong variant: ``equal_norm_keys=False`` (keys of different norms: dot-product attention
    is then not a Gaussian smoother). Controls: the NW estimate with ``control_kernel``
    (default :func:`laplace_kernel`) must differ from attention; keys of unequal norms must
    fail the Gaussian identity. Handing :func:`gaussian_kernel` as the control kernel makes
    it pass and the result not hold.

    Support checks (article 000's section 五): ``article_fn`` (default
    :func:`article_output`) against attnlab's attention, with ``restored_fn`` (default
    :func:`scaled_output`) as the control; ``similarity_fn`` (default :func:`sphere_kernel`)
    and the Gaussian kernel against the distance (:func:`distance`, the control). Wrong
    variants: ``article_fn=scaled_output`` (the gap vanishes), ``similarity_fn=distance``
    (a distance in place of the kernel: it rises with the distance).
    """
    m = measure(seed, n_train=n_train, sigmas=sigmas, d=d, equal_norm_keys=equal_norm_keys,
                control_kernel=control_kernel, article_fn=article_fn, restored_fn=restored_fn,
                similarity_fn=similarity_fn)
    caption, caption_zh = captions(m)
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity="max |attention estimate − Nadaraya–Watson estimate| over x and σ (fp64)",
        quantity_zh="所有 x 与 σ 上 |注意力估计 − Nadaraya–Watson 估计| 的最大值（fp64）",
        measured=m.nw_err, expected=0.0, tolerance=1e-10, checks=checks(m),
        control=headline_control(m), by_construction=BY_CONSTRUCTION,
        by_construction_zh=BY_CONSTRUCTION_ZH, table=table(m),
        figure=figure(m) if plot else None, caption=caption, caption_zh=caption_zh)


def figure(m: KernelSmoothingMeasurement):
    """The estimates per σ against the data and the truth, and the middle σ's weights."""
    sigmas = m.sigmas
    curves = {f.sigma: (f.estimate.numpy(), f.weights.numpy()) for f in m.fits}
    xi, yi, x = m.xi.numpy(), m.yi.numpy(), m.x.numpy()
    fig, (ax0, ax1) = new_figure(10, 3.8, ncols=2)
    ax0.scatter(xi, yi, s=12, color="#888", label="training data (x_i, y_i)")
    ax0.plot(x, 2 * np.sin(x) + x, "k--", lw=1, label="truth 2 sin x + x")
    colors = ["#b3261e", "#3451b2", "#137a3a", "#a05a00"]
    for c, sigma in zip(colors, sigmas):
        ax0.plot(x, curves[sigma][0], color=c, lw=1.5, label=f"attention, σ = {sigma}")
    label_axes(ax0, "input x", "output y", "Attention as Nadaraya–Watson regression")
    mid = sigmas[len(sigmas) // 2]
    im = ax1.imshow(curves[mid][1], aspect="auto", cmap="Blues", interpolation="nearest",
                    extent=(0, len(xi), 5, 0))
    ax1.set_xlabel("training example i (sorted by x_i)")
    ax1.set_ylabel("query x")
    ax1.set_title(f"Attention weights, σ = {mid}", fontsize=10)
    fig.colorbar(im, ax=ax1, label="weight")
    return fig
