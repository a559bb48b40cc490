"""learned-kernel: attention is Nadaraya–Watson smoothing with the kernel exp(q·k/√d),
a kernel learned through W_Q and W_K.

Article 000, section 五: the Nadaraya–Watson estimator ŷ(x) = Σ_i K(x, x_i) y_i / Σ_j K(x, x_j)
set beside Output = Σ_i softmax(q·k_i) v_i makes attention "a learnable kernel smoother"
whose kernel, instead of a fixed Gaussian, is learned through W^Q and W^K. Three parts:

(a) *Exactly NW.* With q = x W_Q, k_i = x_i W_K, v_i = y_i and
    K(x, x_i) = exp(x W_Q W_Kᵀ x_iᵀ / √d), attnlab's attention output equals the NW
    estimate computed from the kernel directly (fp64).
(b) *Gaussian only for equal key norms.* exp(q·k/τ) = exp(−‖q − k‖²/2τ) · exp(‖q‖²/2τ) ·
    exp(‖k‖²/2τ): the query factor cancels in the normalisation, the key factor does not.
    Softmax weights equal Gaussian-kernel weights when all keys have one norm (the
    ``kernel-smoothing`` setting) and differ when they do not.
(c) *Learned.* A regression whose target depends on only two of eight input dimensions
    (inputs: a point on the unit circle, angle φ, plus six dimensions of noise; target
    sin 3φ + noise): NW with W_Q, W_K trained by gradient descent on the leave-one-out
    training error beats the best fixed Gaussian kernel on the raw inputs (its width
    chosen by leave-one-out on the same training set).

(a) and (b) are identities (no data can break them: they hold by construction), each beside
the deliberately wrong variant the same test must reject: the kernel exp(q·k) without the
1/√d (:func:`unscaled_kernel`), the expansion of q·k without its key-norm term ‖k‖²/2, and
for the Gaussian equality the keys whose norms spread (and, the other way, equal norms for
the spread). (c) is a claim about learning, so its control is the same NW with W_Q, W_K at
their initial random values (untrained): learning, not the form exp(q·k/√d), must be what
beats the Gaussian.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.core.functional import default_scale, scaled_dot_product_attention

from ._common import check_ge, check_le, label_axes, new_figure, seeded
from ._result import Check, Control, Result

NAME = "learned-kernel"
CLAIM = ("Attention is Nadaraya–Watson smoothing with the kernel K(x, x_i) = exp(q·k_i/√d), "
         "q = xW_Q, k_i = x_iW_K: exactly (fp64); this kernel is a Gaussian "
         "exp(−‖q − k‖²/2√d) times a key-norm factor exp(‖k‖²/2√d), so it is a Gaussian "
         "smoother only when the keys have equal norms; and it is learned: on a regression "
         "that depends on 2 of 8 input dimensions, learned W_Q, W_K give at most half the "
         "test error of the best fixed Gaussian kernel on the raw inputs.")
CLAIM_ZH = ("注意力就是以 K(x, x_i) = exp(q·k_i/√d)（q = xW_Q，k_i = x_iW_K）为核的 "
            "Nadaraya–Watson 平滑，在 fp64 下精确成立；这个核等于高斯核 exp(−‖q − k‖²/2√d) "
            "乘以键范数因子 exp(‖k‖²/2√d)，因此只有所有键范数相等时它才是高斯平滑；而且这个核"
            "是学出来的：在只依赖 8 个输入维度中 2 个的回归问题上，学到的 W_Q、W_K 的测试误差"
            "不超过原始输入上最优固定高斯核的一半。")

ZH: dict[str, str] = {
    # checks
    "max |attention output − NW estimate with exp(q·k/√d)| (fp64)":
        "|注意力输出 − 以 exp(q·k/√d) 为核的 Nadaraya–Watson 估计| 的最大值（fp64）",
    "max |q·k − (−‖q − k‖²/2 + ‖q‖²/2 + ‖k‖²/2)| / √d (fp64)":
        "|q·k − (−‖q − k‖²/2 + ‖q‖²/2 + ‖k‖²/2)| / √d 的最大值（fp64）",
    "equal key norms: max over queries of TV(softmax weights, Gaussian weights)":
        "键范数相等时：各查询上 TV(softmax 权重, 高斯核权重) 的最大值",
    "key norms spread ±{}%: max over queries of TV(softmax weights, Gaussian weights)":
        "键范数相差 ±{}% 时：各查询上 TV(softmax 权重, 高斯核权重) 的最大值",
    # table
    "kernel": "核",
    "width / parameters": "宽度 / 参数",
    "test MSE against sin 3φ": "相对 sin 3φ 的测试均方误差",
    "MSE / best Gaussian": "均方误差 / 最优高斯核",
    "Gaussian on raw inputs, best σ (leave-one-out)": "原始输入上的高斯核，最优 σ（留一法）",
    "σ = {}": "σ = {}",
    "exp(q·k/√d), W_Q, W_K untrained": "exp(q·k/√d)，W_Q、W_K 未训练",
    "exp(q·k/√d), W_Q, W_K learned": "exp(q·k/√d)，W_Q、W_K 学习后",
    "W_Q, W_K: {} × {} each": "W_Q、W_K：各 {} × {}",
    "reference: Gaussian on the circle's 2 dims, best σ": "参照：只用圆上 2 个维度的高斯核，最优 σ",
    # figure
    "angle φ of the input": "输入的角度 φ",
    "prediction": "预测值",
    "truth sin 3φ": "真值 sin 3φ",
    "Gaussian on raw inputs": "原始输入上的高斯核",
    "learned kernel": "学到的核",
    "Test predictions": "测试集上的预测",
    "input dimension (key side)": "输入维度（键一侧）",
    "input dimension (query side)": "输入维度（查询一侧）",
    "Learned W_Q W_Kᵀ: concentrated on the circle's 2 dims":
        "学到的 W_Q W_Kᵀ：集中在圆所在的 2 个维度上",
    "entry": "元素值",
    "spread of the key norms (±fraction)": "键范数的相对波动（±比例）",
    "max over queries of TV distance": "各查询上总变差距离的最大值",
    "softmax vs Gaussian weights": "softmax 权重与高斯核权重之比较",
    "exp(q·k/√d) is Gaussian only for equal norms": "exp(q·k/√d) 只在范数相等时是高斯核",
    "equal norms (float rounding)": "范数相等（浮点舍入）",
}


def dot_kernel(q: Tensor, k: Tensor) -> Tensor:
    """(M, d), (N, d) -> (M, N) kernel exp(q·k/√d), the one attnlab's attention uses."""
    return torch.exp(q @ k.T * default_scale(q.shape[-1]))


def unscaled_kernel(q: Tensor, k: Tensor) -> Tensor:
    """Wrong: exp(q·k) without the 1/√d attention applies (the kernel's control)."""
    return torch.exp(q @ k.T)


def nadaraya_watson(kernel: Tensor, y: Tensor) -> Tensor:
    """Σ_i K(x, x_i) y_i / Σ_j K(x, x_j) for a (M, N) kernel matrix and (N, ...) targets."""
    return (kernel @ y) / kernel.sum(-1, keepdim=True)


def _circle_data(n: int, dims: int, nuisance: float, noise: float, g: torch.Generator
                 ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Inputs (n, dims): (cos φ, sin φ) and dims − 2 Gaussian nuisance dims of sd
    ``nuisance``; targets sin 3φ + noise; the noiseless truth; the angles φ."""
    phi = torch.rand(n, generator=g, dtype=torch.float64) * 2 * math.pi
    x = torch.cat([torch.stack([phi.cos(), phi.sin()], -1),
                   nuisance * torch.randn(n, dims - 2, generator=g, dtype=torch.float64)], -1)
    truth = torch.sin(3 * phi)
    return x, truth + noise * torch.randn(n, generator=g, dtype=torch.float64), truth, phi


def _gaussian(xq: Tensor, xk: Tensor, y: Tensor, sigma: float,
              leave_one_out: bool = False) -> Tensor:
    scores = -torch.cdist(xq, xk) ** 2 / (2 * sigma**2)
    if leave_one_out:
        scores = scores.masked_fill(torch.eye(len(xq), dtype=torch.bool), -math.inf)
    return torch.softmax(scores, -1) @ y


def _best_gaussian(x: Tensor, y: Tensor, sigmas: Tensor) -> float:
    """The width with the lowest leave-one-out training MSE."""
    errs = [float((_gaussian(x, x, y, float(s), True) - y).pow(2).mean()) for s in sigmas]
    return float(sigmas[min(range(len(errs)), key=errs.__getitem__)])


def train_kernel(x: Tensor, y: Tensor, rank: int, steps: int, lr: float, g: torch.Generator
                 ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """W_Q, W_K (dims × rank) after ``steps`` Adam steps on the leave-one-out NW error of
    attnlab attention (query i may not attend to key i); also their initial values."""
    dims = x.shape[1]
    w_q0 = torch.randn(dims, rank, generator=g, dtype=torch.float64) / math.sqrt(dims)
    w_k0 = torch.randn(dims, rank, generator=g, dtype=torch.float64) / math.sqrt(dims)
    w_q, w_k = w_q0.clone().requires_grad_(True), w_k0.clone().requires_grad_(True)
    others = ~torch.eye(len(x), dtype=torch.bool)  # True = may attend
    opt = torch.optim.Adam([w_q, w_k], lr=lr)
    with torch.enable_grad():
        for _ in range(steps):
            pred = scaled_dot_product_attention(x @ w_q, x @ w_k, y[:, None], others)[:, 0]
            loss = (pred - y).pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return w_q.detach(), w_k.detach(), w_q0, w_k0


def _attend(xq: Tensor, xk: Tensor, y: Tensor, w_q: Tensor, w_k: Tensor) -> Tensor:
    return scaled_dot_product_attention(xq @ w_q, xk @ w_k, y[:, None])[:, 0]


@dataclass(frozen=True)
class KernelRow:
    """One kernel of (c) in the table: its test error against the truth."""

    kernel: str
    parameters: str
    mse: float
    ratio: float  # MSE / that of the best Gaussian

    def cells(self) -> list:
        return [self.kernel, self.parameters, self.mse, self.ratio]


@dataclass(frozen=True)
class LearnedKernelMeasurement:
    """(a) attention against NW, (b) softmax against Gaussian weights, (c) the learned
    kernel against the best Gaussian; each beside its control."""

    d: int  # head dimension of (a) and (b)
    nw_error: float  # max |attention − NW with kernel_fn|
    nw_error_control: float  # the same with control_kernel_fn
    polarisation_error: float  # the expansion of q·k, / √d
    polarisation_error_control: float  # the same without the key-norm term
    spreads: tuple[float, ...]
    tv: tuple[float, ...]  # per spread: max over queries of TV(softmax, Gaussian)
    n_train: int
    n_test: int
    dims: int
    rank: int
    nuisance: float
    noise: float
    steps: int
    lr: float
    sigma: float  # best Gaussian width on the raw inputs
    sigma_circle: float  # best width on the circle's 2 dims
    mse_gaussian: float
    mse_untrained: float  # NW with W_Q, W_K at their initial values
    mse_learned: float
    mse_circle: float
    phi: Tensor  # (n_test,) test angles
    truth: Tensor  # (n_test,) sin 3φ
    pred_gaussian: Tensor  # (n_test,)
    pred_learned: Tensor  # (n_test,)
    w_q: Tensor  # (dims, rank) learned
    w_k: Tensor

    @property
    def ratio(self) -> float:
        """Test MSE of the learned kernel / that of the best Gaussian."""
        return self.mse_learned / self.mse_gaussian

    @property
    def widest(self) -> int:
        """Index of the largest spread."""
        return max(range(len(self.spreads)), key=lambda i: self.spreads[i])

    @property
    def rows(self) -> list[KernelRow]:
        g, params = self.mse_gaussian, f"W_Q, W_K: {self.dims} × {self.rank} each"
        return [
            KernelRow("Gaussian on raw inputs, best σ (leave-one-out)", f"σ = {self.sigma:.3g}",
                      g, 1.0),
            KernelRow("exp(q·k/√d), W_Q, W_K untrained", params, self.mse_untrained,
                      self.mse_untrained / g),
            KernelRow("exp(q·k/√d), W_Q, W_K learned", params, self.mse_learned, self.ratio),
            KernelRow("reference: Gaussian on the circle's 2 dims, best σ",
                      f"σ = {self.sigma_circle:.3g}", self.mse_circle, self.mse_circle / g),
        ]


def _gaussian_deviation(g: torch.Generator, q: Tensor, k: Tensor, spreads: Sequence[float]
                        ) -> list[float]:
    """(b): per spread, keys of norm √d(1 ± spread·u) in the directions of ``k``: the max
    over queries of the total variation between softmax and Gaussian weights."""
    d = q.shape[-1]
    tau = 1 / default_scale(d)
    direction = k / k.norm(dim=-1, keepdim=True)
    u = torch.rand(k.shape[0], 1, generator=g, dtype=torch.float64) * 2 - 1  # in [−1, 1]
    dev = []
    for spread in spreads:
        keys = math.sqrt(d) * direction * (1 + spread * u)  # norms √d(1 ± spread)
        _, w = scaled_dot_product_attention(q, keys, keys, return_weights=True)
        gauss = torch.softmax(-torch.cdist(q, keys) ** 2 / (2 * tau), -1)
        dev.append(float((w - gauss).abs().sum(-1).max() / 2))  # total variation
    return dev


def measure(
    seed: int = 0,
    *,
    n_train: int = 200,
    n_test: int = 400,
    dims: int = 8,
    rank: int = 4,
    nuisance: float = 0.5,
    noise: float = 0.1,
    steps: int = 150,
    lr: float = 0.1,
    spreads: Sequence[float] = (0.0, 0.05, 0.1, 0.2, 0.5),
    kernel_fn: Callable[[Tensor, Tensor], Tensor] = dot_kernel,
    control_kernel_fn: Callable[[Tensor, Tensor], Tensor] = unscaled_kernel,
) -> LearnedKernelMeasurement:
    """(a), (b) and (c) of :func:`run` (same arguments)."""
    if not spreads or spreads[0] != 0.0 or max(spreads) <= 0:
        raise ValueError(f"spreads must start at 0.0 (equal norms) and include a positive "
                         f"spread, got {tuple(spreads)}")
    with seeded(seed) as g:
        # (a) exactly Nadaraya–Watson
        d = 16
        q = torch.randn(32, d, generator=g, dtype=torch.float64)
        k = torch.randn(40, d, generator=g, dtype=torch.float64)
        v = torch.randn(40, 3, generator=g, dtype=torch.float64)
        attended = scaled_dot_product_attention(q, k, v)
        nw_err = float((attended - nadaraya_watson(kernel_fn(q, k), v)).abs().max())
        nw_control = float((attended - nadaraya_watson(control_kernel_fn(q, k), v)).abs().max())
        # (b) the Gaussian and the key-norm factor
        tau = 1 / default_scale(d)
        gauss_part = -torch.cdist(q, k) ** 2 / 2 + (q * q).sum(-1, keepdim=True) / 2
        ident = (q @ k.T - (gauss_part + (k * k).sum(-1)[None, :] / 2)).abs().max() / tau
        no_key_norm = (q @ k.T - gauss_part).abs().max() / tau  # the key-norm term dropped
        dev = _gaussian_deviation(g, q, k, spreads)
        # (c) learned against fixed
        x, y, _, _ = _circle_data(n_train, dims, nuisance, noise, g)
        xt, _, truth, phi = _circle_data(n_test, dims, nuisance, noise, g)
        sigmas = torch.logspace(-1.5, 0.5, 30, dtype=torch.float64)
        sigma = _best_gaussian(x, y, sigmas)
        sigma2 = _best_gaussian(x[:, :2], y, sigmas)
        w_q, w_k, w_q0, w_k0 = train_kernel(x, y, rank, steps, lr, g)
        with torch.no_grad():
            pred_g = _gaussian(xt, x, y, sigma)
            pred_l = _attend(xt, x, y, w_q, w_k)
            pred_0 = _attend(xt, x, y, w_q0, w_k0)
            pred_2 = _gaussian(xt[:, :2], x[:, :2], y, sigma2)

    def mse(pred: Tensor) -> float:
        return float((pred - truth).pow(2).mean())

    return LearnedKernelMeasurement(
        d, nw_err, nw_control, float(ident), float(no_key_norm), tuple(spreads), tuple(dev),
        n_train, n_test, dims, rank, nuisance, noise, steps, lr, sigma, sigma2, mse(pred_g),
        mse(pred_0), mse(pred_l), mse(pred_2), phi, truth, pred_g, pred_l, w_q, w_k)


def headline_control(m: LearnedKernelMeasurement) -> Control:
    """The same NW with W_Q, W_K untrained."""
    return Control("the same NW with W_Q, W_K at their initial random values (untrained)",
                   "W_Q、W_K 取初始随机值（未训练）的同一 Nadaraya–Watson 估计",
                   m.mse_untrained / m.mse_gaussian)


def checks(m: LearnedKernelMeasurement) -> list[Check]:
    """(a) and (b), identities each beside its wrong variant."""
    big, dev = m.widest, m.tv
    spread_words = (f"keys whose norms spread ±{m.spreads[big]:.0%}",
                    f"范数相差 ±{m.spreads[big]:.0%} 的键")
    return [
        check_le("max |attention output − NW estimate with exp(q·k/√d)| (fp64)", m.nw_error,
                 1e-12, id="nw-estimate", by_construction=True,
                 control=Control("the kernel exp(q·k) without the 1/√d",
                                 "去掉 1/√d 的核 exp(q·k)", m.nw_error_control)),
        check_le("max |q·k − (−‖q − k‖²/2 + ‖q‖²/2 + ‖k‖²/2)| / √d (fp64)",
                 m.polarisation_error, 1e-12, id="polarisation", by_construction=True,
                 control=Control("the expansion without the key-norm term ‖k‖²/2",
                                 "去掉键范数项 ‖k‖²/2 的展开式", m.polarisation_error_control)),
        check_le("equal key norms: max over queries of TV(softmax weights, Gaussian weights)",
                 dev[0], 1e-12, id="gaussian-equal-norms", by_construction=True,
                 control=Control(*spread_words, dev[big])),
        check_ge(f"key norms spread ±{m.spreads[big]:.0%}: max over queries of TV(softmax "
                 "weights, Gaussian weights)", dev[big], 0.1, id="gaussian-spread-norms",
                 control=Control("keys of equal norms", "范数相等的键", dev[0])),
    ]


def table(m: LearnedKernelMeasurement) -> tuple[list[str], list[list]]:
    return (["kernel", "width / parameters", "test MSE against sin 3φ", "MSE / best Gaussian"],
            [r.cells() for r in m.rows])


def captions(m: LearnedKernelMeasurement) -> tuple[str, str]:
    """The caption in English and in Chinese: the settings of (a), (b) and (c)."""
    en = (f"(a) 32 queries, 40 keys, d = {m.d}, fp64. (b) keys of norm √d(1 ± spread·u), u "
          f"uniform in [−1, 1], Gaussian weights softmax(−‖q − k‖²/2√d), compared by their "
          f"total variation distance ½Σ|w − w'|. (c) {m.n_train} training and {m.n_test} test "
          f"inputs (cos φ, sin φ) plus {m.dims - 2} nuisance dims of sd {m.nuisance}, targets "
          f"sin 3φ + noise sd {m.noise}; W_Q, W_K ({m.dims} × {m.rank}) trained by Adam (lr "
          f"{m.lr}, {m.steps} steps) on the leave-one-out error through attnlab's attention; "
          "σ chosen from 30 widths by leave-one-out.")
    zh = (f"(a) 32 个查询、40 个键，d = {m.d}，fp64。(b) 键的范数为 √d(1 ± 波动·u)，u 在 "
          f"[−1, 1] 上均匀分布，高斯核权重为 softmax(−‖q − k‖²/2√d)，以总变差距离 ½Σ|w − w'| "
          f"比较。(c) {m.n_train} 个训练输入与 {m.n_test} 个测试输入：(cos φ, sin φ) 加上 "
          f"{m.dims - 2} 个标准差为 {m.nuisance} 的干扰维度，目标为 sin 3φ 加标准差 {m.noise} "
          f"的噪声；W_Q、W_K（{m.dims} × {m.rank}）经 attnlab 注意力、以留一法误差为目标用 "
          f"Adam 训练（学习率 {m.lr}，{m.steps} 步）；σ 用留一法从 30 个宽度中选出。")
    return en, zh


def run(
    seed: int = 0,
    *,
    n_train: int = 200,
    n_test: int = 400,
    dims: int = 8,
    rank: int = 4,
    nuisance: float = 0.5,
    noise: float = 0.1,
    steps: int = 150,
    lr: float = 0.1,
    spreads: Sequence[float] = (0.0, 0.05, 0.1, 0.2, 0.5),
    kernel_fn: Callable[[Tensor, Tensor], Tensor] = dot_kernel,
    control_kernel_fn: Callable[[Tensor, Tensor], Tensor] = unscaled_kernel,
    plot: bool = True,
) -> Result:
    """(a) attention vs NW with ``kernel_fn``; (b) softmax vs Gaussian weights as the key
    norms spread; (c) the learned kernel against the best Gaussian on the circle data.

    Wrong variants: ``kernel_fn`` without the 1/√d (``lambda q, k: torch.exp(q @ k.T)``)
    fails (a); ``steps=0`` (W_Q, W_K never learned) fails (c): the untrained control then
    equals the measurement. ``control_kernel_fn`` (default :func:`unscaled_kernel`) is (a)'s
    control; handing :func:`dot_kernel` makes it pass and the result not hold.
    """
    m = measure(seed, n_train=n_train, n_test=n_test, dims=dims, rank=rank,
                nuisance=nuisance, noise=noise, steps=steps, lr=lr, spreads=spreads,
                kernel_fn=kernel_fn, control_kernel_fn=control_kernel_fn)
    caption, caption_zh = captions(m)
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity="test MSE of NW with learned W_Q, W_K / that of the best fixed Gaussian",
        quantity_zh="学到的 W_Q、W_K 的 Nadaraya–Watson 估计的测试均方误差 / "
                    "最优固定高斯核的测试均方误差",
        measured=m.ratio, expected=0.5, tolerance=0.0, relation="<=", checks=checks(m),
        control=headline_control(m), table=table(m), figure=figure(m) if plot else None,
        caption=caption, caption_zh=caption_zh)


def figure(m: LearnedKernelMeasurement):
    """Test predictions, the learned W_Q W_Kᵀ, and softmax against Gaussian weights."""
    phi, truth, spreads, dev = m.phi, m.truth, list(m.spreads), list(m.tv)
    fig, (ax0, ax1, ax2) = new_figure(13, 3.8, ncols=3)
    order = phi.argsort()
    ax0.scatter(phi.numpy(), m.pred_gaussian.numpy(), s=5, color="#b3261e", alpha=0.6,
                label="Gaussian on raw inputs")
    ax0.scatter(phi.numpy(), m.pred_learned.numpy(), s=5, color="#3451b2", alpha=0.6,
                label="learned kernel")
    ax0.plot(phi[order].numpy(), truth[order].numpy(), "k-", lw=1, label="truth sin 3φ")
    label_axes(ax0, "angle φ of the input", "prediction", "Test predictions")
    a = (m.w_q @ m.w_k.T).numpy()
    lim = float(abs(a).max())
    im = ax1.imshow(a, cmap="RdBu_r", vmin=-lim, vmax=lim, interpolation="nearest")
    ax1.set_xlabel("input dimension (key side)")
    ax1.set_ylabel("input dimension (query side)")
    ax1.set_title("Learned W_Q W_Kᵀ: concentrated on the circle's 2 dims", fontsize=10)
    fig.colorbar(im, ax=ax1, label="entry")
    ax2.plot(spreads[1:], dev[1:], "o-", color="#3451b2", label="softmax vs Gaussian weights")
    ax2.axhline(max(dev[0], 1e-17), color="k", ls=":", lw=1,
                label="equal norms (float rounding)")
    ax2.set_yscale("log")
    label_axes(ax2, "spread of the key norms (±fraction)", "max over queries of TV distance",
               "exp(q·k/√d) is Gaussian only for equal norms", log_grid=True)
    return fig
