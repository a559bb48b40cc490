"""The inventory's text for article 001 (positional encoding, the ``MultiHeadAttention``
listing and practical tips): 《3Blue1Brown Transformer 入门指南：从数学原理到 PyTorch 实现》.

Every claim, code listing, recommendation and error of the article in reading order, as
:class:`~attnlab.experiments.claim_types.Claim` records (pure data; the verdicts are
:mod:`attnlab.experiments.claims`).
"""

from __future__ import annotations

from .claim_conditions import IID_EN, IID_ZH, NORM_EN, NORM_ZH
from .claim_types import Claim, Reading, evidence

__all__ = ["CLAIMS_001"]

#: Article 001's claims, code listings, recommendations and errors, in reading order.
CLAIMS_001: tuple[Claim, ...] = (
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
        evidence("dynamic-graph:headline", "dynamic-graph:pe-breaks-symmetry",
                 "dynamic-graph:causal-not-equivariant"),
        conditions_en="Only without a causal mask: equivariance holds by construction for any "
                      "unmasked layer, random weights included, while a causal layer (GPT-style "
                      "models) is already not permutation-equivariant without positions "
                      "(max |f(PX) − P f(X)| well above 0, measured: causal-not-equivariant); "
                      "the mask itself tells the tokens' order apart, though not their "
                      "positions.",
        conditions_zh="仅在不加因果掩码时成立：对任何不加掩码的层（随机权重也一样），等变性都按"
                      "构造成立；而因果的层（GPT 类模型）即使不加位置信息也已经不对置换等变"
                      "（|f(PX) − P f(X)| 的最大值远大于 0，实测：causal-not-equivariant）："
                      "掩码本身就区分了词元的先后，只是不给出位置。",
    ),
    Claim(
        "001-pe-formula", "001", "code",
        r"PE_{(pos,2i)} = \sin\left(\frac{pos}{10000^{2i/d_{\text{model}}}}\right)",
        "The sinusoidal encoding PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), as attnlab's "
        "table computes it; the table also has cos at 2i + 1, which the article does not "
        "print (item 001-error-pe-sin-half-only).",
        "正弦位置编码 PE(pos, 2i) = sin(pos / 10000^(2i/d_model))，attnlab 的位置编码表按此"
        "计算；该表在 2i + 1 维还有 cos，而文章没有给出这一半（见条目 "
        "001-error-pe-sin-half-only）。",
        evidence("pe-relative-position"),
    ),
    Claim(
        "001-error-pe-sin-half-only", "001", "error",
        r"PE_{(pos,2i)} = \sin\left(\frac{pos}{10000^{2i/d_{\text{model}}}}\right)",
        "The article prints only the sin half of the encoding, PE(pos, 2i) = "
        "sin(pos / 10000^(2i/d_model)), and nothing for the odd dimensions 2i + 1; yet its "
        "next point, that by the angle-sum formulas PE_{pos+k} is a linear combination of "
        "PE_{pos}, needs the cos half: sin(ω(p+k)) = sin ωp cos ωk + cos ωp sin ωk reads "
        "cos ωp, which the sin half does not hold. With the sin half alone no linear map "
        "shifts the encoding (at pos = 0 it is the zero vector, which every linear map sends "
        "to 0, while PE_k is not 0): even the best least-squares map misses by more than 1 "
        "(d_model = 128, k ≤ 64; sin-half-no-linear-shift). With PE(pos, 2i + 1) = "
        "cos(pos / 10000^(2i/d_model)) interleaved, as the original Transformer defines it, "
        "one rotation per k does it exactly (the same fit: about 1e-13).",
        "文章只给出了位置编码的 sin 一半 PE(pos, 2i) = sin(pos / 10000^(2i/d_model))，"
        "奇数维 2i + 1 没有给出任何公式；而它紧接着说由三角函数的和角公式可以证明 PE_{pos+k} "
        "能表示为 PE_{pos} 的线性组合，这需要 cos 一半：sin(ω(p+k)) = sin ωp cos ωk + "
        "cos ωp sin ωk 用到了 cos ωp，而 sin 一半中没有它。只有 sin 一半时，不存在把编码平移的"
        "线性映射（pos = 0 时它是零向量，任何线性映射都把它映到 0，而 PE_k 不是 0）：即使用"
        "最小二乘最优映射，误差也超过 1（d_model = 128，k ≤ 64；sin-half-no-linear-shift）。"
        "按原始 Transformer 的定义交错加入 PE(pos, 2i + 1) = cos(pos / 10000^(2i/d_model)) 后，"
        "每个 k 用一个旋转即可精确实现（同样的拟合：约 1e-13）。",
        evidence("!pe-relative-position:sin-half-no-linear-shift"),
        reading_en="The encoding as the article prints it, PE(pos, 2i) = "
                   "sin(pos / 10000^(2i/d_model)) alone, is one whose PE_{pos+k} is a linear "
                   "combination of PE_{pos} (the property its next point claims for it).",
        reading_zh="按文章给出的公式，只有 PE(pos, 2i) = sin(pos / 10000^(2i/d_model)) 的"
                   "编码，其 PE_{pos+k} 能表示为 PE_{pos} 的线性组合（即文章下一条所说的性质）。",
    ),
    Claim(
        "001-error-wavelength-decay", "001", "error",
        "波长衰减",
        "The item is labelled 'wavelength decay' (波长衰减), but the wavelengths it describes "
        "grow: the wavelength of dimension pair i is 2π·10000^(2i/d_model), from 2π up to "
        "almost 10000·2π, each pair's 10000^(2/d_model) times the previous one's (the same "
        "sentence says they grow exponentially); what decays with i is the frequency.",
        "该条的标题是“波长衰减”，但它描述的波长是在增长：第 i 对维度的波长为 "
        "2π·10000^(2i/d_model)，从 2π 增长到接近 10000·2π，每一对都是前一对的 "
        "10000^(2/d_model) 倍（同一句话也说波长呈指数增长）；随 i 衰减的是频率。",
        evidence("!pe-relative-position:wavelengths-grow,first-wavelength,wavelength-ratio,"
                 "last-wavelength"),
        reading_en="The label says that the wavelengths decay: they get shorter as the "
                   "dimension pair index i grows.",
        reading_zh="标题“波长衰减”的字面意思：随维度对序号 i 增大，波长衰减（变短）。",
    ),
    Claim(
        "001-wavelengths-exponential", "001", "claim",
        "使得不同维度 $i$ 的波长呈指数增长",
        "The factor 10000^(2i/d_model) makes the wavelengths grow exponentially with i, from "
        "2π to almost 10000·2π.",
        "因子 10000^(2i/d_model) 使波长随 i 指数增长，从 2π 一直到接近 10000·2π。",
        evidence("pe-relative-position:first-wavelength,wavelength-ratio,last-wavelength"),
    ),
    Claim(
        "001-frequency-roles", "001", "claim",
        "低频（大波长）捕获长距离依赖，高频（小波长）记录局部位置",
        "Low frequencies (long wavelengths) capture long-range dependencies, high frequencies "
        "(short wavelengths) record local position.",
        "低频（长波长）捕获长距离依赖，高频（短波长）记录局部位置。",
        evidence("pe-frequency-roles"),
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
        evidence("pe-relative-position"),
    ),
    Claim(
        "001-relative-position-learned", "001", "claim",
        "这正是模型能学到相对位置的关键",
        "This linearity is the key that lets a model learn relative positions: a model given "
        "sinusoidal encodings learns a task defined by an offset.",
        "这种线性关系正是模型能学到相对位置的关键：使用正弦位置编码的模型能学会由相对偏移定义的"
        "任务。",
        evidence("relative-position-learned"),
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
        "(a similarity): up to the lengths, q·k = |q||k|cos θ, and on a trained head the angle "
        "orders each query's scores.",
        "每个查询与键的点积，本质上是在计算两者夹角的余弦（相似度）：差一个长度因子，"
        "q·k = |q||k|cos θ；在训练后的头上，夹角决定每个查询的分数顺序。",
        evidence("dot-product-geometry:headline", "dot-product-geometry:trained-angle-order"),
        conditions_en=NORM_EN, conditions_zh=NORM_ZH,
    ),
    Claim(
        "001-scale-prevents-saturation", "001", "claim",
        "缩放因子 $\\sqrt{d_k}$ 防止点积结果过大导致 softmax 饱和",
        "The √d_k scale keeps the dot products from growing so large that softmax saturates.",
        "缩放因子 √d_k 防止点积过大而导致 softmax 饱和。",
        evidence("softmax-saturation"),
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
        evidence("article-code:headline"),
        reading_en="The listing as printed, copied and run: it builds, runs forward on a "
                   "(2, 10, 512) input and gives attnlab's multi-head attention with the same "
                   "weights.",
        reading_zh="按原样复制并运行这段代码：它能构建、能对 (2, 10, 512) 的输入执行 forward，"
                   "并在相同权重下给出与 attnlab 多头注意力相同的结果。",
    ),
    Claim(
        "001-listing-corrected", "001", "code",
        "先看最核心的 MultiHeadAttention 类（已精简非关键代码）",
        "Once its defects are fixed (the `if mask` swallowed by a comment, n_heads and d_model "
        "never set, k and v never split into heads), the listing equals attnlab's "
        "MultiHeadAttention with the same weights, with and without masks.",
        "修正其缺陷之后（`if mask` 被注释吞掉、从未设置 n_heads 和 d_model、k 和 v 没有切分成"
        "多个头），该代码与使用相同权重的 attnlab MultiHeadAttention 结果相等，无论是否使用掩码。",
        evidence("article-code:fixed-001-output"),
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
        evidence("article-code:einsum"),
    ),
    Claim(
        "001-error-fused-linear-call", "001", "error",
        "通过 nn.Linear(3*d_model) 一次性计算 QKV",
        "The tip names the fused projection nn.Linear(3*d_model), which is not a valid call: "
        "nn.Linear takes in_features and out_features, and nn.Linear(3*512) raises TypeError "
        "(missing 'out_features'; fused-call-raises). The projection the listing itself "
        "builds, nn.Linear(d_model, 3*d_model) (d_model inputs, 3·d_model outputs), runs; "
        "read as one argument, 3*d_model is the input size, not the output.",
        "该技巧给出的融合投影 nn.Linear(3*d_model) 不是合法的调用：nn.Linear 需要 "
        "in_features 和 out_features 两个参数，nn.Linear(3*512) 抛出 TypeError（缺少 "
        "'out_features'；fused-call-raises）。代码清单自己构建的投影 "
        "nn.Linear(d_model, 3*d_model)（d_model 个输入、3·d_model 个输出）可以运行；"
        "只写一个参数时，3*d_model 是输入维度而不是输出维度。",
        evidence("!article-code:fused-call-raises"),
        reading_en="The tip's plain reading: nn.Linear(3*d_model), as printed, builds the "
                   "fused QKV projection.",
        reading_zh="该技巧的字面意思：按原样写的 nn.Linear(3*d_model) 能构建融合的 Q、K、V 投影。",
    ),
    Claim(
        "001-fused-qkv-faster", "001", "claim",
        "一次性计算 QKV，比分开三次计算更快",
        "Computing Q, K, V with one nn.Linear(d_model, 3·d_model) is faster than three "
        "separate projections.",
        "用一个 nn.Linear(d_model, 3·d_model) 一次性计算 Q、K、V，比分开三次投影更快。",
        evidence("fused-qkv-speed:headline"),
        timed=True,
        reading_en="Faster on this machine's CPU, one thread: the geometric mean of the time "
                   "ratio separate / fused over article 001's size and tiny to medium ones, "
                   "forward and forward+backward, reaches 1.03, which two identical "
                   "implementations timed the same way must not.",
        reading_zh="在本机 CPU 单线程上更快：在文章 001 的规模以及从很小到中等的各规模上，"
                   "前向与前向 + 反向的时间比 分开 / 融合 的几何平均达到 1.03，而同样计时的"
                   "两份相同实现不应达到。",
    ),
    Claim(
        "001-fused-qkv-same", "001", "code",
        "self.qkv_proj = nn.Linear(d_model, 3*d_model)",
        "One fused projection with the three weights stacked gives the same q, k, v as three "
        "separate projections, with the same FLOPs.",
        "把三个权重堆叠成一个融合投影，得到的 q、k、v 与分开三次投影相同，FLOPs 也相同。",
        evidence("fused-qkv-speed:same-qkv", "fused-qkv-speed:same-flops"),
    ),
    Claim(
        "001-contiguous-before-view", "001", "claim",
        "转置操作后必须调用以保证内存连续性，否则 view 会报错",
        "After a transpose, contiguous() must be called before view, otherwise view raises an "
        "error.",
        "转置之后必须先调用 contiguous() 保证内存连续，否则 view 会报错。",
        evidence("article-code:view-after-transpose-raises,reshape-equals-contiguous",
                 "article-code:reshape-equals-contiguous"),
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
        evidence("softmax-saturation:headline"),
    ),
    Claim(
        "001-gradient-explosion", "001", "claim",
        "梯度爆炸问题",
        "Without the 1/√d_k scale, large scores make the gradient explode as d_k grows (the "
        "section is titled 'the gradient explosion problem'): the gradient reaching W^Q, "
        "relative to W^Q, grows with d_k unscaled and stays flat scaled.",
        "不使用 1/√d_k 缩放时，分数过大会使梯度随 d_k 增大而爆炸（该节标题为“梯度爆炸问题”）："
        "到达 W^Q 的梯度（相对 W^Q 本身）在不缩放时随 d_k 增大，缩放时保持不变。",
        evidence("softmax-saturation:wq-gradient-grows-unscaled,wq-gradient-flat-scaled"),
        reading_en="The heading read as a statement about the gradient that trains the "
                   "projections: without the scale the gradient reaching W^Q, relative to W^Q, "
                   "grows with d_k (each measurement against the other run as its control: "
                   "the scaled gradient does not grow, the unscaled one is not flat).",
        reading_zh="把标题理解为关于训练投影矩阵的梯度的陈述：不缩放时，到达 W^Q 的梯度（相对 "
                   "W^Q 本身）随 d_k 增大（每项测量都以另一种情形为对照：缩放时梯度不增大，"
                   "不缩放时梯度不平稳）。",
        readings=(Reading(
            "The heading read with the sentence under it: the saturated softmax is what makes "
            "the gradient explode, so the gradient passing through the saturated rows grows "
            "(measured: the largest row's gradient to its scores over d_k, unscaled, and the "
            "saturated rows' share of the gradient reaching W^Q).",
            "把标题与其下一句连起来理解：正是饱和的 softmax 使梯度爆炸，因此经过饱和行的梯度"
            "增大（实测：不缩放时各 d_k 上最大一行传给分数的梯度，以及饱和行在到达 W^Q 的梯度"
            "中所占的份额）。",
            evidence("!softmax-saturation:no-explosion,saturated-share")),),
        conditions_en="The explosion is in the gradient reaching W^Q, carried by the few rows "
                      "not yet saturated (RMS over rows ∝ d_k^¼): from d_k = 4 to 4096 it grows "
                      "6–25× unscaled (5.9–24.6 over seeds 0–5 at 64–256 rows) while the scaled "
                      "control stays within 1.1–1.5×. It is polynomial, not exponential, and "
                      "the typical row's gradient to its scores vanishes instead (median "
                      "‖∂L/∂s‖ falls by 1e-9; no row's gradient to its scores grows).",
        conditions_zh="爆炸发生在到达 W^Q 的梯度上，由少数尚未饱和的行承载（各行均方根 ∝ d_k^¼）："
                      "d_k 从 4 到 4096，不缩放时增大 6–25 倍（种子 0–5、64–256 行时为 5.9–24.6），"
                      "缩放的对照只相差 1.1–1.5 倍。这是多项式增长而不是指数增长；一般的一行传给"
                      "分数的梯度反而消失（‖∂L/∂s‖ 的中位数降到 1e-9 量级；任何一行传给分数的梯度"
                      "都不增大）。",
    ),
    Claim(
        "001-error-gradient-explosion-vs-vanishing", "001", "error",
        "梯度爆炸问题",
        "The two articles contradict each other on the same effect: article 001 titles the "
        "unscaled, saturated softmax 「梯度爆炸问题」 (the gradient explosion problem), while "
        "article 000 says of the very same regime 「梯度会变得非常趋近于 0（梯度消失）」 (the "
        "gradient vanishes). Measured without the scale, from the smallest to the largest "
        "d_k: the typical (median) row's gradient to its scores and to W^Q falls by orders "
        "of magnitude (gradient-vanishes-scores, gradient-vanishes-wq): it vanishes, as "
        "article 000 says. Only the RMS over rows of the gradient to W^Q grows (6–8×, "
        "carried by the few rows not yet saturated; item 001-gradient-explosion), so "
        "'explosion' describes the few rows, not the typical one.",
        "两篇文章对同一现象的说法相互矛盾：文章 001 把不缩放时饱和的 softmax 称为「梯度爆炸问题」，"
        "而文章 000 对同一情形写道「梯度会变得非常趋近于 0（梯度消失）」。不缩放时从最小到最大的 "
        "d_k 实测：一般的（中位数）一行传给分数和传给 W^Q 的梯度都下降若干个数量级"
        "（gradient-vanishes-scores、gradient-vanishes-wq）：梯度是消失，如文章 000 所说。"
        "只有各行到达 W^Q 的梯度的均方根增大（6–8 倍，由少数尚未饱和的行承载；见条目 "
        "001-gradient-explosion），所以“爆炸”说的是少数几行，而不是一般的一行。",
        evidence("!softmax-saturation:gradient-vanishes-scores,gradient-vanishes-wq"),
        reading_en="The heading's plain reading: in the unscaled regime the gradient explodes "
                   "(the typical row's gradient grows with d_k), which contradicts article "
                   "000's 'vanishes'.",
        reading_zh="标题的字面意思：不缩放时梯度爆炸（一般的一行的梯度随 d_k 增大），"
                   "这与文章 000 的“梯度消失”相矛盾。",
    ),
    Claim(
        "001-always-scale", "001", "recommendation",
        "一定要用缩放因子 $1/\\sqrt{d_k}$",
        "Always use the 1/√d_k scale: trained with it, a model with a large head dimension "
        "learns; without it, it does not.",
        "一定要用缩放因子 1/√d_k：使用它时，头维度较大的模型能学会任务；不使用则学不会。",
        evidence("scaling-training", "softmax-saturation"),
    ),
    Claim(
        "001-small-init-uniform", "001", "code",
        "nn.init.xavier_normal_(layer.weight, gain=0.02)",
        "With the projections initialised by xavier_normal_ (or xavier_uniform_) at gain 0.02, "
        "the initial attention is near-uniform instead of saturated, and the initial entropy "
        "falls as the gain grows.",
        "用 xavier_normal_（或 xavier_uniform_）以增益 0.02 初始化投影矩阵时，初始注意力接近均匀"
        "而不是饱和；增益越大，初始熵越低。",
        evidence("init-scale:normal-near-uniform,uniform-near-uniform",
                 "init-scale:entropy-monotone", "init-scale:entropy-at-largest-gain"),
    ),
    Claim(
        "001-small-init", "001", "recommendation",
        "初始化时适当调小线性层的权重",
        "Against large scores and saturation, initialise the linear layers smaller (e.g. "
        "xavier_normal_ with gain 0.02): where the default init saturates the softmax, "
        "trained on associative recall from the same directions and batches, the model "
        "should then reach a lower loss than with the default gain 1.0.",
        "为避免分数过大、softmax 饱和，初始化时适当调小线性层的权重（如 xavier_normal_ 取增益 "
        "0.02）：在默认初始化使 softmax 饱和的情形下，在关联回忆任务上从相同的初始方向、用相同"
        "批次训练，模型的最终损失应低于默认增益 1.0。",
        evidence("init-scale:headline", "init-scale:saturated-final-loss-ratio"),
        reading_en="The tip read as the section's remedy for saturation: where the default "
                   "init saturates the softmax (large d_k, scores not scaled), the small init "
                   "trains to a lower loss; its control is the same model and d_k with the "
                   "scale, where the default init is not saturated and the tip must not help.",
        reading_zh="把这条建议理解为该节针对饱和给出的解决方法：在默认初始化使 softmax 饱和的"
                   "情形（d_k 较大、分数不缩放）下，小初始化训练得到更低的损失；其对照是同一模型、"
                   "同一 d_k 但使用缩放，此时默认初始化不饱和，这一建议不应有好处。",
        conditions_en="Where the default init saturates: d_k = 64 with the scores q·k not "
                      "scaled (normalised initial entropy 0.31 at gain 1.0). There the final "
                      "loss ratio gain 0.02 / gain 1.0 is 0.76 (xavier_normal_) and 0.69 "
                      "(xavier_uniform_), 0.69–0.77 over seeds 0–2. With the scale, same model "
                      "and d_k = 64, the default init is not saturated (normalised entropy "
                      "0.96) and the tip gains nothing (ratio 1.18 and 0.96; 0.96–1.18 over "
                      "seeds 0–2): it cures saturation and nothing else.",
        conditions_zh="在默认初始化使 softmax 饱和的情形下成立：d_k = 64、分数 q·k 不缩放（增益 "
                      "1.0 时初始归一化熵为 0.31）。此时增益 0.02 与增益 1.0 的最终损失之比为 "
                      "0.76（xavier_normal_）和 0.69（xavier_uniform_），种子 0–2 上为 "
                      "0.69–0.77。同一模型、d_k = 64 但使用缩放时，默认初始化并不饱和（归一化熵 "
                      "0.96），这一建议没有好处（比值 1.18 和 0.96；种子 0–2 上为 0.96–1.18）："
                      "它只治饱和，别无好处。",
    ),
    Claim(
        "001-check-row-sums", "001", "recommendation",
        "每行的注意力权重求和是否为 1",
        "When debugging, check that each row of attention weights sums to 1 "
        "(torch.allclose(attn.sum(dim=-1), ...)); the check holds on correct weights and "
        "flags weights normalised over the wrong axis.",
        "调试时检查每行注意力权重之和是否为 1（torch.allclose(attn.sum(dim=-1), ...)）："
        "正确的权重能通过检查，沿错误维度归一化的权重会被发现。",
        evidence("article-code:tip-row-sums", "article-code:tips-catch"),
    ),
    Claim(
        "001-check-mask", "001", "recommendation",
        "掩码位置的值是否真的是负无穷",
        "When debugging, check the masked positions with attn.masked_fill(mask==0, 0).sum() == "
        "attn.sum(); the check holds on correctly masked weights and flags weights computed "
        "without the mask.",
        "调试时用 attn.masked_fill(mask==0, 0).sum() == attn.sum() 检查掩码位置："
        "正确遮蔽的权重能通过检查，未加掩码算出的权重会被发现。",
        evidence("article-code:tip-mask", "article-code:tips-catch"),
        conditions_en="The printed check compares weights after the softmax, where masked "
                      "positions are exactly 0, not −∞; the scores before it are −∞.",
        conditions_zh="文中的检查比较的是 softmax 之后的权重，被遮蔽位置恰为 0 而不是负无穷；"
                      "softmax 之前的分数才是负无穷。",
    ),
    Claim(
        "001-error-masked-weights-minus-infinity", "001", "error",
        "掩码位置的值是否真的是负无穷（attn.masked_fill(mask==0,0).sum() == attn.sum()）",
        "The tip says to check that the masked positions' values really are −∞, but the check "
        "it prints reads attn, the weights after the softmax, where the masked positions are "
        "exactly 0 (it tests that zeroing them changes nothing); −∞ is the score before the "
        "softmax, and weights of −∞ would make attn.sum() −∞ and the check fail. Worse, the "
        "check cannot detect −∞ at all: it passes just as well with the masked scores "
        "filled with −1e9 or −1e4 (exp underflows to 0), so it cannot tell −∞ from a finite "
        "fill.",
        "该技巧说要检查掩码位置的值“是否真的是负无穷”，但它给出的检查读的是 attn，即 softmax "
        "之后的权重，被遮蔽位置的权重恰为 0（检查的是把它们置 0 不改变总和）；负无穷是 softmax "
        "之前的分数，若权重真是负无穷，attn.sum() 为负无穷，这一检查反而不成立。"
        "更要紧的是，这一检查根本测不出负无穷：把被遮蔽的分数填成 −1e9 或 −1e4 时它同样通过"
        "（exp 下溢为 0），所以它无法区分负无穷与有限的填充值。",
        evidence("!masking:masked-weight-zero,printed-check-blind-to-fill"),
        reading_en="The tip's plain reading: the values at the masked positions of attn (the "
                   "weights its check reads) really are −∞.",
        reading_zh="该技巧的字面意思：attn（其检查所读的权重）在掩码位置上的值真的是负无穷。",
    ),
    Claim(
        "001-mask-minus-infinity", "001", "code",
        "scores = scores.masked_fill(mask == 0, float('-inf'))",
        "Setting the masked scores to −∞ before the softmax gives the masked positions a "
        "weight of exactly 0, and with a causal mask no gradient flows from the future.",
        "在 softmax 之前把被遮蔽的分数设为负无穷，被遮蔽位置的权重恰好为 0；"
        "使用因果掩码时，未来位置不会传回梯度。",
        evidence("masking:masked-weight-zero", "masking:headline"),
    ),
    Claim(
        "001-variance-dk", "001", "claim",
        "的方差就是 $d_k$",
        "For q, k with i.i.d. components of mean 0 and variance 1, Var(q·k) = d_k.",
        "当 q、k 的各分量独立同分布、均值为 0、方差为 1 时，Var(q·k) = d_k。",
        evidence("qk-variance"),
        conditions_en=IID_EN, conditions_zh=IID_ZH,
    ),
    Claim(
        "001-scale-stabilises", "001", "claim",
        "缩放 $1/\\sqrt{d_k}$ 正好使方差回归到 1，保持梯度稳定性",
        "Scaling by 1/√d_k brings the variance back to exactly 1 and keeps the gradients "
        "stable.",
        "乘以 1/√d_k 正好使方差回到 1，保持梯度稳定。",
        evidence("qk-variance", "softmax-saturation"),
        conditions_en=IID_EN, conditions_zh=IID_ZH,
    ),
    Claim(
        "001-heatmap-code", "001", "code",
        "plt.matshow(attn[0,0].detach().numpy(), cmap='Reds')",
        "The snippet is meant to draw a heat map of the first head's attention matrix "
        "(plt.matshow of attn[0, 0]), but nothing the article gives defines attn: it is a "
        "local variable of the listing's forward, which returns only self.out_proj(out). Run "
        "in a notebook after the listing (corrected so that it runs) and out = model(x), the "
        "snippet raises NameError (name 'attn' is not defined; heatmap-snippet-raises); "
        "taking forward's return value for the weights (attn = model(x)) fails too, in "
        "matshow (attn[0, 0] is a vector of the output). After a forward that returns its "
        "weights as well, (output, attn), the same snippet runs and draws the 10 × 10 map of "
        "head 1.",
        "这段代码本意是绘制第一个头的注意力矩阵热力图（对 `attn[0, 0]` 调用 `plt.matshow`），"
        "但文章给出的代码中没有任何地方定义 `attn`：它是代码清单 `forward` 内部的局部变量，"
        "而 `forward` 只返回 `self.out_proj(out)`。在笔记本中先运行（修正到能运行的）代码清单"
        "和 `out = model(x)`，再运行这段代码，会抛出 NameError（名称 `attn` 未定义；"
        "heatmap-snippet-raises）；把 `forward` 的返回值当作权重（`attn = model(x)`）同样失败，"
        "错误出在 `matshow`（`attn[0, 0]` 是输出中的一个向量）。若 `forward` 同时返回权重 "
        "`(output, attn)`，同一段代码可以运行，画出第 1 个头 10 × 10 的热力图。",
        evidence("!article-code:heatmap-snippet-raises"),
        reading_en="The snippet as printed, run after the article's MultiHeadAttention and "
                   "its forward call, draws the first head's attention heat map.",
        reading_zh="按原样运行这段代码（在文章的 MultiHeadAttention 及其 forward 调用之后），"
                   "能画出第一个头的注意力热力图。",
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
        evidence("article-code:einsum"),
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
