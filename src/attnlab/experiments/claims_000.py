"""The inventory's text for article 000 (the geometry and linear algebra of attention,
with the ``PureSelfAttention`` listing):
《拆解 Transformer：从几何与线性代数视角看透注意力机制的数学本质》.

Every claim, code listing, recommendation and error of the article in reading order, as
:class:`~attnlab.experiments.claim_types.Claim` records (pure data; the verdicts are
:mod:`attnlab.experiments.claims`). The two conditions shared with article 001
(``IID_*``: the variance argument's assumptions; ``NORM_*``: the score is a cosine only for
unit vectors) are stated here once.
"""

from __future__ import annotations

from .claim_conditions import IID_EN, IID_ZH, NORM_EN, NORM_ZH
from .claim_types import Claim, Reading, evidence
from .claims_000_listing_views import CLAIMS_000_LISTING_VIEWS

__all__ = ["CLAIMS_000", "IID_EN", "IID_ZH", "NORM_EN", "NORM_ZH"]

#: Article 000's claims, code listings, recommendations and errors, in reading order.
CLAIMS_000: tuple[Claim, ...] = (
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
        evidence("qk-variance:headline", "article-code:printed-000-output,printed-000-weights"),
    ),
    Claim(
        "000-qkv-retrieval", "000", "claim",
        "借鉴了数据库检索的概念",
        "Q, K and V borrow from database retrieval: a query is matched against every key and "
        "the values are returned weighted by the match; trained on associative recall "
        "(fetch the value stored under a key), one attention head learns exactly this lookup: "
        "on fresh sequences the query puts most of its attention on the pair whose key "
        "matches it (chance: one of the n_pairs + 1 positions; the same model untrained does "
        "not), and the value it reads brings the loss well below chance.",
        "Q、K、V 借鉴了数据库检索：查询与每个键比对，按匹配程度加权取回值；在关联回忆任务"
        "（取回某个键下存放的值）上训练，单个注意力头确实学会了这种检索：在新序列上，查询把"
        "大部分注意力放在键与之匹配的那一对上（随机水平为 n_pairs + 1 个位置之一；同一模型"
        "未训练时做不到），读出的值使损失远低于随机水平。",
        evidence("scaling-training:match-attention,scaled-vs-chance"),
        reading_en="The analogy read as what a trained head does: its query's attention lands "
                   "on the key that matches, as a database lookup returns the matching record.",
        reading_zh="把这一类比理解为训练后的注意力头所做的事：查询的注意力落在与之匹配的键上，"
                   "正如数据库查找返回匹配的记录。",
    ),
    Claim(
        "000-higher-score-more-weight", "000", "claim",
        "比对得分越高的词，其 $V$ （实际内容）就会被分配更大的权重",
        "The higher a key's score against the query, the larger the weight its value gets: "
        "softmax weights are exp(score) normalised, a strictly increasing function of the "
        "score (attention is kernel smoothing with the kernel exp(q·k)).",
        "键与查询的分数越高，其值向量分到的权重越大：softmax 权重是归一化后的 exp(分数)，"
        "是分数的严格增函数（注意力就是以 exp(q·k) 为核的核平滑）。",
        evidence("learned-kernel:nw-estimate"),
    ),
    Claim(
        "000-error-projection-raises-dimension", "000", "error",
        "线性投影：升维与子空间切割",
        "The heading calls the linear projection a raising of the dimension (升维), but no "
        "projection to Q, K or V raises it: per head, W_i^Q, W_i^K, W_i^V map d_model to "
        "d_k = d_model / h (the article's own next lines say d × d_k), and each of W^Q, W^K, "
        "W^V as one matrix outputs at most d_model. Measured on the weight files of two real "
        "models: MiniLM (384 → 32 per head, 384 → 384 whole) and SmolLM2 (576 → 64 per head; "
        "W^Q 576 → 576, its shared-head W^K, W^V 576 → 192): d_k / d_model ≤ 0.111 and whole "
        "width / d_model ≤ 1, while their feed-forward up-projections do raise the dimension "
        "(384 → 1536, 576 → 1536). Only stacked into one matrix [W^Q W^K W^V], as article "
        "001's fused Linear(d, 3d) does, is the output wider than the input (3 d_model; "
        "1.67 d_model for SmolLM2), and that is three projections side by side, none of "
        "which raises the dimension.",
        "该标题把线性投影称为“升维”，但到 Q、K、V 的投影没有一个是升维：每个头的 W_i^Q、W_i^K、"
        "W_i^V 把 d_model 维映射到 d_k = d_model / h 维（文章紧接着的正文自己也写的是 d × d_k），"
        "W^Q、W^K、W^V 各自作为整体也最多输出 d_model 维。在两个真实模型的权重文件上实测："
        "MiniLM（每个头 384 → 32，整体 384 → 384）与 SmolLM2（每个头 576 → 64；W^Q 为 "
        "576 → 576，共享头的 W^K、W^V 为 576 → 192）：d_k / d_model ≤ 0.111，整体宽度 / "
        "d_model ≤ 1；而它们的前馈层上投影确实升维（384 → 1536，576 → 1536）。只有把 "
        "[W^Q W^K W^V] 叠成一个矩阵（如文章 001 融合的 Linear(d, 3d)）时，输出才比输入宽"
        "（3 d_model；SmolLM2 为 1.67 d_model），而那只是三个投影并排放在一起，其中没有一个"
        "是升维。",
        evidence("!head-dimensions:headline", "!head-dimensions:whole-projection-no-wider"),
        reading_en="The heading's plain reading: the projection to Q, K, V raises the "
                   "dimension — each of W^Q, W^K, W^V (per head, or as one matrix) outputs "
                   "more dimensions than its d_model-dimensional input.",
        reading_zh="标题的字面意思：到 Q、K、V 的投影是升维——W^Q、W^K、W^V 中的每一个（按头，"
                   "或作为整体）输出的维数都多于 d_model 维的输入。",
        readings=(Reading("Stacked: the three projections as one matrix [W^Q W^K W^V] (article "
                          "001's fused Linear(d, 3d)) output more dimensions than their input "
                          "(measured at least 1.5 d_model on both models).",
                          "叠成一体：把三个投影合成一个矩阵 [W^Q W^K W^V]（文章 001 融合的 "
                          "Linear(d, 3d)），其输出维数多于输入（两个模型上实测至少 1.5 d_model）。",
                          evidence("head-dimensions:stacked-qkv-wider")),),
    ),
    Claim(
        "000-qkv-subspaces", "000", "claim",
        "通过三个不同的矩阵，模型允许词在三个不同的几何空间中表达不同的角色",
        "W^Q, W^K and W^V project each token into three different subspaces, so that it can "
        "play different roles as query, key and value: with W^Q ≠ W^K the score of i on j "
        "can differ from that of j on i, and a trained model uses that in a chosen "
        "direction. Random untied matrices already give an asymmetric score matrix "
        "(‖S − Sᵀ‖/‖S‖ ≈ √2), so what is tested is the direction: on a previous-token task "
        "query i scores its previous token far above that token's score for i, which the "
        "untrained model does not and a tied one (W^Q = W^K) cannot.",
        "W^Q、W^K、W^V 把每个词投影到三个不同的子空间，使它作为查询、键、值时扮演不同角色："
        "W^Q ≠ W^K 时，i 对 j 的分数可以不同于 j 对 i 的分数，训练后的模型会把这种不对称用在"
        "特定的方向上。随机的未绑定矩阵本来就给出不对称的分数矩阵（‖S − Sᵀ‖/‖S‖ ≈ √2），"
        "所以检验的是方向：在前一词元任务上，查询 i 对前一词元的分数远高于该词元对 i 的分数，"
        "未训练的模型做不到这一点，绑定的模型（W^Q = W^K）也不可能做到。",
        evidence("qkv-roles"),
    ),
    Claim(
        "000-score-is-dot-product", "000", "claim",
        "的每一列（上下文词的 Key 向量）的点积",
        "Entry (i, j) of QKᵀ is the dot product of query i with key j (checked on the scores "
        "attnlab computes for queries and keys projected by an untrained attention layer).",
        "QKᵀ 的第 (i, j) 个元素就是第 i 个查询与第 j 个键的点积"
        "（在未经训练的注意力层投影得到的查询与键上，以 attnlab 计算出的分数检验）。",
        evidence("dot-product-geometry:headline"),
    ),
    Claim(
        "000-dot-product-cosine", "000", "claim",
        r"\vec{a} \cdot \vec{b} = \|\vec{a}\| \|\vec{b}\| \cos\theta",
        "The dot product is |a||b|cos θ, with θ the angle between the vectors (θ measured "
        "without using the dot product).",
        "点积等于 |a||b|cos θ，θ 为两向量的夹角（θ 的测量不借助点积）。",
        evidence("dot-product-geometry:headline"),
    ),
    Claim(
        "000-direction-similarity", "000", "claim",
        "抛开向量长度不看，点积的核心意义在于衡量两个向量在方向上的相似度",
        "Leaving lengths aside, the dot product measures how similar two directions are: the "
        "smaller the angle, the larger the score (q·k = |q||k|cos θ, an identity; and on a "
        "trained attention head, within each query's row the angle orders the scores, the key "
        "lengths do not).",
        "抛开向量长度，点积衡量的是两个方向的相似度：夹角越小，分数越大（q·k = |q||k|cos θ 是"
        "恒等式；在训练后的注意力头上，每个查询的一行之内决定分数顺序的是夹角，而不是键的长度）。",
        evidence("dot-product-geometry:headline", "dot-product-geometry:trained-angle-order"),
        conditions_en=NORM_EN, conditions_zh=NORM_ZH,
    ),
    Claim(
        "000-orthogonal-unrelated", "000", "claim",
        "夹角接近 90 度（正交），点积趋近于 0，说明两者毫无关系",
        "When query and key are orthogonal (θ ≈ 90°), their dot product is near 0: the "
        "two are unrelated.",
        "查询与键正交（θ ≈ 90°）时，点积接近 0，说明两者毫无关系。",
        evidence("dot-product-geometry:headline"),
        reading_en="Orthogonal means a dot product of 0: the score relates nothing (the "
                   "identity q·k = |q||k|cos θ).",
        reading_zh="正交即点积为 0：分数上两者毫无关系（恒等式 q·k = |q||k|cos θ）。",
        readings=(Reading(
            "Unrelated in attention: on a trained head, the query pays an orthogonal key "
            "(almost) no weight, as it does a key it ignores. It does not: softmax gives score "
            "0 the weight exp(0)/Σ_j exp(s_j), and the keys a trained head ignores have "
            "negative scores (measured on scaling-training's trained one-head recall model: "
            "the weight × N of a key made exactly orthogonal to the query, ≥ 0.1 of the "
            "uniform share, against the least-weighted key of each row; on an untrained, "
            "near-uniform layer the same measure is about 0.87 and says little).",
            "在注意力中毫无关系：在训练后的头上，查询几乎不给正交的键任何权重，"
            "就像对它忽略的键一样。事实并非如此：softmax 给分数 0 的权重是 "
            "exp(0)/Σ_j exp(s_j)，而训练后的头所忽略的键分数为负（在 `scaling-training` "
            "训练后的单头回忆模型上实测：与查询严格正交的键的权重 × N 至少为均匀份额的 0.1，"
            "对照为每行中权重最小的键；在未训练、接近均匀的层上同一测量约为 0.87，"
            "说明不了什么）。",
            evidence("!dot-product-geometry:trained-orthogonal-key-keeps-weight")),),
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
        evidence("dynamic-graph:complete-graph"),
    ),
    Claim(
        "000-error-score-is-attention-degree", "000", "error",
        "精确地量化了序列中第 $i$ 个词对第 $j$ 个词的“关注程度”",
        "Entry (i, j) of QKᵀ is a score, not how much token i attends to token j: that is the "
        "weight A_ij = softmax_j(s_ij / √d_k), which depends on the whole row i, so one score "
        "gives different weights in different rows. Measured on an untrained attnlab "
        "MultiHeadAttention (4 heads, 64 tokens): over pairs of entries from different rows "
        "of a head, the higher score has the lower weight in 11 % of pairs (within one row, "
        "where softmax is monotone: 0 %); raising the other scores of row i by 1 changes A_ij "
        "by 63 % on average with s_ij unchanged (raising the whole row: 0).",
        "QKᵀ 的第 (i, j) 个元素只是分数，并不是第 i 个词元对第 j 个词元的关注程度：关注程度是"
        "权重 A_ij = softmax_j(s_ij / √d_k)，它取决于第 i 行的全部分数，所以同一个分数在不同的"
        "行中对应不同的权重。在未经训练的 attnlab MultiHeadAttention（4 个头，64 个词元）上"
        "实测：同一个头中来自不同行的两个元素，分数较高者权重反而较低的占 11%（同一行之内，"
        "softmax 单调：0%）；把第 i 行的其他分数都加 1，s_ij 不变而 A_ij 平均变化 63%"
        "（整行都加 1：0）。",
        evidence("!dot-product-geometry:score-not-weight-across-rows,weight-depends-on-row"),
        reading_en="The sentence's plain reading: entry (i, j) of QKᵀ by itself exactly "
                   "quantifies how much token i attends to token j, so a higher score means "
                   "more attention, whichever row it is in.",
        reading_zh="这句话的字面意思：QKᵀ 的第 (i, j) 个元素本身就精确量化了第 i 个词元对第 j "
                   "个词元的关注程度，所以分数越高关注越多，无论它在哪一行。",
    ),
    Claim(
        "000-qk-mean-zero", "000", "claim",
        "的数学期望为 0",
        "For q, k with independent components of mean 0 and variance 1, E[q·k] = 0.",
        "当 q、k 的各分量独立、均值为 0、方差为 1 时，E[q·k] = 0。",
        evidence("qk-variance:centred-mean,mu-0.5-mean,mu-0.5-variance"),
        conditions_en=IID_EN, conditions_zh=IID_ZH,
    ),
    Claim(
        "000-qk-variance-dk", "000", "claim",
        "但方差会随着维度 $d_k$ 的增大而线性增大（即为 $d_k$ ）",
        "Under the same assumptions, Var(q·k) grows linearly with d_k: it equals d_k.",
        "在同样的假设下，Var(q·k) 随 d_k 线性增长：恰为 d_k。",
        evidence("qk-variance"),
        conditions_en=IID_EN, conditions_zh=IID_ZH,
    ),
    Claim(
        "000-error-dk-model-dimension", "000", "error",
        "当模型维度 $d_k$ 很大时",
        "The sentence calls d_k the model dimension (模型维度), but d_k is the dimension of one "
        "head's queries and keys, d_model / h; the model dimension is d_model. Read from the "
        "weight files, MiniLM has d_model 384 and d_k 32 (12 heads), SmolLM2 d_model 576 and "
        "d_k 64 (9 heads), and article 000's own listing d_model 512 and d_k 64 (8 heads): "
        "d_k / d_model = 1/h ≤ 0.125. The two coincide only with one head (h = 1: ratio 1). "
        "The sentence's example 64 is the head dimension of SmolLM2 and of the listing.",
        "这句话把 d_k 称为“模型维度”，但 d_k 是一个头的查询与键的维度，等于 d_model / h；"
        "模型维度是 d_model。从权重文件读取：MiniLM 的 d_model 为 384、d_k 为 32（12 个头），"
        "SmolLM2 的 d_model 为 576、d_k 为 64（9 个头），文章 000 自己的代码 d_model 为 512、"
        "d_k 为 64（8 个头）：d_k / d_model = 1/h ≤ 0.125。只有单头时两者才相同（h = 1："
        "比值为 1）。句中举例的 64 正是 SmolLM2 和该代码的头维度。",
        evidence("!head-dimensions:dk-below-model-dim"),
        reading_en="The plain reading: d_k, the dimension of the vectors whose dot product is "
                   "scaled, is the model's dimension d_model.",
        reading_zh="字面意思：d_k，即做点积并被缩放的那些向量的维度，就是模型的维度 d_model。",
    ),
    Claim(
        "000-large-scores", "000", "claim",
        "点积的结果会变得非常大，导致不同词之间的得分差异极其悬殊",
        "When d_k is large (64 or 128), the raw scores spread widely (standard deviation √d_k) "
        "and the differences between keys become extreme.",
        "当 d_k 很大（如 64 或 128）时，未缩放的分数分布很宽（标准差为 √d_k），"
        "不同键之间的分数差异极其悬殊。",
        evidence("qk-variance", "softmax-saturation:headline"),
        conditions_en=IID_EN, conditions_zh=IID_ZH,
    ),
    Claim(
        "000-softmax-one-hot", "000", "claim",
        "使得 Softmax 的输出趋近于 One-Hot 分布",
        "Fed such unscaled scores, softmax approaches a one-hot distribution: the largest "
        "weight tends to 1, the entropy to 0.",
        "把这样未缩放的分数送入 softmax，输出趋近独热（one-hot）分布：最大权重趋于 1，熵趋于 0。",
        evidence("softmax-saturation"),
    ),
    Claim(
        "000-gradient-vanishes", "000", "claim",
        "梯度会变得非常趋近于 0（梯度消失），导致模型无法有效更新参数",
        "In that regime the softmax gradient tends to 0 (it vanishes) and the model cannot "
        "update its parameters effectively: trained without the scale, a model with a large "
        "head dimension learns much worse.",
        "在这种情况下 softmax 的梯度趋于 0（梯度消失），模型无法有效更新参数：不做缩放时，"
        "头维度较大的模型训练效果明显更差。",
        evidence("softmax-saturation:gradient-vanishes-scores,gradient-vanishes-wq",
                 "scaling-training"),
    ),
    Claim(
        "000-scale-variance-one", "000", "claim",
        "强行将点积的方差拉回 1",
        "Dividing by √d_k is a variance normalisation: it brings the score variance back to 1.",
        "除以 √d_k 相当于一次方差归一化：把分数的方差拉回到 1。",
        evidence("qk-variance"),
        conditions_en=IID_EN, conditions_zh=IID_ZH,
    ),
    Claim(
        "000-scale-any-dimension", "000", "claim",
        "保证了无论特征维度多高，Softmax 都能工作在一个梯度稳定的非线性敏感区",
        "With the scale, softmax works in the same sensitive, stable-gradient regime whatever "
        "the dimension: its largest weight, entropy and Jacobian stay flat in d_k.",
        "缩放之后，无论维度多高，softmax 都工作在同一个梯度稳定的敏感区："
        "最大权重、熵和雅可比矩阵都不随 d_k 变化。",
        evidence("softmax-saturation"),
        conditions_en=IID_EN, conditions_zh=IID_ZH,
    ),
    Claim(
        "000-probability-matrix", "000", "claim",
        "概率转移矩阵",
        "After the softmax, A is an N × N probability (row-stochastic) matrix: every entry is "
        "non-negative and every row sums to 1.",
        "softmax 之后，A 是一个 N × N 的概率转移（行随机）矩阵：每个元素非负，每行之和为 1。",
        evidence("convex-combination:no-negative-weight,row-sum"),
    ),
    Claim(
        "000-convex-combination", "000", "claim",
        "这是一个向量的凸组合（因为 $A_{i,j}$ 加起来等于 1）",
        "Output_i = Σ_j A_ij V_j is a convex combination of the values, a weighted centroid: "
        "every output lies in the convex hull of the value vectors (this needs the weights to "
        "be non-negative as well as to sum to 1; softmax gives both).",
        "Output_i = Σ_j A_ij V_j 是值向量的凸组合，即加权重心：每个输出都落在值向量的凸包内"
        "（这既需要权重之和为 1，也需要权重非负；softmax 两者兼具）。",
        evidence("convex-combination"),
    ),
    Claim(
        "000-apple-context", "000", "claim",
        "比如“苹果”这个词，如果周围有“吃”字",
        "Attention contextualises a word: the output vector of 苹果 (apple) moves towards the "
        "fruit meaning next to 吃 (eat) and towards the tech-company meaning next to 发布会 "
        "(product launch).",
        "注意力使词的表示语境化：在“吃”旁边，“苹果”的输出向量偏向“水果”的语义；"
        "在“发布会”旁边，则偏向“科技公司”的语义。",
        evidence("contextualisation:contexts-separate,fruit-closer,company-closer,"
                 "separation-p,separating-layers"),
        conditions_en="Measured on a real pretrained model (SmolLM2) with a handful of "
                      "sentences and reference words, not on every model or context, and on a "
                      "thin margin: the separation between fruit and company contexts at the "
                      "last layer, the p-value of a label-permutation test of it (shuffling "
                      "which sentences count as fruit or company) with its number of "
                      "permutations, and the run of last layers that separate the contexts are "
                      "those measured beside; the middle layer does not separate them (the "
                      "other reading).",
        conditions_zh="在真实的预训练模型（SmolLM2）上用少量句子和参照词测得，"
                      "并非对所有模型和语境都成立，而且余量很小：最后一层水果语境与公司语境之间"
                      "的分离度、对它做标签置换检验（打乱哪些句子算水果语境、哪些算公司语境）"
                      "得到的 p 值及置换次数，以及能把两类语境分开的最后若干层，均见旁边的实测"
                      "值；中间层不能把它们分开（另一种理解）。",
        reading_en="The output vector is the word's vector as the model finally gives it (its "
                   "last layer): after an eating context it is closer to 水果 than to 科技公司, "
                   "after a product-launch context the reverse, every fruit context leaning "
                   "more to 水果 than every company context (random weights must not).",
        reading_zh="“输出向量”指模型最终给出的词向量（最后一层）：在与“吃”有关的语境后，它离"
                   "“水果”比离“科技公司”更近，在“发布会”语境后则相反，而且每个水果语境都比每个"
                   "公司语境更偏向“水果”（随机权重的网络不应如此）。",
        readings=(Reading(
            "The output vector is what attention outputs at each layer: the word already "
            "leans so half-way through the network (its middle layer), not only in the "
            "model's final output.",
            "“输出向量”指每一层注意力的输出：在网络的中间层，这个词就已经这样偏移，"
            "而不只是在模型的最终输出中。",
            evidence("contextualisation:mid-contexts-separate,mid-fruit-closer,"
                     "mid-company-closer")),),
    ),
    Claim(
        "000-multihead-formula", "000", "code",
        r"\text{MultiHead}(Q, K, V) = \text{Concat}(\text{head}_1, \dots, \text{head}_h) W^O",
        "Multi-head attention concatenates the heads' outputs and multiplies by W^O; "
        "the articles' listings (000 as printed, 001 once corrected) compute exactly this, "
        "equal to attnlab's modules with the same weights.",
        "多头注意力把各头的输出拼接起来再乘以 W^O；两篇文章的代码（000 按原样、001 修正后）"
        "都正是这样计算的，与使用相同权重的 attnlab 模块结果相等。",
        evidence("article-code:printed-000-output,printed-000-weights",
                 "article-code:fixed-001-output"),
    ),
    Claim(
        "000-error-head-formula-double-projection", "000", "error",
        r"\text{head}_i = \text{Attention}(Q W_i^Q, K W_i^K, V W_i^V)",
        "The formula is the paper's ('Attention Is All You Need'), where Q, K, V are the "
        "layer's inputs (X in self-attention). Article 000 has already defined Q = XW^Q, "
        "K = XW^K, V = XW^V (N × d_k, with W^Q of d × d_k), so in its own symbols head_i "
        "projects Q a second time with W_i^Q (d_model × d_k): an N × d_k matrix times a "
        "d_model × d_k one, which do not compose unless d_k = d_model. Run as written at its "
        "listing's sizes (N = 10, d_model = 512, 8 heads), the product raises a shape error "
        "(measured 1); with Q = K = V = X it runs (0). The listing itself projects once "
        "(`W_q`, then view), as the paper does.",
        "这个公式来自原论文（《Attention Is All You Need》），其中 Q、K、V 是该层的输入"
        "（自注意力中即 X）。文章 000 前面已经定义 Q = XW^Q、K = XW^K、V = XW^V（N × d_k，"
        "W^Q 为 d × d_k），所以按它自己的符号，head_i 又用 W_i^Q（d_model × d_k）把 Q 再投影"
        "一次：N × d_k 的矩阵乘以 d_model × d_k 的矩阵，除非 d_k = d_model，否则形状对不上。"
        "按文中写法在其代码的规模下运行（N = 10，d_model = 512，8 个头），这个乘积报形状错误"
        "（实测为 1）；取 Q = K = V = X 时则能运行（0）。文章的代码本身只投影一次（先 `W_q`，"
        "再 view），与原论文一致。",
        evidence("!head-dimensions:article-head-formula-shapes-fail"),
        reading_en="The plain reading in the article's own symbols: head_i = Attention(QW_i^Q, "
                   "KW_i^K, VW_i^V), with Q = XW^Q, K = XW^K, V = XW^V as defined in section 一, "
                   "is a computation that runs.",
        reading_zh="按文章自己的符号的字面意思：head_i = Attention(QW_i^Q, KW_i^K, VW_i^V)，"
                   "其中 Q = XW^Q、K = XW^K、V = XW^V 如第一节所定义，是一个能够运行的计算。",
    ),
    Claim(
        "000-one-relation-per-head", "000", "claim",
        "它只能学到一种关系模式",
        "A single attention head can learn only one relation pattern: a task that needs two "
        "relations at once is solved by two heads but not by one head of the same total size.",
        "单个注意力头只能学到一种关系模式：需要同时用到两种关系的任务，两个头能学会，"
        "而总维度相同的单个头学不会。",
        evidence("one-relation-per-head"),
        reading_en="The plain reading: one head cannot learn two relations at once, so on a "
                   "task whose every answer needs two source tokens (the tokens at t − 1 and "
                   "t − 3) two heads of the same total width succeed where one head fails. "
                   "No gap appears (both reach 100 % at E = 64); a search for a width where "
                   "one head fails and two succeed (E = 8 and E = 4, 300 steps, seed 0) found "
                   "none (one head 0.58 vs two 0.35 at E = 8; 0.14 vs 0.13 at E = 4), so "
                   "nothing shows that this setup could show the gap.",
        reading_zh="字面意思：一个头不能同时学会两种关系，所以在每个答案都需要两个来源词元"
                   "（t − 1 与 t − 3 处的词元）的任务上，总宽度相同的两个头能学会，"
                   "一个头学不会。实测没有差距（E = 64 时两者都达到 100%）；为寻找单头失败而"
                   "双头成功的宽度（E = 8 与 E = 4，300 步，种子 0）所做的搜索也没有找到"
                   "（E = 8 时单头 0.58、双头 0.35；E = 4 时 0.14 对 0.13），所以没有证据表明"
                   "这一设置能够显示出差距。",
        null_result=True,
    ),
    Claim(
        "000-orthogonal-subspaces", "000", "claim",
        "将高维语义空间正交分解为多个低秩子空间",
        "Multi-head attention decomposes the semantic space orthogonally into low-rank "
        "subspaces, one per head: in the input (semantic) space, the subspaces the trained "
        "heads read through (the row spaces of their slices of W^Q, W^K) are orthogonal — "
        "measured by the mean principal angle between heads. (That the heads' coordinate "
        "blocks after view/transpose are disjoint is true of any split and is item "
        "000-head-low-dim-subspace, not evidence of a decomposition.)",
        "多头注意力把高维语义空间正交分解为若干低秩子空间，每个头一个：在输入（语义）空间中，"
        "训练后各头所读取的子空间（它们的 W^Q、W^K 切片的行空间）相互正交——以各头之间的平均主"
        "夹角衡量。（切分之后各头的坐标块互不相交，这对任何切分都成立，见条目 "
        "000-head-low-dim-subspace，不能作为正交分解的证据。）",
        evidence("multihead-cost:heads-orthogonal"),
        reading_en="In the input space: the trained heads' W^Q and W^K subspaces are "
                   "orthogonal (mean principal angle between heads ≥ 75°, near 90°).",
        reading_zh="在输入空间中：训练后各头的 W^Q、W^K 子空间相互正交（各头之间的平均主夹角 "
                   "≥ 75°，接近 90°）。",
        null_result=True,
        positive_control=evidence("multihead-cost:heads-orthogonal-penalised"),
    ),
    Claim(
        "000-head-low-dim-subspace", "000", "claim",
        "每个观察者都被强制投影到一个特定的低维子空间中",
        "Each head reads the input through its own d/h-dimensional subspace (its slice of "
        "W^Q, W^K, W^V), and h heads together cost what one head of size d costs.",
        "每个头都通过自己的 d/h 维子空间（W^Q、W^K、W^V 中属于它的切片）读取输入，"
        "h 个头合起来的代价与一个 d 维的头相同。",
        evidence("multihead-cost:params,head-blocks-orthogonal"),
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
        "them to converge to different representation subspaces. Measured as what training "
        "changes, against the same models before training: the mean principal angle between "
        "the heads' W^Q and W^K subspaces, trained − initial (heads started identical change "
        "by 0), and the total variation between the heads' attention rows, trained − initial. "
        "Untrained heads are already far apart (about 61–62° for the closest pair), so an "
        "absolute angle after training says nothing about gradient descent.",
        "由于各个头的 W 矩阵初始化不同，梯度下降会驱使它们收敛到不同的表征子空间。以训练带来的"
        "变化来衡量，对照为训练前的同一批模型：各头 W^Q、W^K 子空间之间的平均主夹角（训练后 − "
        "初始化；初始完全相同的头变化为 0），以及各头注意力分布逐行之间的全变差距离（训练后 − "
        "初始化）。未训练的头本来就相距很远（最接近的一对约 61–62°），所以训练后夹角的绝对值"
        "说明不了梯度下降做了什么。",
        evidence("multihead-cost:wq-angle-change,wk-angle-change"),
        reading_en="The plain reading: gradient descent drives the heads' subspaces apart — "
                   "the mean principal angle between heads grows in training (by ≥ 1°). It "
                   "shrinks instead (about −11° for W^Q, −10° for W^K): training moves the "
                   "heads' subspaces closer.",
        reading_zh="字面意思：梯度下降把各头的子空间推开——各头之间的平均主夹角在训练中增大"
                   "（至少 1°）。实际上它反而减小（W^Q 约 −11°，W^K 约 −10°）：训练使各头的子空间"
                   "彼此靠近。",
        readings=(Reading("The heads' behaviour: gradient descent makes the heads attend "
                          "differently — the total variation between their attention rows "
                          "grows in training (by ≥ 0.05; heads started identical: 0).",
                          "各头的行为：梯度下降使各头的注意力模式变得不同——各头注意力分布逐行"
                          "之间的全变差距离在训练中增大（至少 0.05；初始完全相同的头：0）。",
                          evidence("multihead-cost:patterns-diverge-change")),),
    ),
    Claim(
        "000-wo-lossless", "000", "claim",
        "实现了信息的无损多视角融合",
        "Concatenating the heads and projecting with W^O fuses the views without loss of "
        "information: W^O mixes every head into every output coordinate and is invertible, "
        "so the concatenation is recovered from the fused output. Both hold by construction "
        "of a generic square matrix (W^O at initialisation already has both properties; a "
        "rank-deficient W^O, e.g. without head 1's columns, loses that head); training adds "
        "neither.",
        "把各头拼接后经 W^O 投影回原维度，实现了信息的无损多视角融合：W^O 把每个头都混入每个"
        "输出坐标，且可逆，所以能从融合后的输出恢复拼接向量。两者都是一般方阵的构造所决定的"
        "（初始化时的 W^O 就已具备这两点；秩亏的 W^O，例如去掉头 1 各列的 W^O，会丢失该头）；"
        "训练并没有带来其中任何一点。",
        evidence("wo-fusion"),
        conditions_en="Lossless only when W^O is invertible (full rank), which a random "
                      "square matrix almost surely is: then the heads' outputs can be "
                      "recovered from the fused output; a rank-deficient W^O loses "
                      "information.",
        conditions_zh="仅当 W^O 可逆（满秩）时才无损，而随机方阵几乎必然可逆：此时能从融合后的"
                      "输出恢复各头的输出；秩亏的 W^O 会丢失信息。",
    ),
    Claim(
        "000-multihead-no-extra-cost", "000", "claim",
        "多头注意力不仅没有增加计算复杂度（总维度不变）",
        "With d_k = d_model / h, multi-head attention does not increase the computational "
        "complexity over one head of size d_model: the same parameters, the same matmul FLOPs, "
        "the same order of growth O(N·E² + N²·E).",
        "取 d_k = d_model / h 时，多头注意力相对一个 d_model 维的单头没有增加计算复杂度："
        "参数量相同，矩阵乘法 FLOPs 相同，增长阶 O(N·E² + N²·E) 相同。",
        evidence("multihead-cost:params", "multihead-cost:flops,flops-formula"),
        conditions_en="Holds for the complexity, the article's word, and only by construction: "
                      "the heads slice the same E × E matrices, so the parameters and the "
                      "matmul FLOPs are equal for any weights (the control they must reject: "
                      "h unsplit heads of width E, h× the parameters and FLOPs). "
                      "Counted exactly, the cost is not the same: each head scales, masks and "
                      "normalises its own N × N scores, +0.68 % compute for 8 heads at "
                      "E = 256, N = 128 (5 operations a score, a lower bound; "
                      "multihead-cost:full-compute), and the weights tensor holds h× the "
                      "bytes (256 KiB → 2 MiB; multihead-cost:weights-bytes).",
        conditions_zh="对“计算复杂度”（文章的用词）成立，而且只是按构造成立：各头切分的是"
                      "同一组 E × E 矩阵，所以参数量和矩阵乘法 FLOPs 对任何权重都相等"
                      "（它们必须排除的对照：h 个宽度为 E 的不切分的头，参数量和 FLOPs "
                      "都是 h 倍）。精确计数时代价并不相同："
                      "每个头都要对自己的 N × N 分数做缩放、掩码和"
                      "归一化，E = 256、N = 128 时 8 个头的计算量多 0.68%（每个分数 5 次运算，"
                      "为下界；`multihead-cost:full-compute`），权重张量的字节数是 h 倍"
                      "（256 KiB → 2 MiB；`multihead-cost:weights-bytes`）。",
    ),
    Claim(
        "000-multihead-efficiency", "000", "claim",
        "极大提升了模型的参数效率和非线性表达能力",
        "Splitting into heads greatly improves parameter efficiency and expressiveness: at "
        "the same parameter count, h heads express relations one head cannot.",
        "切分成多个头极大提升了参数效率和表达能力：参数量相同，多个头能表达单个头表达不了的关系。",
        evidence("multihead-cost:params", "one-relation-per-head"),
        reading_en="The plain reading: at the same parameter count (equal by construction), "
                   "h heads express what one head cannot; 'greatly' and 'nonlinear "
                   "expressiveness' have no measure in the article.",
        reading_zh="字面意思：参数量相同（按构造相等）时，h 个头能表达单个头表达不了的东西；"
                   "文中的“极大”和“非线性表达能力”没有给出度量。",
        existence=True,
        search_en="A witness is a task that two heads learn and one head of the same width "
                  "does not. Searched: the two two-relation tasks of one-relation-per-head "
                  "(t − 1 with t − 3; t − 1 with a marked token) at E = 64, seeds 0–3 (one "
                  "head reaches 100 %, like two), and the offsets task at E = 8 and E = 4 "
                  "(one head 0.58 vs two 0.35; 0.14 vs 0.13). None is a witness; that is no "
                  "proof that none exists.",
        search_zh="实例是指两个头能学会、而宽度相同的单个头学不会的任务。已搜索："
                  "one-relation-per-head 的两个双关系任务（t − 1 与 t − 3；t − 1 与标记词元），"
                  "E = 64，种子 0–3（单头与双头一样达到 100%）；以及 E = 8 和 E = 4 的双偏移任务"
                  "（单头 0.58 对双头 0.35；0.14 对 0.13）。都不是实例；但这并不证明实例不存在。",
    ),
    *CLAIMS_000_LISTING_VIEWS,
)
