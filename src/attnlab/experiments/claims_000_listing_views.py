"""The inventory's text for article 000, its second half in reading order: the
``PureSelfAttention`` listing and its comments, attention as a dynamic graph and as kernel
smoothing, and the article's summary (:data:`CLAIMS_000_LISTING_VIEWS`, continued from
:mod:`attnlab.experiments.claims_000`, which joins the two).
"""

from __future__ import annotations

from .claim_conditions import NORM_EN, NORM_ZH
from .claim_types import Claim, Reading, evidence

__all__ = ["CLAIMS_000_LISTING_VIEWS"]

CLAIMS_000_LISTING_VIEWS: tuple[Claim, ...] = (
    Claim(
        "000-listing-pure-self-attention", "000", "code",
        "class PureSelfAttention(nn.Module):",
        "Article 000's PureSelfAttention listing runs as printed (its own __main__ test too) "
        "and computes the same outputs and weights as attnlab's SelfAttention with the same "
        "weights.",
        "文章 000 的 PureSelfAttention 代码可按原样运行（包括它自带的 __main__ 测试），"
        "其输出和权重与使用相同权重的 attnlab SelfAttention 相等。",
        evidence("article-code:printed-000-main-runs,printed-000-output,printed-000-weights"),
    ),
    Claim(
        "000-listing-weights-sum-to-one", "000", "code",
        "它对所有词的注意力权重之和应该为 1",
        "The listing's test prints the sum of one row of attention weights, which must be 1.",
        "代码的测试部分打印一行注意力权重之和，它应当为 1。",
        evidence("article-code:printed-000-main-runs,printed-000-output,printed-000-weights",
                 "convex-combination:row-sum"),
    ),
    Claim(
        "000-scale-comment", "000", "code",
        "这是防止梯度消失的关键数学步骤",
        "The listing's comment: dividing the scores by √(head_dim) is the key step that "
        "prevents vanishing gradients.",
        "代码注释：把分数除以 √(head_dim) 是防止梯度消失的关键数学步骤。",
        evidence("softmax-saturation", "scaling-training"),
    ),
    Claim(
        "000-matmul-is-qkt", "000", "code",
        "这一行，完美对应了我们上文讨论的",
        "The line scores = torch.matmul(Q, K.transpose(-2, -1)) is exactly the QKᵀ of the "
        "formula: the listing's scores and weights equal attnlab's with the same weights.",
        "scores = torch.matmul(Q, K.transpose(-2, -1)) 这一行正对应公式中的 QKᵀ："
        "代码算出的分数与权重和使用相同权重的 attnlab 相等。",
        evidence("article-code:printed-000-output,printed-000-weights"),
    ),
    Claim(
        "000-view-transpose-split", "000", "code",
        "正是多头机制在代码层面“切分高维空间”的具体体现",
        "view and transpose are how the code splits the space into heads: head i gets the "
        "i-th slice of d/h dimensions, and the split-then-merge listing equals attnlab's "
        "multi-head attention.",
        "view 与 transpose 就是代码层面“切分高维空间”的方式：第 i 个头得到第 i 段 d/h 维，"
        "先切分再合并的实现与 attnlab 的多头注意力相等。",
        evidence("article-code:printed-000-main-runs,printed-000-output,printed-000-weights",
                 "multihead-cost:params,head-blocks-orthogonal"),
    ),
    Claim(
        "000-dynamic-graph", "000", "claim",
        "Transformer 构建的是一个全连接图，并且图上的权重是随着输入样本的不同而实时计算出来的",
        "Self-attention is message passing on a complete graph whose edge weights are computed "
        "from each input: every edge has weight > 0 and another input gives other weights.",
        "自注意力是在一个完全图上传递信息，边权由每个输入实时算出：每条边的权重都大于 0，"
        "换一个输入，权重也随之改变。",
        evidence("dynamic-graph:complete-graph,input-dependent",
                 "dynamic-graph:causal-not-equivariant"),
        conditions_en="Only without a causal mask, and the complete graph holds by "
                      "construction for any layer, random weights included (exp > 0); only "
                      "the input dependence is measured against a fixed graph. A causal layer, "
                      "as in GPT-style models, builds a triangular graph (its smallest edge "
                      "weight is 0: not complete), and without positions it is not "
                      "permutation-equivariant either (causal-not-equivariant).",
        conditions_zh="仅在不加因果掩码时成立；而且完全图对任何一层都按构造成立，随机权重也不"
                      "例外（exp > 0），只有“随输入而变”是相对固定的图测得的。因果的层（如 GPT "
                      "类模型）构成的是三角形的图（最小边权为 0，不是完全图），不加位置信息时也"
                      "不再对置换等变（causal-not-equivariant）。",
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
        evidence("dynamic-graph:headline", "dynamic-graph:input-dependent"),
    ),
    Claim(
        "000-error-kernel-measures-distance", "000", "error",
        "是衡量距离的核函数",
        "The sentence says the kernel K(·,·) measures distance, but a Nadaraya–Watson kernel "
        "measures similarity: it is largest for identical inputs (distance 0) and falls as "
        "the distance grows, so the nearest training points get the largest weights, while a "
        "distance is 0 there and grows. Measured on the regression's Gaussian kernel and on "
        "the attention kernel exp(q·k/√d) for unit vectors: in every row K(x, ·) peaks at x "
        "itself, and its within-row Spearman correlation with the distance is −1 (the "
        "distance itself: +1). A Gaussian kernel is computed from a distance, but what it "
        "measures is closeness.",
        "这句话说核函数 K(·,·) 衡量距离，但 Nadaraya–Watson 的核衡量的是相似度：输入相同"
        "（距离为 0）时它最大，距离越大它越小，所以最近的训练点得到最大的权重；而距离在那里"
        "为 0，并随之增大。在回归所用的高斯核与单位向量上的注意力核 exp(q·k/√d) 上实测："
        "每一行中 K(x, ·) 都在 x 自身处最大，它与距离的行内 Spearman 相关系数为 −1（距离本身："
        "+1）。高斯核虽然由距离算出，但它衡量的是接近程度。",
        evidence("!kernel-smoothing:kernel-largest-at-zero-distance,kernel-falls-with-distance"),
        reading_en="The plain reading: K(x, x_i) measures the distance between x and x_i — "
                   "larger the farther apart they are.",
        reading_zh="字面意思：K(x, x_i) 衡量 x 与 x_i 之间的距离——两者相距越远，它越大。",
    ),
    Claim(
        "000-error-kernel-formula-unscaled", "000", "error",
        r"\text{Output} = \sum_{i=1}^N \text{softmax}(q \cdot k_i) v_i",
        "Set beside Nadaraya–Watson as the attention formula, Output = Σ_i softmax(q·k_i) v_i "
        "drops the 1/√d_k of the attention the article defines (softmax(QKᵀ/√d_k)V): its "
        "kernel is exp(q·k), not attention's exp(q·k/√d_k). At d_k = 16 (fp64) its output "
        "differs from attnlab's attention by up to 1.98; with the 1/√d_k restored the two "
        "agree exactly (0). The kernel-smoothing reading stands with the kernel "
        "exp(q·k/√d_k) (000-kernel-smoothing).",
        "在与 Nadaraya–Watson 对比时，Output = Σ_i softmax(q·k_i) v_i 这个注意力公式丢掉了"
        "文章自己定义的注意力（softmax(QKᵀ/√d_k)V）中的 1/√d_k：它的核是 exp(q·k)，而不是"
        "注意力的 exp(q·k/√d_k)。在 d_k = 16（fp64）时，它的输出与 attnlab 注意力的输出最多"
        "相差 1.98；恢复 1/√d_k 后两者完全一致（0）。以 exp(q·k/√d_k) 为核，核平滑的解读"
        "依然成立（000-kernel-smoothing）。",
        evidence("!kernel-smoothing:article-formula-unscaled"),
        reading_en="The plain reading: Σ_i softmax(q·k_i) v_i, as printed, is the output of the "
                   "attention the article defines.",
        reading_zh="字面意思：按原样印出的 Σ_i softmax(q·k_i) v_i 就是文章所定义的注意力的输出。",
    ),
    Claim(
        "000-kernel-smoothing", "000", "claim",
        "Transformer 注意力机制在数学本质上就是一个可学习的核平滑方法",
        "Attention is, mathematically, a learnable kernel smoother: the Nadaraya–Watson "
        "estimator Σ K(x, x_i) y_i / Σ K(x, x_j).",
        "注意力在数学上就是一种可学习的核平滑方法：即 Nadaraya–Watson 估计 "
        "Σ K(x, x_i) y_i / Σ K(x, x_j)。",
        evidence("kernel-smoothing", "learned-kernel:nw-estimate"),
    ),
    Claim(
        "000-learned-similarity-kernel", "000", "claim",
        "自适应地学习出了一个“语义相似度核函数”",
        "Instead of a fixed Euclidean or Gaussian kernel, W^Q and W^K learn a similarity "
        "kernel from data: softmax attention is Nadaraya–Watson regression with the kernel "
        "exp(q·k), and training W^Q, W^K changes that kernel.",
        "注意力不用固定的欧氏距离或高斯核，而是由 W^Q 和 W^K 从数据中学出一个相似度核函数："
        "softmax 注意力就是以 exp(q·k) 为核的 Nadaraya–Watson 回归，训练 W^Q、W^K 会改变这个核。",
        evidence("learned-kernel"),
    ),
    Claim(
        "000-summary-orthogonal-roles", "000", "claim",
        "线性投影：让词在多个正交子空间中扮演不同角色",
        "Summary: the linear projections let each word play different roles in several "
        "orthogonal subspaces (different roles: qkv-roles; orthogonality, read in the input "
        "space or after the split: multihead-cost).",
        "总结：线性投影让词在多个正交子空间中扮演不同角色（不同角色见 `qkv-roles`；"
        "正交性分别在输入空间中和切分之后检验，见 `multihead-cost`）。",
        evidence("qkv-roles", "multihead-cost:heads-orthogonal"),
        reading_en="Different roles (directed scores with W^Q ≠ W^K) in subspaces that are "
                   "orthogonal in the input space: the trained heads' W^Q and W^K subspaces "
                   "(mean principal angle between heads ≥ 75°).",
        reading_zh="在输入空间中相互正交的子空间里扮演不同角色（W^Q ≠ W^K 时的有向分数）："
                   "训练后各头的 W^Q、W^K 子空间（各头之间的平均主夹角 ≥ 75°）。",
        readings=(Reading("Different roles in the heads' coordinate blocks after the split, "
                          "orthogonal by construction of view/transpose.",
                          "在切分后各头的坐标块中扮演不同角色，这些坐标块按 view/transpose 的"
                          "构造相互正交。",
                          evidence("qkv-roles", "multihead-cost:head-blocks-orthogonal")),),
    ),
    Claim(
        "000-summary-cosine", "000", "claim",
        "本质是在计算高维向量之间的夹角余弦，衡量语义相似度",
        "Summary: QKᵀ computes the cosine of the angle between high-dimensional vectors, a "
        "measure of semantic similarity (up to the lengths: q·k = |q||k|cos θ, and on a trained "
        "head the angle orders each query's scores).",
        "总结：QKᵀ 本质上是在计算高维向量之间的夹角余弦，衡量语义相似度（差一个长度因子："
        "q·k = |q||k|cos θ；在训练后的头上，夹角决定每个查询的分数顺序）。",
        evidence("dot-product-geometry:headline", "dot-product-geometry:trained-angle-order"),
        conditions_en=NORM_EN, conditions_zh=NORM_ZH,
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
        "理解了这些，再学习 Mamba、RWKV、线性注意力（Linear Attention）等架构时，"
        "就能一眼看透它们优化的是 Transformer 的哪个数学瓶颈。",
        not_testable_en="A statement about the reader and about other architectures; attnlab's "
                        "own linear-attention experiment measures one such bottleneck "
                        "(quadratic cost), which the article does not state.",
        not_testable_zh="这是关于读者和其他架构的陈述；attnlab 自己的线性注意力（linear-attention）"
                        "实验测量了其中一个瓶颈（平方复杂度），但文章并未给出这一论断。",
    ),
    Claim(
        "000-math-scalpel", "000", "claim",
        "数学，永远是揭开 AI 黑盒最锐利的那把手术刀",
        "Mathematics is always the sharpest scalpel for opening the AI black box.",
        "数学永远是揭开 AI 黑盒最锐利的手术刀。",
        not_testable_en="An opinion and a metaphor.",
        not_testable_zh="这是观点与比喻。",
    ),
)
