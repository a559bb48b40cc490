"""Part 11 of the course, Does a bright cell mean an important token? Its cells in English
and in Chinese (see build.py): value-weighted attention, rollout and the effect of hiding a
token, measured on SmolLM2."""

from cells import Code, Exercise, Part, Predict, Text, by_hand, measured  # noqa: F401

# ======================================================================================
# 11 does a bright cell mean an important token?
# ======================================================================================

PART = Part(11, "bright_cells", "Does a bright cell mean an important token?",
            "亮的格子就是重要的词元吗？", (
    Text("""
        Article 000 reads cell $(i, j)$ of the attention matrix as a measure:
        「精确地量化了序列中第 $i$ 个词对第 $j$ 个词的“关注程度”」, and article 001 says of the
        heatmap 「亮的区域就是模型聚焦的位置」. Every heatmap of this course draws the weights
        $\\alpha_{ij}$. But a weight is only half of what a head does: key $j$ adds
        $\\alpha_{ij} \\, v_j W_O^h$ to row $i$'s residual stream (the vector a token carries
        from layer to layer: each layer adds its output to it, and the next layer reads it),
        and a large weight can move a small vector. Does a bright cell mean an important
        token? Three answers from the literature, each computed here on SmolLM2:
        **value-weighted attention** (Kobayashi et al. 2020), **rollout** over the layers
        (Abnar & Zuidema 2020), and the test that decides: hide the token and measure what
        the model loses. The text is a short paragraph of ordinary prose, cut to its first
        64 tokens (small, so that the measurement at the end runs in seconds), traced with
        one row per token piece (`merge_pieces=False`).
        """, """
        文章 000 把注意力矩阵中的格子 $(i, j)$ 读作一种度量：
        「精确地量化了序列中第 $i$ 个词对第 $j$ 个词的“关注程度”」；文章 001 谈到热力图时说
        「亮的区域就是模型聚焦的位置」。本课程的每张热力图画的都是权重 $\\alpha_{ij}$。
        可是权重只是一个头所做之事的一半：键 $j$ 把 $\\alpha_{ij} \\, v_j W_O^h$ 加到第 $i$ 行的
        残差流（一个词元从一层带到下一层的向量：每一层把自己的输出加到它上面，下一层再读它）上，
        而很大的权重也可能只搬动一个很小的向量。亮的格子就是重要的词元吗？
        文献中有三种回答，这里都在 SmolLM2 上算出来：**值加权注意力**（Kobayashi 等，2020）、
        跨层的注意力展开（Abnar 与 Zuidema，2020），以及起决定作用的
        检验——把这个词元藏起来，测量模型损失了多少。所用的文本是一小段普通的英文叙述，截取前 64 个
        词元（取小是为了让最后的测量几秒钟就能跑完），追踪时每个词元片段占一行
        （`merge_pieces=False`）。
        """),
    Code("""
        from matplotlib.colors import PowerNorm

        from attnlab import models
        from attnlab.analysis import ablation
        from attnlab.analysis.alignment import spearman
        from attnlab.tracing import trace

        smollm2 = models.load("smollm2", progress=False)
        text = ("Maria packed her old violin into the car before sunrise. She drove north for "
                "three hours, past the lake and the quiet farms, to the small town where her "
                "grandmother had taught music for forty years. When she finally arrived, the "
                "school was closed, so she sat on the steps, opened the case and began to play "
                "the song her grandmother had taught her.")
        ids = smollm2.tokenizer(text)["input_ids"][:64]
        t = trace(smollm2, smollm2.tokenizer.decode(ids), merge_pieces=False)
        N = t.seq_len
        print(t)
        print(T(f"{N} tokens, the first ones:", f"{N} 个词元，前几个："), t.tokens[:12])
        """),
    Predict("predict", """
        **Predict, then check.** The text has 64 tokens. Averaged over every layer and head
        of SmolLM2 and over the later half of the rows, what share of a row's attention
        weight lands on the **first** token? Write a number in `predict_first`; the check
        reads it off the trace (within 0.2 passes).
        """, """
        **先预测，再核对。** 这段文本有 64 个词元。对 SmolLM2 的所有层、所有头以及后一半的行取平均，
        一行的注意力权重有多大份额落在**第一个**词元上？把一个数写进 `predict_first`；检查单元格会
        从追踪中读出它（相差不超过 0.2 即通过）。
        """,
        blank="predict_first = ...  # your prediction: the share of the weight on the first token",
        answer="predict_first = 0.4  # an attention sink: far more than 1/64 of every row",
        check="""
            share_ = float(t.weights[:, :, t.seq_len // 2:, 0].mean())
            predicted(predict_first, share_, within=0.2, why_en=(
                "Far more than the 1/64 of a uniform row: many heads park their weight on the "
                "first token when they have nothing better to do (an attention sink). The "
                "brightest column of the heatmaps is that token; whether it matters is what "
                "the rest of this part measures."), why_zh=(
                "远多于均匀分配时的 1/64：许多头在没有更好的去处时把权重停放在第一个词元上"
                "（注意力汇）。热力图中最亮的一列就是这个词元；它是否重要，是本部分接下来要测量的。"))
            """,
        wrong="predict_first = 0.016  # 1/64, as if the weight were spread evenly"),
    Text("""
        **Value-weighted attention.** What key $j$ adds to row $i$ through head $h$ is the
        vector $\\alpha_{ij} \\, v_j W_O^h$ (its value through the head's slice of the output
        projection); through the whole layer it adds $\\sum_h \\alpha^h_{ij} \\, v_j W_O^h$.
        `t.value_weighted_rows(layer, head, rows)` gives the norms: $\\alpha_{ij} \\lVert v_j
        W_O^h \\rVert$ for one head, and with `head=None` the norm of the sum over the layer's
        heads. The cell below compares, in every layer, the share of the rows' attention
        weight (averaged over the heads) that goes to the first token with the share of the
        value-weighted norm that it gets (each row normalised to sum 1), over the second half
        of the rows, and picks the layer `L` where the two shares differ most.
        """, """
        **值加权注意力**。键 $j$ 经头 $h$ 加到第 $i$ 行的是向量 $\\alpha_{ij} \\, v_j W_O^h$
        （它的值经过该头在输出投影中的切片）；经过整层加上的是
        $\\sum_h \\alpha^h_{ij} \\, v_j W_O^h$。
        `t.value_weighted_rows(layer, head, rows)` 给出这些向量的范数：对一个头是
        $\\alpha_{ij} \\lVert v_j W_O^h \\rVert$，取 `head=None` 则是该层所有头之和的范数。
        下面的单元格在每一层比较两个份额：各行的注意力权重（对各头取平均）中落在第一个词元上的
        份额，以及值加权范数中第一个词元所得的份额（每行归一化为和 1），取后一半的行；并选出两个
        份额相差最大的层 `L`。
        """),
    Code("""
        rows = range(N // 2, N)
        A = t.weights  # (layers, heads, N, N): every weight at once, the text being short
        w_first = A[:, :, rows, 0].mean((1, 2))
        vw_first = []
        for layer in range(t.num_layers):
            vw = t.value_weighted_rows(layer, None, rows)
            vw_first.append(float((vw[:, 0] / vw.sum(1)).mean()))
        vw_first = torch.tensor(vw_first)
        L = int((w_first - vw_first).argmax())  # the layer where the two shares differ most
        fig, ax = plt.subplots(figsize=(6, 3), layout="constrained")
        ax.plot(w_first, "o-", label=T("attention weight", "注意力权重"))
        ax.plot(vw_first, "s-", label=T("value-weighted norm", "值加权范数"))
        ax.set_xlabel(T("layer", "层"))
        ax.set_ylabel(T("share of the first token", "第一个词元所占份额"))
        ax.legend()
        plt.show()
        print(T(f"layers where the weight share of the first token exceeds its value-weighted "
                f"share: {int((w_first > vw_first).sum())} of {t.num_layers}",
                f"第一个词元的权重份额大于其值加权份额的层：{t.num_layers} 层中有 "
                f"{int((w_first > vw_first).sum())} 层"))
        print(T(f"layer {L}: weight share {float(w_first[L]):.3f}, value-weighted share "
                f"{float(vw_first[L]):.3f}",
                f"第 {L} 层：权重份额 {float(w_first[L]):.3f}，"
                f"值加权份额 {float(vw_first[L]):.3f}"))
        """),
    Text("""
        Why? The first token is an **attention sink**: many heads park their weight on it
        when they have nothing better to do, and a large weight says nothing about the size
        of what it moves. The cell prints, for each head of layer `L`, the weight the rows
        put on the first token and the norm $\\lVert v_0 W_O^h \\rVert$ of what it moves,
        beside the median norm over the other tokens; then it draws layer `L`'s two maps side
        by side, each row summing to 1: the weights (averaged over the heads) and the
        value-weighted norms, on a square-root colour scale so that the small cells show.
        """, """
        为什么？第一个词元是一个注意力汇：许多头在没有更好的去处时
        把权重停放在它上面，而权重大并不说明它搬动的向量有多大。下面的单元格对第 `L` 层的每个头
        打印各行放在第一个词元上的权重、它搬动的向量的范数 $\\lVert v_0 W_O^h \\rVert$，以及
        其他词元的范数的中位数；然后把第 `L` 层的两张图并排画出，每行之和都是 1：注意力权重
        （对各头取平均）与值加权范数，颜色按平方根刻度，好让小的格子也显出来。
        """),
    Code("""
        for h in range(t.num_heads):
            moved = (t.v[L, t.kv_head(h)].float() @ t.out_proj[L, h]).norm(dim=-1)  # (N,)
            w0 = float(A[L, h, rows, 0].mean())
            print(T(f"head {h}: weight on the first token {w0:.2f}, its ‖v W_O‖ "
                    f"{float(moved[0]):.1f}, median of the others {float(moved[1:].median()):.1f}",
                    f"第 {h} 个头：第一个词元上的权重 {w0:.2f}，"
                    f"它的 ‖v W_O‖ {float(moved[0]):.1f}，"
                    f"其他词元的中位数 {float(moved[1:].median()):.1f}"))

        W = A[L].mean(0)  # (N, N): the weights of layer L, averaged over the heads
        VW = t.value_weighted_rows(L, None, range(N))
        VW = VW / VW.sum(1, keepdim=True)
        fig, axes = plt.subplots(1, 2, figsize=(9, 4.2), layout="constrained")
        for ax, m, title in ((axes[0], W, T("attention weights", "注意力权重")),
                             (axes[1], VW, T("value-weighted norms", "值加权范数"))):
            im = ax.imshow(m, cmap="Blues", norm=PowerNorm(0.5, vmin=0, vmax=1))
            ax.set_title(T(f"layer {L}: ", f"第 {L} 层：") + title)
            ax.set_xlabel(T("key j", "键 j"))
            ax.set_ylabel(T("query i", "查询 i"))
        fig.colorbar(im, ax=axes, shrink=0.8)
        plt.show()
        # the same row both ways: the weights (t.weights_rows) and the value-weighted norms
        last_w = sum(t.weights_rows(L, h, [N - 1])[0] for h in range(t.num_heads)) / t.num_heads
        last_vw = t.value_weighted_rows(L, None, [N - 1])[0]
        last_vw = last_vw / last_vw.sum()
        for name, row in ((T("by weight", "按权重"), last_w),
                          (T("by value-weighted norm", "按值加权范数"), last_vw)):
            print(T(f"the last row's five largest, {name}:", f"最后一行最大的五个，{name}："),
                  [(t.tokens[int(j)], round(float(row[j]), 3)) for j in row.topk(5).indices])
        """),
    Text("""
        **Rollout.** A layer mixes the rows it receives, and the next layer mixes them again:
        what row $i$ of the output holds from input token $j$ passes through every layer.
        Rollout composes the layers, with the residual stream counted as half of each:
        $\\hat A_l = \\tfrac12 \\, \\mathrm{mean}_h A_{l,h} + \\tfrac12 I$, and the attribution
        of output row $i$ is row $i$ of $\\hat A_L \\cdots \\hat A_2 \\hat A_1$.
        `t.rollout_rows(rows, value_weighted=False)` computes it from the trace's exact
        weights; `value_weighted=True` mixes each layer by the value-weighted norms instead.
        """, """
        **注意力展开**。一层把它收到的各行混合起来，下一层再混合一次：输出的第 $i$ 行从输入词元 $j$
        得到的东西要经过每一层。注意力展开把各层复合起来，并把残差流算作每层的一半：
        $\\hat A_l = \\tfrac12 \\, \\mathrm{mean}_h A_{l,h} + \\tfrac12 I$，输出第 $i$ 行的归因是
        $\\hat A_L \\cdots \\hat A_2 \\hat A_1$ 的第 $i$ 行。
        `t.rollout_rows(rows, value_weighted=False)` 由追踪中精确的权重算出它；
        `value_weighted=True` 则改用值加权范数来混合每一层。
        """),
    Code("""
        last = list(range(N - 17, N))  # the 16 rows the ablation below reads, then the last row
        roll = t.rollout_rows(last)  # (17, N)
        roll_vw = t.rollout_rows(last, value_weighted=True)
        for name, row in ((T("rollout", "注意力展开"), roll[-1]),
                          (T("value-weighted rollout", "值加权注意力展开"), roll_vw[-1])):
            rest = row[1:].topk(3)
            print(T(f"{name}, the last row: the first token's share {float(row[0]):.4f}; then",
                    f"{name}，最后一行：第一个词元的份额 {float(row[0]):.4f}；其后"),
                  [(t.tokens[int(j) + 1], round(float(p), 4))
                   for p, j in zip(rest.values, rest.indices)])
        """),
    Text("""
        **Importance against intervention.** Each of these scores ranks the tokens; which
        ranking tells what matters to the model? `ablation.ablate_keys` measures it: key $j$
        is hidden from every other query in every layer and head (a $-\\infty$ column in the
        attention mask; its own row keeps it, so no position moves), and the **effect** is
        how much the mean next-token loss over the target rows rises. The targets are the
        16 rows before the last, the keys 16 positions spread over the tokens before them
        (every target sees every key). `ablation.importances` reads the attention-based
        scores from the clean trace (mean weight over all layers and heads, the last
        layer's weight, rollout, the attention accumulated over every query, and a seeded
        random score); we add two value-weighted ones. `ablation.rank_agreement` gives each
        score's Spearman $\\rho$ with the effect. With 16 keys a random ranking also reaches
        a sizeable $|\\rho|$, and the best of six scores is picked after the fact, so the
        control is random: 2,000 sets of six random orders of the keys (as in part 09, a
        search is compared with the same search on what means nothing).
        """, """
        **重要性与干预的对照**。上面每个分数都给词元排了序；哪一种排序说出了对模型真正要紧的东西？
        `ablation.ablate_keys` 测量这一点：把键 $j$ 在每一层每个头中对其他所有查询藏起来（注意力掩码
        中的一列 $-\\infty$；它自己那一行仍保留它，所以没有位置移动），其**效应**就是目标行上平均
        下一个词元损失的上升——这种做法叫作消融。目标行是最后一行之前的 16 行，键是在
        它们之前的词元中均匀取的 16 个位置（每个目标行都看得见每个键）。`ablation.importances`
        从干净的追踪中读出基于注意力的分数（所有层和头的平均权重、最后一层的权重、注意力展开、所有
        查询累计的注意力，以及一个固定种子的随机分数）；我们再加两个值加权的分数。
        `ablation.rank_agreement` 给出每个分数与效应的 Spearman $\\rho$。只有 16 个键时，
        随机排序也能达到不小的 $|\\rho|$，而且六个分数中最好的那个是事后挑出来的，所以对照是随机的：
        2000 组、每组六个键的随机排列（与第 09 部分一样，一次搜索要和在毫无意义的东西上做的同样的
        搜索相比）。
        """),
    Code("""
        from attnlab.course import agreement_answer, agreement_report, score_label

        targets = list(range(N - 17, N - 1))  # 16 rows; row r predicts token r + 1
        keys = list(range(0, N - 17, 3))      # 16 keys, each before every target
        ab = ablation.ablate_keys(smollm2, t.token_ids, targets=targets, keys=keys)
        scores = ablation.importances(t, targets, keys)
        scores["value_weighted"] = torch.stack(
            [t.value_weighted_rows(layer, None, targets).double().mean(0)
             for layer in range(t.num_layers)]).mean(0)[keys]
        scores["value_weighted_rollout"] = roll_vw[:-1].mean(0)[keys]
        rho = ablation.rank_agreement(ab.effect, scores)

        # the control: 2,000 sets of random orders of the keys, one per attention-based score
        # (an order has no ties, and the effects are distinct: ρ is the correlation of ranks)
        assert ab.effect.unique().numel() == len(keys), "two keys have the same effect"
        g = torch.Generator().manual_seed(0)
        n_scores = len(scores) - 1  # all but the seeded random score
        orders = torch.rand(2000, n_scores, len(keys), generator=g).argsort(-1).double()
        effect_ranks = ab.effect.argsort().argsort().double()
        centre = lambda x: x - x.mean(-1, keepdim=True)  # noqa: E731
        null = ((centre(orders) * centre(effect_ranks)).sum(-1)
                / (centre(orders).norm(dim=-1) * centre(effect_ranks).norm()))
        null_one, null_best = null[:, 0], null.max(1).values
        agreement_report(ab.clean, rho, null_one, null_best)  # each score's ρ, the control

        fig, ax = plt.subplots(figsize=(7, 3), layout="constrained")
        ax.bar(range(len(keys)), ab.effect.float())
        ax.set_xticks(range(len(keys)), [repr(t.tokens[j])[1:-1] for j in keys], rotation=70,
                      fontsize=8)
        ax.axhline(0, color="k", lw=0.5)
        ax.set_ylabel(T("loss rise when hidden", "藏起后损失的上升"))
        plt.show()
        """),
    Text("""
        **The answer**, from the numbers above (the cell states it; nothing here is typed in
        by hand): which score predicts the effect best, by how much against the random
        score and against the best of the random sets, and what the first token — the
        brightest column of the heatmaps — does when it is hidden.
        """, """
        **答案**，来自上面的数字（由单元格说出；这里没有任何手写的数字）：哪个分数最能预测效应，
        它比随机分数、比随机排列组中最好的那个好多少，以及第一个
        词元——热力图中最亮的那一列——被藏起后会怎样。
        """),
    Code("""
        agreement_answer(rho, scores, ab.effect, null_one, null_best)
        """),
    Text("""
        These sizes are small on purpose; `attnlab attribute` runs the same measurement on
        every key of a longer text. Change the text, `targets` or `keys` above and run
        again: which score wins, and whether it beats the random sets, is what the numbers
        say, not what the heatmap suggests.
        """, """
        这里的规模是故意取小的；`attnlab attribute` 在更长文本的每个键上做同样的测量。改动上面的
        文本、`targets` 或 `keys` 再运行一次：哪个分数胜出、它是否胜过随机排列组，要看这些数字，
        而不是热力图给人的印象。
        """),
    Text("""
        **See it live.** The explorer's *attribution* view draws, for the query you click,
        each key's weight, its value-weighted size and its rollout side by side. As a
        Jupyter widget (`attnlab.viz.widget.widget`) it asks this kernel for the exact rows
        of every head as you click, in JupyterLab, Notebook 7 and VS Code; on the course's
        site, which has no kernel, the cell shows what it would open.
        """, """
        **实时查看。** 探索器的*归因*视图为你点选的查询并排画出每个键的权重、按值加权的大小和
        注意力展开。作为 Jupyter 部件（`attnlab.viz.widget.widget`），你每点一次，它就向这个内核
        请求每个头的精确行，可在 JupyterLab、Notebook 7 和 VS Code 中使用；课程网站没有内核，
        这个单元格只显示它会打开的内容。
        """),
    Code("""
        from attnlab.viz.payload import ExplorerConfig
        from attnlab.viz.widget import widget

        live = widget(t, config=ExplorerConfig(view="attribution"), layer=t.num_layers - 1)
        live
        """),
    Exercise("ex1", """
        **Exercise 1.** Compute row `N - 1` of layer `L`'s value-weighted attention with
        `head=None` yourself: `ex1_row` (N,), the norm of $\\sum_h \\alpha^h_{ij} \\, v_j W_O^h$
        for each key $j$, from `t.weights_rows(L, h, [N - 1])`, `t.v` (layers, key/value
        heads, N, dv; head `h` reads `t.kv_head(h)`) and `t.out_proj` (layers, heads, dv, E).
        """, """
        **练习 1.** 自己算出第 `L` 层值加权注意力（`head=None`）的第 `N - 1` 行：`ex1_row`（N,），
        即对每个键 $j$ 求 $\\sum_h \\alpha^h_{ij} \\, v_j W_O^h$ 的范数，所用的是
        `t.weights_rows(L, h, [N - 1])`、`t.v`（层、键/值头、N、dv；头 `h` 读取 `t.kv_head(h)`）
        与 `t.out_proj`（层、头、dv、E）。
        """,
        blank="""
            ex1_row = ...  # (N,): ‖Σ_h α^h_ij v_j W_O^h‖ for row N - 1 of layer L
            """,
        answer="""
            alpha = torch.stack([t.weights_rows(L, h, [N - 1])[0]
                                 for h in range(t.num_heads)])  # (H, N)
            moved = torch.stack([t.v[L, t.kv_head(h)].float() @ t.out_proj[L, h]
                                 for h in range(t.num_heads)])  # (H, N, E): v_j W_O^h
            ex1_row = (alpha[:, :, None] * moved).sum(0).norm(dim=-1)
            """,
        check="""
            answered(ex1_row=ex1_row)
            ref = t.value_weighted_rows(L, None, [N - 1])[0]
            assert ex1_row.shape == ref.shape, T(f"one norm per key: shape {tuple(ref.shape)}",
                                                 f"每个键一个范数：形状应为 {tuple(ref.shape)}")
            assert torch.allclose(ex1_row.float(), ref, rtol=1e-3, atol=1e-3), T(
                "not the norm of the sum over the heads (a sum of norms is larger: the heads' "
                "vectors point different ways)",
                "不是各头之和的范数（范数之和更大：各头的向量指向不同的方向）")
            print(T("right: the trace's value-weighted row", "正确：与追踪的值加权行相同"))
            """,
        wrong="""
            alpha = torch.stack([t.weights_rows(L, h, [N - 1])[0] for h in range(t.num_heads)])
            moved = torch.stack([t.v[L, t.kv_head(h)].float() @ t.out_proj[L, h]
                                 for h in range(t.num_heads)])
            ex1_row = (alpha * moved.norm(dim=-1)).sum(0)
            """),
    Exercise("ex2", """
        **Exercise 2.** Compute the rollout of row `N - 1` yourself: `ex2_row` (N,),
        $e_{N-1}^T \\hat A_L \\cdots \\hat A_1$ with $\\hat A_l = \\tfrac12 \\, \\mathrm{mean}_h
        A_{l,h} + \\tfrac12 I$, from `t.weights` (layers, heads, N, N). Start from the last
        layer: a row vector times $\\hat A_L$ first.
        """, """
        **练习 2.** 自己算出第 `N - 1` 行的注意力展开：`ex2_row`（N,），即
        $e_{N-1}^T \\hat A_L \\cdots \\hat A_1$，其中
        $\\hat A_l = \\tfrac12 \\, \\mathrm{mean}_h A_{l,h} + \\tfrac12 I$，所用的是
        `t.weights`（层、头、N、N）。从最后一层开始：先用一个行向量乘以 $\\hat A_L$。
        """,
        blank="""
            ex2_row = ...  # (N,): row N - 1 of Â_L ··· Â_1, Â_l = ½·mean_h A_l,h + ½·I
            """,
        answer="""
            r_ = torch.zeros(N, dtype=torch.float64)
            r_[N - 1] = 1.0
            for layer in reversed(range(t.num_layers)):
                A_l = t.weights[layer].double().mean(0)  # (N, N): the mean of the heads
                r_ = 0.5 * (r_ @ A_l) + 0.5 * r_
            ex2_row = r_
            """,
        check="""
            answered(ex2_row=ex2_row)
            ref = roll[-1]  # t.rollout_rows([N - 1])[0], computed above
            assert ex2_row.shape == ref.shape, T(f"one share per token: shape {tuple(ref.shape)}",
                                                 f"每个词元一个份额：形状应为 {tuple(ref.shape)}")
            assert torch.allclose(ex2_row.double(), ref, atol=1e-5), T(
                "not the trace's rollout (is the residual, ½·I, in each layer?)",
                "与追踪的注意力展开不同（每一层都加上残差 ½·I 了吗？）")
            print(T("right: t.rollout_rows([N - 1])", "正确：与 t.rollout_rows([N - 1]) 相同"))
            """,
        wrong="""
            r_ = torch.zeros(N, dtype=torch.float64)
            r_[N - 1] = 1.0
            for layer in reversed(range(t.num_layers)):
                A_l = t.weights[layer].double().mean(0)  # (N, N): the mean of the heads
                r_ = r_ @ A_l
            ex2_row = r_
            """),
    Exercise("ex3", """
        **Exercise 3.** Write `ex3_spearman(a, b)`: Spearman's $\\rho$ of two 1-D tensors,
        the correlation of their ranks, tied values sharing their mean rank. The check
        compares it with `rank_agreement` on the scores above, on a monotone but curved pair
        and on values with ties.
        """, """
        **练习 3.** 写出 `ex3_spearman(a, b)`：两个一维张量的 Spearman $\\rho$，即它们的秩之间的
        相关系数，相等的值共享它们的平均秩。检查会在上面的分数上、在一对单调但弯曲的数据上、
        以及在有相等值的数据上，把它与 `rank_agreement` 比较。
        """,
        blank="""
            def ex3_spearman(a, b):
                return ...  # Spearman's ρ of a and b (1-D): the correlation of their ranks
            """,
        answer="""
            def ex3_spearman(a, b):
                def ranks(x):
                    r = x.argsort().argsort().double()
                    for v in x.unique():  # tied values share their mean rank
                        r[x == v] = r[x == v].mean()
                    return r

                ra, rb = ranks(a), ranks(b)
                ra, rb = ra - ra.mean(), rb - rb.mean()
                return float((ra * rb).sum() / (ra.norm() * rb.norm()))
            """,
        check="""
            answered(ex3_spearman=ex3_spearman(torch.arange(3.0), torch.arange(3.0)))
            for name, s in scores.items():
                assert abs(ex3_spearman(ab.effect, s) - rho[name]) < 1e-9, T(
                    f"{score_label(name)}: rank_agreement gives {rho[name]:.4f}",
                    f"{score_label(name)}：rank_agreement 给出 {rho[name]:.4f}")
            x = torch.randn(50, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
            assert abs(ex3_spearman(x, x**3) - 1.0) < 1e-9, T(
                "x and x³ rise together: their ranks agree exactly, ρ = 1 (not the correlation "
                "of the values)", "x 与 x³ 同增同减：它们的秩完全一致，ρ = 1（不是数值本身的相关）")
            a = torch.tensor([1.0, 2, 2, 3, 5, 5, 5, 8])
            b = torch.tensor([2.0, 1, 4, 3, 7, 6, 8, 5])
            assert abs(ex3_spearman(a, b) - spearman(a.tolist(), b.tolist())) < 1e-9, T(
                "with ties: tied values share their mean rank", "有相等的值时：它们共享平均秩")
            print(T("right", "正确"))
            """,
        wrong="""
            def ex3_spearman(a, b):
                a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
                return float((a * b).sum() / (a.norm() * b.norm()))
            """),
), needs_models=True)
