"""Part 7 of the course, Masks: its cells in English and in Chinese (see build.py)."""

from cells import Code, Exercise, Part, Predict, Text, by_hand, measured  # noqa: F401

# ======================================================================================
# 07 masks
# ======================================================================================

PART = Part(7, "masks", "Masks", "掩码", (
    Text("""
        Article 000 leaves masks out (「剥离一切无关的模块（如 Mask 机制、Dropout）」); article 001
        adds one line, 「掩码处理（解码器需要）」. A mask decides which keys a query may see.
        attnlab has one convention everywhere: a bool mask is **True where a query may
        attend**, a float mask is added to the scores, and `key_mask` (B, Lk) is True for
        real tokens. All masks come from `attnlab.masks`.
        """, """
        文章 000 把掩码剥离掉了（「剥离一切无关的模块（如 Mask 机制、Dropout）」）；文章 001 加了一
        行
        「掩码处理（解码器需要）」。掩码决定一个查询可以看到哪些键。attnlab 处处只用一种约定：
        bool 掩码在**允许关注的位置为 True**，float 掩码加到分数上，`key_mask`（B, Lk）对真实的
        词元为 True。所有掩码都来自 `attnlab.masks`。
        """),
    Code("""
        from attnlab import masks

        n = 6
        shown = {
            T("causal", "因果"): masks.causal(n),
            T("causal, window 3", "因果，窗口 3"): masks.causal(n, window=3),
            T("padding (4 real)", "填充（4 个真实词元）"): masks.key_mask_to_attn_mask(
                masks.padding([4], n))[0, 0].expand(n, n),
            T("causal and padding", "因果与填充"): masks.combine(
                masks.causal(n), masks.padding([4], n)[0]),
        }
        fig, axes = plt.subplots(1, 4, figsize=(10, 3.2), layout="constrained")
        for ax, (title, m) in zip(axes, shown.items()):
            ax.imshow(m, cmap="Greys", vmin=0, vmax=1)
            ax.set_title(title, fontsize=9)
            ax.set_xlabel(T("key", "键"))
        axes[0].set_ylabel(T("query", "查询"))
        fig.suptitle(T("black: the query may attend the key", "黑色：该查询可以关注该键"))
        plt.show()
        """),
    Text("""
        **Article 001's mask line, as printed**, does not run: the comment swallows the `if`,
        and the indented line under it is then an error. attnlab keeps the listing as
        published and compiles it:
        """, """
        **文章 001 原样印出的掩码那一行**无法运行：注释吞掉了 `if`，于是下面缩进的那一行就成了错误。
        attnlab 保留了原样发表的代码清单，这里编译它：
        """),
    Code("""
        from importlib.resources import files

        listing = (files("attnlab.experiments") / "listings" / "001_multi_head_attention.py.txt")
        source = listing.read_text(encoding="utf-8")
        try:
            compile(source, "001_multi_head_attention.py", "exec")
        except SyntaxError as e:
            print(T(f"{type(e).__name__} at line {e.lineno}:",
                    f"{type(e).__name__}，位于第 {e.lineno} 行："), e.text.strip())
        print([line for line in source.splitlines() if "if mask" in line])
        """),
    Predict("predict", """
        **Predict, then check.** The mask is usually applied by filling the masked scores
        with $-\\infty$ before the softmax. Fill them with $-10^4$ instead (a common finite
        choice): what weight does a masked key then get? Write a number in `predict_masked`;
        the check measures the largest weight on a masked key (within $10^{-6}$ passes).
        """, """
        **先预测，再核对。** 掩码通常是这样施加的：在 softmax 之前把被遮蔽的分数填成 $-\\infty$。
        如果改填 $-10^4$（一个常见的有限值），被遮蔽的键会得到多大的权重？把一个数写进
        `predict_masked`；检查单元格会测出被遮蔽的键上最大的权重（相差不超过 $10^{-6}$ 即通过）。
        """,
        blank="predict_masked = ...  # your prediction: the weight of a key masked with -1e4",
        answer="predict_masked = 0.0  # exp(-1e4 - max) underflows: exactly 0, as with -inf",
        check="""
            g_m = torch.Generator().manual_seed(11)
            s_m = torch.randn(6, 6, generator=g_m)
            blocked = ~masks.causal(6)
            w_m = torch.softmax(s_m.masked_fill(blocked, -1e4), dim=-1)
            predicted(predict_masked, float(w_m[blocked].max()), within=1e-6, why_en=(
                "e^(-10000) underflows to exactly 0 (in float32 and in float64): a masked key "
                "gets weight 0, as with -inf. The weight is 0, never -inf: -inf is the score "
                "before the softmax."), why_zh=(
                "e^(-10000) 下溢为精确的 0（float32 与 float64 都如此）：被遮蔽的键得到权重 0，"
                "与填负无穷时一样。权重是 0，而不是负无穷：负无穷是 softmax 之前的分数。"))
            """,
        wrong="predict_masked = -1e4  # the fill itself: but that is the score, not the weight"),
    Text("""
        **A fully masked row.** The usual `masked_fill(-inf)` then softmax gives NaN for a row
        whose every key is masked (0 / 0), and the NaN spreads. attnlab gives that row weight
        0 and output 0, with log-sum-exp $-\\infty$.
        """, """
        **整行都被遮蔽**。常见的 `masked_fill(-inf)` 再 softmax，对所有键都被遮蔽的一行会得到
        NaN（0 / 0），而且 NaN 会扩散。attnlab 对这样的一行给出权重 0、输出 0，log-sum-exp 为
         $-\\infty$。
        """),
    Code("""
        q = torch.randn(1, 1, 3, 4)
        k = torch.randn(1, 1, 3, 4)
        v = torch.randn(1, 1, 3, 4)
        m = torch.tensor([[True, True, False], [False, False, False], [True, True, True]])
        naive = torch.softmax((q @ k.transpose(-2, -1)).masked_fill(~m, float("-inf")), dim=-1)
        out, w = attnlab.scaled_dot_product_attention(q, k, v, m, return_weights=True)
        print(T("naive row 1:", "朴素写法的第 1 行："), naive[0, 0, 1].tolist())
        print(T("attnlab row 1:", "attnlab 的第 1 行："), w[0, 0, 1].tolist(),
              out[0, 0, 1].tolist())
        print(T("article 001's check, masked weights are 0:",
                "文章 001 的检查，被遮蔽的权重为 0："),
              bool(w.masked_fill(~m, 0).sum() == w.sum()))
        """),
    Text("""
        **Article 001's check cannot see $-\\infty$.** Its tip says to check that the masked
        positions 「是否真的是负无穷」 (really are $-\\infty$), with
        `attn.masked_fill(mask == 0, 0).sum() == attn.sum()`. That reads the weights after
        the softmax, where a masked key has weight 0, and only tests that zeroing them
        changes nothing. Fill the masked scores with $-\\infty$, $-10^9$ or $-10^4$: the
        weights are the same zeros, and the check passes all three times. It cannot tell
        $-\\infty$ from a finite fill; what does tell is the score itself.
        """, """
        **文章 001 的检查看不见负无穷。** 它的技巧说要检查掩码位置「是否真的是负无穷」，用的是
        `attn.masked_fill(mask == 0, 0).sum() == attn.sum()`。这读的是 softmax 之后的权重，
        被遮蔽的键权重为 0，它检验的只是把这些权重置零不改变总和。把被遮蔽的分数分别填成
        $-\\infty$、$-10^9$ 或 $-10^4$：得到的权重都是同样的零，检查三次都通过。它无法区分负无穷与
        有限的填充值；能区分的是分数本身。
        """),
    Code("""
        scores_m = q @ k.transpose(-2, -1) / math.sqrt(4)
        causal_m = masks.causal(3)
        passed = []
        for fill in (float("-inf"), -1e9, -1e4):
            attn_w = torch.softmax(scores_m.masked_fill(~causal_m, fill), dim=-1)
            mask = causal_m.int()  # the article's mask: 1 where allowed, 0 where masked
            passes = bool(attn_w.masked_fill(mask == 0, 0).sum() == attn_w.sum())
            passed.append(passes)
            print(T(f"fill {fill:g}: the printed check passes: {passes}; the masked weights: "
                    f"{attn_w[..., ~causal_m].unique().tolist()}; a masked score is -inf: "
                    f"{bool(scores_m.masked_fill(~causal_m, fill)[..., ~causal_m].isinf().all())}",
                    f"填充 {fill:g}：印出的检查通过：{passes}；被遮蔽的权重："
                    f"{attn_w[..., ~causal_m].unique().tolist()}；被遮蔽的分数是负无穷："
                    f"{bool(scores_m.masked_fill(~causal_m, fill)[..., ~causal_m].isinf().all())}"))
        print(T(f"the check passes for {sum(passed)} of 3 fills: it cannot see -inf"
                if all(passed) else "unexpected: the check told the fills apart",
                f"3 种填充中检查通过 {sum(passed)} 种：它看不见负无穷"
                if all(passed) else "出乎预期：检查区分出了不同的填充"))
        """),
    Text("""
        **Causality is a statement about gradients**: with a causal mask, output $t$ does not
        depend on any input $s > t$. The experiment `masking` measures
        $\\sum |\\partial \\mathrm{out}_t / \\partial x_s|$ over $s > t$, which causality makes
        exactly 0, and the same sum for its control:
        """, """
        **因果性是关于梯度的命题**：加了因果掩码，第 $t$ 个输出不依赖任何 $s > t$ 的输入。实验
        `masking` 测量所有 $s > t$ 上的 $\\sum |\\partial \\mathrm{out}_t / \\partial x_s|$（因果性
        要求它恰好为 0），以及它的对照上的同一个和：
        """),
    *measured("masking", """
        `measure` builds an attnlab attention layer in fp64, applies random masks (the
        boolean way, and the wrong ones: multiplied, added), takes the Jacobian of the outputs
        with the causal mask and with the control's off-by-one mask, and feeds a fully masked
        row. Its code and one run:
        """, """
        `measure` 在 fp64 下构造一个 attnlab 注意力层，施加随机掩码（布尔方式，以及错误的方式：
        相乘、相加），在因果掩码和对照的错一位掩码下求输出的雅可比矩阵，并输入一整行都被遮蔽的行。
        下面是它的代码和一次运行：
        """, """
        m = masking.measure()
        print(T("weight on masked keys:", "被遮蔽的键上的权重："), fmt_num(m.masked_weight),
              T("(mask multiplied in:", "（把掩码乘进去："), fmt_num(m.masked_weight_multiplied)
              + T(")", "）"))
        print(T("Σ|∂out_t/∂x_s| over s > t, causal:", "s > t 上的 Σ|∂out_t/∂x_s|，因果掩码："),
              fmt_num(m.leak), T("(off-by-one control:", "（错一位的对照："),
              fmt_num(m.leak_control) + T(")", "）"))
        """),
    Code("""
        r = run("masking")
        report(r)
        show(r)
        """),
    Exercise("ex1", """
        **Exercise 1.** A *prefix-LM* mask: the first `p` tokens (the prompt) see each other
        in both directions, every later token is causal. Build `ex1_mask` (n × n, bool) for
        `n = 6`, `p = 3`. The check compares it with which inputs each output really depends
        on, through the Jacobian of a `SelfAttention`.
        """, """
        **练习 1.** *前缀语言模型*掩码：前 `p` 个词元（提示）彼此双向可见，之后的每个词元都是
        因果的。为 `n = 6`、`p = 3` 构造 `ex1_mask`（n × n，bool）。检查单元格通过
        `SelfAttention` 的雅可比矩阵，把它与每个输出实际依赖哪些输入进行比较。
        """,
        blank="""
            n, p = 6, 3
            ex1_mask = ...  # (n, n) bool: the first p tokens see each other, the rest is causal
            """,
        answer="""
            n, p = 6, 3
            ex1_mask = masks.causal(n) | (torch.arange(n) < p)[None, :]
            """,
        check="""
            answered(ex1_mask=ex1_mask)
            sa = attnlab.SelfAttention(embed_dim=4, num_heads=1)
            xj = torch.randn(n, 4, dtype=torch.float64)
            sa = sa.double()
            i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
            truth = (j <= i) | ((i < p) & (j < p))  # the definition
            assert ex1_mask.dtype == torch.bool and torch.equal(ex1_mask, truth), T(
                "not the prefix-LM mask", "不是前缀语言模型掩码")
            J = torch.autograd.functional.jacobian(lambda x_: sa(x_[None], ex1_mask)[0][0], xj)
            depends = J.abs().amax(dim=(1, 3)) > 0  # out_t depends on x_s
            assert torch.equal(depends, truth), T("dependence differs", "依赖关系不同")
            print(T("right: each output depends exactly on what the mask allows",
                    "正确：每个输出恰好依赖掩码允许的输入"))
            """,
        wrong="""
            n, p = 6, 3
            ex1_mask = masks.causal(n)
            """),
    Exercise("ex2", """
        **Exercise 2.** Two sequences of lengths 3 and 5 are padded to 5. Build the
        `ex2_key_mask` (2 × 5) that `MultiHeadAttention(key_mask=...)` expects.
        """, """
        **练习 2.** 长度为 3 和 5 的两个序列被填充到 5。构造 `MultiHeadAttention(key_mask=...)`
        所需的 `ex2_key_mask`（2 × 5）。
        """,
        blank="""
            ex2_key_mask = ...  # (2, 5): the key mask MultiHeadAttention(key_mask=...) expects
            """,
        answer="ex2_key_mask = masks.padding([3, 5], 5)",
        check="""
            answered(ex2_key_mask=ex2_key_mask)
            mha = attnlab.MultiHeadAttention(embed_dim=8, num_heads=2)
            xb = torch.randn(2, 5, 8)
            outb, wb = mha(xb, key_mask=ex2_key_mask, need_weights=True)
            assert float(wb[0, :, :, 3:].detach().abs().max()) == 0, T(
                "padded keys must get weight 0", "填充的键权重必须为 0")
            alone, _ = mha(xb[:1, :3])  # the short sequence without padding
            assert torch.allclose(outb[0, :3], alone[0], atol=1e-6), T(
                "padding changed the real tokens' outputs", "填充改变了真实词元的输出")
            print(T("right", "正确"))
            """,
        wrong="ex2_key_mask = ~masks.padding([3, 5], 5)  # torch's key_padding_mask convention"),
    Exercise("ex3", """
        **Exercise 3.** With `masks.causal(n, window=w)`, how many keys does each query see?
        Give `ex3_counts` (n,) for `n = 10`, `w = 4` by a formula, not from the mask.
        """, """
        **练习 3.** 用 `masks.causal(n, window=w)` 时，每个查询能看到多少个键？对 `n = 10`、
        `w = 4`，用公式（而不是从掩码）给出 `ex3_counts`（n,）。
        """,
        blank="""
            n, w = 10, 4
            ex3_counts = ...  # (n,): how many keys each query sees, by a formula
            """,
        answer="""
            n, w = 10, 4
            ex3_counts = torch.clamp(torch.arange(n) + 1, max=w)
            """,
        check="""
            answered(ex3_counts=ex3_counts)
            assert torch.equal(ex3_counts, masks.causal(n, window=w).sum(-1)), T(
                "not the number of keys each query sees", "不是每个查询看到的键数")
            print(T("right", "正确"))
            """,
        wrong="""
            n, w = 10, 4
            ex3_counts = torch.full((n,), w)
            """),
))
