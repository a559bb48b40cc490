"""Build the attnlab course: one source, two notebooks per part (English and Chinese).

Every part is a list of cells. A text cell carries its English and its Chinese; a code
cell is shared by both languages (its only difference is the first cell's ``LANG``, which
the figures and messages follow); an exercise is a prompt, an answer cell the learner
fills in (a working answer is filled in, so that the notebook runs from top to bottom)
and a check cell that asserts the answer. Each exercise also keeps a deliberately wrong
answer (:attr:`Exercise.wrong`, not in the notebooks): the tests run it and require the
check to fail.

    python docs/course/build.py           # (re)write docs/course/en/*.ipynb, zh/*.ipynb
    python docs/course/build.py --check   # exit 1 if a committed notebook differs

It also writes the course's prose as one text into the package
(``src/attnlab/report/course_text.md``, :data:`LONG_TEXT`): the long text the report's
"Long contexts" part traces.

The notebooks are written without outputs; ``tests/course`` executes every one of them.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
LANGS = ("en", "zh")


@dataclass(frozen=True)
class Text:
    """A markdown cell, in English and in Chinese."""

    en: str
    zh: str


@dataclass(frozen=True)
class Code:
    """A code cell, the same in both languages."""

    src: str


@dataclass(frozen=True)
class Exercise:
    """A prompt, the learner's answer cell (filled with a working ``answer``) and a
    ``check`` cell that asserts it; ``wrong`` replaces ``answer`` in the tests, where the
    check must then fail."""

    key: str
    en: str
    zh: str
    answer: str
    check: str
    wrong: str


@dataclass(frozen=True)
class Part:
    number: int
    slug: str
    title_en: str
    title_zh: str
    cells: tuple[Text | Code | Exercise, ...]
    needs_models: bool = False

    @property
    def stem(self) -> str:
        return f"{self.number:02d}_{self.slug}"


_CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")
_PUNCT = re.compile(r"[\u3000-\u303f\uff00-\uffef]")  # CJK punctuation, full-width forms
_BLOCK = re.compile(r"^(\s*[-*>|#]|\s*\d+\.\s|\s*\$\$|\s*```|\s{4})")


def _flow(text: str, lang: str) -> str:
    """Dedent ``text`` and join the lines of each paragraph (the source wraps them at 100
    columns; Chinese lines are joined with no space between them)."""
    lines = textwrap.dedent(text).strip("\n").split("\n")
    out: list[str] = []
    for line in lines:
        prev = out[-1] if out else ""
        joinable = (prev.strip() and line.strip() and not _BLOCK.match(line)
                    and not prev.strip().startswith(("$$", "```", "|", "#"))
                    and not prev.endswith("  "))
        if joinable and out:
            a, b = prev.strip()[-1:], line.strip()[:1]
            glue = "" if lang == "zh" and ((_CJK.match(a) and _CJK.match(b))
                                           or _PUNCT.match(a) or _PUNCT.match(b)) else " "
            out[-1] = prev.rstrip() + glue + line.strip()
        else:
            out.append(line.rstrip())
    return "\n".join(out)


def _code(src: str) -> str:
    return textwrap.dedent(src).strip("\n")


SETUP = '''\
%matplotlib inline
import math  # noqa: F401 (the setup is the same in every part; not every part uses all)
import os

import matplotlib.pyplot as plt
import torch

import attnlab  # noqa: F401
from attnlab.experiments import run  # noqa: F401
from attnlab.experiments.registry import catalog
from attnlab.i18n import COMMON, translate_figure
from attnlab.viz.figures import cjk_font

LANG = "{lang}"  # "en" or "zh": the language of this notebook's figures and messages
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the real models load offline
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
torch.manual_seed(0)
if LANG == "zh" and cjk_font():
    plt.rcParams["font.family"] = ["DejaVu Sans", cjk_font()]
plt.rcParams["figure.dpi"] = 80


def T(en, zh):
    """The text in this notebook's language."""
    return zh if LANG == "zh" else en


def show(result):
    """An experiment's figure, its texts in this notebook's language."""
    if LANG == "zh":
        cat = {{**COMMON, **catalog(result.name)}}
        translate_figure(result.figure, cat, family=["DejaVu Sans", cjk_font() or "sans-serif"])
    return result.figure'''


# ======================================================================================
# 01 vectors and projections
# ======================================================================================

P01 = Part(1, "vectors_and_projections", "Vectors and projections", "向量与投影", (
    Text("""
        Article 000 takes attention apart in four steps. The first is a **linear projection**:
        the input $X \\in \\mathbb{R}^{N \\times d}$ (one row per token) is mapped to
        $Q = XW^Q$, $K = XW^K$, $V = XW^V$. The article's reading of it:
        「将原本在高维空间中的词向量，投影到了三个不同的特征子空间中」 (the word vectors are
        projected into three different feature subspaces). This notebook computes what a
        projection keeps and what it throws away, with attnlab's `SelfAttention`, which is
        the article's own `PureSelfAttention`.
        """, """
        文章 000 把注意力拆成四步，第一步是**线性投影**：输入 $X \\in \\mathbb{R}^{N \\times d}$
        （每个词一行）被映射为 $Q = XW^Q$、$K = XW^K$、$V = XW^V$。文章的解读是
        「将原本在高维空间中的词向量，投影到了三个不同的特征子空间中」。本节用 attnlab 的
        `SelfAttention`（就是文章里的 `PureSelfAttention`）来计算：一次投影保留了什么，又丢掉了什么
        。
        """),
    Code("""
        X = torch.randn(5, 8)  # N = 5 tokens, d = 8
        attn = attnlab.SelfAttention(embed_dim=8, num_heads=2)
        W_q = attn.W_q.weight.detach()  # nn.Linear stores W^Q transposed: (out, in) = (8, 8)
        Q = X @ W_q.T
        print(tuple(Q.shape), torch.allclose(Q, attn.W_q(X)))
        """),
    Text("""
        With two heads, $d_k = d / h = 4$: head $h$ uses rows $4h \\ldots 4h+3$ of `W_q.weight`
        (columns of $W^Q$). Each head therefore sees $X$ through a $4 \\times 8$ matrix. Every
        attnlab module passes its queries through a `HookPoint` named `hook_q`; a forward hook
        on it reads them, shaped (B, H, N, d_k).
        """, """
        有两个头时 $d_k = d / h = 4$：第 $h$ 个头使用 `W_q.weight` 的第 $4h \\ldots 4h+3$ 行
        （即 $W^Q$ 的列）。所以每个头都是透过一个 $4 \\times 8$ 的矩阵来看 $X$。attnlab 的每个模块
        都让 query 经过一个名为 `hook_q` 的 `HookPoint`；在它上面挂一个 forward hook 就能读到它们，
        形状为 (B, H, N, d_k)。
        """),
    Code("""
        d_k = attn.head_dim
        W_q0 = W_q[:d_k]  # head 0's projection, (d_k, d)
        captured = {}
        handle = attn.hook_q.register_forward_hook(lambda mod, inp, out: captured.update(q=out))
        attn(X[None])
        handle.remove()
        q0 = captured["q"][0, 0]  # (N, d_k)
        print(tuple(captured["q"].shape), torch.allclose(q0, X @ W_q0.T, atol=1e-6))
        """),
    Text("""
        **What a projection throws away.** A map $\\mathbb{R}^8 \\to \\mathbb{R}^4$ has a null
        space of dimension at least 4: every direction in it reaches head 0's queries as zero.
        Split any $x$ into its part in the row space of $W$ (what the head sees) and the rest:
        the head's query is the same for $x$ and for its row-space part alone.
        """, """
        **投影丢掉了什么。** 一个 $\\mathbb{R}^8 \\to \\mathbb{R}^4$ 的映射，其零空间至少是 4 维：
        零空间里的任何方向到了第 0 个头的 query 里都变成零。把任意 $x$ 拆成 $W$ 行空间里的部分
        （头看得见的）与其余部分：$x$ 与它的行空间部分得到完全相同的 query。
        """),
    Code("""
        P = torch.linalg.pinv(W_q0) @ W_q0  # the orthogonal projection onto W_q0's row space
        x = torch.randn(8)
        x_seen, x_unseen = P @ x, x - P @ x
        print(T("rank of W_q0:", "W_q0 的秩："), int(torch.linalg.matrix_rank(W_q0)))
        print(T("|W x_unseen| =", "|W x_unseen| ="), float((W_q0 @ x_unseen).norm()))
        print(T("same query:", "query 相同："), torch.allclose(W_q0 @ x, W_q0 @ x_seen, atol=1e-6))
        """),
    Text("""
        The same picture in two dimensions, $d = 2$ and $d_k = 1$: the head keeps only each
        point's coordinate along one direction $w$; points on a line perpendicular to $w$
        become indistinguishable.
        """, """
        二维里的同一幅图，$d = 2$、$d_k = 1$：头只保留每个点沿方向 $w$ 的坐标；落在与 $w$
        垂直的同一条直线上的点变得无法区分。
        """),
    Code("""
        w = torch.tensor([0.8, 0.6])  # a unit direction: W is the 1 x 2 matrix w^T
        pts = torch.randn(12, 2)
        proj = (pts @ w)[:, None] * w  # each point's shadow on the line through w
        fig, ax = plt.subplots(figsize=(4, 4))
        ax.axline((0, 0), (float(w[0]), float(w[1])), color="gray", lw=1)
        for p, s in zip(pts, proj):
            ax.plot([p[0], s[0]], [p[1], s[1]], color="lightgray", lw=1)
        ax.scatter(pts[:, 0], pts[:, 1], label=T("tokens x", "词向量 x"))
        ax.scatter(proj[:, 0], proj[:, 1], marker="x",
                   label=T("what the head keeps", "头保留的部分"))
        ax.set_aspect("equal")
        ax.set_title(T("projection onto span(w)", "投影到 span(w)"))
        ax.legend(loc="lower right")
        plt.show()
        """),
    Text("""
        **Three different subspaces — how different?** The article says the projections let
        a word play different roles 「在三个不同的几何空间中」. The row spaces of head 0's
        $W^Q$, $W^K$, $W^V$ are three 4-dimensional subspaces of $\\mathbb{R}^8$; their
        *principal angles* (notebook 04 builds them) say how far apart they are. At random
        initialisation they are neither equal nor orthogonal.
        """, """
        **三个不同的子空间——差别有多大？** 文章说投影让词「在三个不同的几何空间中」扮演不同角色。
        第 0 个头的 $W^Q$、$W^K$、$W^V$ 的行空间是 $\\mathbb{R}^8$ 中的三个 4 维子空间，它们之间的
        *主角*（第 04 节会构造）说明它们相距多远。在随机初始化时，它们既不相同，也不正交。
        """),
    Code("""
        def principal_angles(A, B):
            qa, _ = torch.linalg.qr(A.T)
            qb, _ = torch.linalg.qr(B.T)
            return torch.rad2deg(torch.acos(torch.linalg.svdvals(qa.T @ qb).clamp(-1, 1)))

        W_k0, W_v0 = attn.W_k.weight[:d_k], attn.W_v.weight[:d_k]
        print("Q-K:", principal_angles(W_q0, W_k0).round().tolist())
        print("Q-V:", principal_angles(W_q0, W_v0).round().tolist())
        """),
    Exercise("ex1", """
        **Exercise 1.** Compute head 1's queries `ex1_q1` (N × d_k) from `X` and `W_q` by
        hand (which rows of `W_q` belong to head 1?).
        """, """
        **练习 1.** 用 `X` 和 `W_q` 手工算出第 1 个头的 query `ex1_q1`（N × d_k）。
        （`W_q` 的哪几行属于第 1 个头？）
        """,
        answer="ex1_q1 = X @ W_q[d_k:2 * d_k].T",
        check="""
            assert tuple(ex1_q1.shape) == (5, d_k), T("shape should be (N, d_k)",
                                                      "形状应为 (N, d_k)")
            assert torch.allclose(ex1_q1, captured["q"][0, 1], atol=1e-6), T(
                "not head 1's queries (compare attn.hook_q)",
                "不是第 1 个头的 query（对照 attn.hook_q）")
            print(T("right: these are head 1's queries", "正确：这就是第 1 个头的 query"))
            """,
        wrong="ex1_q1 = X @ W_q[:d_k].T"),
    Exercise("ex2", """
        **Exercise 2.** Find a vector `ex2_x` (length 8, not zero) that head 0's queries
        cannot see: `W_q0 @ ex2_x` = 0. Hint: `torch.linalg.svd`.
        """, """
        **练习 2.** 找一个第 0 个头的 query 看不见的向量 `ex2_x`（长度 8，非零）：
        `W_q0 @ ex2_x` = 0。提示：`torch.linalg.svd`。
        """,
        answer="ex2_x = torch.linalg.svd(W_q0)[2][-1]  # a right singular vector beyond the rank",
        check="""
            assert ex2_x.shape == (8,) and float(ex2_x.norm()) > 1e-3, T(
                "give a non-zero vector of length 8", "请给出长度为 8 的非零向量")
            assert float((W_q0 @ ex2_x).norm()) < 1e-5 * float(ex2_x.norm()), T(
                "W_q0 @ ex2_x is not zero", "W_q0 @ ex2_x 不为零")
            print(T("right: ex2_x lies in the null space", "正确：ex2_x 在零空间里"))
            """,
        wrong="ex2_x = torch.ones(8)"),
    Exercise("ex3", """
        **Exercise 3.** Write the orthogonal projection `ex3_P` (8 × 8) onto the row space
        of `W_q0` with the formula $P = W^T (W W^T)^{-1} W$ (no `pinv`).
        """, """
        **练习 3.** 用公式 $P = W^T (W W^T)^{-1} W$（不用 `pinv`）写出到 `W_q0` 行空间的正交投影
        `ex3_P`（8 × 8）。
        """,
        answer="ex3_P = W_q0.T @ torch.linalg.inv(W_q0 @ W_q0.T) @ W_q0",
        check="""
            assert tuple(ex3_P.shape) == (8, 8)
            assert torch.allclose(ex3_P, ex3_P.T, atol=1e-5), T("P must be symmetric", "P 必须对称")
            assert torch.allclose(ex3_P @ ex3_P, ex3_P, atol=1e-4), T("P @ P must equal P",
                                                                      "P @ P 必须等于 P")
            assert torch.allclose(W_q0 @ ex3_P, W_q0, atol=1e-4), T(
                "P must keep the row space", "P 必须保持行空间不变")
            assert abs(float(ex3_P.trace()) - d_k) < 1e-3, T("trace must be the rank",
                                                             "迹必须等于秩")
            print(T("right: an orthogonal projection of rank", "正确：秩为"), d_k,
                  T("", "的正交投影"))
            """,
        wrong="ex3_P = W_q0.T @ W_q0"),
))

# ======================================================================================
# 02 the dot product and the sqrt(d_k) argument
# ======================================================================================

P02 = Part(2, "dot_product_and_scaling", "The dot product and the √d_k argument",
           "点积与 √d_k 的论证", (
    Text("""
        The second step is $QK^T$: entry $(i, j)$ is the dot product of query $i$ with key
        $j$, and $\\vec a \\cdot \\vec b = \\|\\vec a\\| \\|\\vec b\\| \\cos\\theta$. Article 000:
        「抛开向量长度不看，点积的核心意义在于衡量两个向量在方向上的相似度」. The third step
        divides by $\\sqrt{d_k}$; both articles justify it with a variance argument. We check
        the identity, then the argument, then what happens without the scale.
        """, """
        第二步是 $QK^T$：第 $(i, j)$ 个元素是第 $i$ 个 query 与第 $j$ 个 key 的点积，而
        $\\vec a \\cdot \\vec b = \\|\\vec a\\| \\|\\vec b\\| \\cos\\theta$。文章 000 说：
        「抛开向量长度不看，点积的核心意义在于衡量两个向量在方向上的相似度」。第三步除以
        $\\sqrt{d_k}$，两篇文章都用方差来论证它。我们先验证这个恒等式，再验证论证本身，
        最后看看不缩放会发生什么。
        """),
    Code("""
        q, k = torch.randn(2, 64, dtype=torch.float64)
        cos = torch.nn.functional.cosine_similarity(q, k, dim=0)
        print(float(q @ k), float(q.norm() * k.norm() * cos))
        r = run("dot-product-geometry")
        print(r.quantity, "=", r.measured, "->", r.verdict)
        show(r)
        """),
    Text("""
        **But the length is not set aside.** The score is $\\|q\\|\\|k\\|\\cos\\theta$: a long
        key at a wider angle can outscore a short key that points the same way as the query.
        Attention compares dot products, not angles.
        """, """
        **但长度并没有被“抛开”。** 分数是 $\\|q\\|\\|k\\|\\cos\\theta$：一个较长但夹角较大的 key，
        可以胜过一个方向与 query 更一致的短 key。注意力比较的是点积，而不是夹角。
        """),
    Code("""
        def at(deg, length):
            rad = math.radians(deg)
            return length * torch.tensor([math.cos(rad), math.sin(rad)])

        q2 = at(0, 1.0)
        k_near, k_far = at(20, 1.0), at(60, 3.0)
        print(T("20 deg, |k| = 1:", "夹角 20°，|k| = 1："), round(float(q2 @ k_near), 3))
        print(T("60 deg, |k| = 3:", "夹角 60°，|k| = 3："), round(float(q2 @ k_far), 3))
        """),
    Text("""
        **The variance argument.** If the components of $q$ and $k$ are independent, with
        mean 0 and variance 1, then $q \\cdot k = \\sum_{i=1}^{d_k} q_i k_i$ is a sum of
        $d_k$ independent terms of variance 1, so $\\mathrm{Var}(q \\cdot k) = d_k$, and
        $\\mathrm{Var}(q \\cdot k / \\sqrt{d_k}) = 1$. Measured:
        """, """
        **方差论证。** 若 $q$ 与 $k$ 的各分量相互独立、均值为 0、方差为 1，则
        $q \\cdot k = \\sum_{i=1}^{d_k} q_i k_i$ 是 $d_k$ 个方差为 1 的独立项之和，所以
        $\\mathrm{Var}(q \\cdot k) = d_k$，
        而 $\\mathrm{Var}(q \\cdot k / \\sqrt{d_k}) = 1$。实测如下：
        """),
    Code("""
        dims = [4, 16, 64, 256, 1024]
        g = torch.Generator().manual_seed(0)
        raw, scaled = [], []
        for d in dims:
            s = (torch.randn(4000, d, generator=g) * torch.randn(4000, d, generator=g)).sum(-1)
            raw.append(float(s.var()))
            scaled.append(float((s / math.sqrt(d)).var()))
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.loglog(dims, raw, "o-", label="Var(q·k)")
        ax.loglog(dims, scaled, "s-", label="Var(q·k/√d_k)")
        ax.loglog(dims, dims, "k:", label="d_k")
        ax.set_xlabel("d_k")
        ax.set_title(T("variance of the scores", "分数的方差"))
        ax.legend()
        plt.show()
        """),
    Text("""
        attnlab's experiment `qk-variance` makes the same measurement with many more pairs,
        and also states the argument's **condition**: with a mean $\\mu \\neq 0$ the variance
        is $d_k(1 + 2\\mu^2)$, and dividing by $\\sqrt{d_k}$ no longer brings it to 1.
        """, """
        attnlab 的实验 `qk-variance` 用多得多的样本做同样的测量，并指出这个论证的**前提**：
        若均值 $\\mu \\neq 0$，方差是 $d_k(1 + 2\\mu^2)$，除以 $\\sqrt{d_k}$ 就不再得到 1。
        """),
    Code("""
        r = run("qk-variance", pairs=65536, dims=(16, 64, 256), mean_blocks=8, real_model=None)
        print(r.quantity, "=", round(r.measured, 4), "->", r.verdict)
        show(r)
        """),
    Text("""
        **Without the scale, softmax saturates.** Article 000 says the gradient then
        **vanishes**; article 001 calls it 「梯度爆炸问题」 (gradient explosion). The
        experiment `softmax-saturation` measures the mean largest weight and the size of the
        softmax's Jacobian as $d_k$ grows: the rows become one-hot and the gradient vanishes
        — article 000 is right, article 001's word is not.
        """, """
        **不缩放，softmax 就会饱和。** 文章 000 说此时梯度会**消失**；文章 001 称之为
        「梯度爆炸问题」。实验 `softmax-saturation` 测量随着 $d_k$ 增大时每行最大权重的均值与
        softmax 雅可比矩阵的大小：各行趋于 one-hot，梯度消失——文章 000 说得对，文章 001 的说法不对。
        """),
    Code("""
        r = run("softmax-saturation", rows=64)
        print(r.quantity, "=", round(r.measured, 3), "->", r.verdict)
        show(r)
        """),
    Exercise("ex1", """
        **Exercise 1.** If every component of $q$ and $k$ has mean 0 and variance $\\sigma^2$
        (still independent), what is $\\mathrm{Var}(q \\cdot k)$? Fill in the function.
        """, """
        **练习 1.** 若 $q$ 与 $k$ 的每个分量均值为 0、方差为 $\\sigma^2$（仍然独立），
        $\\mathrm{Var}(q \\cdot k)$ 是多少？补全这个函数。
        """,
        answer="""
            def ex1_variance(d_k, s2):
                return d_k * s2**2
            """,
        check="""
            g = torch.Generator().manual_seed(1)
            for d, s2 in [(32, 2.0), (8, 0.5)]:
                qs = torch.randn(50_000, d, generator=g) * math.sqrt(s2)
                ks = torch.randn(50_000, d, generator=g) * math.sqrt(s2)
                measured = float((qs * ks).sum(-1).var())
                assert abs(ex1_variance(d, s2) / measured - 1) < 0.05, T(
                    f"d_k={d}, s2={s2}: measured {measured:.3g}, "
                    f"you said {ex1_variance(d, s2):.3g}",
                    f"d_k={d}, s2={s2}：实测 {measured:.3g}，你的答案 {ex1_variance(d, s2):.3g}")
            print(T("right", "正确"))
            """,
        wrong="""
            def ex1_variance(d_k, s2):
                return d_k * s2
            """),
    Exercise("ex2", """
        **Exercise 2.** Which factor `ex2_scale(d_k, s2)` brings the scores of Exercise 1
        back to variance 1?
        """, """
        **练习 2.** 哪个系数 `ex2_scale(d_k, s2)` 能把练习 1 中分数的方差拉回 1？
        """,
        answer="""
            def ex2_scale(d_k, s2):
                return 1 / (s2 * math.sqrt(d_k))
            """,
        check="""
            g = torch.Generator().manual_seed(2)
            for d, s2 in [(64, 3.0), (16, 0.25)]:
                qs = torch.randn(50_000, d, generator=g) * math.sqrt(s2)
                ks = torch.randn(50_000, d, generator=g) * math.sqrt(s2)
                v = float((ex2_scale(d, s2) * (qs * ks).sum(-1)).var())
                assert abs(v - 1) < 0.05, T(f"d_k={d}, s2={s2}: variance {v:.3g}, not 1",
                                            f"d_k={d}, s2={s2}：方差为 {v:.3g}，不是 1")
            print(T("right", "正确"))
            """,
        wrong="""
            def ex2_scale(d_k, s2):
                return 1 / math.sqrt(d_k)
            """),
    Exercise("ex3", """
        **Exercise 3.** Compute the angle `ex3_deg` (in degrees) between `q` and `k` (the
        64-dimensional pair at the top) from their dot product and norms.
        """, """
        **练习 3.** 用点积与范数算出 `q` 和 `k`（本节开头那对 64 维向量）之间的夹角
        `ex3_deg`（单位：度）。
        """,
        answer="ex3_deg = math.degrees(math.acos(float(q @ k / (q.norm() * k.norm()))))",
        check="""
            along = float(k @ q) / float(q.norm())  # k's component along q
            across = float((k - along * q / q.norm()).norm())  # and across it
            assert abs(ex3_deg - math.degrees(math.atan2(across, along))) < 1e-6, T(
                "not the angle between q and k", "这不是 q 与 k 的夹角")
            print(T("right:", "正确："), round(ex3_deg, 2))
            """,
        wrong="ex3_deg = math.degrees(math.acos(max(-1.0, min(1.0, float(q @ k) / 64))))"),
))

# ======================================================================================
# 03 softmax as a convex combination
# ======================================================================================

P03 = Part(3, "softmax_convex_combination", "Softmax as a convex combination",
           "softmax 与凸组合", (
    Text("""
        The fourth step: $A = \\mathrm{softmax}(QK^T/\\sqrt{d_k})$, then
        $\\mathrm{Output}_i = \\sum_j A_{ij} V_j$. Every row of $A$ is non-negative and sums to
        1, so each output is 「一个向量的凸组合」 of the values, a 「加权重心计算」 (a weighted
        centre of mass), as article 000 puts it. attnlab returns the weights on request.
        """, """
        第四步：$A = \\mathrm{softmax}(QK^T/\\sqrt{d_k})$，然后
        $\\mathrm{Output}_i = \\sum_j A_{ij} V_j$。$A$ 的每一行非负且和为 1，所以每个输出都是
        value 的「一个向量的凸组合」，即文章 000 所说的「加权重心计算」。attnlab 可以按需返回权重。
        """),
    Code("""
        q = torch.randn(1, 1, 4, 8)  # (B, H, Lq, d)
        k = torch.randn(1, 1, 6, 8)  # (B, H, Lk, d)
        v = torch.randn(1, 1, 6, 3)  # (B, H, Lk, dv)
        out, w = attnlab.scaled_dot_product_attention(q, k, v, return_weights=True)
        print(T("rows sum to 1:", "每行和为 1："), torch.allclose(w.sum(-1), torch.ones(1, 1, 4)))
        print(T("non-negative:", "非负："), bool((w >= 0).all()))
        print(T("out = A V:", "out = A V："), torch.allclose(out, w @ v, atol=1e-6))
        lo, hi = v.min(dim=-2, keepdim=True).values, v.max(dim=-2, keepdim=True).values
        print(T("inside [min V, max V]:", "落在 [min V, max V] 内："),
              bool(((out >= lo - 1e-6) & (out <= hi + 1e-6)).all()))
        """),
    Text("""
        The experiment `convex-combination` measures the largest distance of any output
        outside the box of its values over many random inputs:
        """, """
        实验 `convex-combination` 在大量随机输入上测量输出落在 value 包围盒之外的最大距离：
        """),
    Code("""
        r = run("convex-combination")
        print(r.quantity, "=", r.measured, "->", r.verdict)
        show(r)
        """),
    Text("""
        **The scale moves the output inside the hull.** Take five values on a circle (a
        convex pentagon) and one query, and multiply the scores by a factor $t$. As $t \\to 0$
        the weights become uniform and the output goes to the centroid; as $t$ grows the
        largest score wins and the output goes to one vertex. It never leaves the pentagon.
        """, """
        **缩放让输出在凸包内移动。** 取圆上的五个 value（一个凸五边形）和一个 query，把分数乘以
        系数 $t$。$t \\to 0$ 时权重趋于均匀，输出趋向重心；$t$ 增大时最大的分数胜出，输出趋向某个
        顶点。它始终不离开这个五边形。
        """),
    Code("""
        angles = torch.arange(5) * 2 * math.pi / 5
        V = torch.stack([angles.cos(), angles.sin()], dim=-1)  # (5, 2)
        K = torch.randn(5, 8)
        qv = torch.randn(8)
        ts = torch.logspace(-2, 1.5, 40)
        path = torch.stack([attnlab.scaled_dot_product_attention(
            qv[None, None, None], K[None, None], V[None, None], scale=float(t))[0, 0, 0]
            for t in ts])
        fig, ax = plt.subplots(figsize=(4, 4))
        ring = torch.cat([V, V[:1]])
        ax.plot(ring[:, 0], ring[:, 1], "k-", lw=1)
        ax.scatter(V[:, 0], V[:, 1], color="k", label=T("values V_j", "value V_j"))
        ax.plot(path[:, 0], path[:, 1], "o-", ms=3, label=T("output as t grows", "t 增大时的输出"))
        ax.set_aspect("equal")
        ax.set_title(T("outputs stay in the convex hull", "输出始终在凸包内"))
        ax.legend(loc="lower left", fontsize=8)
        plt.show()
        """),
    Text("""
        attnlab also returns each row's **log-sum-exp** $\\log \\sum_j e^{s_{ij}}$: any weight
        is then one exponential away, $A_{ij} = e^{s_{ij} - \\mathrm{lse}_i}$, which is how a
        trace of a long input keeps every weight exactly in O(N·d) memory. Softmax does not
        change when a constant is added to a row, so a row's scores can be shifted by their
        maximum before exponentiating (never overflowing).
        """, """
        attnlab 还能返回每一行的 **log-sum-exp** $\\log \\sum_j e^{s_{ij}}$：这样任何一个权重都只差
        一次指数运算，$A_{ij} = e^{s_{ij} - \\mathrm{lse}_i}$——长输入的 trace 正是这样以
        O(N·d) 的内存
        精确保留每一个权重的。给一行分数加上同一个常数不会改变 softmax，所以可以先减去最大值再取
        指数（永不溢出）。
        """),
    Code("""
        out2, lse = attnlab.scaled_dot_product_attention(q, k, v, return_lse=True)
        scores = q @ k.transpose(-2, -1) / math.sqrt(8)
        print(torch.allclose(torch.exp(scores - lse[..., None]), w, atol=1e-6))
        print(torch.allclose(torch.softmax(scores + 100.0, dim=-1), w, atol=1e-6))
        """),
    Exercise("ex1", """
        **Exercise 1.** When every score of a row is equal (for instance $q = 0$), what is the
        output? Write it as `ex1_out` from `v` alone.
        """, """
        **练习 1.** 当一行的所有分数都相等时（例如 $q = 0$），输出是什么？只用 `v` 把它写成
        `ex1_out`。
        """,
        answer="ex1_out = v.mean(dim=-2)  # the centroid of the values",
        check="""
            zero_q = torch.zeros(1, 1, 1, 8)
            expected = attnlab.scaled_dot_product_attention(zero_q, k, v)[:, :, 0]
            assert ex1_out.shape == expected.shape, T("shape should be (1, 1, dv)",
                                                      "形状应为 (1, 1, dv)")
            assert torch.allclose(ex1_out, expected, atol=1e-6), T(
                "not what attention gives for q = 0", "与 q = 0 时注意力的输出不符")
            print(T("right: uniform weights give the centroid", "正确：均匀权重给出重心"))
            """,
        wrong="ex1_out = v.sum(dim=-2)"),
    Exercise("ex2", """
        **Exercise 2.** Any point inside a triangle is a convex combination of its corners.
        Find the weights `ex2_w` (3 numbers, non-negative, summing to 1) with
        `ex2_w @ V3 == y`. The check then makes attention produce `y` from the scores
        $\\log w$.
        """, """
        **练习 2.** 三角形内的任意一点都是三个顶点的凸组合。求权重 `ex2_w`（3 个非负数，和为 1），
        使 `ex2_w @ V3 == y`。检查单元格随后会用分数 $\\log w$ 让注意力算出 `y`。
        """,
        answer="""
            V3 = torch.tensor([[0.0, 0.0], [4.0, 0.0], [1.0, 3.0]], dtype=torch.float64)
            y = torch.tensor([1.5, 1.0], dtype=torch.float64)
            A = torch.cat([V3.T, torch.ones(1, 3, dtype=torch.float64)])  # [x; y; 1] per corner
            ex2_w = torch.linalg.solve(A, torch.cat([y, torch.ones(1, dtype=torch.float64)]))
            """,
        check="""
            assert ex2_w.shape == (3,) and bool((ex2_w >= -1e-12).all()), T(
                "weights must be 3 non-negative numbers", "权重必须是 3 个非负数")
            assert abs(float(ex2_w.sum()) - 1) < 1e-9, T("weights must sum to 1",
                                                         "权重之和必须为 1")
            assert torch.allclose(ex2_w @ V3, y), T("ex2_w @ V3 is not y", "ex2_w @ V3 不等于 y")
            zero = torch.zeros(1, 1, 1, 2, dtype=torch.float64)
            out_y = attnlab.scaled_dot_product_attention(
                zero, torch.zeros(1, 1, 3, 2, dtype=torch.float64), V3[None, None],
                ex2_w.clamp_min(1e-300).log()[None, None, None])
            assert torch.allclose(out_y[0, 0, 0], y), "softmax(log w) V != y"
            print(T("right: attention with scores log w outputs y",
                    "正确：分数取 log w 时注意力输出 y"))
            """,
        wrong="""
            V3 = torch.tensor([[0.0, 0.0], [4.0, 0.0], [1.0, 3.0]], dtype=torch.float64)
            y = torch.tensor([1.5, 1.0], dtype=torch.float64)
            ex2_w = torch.full((3,), 1 / 3, dtype=torch.float64)
            """),
    Exercise("ex3", """
        **Exercise 3.** Compute each row's log-sum-exp `ex3_lse` from `scores` (above), in
        a way that cannot overflow, and compare it with attnlab's `lse`.
        """, """
        **练习 3.** 由上面的 `scores` 算出每一行的 log-sum-exp `ex3_lse`，要求不会溢出，
        并与 attnlab 的 `lse` 比较。
        """,
        answer="""
            m = scores.amax(dim=-1, keepdim=True)
            ex3_lse = (m + torch.log(torch.exp(scores - m).sum(dim=-1, keepdim=True)))[..., 0]
            """,
        check="""
            assert ex3_lse.shape == lse.shape, T("one number per row", "每行一个数")
            assert torch.allclose(ex3_lse, lse, atol=1e-5), T("not the log-sum-exp",
                                                              "这不是 log-sum-exp")
            print(T("right", "正确"))
            """,
        wrong="ex3_lse = scores.amax(dim=-1)"),
))

# ======================================================================================
# 04 heads as subspaces
# ======================================================================================

P04 = Part(4, "heads_as_subspaces", "Heads as subspaces", "多头与子空间", (
    Text("""
        Multi-head attention splits $d_{model}$ into $h$ heads of $d_k = d_{model}/h$. Article
        000 reads this as 「将高维语义空间正交分解为多个低秩子空间」 (an orthogonal
        decomposition into low-rank subspaces) and says training drives the heads apart
        (「梯度下降会驱使它们收敛到不同的表征子空间」). Here we measure the subspaces of
        attnlab's `MultiHeadAttention` (one fused `qkv_proj`, as in article 001): how they
        sit, what they cost and how their outputs are combined.
        """, """
        多头注意力把 $d_{model}$ 切成 $h$ 个 $d_k = d_{model}/h$ 维的头。文章 000 把它解读为
        「将高维语义空间正交分解为多个低秩子空间」，并说训练会让各头分开（「梯度下降会驱使它们收敛到
        不同的表征子空间」）。这里我们测量 attnlab 的 `MultiHeadAttention`（与文章 001 一样用一个融
        合的
        `qkv_proj`）中的子空间：它们如何分布、代价多少、各头的输出如何合并。
        """),
    Code("""
        E, H = 32, 4
        mha = attnlab.MultiHeadAttention(embed_dim=E, num_heads=H)
        torch.nn.init.normal_(mha.qkv_proj.bias)  # non-zero biases, so that they matter below
        d = mha.head_dim
        W = mha.qkv_proj.weight  # (3E, E): rows [W_q; W_k; W_v], each (E, E)
        print(tuple(W.shape), "head_dim =", d)
        """),
    Text("""
        **Principal angles.** Two $d$-dimensional subspaces are compared by their principal
        angles: with orthonormal bases $U_a$, $U_b$ (columns), the cosines are the singular
        values of $U_a^T U_b$. Orthogonal subspaces have every angle at 90°. The map below is
        the mean angle between the query subspaces of every pair of heads.
        """, """
        **主角。** 两个 $d$ 维子空间用它们之间的主角来比较：取标准正交基 $U_a$、$U_b$（按列），
        $U_a^T U_b$ 的奇异值就是各主角的余弦。正交的子空间所有主角都是 90°。下图是每两个头的 query
        子空间之间的平均主角。
        """),
    Code("""
        def principal_angles(A, B):
            qa, _ = torch.linalg.qr(A.T)
            qb, _ = torch.linalg.qr(B.T)
            return torch.rad2deg(torch.acos(torch.linalg.svdvals(qa.T @ qb).clamp(-1, 1)))

        def mean_angles(Wq):
            heads = [Wq[h * d:(h + 1) * d] for h in range(H)]
            return torch.tensor([[float(principal_angles(a, b).mean()) for b in heads]
                                 for a in heads])

        ang = mean_angles(W[:E].detach())
        ortho = torch.nn.init.orthogonal_(torch.empty(E, E))  # an orthogonal W_q, for contrast
        fig, axes = plt.subplots(1, 2, figsize=(7, 3), layout="constrained")
        for ax, a, title in [(axes[0], ang, T("xavier init (attnlab)", "xavier 初始化（attnlab）")),
                             (axes[1], mean_angles(ortho), T("orthogonal W_q", "正交的 W_q"))]:
            im = ax.imshow(a, vmin=0, vmax=90, cmap="viridis")
            ax.set_title(title)
            ax.set_xlabel(T("head", "头"))
            ax.set_ylabel(T("head", "头"))
        fig.colorbar(im, ax=axes, label=T("mean principal angle (deg)", "平均主角（度）"))
        off = ang[~torch.eye(H, dtype=torch.bool)]
        print(T("between different heads:", "不同头之间："), round(float(off.mean()), 1), "deg")
        """),
    Text("""
        At initialisation the heads' subspaces are far from orthogonal; an orthogonal $W_q$
        would make them so, but nothing in attention asks for it. attnlab's report trains
        small models and measures the angles before and after: they *fall* (by about 11° on
        average), so this claim of the article does not hold (`attnlab claims --only
        000-gradient-descent-diversifies`). What does hold is the cost: $h$ heads of
        $d_{model}/h$ dimensions have exactly the parameters of one head of $d_{model}$.
        """, """
        初始化时各头的子空间远非正交；正交的 $W_q$ 可以让它们正交，但注意力本身并不要求这一点。
        attnlab 的报告训练小模型并测量训练前后的主角：主角是*变小*的（平均约 11°），所以文章的这一
        论断不成立（`attnlab claims --only 000-gradient-descent-diversifies`）。成立的是代价：$h$ 个
        $d_{model}/h$ 维的头与一个 $d_{model}$ 维的头参数量完全相同。
        """),
    Code("""
        for h in (1, 2, 4, 8):
            n = sum(p.numel() for p in attnlab.MultiHeadAttention(E, h).parameters())
            print(f"h = {h}: {n} " + T("parameters", "个参数"))
        """),
    Text("""
        **Concat, then $W^O$.** $\\mathrm{Concat}(\\mathrm{head}_1, \\ldots, \\mathrm{head}_h) W^O$
        is the same as $\\sum_h \\mathrm{head}_h W^O_h$, where $W^O_h$ is the block of $W^O$
        that meets head $h$: each head writes into the output through its own slice, and the
        output is their sum. `hook_context` gives each head's output before `out_proj`.
        """, """
        **先拼接，再乘 $W^O$。** $\\mathrm{Concat}(\\mathrm{head}_1, \\ldots, \\mathrm{head}_h) W^O$
        等于 $\\sum_h \\mathrm{head}_h W^O_h$，其中 $W^O_h$ 是 $W^O$ 中与第 $h$ 个头相乘的那一块：
        每个头通过自己的切片写入输出，输出是它们的和。`hook_context` 给出 `out_proj` 之前每个头的输
        出。
        """),
    Code("""
        x = torch.randn(1, 6, E)
        seen = {}
        hooks = [mha.hook_k.register_forward_hook(lambda m, i, o: seen.update(k=o)),
                 mha.hook_context.register_forward_hook(lambda m, i, o: seen.update(ctx=o))]
        out, _ = mha(x)
        for hk in hooks:
            hk.remove()
        ctx = seen["ctx"]  # (B, H, N, d)
        merged = mha.out_proj(ctx.transpose(1, 2).reshape(1, 6, E))
        print(tuple(ctx.shape), torch.allclose(out, merged,
                                               atol=1e-6))
        """),
    Exercise("ex1", """
        **Exercise 1.** Slice head 2's key projection out of the fused `qkv_proj`: its weight
        `ex1_Wk2` (d × E) and bias `ex1_bk2` (d,).
        """, """
        **练习 1.** 从融合的 `qkv_proj` 中切出第 2 个头的 key 投影：权重 `ex1_Wk2`（d × E）与偏置
        `ex1_bk2`（d,）。
        """,
        answer="""
            ex1_Wk2 = mha.qkv_proj.weight[E + 2 * d:E + 3 * d]
            ex1_bk2 = mha.qkv_proj.bias[E + 2 * d:E + 3 * d]
            """,
        check="""
            assert tuple(ex1_Wk2.shape) == (d, E) and tuple(ex1_bk2.shape) == (d,)
            assert torch.allclose(x[0] @ ex1_Wk2.T + ex1_bk2, seen["k"][0, 2], atol=1e-5), T(
                "these are not head 2's keys (see hook_k)", "这不是第 2 个头的 key（对照 hook_k）")
            print(T("right", "正确"))
            """,
        wrong="""
            ex1_Wk2 = mha.qkv_proj.weight[2 * d:3 * d]
            ex1_bk2 = mha.qkv_proj.bias[2 * d:3 * d]
            """),
    Exercise("ex2", """
        **Exercise 2.** Write `ex2_angles(A, B)`: the principal angles in degrees, ascending,
        between the row spaces of `A` and `B`, whose rows need not be orthonormal.
        """, """
        **练习 2.** 写出 `ex2_angles(A, B)`：`A` 与 `B` 的行空间之间的主角（单位：度，升序），
        它们的行不一定是标准正交的。
        """,
        answer="""
            def ex2_angles(A, B):
                qa, _ = torch.linalg.qr(A.T)
                qb, _ = torch.linalg.qr(B.T)
                cos = torch.linalg.svdvals(qa.T @ qb).clamp(-1, 1)
                return torch.rad2deg(torch.acos(cos)).sort().values
            """,
        check="""
            t = 0.6  # span(e1, e2) against span(e1, cos t e2 + sin t e3), both given skewed
            e = torch.eye(4, dtype=torch.float64)
            u = math.cos(t) * e[1] + math.sin(t) * e[2]
            A = torch.stack([3 * e[0] + e[1], 0.5 * e[1]])
            B = torch.stack([2 * e[0] + u, 3 * u])
            got = ex2_angles(A, B)
            assert torch.allclose(got, torch.tensor([0.0, math.degrees(t)], dtype=torch.float64),
                                  atol=1e-6), T(f"got {got.tolist()}", f"得到 {got.tolist()}")
            print(T("right", "正确"))
            """,
        wrong="""
            def ex2_angles(A, B):
                cos = torch.linalg.svdvals(A @ B.T).clamp(-1, 1)
                return torch.rad2deg(torch.acos(cos)).sort().values
            """),
    Exercise("ex3", """
        **Exercise 3.** Write each head's contribution to `out` (before the bias of
        `out_proj`) as a list `ex3_parts` of H tensors (N × E).
        """, """
        **练习 3.** 把每个头对 `out` 的贡献（不含 `out_proj` 的偏置）写成一个由 H 个张量（N × E）
        组成的列表 `ex3_parts`。
        """,
        answer="""
            W_O = mha.out_proj.weight  # (E, E): columns h*d:(h+1)*d meet head h
            ex3_parts = [ctx[0, h] @ W_O[:, h * d:(h + 1) * d].T for h in range(H)]
            """,
        check="""
            assert len(ex3_parts) == H, T("one part per head", "每个头一项")
            total = sum(ex3_parts) + mha.out_proj.bias
            assert torch.allclose(total, out[0], atol=1e-5), T("the parts do not add up to out",
                                                               "各项之和不等于 out")
            alone = ctx.clone()
            alone[:, 1:] = 0  # head 0 alone
            only0 = mha.out_proj(alone.transpose(1, 2).reshape(1, 6, E))[0] - mha.out_proj.bias
            assert torch.allclose(ex3_parts[0], only0, atol=1e-5)
            print(T("right: the output is a sum over heads", "正确：输出是各头之和"))
            """,
        wrong="""
            W_O = mha.out_proj.weight
            ex3_parts = [ctx[0, h] @ W_O[:, h * d:(h + 1) * d].T for h in range(H - 1)]
            """),
))

# ======================================================================================
# 05 attention as a graph and as kernel smoothing
# ======================================================================================

P05 = Part(5, "graph_and_kernel_smoothing", "Attention as a graph and as kernel smoothing",
           "注意力：动态图与核平滑", (
    Text("""
        Article 000 ends with two abstract readings. First, a graph: tokens are nodes and
        $QK^T$ computes the edge weights, on a fully connected graph whose weights depend on
        the input — 「动态邻居聚合」 (dynamic neighbour aggregation). Second, Nadaraya–Watson
        kernel regression, $\\hat y(x) = \\sum_i K(x, x_i) y_i / \\sum_j K(x, x_j)$: attention is
        「一个可学习的核平滑方法」.
        """, """
        文章 000 最后给出两种抽象的解读。其一是图：词是节点，$QK^T$ 计算边的权重——这是一张全连接图，
        其权重随输入而变，即「动态邻居聚合」。其二是 Nadaraya–Watson 核回归
        $\\hat y(x) = \\sum_i K(x, x_i) y_i / \\sum_j K(x, x_j)$：
        注意力是「一个可学习的核平滑方法」。
        """),
    Code("""
        tokens = "the cat sat on the mat".split()
        emb = {t: 2 * torch.randn(16) for t in sorted(set(tokens))}  # word -> embedding
        attn = attnlab.SelfAttention(embed_dim=16, num_heads=1)
        X = torch.stack([emb[t] for t in tokens])[None]  # (1, N, 16)
        out, A = attn(X)
        A = A[0, 0].detach()  # (N, N): the edge weights, row i -> column j

        def draw_graph(ax, A, labels, title):
            n = len(labels)
            ang = torch.arange(n) * 2 * math.pi / n
            xy = torch.stack([ang.cos(), ang.sin()], -1)
            for i in range(n):
                for j in range(n):
                    if i != j and A[i, j] > 0.15:  # the stronger edges, i attends j
                        ax.annotate("", xy=xy[j].tolist(), xytext=xy[i].tolist(),
                                    arrowprops=dict(arrowstyle="-|>", lw=5 * float(A[i, j]),
                                                    alpha=0.7, shrinkA=14, shrinkB=14,
                                                    connectionstyle="arc3,rad=0.15"))
            for (px, py), lab in zip(xy.tolist(), labels):
                ax.text(px, py, lab, ha="center", va="center",
                        bbox=dict(boxstyle="round", fc="w"))
            ax.set_xlim(-1.4, 1.4)
            ax.set_ylim(-1.4, 1.4)
            ax.set_axis_off()
            ax.set_title(title)

        tokens2 = "the dog sat on the mat".split()
        emb["dog"] = 2 * torch.randn(16)
        A2 = attn(torch.stack([emb[t] for t in tokens2])[None])[1][0, 0].detach()
        fig, axes = plt.subplots(1, 2, figsize=(8, 4))
        draw_graph(axes[0], A, tokens, T("edges of one input", "一个输入的边"))
        draw_graph(axes[1], A2, tokens2, T("one word changed", "换掉一个词"))
        print(T("total variation between the two graphs:", "两张图之间的总变差："),
              round(float(0.5 * (A - A2).abs().sum(-1).mean()), 3))
        """),
    Text("""
        A graph has no order of its nodes. Without positions, self-attention is
        **permutation-equivariant**: permuting the tokens permutes the outputs the same way,
        $f(PX) = P f(X)$. That is why positions are needed (notebook 06).
        """, """
        图的节点没有顺序。没有位置信息时，自注意力是**置换等变**的：把词重新排列，输出也以同样的方式
        重新排列，$f(PX) = P f(X)$。这就是需要位置编码的原因（第 06 节）。
        """),
    Code("""
        perm = torch.randperm(len(tokens))
        out_p, _ = attn(X[:, perm])
        print(T("f(PX) = P f(X):", "f(PX) = P f(X)："),
              torch.allclose(out_p, out[:, perm], atol=1e-6))
        r = run("dynamic-graph")
        print(r.quantity, "=", r.measured, "->", r.verdict)
        """),
    Text("""
        **Kernel smoothing, exactly.** The Gaussian kernel
        $K(x, x_i) = e^{-(x - x_i)^2 / 2\\sigma^2}$ expands to
        $e^{x x_i/\\sigma^2} \\, e^{-x_i^2/2\\sigma^2} \\, e^{-x^2/2\\sigma^2}$. The last factor is
        the same for every $i$ and cancels in the ratio. So with the query $q = (x, 1)$, the
        key $k_i = (x_i/\\sigma^2, -x_i^2/2\\sigma^2)$, the value $y_i$ and scale 1, attention
        **is** Nadaraya–Watson regression, to the last bit of float64.
        """, """
        **精确的核平滑。** 高斯核 $K(x, x_i) = e^{-(x - x_i)^2 / 2\\sigma^2}$ 可展开为
        $e^{x x_i/\\sigma^2} \\, e^{-x_i^2/2\\sigma^2} \\, e^{-x^2/2\\sigma^2}$。最后一个因子对所有
         $i$
        都相同，在比值中约掉。所以取 query $q = (x, 1)$、
        key $k_i = (x_i/\\sigma^2, -x_i^2/2\\sigma^2)$、
        value $y_i$、缩放系数为 1，注意力**就是** Nadaraya–Watson 回归，在 float64 下精确到最后一位
        。
        """),
    Code("""
        g = torch.Generator().manual_seed(0)
        x_train = torch.rand(40, generator=g, dtype=torch.float64) * 6
        y_train = torch.sin(x_train) + 0.2 * torch.randn(40, generator=g, dtype=torch.float64)
        x_test = torch.linspace(0, 6, 200, dtype=torch.float64)

        def nadaraya_watson(x, sigma):
            K = torch.exp(-(x[:, None] - x_train[None]) ** 2 / (2 * sigma**2))
            return (K @ y_train) / K.sum(-1)

        def as_attention(x, sigma):
            q = torch.stack([x, torch.ones_like(x)], -1)
            k = torch.stack([x_train / sigma**2, -x_train**2 / (2 * sigma**2)], -1)
            y = attnlab.scaled_dot_product_attention(q[None, None], k[None, None],
                                                     y_train[None, None, :, None], scale=1.0)
            return y[0, 0, :, 0]

        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.scatter(x_train, y_train, s=10, color="k", label=T("data", "数据"))
        for sigma in (0.1, 0.3, 1.0):
            err = float((as_attention(x_test, sigma) - nadaraya_watson(x_test, sigma)).abs().max())
            ax.plot(x_test, as_attention(x_test, sigma), label=f"σ = {sigma}  (|Δ| = {err:.0e})")
        ax.set_title(T("attention = Nadaraya–Watson", "注意力 = Nadaraya–Watson"))
        ax.legend(fontsize=8)
        r = run("kernel-smoothing")
        print(r.quantity, "=", r.measured, "->", r.verdict)
        """),
    Text("""
        The identity needs the term $-x_i^2/2\\sigma^2$ in the key: with keys of different
        norms, a plain dot product is **not** a Gaussian kernel (the experiment's wrong
        variant, `equal_norm_keys=False`). What attention adds is that $W^Q$ and $W^K$ are
        learned: the experiment `learned-kernel` in the report learns a better kernel than
        the best fixed Gaussian.
        """, """
        这个恒等式需要 key 里有 $-x_i^2/2\\sigma^2$ 这一项：当各 key 的范数不同时，单纯的点积**不是
        **
        高斯核（实验的错误变体 `equal_norm_keys=False` 正是如此）。注意力多出来的是 $W^Q$、$W^K$
        可以学习：报告中的实验 `learned-kernel` 学到的核比最好的固定高斯核还要好。
        """),
    Exercise("ex1", """
        **Exercise 1.** The same in two dimensions: write `ex1_qk(x, xs, sigma)` that returns
        the queries (for the points `x`, M × 2) and keys (for the data points `xs`, N × 2)
        that make attention equal the Gaussian Nadaraya–Watson estimate.
        """, """
        **练习 1.** 二维的情形：写出 `ex1_qk(x, xs, sigma)`，返回 query（对应点 `x`，M × 2）和 key
        （对应数据点 `xs`，N × 2），使注意力等于高斯核的 Nadaraya–Watson 估计。
        """,
        answer="""
            def ex1_qk(x, xs, sigma):
                q = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], -1)
                k = torch.cat([xs / sigma**2, -(xs**2).sum(-1, keepdim=True) / (2 * sigma**2)], -1)
                return q, k
            """,
        check="""
            g = torch.Generator().manual_seed(5)
            xs = torch.randn(30, 2, generator=g, dtype=torch.float64) * 2
            ys = torch.randn(30, 1, generator=g, dtype=torch.float64)
            x = torch.randn(7, 2, generator=g, dtype=torch.float64)
            for sigma in (0.5, 2.0):
                Kx = torch.exp(-torch.cdist(x, xs) ** 2 / (2 * sigma**2))
                expected = (Kx @ ys) / Kx.sum(-1, keepdim=True)
                q2, k2 = ex1_qk(x, xs, sigma)
                got = attnlab.scaled_dot_product_attention(q2[None, None], k2[None, None],
                                                           ys[None, None], scale=1.0)[0, 0]
                assert torch.allclose(got, expected, atol=1e-9), T(
                    f"sigma={sigma}: not the Nadaraya-Watson estimate",
                    f"sigma={sigma}：不是 Nadaraya-Watson 估计")
            print(T("right", "正确"))
            """,
        wrong="""
            def ex1_qk(x, xs, sigma):
                q = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], -1)
                k = torch.cat([xs / sigma**2, torch.zeros(len(xs), 1, dtype=xs.dtype)], -1)
                return q, k
            """),
    Exercise("ex2", """
        **Exercise 2.** In the graph of the first input, how much attention does each token
        *receive* in total (its weighted in-degree)? Give `ex2_received` (N,).
        """, """
        **练习 2.** 在第一个输入的图中，每个词总共*收到*多少注意力（加权入度）？给出
         `ex2_received`（N,）。
        """,
        answer="ex2_received = A.sum(dim=0)  # column sums: the weight arriving at each key",
        check="""
            n = len(tokens)
            by_hand = torch.tensor([sum(float(A[i, j]) for i in range(n)) for j in range(n)])
            assert ex2_received.shape == (n,)
            assert torch.allclose(ex2_received.float(), by_hand, atol=1e-5), T(
                "not the weight each token receives", "不是每个词收到的权重")
            print(T("right; the most attended token:", "正确；收到注意力最多的词："),
                  tokens[int(ex2_received.argmax())])
            """,
        wrong="ex2_received = A.sum(dim=1)"),
))

# ======================================================================================
# 06 positions: sinusoidal and RoPE
# ======================================================================================

P06 = Part(6, "positions", "Positions: sinusoidal and RoPE", "位置：正弦编码与 RoPE", (
    Text("""
        Attention alone cannot tell token order (notebook 05). Article 001 explains the
        sinusoidal encoding $PE_{(pos,2i)} = \\sin(pos / 10000^{2i/d_{model}})$ (and cosine on
        the odd dimensions) by two properties: wavelengths that grow geometrically with $i$
        (「低频（大波长）捕获长距离依赖，高频（小波长）记录局部位置」), and a relative
        position property: 「$PE_{pos+k}$ 能表示为 $PE_{pos}$ 的线性组合」.
        """, """
        只靠注意力分不清词的顺序（第 05 节）。文章 001 用两条性质解释正弦位置编码
        $PE_{(pos,2i)} = \\sin(pos / 10000^{2i/d_{model}})$（奇数维用余弦）：
        波长随 $i$ 按几何级数增长
        （「低频（大波长）捕获长距离依赖，高频（小波长）记录局部位置」），以及相对位置性质：
        「$PE_{pos+k}$ 能表示为 $PE_{pos}$ 的线性组合」。
        """),
    Code("""
        from attnlab import positional

        pe = positional.sinusoidal_table(64, 32)  # (positions, d_model)
        fig, ax = plt.subplots(figsize=(6, 3))
        im = ax.imshow(pe.T, aspect="auto", cmap="RdBu", vmin=-1, vmax=1)
        ax.set_xlabel(T("position", "位置"))
        ax.set_ylabel(T("dimension", "维度"))
        ax.set_title(T("sinusoidal encoding", "正弦位置编码"))
        fig.colorbar(im, ax=ax)
        omega = positional.frequencies(32)  # ω_i = 10000^(-2i/d)
        print(T("wavelengths 2π/ω_i:", "波长 2π/ω_i："),
              [round(float(2 * math.pi / w), 1) for w in omega[::4]])
        """),
    Text("""
        **The linear combination is a rotation.** By the angle-sum formulas, each pair
        $(\\sin \\omega_i p, \\cos \\omega_i p)$ at position $p + k$ is the pair at $p$ rotated by
        the angle $\\omega_i k$. So $PE_{pos+k} = M_k \\, PE_{pos}$ with one block-diagonal
        matrix $M_k$ for **every** position — `positional.relative_rotation` builds it.
        """, """
        **这个线性组合是一个旋转。** 由和角公式，位置 $p + k$ 处的每一对
        $(\\sin \\omega_i p, \\cos \\omega_i p)$ 就是位置 $p$ 处的那一对旋转 $\\omega_i k$ 角。所以
        $PE_{pos+k} = M_k \\, PE_{pos}$，其中分块对角矩阵 $M_k$ 对**所有**位置都相同——
        `positional.relative_rotation` 构造的就是它。
        """),
    Code("""
        pe64 = positional.sinusoidal_table(200, 32, dtype=torch.float64)
        M = positional.relative_rotation(5, 32)
        print(T("max |PE[p+5] - M PE[p]| =", "max |PE[p+5] - M PE[p]| ="),
              float((pe64[5:] - pe64[:-5] @ M.T).abs().max()))
        r = run("pe-relative-position")
        print(r.quantity, "=", r.measured, "->", r.verdict)
        show(r)
        """),
    Text("""
        That $M_k$ exists does not mean a model uses it: the scores see $x + PE$, mixed
        with the content. **RoPE** (used by SmolLM2, notebook 09) puts the rotation where it
        acts directly: it rotates $q$ and $k$ themselves by their positions, so that
        $\\langle R_m q, R_n k \\rangle = \\langle q, R_{n-m} k \\rangle$ depends on $m - n$
        only. attnlab's `RotaryEmbedding` uses the half-split layout of Llama (dimension $i$
        pairs with $i + d/2$). The map of scores over $(m, n)$ is constant along diagonals:
        """, """
        $M_k$ 存在并不意味着模型会用到它：分数看到的是 $x + PE$，与内容混在一起。**RoPE**（SmolLM2
        使用它，见第 09 节）把旋转放到直接起作用的地方：按位置旋转 $q$ 和 $k$ 本身，使
        $\\langle R_m q, R_n k \\rangle = \\langle q, R_{n-m} k \\rangle$
        只依赖于 $m - n$。attnlab 的
        `RotaryEmbedding` 采用 Llama 的前后半分布局（第 $i$ 维与第 $i + d/2$ 维成对）。分数在
        $(m, n)$ 上的图沿对角线不变：
        """),
    Code("""
        rope = positional.RotaryEmbedding(16)
        qr, kr = torch.randn(16), torch.randn(16)
        pos = torch.arange(24)
        S = rope(qr.expand(24, 16), positions=pos) @ rope(kr.expand(24, 16), positions=pos).T
        fig, ax = plt.subplots(figsize=(3.8, 3.3))
        im = ax.imshow(S, cmap="RdBu")
        ax.set_xlabel(T("key position n", "key 位置 n"))
        ax.set_ylabel(T("query position m", "query 位置 m"))
        ax.set_title(T("⟨R_m q, R_n k⟩", "⟨R_m q, R_n k⟩"))
        fig.colorbar(im, ax=ax)
        r = run("rope-relative")
        print(r.quantity, "=", r.measured, "->", r.verdict)
        """),
    Exercise("ex1", """
        **Exercise 1.** The wavelength of dimension pair $i$ (in positions): write
        `ex1_wavelength(i, d)` from the formula, without `positional.frequencies`.
        """, """
        **练习 1.** 第 $i$ 对维度的波长（以位置计）：不用 `positional.frequencies`，直接由公式写出
        `ex1_wavelength(i, d)`。
        """,
        answer="""
            def ex1_wavelength(i, d):
                return 2 * math.pi * 10000 ** (2 * i / d)
            """,
        check="""
            p = torch.arange(200, dtype=torch.float64)
            for i in (0, 3, 7):
                lam = ex1_wavelength(i, 32)
                ref = torch.sin(2 * math.pi * p / lam)
                assert torch.allclose(pe64[:, 2 * i], ref, atol=1e-9), T(
                    f"pair {i}: sin(2π p / λ) does not match the table",
                    f"第 {i} 对：sin(2π p / λ) 与编码表不符")
            print(T("right", "正确"))
            """,
        wrong="""
            def ex1_wavelength(i, d):
                return 10000 ** (2 * i / d)
            """),
    Exercise("ex2", """
        **Exercise 2.** Write the 2 × 2 block `ex2_block(k, i, d)` that maps the pair
        $(PE_{p,2i}, PE_{p,2i+1})$ to $(PE_{p+k,2i}, PE_{p+k,2i+1})$ for every $p$.
        """, """
        **练习 2.** 写出 2 × 2 的块 `ex2_block(k, i, d)`，对所有 $p$ 把
        $(PE_{p,2i}, PE_{p,2i+1})$ 映到 $(PE_{p+k,2i}, PE_{p+k,2i+1})$。
        """,
        answer="""
            def ex2_block(k, i, d):
                a = k * 10000 ** (-2 * i / d)
                return torch.tensor([[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]],
                                    dtype=torch.float64)
            """,
        check="""
            for k_, i in [(1, 0), (5, 2), (40, 9)]:
                pair = pe64[:, 2 * i:2 * i + 2]
                got = pair[:-k_] @ ex2_block(k_, i, 32).T
                assert torch.allclose(got, pair[k_:], atol=1e-9), T(
                    f"k={k_}, i={i}: the block does not move positions by k",
                    f"k={k_}, i={i}：这个块没有把位置平移 k")
            print(T("right: a rotation by ω_i k", "正确：旋转 ω_i k 角"))
            """,
        wrong="""
            def ex2_block(k, i, d):
                a = k * 10000 ** (-2 * i / d)
                return torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]],
                                    dtype=torch.float64)
            """),
    Exercise("ex3", """
        **Exercise 3.** RoPE by hand: `ex3_rope(x, m)` rotates the vector `x` (d,) to position
        `m`, pairing dimension $j$ with $j + d/2$ and turning pair $j$ by $m \\theta_j$, with
        $\\theta_j = 10000^{-2j/d}$.
        """, """
        **练习 3.** 手写 RoPE：`ex3_rope(x, m)` 把向量 `x`（d,）旋转到位置 `m`：第 $j$ 维与第
        $j + d/2$ 维成对，第 $j$ 对旋转 $m \\theta_j$ 角，$\\theta_j = 10000^{-2j/d}$。
        """,
        answer="""
            def ex3_rope(x, m):
                half = x.shape[-1] // 2
                a = m * 10000 ** (-2 * torch.arange(half, dtype=torch.float64) / x.shape[-1])
                x1, x2 = x[:half], x[half:]
                c, s = a.cos(), a.sin()
                return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s]).to(x.dtype)
            """,
        check="""
            xr = torch.randn(16)
            for m in (0, 1, 7, 100):
                ref = rope(xr[None], positions=torch.tensor([m]))[0]
                assert torch.allclose(ex3_rope(xr, m), ref, atol=1e-4), T(
                    f"position {m}: differs from RotaryEmbedding",
                    f"位置 {m}：与 RotaryEmbedding 不同")
            print(T("right", "正确"))
            """,
        wrong="""
            def ex3_rope(x, m):
                half = x.shape[-1] // 2
                a = m * 10000 ** (-2 * torch.arange(half, dtype=torch.float64) / x.shape[-1])
                x1, x2 = x[0::2], x[1::2]
                c, s = a.cos(), a.sin()
                return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s]).to(x.dtype)
            """),
))

# ======================================================================================
# 07 masks
# ======================================================================================

P07 = Part(7, "masks", "Masks", "掩码", (
    Text("""
        Article 000 leaves masks out (「剥离一切无关的模块（如 Mask 机制、Dropout）」); article 001
        adds one line, 「掩码处理（解码器需要）」. A mask decides which keys a query may see.
        attnlab has one convention everywhere: a bool mask is **True where a query may
        attend**, a float mask is added to the scores, and `key_mask` (B, Lk) is True for
        real tokens. All masks come from `attnlab.masks`.
        """, """
        文章 000 把掩码剥离掉了（「剥离一切无关的模块（如 Mask 机制、Dropout）」）；文章 001 加了一
        行
        「掩码处理（解码器需要）」。掩码决定一个 query 可以看到哪些 key。attnlab 处处只用一种约定：
        bool 掩码在**允许关注的位置为 True**，float 掩码加到分数上，`key_mask`（B, Lk）对真实的词为
        True。所有掩码都来自 `attnlab.masks`。
        """),
    Code("""
        from attnlab import masks

        n = 6
        shown = {
            T("causal", "因果"): masks.causal(n),
            T("causal, window 3", "因果，窗口 3"): masks.causal(n, window=3),
            T("padding (4 real)", "填充（4 个真实词）"): masks.key_mask_to_attn_mask(
                masks.padding([4], n))[0, 0].expand(n, n),
            T("causal and padding", "因果与填充"): masks.combine(
                masks.causal(n), masks.padding([4], n)[0]),
        }
        fig, axes = plt.subplots(1, 4, figsize=(10, 3.2), layout="constrained")
        for ax, (title, m) in zip(axes, shown.items()):
            ax.imshow(m, cmap="Greys", vmin=0, vmax=1)
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("key")
        axes[0].set_ylabel("query")
        fig.suptitle(T("black: the query may attend the key", "黑色：query 可以关注该 key"))
        plt.show()
        """),
    Text("""
        **Article 001's mask line, as printed**, does not run: the comment swallows the `if`,
        and the indented line under it is then an error. attnlab keeps the listing as
        published and compiles it:
        """, """
        **文章 001 原样印出的掩码那一行**无法运行：注释吞掉了 `if`，于是下面缩进的那一行就成了错误。
        attnlab 保留了原样发表的代码清单，这里编译它：
        """),
    Code("""
        from importlib.resources import files

        listing = (files("attnlab.experiments") / "listings" / "001_multi_head_attention.py.txt")
        source = listing.read_text(encoding="utf-8")
        try:
            compile(source, "001_multi_head_attention.py", "exec")
        except SyntaxError as e:
            print(type(e).__name__, T("at line", "位于第"), e.lineno, ":", e.text.strip())
        print([line for line in source.splitlines() if "if mask" in line])
        """),
    Text("""
        **A fully masked row.** The usual `masked_fill(-inf)` then softmax gives NaN for a row
        whose every key is masked (0 / 0), and the NaN spreads. attnlab gives that row weight
        0 and output 0, with log-sum-exp $-\\infty$.
        """, """
        **整行都被屏蔽。** 常见的 `masked_fill(-inf)` 再 softmax，对所有 key 都被屏蔽的一行会得到
        NaN（0 / 0），而且 NaN 会扩散。attnlab 对这样的一行给出权重 0、输出 0，log-sum-exp 为
         $-\\infty$。
        """),
    Code("""
        q = torch.randn(1, 1, 3, 4)
        k = torch.randn(1, 1, 3, 4)
        v = torch.randn(1, 1, 3, 4)
        m = torch.tensor([[True, True, False], [False, False, False], [True, True, True]])
        naive = torch.softmax((q @ k.transpose(-2, -1)).masked_fill(~m, float("-inf")), dim=-1)
        out, w = attnlab.scaled_dot_product_attention(q, k, v, m, return_weights=True)
        print(T("naive row 1:", "朴素写法的第 1 行："), naive[0, 0, 1].tolist())
        print(T("attnlab row 1:", "attnlab 的第 1 行："), w[0, 0, 1].tolist(),
              out[0, 0, 1].tolist())
        print(T("article 001's check, masked weights are 0:",
                "文章 001 的检查，被屏蔽的权重为 0："),
              bool(w.masked_fill(~m, 0).sum() == w.sum()))
        """),
    Text("""
        **Causality is a statement about gradients**: with a causal mask, output $t$ does not
        depend on any input $s > t$. The experiment `masking` measures
        $\\sum |\\partial \\mathrm{out}_t / \\partial x_s|$ over $s > t$: exactly 0.
        """, """
        **因果性是关于梯度的命题**：加了因果掩码，第 $t$ 个输出不依赖任何 $s > t$ 的输入。实验
        `masking` 测量所有 $s > t$ 上的 $\\sum |\\partial \\mathrm{out}_t / \\partial x_s|$：恰好为
         0。
        """),
    Code("""
        r = run("masking")
        print(r.quantity, "=", r.measured, "->", r.verdict)
        show(r)
        """),
    Exercise("ex1", """
        **Exercise 1.** A *prefix-LM* mask: the first `p` tokens (the prompt) see each other
        in both directions, every later token is causal. Build `ex1_mask` (n × n, bool) for
        `n = 6`, `p = 3`. The check compares it with which inputs each output really depends
        on, through the Jacobian of a `SelfAttention`.
        """, """
        **练习 1.** *前缀语言模型*掩码：前 `p` 个词（提示）彼此双向可见，之后的每个词都是因果的。
        为 `n = 6`、`p = 3` 构造 `ex1_mask`（n × n，bool）。检查单元格通过 `SelfAttention` 的雅可比
        矩阵，把它与每个输出实际依赖哪些输入进行比较。
        """,
        answer="""
            n, p = 6, 3
            ex1_mask = masks.causal(n) | (torch.arange(n) < p)[None, :]
            """,
        check="""
            sa = attnlab.SelfAttention(embed_dim=4, num_heads=1)
            xj = torch.randn(n, 4, dtype=torch.float64)
            sa = sa.double()
            i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
            truth = (j <= i) | ((i < p) & (j < p))  # the definition
            assert ex1_mask.dtype == torch.bool and torch.equal(ex1_mask, truth), T(
                "not the prefix-LM mask", "不是前缀语言模型掩码")
            J = torch.autograd.functional.jacobian(lambda x_: sa(x_[None], ex1_mask)[0][0], xj)
            depends = J.abs().amax(dim=(1, 3)) > 0  # out_t depends on x_s
            assert torch.equal(depends, truth), T("dependence differs", "依赖关系不同")
            print(T("right: each output depends exactly on what the mask allows",
                    "正确：每个输出恰好依赖掩码允许的输入"))
            """,
        wrong="""
            n, p = 6, 3
            ex1_mask = masks.causal(n)
            """),
    Exercise("ex2", """
        **Exercise 2.** Two sequences of lengths 3 and 5 are padded to 5. Build the
        `ex2_key_mask` (2 × 5) that `MultiHeadAttention(key_mask=...)` expects.
        """, """
        **练习 2.** 长度为 3 和 5 的两个序列被填充到 5。构造 `MultiHeadAttention(key_mask=...)`
        所需的 `ex2_key_mask`（2 × 5）。
        """,
        answer="ex2_key_mask = masks.padding([3, 5], 5)",
        check="""
            mha = attnlab.MultiHeadAttention(embed_dim=8, num_heads=2)
            xb = torch.randn(2, 5, 8)
            outb, wb = mha(xb, key_mask=ex2_key_mask, need_weights=True)
            assert float(wb[0, :, :, 3:].detach().abs().max()) == 0, T(
                "padded keys must get weight 0", "填充的 key 权重必须为 0")
            alone, _ = mha(xb[:1, :3])  # the short sequence without padding
            assert torch.allclose(outb[0, :3], alone[0], atol=1e-6), T(
                "padding changed the real tokens' outputs", "填充改变了真实词的输出")
            print(T("right", "正确"))
            """,
        wrong="ex2_key_mask = ~masks.padding([3, 5], 5)  # torch's key_padding_mask convention"),
    Exercise("ex3", """
        **Exercise 3.** With `masks.causal(n, window=w)`, how many keys does each query see?
        Give `ex3_counts` (n,) for `n = 10`, `w = 4` by a formula, not from the mask.
        """, """
        **练习 3.** 用 `masks.causal(n, window=w)` 时，每个 query 能看到多少个 key？对 `n = 10`、
        `w = 4`，用公式（而不是从掩码）给出 `ex3_counts`（n,）。
        """,
        answer="""
            n, w = 10, 4
            ex3_counts = torch.clamp(torch.arange(n) + 1, max=w)
            """,
        check="""
            assert torch.equal(ex3_counts, masks.causal(n, window=w).sum(-1)), T(
                "not the number of keys each query sees", "不是每个 query 看到的 key 数")
            print(T("right", "正确"))
            """,
        wrong="""
            n, w = 10, 4
            ex3_counts = torch.full((n,), w)
            """),
))

# ======================================================================================
# 08 the modules
# ======================================================================================

P08 = Part(8, "modules", "The modules", "模块", (
    Text("""
        Article 001 writes multi-head attention with one fused projection:
        「通过 nn.Linear(3*d_model) 一次性计算 QKV，比分开三次计算更快」. attnlab's
        `MultiHeadAttention` does the same (`qkv_proj`), is weight-compatible with
        `torch.nn.MultiheadAttention` (`from_torch`, `to_torch`), and adds grouped-query
        attention and a KV cache. Article 000's `PureSelfAttention` is attnlab's
        `SelfAttention`.
        """, """
        文章 001 用一个融合的投影写多头注意力：「通过 nn.Linear(3*d_model) 一次性计算 QKV，比分开
        三次计算更快」。attnlab 的 `MultiHeadAttention` 也这样做（`qkv_proj`），与
        `torch.nn.MultiheadAttention` 权重兼容（`from_torch`、`to_torch`），并增加了分组查询注意力
        和 KV 缓存。文章 000 的 `PureSelfAttention` 就是 attnlab 的 `SelfAttention`。
        """),
    Code("""
        from torch import nn

        mha = attnlab.MultiHeadAttention(embed_dim=64, num_heads=8)
        x = torch.randn(2, 10, 64)
        out, w = mha(x, need_weights=True)
        twin = mha.to_torch()  # nn.MultiheadAttention(batch_first=True), same weights
        ref, ref_w = twin(x, x, x, need_weights=True, average_attn_weights=False)
        print(T("to_torch: max |out - torch| =", "to_torch：max |out - torch| ="),
              float((out - ref).detach().abs().max()), float((w - ref_w).detach().abs().max()))

        m = nn.MultiheadAttention(64, 8, batch_first=True)
        a = attnlab.MultiHeadAttention.from_torch(m)
        print(T("fused weight = torch's in_proj_weight:", "融合权重 = torch 的 in_proj_weight："),
              torch.equal(a.qkv_proj.weight, m.in_proj_weight))
        print(T("from_torch: max |out - torch| =", "from_torch：max |out - torch| ="),
              float((a(x)[0] - m(x, x, x)[0]).detach().abs().max()))
        """),
    Text("""
        **Article 000's listing runs**, and equals `SelfAttention` once the weights are
        copied. (Article 001's listing fails as printed, three times over; notebook 07
        showed the first error, `attnlab verify --only article-code` all three.)
        """, """
        **文章 000 的代码清单可以运行**，复制权重后与 `SelfAttention` 完全相等。（文章 001 的清单
        原样无法运行，而且有三处错误；第 07 节展示了第一处，`attnlab verify --only article-code`
        展示全部三处。）
        """),
    Code("""
        from importlib.resources import files

        namespace = {"__name__": "article_000"}  # not __main__: its demo does not run
        exec((files("attnlab.experiments") / "listings" / "000_pure_self_attention.py.txt")
             .read_text(encoding="utf-8"), namespace)
        pure = namespace["PureSelfAttention"](64, 8)
        sa = attnlab.SelfAttention(64, 8)
        sa.load_state_dict(pure.state_dict())
        (o1, w1), (o2, w2) = pure(x), sa(x)
        print(T("article 000 vs SelfAttention:", "文章 000 与 SelfAttention："),
              float((o1 - o2).detach().abs().max()), float((w1 - w2).detach().abs().max()))
        """),
    Text("""
        **Grouped-query attention** (`num_kv_heads`): groups of query heads share one
        key/value head, which shrinks the K and V projections and the cache. **KV cache**:
        decoding one token at a time with a `KVCache` gives what one causal pass over the
        whole sequence gives.
        """, """
        **分组查询注意力**（`num_kv_heads`）：若干个 query 头共享一个 key/value 头，K、V 的投影与缓
        存
        都因此变小。**KV 缓存**：用 `KVCache` 一次解码一个词，结果与对整个序列做一次因果计算相同。
        """),
    Code("""
        gqa = attnlab.MultiHeadAttention(embed_dim=64, num_heads=8, num_kv_heads=2)
        print(T("qkv_proj rows (full, grouped):", "qkv_proj 的行数（完整，分组）："),
              mha.qkv_proj.weight.shape[0], gqa.qkv_proj.weight.shape[0])
        full, _ = gqa(x, causal=True)
        cache = attnlab.KVCache()
        steps = [gqa(x[:, t:t + 1], causal=True, cache=cache)[0] for t in range(10)]
        print(T("cached decoding = one causal pass:", "缓存解码 = 一次因果计算："),
              torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5))
        """),
    Exercise("ex1", """
        **Exercise 1.** Count the parameters of `MultiHeadAttention(E, H, num_kv_heads=G)`
        (with biases) by a formula: `ex1_params(E, H, G)`.
        """, """
        **练习 1.** 用公式算出 `MultiHeadAttention(E, H, num_kv_heads=G)`（带偏置）的参数个数：
        `ex1_params(E, H, G)`。
        """,
        answer="""
            def ex1_params(E, H, G):
                kv = G * (E // H)  # the width of K and of V
                return (E * (E + 2 * kv) + E + 2 * kv) + (E * E + E)  # qkv_proj + out_proj
            """,
        check="""
            for E_, H_, G_ in [(64, 8, 8), (64, 8, 2), (48, 6, 3), (32, 4, 1)]:
                n_ = sum(p.numel() for p in attnlab.MultiHeadAttention(E_, H_, num_kv_heads=G_)
                         .parameters())
                assert ex1_params(E_, H_, G_) == n_, T(
                    f"E={E_}, H={H_}, G={G_}: the module has {n_}",
                    f"E={E_}, H={H_}, G={G_}：模块有 {n_} 个参数")
            print(T("right", "正确"))
            """,
        wrong="""
            def ex1_params(E, H, G):
                return 4 * E * E + 4 * E
            """),
    Exercise("ex2", """
        **Exercise 2.** `tm` below is a `torch.nn.MultiheadAttention` **without**
        `batch_first` (inputs shaped (N, B, E)). Compute its output on `xs` with an attnlab
        module built from it: `ex2_out`, shaped like torch's.
        """, """
        **练习 2.** 下面的 `tm` 是一个**没有** `batch_first` 的 `torch.nn.MultiheadAttention`
        （输入形状为 (N, B, E)）。用由它构造的 attnlab 模块算出它在 `xs` 上的输出：`ex2_out`，
        形状与 torch 的相同。
        """,
        answer="""
            tm = nn.MultiheadAttention(32, 4)  # batch_first=False
            xs = torch.randn(7, 3, 32)  # (N, B, E)
            ours = attnlab.MultiHeadAttention.from_torch(tm)  # attnlab is batch-first
            ex2_out = ours(xs.transpose(0, 1))[0].transpose(0, 1)
            """,
        check="""
            expected = tm(xs, xs, xs)[0]
            assert ex2_out.shape == expected.shape, T(f"shape {tuple(ex2_out.shape)}, expected "
                                                      f"{tuple(expected.shape)}",
                                                      f"形状为 {tuple(ex2_out.shape)}，应为 "
                                                      f"{tuple(expected.shape)}")
            assert torch.allclose(ex2_out, expected, atol=1e-5), T("not torch's output",
                                                                   "与 torch 的输出不同")
            print(T("right", "正确"))
            """,
        wrong="""
            tm = nn.MultiheadAttention(32, 4)
            xs = torch.randn(7, 3, 32)
            ours = attnlab.MultiHeadAttention.from_torch(tm)
            ex2_out = ours(xs)[0]  # treats N as the batch
            """),
))

# ======================================================================================
# 09 real models
# ======================================================================================

P09 = Part(9, "real_models", "Real models", "真实模型", (
    Text("""
        Everything so far ran on random weights. attnlab loads two pretrained models
        offline: `minilm` (all-MiniLM-L6-v2, a BERT encoder, 6 layers × 12 heads) and
        `smollm2` (SmolLM2-135M-Instruct, Llama: causal, RoPE, 30 layers × 9 heads sharing 3
        key/value heads). A **trace** keeps each head's q, k, v and each row's log-sum-exp,
        and computes any weight exactly when asked.
        """, """
        到目前为止一切都是在随机权重上运行的。attnlab 可以离线加载两个预训练模型：`minilm`
        （all-MiniLM-L6-v2，BERT 编码器，6 层 × 12 个头）和 `smollm2`（SmolLM2-135M-Instruct，Llama
        架构：因果、RoPE，30 层 × 9 个头，共享 3 个 key/value 头）。**trace** 保存每个头的 q、k、
        v 与
        每一行的 log-sum-exp，需要哪个权重就精确地算出哪个。
        """),
    Code("""
        from attnlab import models
        from attnlab.viz import figures

        minilm = models.load("minilm", progress=False)
        text = "The animal didn't cross the street because it was too tired"
        t = attnlab.trace(minilm, text)
        print(t)
        print(t.tokens)
        """),
    Text("""
        *It* refers to *the animal*. Which of the 72 heads links them? The trace gives row
        *it* of every head on demand; we take the head that puts the most weight from *it* on
        *animal* and draw it as a heatmap (row = query, column = key). Set `L`, `Hd` to any
        other head and rerun.
        """, """
        *it* 指的是 *the animal*。72 个头中哪一个把它们联系起来？trace 可以按需给出每个头中 *it*
        那一行；我们取从 *it* 到 *animal* 权重最大的头，画成热力图（行 = query，列 = key）。把 `L`、
        `Hd` 设为其他任何头，再运行一次。
        """),
    Code("""
        i_it, i_animal = t.tokens.index("it"), t.tokens.index("animal")
        to_animal = torch.tensor([[float(t.weights_rows(layer, head, [i_it])[0, i_animal])
                                   for head in range(t.num_heads)]
                                  for layer in range(t.num_layers)])
        L, Hd = divmod(int(to_animal.argmax()), t.num_heads)
        print(T(f"layer {L}, head {Hd}: weight from 'it' on 'animal' =",
                f"第 {L} 层第 {Hd} 个头：'it' 对 'animal' 的权重 ="),
              round(float(to_animal[L, Hd]), 3))
        figures.heatmap(t, L, Hd, lang=LANG)
        """),
    Code("""
        values, keys = t.topk(L, Hd, i_it, 3)
        print(T("'it' attends most to:", "'it' 最关注："),
              [(t.tokens[int(j)], round(float(p), 3)) for p, j in zip(values, keys)])
        Wt = t.head_weights(L, Hd)  # (N, N), dense for one head
        print(T("rows sum to 1:", "每行和为 1："),
              torch.allclose(Wt.sum(-1), torch.ones(len(t.tokens))))
        """),
    Text("""
        **The explorer, inline.** `attnlab.Explorer(trace)` shows itself in a notebook through
        `_repr_html_`: the QK view with a live $1/\\sqrt{d_k}$ slider, the geometry of a head's
        queries and keys, the positional rotation and per-head diagnostics, in English and
        Chinese. Nothing in it makes a network request.
        """, """
        **内嵌的浏览器。** `attnlab.Explorer(trace)` 在 notebook 中通过 `_repr_html_` 显示自己：带有
        实时 $1/\\sqrt{d_k}$ 滑块的 QK 视图、一个头的 query 与 key 的几何、位置旋转、各头的诊断，
        中英双语。它不发出任何网络请求。
        """),
    Code("""
        attnlab.Explorer(t, layer=L, head=Hd)
        """),
    Text("""
        **SmolLM2 and the article's example.** Article 000: 「比如“苹果”这个词，如果周围有“吃”字，
        它的输出向量就会向“水果”的语义空间偏移」. SmolLM2 reads Chinese; its byte-level
        tokenizer cuts a character into pieces, which the trace merges back (weights summed
        over keys, averaged over queries). Grouped heads store each key/value head once.
        """, """
        **SmolLM2 与文章里的例子。** 文章 000：「比如“苹果”这个词，如果周围有“吃”字，它的输出向量
        就会向“水果”的语义空间偏移」。SmolLM2 能读中文；它的字节级分词器会把一个汉字切成几片，
        trace 会把它们合并回来（对 key 求和、对 query 取平均）。分组的头中每个 key/value 头只存一次
        。
        """),
    Code("""
        smollm2 = models.load("smollm2", progress=False)
        t2 = attnlab.trace(smollm2, "我吃了一个苹果")
        print(t2)
        print(t2.tokens, t2.meta.get("merged", {}).get("rule"))
        print(T("query heads per key/value head:", "每个 key/value 头对应的 query 头数："),
              t2.num_heads // t2.num_kv_heads)
        """),
    Exercise("ex1", """
        **Exercise 1.** Recompute row `i_it` of MiniLM's head (`L`, `Hd`) from the trace's
        `q` and `k` (shaped (layers, heads, N, d)) and the scale `t.scale`:
        `ex1_row` (N,).
        """, """
        **练习 1.** 由 trace 的 `q`、`k`（形状为 (层, 头, N, d)）与缩放系数 `t.scale`，重新算出
         MiniLM
        的头（`L`、`Hd`）的第 `i_it` 行：`ex1_row`（N,）。
        """,
        answer="ex1_row = torch.softmax(t.q[L, Hd, i_it] @ t.k[L, Hd].T * t.scale, dim=-1)",
        check="""
            ref = t.weights_rows(L, Hd, [i_it])[0]
            assert ex1_row.shape == ref.shape, T("one weight per key", "每个 key 一个权重")
            assert torch.allclose(ex1_row, ref, atol=1e-5), T("not the trace's weights",
                                                              "与 trace 的权重不同")
            print(T("right: softmax(q kᵀ · scale) is the model's own attention",
                    "正确：softmax(q kᵀ · scale) 就是模型自己的注意力"))
            """,
        wrong="ex1_row = torch.softmax(t.q[L, Hd, i_it] @ t.k[L, Hd].T, dim=-1)"),
    Exercise("ex2", """
        **Exercise 2.** In SmolLM2, which key/value head does query head 7 read? Give
        `ex2_kv(h)` for any head `h` (the heads of one group are consecutive).
        """, """
        **练习 2.** 在 SmolLM2 中，第 7 个 query 头读取的是哪个 key/value 头？对任意头 `h` 给出
        `ex2_kv(h)`（同一组的头是连续的）。
        """,
        answer="""
            def ex2_kv(h):
                return h // (t2.num_heads // t2.num_kv_heads)
            """,
        check="""
            for h in range(t2.num_heads):
                assert ex2_kv(h) == t2.kv_head(h), T(f"head {h}: the trace says {t2.kv_head(h)}",
                                                     f"第 {h} 个头：trace 给出的是 {t2.kv_head(h)}")
            print(T("right", "正确"))
            """,
        wrong="""
            def ex2_kv(h):
                return h % t2.num_kv_heads
            """),
), needs_models=True)

# ======================================================================================
# 10 training a head
# ======================================================================================

P10 = Part(10, "training_a_head", "Training a head", "训练一个头", (
    Text("""
        Article 000 says that, because heads start from different weights,
        「梯度下降会驱使它们收敛到不同的表征子空间」. Let us watch heads specialise. The
        *induction* task repeats a random segment, `<bos> s1..sn s1..sn s1..`: to predict the
        next token the model must find the earlier occurrence of the current token and copy
        what followed it. The known solution takes two cooperating heads in a two-layer
        attnlab `GPT`: a **previous-token head** in layer 0 and an **induction head** in layer
        1. The run below is tiny (200 steps, seconds on a CPU); `attnlab train --task
        induction` is the full one (600 steps).
        """, """
        文章 000 说，由于各个头从不同的权重出发，「梯度下降会驱使它们收敛到不同的表征子空间」。
        我们来看头如何分工。*induction*（归纳）任务重复一段随机序列
        `<bos> s1..sn s1..sn s1..`：要预测下一个词，模型必须找到当前词上一次出现的位置，
        并复制紧随其后的词。已知的解法需要两层 attnlab `GPT` 中两个协作的头：
        第 0 层的**前一词头**和第 1 层的**归纳头**。下面的训练很小（200 步，CPU 上几秒钟）；
        完整的训练是 `attnlab train --task induction`（600 步）。
        """),
    Code("""
        import tempfile

        from attnlab import train as tr

        config = tr.TrainConfig.for_task("induction", steps=200, batch_size=32, log_every=25,
                                         checkpoint_every=1000, eval_batches=2)
        workdir = tempfile.TemporaryDirectory(prefix="attnlab-course-")  # removed at exit
        result = tr.train(config, workdir.name, quiet=True)
        print(T("held-out accuracy:", "留出集准确率："), round(result.eval_accuracy, 3),
              f"({result.seconds:.1f} s)")
        print(result.heads_text())
        """),
    Code("""
        from attnlab.train.trainer import read_metrics

        rows = read_metrics(result.run_dir)
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.plot([r_["step"] for r_ in rows], [r_["loss"] for r_ in rows], "o-")
        ax.set_xlabel(T("step", "步数"))
        ax.set_ylabel(T("training loss", "训练损失"))
        ax.set_title(T("induction task", "归纳任务"))
        plt.show()
        """),
    Text("""
        **Look at the heads.** The run folder loads like any model (`models.load`); we
        trace one sequence of the task, with a period of 8, and draw the two heads the run
        found. A previous-token head puts its weight on the line just below the diagonal
        (key $i - 1$); an induction head on the line one period back, shifted by one (key
        $i - 8 + 1$).
        """, """
        **看看这些头。** 训练目录可以像任何模型一样加载（`models.load`）；我们对任务中周期为 8 的
        一个序列做 trace，并画出训练找到的两个头。前一词头把权重放在对角线正下方的一条线上（key
        $i - 1$）；归纳头放在往回一个周期再错开一位的一条线上（key $i - 8 + 1$）。
        """),
    Code("""
        from attnlab import models
        from attnlab.analysis.scores import head_scores
        from attnlab.viz import figures

        task = tr.get_task("induction")
        period = 8
        seg = torch.randperm(task.n_values, generator=torch.Generator().manual_seed(3))[:period]
        ids = [task.special("<bos>")] + (seg + task.n_specials).tolist() * 3
        run_model = models.load(result.run_dir)
        tt = attnlab.trace(run_model, ids)
        prev, ind = result.heads["previous_token"], result.heads["induction"]
        fig = figures.heatmap(tt, prev["layer"], prev["head"], lang=LANG)
        display(fig)
        figures.heatmap(tt, ind["layer"], ind["head"], lang=LANG)
        """),
    Text("""
        The heads are found by scores: `attnlab.analysis` computes TransformerLens's
        definitions for every head in one pass over the trace (no N × N memory). In a run this
        short the roles are shared rather than clean: compare the heads of each layer below,
        then train longer (`steps=600`, the task's default) and compare again.
        """, """
        这些头是按分数找出来的：`attnlab.analysis` 在对 trace 的一次遍历中为每个头计算
         TransformerLens
        的定义（不需要 N × N 的内存）。训练这么短时，各个角色是由几个头分担的，还不够干净：比较下面
        每一层的各个头，再训练得更久一些（`steps=600`，任务的默认值）后重新比较。
        """),
    Code("""
        s = head_scores(tt, token_ids=ids)
        for name in ("previous", "induction"):
            print(name, [[round(float(v), 2) for v in row] for row in s[name]])
        """),
    Exercise("ex1", """
        **Exercise 1.** In `ids` (`<bos>` then the segment three times, period 8), which key
        should an induction head at query position `i` attend to? Write
        `ex1_target(i, period)` for the positions of the second and third copies.
        """, """
        **练习 1.** 在 `ids`（`<bos>` 之后是重复三次、周期为 8 的片段）中，位于 query 位置 `i` 的
        归纳头应该关注哪个 key？对第二、第三份拷贝中的位置写出 `ex1_target(i, period)`。
        """,
        answer="""
            def ex1_target(i, period):
                return i - period + 1  # the token after the previous occurrence of ids[i]
            """,
        check="""
            rows_ = range(period + 1, len(ids))
            for i in rows_:
                j = ex1_target(i, period)
                assert 1 <= j <= i and ids[j - 1] == ids[i], T(
                    f"position {i}: key {j} does not follow an earlier {ids[i]}",
                    f"位置 {i}：key {j} 并不紧跟在更早出现的 {ids[i]} 之后")
            w_ind = tt.head_weights(ind["layer"], ind["head"])
            mass = sum(float(w_ind[i, ex1_target(i, period)]) for i in rows_) / len(rows_)
            print(T("right; the induction head puts", "正确；归纳头在这些 key 上平均放了"),
                  round(mass, 2), T("of its weight there", "的权重"))
            """,
        wrong="""
            def ex1_target(i, period):
                return i - period  # the previous occurrence itself
            """),
    Exercise("ex2", """
        **Exercise 2.** The previous-token score of a head is the attention mass on key
        `i - 1`, summed over the rows and divided by **all** N rows (row 0 has no previous
        token and counts as 0). Compute it by hand for the previous-token head:
        `ex2_score`.
        """, """
        **练习 2.** 一个头的前一词分数，是落在 key `i - 1` 上的注意力质量对各行求和，再除以**全部**
        N 行（第 0 行没有前一个词，记为 0）。为前一词头手工算出它：`ex2_score`。
        """,
        answer="""
            w_prev = tt.head_weights(prev["layer"], prev["head"])
            ex2_score = float(w_prev.diagonal(-1).sum() / w_prev.shape[0])
            """,
        check="""
            ref = float(s["previous"][prev["layer"], prev["head"]])
            assert abs(ex2_score - ref) < 1e-5, T(f"{ex2_score:.6f}, attnlab says {ref:.6f}",
                                                   f"{ex2_score:.6f}，attnlab 给出 {ref:.6f}")
            print(T("right:", "正确："), round(ex2_score, 3))
            """,
        wrong="""
            w_prev = tt.head_weights(prev["layer"], prev["head"])
            ex2_score = float(w_prev.diagonal(-1).mean())
            """),
))

PARTS: tuple[Part, ...] = (P01, P02, P03, P04, P05, P06, P07, P08, P09, P10)


# ======================================================================================
# writing the notebooks
# ======================================================================================

_NAV = Text("""
    *attnlab course, part {n} of 10.* Run the cells from top to bottom; every number and
    figure is computed here. The exercises at the end come with a working answer and a
    check cell: replace the answer with your own and run the check again.
    """, """
    *attnlab 课程，第 {n} 部分（共 10 部分）。* 从上到下运行各单元格；所有数字与图都在这里算出。
    最后的练习附带一个可运行的答案和一个检查单元格：把答案换成你自己的，再运行检查。
    """)


def notebook(part: Part, lang: str) -> dict:
    """The notebook of ``part`` in ``lang`` as a JSON-ready dict (nbformat 4.5, no
    outputs, deterministic cell ids)."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {LANGS}, got {lang!r}")
    cells: list[dict] = []

    def md(text: str, tags: tuple[str, ...] = ()) -> None:
        meta = {"tags": list(tags)} if tags else {}
        cells.append({"cell_type": "markdown", "id": f"c{len(cells):02d}", "metadata": meta,
                      "source": text})

    def code(src: str, tags: tuple[str, ...] = ()) -> None:
        meta = {"tags": list(tags)} if tags else {}
        cells.append({"cell_type": "code", "execution_count": None, "id": f"c{len(cells):02d}",
                      "metadata": meta, "outputs": [], "source": src})

    title = part.title_zh if lang == "zh" else part.title_en
    md(f"# {part.number:02d} · {title}\n\n"
       + _flow(getattr(_NAV, lang), lang).replace("{n}", str(part.number)))
    code(SETUP.format(lang=lang), ("setup",))
    heading = False
    for cell in part.cells:
        if isinstance(cell, Text):
            md(_flow(getattr(cell, lang), lang))
        elif isinstance(cell, Code):
            code(_code(cell.src))
        else:
            if not heading:
                md("## 练习" if lang == "zh" else "## Exercises")
                heading = True
            md(_flow(getattr(cell, lang), lang), ("exercise-prompt",))
            code(_code(cell.answer), ("exercise", cell.key))
            code(_code(cell.check), ("check", cell.key))
    return {"cells": cells, "metadata": {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "attnlab": {"part": part.number, "lang": lang},
    }, "nbformat": 4, "nbformat_minor": 5}


def dumps(nb: dict) -> str:
    """The notebook's file text (as Jupyter writes it: 1-space indent, sorted keys)."""
    def split(c: dict) -> dict:
        src = c["source"]
        return {**c, "source": src.splitlines(keepends=True)}

    return json.dumps({**nb, "cells": [split(c) for c in nb["cells"]]}, indent=1,
                      sort_keys=True, ensure_ascii=False) + "\n"


def path_of(part: Part, lang: str, root: Path | None = None) -> Path:
    return (HERE if root is None else root) / lang / f"{part.stem}.ipynb"


def index() -> str:
    """docs/course/README.md: the parts, each in both languages."""
    rows = "\n".join(f"| {p.number:02d} | [{p.title_en}](en/{p.stem}.ipynb) | "
                     f"[{p.title_zh}](zh/{p.stem}.ipynb) |" for p in PARTS)
    return f"""# The attnlab course · attnlab 课程

The two articles' argument, step by step, with attnlab doing the computation: ten notebooks,
each in English and in Chinese, each ending with exercises whose answers a cell checks.
Run them with the project's environment (`make setup`, then open a notebook with the
`.venv` kernel); they need no network. Every notebook here is generated by `build.py` and
stored without outputs; `tests/course` runs them all.

两篇文章的论证，一步一步，由 attnlab 完成计算：十个 notebook，每个都有英文版和中文版，
每个都以练习结束，练习的答案由一个单元格检查。用项目的环境运行（先 `make setup`，再用 `.venv`
的内核打开 notebook）；不需要网络。这里的每个 notebook 都由 `build.py` 生成，不带输出保存；
`tests/course` 会运行全部 notebook。

| part | English | 中文 |
|---|---|---|
{rows}
"""


#: The course's prose as one long text, shipped with the package: what the report's "Long
#: contexts" part reads (a text attnlab wrote, in English then in Chinese).
LONG_TEXT = HERE.parents[1] / "src" / "attnlab" / "report" / "course_text.md"


def long_text() -> str:
    """Every text cell of the course (titles, prose, exercise prompts), the ten parts in
    English, then the ten in Chinese; no code and no navigation line."""
    blocks = []
    for lang in LANGS:
        for part in PARTS:
            title = part.title_zh if lang == "zh" else part.title_en
            blocks.append(f"# {part.number:02d} · {title}")
            blocks += [_flow(getattr(c, lang), lang) for c in part.cells
                       if isinstance(c, (Text, Exercise))]
    return "\n\n".join(blocks) + "\n"


def expected_files(root: Path | None = None) -> dict[Path, str]:
    """Every generated path (the notebooks, README.md and the package's copy of the course
    text) -> the text written there."""
    files = {path_of(p, lang, root): dumps(notebook(p, lang)) for p in PARTS for lang in LANGS}
    files[(HERE if root is None else root) / "README.md"] = index()
    files[LONG_TEXT if root is None else root / LONG_TEXT.name] = long_text()
    return files


def exercises(part: Part) -> list[Exercise]:
    return [c for c in part.cells if isinstance(c, Exercise)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if a committed notebook differs from the generator's output")
    args = ap.parse_args(argv)
    stale = []
    for path, text in expected_files().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not args.check:
            from attnlab._io import atomic_write_text

            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, text)
    for path in stale:
        print(("differs: " if args.check else "wrote: ") + str(path))
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
