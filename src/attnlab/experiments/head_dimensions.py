"""head-dimensions: each head's projections map d_model to d_k = d_model / h, read from the
weight files of two real models.

Article 000 heads its section on the projections 「线性投影：升维与子空间切割」 (the linear
projection raises the dimension), calls d_k 「模型维度」 (the model dimension), and writes the
multi-head formula with a second projection of Q, K, V that it has already defined as
projected. The dimensions decide all three, and they are measured, not assumed: the shapes
of every W^Q, W^K, W^V, W^O and feed-forward up-projection of MiniLM (BERT, d_model 384,
12 heads) and SmolLM2 (Llama, d_model 576, 9 query heads sharing 3 key/value heads), read
from their weight files' headers (:func:`attnlab.models.shapes.projection_shapes`; no
weights loaded), split into heads by the models' own head counts.

* Per head, every attention projection maps d_model to d_k: d_k / d_model = 1/h (headline,
  ≤ 1), against the same reading of the feed-forward up-projection d_model → d_ff, a layer
  that does raise the dimension (the control, > 1).
* Each of W^Q, W^K, W^V as one matrix (all heads) outputs at most d_model (SmolLM2's shared
  key/value heads: d_model / 3), against the same control.
* d_k is the head dimension, not the model dimension: d_k / d_model on both models and on
  article 000's own listing (embed_dim 512, 8 heads, read from an attnlab
  MultiHeadAttention at its ``hook_q``) is 1/h, against a one-head module (h = 1), where
  the two coincide.
* Stacked into one matrix [W^Q W^K W^V] (the fused ``Linear(d, 3d)`` of article 001's
  listing), the three projections do output more than d_model (3 d_model for MiniLM,
  (9 + 3 + 3)·64 / 576 for SmolLM2): a support check, beside W^O, a d_model → d_model
  matrix of the same block.
* Article 000 defines Q = XW^Q (N × d_k, W^Q d × d_k) and then writes
  head_i = Attention(QW_i^Q, KW_i^K, VW_i^V) with W_i^Q of d_model × d_k: run as written at
  the listing's sizes, the product QW_i^Q raises a shape error (measured 1 = it fails);
  with Q = K = V = X, as in "Attention Is All You Need" where the formula's Q, K, V are the
  layer's inputs, the same code runs (the control, 0). A support check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.core.functional import scaled_dot_product_attention
from attnlab.models.shapes import ModelShapes, projection_shapes
from attnlab.nn import MultiHeadAttention

from ._common import check_ge, check_le, label_axes, new_figure, seeded
from ._result import Check, Control, Result

NAME = "head-dimensions"
CLAIM = ("Each head's projections map d_model to d_k = d_model / h: on MiniLM and SmolLM2, "
         "read from their weight files, every head's slice of W^Q, W^K, W^V outputs "
         "d_k = d_model / h dimensions and each of W^Q, W^K, W^V as one matrix at most "
         "d_model, so no attention projection raises the dimension; d_k is the head "
         "dimension, 1/h of the model dimension.")
CLAIM_ZH = ("每个头的投影都把 d_model 维映射到 d_k = d_model / h 维：在 MiniLM 与 SmolLM2 上"
            "（从权重文件读取），W^Q、W^K、W^V 中每个头的切片都输出 d_k = d_model / h 维，"
            "W^Q、W^K、W^V 各自作为整体也最多输出 d_model 维，所以没有哪个注意力投影是升维；"
            "d_k 是头的维度，只有模型维度的 1/h。")

ZH: dict[str, str] = {
    # checks
    "each of W^Q, W^K, W^V as one matrix (all heads): output width / d_model, largest over "
    "MiniLM and SmolLM2":
        "W^Q、W^K、W^V 各自作为整体（全部头）：输出宽度 / d_model，取 MiniLM 与 SmolLM2 中的最大值",
    "d_k / d_model: largest over MiniLM, SmolLM2 and article 000's listing (512, 8 heads)":
        "d_k / d_model：取 MiniLM、SmolLM2 与文章 000 代码（512 维，8 个头）中的最大值",
    "[W^Q W^K W^V] stacked into one matrix: output width / d_model, smallest over MiniLM "
    "and SmolLM2": "把 [W^Q W^K W^V] 叠成一个矩阵：输出宽度 / d_model，取 MiniLM 与 SmolLM2 "
    "中的最小值",
    "article 000's head_i = Attention(QW_i^Q, KW_i^K, VW_i^V) with its Q = XW^Q (N × d_k), "
    "at 512 dims and 8 heads: 1 if the shapes do not match":
        "文章 000 的 head_i = Attention(QW_i^Q, KW_i^K, VW_i^V)，其中 Q = XW^Q（N × d_k），"
        "512 维、8 个头：形状不匹配则为 1",
    # table
    "model": "模型",
    "MiniLM": "MiniLM",
    "SmolLM{}": "SmolLM{}",
    "d_model": "d_model",
    "heads (query / key-value)": "头数（查询 / 键值）",
    "d_k (W^Q per head)": "d_k（W^Q 每个头）",
    "d_k / d_model": "d_k / d_model",
    "W^Q width / d_model": "W^Q 宽度 / d_model",
    "W^K width / d_model": "W^K 宽度 / d_model",
    "stacked [W^Q W^K W^V] / d_model": "叠成一体的 [W^Q W^K W^V] / d_model",
    "FFN up / d_model": "前馈上投影 / d_model",
    "{} / {}": "{} / {}",
    "article 000's listing (attnlab MultiHeadAttention)":
        "文章 000 的代码（attnlab MultiHeadAttention）",
    "one head (h = 1, attnlab MultiHeadAttention)": "单头（h = 1，attnlab MultiHeadAttention）",
    # figure
    "W^Q per head": "W^Q 每个头",
    "W^K per head": "W^K 每个头",
    "W^V per head": "W^V 每个头",
    "W^Q": "W^Q",
    "W^K": "W^K",
    "W^V": "W^V",
    "[W^Q W^K W^V]": "[W^Q W^K W^V]",
    "W^O": "W^O",
    "FFN up": "前馈上投影",
    "output width / input width": "输出宽度 / 输入宽度",
    "matrix": "矩阵",
    "Only the stacked Q, K, V and the FFN raise the dimension":
        "只有叠成一体的 Q、K、V 和前馈层升维",
    "no change of dimension": "维度不变",
}

#: The real models read (:func:`attnlab.models.shapes.projection_shapes`).
MODELS = ("minilm", "smollm2")
LABELS = {"minilm": "MiniLM", "smollm2": "SmolLM2"}
#: Article 000's listing: ``embed_dim = 512``, ``num_heads = 8`` (its __main__), N = 10.
ARTICLE_DIMS = (512, 8, 10)

Compose = Callable[[Tensor, Tensor, Tensor], Tensor]


def article_composition(x: Tensor, w: Tensor, w_i: Tensor) -> Tensor:
    """Article 000's formulas composed: Q = XW^Q (its section 1), then QW_i^Q (its head_i)."""
    return (x @ w) @ w_i


def paper_composition(x: Tensor, w: Tensor, w_i: Tensor) -> Tensor:
    """The formula as "Attention Is All You Need" reads it: head_i's Q is the layer's input,
    projected once, XW_i^Q (``w`` is not applied)."""
    return x @ w_i


def shapes_fail(compose: Compose, d_model: int, heads: int, n: int,
                g: torch.Generator) -> float:
    """1.0 when head_i = Attention(compose(X, W^Q, W_i^Q), …) raises a shape error with
    W^Q, W_i^Q of d_model × d_k (d_k = d_model / heads), 0.0 when it runs."""
    d_k = d_model // heads
    x = torch.randn(n, d_model, generator=g, dtype=torch.float64)
    w = [torch.randn(d_model, d_k, generator=g, dtype=torch.float64) for _ in range(6)]
    try:
        scaled_dot_product_attention(compose(x, w[0], w[3]), compose(x, w[1], w[4]),
                                     compose(x, w[2], w[5]))
    except RuntimeError:
        return 1.0
    return 0.0


def module_head_ratio(embed_dim: int, heads: int, n: int, g: torch.Generator) -> float:
    """d_k / d_model of an attnlab MultiHeadAttention, read at its ``hook_q`` (the last axis
    of the queries one forward pass gives) against its input's width."""
    mha = MultiHeadAttention(embed_dim, heads).double()
    got: dict[str, Tensor] = {}
    hook = mha.hook_q.register_forward_hook(lambda m, i, o: got.__setitem__("q", o))
    try:
        x = torch.randn(1, n, embed_dim, generator=g, dtype=torch.float64)
        with torch.no_grad():
            mha(x)
    finally:
        hook.remove()
    return got["q"].shape[-1] / x.shape[-1]


def ratios(s: ModelShapes) -> dict[str, float]:
    """Output width / input width of each kind of matrix of model ``s`` (the largest over its
    layers; the stacked [W^Q W^K W^V] and the FFN: the smallest)."""
    out = {}
    for role, key in (("q", "W^Q"), ("k", "W^K"), ("v", "W^V")):
        out[f"{key} per head"] = max(p.per_head / p.in_dim for p in s.of(role))
        out[key] = max(p.out_dim / p.in_dim for p in s.of(role))
    out["[W^Q W^K W^V]"] = min((q.out_dim + k.out_dim + v.out_dim) / q.in_dim
                               for q, k, v in zip(s.of("q"), s.of("k"), s.of("v")))
    out["W^O"] = max(p.out_dim / p.in_dim for p in s.of("o"))
    out["FFN up"] = min(p.out_dim / p.in_dim for p in s.of("ffn-up"))
    out["d_k"] = float(s.of("q")[0].per_head)
    return out


@dataclass(frozen=True)
class HeadDimensionsMeasurement:
    """The real models' projection widths, article 000's listing and one head (attnlab
    modules), and article 000's head formula beside the paper's."""

    shapes: tuple[ModelShapes, ...]
    per: dict[str, dict[str, float]]  # :func:`ratios` of each model, by name
    listing: float  # d_k / d_model of attnlab MultiHeadAttention(512, 8)
    one_head: float  # the same with one head (the control)
    fails: float  # 1.0 when article 000's head formula raises a shape error
    control_fails: float  # the same with the control composition

    def _over(self, key: str, pick=max) -> float:
        return pick(self.per[s.name][key] for s in self.shapes)

    @property
    def per_head(self) -> float:
        """The headline: each head's slice of W^Q, W^K, W^V, largest d_k / d_model."""
        return max(self.per[s.name][f"{k} per head"] for s in self.shapes
                   for k in ("W^Q", "W^K", "W^V"))

    @property
    def whole(self) -> float:
        return max(self.per[s.name][k] for s in self.shapes for k in ("W^Q", "W^K", "W^V"))

    @property
    def ffn(self) -> float:
        return self._over("FFN up", min)

    @property
    def stacked(self) -> float:
        return self._over("[W^Q W^K W^V]", min)

    @property
    def w_o(self) -> float:
        return self._over("W^O")

    @property
    def dk(self) -> float:
        """d_k / d_model, largest over the models and the listing."""
        return max([self.per[s.name]["d_k"] / s.d_model for s in self.shapes] + [self.listing])


def measure(
    seed: int = 0,
    *,
    models: Sequence[str] = MODELS,
    shapes_fn: Callable[[str], ModelShapes] = projection_shapes,
    compose_fn: Compose = article_composition,
    control_compose_fn: Compose = paper_composition,
) -> HeadDimensionsMeasurement:
    """The shapes and the head formula (arguments: see :func:`run`)."""
    if not models:
        raise ValueError("models must name at least one model, got none")
    shapes = tuple(shapes_fn(name) for name in models)
    per = {s.name: ratios(s) for s in shapes}
    d_model, heads, n = ARTICLE_DIMS
    with seeded(seed) as g:
        listing = module_head_ratio(d_model, heads, n, g)
        one_head = module_head_ratio(d_model, 1, n, g)
        fails = shapes_fail(compose_fn, d_model, heads, n, g)
        control_fails = shapes_fail(control_compose_fn, d_model, heads, n, g)
    return HeadDimensionsMeasurement(shapes, per, listing, one_head, fails, control_fails)


def headline_control(m: HeadDimensionsMeasurement) -> Control:
    """The same reading of the feed-forward up-projection (a layer that does widen)."""
    return Control("the same reading of the feed-forward up-projection d_model → d_ff (a layer "
                   "that does raise the dimension), smallest over the models",
                   "对前馈层上投影 d_model → d_ff（确实升维的层）做同样的读取，取各模型中的最小值",
                   m.ffn)


def checks(m: HeadDimensionsMeasurement) -> list[Check]:
    """No projection widens, d_k is below d_model, the stacked Q, K, V widens, and article
    000's head formula does not run; each beside its control."""
    return [
        check_le("each of W^Q, W^K, W^V as one matrix (all heads): output width / d_model, "
                 "largest over MiniLM and SmolLM2", m.whole, 1.0, id="whole-projection-no-wider",
                 control=headline_control(m)),
        check_le("d_k / d_model: largest over MiniLM, SmolLM2 and article 000's listing "
                 "(512, 8 heads)", m.dk, 0.5, id="dk-below-model-dim",
                 control=Control("one head (h = 1, attnlab MultiHeadAttention, 512 dims), "
                                 "where d_k = d_model",
                                 "单头（h = 1，attnlab MultiHeadAttention，512 维），"
                                 "此时 d_k = d_model", m.one_head)),
        check_ge("[W^Q W^K W^V] stacked into one matrix: output width / d_model, smallest over "
                 "MiniLM and SmolLM2", m.stacked, 1.5, id="stacked-qkv-wider", support=True,
                 control=Control("the same reading of W^O (one d_model → d_model matrix of "
                                 "the same block), largest over the models",
                                 "对 W^O（同一模块中一个 d_model → d_model 的矩阵）做同样的"
                                 "读取，取各模型中的最大值", m.w_o)),
        check_ge("article 000's head_i = Attention(QW_i^Q, KW_i^K, VW_i^V) with its Q = XW^Q "
                 "(N × d_k), at 512 dims and 8 heads: 1 if the shapes do not match", m.fails,
                 1.0, id="article-head-formula-shapes-fail", support=True,
                 control=Control("the same code with Q = K = V = X, the layer's input (as in "
                                 "'Attention Is All You Need'): 1 if it fails",
                                 "同一段代码，但 Q = K = V = X，即该层的输入（如《Attention Is "
                                 "All You Need》）：失败则为 1", m.control_fails)),
    ]


def table(m: HeadDimensionsMeasurement) -> tuple[list[str], list[list]]:
    """One row per model, then article 000's listing and one head."""
    d_model, heads, _ = ARTICLE_DIMS
    rows = [[LABELS.get(s.name, s.name), s.d_model, f"{s.num_heads} / {s.num_kv_heads}",
             int(p["d_k"]), p["d_k"] / s.d_model, p["W^Q"], p["W^K"], p["[W^Q W^K W^V]"],
             p["FFN up"]]
            for s, p in ((s, m.per[s.name]) for s in m.shapes)]
    rows.append(["article 000's listing (attnlab MultiHeadAttention)", d_model,
                 f"{heads} / {heads}", int(m.listing * d_model), m.listing, 1.0, 1.0, 3.0, "—"])
    rows.append(["one head (h = 1, attnlab MultiHeadAttention)", d_model, "1 / 1",
                 int(m.one_head * d_model), m.one_head, 1.0, 1.0, 3.0, "—"])
    return (["model", "d_model", "heads (query / key-value)", "d_k (W^Q per head)",
             "d_k / d_model", "W^Q width / d_model", "W^K width / d_model",
             "stacked [W^Q W^K W^V] / d_model", "FFN up / d_model"], rows)


def captions(m: HeadDimensionsMeasurement) -> tuple[str, str]:
    """The caption in English and in Chinese."""
    d_model, heads, n = ARTICLE_DIMS
    return ("Shapes read from the weight files' headers (MiniLM: its package's safetensors "
            "and config.json; SmolLM2: attnlab's converted cache or the GGUF), every "
            "layer; each attention projection split into heads by the model's own head "
            "count (SmolLM2's W^K, W^V into its 3 key/value heads). The listing's row is "
            "an attnlab MultiHeadAttention(512, 8) read at hook_q; article 000's head "
            f"formula run at N = {n}, d_model = {d_model}, {heads} heads, fp64.",
            "形状读自权重文件的头部信息（MiniLM：其软件包中的 safetensors 与 "
            "config.json；SmolLM2：attnlab 转换后的缓存或 GGUF），逐层读取；每个注意力"
            "投影按模型自己的头数切分（SmolLM2 的 W^K、W^V 按其 3 个键值头切分）。"
            "代码那一行是在 hook_q 处读取的 attnlab MultiHeadAttention(512, 8)；"
            f"文章 000 的头公式在 N = {n}、d_model = {d_model}、{heads} 个头、fp64 下运行。")


def run(
    seed: int = 0,
    *,
    models: Sequence[str] = MODELS,
    shapes_fn: Callable[[str], ModelShapes] = projection_shapes,
    compose_fn: Compose = article_composition,
    control_compose_fn: Compose = paper_composition,
    plot: bool = True,
) -> Result:
    """Read the projections' shapes of ``models`` (``shapes_fn``, default
    :func:`~attnlab.models.shapes.projection_shapes`), the listing's and a one-head
    module's d_k / d_model, and run article 000's head formula with ``compose_fn``.

    Wrong variants: a ``shapes_fn`` whose heads are wider than the model (the headline fails),
    ``compose_fn=paper_composition`` (the article's formula read as the paper's: it runs, so
    the support check fails). Raises :class:`~attnlab.models.ModelNotAvailableError` when a
    model's package is not installed here.
    """
    m = measure(seed, models=models, shapes_fn=shapes_fn, compose_fn=compose_fn,
                control_compose_fn=control_compose_fn)
    caption, caption_zh = captions(m)
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity="each head's slice of W^Q, W^K, W^V: output width d_k / input width d_model, "
                 "largest over MiniLM and SmolLM2 (from their weight files)",
        quantity_zh="W^Q、W^K、W^V 中每个头的切片：输出宽度 d_k / 输入宽度 d_model，取 MiniLM 与 "
                    "SmolLM2 中的最大值（从权重文件读取）",
        measured=m.per_head, expected=1.0, tolerance=0.0, relation="<=", checks=checks(m),
        control=headline_control(m), table=table(m), figure=figure(m) if plot else None,
        caption=caption, caption_zh=caption_zh)


def figure(m: HeadDimensionsMeasurement):
    """Each kind of matrix's output width / input width, per model."""
    per, names = m.per, [s.name for s in m.shapes]
    fig, (ax,) = new_figure(9, 3.6)
    keys = ["W^Q per head", "W^K per head", "W^V per head", "W^Q", "W^K", "W^V",
            "[W^Q W^K W^V]", "W^O", "FFN up"]
    width = 0.8 / len(names)
    colors = ["#3451b2", "#b3261e", "#137a3a"]
    for j, name in enumerate(names):
        ax.bar([i + j * width for i in range(len(keys))], [per[name][k] for k in keys],
               width=width, color=colors[j % len(colors)], label=LABELS.get(name, name))
    ax.axhline(1.0, color="k", ls=":", lw=1, label="no change of dimension")
    ax.set_xticks([i + width * (len(names) - 1) / 2 for i in range(len(keys))])
    ax.set_xticklabels(keys, rotation=30, ha="right", fontsize=8)
    label_axes(ax, "matrix", "output width / input width",
               "Only the stacked Q, K, V and the FFN raise the dimension")
    return fig
