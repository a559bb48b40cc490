"""Part 4 of the course, Heads as subspaces: its cells in English and in Chinese (see build.py)."""

from cells import Code, Exercise, Part, Text  # noqa: F401

# ======================================================================================
# 04 heads as subspaces
# ======================================================================================

PART = Part(4, "heads_as_subspaces", "Heads as subspaces", "多头与子空间", (
    Text("""
        Multi-head attention splits $d_{model}$ into $h$ heads of $d_k = d_{model}/h$. Article
        000 reads this as 「将高维语义空间正交分解为多个低秩子空间」 (an orthogonal
        decomposition into low-rank subspaces) and says training drives the heads apart
        (「梯度下降会驱使它们收敛到不同的表征子空间」). Here we measure the subspaces of
        attnlab's `MultiHeadAttention` (one fused `qkv_proj`, as in article 001): how they
        sit, what they cost and how their outputs are combined.
        """, """
        多头注意力把 $d_{model}$ 切成 $h$ 个 $d_k = d_{model}/h$ 维的头。文章 000 把它解读为
        「将高维语义空间正交分解为多个低秩子空间」，并说训练会让各头分开（「梯度下降会驱使它们收敛到
        不同的表征子空间」）。这里我们测量 attnlab 的 `MultiHeadAttention`（与文章 001 一样用一个融
        合的
        `qkv_proj`）中的子空间：它们如何分布、代价多少、各头的输出如何合并。
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
        the mean angle between the query subspaces of every pair of heads.
        """, """
        **主角。** 两个 $d$ 维子空间用它们之间的主角来比较：取标准正交基 $U_a$、$U_b$（按列），
        $U_a^T U_b$ 的奇异值就是各主角的余弦。正交的子空间所有主角都是 90°。下图是每两个头的 query
        子空间之间的平均主角。
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
        fig.colorbar(im, ax=axes, label=T("mean principal angle (deg)", "平均主角（度）"))
        off = ang[~torch.eye(H, dtype=torch.bool)]
        print(T("between different heads:", "不同头之间："), round(float(off.mean()), 1), "deg")
        """),
    Text("""
        At initialisation the heads' subspaces are far from orthogonal; an orthogonal $W_q$
        would make them so, but nothing in attention asks for it. attnlab's report trains
        small models and measures the angles before and after: they *fall* (by about 11° on
        average), so this claim of the article does not hold (`attnlab claims --only
        000-gradient-descent-diversifies`). What does hold is the cost: $h$ heads of
        $d_{model}/h$ dimensions have exactly the parameters of one head of $d_{model}$.
        """, """
        初始化时各头的子空间远非正交；正交的 $W_q$ 可以让它们正交，但注意力本身并不要求这一点。
        attnlab 的报告训练小模型并测量训练前后的主角：主角是*变小*的（平均约 11°），所以文章的这一
        论断不成立（`attnlab claims --only 000-gradient-descent-diversifies`）。成立的是代价：$h$ 个
        $d_{model}/h$ 维的头与一个 $d_{model}$ 维的头参数量完全相同。
        """),
    Code("""
        for h in (1, 2, 4, 8):
            n = sum(p.numel() for p in attnlab.MultiHeadAttention(E, h).parameters())
            print(f"h = {h}: {n} " + T("parameters", "个参数"))
        """),
    Text("""
        **Concat, then $W^O$.** $\\mathrm{Concat}(\\mathrm{head}_1, \\ldots, \\mathrm{head}_h) W^O$
        is the same as $\\sum_h \\mathrm{head}_h W^O_h$, where $W^O_h$ is the block of $W^O$
        that meets head $h$: each head writes into the output through its own slice, and the
        output is their sum. `hook_context` gives each head's output before `out_proj`.
        """, """
        **先拼接，再乘 $W^O$。** $\\mathrm{Concat}(\\mathrm{head}_1, \\ldots, \\mathrm{head}_h) W^O$
        等于 $\\sum_h \\mathrm{head}_h W^O_h$，其中 $W^O_h$ 是 $W^O$ 中与第 $h$ 个头相乘的那一块：
        每个头通过自己的切片写入输出，输出是它们的和。`hook_context` 给出 `out_proj` 之前每个头的输
        出。
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
        print(tuple(ctx.shape), torch.allclose(out, merged,
                                               atol=1e-6))
        """),
    Exercise("ex1", """
        **Exercise 1.** Slice head 2's key projection out of the fused `qkv_proj`: its weight
        `ex1_Wk2` (d × E) and bias `ex1_bk2` (d,).
        """, """
        **练习 1.** 从融合的 `qkv_proj` 中切出第 2 个头的 key 投影：权重 `ex1_Wk2`（d × E）与偏置
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
                "these are not head 2's keys (see hook_k)", "这不是第 2 个头的 key（对照 hook_k）")
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
        **练习 2.** 写出 `ex2_angles(A, B)`：`A` 与 `B` 的行空间之间的主角（单位：度，升序），
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
