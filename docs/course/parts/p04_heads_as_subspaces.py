"""Part 4 of the course, Heads as subspaces: its cells in English and in Chinese (see build.py)."""

from cells import Code, Exercise, Part, Predict, Text, by_hand, measured  # noqa: F401

# ======================================================================================
# 04 heads as subspaces
# ======================================================================================

PART = Part(4, "heads_as_subspaces", "Heads as subspaces", "多头与子空间", (
    Text("""
        Multi-head attention splits $d_{model}$ into $h$ heads of $d_k = d_{model}/h$. Article
        000 reads this as 「将高维语义空间正交分解为多个低秩子空间」 (an orthogonal
        decomposition into low-rank subspaces), says it costs nothing extra
        (「多头注意力不仅没有增加计算复杂度（总维度不变）」) and that training drives the heads
        apart (「梯度下降会驱使它们收敛到不同的表征子空间」). Here we measure the subspaces of
        attnlab's `MultiHeadAttention` (one fused `qkv_proj`, as in article 001), before and
        after training: how they sit, what they cost, what one head can learn, why $W^Q$ and
        $W^K$ are two matrices and how the heads' outputs are combined.
        """, """
        多头注意力把 $d_{model}$ 切成 $h$ 个 $d_k = d_{model}/h$ 维的头。文章 000 把它解读为
        「将高维语义空间正交分解为多个低秩子空间」，说它没有额外代价
        （「多头注意力不仅没有增加计算复杂度（总维度不变）」），并说训练会让各头分开
        （「梯度下降会驱使它们收敛到不同的表征子空间」）。这里我们在训练前后测量 attnlab 的
        `MultiHeadAttention`（与文章 001 一样用一个融合的 `qkv_proj`）中的子空间：它们如何分布、
        代价多少、一个头能学到什么、$W^Q$ 与 $W^K$ 为什么是两个矩阵，以及各头的输出如何合并。
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
        the mean angle between the query subspaces of every pair of heads, at attnlab's
        initialisation and, for contrast, for an orthogonal $W_q$.
        """, """
        **主夹角。** 两个 $d$ 维子空间用它们之间的主夹角来比较：取标准正交基 $U_a$、$U_b$（按列），
        $U_a^T U_b$ 的奇异值就是各主夹角的余弦。正交的子空间所有主夹角都是 90°。下图是每两个头的
        查询子空间之间的平均主夹角：左边是 attnlab 的初始化，右边作为对比，是一个正交的 $W_q$。
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
        fig.colorbar(im, ax=axes, label=T("mean principal angle (°)", "平均主夹角（°）"))
        off = ang[~torch.eye(H, dtype=torch.bool)]
        print(T("between different heads, at initialisation:", "初始化时不同头之间："),
              f"{float(off.mean()):.1f}°")
        """),
    Text("""
        **Orthogonal, and driven apart by training?** The article's sentences have several
        readings, and the experiment `multihead-cost` measures each one. After the split
        (`view`/`transpose`) every head owns its own block of coordinates: those blocks are
        orthogonal by construction. In the input space, head $h$ reads its queries through
        the rows of its slice $W_q^h$; those subspaces are what training shapes. The
        experiment trains tiny attnlab GPTs (one block, 4 heads; here on the copy task, in
        the report also on sort) and measures the angles between heads before and after
        training, beside a control whose heads start identical (they receive identical
        gradients). It asks: do the trained heads end in different subspaces (the plain
        reading)? Are they orthogonal? Did training push them apart? Do they attend
        differently?
        """, """
        **正交吗？是训练把它们推开的吗？** 文章的这几句话有几种读法，实验 `multihead-cost` 对每一种
        都做了测量。切分（`view`/`transpose`）之后，每个头各占一块坐标：这些坐标块按构造正交。
        在输入空间里，第 $h$ 个头通过它的切片 $W_q^h$ 的各行读取查询；训练塑造的正是这些子空间。
        实验训练很小的 attnlab GPT（一个块、4 个头；这里用复制任务，报告中还有排序任务），
        测量训练前后各头之间的主夹角，并附上对照：各头初始完全相同的模型（它们得到完全相同的梯度）。
        它要回答：训练后各头是否处在不同的子空间（字面的读法）？它们正交吗？是训练把它们推开的吗？
        它们的注意力分布是否不同？
        """),
    *measured("multihead_cost", """
        `measure` counts the parameters and operations of one head against $h$ heads, takes
        the largest cosine between the heads' coordinate blocks (and, as the wrong variant,
        between overlapping blocks), the angle random subspaces of that size make, then
        trains the models: the real ones, the one whose heads start identical, and one
        pushed apart on purpose. Small and short:
        """, """
        `measure` 统计一个头与 $h$ 个头的参数量和运算量，算出各头坐标块之间最大的余弦（错误变体是
        相互重叠的坐标块），以及同样大小的随机子空间之间的夹角，然后训练各个模型：真实的模型、
        各头初始完全相同的模型，以及一个被刻意推开的模型。小规模、短训练：
        """, """
        m = multihead_cost.measure(embed_dim=64, heads=4, n=16, batch=2, config=multihead_cost
                                   .HeadsConfig(tasks=("copy",), seeds=1, steps=10))
        print(T("largest cosine between the heads' blocks:", "各头坐标块之间最大的余弦："),
              fmt_num(m.blocks), T("(overlapping blocks:", "（相互重叠的坐标块："),
              fmt_num(m.wrong_blocks) + T(")", "）"))
        print(T("random subspaces of that size, mean angle (°):",
                "同样大小的随机子空间，平均夹角（°）："), fmt_num(m.random_angle))
        """),
    Code("""
        from attnlab.course import multihead_cost_summary
        from attnlab.experiments.multihead_cost import HeadsConfig

        r = run("multihead-cost", config=HeadsConfig(tasks=("copy",), seeds=1, steps=80), n=16,
                plot=False)
        report(r)
        multihead_cost_summary(r)  # the angles between the heads, then each reading's check
        """),
    Predict("predict", """
        **Predict, then check.** `MultiHeadAttention(E, h)` with $E = 32$: how many times as
        many parameters does it have with $h = 8$ heads as with $h = 1$? Write the ratio in
        `predict_ratio`; the check counts them (within 0.05 passes).
        """, """
        **先预测，再核对。** $E = 32$ 的 `MultiHeadAttention(E, h)`：$h = 8$ 个头时的参数量是
        $h = 1$ 时的多少倍？把这个倍数写进 `predict_ratio`；检查单元格会数出它们（相差不超过 0.05
        即通过）。
        """,
        blank="predict_ratio = ...  # your prediction: parameters with 8 heads / with 1 head",
        answer="predict_ratio = 1  # the heads slice W_q, W_k, W_v, W_o (E x E), add none",
        check="""
            n_params = {h_: sum(p_.numel()
                                for p_ in attnlab.MultiHeadAttention(32, h_).parameters())
                        for h_ in (1, 8)}
            predicted(predict_ratio, n_params[8] / n_params[1], within=0.05, why_en=(
                f"{n_params[8]} parameters against {n_params[1]}: the heads only slice the "
                "E x E matrices into E/h-wide blocks; more heads do not mean more weights."),
                why_zh=(f"{n_params[8]} 个参数对 {n_params[1]} 个：各头只是把 E × E 的矩阵切成宽 "
                        "E/h 的块；头多了，权重并不会变多。"))
            """,
        wrong="predict_ratio = 8  # as if each head had its own E x E matrices"),
    Text("""
        Each reading gets its own answer above: a sentence of the article can hold in one
        reading and not in another. The control says where a difference between heads
        comes from: heads that start identical receive identical gradients. Part 10 puts the
        plain and the stronger reading to the heads of a two-layer model trained on another
        task, with that run's own initial weights as the control.

        **The cost.** $W_q, W_k, W_v, W_o$ are $E \\times E$ whatever $h$ is: the heads only
        slice them, so the parameters and the matmul FLOPs are equal for any $h$, by
        construction. What the heads do not split is the $N \\times N$ work: every head
        scales, masks and normalises its own scores, and the weights tensor holds one
        $N \\times N$ matrix per head.
        """, """
        上面每种读法都有各自的答案：文章的一句话可能在一种读法下成立，在另一种读法下不成立。对照说明
        各头之间的差别从何而来：初始完全相同的头得到完全相同的梯度。第 10 部分在另一个任务上训练一个
        两层模型，用字面的读法和更强的读法检验它的头，以这次训练自己的初始权重作为对照。

        **代价。** 无论 $h$ 是多少，$W_q, W_k, W_v, W_o$ 都是 $E \\times E$ 的：各头只是切分它们，
        所以对任何 $h$，参数量和矩阵乘法 FLOPs 都相等，这是按构造成立的。各头没有切分的是
        $N \\times N$ 的那部分工作：每个头都要对自己的分数做缩放、掩码和归一化，权重张量里每个头
        都有一个 $N \\times N$ 的矩阵。
        """),
    Code("""
        for h in (1, 2, 4, 8):
            n = sum(p.numel() for p in attnlab.MultiHeadAttention(E, h).parameters())
            print(f"h = {h}: {n} " + T("parameters", "个参数"))
        for id_, en, zh in [
                ("params", "h heads have one head's parameters: difference",
                 "h 个头与一个头的参数量相同：差值"),
                ("flops", "and its matmul FLOPs: relative difference",
                 "矩阵乘法 FLOPs 也相同：相对差"),
                ("full-compute", "and its full compute (softmax and mask included): excess",
                 "全部计算量（含 softmax 与掩码）也相同：相对增量"),
                ("weights-bytes", "and the bytes of its attention weights: excess",
                 "注意力权重的字节数也相同：相对增量")]:
            check_line(r.check(id_), en, zh)
        """),
    Text("""
        **One head, one relation?** Article 000 says that with a single head 「它只能学到一种关系
        模式」. The experiment `one-relation-per-head` trains a one-head and a two-head model of
        the same width on a task whose every answer needs two relations at once (the tokens
        at $t - 1$ and $t - 3$); the claim predicts that one head fails where two succeed.
        """, """
        **一个头，一种关系？** 文章 000 说，只用一个单头注意力时「它只能学到一种关系模式」。实验
        `one-relation-per-head` 在一个每个答案都同时需要两种关系（位置 $t - 1$ 与 $t - 3$ 上的词元）
        的任务上，训练宽度相同的单头模型和双头模型；按这个论断，单头应当学不会，而双头能学会。
        """),
    *measured("one_relation_per_head", """
        `measure` trains, for each task, the one-head model and the two-head model of the same
        width for the same steps, and keeps their held-out accuracy. Ten steps only:
        """, """
        `measure` 对每个任务，用相同的步数训练宽度相同的单头模型和双头模型，并记下它们在留出数据上
        的准确率。只训练十步：
        """, """
        from attnlab.experiments.one_relation_per_head import RelationConfig, TwoRelationTask

        m = one_relation_per_head.measure(config=RelationConfig(runs=((TwoRelationTask("offsets"),
                                                                        10),)))
        print(T("accuracy, one head:", "准确率，单头："), fmt_num(m.tasks[0].one.acc),
              T("two heads:", "双头："), fmt_num(m.tasks[0].many.acc))
        """),
    Code("""
        from attnlab.experiments.one_relation_per_head import RelationConfig, TwoRelationTask

        r = run("one-relation-per-head", plot=False,
                config=RelationConfig(runs=((TwoRelationTask("offsets"), 60),)))
        report(r)
        """),
    Text("""
        **Why two matrices, $W^Q$ and $W^K$?** Article 000: 「通过三个不同的矩阵，模型允许词在三个
        不同的几何空间中表达不同的角色」. With $W^Q = W^K$ the score matrix is a Gram matrix,
        symmetric: token $i$ cannot look for $j$ without $j$ looking for $i$. The experiment
        `qkv-roles` trains one-head models untied and tied ($W^K$ made equal to $W^Q$) on a
        cyclic previous-token task, and measures the directed score gap
        $q_i \\cdot k_{i-1} - q_{i-1} \\cdot k_i$; its control is the same untied model before
        training, whose random asymmetry has no direction.
        """, """
        **为什么要两个矩阵 $W^Q$ 和 $W^K$？** 文章 000：「通过三个不同的矩阵，模型允许词在三个不同的
        几何空间中表达不同的角色」。若 $W^Q = W^K$，分数矩阵是一个格拉姆矩阵，是对称的：词元 $i$
        要找 $j$，$j$ 就一定也同样地找 $i$。实验 `qkv-roles` 在一个循环的前一个词元任务上训练未绑定
        和绑定（令 $W^K$ 等于 $W^Q$）的单头模型，测量有方向的分数差
        $q_i \\cdot k_{i-1} - q_{i-1} \\cdot k_i$；它的对照是训练前的同一个未绑定模型，其随机的
        不对称没有方向。
        """),
    *measured("qkv_roles", """
        `measure` trains four models — untied ($W^Q \\neq W^K$) and tied ($W^Q = W^K$), on the
        swap task and on the cyclic one — and reads each before and after training: its
        accuracy and how far its score matrix is from symmetric. Twenty steps:
        """, """
        `measure` 训练四个模型——未绑定（$W^Q \\neq W^K$）和绑定（$W^Q = W^K$），分别在交换任务和
        循环任务上——并在训练前后读出每个模型的准确率，以及它的分数矩阵离对称有多远。训练二十步：
        """, """
        from attnlab.experiments.qkv_roles import RolesConfig

        m = qkv_roles.measure(config=RolesConfig(steps=20, batch=16))
        for model in (m.cyclic_untied, m.cyclic_tied):
            print(T("cyclic task, tied:" if model.tied else "cyclic task, untied:",
                    "循环任务，绑定：" if model.tied else "循环任务，未绑定："),
                  T("accuracy", "准确率"), fmt_num(model.trained.accuracy),
                  T(", asymmetry ‖S − Sᵀ‖/‖S‖", "，不对称度 ‖S − Sᵀ‖/‖S‖"),
                  fmt_num(model.trained.asym))
        """),
    Code("""
        from attnlab.experiments.qkv_roles import RolesConfig

        r = run("qkv-roles", plot=False, config=RolesConfig(steps=100, batch=32))
        report(r)
        check_line(r.check("tied-symmetric"), "tied scores are symmetric: ‖S − Sᵀ‖ / ‖S‖",
                   "绑定时分数对称：‖S − Sᵀ‖ / ‖S‖")
        check_line(r.check("untied-beats-tied"),
                   "untied learns the cyclic task better: accuracy, untied − tied",
                   "未绑定模型更能学会循环任务：准确率，未绑定 − 绑定")
        """),
    Text("""
        **Concat, then $W^O$.** $\\mathrm{Concat}(\\mathrm{head}_1, \\ldots, \\mathrm{head}_h) W^O$
        is the same as $\\sum_h \\mathrm{head}_h W^O_h$, where $W^O_h$ is the block of $W^O$
        that meets head $h$: each head writes into the output through its own slice, and the
        output is their sum. `hook_context` gives each head's output before `out_proj`.
        """, """
        **先拼接，再乘 $W^O$。** $\\mathrm{Concat}(\\mathrm{head}_1, \\ldots, \\mathrm{head}_h) W^O$
        等于 $\\sum_h \\mathrm{head}_h W^O_h$，其中 $W^O_h$ 是 $W^O$ 中与第 $h$ 个头相乘的那一块：
        每个头通过自己的切片写入输出，输出是它们的和。`hook_context` 给出 `out_proj` 之前每个头的
        输出。
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
        print(tuple(ctx.shape), torch.allclose(out, merged, atol=1e-6))
        """),
    Text("""
        **Lossless?** Article 000 calls the fusion 「无损」. The map from the concatenation to
        $W^O \\cdot$ concat loses nothing exactly when $W^O$ is invertible. The experiment
        `wo-fusion` trains a two-head model on a task that needs both heads and checks that
        the concatenation is recovered from the output; its control is the wrong variant,
        a $W^O$ without head 1's columns.
        """, """
        **无损吗？** 文章 000 称这种融合是「无损」的。从拼接向量到 $W^O \\cdot$ 拼接向量的映射，
        恰好在 $W^O$ 可逆时不丢失任何信息。实验 `wo-fusion` 在一个需要两个头的任务上训练双头模型，
        检查能否从输出恢复出拼接向量；它的对照是错误变体：去掉头 1 各列的 $W^O$。
        """),
    *measured("wo_fusion", """
        `measure` trains the two-head model with a learned $W^O$ (and two trained controls:
        $W^O$ block-diagonal, and the identity), then reads the learned $W^O$: its rank, and
        how well the concatenation is recovered from the output — also with head 1's columns
        dropped, the wrong variant. Twenty steps:
        """, """
        `measure` 用学出来的 $W^O$ 训练双头模型
        （另有两个训练过的对照：分块对角的 $W^O$ 和单位矩阵），
        再读出学到的 $W^O$：它的秩，以及从输出恢复拼接向量的误差——也包括去掉头 1 各列的错误变体。
        训练二十步：
        """, """
        from attnlab.experiments.wo_fusion import FusionConfig

        m = wo_fusion.measure(config=FusionConfig(steps=20, batch=16))
        print(T("rank of the learned W^O:", "学到的 W^O 的秩："), m.model.trained.rank,
              T("of", "/"), m.config.embed_dim)
        print(T("concatenation recovered, error:", "恢复拼接向量的误差："),
              fmt_num(m.model.trained.recon), T("(head 1's columns dropped:", "（去掉头 1 各列："),
              fmt_num(m.drop.recon) + T(")", "）"))
        """),
    Code("""
        from attnlab.experiments.wo_fusion import FusionConfig

        r = run("wo-fusion", plot=False, config=FusionConfig(batch=32))
        report(r)
        """),
    Exercise("ex1", """
        **Exercise 1.** Slice head 2's key projection out of the fused `qkv_proj`: its weight
        `ex1_Wk2` (d × E) and bias `ex1_bk2` (d,).
        """, """
        **练习 1.** 从融合的 `qkv_proj` 中切出第 2 个头的键投影：权重 `ex1_Wk2`（d × E）与偏置
        `ex1_bk2`（d,）。
        """,
        blank="""
            ex1_Wk2 = ...  # head 2's key weight, (d, E), sliced from mha.qkv_proj.weight
            ex1_bk2 = ...  # and its bias, (d,), from mha.qkv_proj.bias
            """,
        answer="""
            ex1_Wk2 = mha.qkv_proj.weight[E + 2 * d:E + 3 * d]
            ex1_bk2 = mha.qkv_proj.bias[E + 2 * d:E + 3 * d]
            """,
        check="""
            answered(ex1_Wk2=ex1_Wk2, ex1_bk2=ex1_bk2)
            assert tuple(ex1_Wk2.shape) == (d, E) and tuple(ex1_bk2.shape) == (d,)
            assert torch.allclose(x[0] @ ex1_Wk2.T + ex1_bk2, seen["k"][0, 2], atol=1e-5), T(
                "these are not head 2's keys (see hook_k)",
                "这不是第 2 个头的键（请与 hook_k 比较）")
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
        **练习 2.** 写出 `ex2_angles(A, B)`：`A` 与 `B` 的行空间之间的主夹角（单位：度，升序），
        它们的行不一定是标准正交的。
        """,
        blank="""
            def ex2_angles(A, B):
                return ...  # the principal angles (degrees, ascending) between the row spaces
            """,
        answer="""
            def ex2_angles(A, B):
                qa, _ = torch.linalg.qr(A.T)
                qb, _ = torch.linalg.qr(B.T)
                cos = torch.linalg.svdvals(qa.T @ qb).clamp(-1, 1)
                return torch.rad2deg(torch.acos(cos)).sort().values
            """,
        check="""
            answered(ex2_angles=ex2_angles(torch.eye(2), torch.eye(2)))
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
        blank="ex3_parts = ...  # a list of H tensors (N, E): head h's contribution to out[0]",
        answer="""
            W_O = mha.out_proj.weight  # (E, E): columns h*d:(h+1)*d meet head h
            ex3_parts = [ctx[0, h] @ W_O[:, h * d:(h + 1) * d].T for h in range(H)]
            """,
        check="""
            answered(ex3_parts=ex3_parts)
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
