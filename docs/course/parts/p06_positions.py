"""Part 6 of the course: Positions: sinusoidal and RoPE.

Its cells in English and in Chinese (see build.py).
"""

from cells import Code, Exercise, Part, Predict, Text, by_hand, measured  # noqa: F401

# ======================================================================================
# 06 positions: sinusoidal and RoPE
# ======================================================================================

PART = Part(6, "positions", "Positions: sinusoidal and RoPE", "位置：正弦编码与 RoPE", (
    Text("""
        Attention alone cannot tell token order (notebook 05). Article 001 explains the
        sinusoidal encoding $PE_{(pos,2i)} = \\sin(pos / 10000^{2i/d_{model}})$ (and cosine on
        the odd dimensions) by two properties: wavelengths that grow geometrically with $i$
        (「低频（大波长）捕获长距离依赖，高频（小波长）记录局部位置」), and a relative
        position property: 「$PE_{pos+k}$ 能表示为 $PE_{pos}$ 的线性组合」.
        """, """
        只靠注意力分不清词元的顺序（第 05 部分）。文章 001 用两条性质解释正弦位置编码
        $PE_{(pos,2i)} = \\sin(pos / 10000^{2i/d_{model}})$（奇数维用余弦）：
        波长随 $i$ 按几何级数增长
        （「低频（大波长）捕获长距离依赖，高频（小波长）记录局部位置」），以及相对位置性质：
        「$PE_{pos+k}$ 能表示为 $PE_{pos}$ 的线性组合」。
        """),
    Predict("predict", """
        **Predict, then check.** With $d_{model} = 32$, pair $i$ turns by
        $\\omega_i = 10000^{-2i/d_{model}}$ radians per position. What is the wavelength, in
        positions, of pair $i = 8$ (how many positions it takes to come back to where it
        started)? Write a number in `predict_wavelength`; the check reads it off attnlab's
        encoding (within 25% passes).
        """, """
        **先预测，再核对。** 当 $d_{model} = 32$ 时，第 $i$ 对维度每移动一个位置转过
        $\\omega_i = 10000^{-2i/d_{model}}$ 弧度。第 $i = 8$ 对的波长（以位置计：转回起点需要走过
        多少个位置）是多少？把一个数写进 `predict_wavelength`；检查单元格会从 attnlab 的编码中读出它
        （相差不超过 25% 即通过）。
        """,
        blank="predict_wavelength = ...  # your prediction: the wavelength of pair 8, in positions",
        answer="predict_wavelength = 628  # 2π / ω_8 = 2π · 10000^(16/32) = 2π · 100",
        check="""
            from attnlab import positional as positional_

            true_wavelength = float(2 * math.pi / positional_.frequencies(32)[8])
            predicted(predict_wavelength, true_wavelength, within=0.25 * true_wavelength,
                      why_en=("The wavelength of pair i is 2π / ω_i = 2π · 10000^(2i/d): "
                              "2π · 100 ≈ 628 positions for i = 8 of d = 32. It grows with i; "
                              "it is the frequency ω_i that decays."),
                      why_zh=("第 i 对的波长是 2π / ω_i = 2π · 10000^(2i/d)：d = 32 时第 8 对约为 "
                              "2π · 100 ≈ 628 个位置。它随 i 增长；衰减的是频率 ω_i。"))
            """,
        wrong="predict_wavelength = 0.063  # 2π / 100: a wavelength that decayed with i"),
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
        **「波长衰减」 (wavelength decay) is the wrong word.** Article 001 labels this item
        「波长衰减」, yet the wavelengths it describes grow with $i$: $2\\pi / \\omega_i =
        2\\pi \\cdot 10000^{2i/d_{model}}$, from $2\\pi$ for the first pair to almost
        $10000 \\cdot 2\\pi$ for the last. What decays with $i$ is the frequency $\\omega_i$.
        Measured on attnlab's table:
        """, """
        **「波长衰减」这个说法是错的。** 文章 001 给这一条起的标题是「波长衰减」，但它描述的波长
        随 $i$ 增长：$2\\pi / \\omega_i = 2\\pi \\cdot 10000^{2i/d_{model}}$，从第一对的 $2\\pi$
        增长到最后一对的接近 $10000 \\cdot 2\\pi$。随 $i$ 衰减的是频率 $\\omega_i$。在 attnlab
        的编码表上实测：
        """),
    Code("""
        lam = 2 * math.pi / omega  # the wavelength of every pair, in positions
        print(T("wavelengths of pairs 0, 1, 2 and the last:", "第 0、1、2 对与最后一对的波长："),
              [round(float(x), 1) for x in (*lam[:3], lam[-1])])
        print(T("each pair's wavelength / the previous one's:", "每一对的波长 / 前一对的波长："),
              round(float(lam[1] / lam[0]), 4), "= 10000^(2/32) =", round(10000 ** (2 / 32), 4))
        grows, decays = bool((lam[1:] > lam[:-1]).all()), bool((omega[1:] < omega[:-1]).all())
        print(T("the wavelengths grow with i:", "波长随 i 增长："), grows,
              T("| the frequencies decay with i:", "| 频率随 i 衰减："), decays)
        print(T("so the label 「波长衰减」 is wrong: the wavelength grows, the frequency decays",
                "所以标题「波长衰减」是错的：波长在增长，衰减的是频率")
              if grows and decays else T("unexpected", "出乎预期"))
        """),
    Text("""
        **Move the position and the frequency.** Pair $i$ of the encoding is the point
        $(\\sin \\omega_i p, \\cos \\omega_i p)$. The slider `pair` sets $i$ (the frequency
        $\\omega_i$), `position` sets $p$: on the left the pair's two coordinates over the
        positions, on the right the point on the unit circle. A fast pair (small $i$) goes
        round many times over 64 positions; a slow one barely moves.
        """, """
        **移动位置，改变频率。** 编码的第 $i$ 对是点 $(\\sin \\omega_i p, \\cos \\omega_i p)$。
        滑块 `pair` 设定 $i$（即频率 $\\omega_i$），`position` 设定 $p$：
        左图是这一对的两个坐标随位置的变化，右图是单位圆上的那个点。
        快的维度对（$i$ 小）在 64 个位置上转很多圈；慢的几乎不动。
        """),
    Code("""
        from attnlab.course import slider


        def draw_pair(position, pair):
            ps = torch.arange(64)
            w_i = float(omega[pair])
            fig, (ax, bx) = plt.subplots(1, 2, figsize=(8.5, 3.2),
                                         gridspec_kw={"width_ratios": [2, 1]})
            ax.plot(ps, pe[:, 2 * pair], label=f"sin(ω_{pair} p)")
            ax.plot(ps, pe[:, 2 * pair + 1], label=f"cos(ω_{pair} p)")
            ax.axvline(position, color="gray", ls=":")
            ax.scatter([position, position], [math.sin(w_i * position), math.cos(w_i * position)],
                       color="k", zorder=3)
            ax.set_xlabel(T("position p", "位置 p"))
            ax.set_title(T(f"pair {pair}: ω = {w_i:.4f}, wavelength {2 * math.pi / w_i:.1f}",
                           f"第 {pair} 对：ω = {w_i:.4f}，波长 {2 * math.pi / w_i:.1f}"))
            ax.legend(loc="lower left", fontsize=8)
            circle = torch.linspace(0, 2 * math.pi, 100)
            bx.plot(circle.sin(), circle.cos(), color="lightgray")
            bx.scatter([math.sin(w_i * position)], [math.cos(w_i * position)], color="C3")
            bx.set_aspect("equal")
            bx.set_title(T(f"position {position}", f"位置 {position}"))
            plt.show()
            print(f"PE[{position}, {2 * pair}:{2 * pair + 2}] =",
                  [round(float(x), 4) for x in pe[position, 2 * pair:2 * pair + 2]])

        slider(draw_pair, position=(0, 63, 1, 10), pair=(0, 15, 1, 2))
        """),
    Text("""
        **Which pairs record what.** Each pair $(PE_{p,2i}, PE_{p,2i+1})$ is a point on the
        unit circle that turns by $\\omega_i$ per position. What one pair can tell about the
        offset $\\Delta$ between two positions is the angle between its two points:
        $\\hat\\Delta_i = \\mathrm{wrap}(\\varphi_i(p + \\Delta) - \\varphi_i(p)) / \\omega_i$.
        A fast pair turns a visible angle per step but wraps around after one wavelength (two far
        positions look alike: aliasing); a slow pair never wraps over the table but moves
        too little per step to be read through noise. The experiment `pe-frequency-roles`
        decodes $\\Delta$ this way from every pair, with a little readout noise on every value
        (a model never reads the table exactly), and compares the fastest quarter of the
        pairs with the slowest. `report` prints the measurement, its control and the verdict;
        the checks below it are the other half of the claim.
        """, """
        **哪些维度对记录什么**。每一对 $(PE_{p,2i}, PE_{p,2i+1})$ 是单位圆上的一个点，每移动
        一个位置转过 $\\omega_i$ 角。一个维度对能告诉我们两个位置之间偏移 $\\Delta$ 的信息，
        就是它的两个点之间的夹角：
        $\\hat\\Delta_i = \\mathrm{wrap}(\\varphi_i(p + \\Delta) - \\varphi_i(p)) / \\omega_i$。
        快的维度对每一步都转过明显的角度，但转满一个波长就绕回原处（相距很远的两个位置看起来一样：
        混叠）；慢的维度对在整张表上都不会绕回，但每一步移动太少，隔着噪声读不出来。实验
        `pe-frequency-roles` 用这种方法从每个维度对解码 $\\Delta$，并在每个值上加一点读出噪声（模型
        从来不会精确地读出编码表），再比较最快的四分之一维度对与最慢的四分之一。`report`
        打印测量值、它的对照和结论；其下的各项检查是这条论断的另一半。
        """),
    *measured("pe_frequency_roles", """
        `measure` builds the table, decodes $\\Delta$ = 1 and $\\Delta$ = 1000 from every
        dimension pair of random pairs of positions, with the read-out noise, and does the
        same on the control table. Its code and a small run (the error is in units of
        $\\Delta$, per pair, the fastest pair first):
        """, """
        `measure` 构造编码表，从随机的位置对中，用每个维度对解码 $\\Delta$ = 1 和
        $\\Delta$ = 1000（带读出噪声），并在对照表上做同样的事。下面是它的代码和一次小规模运行
        （误差以 $\\Delta$ 为单位，按维度对列出，最快的在前）：
        """, """
        m = pe_frequency_roles.measure(samples=200)
        for i in (0, len(m.err_near) - 1):
            print(T(f"pair {i}: wavelength", f"维度对 {i}：波长"), fmt_num(float(m.wavelength[i])),
                  T(", error at Δ = 1:", "，Δ = 1 处的误差："), fmt_num(float(m.err_near[i])),
                  T(", at Δ = 1000:", "，Δ = 1000 处："), fmt_num(float(m.err_far[i])))
        """),
    Code("""
        r = run("pe-frequency-roles", samples=500)
        report(r)
        show_checks(r)
        show(r)
        """),
    Text("""
        **The linear combination is a rotation.** By the angle-sum formulas, each pair
        $(\\sin \\omega_i p, \\cos \\omega_i p)$ at position $p + k$ is the pair at $p$ rotated by
        the angle $\\omega_i k$. So $PE_{pos+k} = M_k \\, PE_{pos}$ with one block-diagonal
        matrix $M_k$ for **every** position — `positional.relative_rotation` builds it.
        """, """
        **这个线性组合是一个旋转**。由和角公式，位置 $p + k$ 处的每一对
        $(\\sin \\omega_i p, \\cos \\omega_i p)$ 就是位置 $p$ 处的那一对旋转 $\\omega_i k$ 角。所以
        $PE_{pos+k} = M_k \\, PE_{pos}$，其中分块对角矩阵 $M_k$ 对**所有**位置都相同——
        `positional.relative_rotation` 构造的就是它。
        """),
    Code("""
        pe64 = positional.sinusoidal_table(200, 32, dtype=torch.float64)
        M = positional.relative_rotation(5, 32)
        print(T("max |PE[p+5] - M PE[p]| =", "max |PE[p+5] - M PE[p]| ="),
              float((pe64[5:] - pe64[:-5] @ M.T).abs().max()))
        """),
    *measured("pe_relative_position", """
        The experiment `pe-relative-position` checks the rotation at every offset up to 64 on
        the table in fp64, with the dot product $PE_p \\cdot PE_{p+k}$ over $p$, and the same
        on its control. Its code and a smaller run:
        """, """
        实验 `pe-relative-position` 在 fp64 的编码表上检验直到 64 的每个偏移处的旋转，以及
        $PE_p \\cdot PE_{p+k}$ 在各个 $p$ 上的取值，并在对照上做同样的事。下面是它的代码和一次
        更小的运行：
        """, """
        m = pe_relative_position.measure(n_positions=128, embed_dim=32, max_offset=16)
        print(T("largest |PE[p+k] − M_k PE[p]|, k ≤ 16:", "最大的 |PE[p+k] − M_k PE[p]|，k ≤ 16："),
              fmt_num(max(o.err for o in m.offsets)))
        print(T("the same on the control:", "对照上的同一误差："), fmt_num(m.ctrl_err))
        """),
    Code("""
        r = run("pe-relative-position")
        report(r)
        show(r)
        """),
    Text("""
        **Does a model use it?** That $M_k$ exists does not mean training finds it. The
        experiment `relative-position-learned` trains one causal attention head to copy the
        token a few positions back, only on windows placed at low absolute positions, then
        tests it at higher positions it never saw. Its queries and keys read only the
        sinusoidal table, so a query projection equal to $M_{-k}$ would find the key $k$ back
        at every position. For comparison the same model is trained with learned absolute
        position embeddings (`nn.Embedding`: the rows of positions never seen are never
        trained).
        """, """
        **模型会用到它吗**？$M_k$ 存在并不意味着训练会找到它。实验 `relative-position-learned`
        训练一个因果注意力头，让它复制几个位置之前的词元；训练只用放在较小绝对位置上的窗口，然后在它
        从未见过的更大位置上测试。它的查询和键只读取正弦编码表，所以等于 $M_{-k}$ 的查询投影在每个
        位置上都能找到往回 $k$ 个位置的键。作为比较，同一个模型改用可学习的绝对位置嵌入
        （`nn.Embedding`：从未见过的位置对应的行从未被训练）以同样方式训练。
        """),
    *measured("relative_position_learned", """
        `measure` trains each model (sinusoidal positions, learned ones, and the control)
        and tests it on the trained positions and on unseen ones. Thirty steps:
        """, """
        `measure` 训练每个模型（正弦位置编码、可学习的位置嵌入，以及对照），并在训练过的位置和
        从未见过的位置上测试。训练三十步：
        """, """
        from attnlab.experiments.relative_position_learned import OffsetConfig

        m = relative_position_learned.measure(config=OffsetConfig(steps=30), mixed=False)
        for model in m.models:
            print(f"{model.positions}, {model.qk}: " + T("accuracy, trained positions",
                  "准确率，训练过的位置"), fmt_num(model.trained.accuracy),
                  T(", unseen ones", "，从未见过的位置"), fmt_num(model.unseen.accuracy))
        """),
    Code("""
        r = run("relative-position-learned", mixed=False, plot=False)
        report(r)
        show_checks(r)
        """),
    Text("""
        In a standard model the scores see $x + PE$: position mixed with the content.
        **RoPE** (used by SmolLM2, notebook 09) puts the rotation where it acts directly: it
        rotates $q$ and $k$ themselves by their positions, so that
        $\\langle R_m q, R_n k \\rangle = \\langle q, R_{n-m} k \\rangle$ depends on $m - n$
        only. attnlab's `RotaryEmbedding` uses the half-split layout of Llama (dimension $i$
        pairs with $i + d/2$). The map of scores over $(m, n)$ is constant along diagonals:
        """, """
        在标准模型中，分数看到的是 $x + PE$：位置与内容混在一起。**RoPE**（SmolLM2 使用它，
        见第 09 部分）把旋转放到直接起作用的地方：按位置旋转 $q$ 和 $k$ 本身，使
        $\\langle R_m q, R_n k \\rangle = \\langle q, R_{n-m} k \\rangle$
        只依赖于 $m - n$。attnlab 的
        `RotaryEmbedding` 采用 Llama 的前后半分布局（第 $i$ 维与第 $i + d/2$ 维成对）。分数在
        $(m, n)$ 上的图沿对角线不变：
        """),
    by_hand("rope-relative", """
        rope = positional.RotaryEmbedding(16)
        qr, kr = torch.randn(16), torch.randn(16)
        pos = torch.arange(24)
        S = rope(qr.expand(24, 16), positions=pos) @ rope(kr.expand(24, 16), positions=pos).T
        fig, ax = plt.subplots(figsize=(3.8, 3.3))
        im = ax.imshow(S, cmap="RdBu")
        ax.set_xlabel(T("key position n", "键位置 n"))
        ax.set_ylabel(T("query position m", "查询位置 m"))
        ax.set_title(T("⟨R_m q, R_n k⟩", "⟨R_m q, R_n k⟩"))
        fig.colorbar(im, ax=ax)
        plt.show()
        spread = max(float(S.diagonal(o).std()) for o in range(-22, 23))
        print(T("largest spread along a diagonal:", "沿一条对角线的最大离散："), fmt_num(spread))
        """),
    *measured("rope_relative", """
        The experiment `rope-relative` makes this map in fp64 with attnlab's rotation and
        measures the spread of the scores along each diagonal, and whether the rotation keeps
        the norms; its control adds the positions to $q$ and $k$ instead. Its code and a
        small run:
        """, """
        实验 `rope-relative` 在 fp64 下用 attnlab 的旋转画出这张图，测量分数沿每条对角线的离散，
        以及旋转是否保持范数；它的对照改为把位置加到 $q$ 和 $k$ 上。下面是它的代码和一次小规模运行：
        """, """
        m = rope_relative.measure(head_dim=16, n_positions=32)
        print(T("largest spread along a diagonal:", "沿一条对角线的最大离散："), fmt_num(m.spread),
              T("(control:", "（对照："), fmt_num(m.control_spread) + T(")", "）"))
        print(T("norm change under the rotation:", "旋转前后范数的变化："), fmt_num(m.norm_err))
        """),
    Code("""
        r = run("rope-relative")
        report(r)
        """),
    Exercise("ex1", """
        **Exercise 1.** The wavelength of dimension pair $i$ (in positions): write
        `ex1_wavelength(i, d)` from the formula, without `positional.frequencies`.
        """, """
        **练习 1.** 第 $i$ 对维度的波长（以位置计）：不用 `positional.frequencies`，直接由公式写出
        `ex1_wavelength(i, d)`。
        """,
        blank="""
            def ex1_wavelength(i, d):
                return ...  # the wavelength, in positions, of dimension pair i
            """,
        answer="""
            def ex1_wavelength(i, d):
                return 2 * math.pi * 10000 ** (2 * i / d)
            """,
        check="""
            answered(ex1_wavelength=ex1_wavelength(0, 32))
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
        blank="""
            def ex2_block(k, i, d):
                return ...  # the 2 x 2 block (float64) moving pair i by k positions
            """,
        answer="""
            def ex2_block(k, i, d):
                a = k * 10000 ** (-2 * i / d)
                return torch.tensor([[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]],
                                    dtype=torch.float64)
            """,
        check="""
            answered(ex2_block=ex2_block(1, 0, 32))
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
        blank="""
            def ex3_rope(x, m):
                return ...  # x (d,) rotated to position m, pairing j with j + d/2
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
            answered(ex3_rope=ex3_rope(torch.zeros(4), 0))
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
