"""Part 9 of the course, Real models: its cells in English and in Chinese (see build.py)."""

from cells import Code, Exercise, Part, Predict, Text, by_hand, measured  # noqa: F401

# ======================================================================================
# 09 real models
# ======================================================================================

PART = Part(9, "real_models", "Real models", "真实模型", (
    Text("""
        Everything so far ran on random weights. attnlab loads two pretrained models
        offline: `minilm` (all-MiniLM-L6-v2, a BERT encoder) and `smollm2`
        (SmolLM2-135M-Instruct, a Llama: causal, RoPE, query heads that share key/value
        heads); printing a trace shows its layers and heads. A **trace** keeps each head's q,
        k, v and each row's log-sum-exp, and computes any weight exactly when asked.
        """, """
        到目前为止一切都是在随机权重上运行的。attnlab 可以离线加载两个预训练模型：`minilm`
        （all-MiniLM-L6-v2，BERT 编码器）和 `smollm2`（SmolLM2-135M-Instruct，Llama 架构：因果、
        RoPE，若干查询头共享一个键/值头）；打印一个追踪就能看到它的层数和头数。**追踪**
        保存每个头的 q、k、v 与每一行的 log-sum-exp，需要哪个权重就精确地算出哪个。
        """),
    Code("""
        from attnlab import models
        from attnlab.viz import figures

        minilm = models.load("minilm", progress=False)
        text = "The animal didn't cross the street because it was too tired"
        t = attnlab.trace(minilm, text)
        print(t)
        print(t.tokens)

        """),
    Text("""
        *It* refers to *the animal*. Which head links them? The trace gives the weights of
        every head; we take the head that puts the most weight from *it* on *animal* and draw
        it as a heatmap (row = query, column = key). Set `L`, `Hd` to any other head and
        rerun.
        """, """
        *it* 指的是 *the animal*。哪一个头把它们联系起来？追踪可以给出每个头的权重；我们取从 *it*
        到 *animal* 权重最大的头，画成热力图（行 = 查询，列 = 键）。把 `L`、`Hd`
        设为其他任何头，再运行一次。
        """),
    Code("""
        def to_word(trace_, src="it", dst="animal"):
            \"\"\"(layers, heads): every head's weight from token src on token dst.\"\"\"
            return trace_.weights[:, :, trace_.tokens.index(src), trace_.tokens.index(dst)]


        i_it = t.tokens.index("it")
        to_animal = to_word(t)
        L, Hd = divmod(int(to_animal.argmax()), t.num_heads)
        best = float(to_animal[L, Hd])
        print(T(f"the best of {to_animal.numel()} heads: layer {L}, head {Hd}, weight from 'it' "
                f"on 'animal' = {best:.3f}",
                f"{to_animal.numel()} 个头中最好的一个：第 {L} 层第 {Hd} 个头，'it' 对 'animal' "
                f"的权重 = {best:.3f}"))
        figures.heatmap(t, L, Hd, lang=LANG)
        """),
    Predict("predict", """
        **Predict, then check.** Shuffle the sentence's words (the first shuffle of the cell
        below), so that 'it' refers to nothing, and search the heads again: what weight does
        the best head now put from 'it' on 'animal'? Write a number in `predict_shuffled`;
        the check traces the shuffled text (within 0.2 passes).
        """, """
        **先预测，再核对。** 把句子的词打乱（就是下面单元格的第一次打乱），让 'it' 什么也不指代，
        再搜索一遍所有的头：最好的头现在从 'it' 放到 'animal' 上的权重是多少？把一个数写进
        `predict_shuffled`；检查单元格会追踪打乱后的文本（相差不超过 0.2 即通过）。
        """,
        blank="predict_shuffled = ...  # your prediction: the best head's weight, shuffled words",
        answer="predict_shuffled = 0.5  # the best of 72 heads is high on any text: a bit below",
        check="""
            words_ = text.split()
            order_ = torch.randperm(len(words_), generator=torch.Generator().manual_seed(0))
            shuffled_ = " ".join(words_[i] for i in order_)
            best_ = float(to_word(attnlab.trace(minilm, shuffled_)).max())
            predicted(predict_shuffled, best_, within=0.2, why_en=(
                "The best of 72 heads finds a large weight on 'animal' even when 'it' refers to "
                "nothing: picking the maximum over many heads makes a high weight, so the real "
                "sentence's best weight is weak evidence on its own."), why_zh=(
                "即使 'it' 什么也不指代，72 个头中最好的一个也会在 'animal' 上找到很大的权重："
                "在许多头中取最大值本身就会得到高权重，所以真实句子中最好的权重单独看只是很弱的证据。"))
            """,
        wrong="predict_shuffled = 0.0  # as if no head attended 'animal' once the sense is gone"),
    Text("""
        **A baseline for the search.** The best of many heads is high whether or not any
        head tracks what *it* refers to: the largest of many numbers is large even when none
        of them means anything. So the same search runs on the same words in random order,
        where *it* refers to nothing; the best head found there is what the real sentence
        must beat. The cell also reads the head chosen above on the shuffled words, and on
        the sentence's twin in which *it* is the street (`too wide` instead of `too tired`).
        """, """
        **给这次搜索一个基线**。无论有没有哪个头真的在追踪 *it* 指代什么，许多头中最好的那个都会
        很高：许多个数里最大的那个，即使它们都没有意义，也会很大。所以在把同样的词随机打乱的句子上
        做同样的搜索——那里的 *it* 什么也不指代；在那里找到的最好的头，就是真实句子必须超过的基线。
        下面的单元格还在打乱的句子上读取上面选出的那个头，并在 *it* 指街道的孪生句子上读取它
        （把 `too tired` 换成 `too wide`）。
        """),
    Code("""
        words = text.split()
        g = torch.Generator().manual_seed(0)
        n_shuffles = 10
        best_shuffled, same_head = [], []
        for _ in range(n_shuffles):
            shuffled = " ".join(words[i] for i in torch.randperm(len(words), generator=g))
            w_s = to_word(attnlab.trace(minilm, shuffled))
            best_shuffled.append(float(w_s.max()))
            same_head.append(float(w_s[L, Hd]))
        best_shuffled, same_head = torch.tensor(best_shuffled), torch.tensor(same_head)
        beaten = int((best_shuffled >= best).sum())
        print(T(f"best head, real sentence: {best:.3f}; best head, shuffled words: median "
                f"{float(best_shuffled.median()):.3f}, max {float(best_shuffled.max()):.3f}",
                f"最好的头，真实句子：{best:.3f}；最好的头，打乱的句子：中位数 "
                f"{float(best_shuffled.median()):.3f}，最大 {float(best_shuffled.max()):.3f}"))
        print(T(f"shuffles whose best head reaches the real sentence's: {beaten} of {n_shuffles}",
                f"最好的头达到真实句子水平的打乱句子：{n_shuffles} 个中有 {beaten} 个"))
        print(T(f"head L{L}H{Hd} on the shuffled words: mean weight {float(same_head.mean()):.3f}",
                f"第 {L} 层第 {Hd} 个头在打乱的句子上：平均权重 {float(same_head.mean()):.3f}"))
        twin = attnlab.trace(minilm, text.replace("tired", "wide"))
        on_animal = float(to_word(twin)[L, Hd])
        on_street = float(to_word(twin, dst="street")[L, Hd])
        print(T(f"head L{L}H{Hd}, 'it' was too wide: weight on 'animal' {on_animal:.3f}, "
                f"on 'street' {on_street:.3f}",
                f"第 {L} 层第 {Hd} 个头，'it' 指街道（too wide）：对 'animal' 的权重 "
                f"{on_animal:.3f}，对 'street' 的权重 {on_street:.3f}"))
        if beaten:
            print(T(f"So: {beaten} of {n_shuffles} shuffled texts, where 'it' refers to nothing, "
                    "reach the real sentence's best weight: on its own that weight is weak "
                    "evidence that a head resolves 'it'.",
                    f"所以：在 'it' 什么也不指代的打乱句子中，{n_shuffles} 个里有 {beaten} 个达到了"
                    "真实句子中最好的权重：单凭这个权重，不足以说明有哪个头解析了 'it' 的指代。"))
        else:
            print(T(f"So: none of {n_shuffles} shuffled texts reaches the real sentence's best "
                    "weight: it stands above this baseline.",
                    f"所以：{n_shuffles} 个打乱的句子都没有达到真实句子中最好的权重："
                    "它高于这个基线。"))
        print(T("In the twin the chosen head puts more weight on "
                + ("'street', the new referent." if on_street > on_animal else
                   "'animal' than on 'street', the new referent: it does not follow what 'it' "
                   "refers to."),
                "在孪生句子中，选出的头放在 "
                + ("'street'（新的指代对象）上的权重更多。" if on_street > on_animal else
                   "'animal' 上的权重多于新的指代对象 'street'：它并不跟随 'it' 的指代。")))
        """),
    Code("""
        values, keys = t.topk(L, Hd, i_it, 3)
        print(T("'it' attends most to:", "'it' 最关注："),
              [(t.tokens[int(j)], round(float(p), 3)) for p, j in zip(values, keys)])
        Wt = t.head_weights(L, Hd)  # (N, N), dense for one head
        print(T("rows sum to 1:", "每行和为 1："),
              torch.allclose(Wt.sum(-1), torch.ones(len(t.tokens))))
        """),
    Text("""
        **The explorer, inline.** `attnlab.Explorer(trace)` shows itself in a notebook through
        `_repr_html_`: the QK view with a live $1/\\sqrt{d_k}$ slider, the geometry of a head's
        queries and keys, the positional rotation and per-head diagnostics, in English and
        Chinese. Nothing in it makes a network request.
        """, """
        **内嵌的探索器**。`attnlab.Explorer(trace)` 在笔记本中通过 `_repr_html_` 显示自己：
        带有实时 $1/\\sqrt{d_k}$ 滑块的 QK 视图、一个头的查询与键的几何、位置旋转、各头的诊断，
        中英双语。它不发出任何网络请求。
        """),
    Code("""
        attnlab.Explorer(t, layer=L, head=Hd)
        """),
    Text("""
        **The same page, live.** `attnlab.viz.widget.widget(trace)` is the explorer as a
        Jupyter widget: instead of carrying only what fits in the page, it asks this kernel
        for the exact row or tile you click, as `attnlab serve` would (JupyterLab, Notebook 7,
        VS Code). On the course's site there is no kernel; the page above stands for it.
        """, """
        **同一个页面，实时版。** `attnlab.viz.widget.widget(trace)` 是作为 Jupyter 部件的探索器：
        它不只带着页面装得下的数据，而是在你点选时向这个内核请求精确的行或块，就像
        `attnlab serve` 那样（JupyterLab、Notebook 7、VS Code）。课程网站没有内核，上面的页面
        代替它。
        """),
    Code("""
        from attnlab.viz.widget import widget

        live = widget(t, layer=L, head=Hd)
        live
        """),
    Text("""
        **SmolLM2 and the article's example.** Article 000: 「比如“苹果”这个词，如果周围有“吃”字，
        它的输出向量就会向“水果”的语义空间偏移」. SmolLM2 reads Chinese; its byte-level
        tokenizer cuts a character into pieces, which the trace merges back (weights summed
        over keys, averaged over queries). Grouped heads store each key/value head once.
        """, """
        **SmolLM2 与文章里的例子**。文章 000：「比如“苹果”这个词，如果周围有“吃”字，它的输出向量
        就会向“水果”的语义空间偏移」。SmolLM2 能读中文；它的字节级分词器会把一个汉字切成几片，
        追踪会把它们合并回来（对键求和、对查询取平均）。分组的头中每个键/值头只存一次。
        """),
    Code("""
        smollm2 = models.load("smollm2", progress=False)
        t2 = attnlab.trace(smollm2, "我吃了一个苹果")
        print(t2)
        print(t2.tokens)
        if t2.meta.get("merged"):  # the trace's rule for the pieces of one character
            print(T(t2.meta["merged"]["rule"], "同一个汉字的几片已合并：对键求和、对查询取平均"))
        print(T("query heads per key/value head:", "每个键/值头对应的查询头数："),
              t2.num_heads // t2.num_kv_heads)
        """),
    Text("""
        **Does 苹果 lean toward 水果?** The experiment `contextualisation` reads the hidden
        state of 苹果 in SmolLM2, layer by layer, after fruit contexts (吃, 洗, 果园, 削) and
        after company contexts (发布会, 科技新闻, 市值), and measures its lean
        $\\cos(苹果, 水果) - \\cos(苹果, 科技公司)$. Its control is the same architecture with
        random weights, and its checks read each context at the last layer and again at the
        middle layer (half-way through the network). Here the control is drawn once
        (`draws=1`, to keep the notebook quick); `attnlab verify` draws several and keeps
        the most favourable, a stricter control. The figure shows the lean at every layer.
        """, """
        **“苹果”会偏向“水果”吗**？实验 `contextualisation` 在 SmolLM2 中逐层读取“苹果”的隐藏
        状态，分别在水果语境（吃、洗、果园、削）和公司语境（发布会、科技新闻、市值）之后，测量
        它的倾向 $\\cos(苹果, 水果) - \\cos(苹果, 科技公司)$。它的对照是同一架构、随机权重的网络；
        各项检查在最后一层读取每个语境，并在中间层（网络的一半处）再读一次。这里的对照只抽取一次
        （`draws=1`，让笔记本运行得快一些）；`attnlab verify` 抽取多次并保留最有利的一次，
        是更严格的对照。图中是每一层的倾向。
        """),
    *measured("contextualisation", """
        `measure` runs SmolLM2 on every sentence, takes the lean of 苹果 toward each anchor at
        every layer, does the same on networks of the same shape with random weights (the
        control), and computes the permutation p-values of the separation. Its code, then
        one run with few permutations:
        """, """
        `measure` 在每个句子上运行 SmolLM2，取出每一层上「苹果」偏向各个锚点的倾向，在形状相同、
        权重随机的网络上做同样的事（对照），并算出两类语境分离程度的置换检验 p 值。下面是它的代码，
        然后是一次置换次数很少的运行：
        """, """
        m = contextualisation.measure(draws=1, permutations=99)
        print(T("p-value of the separation, last layer:", "分离的 p 值，最后一层："),
              fmt_num(float(m.p[-1])), T("(control:", "（对照："),
              fmt_num(float(m.control_p[-1])) + T(")", "）"))
        """),
    Code("""
        r = run("contextualisation", draws=1)
        report(r)
        show_checks(r)
        mid = [c for c in r.checks if c.id.startswith("mid-")]
        last = [r.check(id_) for id_ in ("contexts-separate", "fruit-closer", "company-closer")]
        print(T(f"per-context checks passed: {sum(c.passed for c in last)} of {len(last)} at the "
                f"last layer, {sum(c.passed for c in mid)} of {len(mid)} at the middle layer",
                f"通过的逐语境检查：最后一层 {len(last)} 项中 {sum(c.passed for c in last)} 项，"
                f"中间层 {len(mid)} 项中 {sum(c.passed for c in mid)} 项"))
        show(r)
        """),
    Exercise("ex1", """
        **Exercise 1.** Recompute row `i_it` of MiniLM's head (`L`, `Hd`) from the trace's
        `q` and `k` (shaped (layers, heads, N, d)) and the scale `t.scale`:
        `ex1_row` (N,).
        """, """
        **练习 1.** 由追踪的 `q`、`k`（形状为 (层, 头, N, d)）与缩放系数 `t.scale`，重新算出
        MiniLM 的头（`L`、`Hd`）的第 `i_it` 行：`ex1_row`（N,）。
        """,
        blank="ex1_row = ...  # (N,): row i_it of head (L, Hd), from t.q, t.k and t.scale",
        answer="ex1_row = torch.softmax(t.q[L, Hd, i_it] @ t.k[L, Hd].T * t.scale, dim=-1)",
        check="""
            answered(ex1_row=ex1_row)
            ref = t.weights_rows(L, Hd, [i_it])[0]
            assert ex1_row.shape == ref.shape, T("one weight per key", "每个键一个权重")
            assert torch.allclose(ex1_row, ref, atol=1e-5), T("not the trace's weights",
                                                              "与追踪的权重不同")
            print(T("right: softmax(q kᵀ · scale) is the model's own attention",
                    "正确：softmax(q kᵀ · scale) 就是模型自己的注意力"))
            """,
        wrong="ex1_row = torch.softmax(t.q[L, Hd, i_it] @ t.k[L, Hd].T, dim=-1)"),
    Exercise("ex2", """
        **Exercise 2.** In SmolLM2, which key/value head does query head 7 read? Give
        `ex2_kv(h)` for any head `h` (the heads of one group are consecutive).
        """, """
        **练习 2.** 在 SmolLM2 中，第 7 个查询头读取的是哪个键/值头？对任意头 `h` 给出
        `ex2_kv(h)`（同一组的头是连续的）。
        """,
        blank="""
            def ex2_kv(h):
                return ...  # the key/value head that query head h reads
            """,
        answer="""
            def ex2_kv(h):
                return h // (t2.num_heads // t2.num_kv_heads)
            """,
        check="""
            answered(ex2_kv=ex2_kv(0))
            for h in range(t2.num_heads):
                assert ex2_kv(h) == t2.kv_head(h), T(f"head {h}: the trace says {t2.kv_head(h)}",
                                                     f"第 {h} 个头：追踪给出的是 {t2.kv_head(h)}")
            print(T("right", "正确"))
            """,
        wrong="""
            def ex2_kv(h):
                return h % t2.num_kv_heads
            """),
), needs_models=True)
