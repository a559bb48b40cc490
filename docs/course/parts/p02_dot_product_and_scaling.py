"""Part 2 of the course: The dot product and the √d_k argument.

Its cells in English and in Chinese (see build.py).
"""

from cells import Code, Exercise, Part, Predict, Text, by_hand, measured  # noqa: F401

# ======================================================================================
# 02 the dot product and the sqrt(d_k) argument
# ======================================================================================

PART = Part(2, "dot_product_and_scaling", "The dot product and the √d_k argument",
           "点积与 √d_k 的论证", (
    Text("""
        The second step is $QK^T$: entry $(i, j)$ is the dot product of query $i$ with key
        $j$, and $\\vec a \\cdot \\vec b = \\|\\vec a\\| \\|\\vec b\\| \\cos\\theta$. Article 000:
        「抛开向量长度不看，点积的核心意义在于衡量两个向量在方向上的相似度」. The third step
        divides by $\\sqrt{d_k}$; both articles justify it with a variance argument. We check
        the identity, then the argument, then what happens without the scale: to the
        softmax, to its gradient and to training.

        Every experiment below ends with `report(r)`: what it measured against what the claim
        expects, its **control** (the same measurement on something that should not show the
        property: when the control passes too, the measurement tells nothing) and the
        verdict.
        """, """
        第二步是 $QK^T$：第 $(i, j)$ 个元素是第 $i$ 个查询与第 $j$ 个键的点积，而
        $\\vec a \\cdot \\vec b = \\|\\vec a\\| \\|\\vec b\\| \\cos\\theta$。文章 000 说：
        「抛开向量长度不看，点积的核心意义在于衡量两个向量在方向上的相似度」。第三步除以
        $\\sqrt{d_k}$，两篇文章都用方差来论证它。我们先验证这个恒等式，再验证论证本身，
        最后看看不缩放会发生什么：对 softmax、对它的梯度、对训练各有什么影响。

        下面每个实验都以 `report(r)` 结束：它测量了什么、论断预期的是什么、它的**对照**
        （在不应具有该性质的对象上做同样的测量：若对照也满足，这个测量就说明不了什么），以及结论。
        """),
    Code("""
        q, k = torch.randn(2, 64, dtype=torch.float64)
        cos = torch.nn.functional.cosine_similarity(q, k, dim=0)
        print(float(q @ k), float(q.norm() * k.norm() * cos))
        """),
    *measured("dot_product_geometry", """
        The experiment `dot-product-geometry` makes this check on the queries and keys of an
        attnlab attention layer: `measure` rebuilds every score from the two norms and the
        angle (and, as its control, from an angle computed the wrong way), splits the
        scores' variance into the angle's share and the lengths' share, and trains a small
        recall model to see which keys win. Its code, then a small run:
        """, """
        实验 `dot-product-geometry` 在 attnlab 注意力层的查询和键上做这个检验：`measure`
        用两个范数和夹角重建每个分数（对照是用错误方法算出的夹角），把分数的方差分成夹角的份额和
        长度的份额，再训练一个小的回忆模型，看哪些键胜出。下面是它的代码，然后是一次小规模的运行：
        """, """
        m = dot_product_geometry.measure(train_steps=20)
        print(T("largest |q·k − ‖q‖‖k‖cos θ| / ‖q‖‖k‖:", "最大的 |q·k − ‖q‖‖k‖cos θ| / ‖q‖‖k‖："),
              fmt_num(m.err))
        print(T("the same with the control's angle:", "换成对照的夹角："), fmt_num(m.control_err))
        """),
    Code("""
        r = run("dot-product-geometry", train_steps=100)
        report(r)
        show(r)
        """),
    Text("""
        **But the length is not set aside.** The score is $\\|q\\|\\|k\\|\\cos\\theta$: a long
        key at a wider angle can outscore a short key that points the same way as the query.
        Attention compares dot products, not angles.
        """, """
        **但长度并没有被“抛开”。** 分数是 $\\|q\\|\\|k\\|\\cos\\theta$：一个较长但夹角较大的键，
        可以胜过一个方向与查询更一致的短键。注意力比较的是点积，而不是夹角。
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
        **Turn the query.** Below, five keys of different lengths in the plane and one query:
        move its direction (`angle`, in degrees) and its length, and watch the scores and the
        weights. The longest key wins over a wide range of angles; lengthening the query
        sharpens the weights without changing their order.
        """, """
        **转动查询。** 下面是平面上五个长度不同的键和一个查询：改变查询的方向（`angle`，单位为度）
        和长度，看分数和权重如何变化。最长的键在很大的角度范围内都胜出；把查询变长会让权重更集中，
        但不改变它们的大小顺序。
        """),
    Code("""
        from attnlab.course import slider

        key_deg = torch.tensor([0.0, 60.0, 130.0, 200.0, 290.0])
        key_len = torch.tensor([1.0, 2.5, 1.0, 1.5, 0.7])
        keys2 = key_len[:, None] * torch.stack([torch.deg2rad(key_deg).cos(),
                                                torch.deg2rad(key_deg).sin()], 1)

        def draw_direction(angle, length):
            q_ = length * torch.tensor([math.cos(math.radians(angle)),
                                        math.sin(math.radians(angle))])
            s_ = keys2 @ q_
            w_ = torch.softmax(s_, dim=0)
            fig, (ax, bx) = plt.subplots(1, 2, figsize=(8, 3.5))
            for j, kj in enumerate(keys2):
                ax.annotate("", xy=kj.tolist(), xytext=(0, 0),
                            arrowprops=dict(arrowstyle="-|>", color="gray"))
                ax.text(float(kj[0]) * 1.1, float(kj[1]) * 1.1, f"k{j}", ha="center")
            ax.annotate("", xy=q_.tolist(), xytext=(0, 0),
                        arrowprops=dict(arrowstyle="-|>", color="C3", lw=2))
            ax.text(float(q_[0]) * 1.1, float(q_[1]) * 1.1, "q", color="C3", ha="center")
            ax.set_xlim(-3, 3)
            ax.set_ylim(-3, 3)
            ax.set_aspect("equal")
            ax.set_title(T(f"query at {angle:.0f}°, length {length:.1f}",
                           f"查询：{angle:.0f}°，长度 {length:.1f}"))
            bx.bar(range(5), w_.tolist(), color="C0")
            bx.set_xticks(range(5), [f"k{j}\\n{float(s):.2f}" for j, s in enumerate(s_)])
            bx.set_ylim(0, 1)
            bx.set_title(T("weights (scores under the bars)", "权重（柱下为分数）"))
            plt.show()
            print(T(f"the winner: k{int(w_.argmax())}, weight {float(w_.max()):.3f}",
                    f"胜出的键：k{int(w_.argmax())}，权重 {float(w_.max()):.3f}"))

        slider(draw_direction, angle=(0.0, 360.0, 5.0, 30.0), length=(0.2, 4.0, 0.1, 1.0))
        """),
    Predict("predict", """
        **Predict, then check.** Take $q$ and $k$ with $d_k = 64$ independent components, each
        of mean 0 and variance 1, and do **not** scale the score. Over many pairs, what is
        the variance of $q \\cdot k$? Write a number in `predict_var`; the check measures it on
        20 000 pairs (within 12 passes).
        """, """
        **先预测，再核对。** 取 $d_k = 64$ 维的 $q$ 与 $k$，各分量相互独立、均值为 0、方差为 1，
        并且**不**对分数做缩放。在大量的向量对上，$q \\cdot k$ 的方差是多少？把一个数写进
        `predict_var`；检查单元格会在两万对向量上测量它（相差不超过 12 即通过）。
        """,
        blank="predict_var = ...  # your prediction: Var(q·k) at d_k = 64, unscaled",
        answer="predict_var = 64  # 64 independent products of variance 1: the variances add up",
        check="""
            g_var = torch.Generator().manual_seed(7)
            qs_, ks_ = (torch.randn(20_000, 64, generator=g_var) for _ in range(2))
            predicted(predict_var, float((qs_ * ks_).sum(-1).var()), within=12, why_en=(
                "q·k adds up 64 independent products, each of variance 1: the variances add, "
                "to d_k = 64 (a standard deviation of 8), far from the 1 the softmax was made "
                "for; dividing by √64 = 8 brings it back to 1."), why_zh=(
                "q·k 是 64 个独立乘积之和，每个乘积的方差为 1：方差相加，得到 d_k = 64"
                "（标准差为 8），远离 softmax 所适合的 1；除以 √64 = 8 才把它拉回 1。"))
            """,
        wrong="predict_var = 1  # as if the score kept its components' variance"),
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
        is $d_k(1 + 2\\mu^2)$, and dividing by $\\sqrt{d_k}$ no longer brings it to 1. Its
        control breaks the other condition, independence: components correlated within each
        vector.
        """, """
        attnlab 的实验 `qk-variance` 用多得多的样本做同样的测量，并指出这个论证的**前提**：
        若均值 $\\mu \\neq 0$，方差是 $d_k(1 + 2\\mu^2)$，除以 $\\sqrt{d_k}$ 就不再得到 1。
        它的对照破坏的是另一个前提——独立性：每个向量内部的各分量彼此相关。
        """),
    *measured("qk_variance", """
        `measure` draws the queries and keys in blocks of $256 \\times 256$ pairs, for each
        $d_k$ (mean 0), then with a mean $\\mu$, then the controls (components correlated
        within a vector), and keeps each set's score statistics. Run small, it prints the
        variance of $q \\cdot k$ and of $q \\cdot k / \\sqrt{d_k}$:
        """, """
        `measure` 以每块 $256 \\times 256$ 对的方式抽取查询和键：先对每个 $d_k$（均值为 0），
        再取均值 $\\mu$，最后是对照（同一向量内各分量相关），并记下每一组分数的统计量。
        小规模运行时，它打印 $q \\cdot k$ 与 $q \\cdot k / \\sqrt{d_k}$ 的方差：
        """, """
        m = qk_variance.measure(dims=(16, 256), pairs=20_000, mean_blocks=8, real_model=None)
        for c in m.centred:
            print(f"d_k = {c.stats.d_k}: Var(q·k) = {fmt_num(c.stats.var)}, "
                  f"Var(q·k/√d_k) = {fmt_num(c.stats.var_scaled)}")
        """),
    Code("""
        r = run("qk-variance", pairs=65536, dims=(16, 64, 256), mean_blocks=8, real_model=None)
        report(r)
        show(r)
        """),
    Text("""
        **Saturation, by hand.** One query and eight keys with random components of variance
        1: move $d_k$ and choose whether the scores are divided by $\\sqrt{d_k}$. Without the
        scale, the largest weight goes to 1 as $d_k$ grows (the row becomes one-hot: the
        softmax saturates); with it, the row keeps the same spread at every $d_k$.
        """, """
        **亲手看饱和。** 一个查询、八个键，各分量都是方差为 1 的随机数：改变 $d_k$，并选择分数是否
        除以 $\\sqrt{d_k}$。不缩放时，随着 $d_k$ 增大，最大的权重趋向 1（这一行变成独热：
        softmax 饱和了）；缩放后，这一行在任何 $d_k$ 下都保持相同的分散程度。
        """),
    Code("""
        from attnlab.course import slider

        g_sat = torch.Generator().manual_seed(4)
        q_sat, k_sat = torch.randn(1024, generator=g_sat), torch.randn(8, 1024, generator=g_sat)

        def draw_saturation(d_k, scale):
            s_ = k_sat[:, :d_k] @ q_sat[:d_k]  # the first d_k components
            if scale == "1/√d_k":
                s_ = s_ / math.sqrt(d_k)
            w_ = torch.softmax(s_, dim=0)
            entropy = float(-(w_ * w_.clamp_min(1e-30).log()).sum()) / math.log(8)
            fig, ax = plt.subplots(figsize=(5, 3))
            ax.bar(range(8), w_.tolist(), color="C0" if scale == "1/√d_k" else "C3")
            ax.set_ylim(0, 1)
            ax.set_xlabel(T("key", "键"))
            ax.set_ylabel(T("weight", "权重"))
            ax.set_title(T(f"d_k = {d_k}, scale {scale}", f"d_k = {d_k}，缩放 {scale}"))
            plt.show()
            print(T(f"largest weight {float(w_.max()):.3f}, entropy / log 8 = {entropy:.3f}",
                    f"最大权重 {float(w_.max()):.3f}，熵 / log 8 = {entropy:.3f}"))

        slider(draw_saturation, d_k=([4, 16, 64, 256, 1024], 64), scale=(["1", "1/√d_k"], "1"))
        """),
    Text("""
        **Without the scale, softmax saturates — and the gradient?** Article 000 says the
        gradient then **vanishes**; article 001 heads the same section
        「梯度爆炸问题」 (gradient explosion). The experiment `softmax-saturation` measures
        both, as $d_k$ grows: how one-hot the rows become, the gradient a row passes back to
        its scores (the typical row, by the median over rows), and the gradient that reaches
        $W_q$ relative to $W_q$ itself (over all rows). Its control is the same rows scaled
        by $1/\\sqrt{d_k}$.
        """, """
        **不缩放，softmax 就会饱和——梯度呢？** 文章 000 说此时梯度会**消失**；文章 001 给同一节
        起的标题是「梯度爆炸问题」。实验 `softmax-saturation` 随着 $d_k$ 增大把两者都测出来：
        各行有多接近独热向量，一行传回给自己分数的梯度（一般的一行：取各行的中位数），以及到达
        $W_q$ 的梯度相对 $W_q$ 本身的大小（对所有行）。它的对照是除以 $\\sqrt{d_k}$ 之后的同样各行。
        """),
    *measured("softmax_saturation", """
        `measure` draws, for each $d_k$, a batch of rows (one query, 16 keys, their values and
        a readout), computes each row's statistics unscaled and scaled — largest weight,
        entropy, the gradient to the scores and to $W_q$ — and checks the two gradient
        formulas against autograd. At three $d_k$:
        """, """
        `measure` 对每个 $d_k$ 抽取一批行（一个查询、16 个键、它们的值和一个读出向量），在不缩放和
        缩放两种情况下算出每行的统计量——最大权重、熵、传给分数和 $W_q$ 的梯度——并用自动求导核对
        两个梯度公式。取三个 $d_k$：
        """, """
        m = softmax_saturation.measure(dims=(4, 64, 1024), rows=64)
        for row in m.per_dim:
            print(f"d_k = {row.d_k}: " + T("largest weight", "最大权重")
                  + f" {fmt_num(row.unscaled.max_weight)} → {fmt_num(row.scaled.max_weight)} "
                  + T("(unscaled → scaled)", "（不缩放 → 缩放）"))
        """),
    Code("""
        r = run("softmax-saturation", rows=128)
        report(r)
        vanish, wq_unscaled, wq_scaled = (r.check(i) for i in (
            "gradient-vanishes-scores", "wq-gradient-grows-unscaled", "wq-gradient-flat-scaled"))
        check_line(vanish, "the typical row's gradient to its scores vanishes: median row, "
                   "largest d_k / smallest", "一般的一行传给分数的梯度消失：中位数一行，"
                   "最大 d_k / 最小 d_k")
        check_line(wq_unscaled, "the gradient reaching W_q grows, unscaled: largest d_k / "
                   "smallest", "不缩放时到达 W_q 的梯度增大：最大 d_k / 最小 d_k")
        check_line(wq_scaled, "and stays flat with the scale: largest / smallest",
                   "缩放时它保持平稳：最大 / 最小")
        print(T("article 000's 'vanishes', for the typical row:",
                "文章 000 的“消失”（就一般的一行而言）："),
              T("measured", "测得如此") if vanish.passed else T("not measured", "未测到"))
        print(T("article 001's 'explosion', of the gradient reaching W_q:",
                "文章 001 的“爆炸”（就到达 W_q 的梯度而言）："),
              T("measured", "测得如此") if wq_unscaled.passed and wq_scaled.passed
              else T("not measured", "未测到"))
        show(r)
        """),
    Text("""
        The two words describe different quantities: the typical row's gradient, and the
        gradient summed into $W_q$ over all the rows.

        **Does it matter for training?** The experiment `scaling-training` trains two copies
        of a one-head model with a wide head ($d_k$ the whole model width) on associative
        recall — find the value stored with the queried key — from the same initial weights
        on the same batches; the only difference is the scale, $1/\\sqrt{d_k}$ or 1.
        """, """
        这两个词描述的是不同的量：一般的一行的梯度，以及对所有行累加到 $W_q$ 上的梯度。

        **这对训练有影响吗？** 实验 `scaling-training` 在关联回忆任务
        （找出与所查询的键一起存放的值）上训练同一个单头模型的两个副本，头很宽
        （$d_k$ 等于整个模型的宽度），初始权重相同、训练批次相同；
        唯一的区别是缩放系数：$1/\\sqrt{d_k}$ 或 1。
        """),
    *measured("scaling_training", """
        `measure` trains three runs from the same initial weights: scaled, unscaled, and the
        scaled one again with another seed (the control: how much two runs differ by chance
        alone). Ten steps:
        """, """
        `measure` 从相同的初始权重训练三次：缩放的、不缩放的，以及换一个种子再训练一次缩放的
        （对照：仅仅由于偶然，两次训练会相差多少）。训练十步：
        """, """
        m = scaling_training.measure(config=scaling_training.RecallConfig(steps=10), probe=64)
        print(T("final loss, scaled:", "最终损失，缩放："), fmt_num(m.scaled.losses[-1]),
              T(", unscaled:", "，不缩放："), fmt_num(m.unscaled[-1]),
              T(", scaled, another seed:", "，缩放、换一个种子："), fmt_num(m.again.losses[-1]))
        """),
    Code("""
        r = run("scaling-training", probe=256)
        report(r)
        show(r)
        """),
    Text("""
        **Article 001's tip: initialise small.** Against large scores and saturation, article
        001 advises 「初始化时适当调小线性层的权重」, e.g. `xavier_normal_` with gain 0.02.
        Scaling the projections' init by a gain $g$ scales the scores by $g^2$, so a small
        gain starts every row near-uniform. The experiment `init-scale` trains the same
        recall model with gain 0.02 and with the default gain 1.0 in the regime the tip is
        meant for (a wide head, scores not scaled, where the default init starts
        saturated), and, as its control, where the default init is not saturated (scaled
        scores): there is nothing to cure there, and the tip must gain nothing.
        """, """
        **文章 001 的建议：小初始化。** 为了避免分数过大、softmax 饱和，文章 001 建议
        「初始化时适当调小线性层的权重」，例如 `xavier_normal_` 取增益 0.02。把投影的初始化乘以增益
        $g$，分数就乘以 $g^2$，所以小增益让每一行一开始都接近均匀。实验 `init-scale` 用增益 0.02
        和默认增益 1.0 训练同一个回忆模型：一是在这个建议针对的情形（头很宽、分数不缩放，默认初始化
        一开始就饱和），二是作为对照，在默认初始化并不饱和的情形（分数经过缩放）：那里没有什么需要
        治的，这个建议就不应带来好处。
        """),
    *measured("init_scale", """
        `measure` first reads the initial attention of each gain (entropy over $\\log N$,
        without training), in the saturated regime and in the control's, then trains the
        recall model with each gain. A short run:
        """, """
        `measure` 先读出每个增益下的初始注意力（熵除以 $\\log N$，不训练），包括饱和情形和对照
        情形，然后用各个增益训练回忆模型。一次短的运行：
        """, """
        m = init_scale.measure(gains=(0.02, 1.0), saturating_gain=None,
                               train_config=init_scale.InitTrainConfig(heads=1, steps=20))
        print(T("saturated regime, initial entropy / log N:", "饱和情形，初始熵 / log N："),
              {g: fmt_num(e) for g, e in m.sat_init.items()})
        print(T("control (scaled scores), gain 1.0:", "对照（缩放的分数），增益 1.0："),
              fmt_num(m.control_init))
        """),
    Code("""
        r = run("init-scale", gains=(0.02, 0.1, 1.0, 10.0), saturating_gain=None, plot=False)
        report(r)
        for id_, en, zh in [
                ("saturated-default-entropy", "the default gain 1.0 starts saturated: initial "
                 "entropy / log N", "默认增益 1.0 一开始就饱和：初始熵 / log N"),
                ("saturated-tip-near-uniform", "gain 0.02 starts near-uniform: initial "
                 "entropy / log N", "增益 0.02 一开始接近均匀：初始熵 / log N"),
                ("saturated-final-loss-ratio", "there, gain 0.02 ends lower: final loss, "
                 "gain 0.02 / gain 1.0", "此时增益 0.02 的最终损失更低：增益 0.02 / 增益 1.0"),
                ("control-no-gain", "unsaturated, gain 0.02 gains nothing: final loss, "
                 "gain 0.02 / gain 1.0", "不饱和时增益 0.02 没有好处：增益 0.02 / 增益 1.0")]:
            check_line(r.check(id_), en, zh)
        """),
    Text("""
        Read the two ratios together: a remedy for saturation should help where the default
        init saturates, and only there; where the scale already keeps the scores at unit
        variance there is nothing for it to cure.
        """, """
        把两个比值放在一起读：治饱和的办法应当在默认初始化饱和的地方有帮助，而且只在那里有帮助；
        在缩放已经把分数的方差保持为 1 的地方，它没有什么可治的。
        """),
    Exercise("ex1", """
        **Exercise 1.** If every component of $q$ and $k$ has mean 0 and variance $\\sigma^2$
        (still independent), what is $\\mathrm{Var}(q \\cdot k)$? Fill in the function.
        """, """
        **练习 1.** 若 $q$ 与 $k$ 的每个分量均值为 0、方差为 $\\sigma^2$（仍然独立），
        $\\mathrm{Var}(q \\cdot k)$ 是多少？补全这个函数。
        """,
        blank="""
            def ex1_variance(d_k, s2):
                return ...  # Var(q·k): d_k components, each of mean 0 and variance s2
            """,
        answer="""
            def ex1_variance(d_k, s2):
                return d_k * s2**2
            """,
        check="""
            answered(ex1_variance=ex1_variance(8, 1.0))
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
        blank="""
            def ex2_scale(d_k, s2):
                return ...  # the factor that brings Var(q·k) back to 1
            """,
        answer="""
            def ex2_scale(d_k, s2):
                return 1 / (s2 * math.sqrt(d_k))
            """,
        check="""
            answered(ex2_scale=ex2_scale(8, 1.0))
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
        **练习 3.** 用点积与范数算出 `q` 和 `k`（本部分开头那对 64 维向量）之间的夹角
        `ex3_deg`（单位：度）。
        """,
        blank="ex3_deg = ...  # the angle between q and k, in degrees",
        answer="ex3_deg = math.degrees(math.acos(float(q @ k / (q.norm() * k.norm()))))",
        check="""
            answered(ex3_deg=ex3_deg)
            along = float(k @ q) / float(q.norm())  # k's component along q
            across = float((k - along * q / q.norm()).norm())  # and across it
            assert abs(ex3_deg - math.degrees(math.atan2(across, along))) < 1e-6, T(
                "not the angle between q and k", "这不是 q 与 k 的夹角")
            print(T("right:", "正确："), round(ex3_deg, 2))
            """,
        wrong="ex3_deg = math.degrees(math.acos(max(-1.0, min(1.0, float(q @ k) / 64))))"),
))
