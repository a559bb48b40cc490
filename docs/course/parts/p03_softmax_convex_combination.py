"""Part 3 of the course: Softmax as a convex combination.

Its cells in English and in Chinese (see build.py).
"""

from cells import Code, Exercise, Part, Predict, Text, by_hand, measured  # noqa: F401

# ======================================================================================
# 03 softmax as a convex combination
# ======================================================================================

PART = Part(3, "softmax_convex_combination", "Softmax as a convex combination",
           "softmax 与凸组合", (
    Text("""
        The fourth step: $A = \\mathrm{softmax}(QK^T/\\sqrt{d_k})$, then
        $\\mathrm{Output}_i = \\sum_j A_{ij} V_j$. Every row of $A$ is non-negative and sums to
        1, so each output is 「一个向量的凸组合」 of the values, a 「加权重心计算」 (a weighted
        centre of mass), as article 000 puts it. attnlab returns the weights on request.
        """, """
        第四步：$A = \\mathrm{softmax}(QK^T/\\sqrt{d_k})$，然后
        $\\mathrm{Output}_i = \\sum_j A_{ij} V_j$。$A$ 的每一行非负且和为 1，所以每个输出都是
        各个值的「一个向量的凸组合」，即文章 000 所说的「加权重心计算」。attnlab 可以按需返回权重。
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
        outside the box of its values over many random inputs. Its control: weights that
        still sum to 1 but may be negative — the sum to 1 alone does not keep the outputs in
        the hull.
        """, """
        实验 `convex-combination` 在大量随机输入上测量输出落在各值包围盒之外的最大距离。它的对照
        是每行之和仍为 1、但可以为负的权重——只有“和为 1”并不能把输出留在凸包内。
        """),
    Text("""
        The same measurement by hand first: 200 random rows of softmax weights, and the
        control's weights (the same rows plus noise, shifted back to a sum of 1).
        """, """
        先亲手做同样的测量：200 行随机的 softmax 权重，以及对照的权重（同样的行加上噪声，
        再平移回和为 1）。
        """),
    by_hand("convex-combination", """
        g_c = torch.Generator().manual_seed(0)
        qc, kc, vc = (torch.randn(200, 6, 8, generator=g_c) for _ in range(3))
        w_c = torch.softmax(qc @ kc.transpose(-1, -2) / math.sqrt(8), dim=-1)  # (200, 6, 6)
        signed = w_c + torch.randn(200, 6, 6, generator=g_c)
        signed = signed - signed.mean(-1, keepdim=True) + 1 / 6  # rows still sum to 1

        def outside(weights):  # how far any output lies outside the box of its values
            out_c = weights @ vc
            lo_c, hi_c = vc.min(-2, keepdim=True).values, vc.max(-2, keepdim=True).values
            return float(((lo_c - out_c).clamp_min(0) + (out_c - hi_c).clamp_min(0)).max())

        print(T("softmax weights, outside the box by:", "softmax 权重，超出包围盒："),
              fmt_num(outside(w_c)))
        print(T("control (signed, sum 1), outside by:", "对照（有正有负、和为 1），超出："),
              fmt_num(outside(signed)))
        """),
    *measured("convex_combination", """
        attnlab's `measure` does the same on random $q, k, v$ with its attention, and also
        checks that the weights are non-negative and sum to 1, against the controls' weights.
        Its code and a small run:
        """, """
        attnlab 的 `measure` 用它的注意力在随机的 $q, k, v$ 上做同样的事，还检查权重非负、每行和为
        1，并与对照的权重相比较。下面是它的代码和一次小规模运行：
        """, """
        m = convex_combination.measure(batch=8)
        print(T("outside the box by:", "超出包围盒："), fmt_num(m.outside),
              T("(control:", "（对照："), fmt_num(m.outside_control) + T(")", "）"))
        print(T("most negative weight:", "最负的权重："), fmt_num(m.negative),
              T("(control:", "（对照："), fmt_num(m.negative_control) + T(")", "）"))
        """),
    Code("""
        r = run("convex-combination")
        report(r)
        show(r)
        """),
    Predict("predict", """
        **Predict, then check.** A row has the scores $(1.0, 0.8, 0.5, 0.0, -0.5)$. The
        softmax at temperature $\\tau$ is $\\mathrm{softmax}(s / \\tau)$. At $\\tau = 0.1$, what
        is the largest weight? Write a number in `predict_top`; the check computes it
        (within 0.1 passes).
        """, """
        **先预测，再核对。** 一行的分数是 $(1.0, 0.8, 0.5, 0.0, -0.5)$。温度为 $\\tau$ 的
        softmax 是 $\\mathrm{softmax}(s / \\tau)$。当 $\\tau = 0.1$ 时，最大的权重是多少？
        把一个数写进        `predict_top`；检查单元格会算出它（相差不超过 0.1 即通过）。
        """,
        blank="predict_top = ...  # your prediction: the largest weight at temperature 0.1",
        answer="predict_top = 0.87  # the runner-up is 0.2 / 0.1 = 2 lower: e^-2 ≈ 0.14 of the top",
        check="""
            row_s = torch.tensor([1.0, 0.8, 0.5, 0.0, -0.5])
            predicted(predict_top, float(torch.softmax(row_s / 0.1, dim=0).max()), within=0.1,
                      why_en=("At τ = 0.1 the scores become 10, 8, 5, 0, -5: the top one beats "
                              "the runner-up by e^2 ≈ 7.4 to 1, so it takes about 0.88, not 1: "
                              "a low temperature sharpens the row without making it one-hot."),
                      why_zh=("τ = 0.1 时分数变成 10、8、5、0、-5：最大的比第二大的"
                              "多出 e^2 ≈ 7.4 倍，所以它拿到约 0.88，而不是 1："
                              "低温让这一行更集中，但并不让它成为独热。"))
            """,
        wrong="predict_top = 0.2  # uniform, as if the temperature flattened the row"),
    Text("""
        **The scale moves the output inside the hull.** Take five values on a circle (a
        convex pentagon) and one query, and multiply the scores by a factor $t$. As $t \\to 0$
        the weights become uniform and the output goes to the centroid; as $t$ grows the
        largest score wins and the output goes to one vertex. The cell checks that it never
        leaves the pentagon.
        """, """
        **缩放让输出在凸包内移动。** 取圆上的五个值（一个凸五边形）和一个查询，把分数乘以
        系数 $t$。$t \\to 0$ 时权重趋于均匀，输出趋向重心；$t$ 增大时最大的分数胜出，输出趋向某个
        顶点。下面的单元格检查它是否始终不离开这个五边形。
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
        ax.scatter(V[:, 0], V[:, 1], color="k", label=T("values V_j", "值 V_j"))
        ax.plot(path[:, 0], path[:, 1], "o-", ms=3, label=T("output as t grows", "t 增大时的输出"))
        ax.set_aspect("equal")
        ax.set_title(T("the output and the values' convex hull", "输出与各值的凸包"))
        ax.legend(loc="lower left", fontsize=8)
        plt.show()
        edges, to_p = V.roll(-1, 0) - V, path[:, None] - V  # the pentagon runs anticlockwise
        cross = edges[:, 0] * to_p[..., 1] - edges[:, 1] * to_p[..., 0]  # (t, edge)
        print(T("every output inside the pentagon:", "每个输出都在五边形内："),
              bool((cross >= -1e-6).all()))
        print(T("distance to the centroid at the smallest t:", "最小的 t 处到重心的距离："),
              fmt_num(float((path[0] - V.mean(0)).norm())))
        """),
    Text("""
        **Move the temperature yourself.** The same pentagon, values and keys: the slider sets
        the temperature $\\tau$ of $\\mathrm{softmax}(q \\cdot k_j / \\tau)$ (the factor $t$ above
        is $1/\\tau$). On the left the output (the weighted centre of the values) moves
        between the centroid (high $\\tau$) and one vertex (low $\\tau$); on the right, the
        weights that place it.
        """, """
        **亲手调温度。** 同一个五边形、同样的值和键：滑块设定
        $\\mathrm{softmax}(q \\cdot k_j / \\tau)$ 中的温度 $\\tau$
        （上面的系数 $t$ 就是 $1/\\tau$）。
        左图中，输出（各值的加权重心）在重心（$\\tau$ 高）与某个顶点（$\\tau$ 低）之间移动；
        右图是决定它位置的权重。
        """),
    Code("""
        from attnlab.course import slider


        def draw_temperature(tau):
            w_ = torch.softmax((K @ qv) / tau, dim=0)
            point = w_ @ V
            fig, (ax, bx) = plt.subplots(1, 2, figsize=(8, 3.6))
            ax.plot(ring[:, 0], ring[:, 1], "k-", lw=1)
            ax.plot(path[:, 0], path[:, 1], "-", color="lightgray", lw=1)
            ax.scatter(V[:, 0], V[:, 1], s=30 + 400 * w_, color="k")
            for j in range(5):
                ax.text(float(V[j, 0]) * 1.18, float(V[j, 1]) * 1.18, f"V{j}", ha="center",
                        va="center")
            ax.scatter([float(point[0])], [float(point[1])], color="C3", zorder=3,
                       label=T("output", "输出"))
            ax.scatter([float(V.mean(0)[0])], [float(V.mean(0)[1])], marker="+", color="gray",
                       label=T("centroid", "重心"))
            ax.set_aspect("equal")
            ax.set_xlim(-1.4, 1.4)
            ax.set_ylim(-1.4, 1.4)
            ax.legend(loc="lower left", fontsize=8)
            ax.set_title(T(f"temperature τ = {tau:.2f}", f"温度 τ = {tau:.2f}"))
            bx.bar([f"V{j}" for j in range(5)], w_.tolist())
            bx.set_ylim(0, 1)
            bx.set_title(T("weights", "权重"))
            plt.show()
            print(T(f"largest weight {float(w_.max()):.3f}; output at {point.numpy().round(3)}",
                    f"最大权重 {float(w_.max()):.3f}；输出位于 {point.numpy().round(3)}"))

        slider(draw_temperature, tau=(0.05, 5.0, 0.05, 1.0))
        """),
    Text("""
        attnlab also returns each row's **log-sum-exp** $\\log \\sum_j e^{s_{ij}}$: any weight
        is then one exponential away, $A_{ij} = e^{s_{ij} - \\mathrm{lse}_i}$, which is how a
        trace of a long input keeps every weight exactly in O(N·d) memory. Softmax does not
        change when a constant is added to a row, so a row's scores can be shifted by their
        maximum before exponentiating (never overflowing).
        """, """
        attnlab 还能返回每一行的 **log-sum-exp** $\\log \\sum_j e^{s_{ij}}$：这样任何一个权重都只差
        一次指数运算，$A_{ij} = e^{s_{ij} - \\mathrm{lse}_i}$——对长输入的追踪正是这样以
        O(N·d) 的内存精确保留每一个权重的。给一行分数加上同一个常数不会改变 softmax，
        所以可以先减去最大值再取指数（永不溢出）。
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
        blank="ex1_out = ...  # the output for equal scores, from v alone",
        answer="ex1_out = v.mean(dim=-2)  # the centroid of the values",
        check="""
            answered(ex1_out=ex1_out)
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
        blank="""
            V3 = torch.tensor([[0.0, 0.0], [4.0, 0.0], [1.0, 3.0]], dtype=torch.float64)
            y = torch.tensor([1.5, 1.0], dtype=torch.float64)
            ex2_w = ...  # 3 weights, non-negative, summing to 1, with ex2_w @ V3 == y
            """,
        answer="""
            V3 = torch.tensor([[0.0, 0.0], [4.0, 0.0], [1.0, 3.0]], dtype=torch.float64)
            y = torch.tensor([1.5, 1.0], dtype=torch.float64)
            A = torch.cat([V3.T, torch.ones(1, 3, dtype=torch.float64)])  # [x; y; 1] per corner
            ex2_w = torch.linalg.solve(A, torch.cat([y, torch.ones(1, dtype=torch.float64)]))
            """,
        check="""
            answered(ex2_w=ex2_w)
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
        **Exercise 3.** Write `ex3_lse(s)`: each row's log-sum-exp of the scores `s` (last
        axis), computed in a way that cannot overflow. The check compares it with attnlab's
        `lse` on `scores` (above), then runs it on `scores + 1000.0`, where $e^{1000}$
        overflows even in float64: the naive `torch.log(torch.exp(s).sum(-1))` gives `inf`.
        """, """
        **练习 3.** 写出 `ex3_lse(s)`：分数 `s` 每一行（最后一维）的 log-sum-exp，要求算法不会
        溢出。检查单元格先在上面的 `scores` 上把它与 attnlab 的 `lse` 比较，再在
        `scores + 1000.0` 上运行它：$e^{1000}$ 即使在 float64 中也会溢出，朴素的
        `torch.log(torch.exp(s).sum(-1))` 会得到 `inf`。
        """,
        blank="""
            def ex3_lse(s):
                return ...  # one log-sum-exp per row of s, computed so that it cannot overflow
            """,
        answer="""
            def ex3_lse(s):
                m = s.amax(dim=-1, keepdim=True)  # shift by the row's maximum: exp(s - m) <= 1
                return (m + torch.log(torch.exp(s - m).sum(dim=-1, keepdim=True)))[..., 0]
            """,
        check="""
            answered(ex3_lse=ex3_lse(scores))
            assert ex3_lse(scores).shape == lse.shape, T("one number per row", "每行一个数")
            assert torch.allclose(ex3_lse(scores), lse, atol=1e-5), T("not the log-sum-exp",
                                                                      "这不是 log-sum-exp")
            big = ex3_lse(scores + 1000.0)  # exp(1000) = inf in float32 and in float64
            assert bool(torch.isfinite(big).all()), T(
                "at scores near 1000 your log-sum-exp overflows to inf: shift each row by its "
                "maximum before exponentiating", "分数接近 1000 时你的 log-sum-exp 溢出为 inf："
                "请先把每一行减去它的最大值再取指数")
            assert torch.allclose(big, lse + 1000.0, atol=1e-3), T(
                "lse(s + c) must be lse(s) + c", "lse(s + c) 必须等于 lse(s) + c")
            print(T("right, and it survives scores near 1000",
                    "正确，而且分数接近 1000 时也不溢出"))
            """,
        wrong="""
            def ex3_lse(s):
                return torch.log(torch.exp(s).sum(dim=-1))  # overflows at large scores
            """),
))
