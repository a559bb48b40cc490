"""Part 1 of the course: Vectors and projections.

Its cells in English and in Chinese (see build.py). A learner who has done part 00 climbs
from a token as a vector to the dot product and the angle, the projection onto one
direction, the projection onto a subspace (a matrix, its row space and its null space),
and only then reaches a head's $W^Q$, $W^K$, $W^V$ and the angles between their subspaces.
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
        projected into three different feature subspaces). Checking that sentence needs its
        words: vector, projection, subspace. This part builds them one at a time, starting
        from part 00's matrix $X$: (1) a token as a vector, with a length and a direction;
        (2) the dot product, which measures the angle between two vectors; (3) the projection
        of a vector onto one direction; (4) the projection onto several directions at once,
        which is a matrix; and (5) only then the matrices $W^Q$, $W^K$, $W^V$ of
        attnlab's `SelfAttention`, which is the article's own `PureSelfAttention`: what they
        keep, what they throw away, and how far apart their three subspaces are.
        """, """
        文章 000 把注意力拆成四步，第一步是**线性投影**：输入 $X \\in \\mathbb{R}^{N \\times d}$
        （每个词元一行）被映射为 $Q = XW^Q$、$K = XW^K$、$V = XW^V$。文章的解读是
        「将原本在高维空间中的词向量，投影到了三个不同的特征子空间中」。要检验这句话，先要弄清其中
        的几个词：向量、投影、子空间。本部分从第 00 部分的矩阵 $X$ 出发，逐一建立它们：（1）词元
        是一个向量，有长度，也有方向；（2）点积，它度量两个向量之间的夹角；（3）一个向量在一个方向
        上的投影；（4）同时向几个方向投影，这就是一个矩阵；（5）最后才是 attnlab 的
        `SelfAttention`（就是文章里的 `PureSelfAttention`）中的矩阵 $W^Q$、$W^K$、$W^V$：它们
        保留了什么，丢掉了什么，它们的三个子空间又相距多远。
        """),
    # -- 1. a token is a vector --------------------------------------------------------
    Text("""
        ## 1. A token is a vector

        In part 00 a sentence became a matrix $X$ with one row per token: row $i$ holds the
        $d$ numbers of token $i$. A list of $d$ numbers is a **vector**
        $x = (x_1, \\ldots, x_d)$ (the numbers are its **coordinates**): an arrow from the
        origin to a point of the $d$-dimensional space $\\mathbb{R}^d$. An arrow has a length
        and a direction. Its **length** is $\\|x\\| = \\sqrt{x_1^2 + \\cdots + x_d^2}$
        (Pythagoras' theorem in $d$ dimensions; the length is also called the norm); its
        direction is $u = x / \\|x\\|$, the same arrow scaled to length 1: a **unit vector**.
        Below, $N = 5$ tokens of $d = 8$ numbers each (random numbers stand in for learned
        embeddings).
        """, """
        ## 1. 词元是一个向量

        在第 00 部分，一句话变成了矩阵 $X$，每个词元占一行：第 $i$ 行是第 $i$ 个词元的 $d$ 个数。
        一组 $d$ 个数就是一个**向量** $x = (x_1, \\ldots, x_d)$（这些数叫作它的**坐标**）：
        从原点指向 $d$ 维空间 $\\mathbb{R}^d$ 中一点的箭头。箭头有**长度**
        $\\|x\\| = \\sqrt{x_1^2 + \\cdots + x_d^2}$（$d$ 维空间里的勾股定理；长度也叫范数），
        也有**方向** $u = x / \\|x\\|$：把同一个箭头缩放到长度为 1，得到的就是**单位向量**。
        下面是 $N = 5$ 个词元，每个词元有 $d = 8$ 个数（用随机数代替学出来的嵌入）。
        """),
    Code("""
        X = torch.randn(5, 8)  # N = 5 tokens, d = 8: one row per token, as in part 00
        x = X[0]  # token 0, a vector of d = 8 numbers
        print(T("token 0:", "第 0 个词元："), [round(v, 2) for v in x.tolist()])
        print(T("its length ‖x‖, by the formula and with torch:",
                "它的长度 ‖x‖，按公式与用 torch 各算一次："),
              round(float((x ** 2).sum().sqrt()), 4), round(float(x.norm()), 4))
        u = x / x.norm()  # its direction: a unit vector
        print(T("the direction u = x / ‖x‖ has length", "方向 u = x / ‖x‖ 的长度为"),
              round(float(u.norm()), 4))
        print(T("3x has the same direction:", "3x 的方向与 x 相同："),
              torch.allclose(3 * x / (3 * x).norm(), u),
              T("  its length over x's:", "  它与 x 的长度之比："),
              round(float((3 * x).norm() / x.norm()), 4))
        """),
    # -- 2. the dot product and the angle ----------------------------------------------
    Text("""
        ## 2. The dot product and the angle

        The **dot product** of two vectors with the same number $d$ of coordinates
        multiplies them coordinate by coordinate and adds the products:
        $a \\cdot b = a_1 b_1 + \\cdots + a_d b_d$. Geometry gives the same number another
        way, from the two lengths and the **angle** $\\theta$ between the arrows:
        $a \\cdot b = \\|a\\|\\,\\|b\\| \\cos\\theta$. In the plane ($d = 2$) the angle can be
        read off the drawing (each arrow's direction is measured from the horizontal axis),
        so both sides can be computed:
        """, """
        ## 2. 点积与夹角

        两个同为 $d$ 维的向量的**点积**，是把它们逐个坐标相乘，再把乘积相加：
        $a \\cdot b = a_1 b_1 + \\cdots + a_d b_d$。几何上，同一个数还有另一种算法，用两个向量的
        长度和两个箭头之间的**夹角** $\\theta$：$a \\cdot b = \\|a\\|\\,\\|b\\| \\cos\\theta$。
        在平面上（$d = 2$），夹角可以从图上读出（每个箭头的方向都从横轴量起），于是两边都能算出来：
        """),
    Code("""
        a, b = torch.tensor([3.0, 1.0]), torch.tensor([1.0, 2.0])
        by_coordinates = float(a[0] * b[0] + a[1] * b[1])  # a1 b1 + a2 b2
        # each arrow's direction, measured from the horizontal axis (in radians)
        angle_a, angle_b = math.atan2(a[1], a[0]), math.atan2(b[1], b[0])
        theta = angle_b - angle_a  # the angle between a and b
        by_geometry = float(a.norm() * b.norm()) * math.cos(theta)  # ‖a‖ ‖b‖ cos θ
        print(T("a·b by coordinates:", "按坐标算 a·b："), by_coordinates)
        print(T(f"‖a‖ ‖b‖ cos θ, with θ = {math.degrees(theta):.1f}°:",
                f"‖a‖ ‖b‖ cos θ，其中 θ = {math.degrees(theta):.1f}°："), round(by_geometry, 4))
        print(T("torch computes it as a @ b:", "torch 用 a @ b 来算："), float(a @ b))
        """),
    Code("""
        fig, ax = plt.subplots(figsize=(4, 3))
        for v, name, color in [(a, "a", "C0"), (b, "b", "C1")]:
            ax.annotate("", xy=v.tolist(), xytext=(0, 0),
                        arrowprops=dict(arrowstyle="-|>", color=color, lw=2))
            ax.text(float(v[0]) + 0.08, float(v[1]) + 0.08, name, color=color, fontsize=12)
        arc = torch.linspace(angle_a, angle_b, 30)  # the angle, as an arc of radius 0.8
        ax.plot(0.8 * arc.cos(), 0.8 * arc.sin(), color="gray")
        mid = (angle_a + angle_b) / 2
        ax.text(math.cos(mid), math.sin(mid), f"θ = {math.degrees(theta):.0f}°")
        ax.set_xlim(-0.5, 3.6)
        ax.set_ylim(-0.5, 2.4)
        ax.set_aspect("equal")
        ax.set_title(T("two vectors and the angle between them", "两个向量及其夹角"))
        plt.show()
        """),
    Text("""
        **Predict, then check.** Before you run the next cell, answer from
        $\\|a\\|\\,\\|b\\| \\cos\\theta$ alone: $c = (-1, 3)$ is $a$ turned by 90°; what is
        $a \\cdot c$? And $a \\cdot (-a)$, where $-a$ is the arrow that points the opposite way
        ($\\|a\\|^2 = 10$)? The cell computes them coordinate by coordinate.
        """, """
        **先预测，再核对。** 运行下一个单元格之前，只用 $\\|a\\|\\,\\|b\\| \\cos\\theta$ 来回答：
        $c = (-1, 3)$ 是把 $a$ 转过 90° 得到的，$a \\cdot c$ 等于多少？$a \\cdot (-a)$ 呢？
        （$-a$ 是指向相反方向的箭头，$\\|a\\|^2 = 10$。）单元格会逐个坐标把它们算出来。
        """),
    Code("""
        c = torch.tensor([-1.0, 3.0])  # a turned by 90°
        for name, v in [("a·b", b), ("a·c", c), ("a·(−a)", -a)]:
            cos = a @ v / (a.norm() * v.norm())
            angle = float(torch.rad2deg(torch.acos(cos.clamp(-1, 1))))
            print(f"{name} = {float(a @ v):g}",
                  T(f"  angle {angle:.0f}°, cos θ = {float(cos):+.2f}",
                    f"  夹角 {angle:.0f}°，cos θ = {float(cos):+.2f}"))
        """),
    Text("""
        The sign of the dot product says on which side of 90° the angle lies: positive below
        90°, negative beyond, and 0 exactly when the two vectors are **perpendicular** (also
        called **orthogonal**). In $d = 8$ dimensions there is no drawing to read an angle
        off, so the formula is read the other way round and *defines* it:
        $\\cos\\theta = \\dfrac{a \\cdot b}{\\|a\\|\\,\\|b\\|}$, the dot product of the two
        directions. Part 00 compared a query with every key by such a dot product; part 02
        returns to it. Token 0 against the other tokens of $X$:
        """, """
        点积的符号说明夹角在 90° 的哪一侧：小于 90° 时为正，大于 90° 时为负，恰好为 0 时两个
        向量**垂直**（也称**正交**）。在 $d = 8$ 维中没有图可以量夹角，于是把公式反过来读，用它
        来*定义*夹角：$\\cos\\theta = \\dfrac{a \\cdot b}{\\|a\\|\\,\\|b\\|}$，也就是两个方向的
        点积。第 00 部分正是用这样的点积把查询与每个键作比较；第 02 部分还会回到它。下面把第 0 个
        词元与 $X$ 中其余的词元逐一比较：
        """),
    Code("""
        for j in range(1, 5):
            dot = float((X[0] * X[j]).sum())  # the sum of the 8 products
            cos = dot / float(X[0].norm() * X[j].norm())
            deg = math.degrees(math.acos(cos))
            print(T(f"tokens 0 and {j}: dot product {dot:+.2f}, cos θ = {cos:+.2f}, "
                    f"θ = {deg:.0f}°",
                    f"第 0 与第 {j} 个词元：点积 {dot:+.2f}，cos θ = {cos:+.2f}，θ = {deg:.0f}°"))
        """),
    # -- 3. projecting onto one direction ----------------------------------------------
    Text("""
        ## 3. Projecting onto one direction

        Let $w$ be a unit vector, $\\|w\\| = 1$. Then $w \\cdot x = \\|x\\| \\cos\\theta$ is the
        length of the **shadow** of $x$ on the line through $w$, the shadow cast by a light
        that falls perpendicular to that line (negative when it falls behind the origin). The
        shadow itself is the vector $(w \\cdot x)\\,w$, the **projection** of $x$ onto $w$;
        what is left, $x - (w \\cdot x)\\,w$, is perpendicular to $w$. Of the $d$ numbers of
        $x$, the projection keeps one: $w \\cdot x$. Both ways again, with $a$ from step 2:
        """, """
        ## 3. 向一个方向投影

        设 $w$ 是单位向量，$\\|w\\| = 1$。那么 $w \\cdot x = \\|x\\| \\cos\\theta$ 就是 $x$ 在过
        $w$ 的直线上的**影子**的长度：光线垂直于这条直线照下来时投出的影子（影子落在原点另一侧时
        为负）。影子本身是向量 $(w \\cdot x)\\,w$，称为 $x$ 在 $w$ 上的**投影**；剩下的部分
        $x - (w \\cdot x)\\,w$ 与 $w$ 垂直。$x$ 的 $d$ 个数里，投影只保留一个：$w \\cdot x$。
        仍用第 2 步的 $a$，两种算法各算一次：
        """),
    Code("""
        w = torch.tensor([0.8, 0.6])  # a unit vector: 0.8² + 0.6² = 1
        theta_wa = angle_a - math.atan2(w[1], w[0])  # the angle between w and a, as in step 2
        print(T("w·a =", "w·a ="), round(float(w @ a), 4),
              T("  ‖a‖ cos θ =", "  ‖a‖ cos θ ="), round(float(a.norm()) * math.cos(theta_wa), 4))
        shadow = (w @ a) * w  # the projection of a onto w
        rest = a - shadow
        print(T("the shadow:", "影子："), [round(v, 4) for v in shadow.tolist()],
              T("  the rest:", "  剩下的部分："), [round(v, 4) for v in rest.tolist()])
        print(T("the rest is perpendicular to w: rest·w =", "剩下的部分与 w 垂直：rest·w ="),
              round(abs(float(rest @ w)), 6))
        """),
    Text("""
        The same picture for many points, in two dimensions: the projection onto $w$ keeps
        only each point's coordinate along $w$, one number instead of two; points on a line
        perpendicular to $w$ cast the same shadow and become indistinguishable. As a matrix,
        this projection is $W = w^T$, a $1 \\times 2$ matrix: $Wx = w \\cdot x$.
        """, """
        许多点的同一幅图，仍在二维中：向 $w$ 的投影只保留每个点沿 $w$ 的坐标，两个数只剩一个；
        落在与 $w$ 垂直的同一条直线上的点投下同一个影子，变得无法区分。写成矩阵，这个投影就是
        $W = w^T$，一个 $1 \\times 2$ 的矩阵：$Wx = w \\cdot x$。
        """),
    Code("""
        pts = torch.randn(12, 2)  # w from the cell above: W is the 1 x 2 matrix w^T
        proj = (pts @ w)[:, None] * w  # each point's shadow on the line through w
        fig, ax = plt.subplots(figsize=(4, 4))
        ax.axline((0, 0), (float(w[0]), float(w[1])), color="gray", lw=1)
        for p, s in zip(pts, proj):
            ax.plot([p[0], s[0]], [p[1], s[1]], color="lightgray", lw=1)
        ax.scatter(pts[:, 0], pts[:, 1], label=T("tokens x", "词元 x"))
        ax.scatter(proj[:, 0], proj[:, 1], marker="x",
                   label=T("what the projection keeps", "投影保留的部分"))
        ax.set_aspect("equal")
        ax.set_title(T("projection onto the line through w", "向过 w 的直线投影"))
        ax.legend(loc="lower right")
        plt.show()
        """),
    # -- 4. projecting onto a subspace: a matrix ---------------------------------------
    Text("""
        ## 4. Projecting onto a subspace: a matrix

        Stack several directions $w_1, \\ldots, w_k$ of $\\mathbb{R}^d$ as the rows of a
        $k \\times d$ matrix $W$. Then $Wx$ is the column of the $k$ dot products
        $w_1 \\cdot x, \\ldots, w_k \\cdot x$: $W$ turns the $d$ numbers of $x$ into $k$
        numbers. Two sets of vectors say what it keeps and what it throws away.

        - The **row space** of $W$: all the combinations $c_1 w_1 + \\cdots + c_k w_k$ of its
          rows, the subspace that the rows **span**. A **subspace** is such a set, flat and
          through the origin: a line, a plane, or the same in more dimensions. Its **dimension**
          is the largest number of independent directions it holds (none of them a
          combination of the others); the dimension of the row space is the **rank** of $W$,
          at most $k$.
        - The **null space** of $W$: every $x$ with $Wx = 0$, that is every vector
          perpendicular to all the rows. Its dimension is $d$ minus the rank.

        Every $x$ splits into its shadow on the row space, which is what $W$ sees, and the
        rest, which lies in the null space: $W$ gives the same result for $x$ and for its
        shadow alone. `torch.linalg.pinv` (the pseudo-inverse) builds this projection as a
        $d \\times d$ matrix $P$: $Px$ is the shadow of $x$. Below, three random directions of
        $\\mathbb{R}^8$, and token 0:
        """, """
        ## 4. 向子空间投影：一个矩阵

        把 $\\mathbb{R}^d$ 中的几个方向 $w_1, \\ldots, w_k$ 作为行，排成一个 $k \\times d$ 的矩阵
        $W$。于是 $Wx$ 是 $k$ 个点积 $w_1 \\cdot x, \\ldots, w_k \\cdot x$ 排成的一列：$W$ 把
        $x$ 的 $d$ 个数变成 $k$ 个数。它保留了什么、丢掉了什么，由两组向量来回答。

        - $W$ 的**行空间**：各行的所有线性组合 $c_1 w_1 + \\cdots + c_k w_k$，即各行所**张成**的
          子空间。这样一个过原点的“平直”的集合叫作**子空间**：一条直线、一个平面，或更高维中的
          同类集合。它的**维数**是其中线性无关的方向（没有一个是其余几个的组合）的最大个数；
          行空间的维数就是 $W$ 的**秩**，至多为 $k$。
        - $W$ 的**零空间**：所有满足 $Wx = 0$ 的 $x$，也就是与每一行都垂直的向量。它的维数等于
          $d$ 减去秩。

        每个 $x$ 都可以拆成它在行空间上的影子（$W$ 看得见的部分）与其余部分，其余部分落在零空间里：
        $x$ 与它的影子经过 $W$ 得到完全相同的结果。`torch.linalg.pinv`（伪逆）把这个投影构造成
        一个 $d \\times d$ 的矩阵 $P$：$Px$ 就是 $x$ 的影子。下面是 $\\mathbb{R}^8$ 中的三个随机
        方向，以及第 0 个词元：
        """),
    Code("""
        W = torch.randn(3, 8)  # three directions of R^8, as the rows of a 3 x 8 matrix
        P = torch.linalg.pinv(W) @ W  # the orthogonal projection onto W's row space
        x_seen, x_unseen = P @ x, x - P @ x  # x is token 0 (step 1)
        rank = int(torch.linalg.matrix_rank(W))
        print(T("rank of W:", "W 的秩："), rank,
              T("  dimension of its null space: 8 - rank =", "  其零空间的维数：8 - 秩 ="),
              8 - rank)
        print(T("‖W x_unseen‖ =", "‖W x_unseen‖ ="), float((W @ x_unseen).norm()))
        print(T("x_unseen is perpendicular to x_seen:", "x_unseen 与 x_seen 垂直："),
              abs(float(x_seen @ x_unseen)) < 1e-5)
        print(T("same result:", "结果相同："), torch.allclose(W @ x, W @ x_seen, atol=1e-6))
        """),
    # -- 5. a head's W^Q, W^K, W^V -------------------------------------------------------
    Text("""
        ## 5. A head's $W^Q$, $W^K$, $W^V$

        Now the article's step. attnlab's `SelfAttention` (the article's own
        `PureSelfAttention`) holds the three matrices as `nn.Linear` layers `W_q`, `W_k`,
        `W_v`. `nn.Linear` stores $W^Q$ transposed, shaped `(out, in)`: its rows are
        directions of $\\mathbb{R}^8$, as in step 4, and the queries $Q = XW^Q$ are the dot
        products of every token with every row.
        """, """
        ## 5. 一个头的 $W^Q$、$W^K$、$W^V$

        现在回到文章的那一步。attnlab 的 `SelfAttention`（就是文章里的 `PureSelfAttention`）用
        三个 `nn.Linear` 层 `W_q`、`W_k`、`W_v` 存放这三个矩阵。`nn.Linear` 存的是 $W^Q$ 的转置，
        形状为 `(out, in)`：它的各行是 $\\mathbb{R}^8$ 中的方向，和第 4 步一样；查询 $Q = XW^Q$
        就是每个词元与每一行的点积。
        """),
    Code("""
        attn = attnlab.SelfAttention(embed_dim=8, num_heads=2)
        W_q = attn.W_q.weight.detach()  # nn.Linear stores W^Q transposed: (out, in) = (8, 8)
        Q = X @ W_q.T
        print(tuple(Q.shape), torch.allclose(Q, attn.W_q(X)))
        """),
    Text("""
        With two heads, $d_k = d / h = 4$: head $h$ uses rows $4h \\ldots 4h+3$ of `W_q.weight`
        (columns of $W^Q$). Each head therefore sees $X$ through a $4 \\times 8$ matrix: a
        projection onto a subspace of $\\mathbb{R}^8$, as in step 4 (step 3's figure was the
        case $d = 2$, $d_k = 1$). Every attnlab module passes its queries through a
        `HookPoint` named `hook_q`; a forward hook on it (a function that PyTorch calls with
        the module's output each time the module runs) reads them, shaped (B, H, N, d_k):
        batch, heads, tokens, numbers per head.
        """, """
        有两个头时 $d_k = d / h = 4$：第 $h$ 个头使用 `W_q.weight` 的第 $4h \\ldots 4h+3$ 行
        （即 $W^Q$ 的列）。所以每个头都是透过一个 $4 \\times 8$ 的矩阵来看 $X$：这是向
        $\\mathbb{R}^8$ 的一个子空间的投影，和第 4 步一样（第 3 步的图就是 $d = 2$、$d_k = 1$
        的情形）。attnlab 的每个模块都让查询经过一个名为 `hook_q` 的 `HookPoint`；在它上面挂一个
        前向钩子（模块每次运行时，PyTorch 都用模块的输出调用的一个函数）就能读到它们，形状为
        (B, H, N, d_k)：批次、头、词元、每个头的数。
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
    Text("""
        **Three different subspaces — how different?** The article says the projections let
        a word play different roles 「在三个不同的几何空间中」. The row spaces of head 0's
        $W^Q$, $W^K$, $W^V$ are three 4-dimensional subspaces of $\\mathbb{R}^8$; their *principal
        angles* say how far apart they are. The first is the smallest angle (step 2) between
        a direction of one subspace and a direction of the other; the next is the smallest
        between directions perpendicular to the ones already used, each in
        its own subspace; and so on: four angles for two 4-dimensional subspaces, 0° for a
        shared direction, 90° for orthogonal ones. Part 04 builds them; the cell uses two
        tools explained there: `torch.linalg.qr` finds, for each row space, four unit vectors
        perpendicular to one another that span it, and `torch.linalg.svdvals` turns the table
        of dot products between the two sets into the cosines of the angles. It prints them
        at random initialisation, with the smallest and the largest.
        """, """
        **三个不同的子空间——差别有多大？** 文章说投影让词「在三个不同的几何空间中」扮演不同角色。
        第 0 个头的 $W^Q$、$W^K$、$W^V$ 的行空间是 $\\mathbb{R}^8$ 中的三个 4 维子空间，它们之间
        的*主夹角*说明它们相距多远。第一个主夹角是一个子空间中的方向与另一个子空间中的方向之间最小的
        夹角（第 2 步的夹角）；下一个是在各自的子空间里，与已经用过的方向垂直的方向之间最小的夹角；
        依此类推：两个 4 维子空间有四个主夹角，共有的方向为 0°，正交的方向为 90°。第 04 部分会构造
        它们；下面的单元格用到那里讲解的两个工具：`torch.linalg.qr` 为每个行空间找出四个彼此垂直、
        张成该行空间的单位向量，`torch.linalg.svdvals` 再把两组单位向量之间的点积表变成各个主夹角的
        余弦。单元格打印随机初始化时的主夹角，以及其中最小和最大的一个。
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
        **Exercise 2.** Find a vector `ex2_x` (8 numbers, not all zero) that head 0's queries
        cannot see: `W_q0 @ ex2_x` = 0. Hint: `torch.linalg.svd`.
        """, """
        **练习 2.** 找一个第 0 个头的查询看不见的向量 `ex2_x`（8 个数，不全为零）：
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
