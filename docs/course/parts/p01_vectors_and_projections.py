"""Part 1 of the course: Vectors and projections.

Its cells in English and in Chinese (see build.py).
"""

from cells import Code, Exercise, Part, Predict, Text, by_hand, measured  # noqa: F401

# ======================================================================================
# 01 vectors and projections
# ======================================================================================

PART = Part(1, "vectors_and_projections", "Vectors and projections", "向量与投影", (
    Text("""
        Article 000 takes attention apart in four steps. The first is a **linear projection**:
        the input $X \\in \\mathbb{R}^{N \\times d}$ (one row per token) is mapped to
        $Q = XW^Q$, $K = XW^K$, $V = XW^V$. The article's reading of it:
        「将原本在高维空间中的词向量，投影到了三个不同的特征子空间中」 (the word vectors are
        projected into three different feature subspaces). This notebook computes what a
        projection keeps and what it throws away, with attnlab's `SelfAttention`, which is
        the article's own `PureSelfAttention`.
        """, """
        文章 000 把注意力拆成四步，第一步是**线性投影**：输入 $X \\in \\mathbb{R}^{N \\times d}$
        （每个词元一行）被映射为 $Q = XW^Q$、$K = XW^K$、$V = XW^V$。文章的解读是
        「将原本在高维空间中的词向量，投影到了三个不同的特征子空间中」。本部分用 attnlab 的
        `SelfAttention`（就是文章里的 `PureSelfAttention`）来计算：一次投影保留了什么，又丢掉了什么
        。
        """),
    Code("""
        X = torch.randn(5, 8)  # N = 5 tokens, d = 8
        attn = attnlab.SelfAttention(embed_dim=8, num_heads=2)
        W_q = attn.W_q.weight.detach()  # nn.Linear stores W^Q transposed: (out, in) = (8, 8)
        Q = X @ W_q.T
        print(tuple(Q.shape), torch.allclose(Q, attn.W_q(X)))
        """),
    Text("""
        With two heads, $d_k = d / h = 4$: head $h$ uses rows $4h \\ldots 4h+3$ of `W_q.weight`
        (columns of $W^Q$). Each head therefore sees $X$ through a $4 \\times 8$ matrix. Every
        attnlab module passes its queries through a `HookPoint` named `hook_q`; a forward hook
        on it reads them, shaped (B, H, N, d_k).
        """, """
        有两个头时 $d_k = d / h = 4$：第 $h$ 个头使用 `W_q.weight` 的第 $4h \\ldots 4h+3$ 行
        （即 $W^Q$ 的列）。所以每个头都是透过一个 $4 \\times 8$ 的矩阵来看 $X$。attnlab 的每个模块
        都让查询经过一个名为 `hook_q` 的 `HookPoint`；在它上面挂一个前向钩子就能读到它们，
        形状为 (B, H, N, d_k)。
        """),
    Code("""
        d_k = attn.head_dim
        W_q0 = W_q[:d_k]  # head 0's projection, (d_k, d)
        captured = {}
        handle = attn.hook_q.register_forward_hook(lambda mod, inp, out: captured.update(q=out))
        attn(X[None])
        handle.remove()
        q0 = captured["q"][0, 0]  # (N, d_k)
        print(tuple(captured["q"].shape), torch.allclose(q0, X @ W_q0.T, atol=1e-6))
        """),
    Text("""
        **The heading 「线性投影：升维与子空间切割」 is wrong about the dimension.** It calls the
        projection a raising of the dimension (升维), but each head's $W^Q$, $W^K$, $W^V$ map
        the $d$ numbers of a token to $d_k = d/h$ numbers: as many as $d$ with one head, fewer
        with more (the article's own next lines say $d \\times d_k$). Measured on attnlab's
        `MultiHeadAttention` for a few widths and head counts:
        """, """
        **标题「线性投影：升维与子空间切割」在维度上说错了。** 它把投影称为“升维”，但每个头的
        $W^Q$、$W^K$、$W^V$ 都把一个词元的 $d$ 个数映射为 $d_k = d/h$ 个数：只有一个头时与 $d$
        相等，头更多时更少（文章紧接着的正文自己写的也是 $d \\times d_k$）。在 attnlab 的
        `MultiHeadAttention` 上对几种宽度和头数实测：
        """),
    Code("""
        widths = []
        for d_model, h in [(8, 1), (8, 2), (64, 8), (512, 8)]:
            d_head = attnlab.MultiHeadAttention(embed_dim=d_model, num_heads=h).head_dim
            widths.append((d_model, d_head))
            print(T(f"d = {d_model}, h = {h}: each head's q, k, v have d_k = {d_head} numbers, "
                    f"d_k / d = {d_head / d_model:.3f}",
                    f"d = {d_model}，h = {h}：每个头的 q、k、v 有 d_k = {d_head} 个数，"
                    f"d_k / d = {d_head / d_model:.3f}"))
        raised = any(d_head > d_model for d_model, d_head in widths)
        print(T("does any projection raise the dimension?", "有没有哪个投影升维？"),
              T("yes", "有") if raised else
              T("no: d_k ≤ d everywhere, the heading's 升维 is an error",
                "没有：处处 d_k ≤ d，标题中的“升维”是错的"))
        """),
    Predict("predict", """
        **Predict, then check.** Head 0 reads the 8 numbers of a token through `W_q0`, a
        $4 \\times 8$ matrix. How many independent directions of the 8-dimensional input does
        head 0 not see at all (they reach its queries as zero)? Write a number in
        `predict_unseen`; the check measures it (within 0.5 passes).
        """, """
        **先预测，再核对。** 第 0 个头透过 `W_q0`（一个 $4 \\times 8$ 的矩阵）读取一个词元的
        8 个数。8 维输入中有多少个相互独立的方向是第 0 个头完全看不见的（它们到达查询时变成零）？
        把一个数写进 `predict_unseen`；检查单元格会测量它（相差不超过 0.5 即通过）。
        """,
        blank="predict_unseen = ...  # your prediction: how many directions head 0 cannot see",
        answer="predict_unseen = 4  # 8 input dimensions, a rank of at most d_k = 4: 8 - 4 lost",
        check="""
            unseen = X.shape[1] - int(torch.linalg.matrix_rank(W_q0))  # the null space's dimension
            predicted(predict_unseen, unseen, within=0.5, why_en=(
                "A 4 x 8 matrix has rank at most 4, so at least 8 - 4 = 4 directions of the "
                "input vanish: a head's projection keeps or lowers the dimension, never "
                "raises it."),
                why_zh=("一个 4 × 8 的矩阵秩至多为 4，所以输入中至少有 8 - 4 = 4 个方向消失：一个头"
                        "的投影保持或降低维度，从不升维。"))
            """,
        wrong="predict_unseen = 0  # as if the projection raised the dimension and lost nothing"),
    Text("""
        **What a projection throws away.** A map $\\mathbb{R}^8 \\to \\mathbb{R}^4$ has a null
        space of dimension at least 4: every direction in it reaches head 0's queries as zero.
        Split any $x$ into its part in the row space of $W$ (what the head sees) and the rest:
        the head's query is the same for $x$ and for its row-space part alone.
        """, """
        **投影丢掉了什么。** 一个 $\\mathbb{R}^8 \\to \\mathbb{R}^4$ 的映射，其零空间至少是 4 维：
        零空间里的任何方向到了第 0 个头的查询里都变成零。把任意 $x$ 拆成 $W$ 行空间里的部分
        （头看得见的）与其余部分：$x$ 与它的行空间部分得到完全相同的查询。
        """),
    Code("""
        P = torch.linalg.pinv(W_q0) @ W_q0  # the orthogonal projection onto W_q0's row space
        x = torch.randn(8)
        x_seen, x_unseen = P @ x, x - P @ x
        print(T("rank of W_q0:", "W_q0 的秩："), int(torch.linalg.matrix_rank(W_q0)))
        print(T("|W x_unseen| =", "|W x_unseen| ="), float((W_q0 @ x_unseen).norm()))
        print(T("same query:", "查询相同："), torch.allclose(W_q0 @ x, W_q0 @ x_seen, atol=1e-6))
        """),
    Text("""
        The same picture in two dimensions, $d = 2$ and $d_k = 1$: the head keeps only each
        point's coordinate along one direction $w$; points on a line perpendicular to $w$
        become indistinguishable.
        """, """
        二维里的同一幅图，$d = 2$、$d_k = 1$：头只保留每个点沿方向 $w$ 的坐标；落在与 $w$
        垂直的同一条直线上的点变得无法区分。
        """),
    Code("""
        w = torch.tensor([0.8, 0.6])  # a unit direction: W is the 1 x 2 matrix w^T
        pts = torch.randn(12, 2)
        proj = (pts @ w)[:, None] * w  # each point's shadow on the line through w
        fig, ax = plt.subplots(figsize=(4, 4))
        ax.axline((0, 0), (float(w[0]), float(w[1])), color="gray", lw=1)
        for p, s in zip(pts, proj):
            ax.plot([p[0], s[0]], [p[1], s[1]], color="lightgray", lw=1)
        ax.scatter(pts[:, 0], pts[:, 1], label=T("tokens x", "词向量 x"))
        ax.scatter(proj[:, 0], proj[:, 1], marker="x",
                   label=T("what the head keeps", "头保留的部分"))
        ax.set_aspect("equal")
        ax.set_title(T("projection onto span(w)", "投影到 span(w)"))
        ax.legend(loc="lower right")
        plt.show()
        """),
    Text("""
        **Three different subspaces — how different?** The article says the projections let
        a word play different roles 「在三个不同的几何空间中」. The row spaces of head 0's
        $W^Q$, $W^K$, $W^V$ are three 4-dimensional subspaces of $\\mathbb{R}^8$; their
        *principal angles* (notebook 04 builds them) say how far apart they are: 0° for a
        shared direction, 90° for orthogonal ones. The cell prints them at random
        initialisation, with the smallest and the largest.
        """, """
        **三个不同的子空间——差别有多大？** 文章说投影让词「在三个不同的几何空间中」扮演不同角色。
        第 0 个头的 $W^Q$、$W^K$、$W^V$ 的行空间是 $\\mathbb{R}^8$ 中的三个 4 维子空间，它们之间的
        *主夹角*（第 04 部分会构造）说明它们相距多远：共有的方向为 0°，正交的方向为 90°。
        下面的单元格打印随机初始化时的主夹角，以及其中最小和最大的一个。
        """),
    Code("""
        def principal_angles(A, B):
            qa, _ = torch.linalg.qr(A.T)
            qb, _ = torch.linalg.qr(B.T)
            return torch.rad2deg(torch.acos(torch.linalg.svdvals(qa.T @ qb).clamp(-1, 1)))

        W_k0, W_v0 = attn.W_k.weight[:d_k], attn.W_v.weight[:d_k]
        qk, qv = principal_angles(W_q0, W_k0), principal_angles(W_q0, W_v0)
        print("Q-K:", qk.round().tolist())
        print("Q-V:", qv.round().tolist())
        angles = torch.cat([qk, qv])
        print(T("smallest and largest angle (°):", "最小与最大的主夹角（°）："),
              round(float(angles.min()), 2), round(float(angles.max()), 2))
        print(T("Neither one subspace (every angle 0°) nor orthogonal ones (every angle 90°): "
                "random subspaces of R^8 meet at angles spread between the two, and the "
                "smallest can come close to 0° by chance.",
                "既不是同一个子空间（主夹角全为 0°），也不是相互正交的子空间（全为 90°）："
                "R^8 中随机子空间的主夹角分布在两者之间，最小的一个也可能偶然接近 0°。"))
        """),
    Exercise("ex1", """
        **Exercise 1.** Compute head 1's queries `ex1_q1` (N × d_k) from `X` and `W_q` by
        hand (which rows of `W_q` belong to head 1?).
        """, """
        **练习 1.** 用 `X` 和 `W_q` 手工算出第 1 个头的查询 `ex1_q1`（N × d_k）。
        （`W_q` 的哪几行属于第 1 个头？）
        """,
        blank="ex1_q1 = ...  # head 1's queries, (N, d_k), from X and W_q",
        answer="ex1_q1 = X @ W_q[d_k:2 * d_k].T",
        check="""
            answered(ex1_q1=ex1_q1)
            assert tuple(ex1_q1.shape) == (5, d_k), T("shape should be (N, d_k)",
                                                      "形状应为 (N, d_k)")
            assert torch.allclose(ex1_q1, captured["q"][0, 1], atol=1e-6), T(
                "not head 1's queries (compare attn.hook_q)",
                "不是第 1 个头的查询（请与 attn.hook_q 比较）")
            print(T("right: these are head 1's queries", "正确：这就是第 1 个头的查询"))
            """,
        wrong="ex1_q1 = X @ W_q[:d_k].T"),
    Exercise("ex2", """
        **Exercise 2.** Find a vector `ex2_x` (length 8, not zero) that head 0's queries
        cannot see: `W_q0 @ ex2_x` = 0. Hint: `torch.linalg.svd`.
        """, """
        **练习 2.** 找一个第 0 个头的查询看不见的向量 `ex2_x`（长度 8，非零）：
        `W_q0 @ ex2_x` = 0。提示：`torch.linalg.svd`。
        """,
        blank="ex2_x = ...  # a non-zero vector of length 8 with W_q0 @ ex2_x = 0",
        answer="ex2_x = torch.linalg.svd(W_q0)[2][-1]  # a right singular vector beyond the rank",
        check="""
            answered(ex2_x=ex2_x)
            assert ex2_x.shape == (8,) and float(ex2_x.norm()) > 1e-3, T(
                "give a non-zero vector of length 8", "请给出长度为 8 的非零向量")
            assert float((W_q0 @ ex2_x).norm()) < 1e-5 * float(ex2_x.norm()), T(
                "W_q0 @ ex2_x is not zero", "W_q0 @ ex2_x 不为零")
            print(T("right: ex2_x lies in the null space", "正确：ex2_x 在零空间里"))
            """,
        wrong="ex2_x = torch.ones(8)"),
    Exercise("ex3", """
        **Exercise 3.** Write the orthogonal projection `ex3_P` (8 × 8) onto the row space
        of `W_q0` with the formula $P = W^T (W W^T)^{-1} W$ (no `pinv`).
        """, """
        **练习 3.** 用公式 $P = W^T (W W^T)^{-1} W$（不用 `pinv`）写出到 `W_q0` 行空间的正交投影
        `ex3_P`（8 × 8）。
        """,
        blank="ex3_P = ...  # (8, 8): W^T (W W^T)^-1 W for W = W_q0, without pinv",
        answer="ex3_P = W_q0.T @ torch.linalg.inv(W_q0 @ W_q0.T) @ W_q0",
        check="""
            answered(ex3_P=ex3_P)
            assert tuple(ex3_P.shape) == (8, 8)
            assert torch.allclose(ex3_P, ex3_P.T, atol=1e-5), T("P must be symmetric", "P 必须对称")
            assert torch.allclose(ex3_P @ ex3_P, ex3_P, atol=1e-4), T("P @ P must equal P",
                                                                      "P @ P 必须等于 P")
            assert torch.allclose(W_q0 @ ex3_P, W_q0, atol=1e-4), T(
                "P must keep the row space", "P 必须保持行空间不变")
            assert abs(float(ex3_P.trace()) - d_k) < 1e-3, T("trace must be the rank",
                                                             "迹必须等于秩")
            print(T("right: an orthogonal projection of rank", "正确：秩为"), d_k,
                  T("", "的正交投影"))
            """,
        wrong="ex3_P = W_q0.T @ W_q0"),
))
