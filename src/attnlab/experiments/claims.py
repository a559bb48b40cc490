"""The claim inventory: every claim, code listing and recommendation of the two articles,
the experiments whose numbers decide each one, and the verdict those numbers give.

Article ``"000"`` is 《拆解 Transformer：从几何与线性代数视角看透注意力机制的数学本质》
(the geometry and linear algebra of attention, with the ``PureSelfAttention`` listing);
article ``"001"`` is 《3Blue1Brown Transformer 入门指南：从数学原理到 PyTorch 实现》 (positional
encoding, the ``MultiHeadAttention`` listing and practical tips).

Each :class:`Claim` quotes the article verbatim (``quote_zh``), restates it in English and
in Chinese as attnlab tests it, and names its :class:`Evidence`: an experiment of
:data:`attnlab.experiments.EXPERIMENTS`, and which part of its :class:`~attnlab.experiments.Result`
decides the claim (the whole result, its headline number only, or the checks whose names
contain a given text). An experiment can decide several claims, and one result can support
one claim and refute another (``article-code`` runs both listings; ``multihead-cost``
counts costs and measures subspaces). A claim that no computation can decide (a historical
statement, a metaphor, advice about production use, a statement about other architectures)
says why instead (``not_testable_en`` / ``not_testable_zh``).

The verdicts are computed from results, never written here (:func:`verdicts`):

* ``"not testable"`` when the claim says why no experiment can decide it;
* ``"does not hold"`` when some evidence fails (an experiment part that does not hold, or
  one marked ``against`` that holds: its claim is the opposite of the article's);
* ``"holds under stated conditions"`` when the evidence holds and the claim holds only
  under conditions (``conditions_en`` / ``conditions_zh``: e.g. the variance argument
  assumes independent unit-variance components);
* ``"holds"`` otherwise.

:data:`EXTENSIONS` lists what attnlab measures beyond the articles (its ``origin="attnlab"``
experiments and attnlab's own rules inside article experiments), so that every registered
experiment either decides a claim of the articles or is an extension.

>>> len({c.id for c in CLAIMS}) == len(CLAIMS) >= 50
True
>>> sorted({c.kind for c in CLAIMS})
['claim', 'code', 'recommendation']
>>> claim("000-softmax-one-hot").covered_by
('softmax-saturation',)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._result import Result, fmt_num

__all__ = ["ARTICLES", "KINDS", "CLAIM_VERDICTS", "HEADLINE", "JSON_KEYS", "ZH", "Evidence",
           "Claim", "Extension", "Measurement", "ClaimVerdict", "ExtensionVerdict", "CLAIMS",
           "EXTENSIONS", "claim", "counts", "covering_experiments", "verdicts",
           "extension_verdicts", "to_json", "markdown"]

#: The two articles, by the number their file names start with.
ARTICLES = ("000", "001")
#: What an inventory item is: a statement, a code listing (or a line of one), or advice.
KINDS = ("claim", "code", "recommendation")
#: What the numbers say of an item.
CLAIM_VERDICTS = ("holds", "holds under stated conditions", "does not hold", "not testable")
#: :attr:`Evidence.part` that selects a result's headline relation only (not its checks).
HEADLINE = "headline"
#: The keys of :meth:`ClaimVerdict.to_json`, in order.
JSON_KEYS = ("id", "article", "kind", "quote_zh", "claim_en", "claim_zh", "covered_by",
             "conditions_en", "conditions_zh", "not_testable_en", "not_testable_zh", "verdict",
             "verdict_zh", "measured")

#: The inventory's own words in Chinese: verdicts and kinds.
ZH: dict[str, str] = {
    "holds": "成立",
    "holds under stated conditions": "在所述条件下成立",
    "does not hold": "不成立",
    "not testable": "无法检验",
    "claim": "论断",
    "code": "代码",
    "recommendation": "建议",
}


@dataclass(frozen=True)
class Evidence:
    """The part of one experiment's result that decides a claim.

    ``part`` is ``""`` for the whole result (its headline relation and every check),
    :data:`HEADLINE` for the headline relation alone, or a text: the checks whose names
    contain it (at least one must; all of them must pass). ``against``: the experiment's
    claim is the opposite of the article's, so the article's claim holds only if that part
    does *not* hold (e.g. the article says the gradient explodes, the experiment shows
    that it vanishes).
    """

    experiment: str
    part: str = ""
    against: bool = False

    def measure(self, result: Result) -> Measurement:
        """What ``result`` says for this evidence: the numbers and whether they support."""
        if result.name != self.experiment:
            raise ValueError(f"evidence for {self.experiment!r} given the result of "
                             f"{result.name!r}")
        if self.part in ("", HEADLINE):
            holds = result.holds if self.part == "" else _headline_holds(result)
            m = [(result.quantity, result.quantity_zh, result.measured, result.expected_text,
                  holds)]
        else:
            picked = [c for c in result.checks if self.part in c.name]
            if not picked:
                names = "; ".join(c.name for c in result.checks) or "none"
                raise ValueError(f"evidence {self.experiment!r}: no check of its result has "
                                 f"{self.part!r} in its name (its checks: {names})")
            m = [(c.name, None, c.value, c.expected, c.passed) for c in picked]
        return Measurement(
            experiment=self.experiment, part=self.part, against=self.against,
            quantities=tuple(x[0] for x in m), quantities_zh=tuple(x[1] for x in m),
            values=tuple(float(x[2]) for x in m), expected=tuple(x[3] for x in m),
            holds=all(x[4] for x in m), passed=result.passed)


def _headline_holds(r: Result) -> bool:
    """The headline relation alone (``Result.holds`` also requires every check)."""
    m, e, t = float(r.measured), float(r.expected), float(r.tolerance)
    if not math.isfinite(m):
        return False
    if r.relation == "==":
        return abs(m - e) <= t
    return m <= e + t if r.relation == "<=" else m >= e - t


@dataclass(frozen=True)
class Measurement:
    """The numbers one :class:`Evidence` read from its result.

    ``holds``: the selected part holds (before ``against``); ``supports``: it speaks for
    the article's claim. ``passed``: the experiment gave the verdict it expected (False is
    a defect of attnlab, not a finding).
    """

    experiment: str
    part: str
    against: bool
    quantities: tuple[str, ...]
    quantities_zh: tuple[str | None, ...]
    values: tuple[float, ...]
    expected: tuple[str, ...]
    holds: bool
    passed: bool

    @property
    def supports(self) -> bool:
        return self.holds != self.against

    def text(self) -> str:
        """One line: ``quantity = value (expected …)`` for each number, ``; ``-joined."""
        return "; ".join(f"{q}: {fmt_num(v)} (expected {e})"
                         for q, v, e in zip(self.quantities, self.values, self.expected))

    def to_json(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment,
            "part": self.part or "all",
            "against": self.against,
            "numbers": [{"quantity": q, "measured": v if math.isfinite(v) else None,
                         "expected_text": e}
                        for q, v, e in zip(self.quantities, self.values, self.expected)],
            "holds": self.holds,
            "supports": self.supports,
        }


@dataclass(frozen=True)
class Claim:
    """One claim, code listing or recommendation of an article, and what decides it."""

    id: str
    article: str
    kind: str
    quote_zh: str
    claim_en: str
    claim_zh: str
    evidence: tuple[Evidence, ...] = ()
    conditions_en: str = ""
    conditions_zh: str = ""
    not_testable_en: str = ""
    not_testable_zh: str = ""

    def __post_init__(self) -> None:
        where = f"claim {self.id!r}"
        if self.article not in ARTICLES:
            raise ValueError(f"{where}: article must be one of {ARTICLES}, got {self.article!r}")
        if self.kind not in KINDS:
            raise ValueError(f"{where}: kind must be one of {KINDS}, got {self.kind!r}")
        for f in ("id", "quote_zh", "claim_en", "claim_zh"):
            if not getattr(self, f).strip():
                raise ValueError(f"{where}: {f} is empty")
        if bool(self.conditions_en) != bool(self.conditions_zh):
            raise ValueError(f"{where}: conditions need both conditions_en and conditions_zh")
        if bool(self.not_testable_en) != bool(self.not_testable_zh):
            raise ValueError(f"{where}: not testable needs both not_testable_en and "
                             "not_testable_zh")
        if self.not_testable_en and (self.evidence or self.conditions_en):
            raise ValueError(f"{where}: a claim that is not testable has no evidence and no "
                             "conditions")
        if not self.not_testable_en and not self.evidence:
            raise ValueError(f"{where}: a testable claim needs evidence (an experiment that "
                             "decides it), or not_testable_en saying why none can")

    @property
    def testable(self) -> bool:
        return not self.not_testable_en

    @property
    def covered_by(self) -> tuple[str, ...]:
        """The experiments whose results decide this claim, each once, in order."""
        return tuple(dict.fromkeys(e.experiment for e in self.evidence))


@dataclass(frozen=True)
class Extension:
    """Something attnlab measures that is not a claim of the articles: a whole experiment
    of origin ``"attnlab"`` (``part`` empty), or the checks of an article experiment whose
    names contain ``part`` (an attnlab rule measured there)."""

    experiment: str
    what_en: str
    what_zh: str
    part: str = ""

    @property
    def whole(self) -> bool:
        """The whole experiment is attnlab's (its ``Result.origin`` is ``"attnlab"``)."""
        return not self.part


def _v(*parts: str | Evidence) -> tuple[Evidence, ...]:
    """Evidence from ``"name"``, ``"name:part"`` or ``"!name:part"`` (against)."""
    out = []
    for p in parts:
        if isinstance(p, Evidence):
            out.append(p)
            continue
        against = p.startswith("!")
        name, _, part = p.lstrip("!").partition(":")
        out.append(Evidence(name, part, against))
    return tuple(out)


_IID_EN = ("Only when the components of q and k are independent with mean 0 and variance 1; "
           "with mean μ each product has variance 1 + 2μ² (measured), and trained q, k are "
           "neither independent nor unit-variance.")
_IID_ZH = ("仅当 q、k 的各分量相互独立、均值为 0、方差为 1 时成立；若均值为 μ，每个乘积的方差变为 "
           "1 + 2μ²（实测），而训练后的 q、k 既不独立，方差也不为 1。")
_NORM_EN = ("The score is the cosine only for unit vectors: q·k = |q||k|cos θ, and the lengths "
            "carry part of the score's spread (measured per head).")
_NORM_ZH = ("只有单位向量的点积才等于夹角余弦：q·k = |q||k|cos θ，分数的波动有一部分来自向量长度"
            "（逐头实测）。")

#: Every claim, code listing and recommendation of the two articles, in reading order.
CLAIMS: tuple[Claim, ...] = (
    # ---------------------------------------------------------------- article 000
    Claim(
        "000-transformer-history", "000", "claim",
        "自 2017 年 Google 发布那篇著名的《Attention is All You Need》论文以来",
        "Since Google's 2017 paper 'Attention is All You Need', the Transformer has swept "
        "deep learning (BERT, GPT, ViT, LLMs) and become the cornerstone of modern AI.",
        "自 2017 年《Attention is All You Need》发表以来，Transformer 席卷了整个深度学习领域"
        "（BERT、GPT、ViT、大语言模型），成为现代人工智能的基石。",
        not_testable_en="A historical statement about the field; no computation decides it.",
        not_testable_zh="这是关于该领域发展史的陈述，无法用计算来判定。",
    ),
    Claim(
        "000-attention-formula", "000", "code",
        r"\text{Attention}(Q, K, V) = \text{softmax}\left(\frac{QK^T}{\sqrt{d_k}}\right)V",
        "Attention is softmax(QKᵀ/√d_k)·V: attnlab's attention computes exactly this "
        "(its scores are read back and its default scale is 1/√d_k), and the article's own "
        "listing of the formula equals attnlab's module with the same weights.",
        "注意力即 softmax(QKᵀ/√d_k)·V：attnlab 的注意力正是按此计算的（读回其分数，默认缩放为 "
        "1/√d_k），文章给出的实现与使用相同权重的 attnlab 模块结果相等。",
        _v("qk-variance:headline", "article-code:000 as printed vs attnlab"),
    ),
    Claim(
        "000-qkv-retrieval", "000", "claim",
        "借鉴了数据库检索的概念",
        "Q, K and V borrow from database retrieval: a query is matched against every key and "
        "the values are returned weighted by the match; trained on associative recall "
        "(fetch the value stored under a key), one attention head learns exactly this lookup.",
        "Q、K、V 借鉴了数据库检索：查询与每个键比对，按匹配程度加权取回值；在关联回忆任务"
        "（取回某个键下存放的值）上训练，单个注意力头确实学会了这种检索。",
        _v("scaling-training:chance"),
    ),
    Claim(
        "000-higher-score-more-weight", "000", "claim",
        "比对得分越高的词，其 $V$ （实际内容）就会被分配更大的权重",
        "The higher a key's score against the query, the larger the weight its value gets: "
        "softmax weights are exp(score) normalised, a strictly increasing function of the "
        "score (attention is kernel smoothing with the kernel exp(q·k)).",
        "键与查询的得分越高，其值向量分到的权重越大：softmax 权重是归一化后的 exp(分数)，"
        "是分数的严格增函数（注意力就是以 exp(q·k) 为核的核平滑）。",
        _v("learned-kernel:NW estimate with exp"),
    ),
    Claim(
        "000-qkv-subspaces", "000", "claim",
        "通过三个不同的矩阵，模型允许词在三个不同的几何空间中表达不同的角色",
        "W^Q, W^K and W^V project each token into three different subspaces, so that it can "
        "play different roles as query, key and value: with W_Q ≠ W_K the score of i on j "
        "differs from that of j on i (the score matrix is not symmetric).",
        "W^Q、W^K、W^V 把每个词投影到三个不同的子空间，使它作为查询、键、值时扮演不同角色："
        "W_Q ≠ W_K 时，i 对 j 的分数不同于 j 对 i 的分数（分数矩阵不对称）。",
        _v("qkv-roles"),
    ),
    Claim(
        "000-score-is-dot-product", "000", "claim",
        "的每一列（上下文词的 Key 向量）的点积",
        "Entry (i, j) of QKᵀ is the dot product of query i with key j (checked on the scores "
        "attnlab computes for queries and keys projected by an untrained attention layer).",
        "QKᵀ 的第 (i, j) 个元素就是第 i 个查询与第 j 个键的点积"
        "（在未经训练的注意力层投影得到的查询与键上，以 attnlab 计算出的分数检验）。",
        _v("dot-product-geometry:headline"),
    ),
    Claim(
        "000-dot-product-cosine", "000", "claim",
        r"\vec{a} \cdot \vec{b} = \|\vec{a}\| \|\vec{b}\| \cos\theta",
        "The dot product is |a||b|cos θ, with θ the angle between the vectors (θ measured "
        "without using the dot product).",
        "点积等于 |a||b|cos θ，θ 为两向量的夹角（θ 的测量不借助点积）。",
        _v("dot-product-geometry:headline"),
    ),
    Claim(
        "000-direction-similarity", "000", "claim",
        "抛开向量长度不看，点积的核心意义在于衡量两个向量在方向上的相似度",
        "Leaving lengths aside, the dot product measures how similar two directions are: the "
        "smaller the angle, the larger the score.",
        "抛开向量长度，点积衡量的是两个方向的相似度：夹角越小，分数越大。",
        _v("dot-product-geometry"),
        conditions_en=_NORM_EN, conditions_zh=_NORM_ZH,
    ),
    Claim(
        "000-orthogonal-unrelated", "000", "claim",
        "夹角接近 90 度（正交），点积趋近于 0，说明两者毫无关系",
        "When query and key are orthogonal (θ ≈ 90°), their dot product is near 0: the "
        "two are unrelated.",
        "查询与键正交（θ ≈ 90°）时，点积接近 0，说明两者毫无关系。",
        _v("dot-product-geometry:headline"),
        conditions_en="'Unrelated' only as a score: softmax still gives a key of score 0 the "
                      "weight exp(0)/Σ_j exp(s_j), more than any key with a negative score; "
                      "zero weight needs a score of −∞ (a mask).",
        conditions_zh="“毫无关系”只是就分数而言：softmax 仍会给分数为 0 的键分配 "
                      "exp(0)/Σ_j exp(s_j) 的权重，比任何分数为负的键都多；权重为 0 需要分数为"
                      "负无穷（掩码）。",
    ),
    Claim(
        "000-global-similarity-graph", "000", "claim",
        "实际上是构建了一个全局相似度图",
        "QKᵀ builds a global similarity graph: entry (i, j) is the weight of the edge from "
        "token i to token j, for every pair.",
        "QKᵀ 构建了一个全局相似度图：第 (i, j) 个元素是从第 i 个词到第 j 个词那条边的权重，"
        "每一对词之间都有边。",
        _v("dynamic-graph"),
    ),
    Claim(
        "000-qk-mean-zero", "000", "claim",
        "的数学期望为 0",
        "For q, k with independent components of mean 0 and variance 1, E[q·k] = 0.",
        "当 q、k 的各分量独立、均值为 0、方差为 1 时，E[q·k] = 0。",
        _v("qk-variance:μ = 0"),
        conditions_en=_IID_EN, conditions_zh=_IID_ZH,
    ),
    Claim(
        "000-qk-variance-dk", "000", "claim",
        "但方差会随着维度 $d_k$ 的增大而线性增大（即为 $d_k$ ）",
        "Under the same assumptions, Var(q·k) grows linearly with d_k: it equals d_k.",
        "在同样的假设下，Var(q·k) 随 d_k 线性增长：恰为 d_k。",
        _v("qk-variance"),
        conditions_en=_IID_EN, conditions_zh=_IID_ZH,
    ),
    Claim(
        "000-large-scores", "000", "claim",
        "点积的结果会变得非常大，导致不同词之间的得分差异极其悬殊",
        "When d_k is large (64 or 128), the raw scores spread widely (standard deviation √d_k) "
        "and the differences between keys become extreme.",
        "当 d_k 很大（如 64 或 128）时，未缩放的分数分布很宽（标准差为 √d_k），"
        "不同键之间的得分差异极其悬殊。",
        _v("qk-variance", "softmax-saturation:headline"),
        conditions_en=_IID_EN, conditions_zh=_IID_ZH,
    ),
    Claim(
        "000-softmax-one-hot", "000", "claim",
        "使得 Softmax 的输出趋近于 One-Hot 分布",
        "Fed such unscaled scores, softmax approaches a one-hot distribution: the largest "
        "weight tends to 1, the entropy to 0.",
        "把这样未缩放的分数送入 softmax，输出趋近 one-hot 分布：最大权重趋于 1，熵趋于 0。",
        _v("softmax-saturation"),
    ),
    Claim(
        "000-gradient-vanishes", "000", "claim",
        "梯度会变得非常趋近于 0（梯度消失），导致模型无法有效更新参数",
        "In that regime the softmax gradient tends to 0 (it vanishes) and the model cannot "
        "update its parameters effectively: trained without the scale, a model with a large "
        "head dimension learns much worse.",
        "在这种情况下 softmax 的梯度趋于 0（梯度消失），模型无法有效更新参数：不做缩放时，"
        "头维度较大的模型训练效果明显更差。",
        _v("softmax-saturation:gradient vanishes", "scaling-training"),
    ),
    Claim(
        "000-scale-variance-one", "000", "claim",
        "强行将点积的方差拉回 1",
        "Dividing by √d_k is a variance normalisation: it brings the score variance back to 1.",
        "除以 √d_k 相当于一次方差归一化：把分数的方差拉回到 1。",
        _v("qk-variance"),
        conditions_en=_IID_EN, conditions_zh=_IID_ZH,
    ),
    Claim(
        "000-scale-any-dimension", "000", "claim",
        "保证了无论特征维度多高，Softmax 都能工作在一个梯度稳定的非线性敏感区",
        "With the scale, softmax works in the same sensitive, stable-gradient regime whatever "
        "the dimension: its largest weight, entropy and Jacobian stay flat in d_k.",
        "缩放之后，无论维度多高，softmax 都工作在同一个梯度稳定的敏感区："
        "最大权重、熵和雅可比矩阵都不随 d_k 变化。",
        _v("softmax-saturation"),
        conditions_en=_IID_EN, conditions_zh=_IID_ZH,
    ),
    Claim(
        "000-probability-matrix", "000", "claim",
        "概率转移矩阵",
        "After the softmax, A is an N × N probability (row-stochastic) matrix: every entry is "
        "non-negative and every row sums to 1.",
        "softmax 之后，A 是一个 N × N 的概率转移（行随机）矩阵：每个元素非负，每行之和为 1。",
        _v("convex-combination"),
    ),
    Claim(
        "000-convex-combination", "000", "claim",
        "这是一个向量的凸组合（因为 $A_{i,j}$ 加起来等于 1）",
        "Output_i = Σ_j A_ij V_j is a convex combination of the values, a weighted centroid: "
        "every output lies in the convex hull of the value vectors (this needs the weights to "
        "be non-negative as well as to sum to 1; softmax gives both).",
        "Output_i = Σ_j A_ij V_j 是值向量的凸组合，即加权重心：每个输出都落在值向量的凸包内"
        "（这既需要权重之和为 1，也需要权重非负；softmax 两者兼具）。",
        _v("convex-combination"),
    ),
    Claim(
        "000-apple-context", "000", "claim",
        "比如“苹果”这个词，如果周围有“吃”字",
        "Attention contextualises a word: the output vector of 苹果 (apple) moves towards the "
        "fruit meaning next to 吃 (eat) and towards the tech-company meaning next to 发布会 "
        "(product launch).",
        "注意力使词的表示语境化：在“吃”旁边，“苹果”的输出向量偏向“水果”的语义；"
        "在“发布会”旁边，则偏向“科技公司”的语义。",
        _v("contextualisation"),
        conditions_en="Measured on a real pretrained model (SmolLM2) with a handful of "
                      "sentences and reference words, not on every model or context.",
        conditions_zh="在真实的预训练模型（SmolLM2）上用少量句子和参照词测得，"
                      "并非对所有模型和语境都成立。",
    ),
    Claim(
        "000-multihead-formula", "000", "code",
        r"\text{MultiHead}(Q, K, V) = \text{Concat}(\text{head}_1, \dots, \text{head}_h) W^O",
        "Multi-head attention concatenates the heads' outputs and multiplies by W^O; "
        "the articles' listings (000 as printed, 001 once corrected) compute exactly this, "
        "equal to attnlab's modules with the same weights.",
        "多头注意力把各头的输出拼接起来再乘以 W^O；两篇文章的代码（000 按原样、001 修正后）"
        "都正是这样计算的，与使用相同权重的 attnlab 模块结果相等。",
        _v("article-code:000 as printed vs attnlab", "article-code:001 with the"),
    ),
    Claim(
        "000-one-relation-per-head", "000", "claim",
        "它只能学到一种关系模式",
        "A single attention head can learn only one relation pattern: a task that needs two "
        "relations at once is solved by two heads but not by one head of the same total size.",
        "单个注意力头只能学到一种关系模式：需要同时用到两种关系的任务，两个头能学会，"
        "而总维度相同的单个头学不会。",
        _v("one-relation-per-head"),
    ),
    Claim(
        "000-orthogonal-subspaces", "000", "claim",
        "将高维语义空间正交分解为多个低秩子空间",
        "Multi-head attention decomposes the semantic space orthogonally into low-rank "
        "subspaces, one per head. attnlab tests a consequence: heads start from random "
        "subspaces about 63° apart, so training would have to push them apart, towards 90°; "
        "it measures the change of the mean principal angle between the heads' W_q and W_k "
        "subspaces during training.",
        "多头注意力把高维语义空间正交分解为若干低秩子空间，每个头一个。attnlab 检验它的一个推论："
        "各头从彼此相距约 63° 的随机子空间出发，训练必须把它们推开、趋向 90°；"
        "因此测量训练前后各头 W_q、W_k 子空间之间平均主夹角的变化。",
        _v("multihead-cost:headline"),
    ),
    Claim(
        "000-head-low-dim-subspace", "000", "claim",
        "每个观察者都被强制投影到一个特定的低维子空间中",
        "Each head reads the input through its own d/h-dimensional subspace (its slice of "
        "W^Q, W^K, W^V), and h heads together cost what one head of size d costs.",
        "每个头都通过自己的 d/h 维子空间（W^Q、W^K、W^V 中属于它的切片）读取输入，"
        "h 个头合起来的代价与一个 d 维的头相同。",
        _v("multihead-cost:params"),
    ),
    Claim(
        "000-head-examples", "000", "claim",
        "Head 3 可能专注于寻找句号，以便断句",
        "In an 8-head model, head 1 might compute subject–verb relations, head 2 "
        "adjective–noun modification, head 3 might look for full stops to split sentences.",
        "在 8 个头的模型里，头 1 可能专门计算主谓关系，头 2 计算形容词修饰名词的关系，"
        "头 3 可能专注于寻找句号以便断句。",
        not_testable_en="Hypothetical examples ('may'): they name no model and no head, and "
                        "deciding syntactic roles such as subject–verb needs annotated parses.",
        not_testable_zh="这是假设性的举例（“可能”）：没有指明模型和头，而判定主谓等句法关系"
                        "需要带句法标注的语料。",
    ),
    Claim(
        "000-gradient-descent-diversifies", "000", "claim",
        "梯度下降会驱使它们收敛到不同的表征子空间",
        "Because the heads' W matrices are initialised differently, gradient descent drives "
        "them to converge to different representation subspaces: the mean principal angle "
        "between the heads' W_q and W_k subspaces should grow during training.",
        "由于各个头的 W 矩阵初始化不同，梯度下降会驱使它们收敛到不同的表征子空间："
        "各头 W_q、W_k 子空间之间的平均主夹角应当在训练中增大。",
        _v("multihead-cost:headline"),
    ),
    Claim(
        "000-wo-lossless", "000", "claim",
        "实现了信息的无损多视角融合",
        "Concatenating the heads and projecting with W^O fuses the views without loss of "
        "information.",
        "把各头拼接后经 W^O 投影回原维度，实现了信息的无损多视角融合。",
        _v("wo-fusion"),
        conditions_en="Lossless only when W^O is invertible (full rank): then the heads' "
                      "outputs can be recovered from the fused output; a rank-deficient W^O "
                      "loses information.",
        conditions_zh="仅当 W^O 可逆（满秩）时才无损：此时能从融合后的输出恢复各头的输出；"
                      "秩亏的 W^O 会丢失信息。",
    ),
    Claim(
        "000-multihead-no-extra-cost", "000", "claim",
        "多头注意力不仅没有增加计算复杂度（总维度不变）",
        "With d_k = d_model / h, multi-head attention costs the same as one head of size "
        "d_model: the same parameters and the same FLOPs.",
        "取 d_k = d_model / h 时，多头注意力与一个 d_model 维的单头代价相同：参数量相同，"
        "FLOPs 也相同。",
        _v("multihead-cost:params", "multihead-cost:FLOPs"),
    ),
    Claim(
        "000-multihead-efficiency", "000", "claim",
        "极大提升了模型的参数效率和非线性表达能力",
        "Splitting into heads greatly improves parameter efficiency and expressiveness: at "
        "the same parameter count, h heads express relations one head cannot.",
        "切分成多个头极大提升了参数效率和表达能力：参数量相同，多个头能表达单个头表达不了的关系。",
        _v("multihead-cost:params", "one-relation-per-head"),
        conditions_en="Shown on a task that needs two relations at once; 'greatly' and "
                      "'nonlinear expressiveness' have no measure in the article.",
        conditions_zh="在一个同时需要两种关系的任务上得到验证；文中的“极大”和“非线性表达能力”"
                      "没有给出度量。",
    ),
    Claim(
        "000-listing-pure-self-attention", "000", "code",
        "class PureSelfAttention(nn.Module):",
        "Article 000's PureSelfAttention listing runs as printed (its own __main__ test too) "
        "and computes the same outputs and weights as attnlab's SelfAttention with the same "
        "weights.",
        "文章 000 的 PureSelfAttention 代码可按原样运行（包括它自带的 __main__ 测试），"
        "其输出和权重与使用相同权重的 attnlab SelfAttention 相等。",
        _v("article-code:000 as printed"),
    ),
    Claim(
        "000-listing-weights-sum-to-one", "000", "code",
        "它对所有词的注意力权重之和应该为 1",
        "The listing's test prints the sum of one row of attention weights, which must be 1.",
        "代码的测试部分打印一行注意力权重之和，它应当为 1。",
        _v("article-code:000 as printed", "convex-combination:row sum"),
    ),
    Claim(
        "000-scale-comment", "000", "code",
        "这是防止梯度消失的关键数学步骤",
        "The listing's comment: dividing the scores by √(head_dim) is the key step that "
        "prevents vanishing gradients.",
        "代码注释：把分数除以 √(head_dim) 是防止梯度消失的关键数学步骤。",
        _v("softmax-saturation", "scaling-training"),
    ),
    Claim(
        "000-matmul-is-qkt", "000", "code",
        "这一行，完美对应了我们上文讨论的",
        "The line scores = torch.matmul(Q, K.transpose(-2, -1)) is exactly the QKᵀ of the "
        "formula: the listing's scores and weights equal attnlab's with the same weights.",
        "scores = torch.matmul(Q, K.transpose(-2, -1)) 这一行正对应公式中的 QKᵀ："
        "代码算出的分数与权重和使用相同权重的 attnlab 相等。",
        _v("article-code:000 as printed vs attnlab"),
    ),
    Claim(
        "000-view-transpose-split", "000", "code",
        "正是多头机制在代码层面“切分高维空间”的具体体现",
        "view and transpose are how the code splits the space into heads: head i gets the "
        "i-th slice of d/h dimensions, and the split-then-merge listing equals attnlab's "
        "multi-head attention.",
        "view 与 transpose 就是代码层面“切分高维空间”的方式：第 i 个头得到第 i 段 d/h 维，"
        "先切分再合并的实现与 attnlab 的多头注意力相等。",
        _v("article-code:000 as printed", "multihead-cost:params"),
    ),
    Claim(
        "000-dynamic-graph", "000", "claim",
        "Transformer 构建的是一个全连接图，并且图上的权重是随着输入样本的不同而实时计算出来的",
        "Self-attention is message passing on a complete graph whose edge weights are computed "
        "from each input: every edge has weight > 0 and another input gives other weights.",
        "自注意力是在一个完全图上传递信息，边权由每个输入实时算出：每条边的权重都大于 0，"
        "换一个输入，权重也随之改变。",
        _v("dynamic-graph"),
    ),
    Claim(
        "000-gnn-fixed-topology", "000", "claim",
        "不同于传统的图神经网络（GNN）依靠固定的拓扑图进行消息传递",
        "Unlike traditional graph neural networks, which pass messages on a fixed topology.",
        "与传统图神经网络（GNN）依靠固定拓扑图传递消息不同。",
        not_testable_en="A statement about other architectures (and not true of all of them: "
                        "graph attention networks compute input-dependent weights too); attnlab "
                        "implements no GNN.",
        not_testable_zh="这是关于其他架构的陈述（且并非对所有 GNN 都成立：图注意力网络的权重也"
                        "随输入而变）；attnlab 不实现 GNN。",
    ),
    Claim(
        "000-neighbour-aggregation", "000", "claim",
        "Self-Attention 本质上完成了一次“动态邻居聚合”",
        "Self-attention performs a dynamic neighbourhood aggregation; without positions it "
        "treats the tokens as a set (permutation-equivariant), like aggregation on a graph.",
        "自注意力本质上完成了一次“动态邻居聚合”；不加位置信息时它把词看作集合"
        "（对置换等变），就像图上的聚合一样。",
        _v("dynamic-graph"),
    ),
    Claim(
        "000-kernel-smoothing", "000", "claim",
        "Transformer 注意力机制在数学本质上就是一个可学习的核平滑方法",
        "Attention is, mathematically, a learnable kernel smoother: the Nadaraya–Watson "
        "estimator Σ K(x, x_i) y_i / Σ K(x, x_j).",
        "注意力在数学上就是一种可学习的核平滑方法：即 Nadaraya–Watson 估计 "
        "Σ K(x, x_i) y_i / Σ K(x, x_j)。",
        _v("kernel-smoothing", "learned-kernel:NW estimate with exp"),
    ),
    Claim(
        "000-learned-similarity-kernel", "000", "claim",
        "自适应地学习出了一个“语义相似度核函数”",
        "Instead of a fixed Euclidean or Gaussian kernel, W^Q and W^K learn a similarity "
        "kernel from data: softmax attention is Nadaraya–Watson regression with the kernel "
        "exp(q·k), and training W^Q, W^K changes that kernel.",
        "注意力不用固定的欧氏距离或高斯核，而是由 W^Q 和 W^K 从数据中学出一个相似度核函数："
        "softmax 注意力就是以 exp(q·k) 为核的 Nadaraya–Watson 回归，训练 W^Q、W^K 会改变这个核。",
        _v("learned-kernel"),
    ),
    Claim(
        "000-summary-orthogonal-roles", "000", "claim",
        "线性投影：让词在多个正交子空间中扮演不同角色",
        "Summary: the linear projections let each word play different roles in several "
        "orthogonal subspaces (different roles: qkv-roles; orthogonality, through the change "
        "of the heads' principal angles in training: multihead-cost).",
        "总结：线性投影让词在多个正交子空间中扮演不同角色（不同角色见 qkv-roles；"
        "正交性通过训练前后各头主夹角的变化检验，见 multihead-cost）。",
        _v("qkv-roles", "multihead-cost:headline"),
    ),
    Claim(
        "000-summary-cosine", "000", "claim",
        "本质是在计算高维向量之间的夹角余弦，衡量语义相似度",
        "Summary: QKᵀ computes the cosine of the angle between high-dimensional vectors, a "
        "measure of semantic similarity.",
        "总结：QKᵀ 本质上是在计算高维向量之间的夹角余弦，衡量语义相似度。",
        _v("dot-product-geometry"),
        conditions_en=_NORM_EN, conditions_zh=_NORM_ZH,
    ),
    Claim(
        "000-summary-collective-wisdom", "000", "claim",
        "类似多个独立观察者的集体智慧，捕捉多粒度的复杂关系",
        "Summary: multi-head attention is like the collective wisdom of several independent "
        "observers, capturing relations at several granularities.",
        "总结：多头机制类似多个独立观察者的集体智慧，能捕捉多粒度的复杂关系。",
        not_testable_en="A metaphor: 'collective wisdom' and 'granularity' have no measurable "
                        "definition (the testable parts are 000-one-relation-per-head and "
                        "000-head-low-dim-subspace).",
        not_testable_zh="这是比喻：“集体智慧”“多粒度”都没有可测量的定义（其中可检验的部分见 "
                        "000-one-relation-per-head 和 000-head-low-dim-subspace）。",
    ),
    Claim(
        "000-next-generation", "000", "claim",
        "再去学习 Mamba、RWKV、Linear Attention 等下一代非 Transformer 架构时",
        "With this understanding one sees at a glance which mathematical bottleneck of the "
        "Transformer Mamba, RWKV or Linear Attention optimises.",
        "理解了这些，再学习 Mamba、RWKV、Linear Attention 等架构时，就能一眼看透它们优化的是 "
        "Transformer 的哪个数学瓶颈。",
        not_testable_en="A statement about the reader and about other architectures; attnlab's "
                        "own linear-attention experiment measures one such bottleneck "
                        "(quadratic cost), which the article does not state.",
        not_testable_zh="这是关于读者和其他架构的陈述；attnlab 自己的 linear-attention 实验测量了"
                        "其中一个瓶颈（平方复杂度），但文章并未给出这一论断。",
    ),
    Claim(
        "000-math-scalpel", "000", "claim",
        "数学，永远是揭开 AI 黑盒最锐利的那把手术刀",
        "Mathematics is always the sharpest scalpel for opening the AI black box.",
        "数学永远是揭开 AI 黑盒最锐利的手术刀。",
        not_testable_en="An opinion and a metaphor.",
        not_testable_zh="这是观点与比喻。",
    ),
    # ---------------------------------------------------------------- article 001
    Claim(
        "001-geometric-meaning", "001", "claim",
        "才发现原来这些操作背后都有直观的几何意义",
        "The author found, through 3Blue1Brown's videos, that these operations have an "
        "intuitive geometric meaning.",
        "作者通过 3Blue1Brown 的视频发现，这些操作背后都有直观的几何意义。",
        not_testable_en="A personal experience; the geometric statements themselves are "
                        "inventoried separately.",
        not_testable_zh="这是个人经历；其中具体的几何论断另行列出。",
    ),
    Claim(
        "001-positions-needed", "001", "claim",
        "传统 RNN 通过时间步记录位置信息，而 Transformer 的位置编码公式看起来有点神秘",
        "An RNN records position through its time steps; a Transformer needs a positional "
        "encoding: attention alone is permutation-equivariant (it sees a set), and adding the "
        "sinusoidal encoding breaks that.",
        "RNN 通过时间步记录位置，Transformer 则需要位置编码：单靠注意力对输入的置换等变"
        "（看到的是集合），加入正弦位置编码后不再等变。",
        _v("dynamic-graph"),
    ),
    Claim(
        "001-pe-formula", "001", "code",
        r"PE_{(pos,2i)} = \sin\left(\frac{pos}{10000^{2i/d_{\text{model}}}}\right)",
        "The sinusoidal encoding PE(pos, 2i) = sin(pos / 10000^(2i/d_model)) (and cos at "
        "2i + 1), as attnlab's table computes it.",
        "正弦位置编码 PE(pos, 2i) = sin(pos / 10000^(2i/d_model))（2i + 1 维为 cos），"
        "attnlab 的位置编码表按此计算。",
        _v("pe-relative-position"),
    ),
    Claim(
        "001-wavelengths-exponential", "001", "claim",
        "使得不同维度 $i$ 的波长呈指数增长",
        "The factor 10000^(2i/d_model) makes the wavelengths grow exponentially with i, from "
        "2π to almost 10000·2π.",
        "因子 10000^(2i/d_model) 使波长随 i 指数增长，从 2π 一直到接近 10000·2π。",
        _v("pe-relative-position:wavelength"),
    ),
    Claim(
        "001-frequency-roles", "001", "claim",
        "低频（大波长）捕获长距离依赖，高频（小波长）记录局部位置",
        "Low frequencies (long wavelengths) capture long-range dependencies, high frequencies "
        "(short wavelengths) record local position.",
        "低频（长波长）捕获长距离依赖，高频（短波长）记录局部位置。",
        _v("pe-frequency-roles"),
        conditions_en="Shown for what one (sin, cos) pair can tell about an offset, decoded "
                      "from its phase under a small readout noise; not a statement about which "
                      "dimensions a trained model uses.",
        conditions_zh="所检验的是单个 (sin, cos) 维度对在少量读出噪声下从相位差能解码出多少偏移"
                      "信息，而不是训练后的模型实际使用哪些维度。",
    ),
    Claim(
        "001-pe-linear-shift", "001", "claim",
        "能表示为 $PE_{pos}$ 的线性组合",
        "By the angle-sum formulas, PE[pos + k] is a linear function of PE[pos]: one rotation "
        "M_k, the same for every pos.",
        "由三角函数的和角公式，PE[pos + k] 是 PE[pos] 的线性函数：对所有 pos 都是同一个旋转 M_k。",
        _v("pe-relative-position"),
    ),
    Claim(
        "001-relative-position-learned", "001", "claim",
        "这正是模型能学到相对位置的关键",
        "This linearity is the key that lets a model learn relative positions: a model given "
        "sinusoidal encodings learns a task defined by an offset.",
        "这种线性关系正是模型能学到相对位置的关键：使用正弦位置编码的模型能学会由相对偏移定义的"
        "任务。",
        _v("relative-position-learned"),
        conditions_en="Measured with queries and keys that read only the positional encoding; "
                      "when they read token + position (the usual input), the trained model "
                      "generalises to unseen positions only in part (also measured).",
        conditions_zh="在查询和键只读取位置编码时测得；若读取“词元 + 位置”（通常的输入），"
                      "训练后的模型只能部分推广到未见过的位置（同样实测）。",
    ),
    Claim(
        "001-dot-product-cosine", "001", "claim",
        "本质上是在计算向量夹角余弦值（相似度）",
        "Each query–key dot product essentially computes the cosine of the angle between them "
        "(a similarity).",
        "每个查询与键的点积，本质上是在计算两者夹角的余弦（相似度）。",
        _v("dot-product-geometry"),
        conditions_en=_NORM_EN, conditions_zh=_NORM_ZH,
    ),
    Claim(
        "001-scale-prevents-saturation", "001", "claim",
        "缩放因子 $\\sqrt{d_k}$ 防止点积结果过大导致 softmax 饱和",
        "The √d_k scale keeps the dot products from growing so large that softmax saturates.",
        "缩放因子 √d_k 防止点积过大而导致 softmax 饱和。",
        _v("softmax-saturation"),
    ),
    Claim(
        "001-light-intensity", "001", "claim",
        "你会看到类似「光照强度」的分布，亮的区域就是模型聚焦的位置",
        "Visualised, the attention weights look like a distribution of light intensity; the "
        "bright regions are where the model focuses.",
        "可视化注意力权重时，会看到类似“光照强度”的分布，亮的区域就是模型聚焦的位置。",
        not_testable_en="A visual metaphor for a heat map; 'focus' is not defined beyond the "
                        "weights themselves.",
        not_testable_zh="这是对热力图的视觉比喻；“聚焦”除了权重本身之外没有别的定义。",
    ),
    Claim(
        "001-listing-multi-head-attention", "001", "code",
        "class MultiHeadAttention(nn.Module):",
        "Article 001's MultiHeadAttention listing runs as printed and computes multi-head "
        "attention.",
        "文章 001 的 MultiHeadAttention 代码可按原样运行，并正确计算多头注意力。",
        _v("article-code:headline"),
    ),
    Claim(
        "001-listing-corrected", "001", "code",
        "先看最核心的 MultiHeadAttention 类（已精简非关键代码）",
        "Once its defects are fixed (the `if mask` swallowed by a comment, n_heads and d_model "
        "never set, k and v never split into heads), the listing equals attnlab's "
        "MultiHeadAttention with the same weights, with and without masks.",
        "修正其缺陷之后（`if mask` 被注释吞掉、从未设置 n_heads 和 d_model、k 和 v 没有切分成"
        "多个头），该代码与使用相同权重的 attnlab MultiHeadAttention 结果相等，无论是否使用掩码。",
        _v("article-code:001 with the"),
        conditions_en="Only after the fixes attnlab lists; as printed it does not run.",
        conditions_zh="仅在 attnlab 列出的修正之后成立；按原样它无法运行。",
    ),
    Claim(
        "001-einsum-one-line", "001", "code",
        "一句搞定多头矩阵乘法，避免手动 permute 维度",
        "torch.einsum('bhqd,bhkd->bhqk', q, k) does the multi-head matrix product in one line, "
        "without permuting dimensions by hand; the einsum formulation equals attnlab's "
        "multi-head attention.",
        "torch.einsum('bhqd,bhkd->bhqk', q, k) 一句完成多头矩阵乘法，无需手动 permute 维度；"
        "einsum 写法与 attnlab 的多头注意力结果相等。",
        _v("article-code:einsum"),
    ),
    Claim(
        "001-fused-qkv-faster", "001", "claim",
        "一次性计算 QKV，比分开三次计算更快",
        "Computing Q, K, V with one nn.Linear(d_model, 3·d_model) is faster than three "
        "separate projections.",
        "用一个 nn.Linear(d_model, 3·d_model) 一次性计算 Q、K、V，比分开三次投影更快。",
        _v("fused-qkv-speed:headline"),
    ),
    Claim(
        "001-fused-qkv-same", "001", "code",
        "self.qkv_proj = nn.Linear(d_model, 3*d_model)",
        "One fused projection with the three weights stacked gives the same q, k, v as three "
        "separate projections, with the same FLOPs.",
        "把三个权重堆叠成一个融合投影，得到的 q、k、v 与分开三次投影相同，FLOPs 也相同。",
        _v("fused-qkv-speed:same q, k, v", "fused-qkv-speed:FLOPs"),
    ),
    Claim(
        "001-contiguous-before-view", "001", "claim",
        "转置操作后必须调用以保证内存连续性，否则 view 会报错",
        "After a transpose, contiguous() must be called before view, otherwise view raises an "
        "error.",
        "转置之后必须先调用 contiguous() 保证内存连续，否则 view 会报错。",
        _v("article-code:view after transpose", "article-code:reshape vs contiguous"),
        conditions_en="view raises for the (B, H, L, d) → (B, L, H·d) merge measured here; "
                      "reshape does the same without the call.",
        conditions_zh="此处实测的 (B, H, L, d) → (B, L, H·d) 合并中 view 会报错；"
                      "用 reshape 则无需这一调用。",
    ),
    Claim(
        "001-large-dk-saturation", "001", "claim",
        "的值可能非常大，导致 softmax 进入饱和区",
        "When d_k is large, the values of QKᵀ can be very large and push softmax into its "
        "saturated region.",
        "当 d_k 较大时，QKᵀ 的值可能非常大，使 softmax 进入饱和区。",
        _v("softmax-saturation:headline"),
    ),
    Claim(
        "001-gradient-explosion", "001", "claim",
        "梯度爆炸问题",
        "Large unscaled scores cause exploding gradients (the section is titled 'the gradient "
        "explosion problem'); attnlab measures that the softmax gradient vanishes instead.",
        "未缩放的大分数会导致梯度爆炸（该节标题为“梯度爆炸问题”）；attnlab 实测的结果却是 "
        "softmax 的梯度趋于消失。",
        _v("!softmax-saturation:no explosion", "!softmax-saturation:gradient vanishes"),
    ),
    Claim(
        "001-always-scale", "001", "recommendation",
        "一定要用缩放因子 $1/\\sqrt{d_k}$",
        "Always use the 1/√d_k scale: trained with it, a model with a large head dimension "
        "learns; without it, it does not.",
        "一定要用缩放因子 1/√d_k：使用它时，头维度较大的模型能学会任务；不使用则学不会。",
        _v("scaling-training", "softmax-saturation"),
    ),
    Claim(
        "001-small-init-uniform", "001", "code",
        "nn.init.xavier_normal_(layer.weight, gain=0.02)",
        "With the projections initialised by xavier_normal_ (or xavier_uniform_) at gain 0.02, "
        "the initial attention is near-uniform instead of saturated, and the initial entropy "
        "falls as the gain grows.",
        "用 xavier_normal_（或 xavier_uniform_）以增益 0.02 初始化投影矩阵时，初始注意力接近均匀"
        "而不是饱和；增益越大，初始熵越低。",
        _v("init-scale:initial entropy / log N", "init-scale:entropy never rises",
           "init-scale:normalised entropy at gain"),
    ),
    Claim(
        "001-small-init", "001", "recommendation",
        "初始化时适当调小线性层的权重",
        "Against large scores and saturation, initialise the linear layers smaller (e.g. "
        "xavier_normal_ with gain 0.02): trained on associative recall from the same "
        "directions and batches, the model should then reach a lower loss than with the "
        "default gain 1.0.",
        "为避免分数过大、softmax 饱和，初始化时适当调小线性层的权重（如 xavier_normal_ 取增益 "
        "0.02）：在关联回忆任务上从相同的初始方向、用相同批次训练，模型的最终损失应低于默认增益 "
        "1.0。",
        _v("init-scale:headline", "init-scale:final loss"),
    ),
    Claim(
        "001-check-row-sums", "001", "recommendation",
        "每行的注意力权重求和是否为 1",
        "When debugging, check that each row of attention weights sums to 1 "
        "(torch.allclose(attn.sum(dim=-1), ...)); the check holds on correct weights and "
        "flags weights normalised over the wrong axis.",
        "调试时检查每行注意力权重之和是否为 1（torch.allclose(attn.sum(dim=-1), ...)）："
        "正确的权重能通过检查，沿错误维度归一化的权重会被发现。",
        _v("article-code:tip: torch.allclose", "article-code:the two tips flag"),
    ),
    Claim(
        "001-check-mask", "001", "recommendation",
        "掩码位置的值是否真的是负无穷",
        "When debugging, check the masked positions with attn.masked_fill(mask==0, 0).sum() == "
        "attn.sum(); the check holds on correctly masked weights and flags weights computed "
        "without the mask.",
        "调试时用 attn.masked_fill(mask==0, 0).sum() == attn.sum() 检查掩码位置："
        "正确遮蔽的权重能通过检查，未加掩码算出的权重会被发现。",
        _v("article-code:masked_fill(mask==0, 0)", "article-code:the two tips flag"),
        conditions_en="The printed check compares weights after the softmax, where masked "
                      "positions are exactly 0, not −∞; the scores before it are −∞.",
        conditions_zh="文中的检查比较的是 softmax 之后的权重，被遮蔽位置恰为 0 而不是负无穷；"
                      "softmax 之前的分数才是负无穷。",
    ),
    Claim(
        "001-mask-minus-infinity", "001", "code",
        "scores = scores.masked_fill(mask == 0, float('-inf'))",
        "Setting the masked scores to −∞ before the softmax gives the masked positions a "
        "weight of exactly 0, and with a causal mask no gradient flows from the future.",
        "在 softmax 之前把被遮蔽的分数设为负无穷，被遮蔽位置的权重恰好为 0；"
        "使用因果掩码时，未来位置不会传回梯度。",
        _v("masking:masked positions", "masking:headline"),
    ),
    Claim(
        "001-variance-dk", "001", "claim",
        "的方差就是 $d_k$",
        "For q, k with i.i.d. components of mean 0 and variance 1, Var(q·k) = d_k.",
        "当 q、k 的各分量独立同分布、均值为 0、方差为 1 时，Var(q·k) = d_k。",
        _v("qk-variance"),
        conditions_en=_IID_EN, conditions_zh=_IID_ZH,
    ),
    Claim(
        "001-scale-stabilises", "001", "claim",
        "缩放 $1/\\sqrt{d_k}$ 正好使方差回归到 1，保持梯度稳定性",
        "Scaling by 1/√d_k brings the variance back to exactly 1 and keeps the gradients "
        "stable.",
        "乘以 1/√d_k 正好使方差回到 1，保持梯度稳定。",
        _v("qk-variance", "softmax-saturation"),
        conditions_en=_IID_EN, conditions_zh=_IID_ZH,
    ),
    Claim(
        "001-heatmap-code", "001", "code",
        "plt.matshow(attn[0,0].detach().numpy(), cmap='Reds')",
        "A heat map of the first head's attention matrix (plt.matshow of attn[0, 0]).",
        "绘制第一个头的注意力矩阵热力图（对 attn[0, 0] 调用 plt.matshow）。",
        not_testable_en="A plotting snippet with nothing to compute: it draws whatever attn "
                        "holds (attn is local to the listing's forward, which never returns it).",
        not_testable_zh="这是一段绘图代码，没有可计算的内容：它画出 attn 中的任何内容"
                        "（而 attn 是代码 forward 内部的局部变量，从未被返回）。",
    ),
    Claim(
        "001-debug-small-data", "001", "recommendation",
        "先用小规模数据调试注意力机制",
        "Debug the attention mechanism on small data first.",
        "先用小规模数据调试注意力机制。",
        not_testable_en="Workflow advice; no measurement decides it.",
        not_testable_zh="这是关于工作流程的建议，无法用测量来判定。",
    ),
    Claim(
        "001-use-einsum", "001", "recommendation",
        "善用 einsum 处理复杂张量运算",
        "Use einsum for complex tensor operations: the einsum formulation of multi-head "
        "attention equals attnlab's.",
        "善用 einsum 处理复杂张量运算：多头注意力的 einsum 写法与 attnlab 的结果相等。",
        _v("article-code:einsum"),
    ),
    Claim(
        "001-use-nn-transformer", "001", "recommendation",
        "官方 nn.Transformer 已经高度优化，生产环境建议直接使用",
        "The official nn.Transformer is highly optimised; use it directly in production.",
        "官方 nn.Transformer 已经高度优化，生产环境建议直接使用。",
        not_testable_en="Advice about production use: fused-qkv-speed times torch's encoder "
                        "layer against attnlab's and the corrected listing's for information, "
                        "but what production should use is not a measurement.",
        not_testable_zh="这是关于生产环境的建议：fused-qkv-speed 实验把 torch 的编码器层与 "
                        "attnlab 的以及修正后的文章代码计时对比，仅供参考；生产中该用什么，"
                        "不是测量能判定的。",
    ),
)

#: What attnlab measures beyond the two articles.
EXTENSIONS: tuple[Extension, ...] = (
    Extension("rope-relative",
              "Rotary position embeddings: the score ⟨R_m q, R_n k⟩ depends only on m − n.",
              "旋转位置编码：分数 ⟨R_m q, R_n k⟩ 只取决于 m − n。"),
    Extension("linear-attention",
              "elu+1 linear attention: its recurrent (RNN) form equals its parallel form, and "
              "its cost grows linearly in N.",
              "elu+1 线性注意力：递归（RNN）形式与并行形式相等，计算量随 N 线性增长。"),
    Extension("masking",
              "attnlab's rule for a row whose keys are all masked: its output is 0, not NaN.",
              "attnlab 对键全部被遮蔽的行的约定：输出为 0，而不是 NaN。", "fully-masked row"),
)


def claim(id_: str) -> Claim:
    """The inventory item ``id_``; ValueError naming the valid ids otherwise."""
    for c in CLAIMS:
        if c.id == id_:
            return c
    raise ValueError(f"unknown claim id {id_!r}; valid ids: {', '.join(c.id for c in CLAIMS)}")


def covering_experiments(claims: Iterable[Claim] = CLAIMS) -> list[str]:
    """The experiments that decide ``claims``, each once, in first-use order."""
    return list(dict.fromkeys(name for c in claims for name in c.covered_by))


@dataclass(frozen=True)
class ClaimVerdict:
    """One claim and what its experiments' numbers say of it."""

    claim: Claim
    verdict: str
    measurements: tuple[Measurement, ...]

    @property
    def verdict_zh(self) -> str:
        return ZH[self.verdict]

    @property
    def defect(self) -> bool:
        """Some covering experiment gave a verdict other than the one it expected."""
        return any(not m.passed for m in self.measurements)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON with the keys :data:`JSON_KEYS`."""
        c = self.claim
        out = {
            "id": c.id, "article": c.article, "kind": c.kind, "quote_zh": c.quote_zh,
            "claim_en": c.claim_en, "claim_zh": c.claim_zh, "covered_by": list(c.covered_by),
            "conditions_en": c.conditions_en, "conditions_zh": c.conditions_zh,
            "not_testable_en": c.not_testable_en, "not_testable_zh": c.not_testable_zh,
            "verdict": self.verdict, "verdict_zh": self.verdict_zh,
            "measured": [m.to_json() for m in self.measurements],
        }
        return out


@dataclass(frozen=True)
class ExtensionVerdict:
    """One of attnlab's extensions and what its experiment measured for it."""

    extension: Extension
    measurement: Measurement
    origin: str  # the experiment's Result.origin

    @property
    def verdict(self) -> str:
        return "holds" if self.measurement.holds else "does not hold"

    def to_json(self) -> dict[str, Any]:
        e = self.extension
        return {"experiment": e.experiment, "what_en": e.what_en, "what_zh": e.what_zh,
                "origin": self.origin, "verdict": self.verdict, "verdict_zh": ZH[self.verdict],
                "measured": self.measurement.to_json(), "passed": self.measurement.passed}


def _by_name(results: Iterable[Result]) -> dict[str, Result]:
    out: dict[str, Result] = {}
    for r in results:
        if not isinstance(r, Result):
            raise TypeError(f"results must be attnlab.experiments.Result objects, got "
                            f"{type(r).__name__}")
        out[r.name] = r
    return out


def verdicts(results: Iterable[Result], claims: Sequence[Claim] | None = None
             ) -> list[ClaimVerdict]:
    """The verdict of every claim (default: all of :data:`CLAIMS`) from ``results``.

    ``results`` must include every experiment that covers a testable claim among ``claims``
    (ValueError names the missing ones). Rules, in order: not testable → ``"not testable"``;
    some evidence does not support the claim → ``"does not hold"``; the claim has
    conditions → ``"holds under stated conditions"``; else ``"holds"``.
    """
    by_name = _by_name(results)
    chosen = CLAIMS if claims is None else tuple(claims)
    missing = sorted({n for c in chosen for n in c.covered_by} - set(by_name))
    if missing:
        raise ValueError(f"results lack the experiment(s) {missing} that decide claims "
                         f"{[c.id for c in chosen if set(c.covered_by) & set(missing)]}")
    out = []
    for c in chosen:
        ms = tuple(e.measure(by_name[e.experiment]) for e in c.evidence)
        if not c.testable:
            verdict = "not testable"
        elif not all(m.supports for m in ms):
            verdict = "does not hold"
        elif c.conditions_en:
            verdict = "holds under stated conditions"
        else:
            verdict = "holds"
        out.append(ClaimVerdict(c, verdict, ms))
    return out


def extension_verdicts(results: Iterable[Result]) -> list[ExtensionVerdict]:
    """Each of :data:`EXTENSIONS` whose experiment is among ``results``."""
    by_name = _by_name(results)
    return [ExtensionVerdict(e, Evidence(e.experiment, e.part).measure(by_name[e.experiment]),
                             by_name[e.experiment].origin)
            for e in EXTENSIONS if e.experiment in by_name]


def to_json(claim_verdicts: Sequence[ClaimVerdict],
            extensions: Sequence[ExtensionVerdict] = ()) -> dict[str, Any]:
    """``{"claims": [...], "extensions": [...], "counts": {verdict: n}}``."""
    return {
        "claims": [v.to_json() for v in claim_verdicts],
        "extensions": [e.to_json() for e in extensions],
        "counts": dict(counts(claim_verdicts)),
    }


def _md(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def markdown(claim_verdicts: Sequence[ClaimVerdict],
             extensions: Sequence[ExtensionVerdict] = ()) -> str:
    """The inventory as Markdown tables (claims, then attnlab's extensions)."""
    lines = ["| id | article | kind | quote | claim | experiments | verdict | measured |",
             "|---|---|---|---|---|---|---|---|"]
    for v in claim_verdicts:
        c = v.claim
        if c.testable:
            numbers = "; ".join(f"{m.experiment}: {m.text()}"
                                + (" (against)" if m.against else "")
                                for m in v.measurements)
            if c.conditions_en:
                numbers += f". Conditions: {c.conditions_en}"
        else:
            numbers = c.not_testable_en
        experiments = ", ".join(f"`{n}`" for n in c.covered_by) or "—"
        lines.append(f"| `{c.id}` | {c.article} | {c.kind} | 「{_md(c.quote_zh)}」 | "
                     f"{_md(c.claim_en)} | {experiments} | **{v.verdict}** | {_md(numbers)} |")
    if extensions:
        lines += ["", "attnlab's own extensions (not claims of the articles):", "",
                  "| experiment | what it adds | verdict | measured |", "|---|---|---|---|"]
        for e in extensions:
            lines.append(f"| `{e.extension.experiment}` | {_md(e.extension.what_en)} | "
                         f"**{e.verdict}** | {_md(e.measurement.text())} |")
    return "\n".join(lines) + "\n"


def counts(claim_verdicts: Sequence[ClaimVerdict]) -> Mapping[str, int]:
    """How many claims got each verdict (every verdict listed, in :data:`CLAIM_VERDICTS`
    order)."""
    return {name: sum(v.verdict == name for v in claim_verdicts) for name in CLAIM_VERDICTS}
