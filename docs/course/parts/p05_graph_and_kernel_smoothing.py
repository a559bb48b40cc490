"""Part 5 of the course: Attention as a graph and as kernel smoothing.

Its cells in English and in Chinese (see build.py).
"""

from cells import Code, Exercise, Part, Predict, Text, by_hand, measured  # noqa: F401

# ======================================================================================
# 05 attention as a graph and as kernel smoothing
# ======================================================================================

PART = Part(5, "graph_and_kernel_smoothing", "Attention as a graph and as kernel smoothing",
           "注意力：动态图与核平滑", (
    Text("""
        Article 000 ends with two abstract readings. First, a graph: tokens are nodes and
        $QK^T$ computes the edge weights, on a fully connected graph whose weights depend on
        the input — 「动态邻居聚合」 (dynamic neighbour aggregation). Second, Nadaraya–Watson
        kernel regression, $\\hat y(x) = \\sum_i K(x, x_i) y_i / \\sum_j K(x, x_j)$: attention is
        「一个可学习的核平滑方法」.
        """, """
        文章 000 最后给出两种抽象的解读。其一是图：词元是节点，$QK^T$ 计算边的权重——
        这是一张全连接图，其权重随输入而变，即「动态邻居聚合」。其二是 Nadaraya–Watson 核回归
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
                    if A[i, j] <= 0.15:  # only the stronger edges, i attends j
                        continue
                    if i == j:  # a self-edge: a loop just outside the node
                        ax.add_patch(plt.Circle((1.2 * xy[i]).tolist(), 0.13, fill=False,
                                                lw=5 * float(A[i, i]), alpha=0.7))
                        continue
                    ax.annotate("", xy=xy[j].tolist(), xytext=xy[i].tolist(),
                                arrowprops=dict(arrowstyle="-|>", lw=5 * float(A[i, j]),
                                                alpha=0.7, shrinkA=14, shrinkB=14,
                                                connectionstyle="arc3,rad=0.15"))
            for (px, py), lab in zip(xy.tolist(), labels):
                ax.text(px, py, lab, ha="center", va="center",
                        bbox=dict(boxstyle="round", fc="w"))
            ax.set_xlim(-1.5, 1.5)
            ax.set_ylim(-1.5, 1.5)
            ax.set_axis_off()
            ax.set_title(title)

        tokens2 = "the dog sat on the mat".split()
        emb["dog"] = 2 * torch.randn(16)
        A2 = attn(torch.stack([emb[t] for t in tokens2])[None])[1][0, 0].detach()
        fig, axes = plt.subplots(1, 2, figsize=(8, 4))
        draw_graph(axes[0], A, tokens, T("edges of one input", "一个输入的边"))
        draw_graph(axes[1], A2, tokens2, T("one word changed", "换掉一个词元"))
        print(T("total variation between the two graphs:", "两张图之间的总变差："),
              round(float(0.5 * (A - A2).abs().sum(-1).mean()), 3))
        """),
    Predict("predict", """
        **Predict, then check.** "the" comes twice in the first sentence, at positions 0 and
        4, and nothing here tells the layer where a token is. How far apart are the two rows
        of weights the two "the" send, $\\max_j |A_{0j} - A_{4j}|$? Write a number in
        `predict_diff`; the check measures it (within 0.01 passes).
        """, """
        **先预测，再核对。** 第一句话里 “the” 出现了两次，位于第 0 和第 4 个位置，而这里没有任何
        东西告诉这一层一个词元在哪里。这两个 “the” 发出的两行权重相差多少，即
        $\\max_j |A_{0j} - A_{4j}|$？把一个数写进 `predict_diff`；检查单元格会测量它（相差不超过
        0.01 即通过）。
        """,
        blank="predict_diff = ...  # your prediction: max |A[0, j] - A[4, j]| over the keys j",
        answer="predict_diff = 0  # the same token, no positions: the same query, the same row",
        check="""
            A_the = attn(torch.stack([emb[t_] for t_ in tokens])[None])[1][0, 0].detach()
            predicted(predict_diff, float((A_the[0] - A_the[4]).abs().max()), within=0.01,
                      why_en=("The two 'the' have the same embedding and no position: the "
                              "same query, compared with the same keys, gives the same row. "
                              "Without positions attention cannot tell them apart."),
                      why_zh=("两个 “the” 的嵌入相同，又没有位置信息：同样的查询与同样的键比较，"
                              "得到同样的一行。没有位置编码，注意力分不清它们。"))
            """,
        wrong="predict_diff = 0.5  # as if the two places in the sentence changed the weights"),
    Text("""
        A graph has no order of its nodes. Without positions, self-attention is
        **permutation-equivariant**: permuting the tokens permutes the outputs the same way,
        $f(PX) = P f(X)$. That is why positions are needed (notebook 06). The experiment
        `dynamic-graph` measures it, beside its control: the same layer with the sinusoidal
        encoding added, which must break the symmetry.
        """, """
        图的节点没有顺序。没有位置信息时，自注意力是**置换等变**的：把词元重新排列，输出也以同样的
        方式重新排列，$f(PX) = P f(X)$。这就是需要位置编码的原因（第 06 部分）。实验 `dynamic-graph`
        测量这一点，并附上对照：加入正弦位置编码的同一层，它必须打破这种对称。
        """),
    Code("""
        perm = torch.randperm(len(tokens))
        out_p, _ = attn(X[:, perm])
        print(T("f(PX) = P f(X):", "f(PX) = P f(X)："),
              torch.allclose(out_p, out[:, perm], atol=1e-6))
        """),
    *measured("dynamic_graph", """
        `measure` makes this check on an attnlab attention layer in fp64 and a ten-word
        sentence: it permutes the tokens and compares $f(PX)$ with $P f(X)$, without
        positions and (the control) with them; it also compares the weights on another input,
        to show that the graph depends on the input. Its code and one run:
        """, """
        `measure` 在 fp64 的 attnlab 注意力层和一个十个词的句子上做这个检验：把词元重新排列，比较
        $f(PX)$ 与 $P f(X)$——不加位置编码，以及（对照）加上位置编码；它还比较另一个输入上的权重，
        说明这张图取决于输入。下面是它的代码和一次运行：
        """, """
        m = dynamic_graph.measure()
        print(T("max |f(PX) − P f(X)|, no positions:", "max |f(PX) − P f(X)|，无位置编码："),
              fmt_num(m.equivariance_error))
        print(T("with positions (the control):", "加上位置编码（对照）："),
              fmt_num(m.equivariance_error_control))
        print(T("weights change on another input by:", "换一个输入，权重变化："),
              fmt_num(m.input_change))
        """),
    Code("""
        r = run("dynamic-graph", plot=False)
        report(r)
        """),
    Text("""
        **Kernel smoothing, exactly.** The Gaussian kernel
        $K(x, x_i) = e^{-(x - x_i)^2 / 2\\sigma^2}$ expands to
        $e^{x x_i/\\sigma^2} \\, e^{-x_i^2/2\\sigma^2} \\, e^{-x^2/2\\sigma^2}$. The last factor is
        the same for every $i$ and cancels in the ratio. So with the query $q = (x, 1)$, the
        key $k_i = (x_i/\\sigma^2, -x_i^2/2\\sigma^2)$, the value $y_i$ and scale 1, attention
        **is** Nadaraya–Watson regression, up to float64 rounding (the legend prints the
        largest difference).
        """, """
        **精确的核平滑。** 高斯核 $K(x, x_i) = e^{-(x - x_i)^2 / 2\\sigma^2}$ 可展开为
        $e^{x x_i/\\sigma^2} \\, e^{-x_i^2/2\\sigma^2} \\, e^{-x^2/2\\sigma^2}$。最后一个因子对所有
         $i$
        都相同，在比值中约掉。所以取查询 $q = (x, 1)$、
        键 $k_i = (x_i/\\sigma^2, -x_i^2/2\\sigma^2)$、
        值 $y_i$、缩放系数为 1，注意力**就是** Nadaraya–Watson 回归，只差 float64 的舍入误差
        （图例中给出最大差值）。
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
        plt.show()
        """),
    *measured("kernel_smoothing", """
        The experiment `kernel-smoothing` makes the same regression, then checks the identity
        behind it: with keys of equal norm, `softmax(q·k/√d)` equals Gaussian weights, and the
        article's formula is compared with attnlab's attention. Its code and one run:
        """, """
        实验 `kernel-smoothing` 做同样的回归，再检验背后的恒等式：各键范数相同时，
        `softmax(q·k/√d)` 等于高斯权重；并把文章的公式与 attnlab 的注意力相比较。
        下面是它的代码和一次运行：
        """, """
        m = kernel_smoothing.measure()
        print(T("softmax(q·k/√d) − Gaussian weights, equal-norm keys:",
                "softmax(q·k/√d) − 高斯权重，范数相同的键："), fmt_num(m.gauss_err))
        print(T("keys of different norms:", "范数不同的键："), fmt_num(m.gauss_err_unequal))
        """),
    Code("""
        r = run("kernel-smoothing", plot=False)
        report(r)
        """),
    Text("""
        The identity needs the term $-x_i^2/2\\sigma^2$ in the key: with keys of different
        norms, a plain dot product is not a Gaussian kernel (the experiment's wrong variant,
        `equal_norm_keys=False`; its control is another kernel, the Laplace one, whose
        estimate attention must not reproduce). What attention adds is that $W^Q$ and $W^K$
        are learned: the kernel is $K(x, x_i) = e^{q \\cdot k_i / \\sqrt{d}}$ with
        $q = xW^Q$, $k_i = x_iW^K$. The experiment `learned-kernel` checks the identity, and
        that this kernel is Gaussian exactly when the keys share one norm; then it learns
        $W^Q$, $W^K$ for a regression whose target depends on two of eight input
        dimensions, and compares the test error with that of the best fixed Gaussian kernel.
        Its control is the same estimator with $W^Q$, $W^K$ left at their random initial
        values: learning, not the form of the kernel, must be what makes the difference.
        """, """
        这个恒等式需要键里有 $-x_i^2/2\\sigma^2$ 这一项：当各键的范数不同时，单纯的点积不是高斯核
        （实验的错误变体 `equal_norm_keys=False`；它的对照是另一个核——拉普拉斯核，注意力不应复现
        它的估计）。注意力多出来的是 $W^Q$、$W^K$ 可以学习：核是
        $K(x, x_i) = e^{q \\cdot k_i / \\sqrt{d}}$，其中 $q = xW^Q$、$k_i = x_iW^K$。
        实验 `learned-kernel` 检验这个恒等式，以及这个核恰好在各键范数相同时是高斯核；然后在一个
        目标只依赖八个输入维度中两个维度的回归问题上学习 $W^Q$、$W^K$，把测试误差与最好的固定
        高斯核相比较。它的对照是 $W^Q$、$W^K$ 停留在随机初始值的同一个估计量：造成差别的必须是
        学习，而不是核的形式。
        """),
    *measured("learned_kernel", """
        `measure` checks (a) attention against Nadaraya–Watson with the kernel
        $e^{q \\cdot k / \\sqrt{d}}$, (b) the Gaussian and its key-norm factor, (c) learns
        $W^Q$, $W^K$ by gradient descent and compares the test errors. With 30 steps:
        """, """
        `measure` 检验 (a) 注意力与核为 $e^{q \\cdot k / \\sqrt{d}}$ 的 Nadaraya–Watson
        估计是否一致，(b) 高斯核与它的键范数因子，(c) 用梯度下降学习 $W^Q$、$W^K$，并比较测试误差。
        训练 30 步：
        """, """
        m = learned_kernel.measure(steps=30)
        print(T("attention − Nadaraya–Watson:", "注意力 − Nadaraya–Watson："), fmt_num(m.nw_error))
        print(T("test error: best fixed Gaussian", "测试误差：最好的固定高斯核"),
              fmt_num(m.mse_gaussian), T(", untrained", "，未训练"), fmt_num(m.mse_untrained),
              T(", learned", "，学习后"), fmt_num(m.mse_learned))
        """),
    Code("""
        r = run("learned-kernel")
        report(r)
        show(r)
        """),
    Text("""
        **Another kernel: linear attention.** Replace $e^{q \\cdot k}$ by
        $\\phi(q) \\cdot \\phi(k)$ with $\\phi(x) = \\mathrm{elu}(x) + 1 > 0$. The causal
        output $\\phi(q_i)^T S_i / \\phi(q_i)^T z_i$, with $S_i = \\sum_{j \\le i} \\phi(k_j)
        v_j^T$ and $z_i = \\sum_{j \\le i} \\phi(k_j)$, can be computed in parallel (an
        $N \\times N$ masked matrix, as for softmax) or as a recurrent network that updates
        the state $S, z$ one token at a time. The two must agree exactly, and the recurrent
        form's cost grows linearly in $N$ instead of quadratically. The experiment
        `linear-attention` compares the two forms and counts the FLOPs; its control is an
        RNN that reads its state before adding the current token.
        """, """
        **另一个核：线性注意力。** 把 $e^{q \\cdot k}$ 换成 $\\phi(q) \\cdot \\phi(k)$，其中
        $\\phi(x) = \\mathrm{elu}(x) + 1 > 0$。因果输出 $\\phi(q_i)^T S_i / \\phi(q_i)^T z_i$
        （$S_i = \\sum_{j \\le i} \\phi(k_j) v_j^T$，$z_i = \\sum_{j \\le i} \\phi(k_j)$）
        既可以并行计算（一个 $N \\times N$ 的带掩码矩阵，与 softmax 相同），也可以写成一个循环网络：
        每读入一个词元就更新一次状态 $S, z$。两种形式必须完全一致，而循环形式的代价随 $N$ 线性增长，
        而不是平方增长。实验 `linear-attention` 比较这两种形式并统计 FLOPs；它的对照是一个先读取
        状态、再加入当前词元的循环网络。
        """),
    *measured("linear_attention", """
        `measure` computes the causal linear attention of random $q, k, v$ in fp64 in the
        parallel form and in the recurrent one (and in the control's), then times both and
        counts their FLOPs at each length. Small:
        """, """
        `measure` 在 fp64 下对随机的 $q, k, v$ 计算因果线性注意力：并行形式、循环形式（以及对照的
        形式），然后在每个长度上为两者计时并统计 FLOPs。小规模：
        """, """
        m = linear_attention.measure(n_exact=50, lengths=(256,), flop_lengths=(256, 512),
                                     repeats=1)
        print(T("recurrent − parallel:", "循环 − 并行："), fmt_num(m.recurrent_error),
              T("(the control:", "（对照："), fmt_num(m.control_error) + T(")", "）"))
        for f in m.flops:
            print(f"N = {f.n}: FLOPs " + T("linear", "线性") + f" {fmt_num(f.linear)}"
                  + T(", softmax ", "，softmax ") + fmt_num(f.softmax))
        """),
    Code("""
        r = run("linear-attention", lengths=(512, 1024, 2048), repeats=1, n_exact=100)
        report(r)
        check_line(r.check("linear-flop-exponent"), "linear attention's FLOPs grow linearly: "
                   "e in FLOPs ∝ N^e", "线性注意力的 FLOPs 线性增长：FLOPs ∝ N^e 中的 e")
        check_line(r.check("softmax-flop-exponent"), "softmax attention's grow quadratically: e",
                   "softmax 注意力的 FLOPs 平方增长：e")
        show(r)
        """),
    Exercise("ex1", """
        **Exercise 1.** The same in two dimensions: write `ex1_qk(x, xs, sigma)` that returns
        the queries (for the points `x`, M × 2) and keys (for the data points `xs`, N × 2)
        that make attention equal the Gaussian Nadaraya–Watson estimate.
        """, """
        **练习 1.** 二维的情形：写出 `ex1_qk(x, xs, sigma)`，返回查询（对应点 `x`，M × 2）和键
        （对应数据点 `xs`，N × 2），使注意力等于高斯核的 Nadaraya–Watson 估计。
        """,
        blank="""
            def ex1_qk(x, xs, sigma):
                return ...  # (queries (M, 3), keys (N, 3)): attention = the Gaussian estimate
            """,
        answer="""
            def ex1_qk(x, xs, sigma):
                q = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], -1)
                k = torch.cat([xs / sigma**2, -(xs**2).sum(-1, keepdim=True) / (2 * sigma**2)], -1)
                return q, k
            """,
        check="""
            answered(ex1_qk=ex1_qk(torch.zeros(1, 2), torch.zeros(1, 2), 1.0))
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
        **练习 2.** 在第一个输入的图中，每个词元总共*收到*多少注意力（加权入度）？给出
         `ex2_received`（N,）。
        """,
        blank="""
            ex2_received = ...  # (N,): the attention each token receives in the first graph
            """,
        answer="ex2_received = A.sum(dim=0)  # column sums: the weight arriving at each key",
        check="""
            answered(ex2_received=ex2_received)
            n = len(tokens)
            by_hand = torch.tensor([sum(float(A[i, j]) for i in range(n)) for j in range(n)])
            assert ex2_received.shape == (n,)
            assert torch.allclose(ex2_received.float(), by_hand, atol=1e-5), T(
                "not the weight each token receives", "不是每个词元收到的权重")
            print(T("right; the most attended token:", "正确；收到注意力最多的词元："),
                  tokens[int(ex2_received.argmax())])
            """,
        wrong="ex2_received = A.sum(dim=1)"),
))
