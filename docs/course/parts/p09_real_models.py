"""Part 9 of the course, Real models: its cells in English and in Chinese (see build.py)."""

from cells import Code, Exercise, Part, Text  # noqa: F401

# ======================================================================================
# 09 real models
# ======================================================================================

PART = Part(9, "real_models", "Real models", "真实模型", (
    Text("""
        Everything so far ran on random weights. attnlab loads two pretrained models
        offline: `minilm` (all-MiniLM-L6-v2, a BERT encoder, 6 layers × 12 heads) and
        `smollm2` (SmolLM2-135M-Instruct, Llama: causal, RoPE, 30 layers × 9 heads sharing 3
        key/value heads). A **trace** keeps each head's q, k, v and each row's log-sum-exp,
        and computes any weight exactly when asked.
        """, """
        到目前为止一切都是在随机权重上运行的。attnlab 可以离线加载两个预训练模型：`minilm`
        （all-MiniLM-L6-v2，BERT 编码器，6 层 × 12 个头）和 `smollm2`（SmolLM2-135M-Instruct，Llama
        架构：因果、RoPE，30 层 × 9 个头，共享 3 个 key/value 头）。**trace** 保存每个头的 q、k、
        v 与
        每一行的 log-sum-exp，需要哪个权重就精确地算出哪个。
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
        *It* refers to *the animal*. Which of the 72 heads links them? The trace gives row
        *it* of every head on demand; we take the head that puts the most weight from *it* on
        *animal* and draw it as a heatmap (row = query, column = key). Set `L`, `Hd` to any
        other head and rerun.
        """, """
        *it* 指的是 *the animal*。72 个头中哪一个把它们联系起来？trace 可以按需给出每个头中 *it*
        那一行；我们取从 *it* 到 *animal* 权重最大的头，画成热力图（行 = query，列 = key）。把 `L`、
        `Hd` 设为其他任何头，再运行一次。
        """),
    Code("""
        i_it, i_animal = t.tokens.index("it"), t.tokens.index("animal")
        to_animal = torch.tensor([[float(t.weights_rows(layer, head, [i_it])[0, i_animal])
                                   for head in range(t.num_heads)]
                                  for layer in range(t.num_layers)])
        L, Hd = divmod(int(to_animal.argmax()), t.num_heads)
        print(T(f"layer {L}, head {Hd}: weight from 'it' on 'animal' =",
                f"第 {L} 层第 {Hd} 个头：'it' 对 'animal' 的权重 ="),
              round(float(to_animal[L, Hd]), 3))
        figures.heatmap(t, L, Hd, lang=LANG)
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
        **内嵌的浏览器。** `attnlab.Explorer(trace)` 在 notebook 中通过 `_repr_html_` 显示自己：带有
        实时 $1/\\sqrt{d_k}$ 滑块的 QK 视图、一个头的 query 与 key 的几何、位置旋转、各头的诊断，
        中英双语。它不发出任何网络请求。
        """),
    Code("""
        attnlab.Explorer(t, layer=L, head=Hd)
        """),
    Text("""
        **SmolLM2 and the article's example.** Article 000: 「比如“苹果”这个词，如果周围有“吃”字，
        它的输出向量就会向“水果”的语义空间偏移」. SmolLM2 reads Chinese; its byte-level
        tokenizer cuts a character into pieces, which the trace merges back (weights summed
        over keys, averaged over queries). Grouped heads store each key/value head once.
        """, """
        **SmolLM2 与文章里的例子。** 文章 000：「比如“苹果”这个词，如果周围有“吃”字，它的输出向量
        就会向“水果”的语义空间偏移」。SmolLM2 能读中文；它的字节级分词器会把一个汉字切成几片，
        trace 会把它们合并回来（对 key 求和、对 query 取平均）。分组的头中每个 key/value 头只存一次
        。
        """),
    Code("""
        smollm2 = models.load("smollm2", progress=False)
        t2 = attnlab.trace(smollm2, "我吃了一个苹果")
        print(t2)
        print(t2.tokens, t2.meta.get("merged", {}).get("rule"))
        print(T("query heads per key/value head:", "每个 key/value 头对应的 query 头数："),
              t2.num_heads // t2.num_kv_heads)
        """),
    Exercise("ex1", """
        **Exercise 1.** Recompute row `i_it` of MiniLM's head (`L`, `Hd`) from the trace's
        `q` and `k` (shaped (layers, heads, N, d)) and the scale `t.scale`:
        `ex1_row` (N,).
        """, """
        **练习 1.** 由 trace 的 `q`、`k`（形状为 (层, 头, N, d)）与缩放系数 `t.scale`，重新算出
         MiniLM
        的头（`L`、`Hd`）的第 `i_it` 行：`ex1_row`（N,）。
        """,
        blank="ex1_row = ...  # (N,): row i_it of head (L, Hd), from t.q, t.k and t.scale",
        answer="ex1_row = torch.softmax(t.q[L, Hd, i_it] @ t.k[L, Hd].T * t.scale, dim=-1)",
        check="""
            answered(ex1_row=ex1_row)
            ref = t.weights_rows(L, Hd, [i_it])[0]
            assert ex1_row.shape == ref.shape, T("one weight per key", "每个 key 一个权重")
            assert torch.allclose(ex1_row, ref, atol=1e-5), T("not the trace's weights",
                                                              "与 trace 的权重不同")
            print(T("right: softmax(q kᵀ · scale) is the model's own attention",
                    "正确：softmax(q kᵀ · scale) 就是模型自己的注意力"))
            """,
        wrong="ex1_row = torch.softmax(t.q[L, Hd, i_it] @ t.k[L, Hd].T, dim=-1)"),
    Exercise("ex2", """
        **Exercise 2.** In SmolLM2, which key/value head does query head 7 read? Give
        `ex2_kv(h)` for any head `h` (the heads of one group are consecutive).
        """, """
        **练习 2.** 在 SmolLM2 中，第 7 个 query 头读取的是哪个 key/value 头？对任意头 `h` 给出
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
                                                     f"第 {h} 个头：trace 给出的是 {t2.kv_head(h)}")
            print(T("right", "正确"))
            """,
        wrong="""
            def ex2_kv(h):
                return h % t2.num_kv_heads
            """),
), needs_models=True)
