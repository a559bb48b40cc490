"""Part 0 of the course, Attention from scratch: a first part for a beginner, who knows
Python and a little PyTorch (its cells in English and in Chinese; see build.py)."""

from cells import Code, Exercise, Part, Predict, Text, by_hand, measured  # noqa: F401

# ======================================================================================
# 00 attention from scratch
# ======================================================================================

PART = Part(0, "attention_from_scratch", "Attention from scratch", "从零开始写注意力", (
    Text("""
        This part assumes only Python and a little PyTorch. It builds attention in three
        steps: a sentence becomes **tokens** and then vectors; **queries, keys and values**
        make a soft version of a dictionary lookup; and a few lines of plain PyTorch
        compute $\\mathrm{softmax}(QK^\\top / \\sqrt{d_k})\\,V$, which we then check against
        PyTorch's own attention and attnlab's. The later parts take this formula apart.
        """, """
        本部分只假定你会 Python、懂一点 PyTorch。我们分三步搭出注意力：先把一句话变成**词元**，
        再变成向量；然后用**查询、键和值**做一次“软”的字典查找；最后用几行普通的 PyTorch
        代码算出 $\\mathrm{softmax}(QK^\\top / \\sqrt{d_k})\\,V$，并与 PyTorch 自带的注意力和
        attnlab 的实现逐一核对。后面各部分会把这个公式一步步拆开。
        """),
    Text("""
        ## 1. Tokens and embeddings

        A model does not read letters. It cuts the text into **tokens** (here simply the
        words), gives each distinct token a number from a **vocabulary**, and looks each
        number up in an **embedding table**: a matrix with one row per vocabulary entry.
        `nn.Embedding` is that table; its rows start random and are learned in training.
        """, """
        ## 1. 词元与嵌入

        模型并不直接读字母或汉字。它先把文本切成一个个**词元**（这里就是一个个词），再用
        **词表**给每个不同的词元编一个号，最后拿这个编号去**嵌入表**里查一行：嵌入表是一个矩阵，
        词表里的每一项占一行。`nn.Embedding` 就是这张表；它的各行一开始是随机的，在训练中学出来。
        """),
    Code("""
        sentence = T("my cat sat on my mat", "我 的 猫 坐 在 我 的 垫子 上")
        tokens = sentence.split()  # a toy tokenizer: split at the spaces
        vocab = {tok: i for i, tok in enumerate(sorted(set(tokens)))}
        ids = torch.tensor([vocab[tok] for tok in tokens])
        print(T("tokens:", "词元："), tokens)
        print(T("vocabulary:", "词表："), vocab)
        print(T("token ids:", "词元编号："), ids.tolist())
        """),
    Code("""
        torch.manual_seed(0)
        d = 8  # every token becomes a vector of d = 8 numbers
        embedding = torch.nn.Embedding(len(vocab), d)
        X = embedding(ids).detach()  # (n, d): one row per token of the sentence
        n = len(tokens)
        print(T("embedding table:", "嵌入表："), tuple(embedding.weight.shape),
              T("  X:", "  X："), tuple(X.shape))
        first, again = [i for i, tok in enumerate(tokens) if tok == tokens[0]][:2]
        print(T(f"tokens {first} and {again} are the same, and so are their rows:",
                f"第 {first} 个和第 {again} 个词元相同，它们的行也相同："),
              torch.equal(X[first], X[again]))
        """),
    Text("""
        ## 2. Queries, keys and values: a soft database lookup

        Article 000 says the names $Q$, $K$, $V$ 「借鉴了数据库检索的概念」 (borrow the idea of
        a database lookup). A Python dictionary is such a lookup: given a query, it returns
        the value of the **one** key equal to it.
        """, """
        ## 2. 查询、键和值：一次“软”的数据库查找

        文章 000 说，$Q$、$K$、$V$ 这三个名字「借鉴了数据库检索的概念」。Python 的字典就是这样
        一种查找：给它一个查询，它返回与查询**相等的那一个**键所对应的值。
        """),
    Code("""
        table = {"k0": 10.0, "k1": 20.0, "k2": 30.0, "k3": 40.0, "k4": 50.0}
        print(table["k2"])  # the hard lookup: exactly one key matches, its value comes back
        """),
    Text("""
        Attention keeps the idea but makes it soft. The keys and the query are vectors; the
        query is compared with **every** key by a dot product (a similarity score); softmax
        turns the scores into weights that are positive and add up to 1; the answer is the
        weighted mix of **all** the values. Below, five unit keys in the plane, the query
        equal to key 2, and a *scale* that multiplies the scores.
        """, """
        注意力保留了这个想法，但把它变“软”了。键和查询都是向量；查询与**每一个**键做点积
        （一个相似度分数）；softmax 把这些分数变成全为正、总和为 1 的权重；结果是**所有**值的
        加权混合。下面是平面上五个长度为 1 的键，查询等于第 2 个键，再用一个*缩放*系数去乘分数。
        """),
    Code("""
        angles = torch.deg2rad(torch.tensor([0.0, 20.0, 40.0, 60.0, 150.0]))
        keys = torch.stack([angles.cos(), angles.sin()], dim=1)  # (5, 2), each of length 1
        values = torch.tensor([10.0, 20.0, 30.0, 40.0, 50.0])  # the same values as the table
        query = keys[2]  # the query equals key 2
        print(T("scores q·k:", "分数 q·k："), [round(s, 3) for s in (keys @ query).tolist()])
        for scale in (1, 4, 16, 64):
            weights = torch.softmax(scale * (keys @ query), dim=0)
            print(T(f"scale {scale:>2}: weights", f"缩放 {scale:>2}：权重"),
                  [round(w, 3) for w in weights.tolist()],
                  T("-> output", "-> 输出"), round(float(weights @ values), 2))
        """),
    Text("""
        As the scale grows, the weight of the matching key goes to 1 and the others to 0:
        the weights become *one-hot* and the output becomes that key's value, 30, exactly
        what the dictionary returned. **The hard lookup is the limit of attention as the
        scale goes to infinity**; at a finite scale, keys close to the query (here keys 1
        and 3) also get a share.
        """, """
        缩放系数越大，匹配的那个键的权重就越接近 1，其余的越接近 0：权重变成*独热*的，输出变成
        那个键的值 30，正是字典返回的结果。**硬查找是缩放系数趋于无穷时注意力的极限**；
        在有限的缩放下，与查询接近的键（这里是第 1 和第 3 个键）也会分到一份。
        """),
    Code("""
        scales = torch.logspace(-1, 2.5, 80)
        matching = [float(torch.softmax(s * (keys @ query), dim=0)[2]) for s in scales]
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.semilogx(scales, matching, label=T("softmax weight of key 2",
                                              "第 2 个键的 softmax 权重"))
        ax.axhline(1.0, color="gray", ls="--", lw=1, label=T("hard lookup (dictionary)",
                                                             "硬查找（字典）"))
        ax.axhline(1 / len(keys), color="gray", ls=":", lw=1,
                   label=T("uniform, 1/5", "均匀，1/5"))
        shown = (1, 4, 16, 64)
        ax.scatter(shown, [float(torch.softmax(s * (keys @ query), dim=0)[2]) for s in shown],
                   color="C1", zorder=3)
        ax.set_xlabel(T("scale", "缩放系数"))
        ax.set_ylabel(T("weight", "权重"))
        ax.set_ylim(0, 1.05)
        ax.set_title(T("softmax tends to the hard lookup", "softmax 趋向硬查找"))
        ax.legend(loc="lower right", fontsize=8)
        plt.show()
        """),
    Predict("predict", """
        **Predict, then check.** Before you compute anything: make the query key 4 instead
        of key 2 (key 4 points at 150°, far from the four others). At scale 4, what weight
        does key 4 get? Write your guess as a number in `predict_weight`, then run the check:
        it computes the true weight and tells you how far your guess was (within 0.3 passes).
        """, """
        **先预测，再核对。** 先别计算：把查询换成第 4 个键，而不是第 2 个键（第 4 个键指向
        150°，离其余四个键都很远）。缩放系数为 4 时，第 4 个键得到多大的权重？把你的猜测写成一个数，
        赋给 `predict_weight`，再运行检查：它会算出真实的权重，并告诉你猜得差多少（相差不超过
        0.3 即通过）。
        """,
        blank="predict_weight = ...  # your prediction: a number between 0 and 1",
        answer="predict_weight = 0.97  # score 1 against about 0 or less for the others: e^4 ≈ 55",
        check="""
            true_weight = float(torch.softmax(4 * (keys @ keys[4]), dim=0)[4])
            predicted(predict_weight, true_weight, within=0.3, why_en=(
                "Key 4 scores 1 and every other key about 0 or less: a wide gap, so even scale "
                "4 gives it almost all the weight."), why_zh=(
                "第 4 个键的分数是 1，其余的键大约为 0 或更小：差距很大，所以缩放系数只有 4 时"
                "它也几乎拿到全部权重。"))
            """,
        wrong="predict_weight = 0.2  # uniform, as if a scale of 4 were too small to matter"),
    Text("""
        ## 3. Attention, written from scratch

        In a Transformer every token is at once a query, a key and a value: three matrices
        turn its embedding into $q$, $k$ and $v$. The scores are $QK^\\top$, divided by
        $\\sqrt{d_k}$ (the scale of attention, part 02 says why), then softmax row by row
        and a weighted mix of the rows of $V$. With a **causal mask**, token $i$ may only
        look at tokens $j \\le i$: the masked scores are set to $-\\infty$, so their weight
        is 0. The function below uses nothing but PyTorch.
        """, """
        ## 3. 从零写出注意力

        在 Transformer 里，每个词元同时是查询、键和值：三个矩阵把它的嵌入变成 $q$、$k$ 和 $v$。
        分数是 $QK^\\top$ 除以 $\\sqrt{d_k}$（这就是注意力的缩放，第 02 部分会解释原因），
        然后逐行做 softmax，再对 $V$ 的各行加权混合。加上**因果掩码**时，第 $i$ 个词元只能看
        第 $j \\le i$ 个词元：被遮蔽的分数设为 $-\\infty$，于是它们的权重为 0。下面的函数只用到
        PyTorch 本身。
        """),
    Code("""
        def attention(q, k, v, mask=None):
            \"\"\"softmax(q kᵀ / √d_k) v; mask: bool, True where a query may look at a key.\"\"\"
            d_k = q.shape[-1]
            scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (n_q, n_k)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))  # weight 0 after softmax
            weights = torch.softmax(scores, dim=-1)  # each row: positive, sums to 1
            return weights @ v  # each row: a weighted mix of the rows of v


        torch.manual_seed(0)
        d_k = 4
        W_q, W_k, W_v = (torch.randn(d, d_k) / math.sqrt(d) for _ in range(3))
        Q, K, V = X @ W_q, X @ W_k, X @ W_v  # (n, d_k) each
        causal = torch.ones(n, n, dtype=torch.bool).tril()  # True on and below the diagonal
        print(causal.int())
        """),
    Text("""
        The check: the same inputs through `torch.nn.functional.scaled_dot_product_attention`
        (PyTorch's attention) and through `attnlab.scaled_dot_product_attention` (which
        wants a heads axis: `Q[None]` is one head), with and without the causal mask. All
        three agree to within $10^{-6}$.
        """, """
        核对：把同样的输入送进 `torch.nn.functional.scaled_dot_product_attention`（PyTorch
        自带的注意力）和 `attnlab.scaled_dot_product_attention`（它需要一个“头”的维度：
        `Q[None]` 就是一个头），带因果掩码和不带各算一次。三者的差别都在 $10^{-6}$ 以内。
        """),
    Code("""
        F = torch.nn.functional
        ours, ours_causal = attention(Q, K, V), attention(Q, K, V, mask=causal)
        torch_out = F.scaled_dot_product_attention(Q, K, V)
        torch_causal = F.scaled_dot_product_attention(Q, K, V, is_causal=True)
        lab_out = attnlab.scaled_dot_product_attention(Q[None], K[None], V[None])[0]
        lab_causal = attnlab.scaled_dot_product_attention(Q[None], K[None], V[None],
                                                          causal=True)[0]
        for name, a, b in [("PyTorch", ours, torch_out),
                           (T("PyTorch, causal", "PyTorch，因果"), ours_causal, torch_causal),
                           ("attnlab", ours, lab_out),
                           (T("attnlab, causal", "attnlab，因果"), ours_causal, lab_causal)]:
            print(T(f"ours vs {name}: equal within 1e-6:",
                    f"我们的实现与 {name}：相差在 1e-6 以内："),
                  torch.allclose(a, b, atol=1e-6),
                  T("largest gap", "最大差值"), f"{float((a - b).abs().max()):.1e}")
        """),
    Text("""
        The causal mask changes every row but the last: the last token may look at every
        token anyway, so its output is the same with and without the mask. The first token
        may only look at itself, so its output is its own value.
        """, """
        因果掩码改变了除最后一行以外的每一行：最后一个词元本来就能看到所有词元，所以有没有
        掩码它的输出都一样。第一个词元只能看它自己，所以它的输出就是它自己的值。
        """),
    Code("""
        print(T("last row unchanged:", "最后一行不变："),
              torch.allclose(ours[-1], ours_causal[-1], atol=1e-6))
        print(T("first row is the first value:", "第一行就是第一个值："),
              torch.allclose(ours_causal[0], V[0], atol=1e-6))
        """),
    Exercise("ex1", """
        **Exercise 1.** Write `causal_mask(n)`: an $n \\times n$ boolean matrix that is True
        where token $i$ (the row) may look at token $j$ (the column), that is where
        $j \\le i$. Build it by comparing positions (`torch.arange`) rather than with
        `torch.tril`; the check compares it with `torch.tril` for several $n$ and then runs
        your `attention` with it.
        """, """
        **练习 1.** 写出 `causal_mask(n)`：一个 $n \\times n$ 的布尔矩阵，在第 $i$ 个词元（行）
        可以看第 $j$ 个词元（列）的位置为 True，也就是 $j \\le i$ 的位置。请通过比较位置
        （`torch.arange`）来构造它，而不是用 `torch.tril`；检查单元格会对几个不同的 $n$ 把它与
        `torch.tril` 比较，再用它运行你的 `attention`。
        """,
        blank="""
            def causal_mask(n):
                # (n, n) bool: True where j <= i (token i may look at token j)
                return ...
            """,
        answer="""
            def causal_mask(n):
                pos = torch.arange(n)
                return pos[:, None] >= pos[None, :]  # row i (query), column j (key): j <= i
            """,
        check="""
            answered(causal_mask=causal_mask(3))
            for m in range(1, 7):
                got = causal_mask(m)
                assert (isinstance(got, torch.Tensor) and got.dtype == torch.bool
                        and tuple(got.shape) == (m, m)), T(
                    f"causal_mask({m}) should be a bool tensor of shape ({m}, {m})",
                    f"causal_mask({m}) 应是形状为 ({m}, {m}) 的布尔张量")
                assert torch.equal(got, torch.tril(torch.ones(m, m, dtype=torch.bool))), T(
                    f"causal_mask({m}) is not the lower triangle: row i must be True "
                    f"for columns 0 … i only",
                    f"causal_mask({m}) 不是下三角：第 i 行只能在第 0 … i 列为 True")
            assert torch.allclose(attention(Q, K, V, mask=causal_mask(n)),
                                  F.scaled_dot_product_attention(Q, K, V, is_causal=True),
                                  atol=1e-6)
            print(T("right: your mask is causal, and attention with it matches PyTorch",
                    "正确：你的掩码是因果的，用它算出的注意力与 PyTorch 一致"))
            """,
        wrong="""
            def causal_mask(n):
                return torch.ones(n, n, dtype=torch.bool).triu()  # the upper triangle
            """),
))
