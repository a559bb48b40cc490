"""Part 2 of the course: The dot product and the √d_k argument.

Its cells in English and in Chinese (see build.py).
"""

from cells import Code, Exercise, Part, Text  # noqa: F401

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
        **练习 3.** 用点积与范数算出 `q` 和 `k`（本节开头那对 64 维向量）之间的夹角
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
