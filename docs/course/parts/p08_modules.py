"""Part 8 of the course, The modules: its cells in English and in Chinese (see build.py)."""

from cells import Code, Exercise, Part, Predict, Text, by_hand, measured  # noqa: F401

# ======================================================================================
# 08 the modules
# ======================================================================================

PART = Part(8, "modules", "The modules", "模块", (
    Text("""
        Article 001 writes multi-head attention with one fused projection:
        「通过 nn.Linear(3*d_model) 一次性计算 QKV，比分开三次计算更快」. attnlab's
        `MultiHeadAttention` does the same (`qkv_proj`), is weight-compatible with
        `torch.nn.MultiheadAttention` (`from_torch`, `to_torch`), and adds grouped-query
        attention and a KV cache. Article 000's `PureSelfAttention` corresponds to attnlab's
        `SelfAttention`. The cells below compare each pair with the same weights.
        """, """
        文章 001 用一个融合的投影写多头注意力：「通过 nn.Linear(3*d_model) 一次性计算 QKV，比分开
        三次计算更快」。attnlab 的 `MultiHeadAttention` 也这样做（`qkv_proj`），与
        `torch.nn.MultiheadAttention` 权重兼容（`from_torch`、`to_torch`），并增加了分组查询注意力
        和 KV 缓存。文章 000 的 `PureSelfAttention` 对应 attnlab 的 `SelfAttention`。下面的单元格
        用相同的权重逐一比较它们。
        """),
    Code("""
        from torch import nn

        mha = attnlab.MultiHeadAttention(embed_dim=64, num_heads=8)
        x = torch.randn(2, 10, 64)
        out, w = mha(x, need_weights=True)
        twin = mha.to_torch()  # nn.MultiheadAttention(batch_first=True), same weights
        ref, ref_w = twin(x, x, x, need_weights=True, average_attn_weights=False)
        print(T("to_torch: max |out - torch| =", "to_torch：max |out - torch| ="),
              float((out - ref).detach().abs().max()), float((w - ref_w).detach().abs().max()))

        m = nn.MultiheadAttention(64, 8, batch_first=True)
        a = attnlab.MultiHeadAttention.from_torch(m)
        print(T("fused weight = torch's in_proj_weight:", "融合权重 = torch 的 in_proj_weight："),
              torch.equal(a.qkv_proj.weight, m.in_proj_weight))
        print(T("from_torch: max |out - torch| =", "from_torch：max |out - torch| ="),
              float((a(x)[0] - m(x, x, x)[0]).detach().abs().max()))

        """),
    Text("""
        **Parity with PyTorch.** `attnlab.experiments.parity` compares attnlab with PyTorch on
        random inputs, case by case: the scaled dot-product function (masks, scales, causal),
        `MultiheadAttention` with and without `batch_first`, cross-attention, encoder and
        decoder layers, the KV cache, and whole `nn.Transformer` stacks. Where torch returns
        NaN for a row whose keys are all masked, attnlab returns 0 (notebook 07), and the
        comparison says so. A comparison that cannot fail proves nothing, so each one also
        measures a deliberately wrong variant of attnlab's side against the same torch
        reference (the scale left out, the mask ignored, not causal, ...), and passes only if
        its tolerance rejects that variant.
        """, """
        **与 PyTorch 的一致性**。`attnlab.experiments.parity` 在随机输入上逐项比较 attnlab 与
        PyTorch：缩放点积函数（各种掩码、缩放系数、因果掩码）、带或不带 `batch_first` 的
        `MultiheadAttention`、交叉注意力、编码器层与解码器层、KV 缓存，以及完整的
        `nn.Transformer`。对于所有键都被遮蔽的一行，torch 返回 NaN，attnlab 返回 0（第 07 部分），
        比较中会注明这一点。一个不可能失败的比较什么也证明不了，所以每一项比较还会用同一个 torch
        参照测量 attnlab 一侧的一个故意写错的变体（漏掉缩放、忽略掩码、不加因果掩码……），只有当容差
        拒绝了这个变体时，这项比较才算通过。
        """),
    Code("""
        from attnlab.course import parity_summary
        from attnlab.experiments import parity

        comparisons = parity.run_parity()
        parity_summary(comparisons)  # how many pass, the closest ones
        """),
    Text("""
        **Article 000's listing**, executed here as printed (its own demo aside), against
        `SelfAttention` with the same weights:
        """, """
        **文章 000 的代码清单**，在这里按原样执行（不运行它自带的示例），与使用相同权重的
        `SelfAttention` 比较：
        """),
    Code("""
        from importlib.resources import files

        namespace = {"__name__": "article_000"}  # not __main__: its demo does not run
        exec((files("attnlab.experiments") / "listings" / "000_pure_self_attention.py.txt")
             .read_text(encoding="utf-8"), namespace)
        pure = namespace["PureSelfAttention"](64, 8)
        sa = attnlab.SelfAttention(64, 8)
        sa.load_state_dict(pure.state_dict())
        (o1, w1), (o2, w2) = pure(x), sa(x)
        print(T("article 000 vs SelfAttention: max |out|, max |weights| differences",
                "文章 000 与 SelfAttention：输出与权重的最大绝对差"),
              float((o1 - o2).detach().abs().max()), float((w1 - w2).detach().abs().max()))
        """),
    Text("""
        **einsum.** Article 001 computes the scores and the weighted sum with `torch.einsum`:
        「einsum 魔法：用 torch.einsum('bhqd,bhkd->bhqk', q, k) 一句搞定多头矩阵乘法，避免手动
        permute 维度」. An einsum equation names every axis of every operand with a letter.
        Letters that appear in the inputs but not after `->` are summed over; the others are
        kept, in the order written after `->`. In `'bhqd,bhkd->bhqk'` the batch `b` and the
        head `h` are kept and `d` is summed: for every batch, head, query `q` and key `k`,
        $\\sum_d q_{bhqd} \\, k_{bhkd}$, which is `q @ k.transpose(-2, -1)` without writing the
        transpose. The cell takes the listing's own two einsum lines, runs them, and compares
        them with the matmul form and with attnlab; the last einsum is the whole of
        attention in one line.
        """, """
        **einsum**。文章 001 用 `torch.einsum` 计算分数和加权和：「einsum 魔法：用
        torch.einsum('bhqd,bhkd->bhqk', q, k) 一句搞定多头矩阵乘法，避免手动 permute 维度」。
        einsum 方程用一个字母命名每个操作数的每个维度。在输入中出现、却不出现在 `->`
        之后的字母被求和；其余字母保留，顺序按 `->` 之后的写法。在 `'bhqd,bhkd->bhqk'` 中，批次
        `b` 和头 `h` 保留，`d` 被求和：对每个批次、每个头、每个查询 `q` 和每个键 `k`，计算
        $\\sum_d q_{bhqd} \\, k_{bhkd}$，也就是不必写出转置的 `q @ k.transpose(-2, -1)`。下面的
        单元格取出代码清单自己的两行 einsum，运行它们，再与矩阵乘法的写法和 attnlab 比较；最后一个
        einsum 用一行写出了整个注意力。
        """),
    Code("""
        from types import SimpleNamespace

        from attnlab.experiments.article_listings import listing_source

        src001 = listing_source("001")  # article 001's listing, as printed
        lines = [ln.strip() for ln in src001.splitlines() if "torch.einsum(" in ln]
        print("\\n".join(lines))
        B, H, L, d = 2, 8, 10, 64
        q, k, v = (torch.randn(B, H, L, d) for _ in range(3))
        ns = {"torch": torch, "q": q, "k": k, "v": v, "self": SimpleNamespace(d_k=d)}
        exec(lines[0], ns)  # scores = torch.einsum('bhqd,bhkd->bhqk', q, k) / self.d_k**0.5
        ns["attn"] = torch.softmax(ns["scores"], dim=-1)
        exec(lines[1], ns)  # out = torch.einsum('bhql,bhld->bhqd', attn, v)
        print(T("listing's scores vs q @ kᵀ / √d: max |difference| =",
                "清单的分数与 q @ kᵀ / √d：最大绝对差 ="),
              fmt_num(float((ns["scores"] - q @ k.transpose(-2, -1) / d ** 0.5).abs().max())))
        one_line = torch.einsum("bhqk,bhkd->bhqd",
                                torch.softmax(torch.einsum("bhqd,bhkd->bhqk", q, k) / d ** 0.5,
                                              dim=-1), v)
        ours = attnlab.scaled_dot_product_attention(q, k, v)
        print(T("listing's out vs attnlab:", "清单的输出与 attnlab："),
              fmt_num(float((ns["out"] - ours).abs().max())),
              T("| one-line einsum vs attnlab:", "| 一行 einsum 与 attnlab："),
              fmt_num(float((one_line - ours).abs().max())))
        """),
    Text("""
        **contiguous() and view.** Step 6 of the listing merges the heads back:
        `out.transpose(1, 2).contiguous()`, then `out.view(batch_size, -1, self.d_model)`,
        and the article warns: 「contiguous()：转置操作后必须调用以保证内存连续性，否则 view
        会报错」. `transpose` moves no data: it swaps two strides (how far apart in memory
        consecutive elements of each axis are), so the elements are no longer stored in the
        order of the new shape. `view` only reinterprets the same memory under a new shape,
        and it cannot merge the head and feature axes when they are not adjacent in memory.
        `.contiguous()` copies the tensor into the order of its shape; `reshape` makes that
        copy only when it must. The cell tries all three on the listing's `out`.
        """, """
        **contiguous() 与 view**。清单的第 6 步把各个头合并回去：先
        `out.transpose(1, 2).contiguous()`，再 `out.view(batch_size, -1, self.d_model)`；文章
        提醒：「contiguous()：转置操作后必须调用以保证内存连续性，否则 view 会报错」。`transpose`
        并不移动数据：它只交换两个步长（每个维度上相邻元素在内存中相隔多远），于是元素在内存中的
        存放顺序不再是新形状的顺序。`view` 只是用新形状重新解读同一块内存，当头和特征两个维度在
        内存中不相邻时，它无法把它们合并。`.contiguous()` 把张量按其形状的顺序复制一份；`reshape`
        只在必要时才做这次复制。下面的单元格在清单的 `out` 上把三种写法都试一遍。
        """),
    Code("""
        tr_out = ns["out"].transpose(1, 2)  # (B, L, H, d), as in step 6
        print(T("after transpose: shape, strides, contiguous =",
                "transpose 之后：形状、步长、是否连续 ="),
              tuple(tr_out.shape), tr_out.stride(), tr_out.is_contiguous())
        try:
            tr_out.view(B, L, H * d)
            print(T("view after transpose: ran", "transpose 之后直接 view：运行成功"))
        except RuntimeError as exc:
            print(T("view after transpose:", "transpose 之后直接 view："), type(exc).__name__)
        print(T("after contiguous(): strides =", "contiguous() 之后：步长 ="),
              tr_out.contiguous().stride())
        merged = tr_out.contiguous().view(B, L, H * d)
        print(T("contiguous().view equals reshape:", "contiguous().view 与 reshape 相同："),
              torch.equal(merged, tr_out.reshape(B, L, H * d)))
        """),
    Text("""
        **Both listings, as printed.** The experiment `article-code` runs each listing in a
        fresh interpreter with attnlab's weights, and then corrects article 001's listing one
        edit at a time, running it again after each, until it runs; the corrected listing
        must then equal attnlab's module, and the article's debugging tips and its advice on
        einsum and `contiguous()` are checked too. The table lists each run, the error it
        met (with its line in the listing) and each fix.
        """, """
        **两份代码清单，按原样运行**。实验 `article-code` 在全新的解释器中用 attnlab 的权重运行
        每份清单，然后对文章 001 的清单一次做一处修正、每次修正后重新运行，直到它能运行；修正后的
        清单必须与 attnlab 的模块相等。文章的调试技巧、关于 einsum 和 `contiguous()`
        的建议也一并检查。下表列出每次运行、它遇到的错误（及其在清单中的行号）和每处修正。
        """),
    *measured("article_code", """
        `measure` writes each listing into a fresh interpreter, runs it with attnlab's
        weights, applies the fixes one by one, and compares every output with attnlab's
        module, as well as the einsum formulation. Its code and one run:
        """, """
        `measure` 把每份清单写进一个全新的解释器，用 attnlab 的权重运行它，
        逐一应用各处修正，并把每个
        输出与 attnlab 的模块相比较，einsum 的写法也一样。下面是它的代码和一次运行：
        """, """
        m = article_code.measure()
        print(T("listing 000 − attnlab, largest |Δ| of the outputs:",
                "清单 000 − attnlab，输出的最大 |Δ|："), fmt_num(m.err0_out))
        print(T("einsum − attnlab:", "einsum − attnlab："), fmt_num(m.einsum_err),
              T("(wrong variant:", "（错误变体："), fmt_num(m.einsum_err_wrong) + T(")", "）"))
        """),
    Code("""
        from attnlab.course import article_code_table

        r = run("article-code", plot=False)
        report(r)
        article_code_table(r)  # each run of a listing, its error and each fix
        """),
    Text("""
        **Is the fused projection faster?** The fused and the separate projections do the
        same arithmetic (the experiment counts the FLOPs of both) and give the same q, k, v;
        fusing saves calls, bias additions and reads of the input. Whether that makes it
        faster is a matter of timing, so the answer belongs to the machine that runs the
        cell: `fused-qkv-speed` times both on one CPU thread, interleaved, at a few small
        sizes (fewer than `attnlab verify` uses), and prints the ratio separate / fused it
        measured here, with the machine's load. Its control times two identical
        implementations the same way: their ratio is the timing's own noise, which a real
        difference must stand out from. Another machine, another load or another run gives
        other ratios.
        """, """
        **融合投影更快吗**？融合的投影与分开的三个投影做的运算完全相同（实验会统计两者的
        FLOPs），得到的 q、k、v 也相同；融合省下的是函数调用、偏置加法和对输入的重复读取。这是否
        让它更快是一个计时问题，所以答案属于运行这个单元格的机器：`fused-qkv-speed`
        在单个 CPU 线程上交替计时两者，只用几个较小的规模（比 `attnlab verify` 用的少），并打印它在
        这里测得的时间比 分开 / 融合，以及机器的负载。它的对照用同样的方法给两份相同的实现计时：它们
        的比值就是计时本身的噪声，真正的差别必须超出它。换一台机器、换一个负载或者再运行一次，比值
        都会不同。
        """),
    *measured("fused_qkv_speed", """
        `measure` times the fused projection, the separate one and the control's twin on one
        CPU thread, interleaved, at each size, and keeps the best median of each. One tiny
        size (the numbers vary from run to run):
        """, """
        `measure` 在单个 CPU 线程上、在每个规模下交替为融合投影、分开的投影和对照的孪生实现计时，并
        保留各自最好的中位数。只取一个很小的规模（每次运行的数字都不同）：
        """, """
        m = fused_qkv_speed.measure(sizes=((1, 16, 64),), rounds=1, repeats=2, layers=False)
        for case in m.sizes[0].cases:
            print(f"{case.size}, {case.mode}: "
                  + T("seconds per call, fused", "每次调用的秒数，融合"), fmt_num(case.fused),
                  T(", separate", "，分开"), fmt_num(case.separate))
        """),
    Code("""
        from attnlab.course import timing_report

        r = run("fused-qkv-speed", sizes=((2, 10, 512), (1, 16, 64), (2, 64, 256)), rounds=2,
                repeats=3, layers=False, plot=False)
        # a timing: its verdict is this run's on this machine, shown as such (no report())
        timing_report(r)
        """),
    Predict("predict", """
        **Predict, then check.** `MultiHeadAttention(embed_dim=64, num_heads=8)` stacks
        $W_q, W_k, W_v$ into one `qkv_proj` of $3 \\times 64 = 192$ rows. With
        `num_kv_heads=2` (grouped-query attention: every 4 query heads share one key/value
        head), how many rows does `qkv_proj` have? Write a number in `predict_rows`; the
        check builds the module and counts (within 0.5 passes).
        """, """
        **先预测，再核对。** `MultiHeadAttention(embed_dim=64, num_heads=8)` 把
        $W_q, W_k, W_v$ 叠成一个 `qkv_proj`，共 $3 \\times 64 = 192$ 行。取 `num_kv_heads=2`
        （分组查询注意力：每 4 个查询头共享一个键/值头）时，`qkv_proj` 有多少行？把一个数写进
        `predict_rows`；检查单元格会构造这个模块并数出来（相差不超过 0.5 即通过）。
        """,
        blank="predict_rows = ...  # your prediction: qkv_proj's rows with num_kv_heads=2",
        answer="predict_rows = 96  # 64 for the queries, 2 kv heads x 8 dims each for k and for v",
        check="""
            rows_ = attnlab.MultiHeadAttention(embed_dim=64, num_heads=8,
                                               num_kv_heads=2).qkv_proj.weight.shape[0]
            predicted(predict_rows, rows_, within=0.5, why_en=(
                "The queries keep their 64 rows (8 heads of 8); the keys and the values have "
                "2 heads of 8 each, 16 rows apiece: 64 + 16 + 16 = 96, half of 192."),
                why_zh=("查询保留 64 行（8 个头，每个 8 维）；"
                        "键和值各只有 2 个头，每个 8 维，各 16 行："
                        "64 + 16 + 16 = 96，是 192 的一半。"))
            """,
        wrong="predict_rows = 192  # as if grouping changed nothing in the projection"),
    Text("""
        **Grouped-query attention** (`num_kv_heads`): groups of query heads share one
        key/value head, which shrinks the K and V projections and the cache. **KV cache**:
        decoding one token at a time with a `KVCache` must give what one causal pass over the
        whole sequence gives; the cell compares the two.
        """, """
        **分组查询注意力**（`num_kv_heads`）：若干个查询头共享一个键/值头，K、V
        的投影与缓存都因此变小。**KV 缓存**：用 `KVCache` 一次解码一个词元，结果必须与对整个序列做
        一次因果计算相同；下面的单元格比较这两者。
        """),
    Code("""
        gqa = attnlab.MultiHeadAttention(embed_dim=64, num_heads=8, num_kv_heads=2)
        print(T("qkv_proj rows (full, grouped):", "qkv_proj 的行数（完整，分组）："),
              mha.qkv_proj.weight.shape[0], gqa.qkv_proj.weight.shape[0])
        full, _ = gqa(x, causal=True)
        cache = attnlab.KVCache()
        steps = [gqa(x[:, t:t + 1], causal=True, cache=cache)[0] for t in range(10)]
        print(T("cached decoding = one causal pass:", "缓存解码 = 一次因果计算："),
              torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5))
        """),
    Exercise("ex1", """
        **Exercise 1.** Count the parameters of `MultiHeadAttention(E, H, num_kv_heads=G)`
        (with biases) by a formula: `ex1_params(E, H, G)`.
        """, """
        **练习 1.** 用公式算出 `MultiHeadAttention(E, H, num_kv_heads=G)`（带偏置）的参数个数：
        `ex1_params(E, H, G)`。
        """,
        blank="""
            def ex1_params(E, H, G):
                return ...  # the parameter count of MultiHeadAttention(E, H, num_kv_heads=G)
            """,
        answer="""
            def ex1_params(E, H, G):
                kv = G * (E // H)  # the width of K and of V
                return (E * (E + 2 * kv) + E + 2 * kv) + (E * E + E)  # qkv_proj + out_proj
            """,
        check="""
            answered(ex1_params=ex1_params(32, 4, 4))
            for E_, H_, G_ in [(64, 8, 8), (64, 8, 2), (48, 6, 3), (32, 4, 1)]:
                n_ = sum(p.numel() for p in attnlab.MultiHeadAttention(E_, H_, num_kv_heads=G_)
                         .parameters())
                assert ex1_params(E_, H_, G_) == n_, T(
                    f"E={E_}, H={H_}, G={G_}: the module has {n_}",
                    f"E={E_}, H={H_}, G={G_}：模块有 {n_} 个参数")
            print(T("right", "正确"))
            """,
        wrong="""
            def ex1_params(E, H, G):
                return 4 * E * E + 4 * E
            """),
    Exercise("ex2", """
        **Exercise 2.** `tm` below is a `torch.nn.MultiheadAttention` **without**
        `batch_first` (inputs shaped (N, B, E)). Compute its output on `xs` with an attnlab
        module built from it: `ex2_out`, shaped like torch's.
        """, """
        **练习 2.** 下面的 `tm` 是一个**没有** `batch_first` 的 `torch.nn.MultiheadAttention`
        （输入形状为 (N, B, E)）。用由它构造的 attnlab 模块算出它在 `xs` 上的输出：`ex2_out`，
        形状与 torch 的相同。
        """,
        blank="""
            tm = nn.MultiheadAttention(32, 4)  # batch_first=False
            xs = torch.randn(7, 3, 32)  # (N, B, E)
            ex2_out = ...  # tm's output on xs, shaped like torch's, from an attnlab module
            """,
        answer="""
            tm = nn.MultiheadAttention(32, 4)  # batch_first=False
            xs = torch.randn(7, 3, 32)  # (N, B, E)
            ours = attnlab.MultiHeadAttention.from_torch(tm)  # attnlab is batch-first
            ex2_out = ours(xs.transpose(0, 1))[0].transpose(0, 1)
            """,
        check="""
            answered(ex2_out=ex2_out)
            expected = tm(xs, xs, xs)[0]
            assert ex2_out.shape == expected.shape, T(f"shape {tuple(ex2_out.shape)}, expected "
                                                      f"{tuple(expected.shape)}",
                                                      f"形状为 {tuple(ex2_out.shape)}，应为 "
                                                      f"{tuple(expected.shape)}")
            assert torch.allclose(ex2_out, expected, atol=1e-5), T("not torch's output",
                                                                   "与 torch 的输出不同")
            print(T("right", "正确"))
            """,
        wrong="""
            tm = nn.MultiheadAttention(32, 4)
            xs = torch.randn(7, 3, 32)
            ours = attnlab.MultiHeadAttention.from_torch(tm)
            ex2_out = ours(xs)[0]  # treats N as the batch
            """),
    Exercise("ex3", """
        **Exercise 3.** The core of article 001's `forward` in a few lines:
        `ex3_attention(q, k, v)` takes q, k, v shaped (B, H, L, d), computes the weights with
        one `torch.einsum` (scaled by $1/\\sqrt{d}$, softmax over the keys) and the weighted
        sum with another, and returns the heads merged into (B, L, H·d): transpose, then
        `contiguous().view` or `reshape`. The check feeds it the heads of a
        `MultiHeadAttention` and compares `out_proj` of your result with the module's output.
        """, """
        **练习 3.** 用几行写出文章 001 中 `forward` 的核心：`ex3_attention(q, k, v)` 接收形状为
        (B, H, L, d) 的 q、k、v，用一个 `torch.einsum` 算出权重（乘以 $1/\\sqrt{d}$，对键做
        softmax），再用另一个算出加权和，最后把各个头合并成 (B, L, H·d)：先 transpose，再用
        `contiguous().view` 或 `reshape`。检查单元格把一个 `MultiHeadAttention` 的各个头传给它，
        并把你的结果经过 `out_proj` 后与模块的输出比较。
        """,
        blank="""
            def ex3_attention(q, k, v):
                return ...  # (B, L, H*d): einsum scores, softmax over keys, einsum sum, merge
            """,
        answer="""
            def ex3_attention(q, k, v):
                B, H, L, d = q.shape
                w = torch.softmax(torch.einsum("bhqd,bhkd->bhqk", q, k) / d ** 0.5, dim=-1)
                out = torch.einsum("bhqk,bhkd->bhqd", w, v)  # (B, H, L, d)
                return out.transpose(1, 2).reshape(B, L, H * d)
            """,
        check="""
            answered(ex3_attention=ex3_attention(*torch.randn(3, 1, 2, 3, 4)))
            mha3 = attnlab.MultiHeadAttention(32, 4)
            x3 = torch.randn(2, 6, 32)
            with torch.no_grad():
                heads = [t_.view(2, 6, 4, 8).transpose(1, 2)  # (B, H, L, d), as in the listing
                         for t_ in mha3.qkv_proj(x3).chunk(3, dim=-1)]
                got = ex3_attention(*heads)
                assert isinstance(got, torch.Tensor) and tuple(got.shape) == (2, 6, 32), T(
                    f"expected a (2, 6, 32) tensor, got {getattr(got, 'shape', type(got))}",
                    f"应为 (2, 6, 32) 的张量，得到的是 {getattr(got, 'shape', type(got))}")
                assert torch.allclose(mha3.out_proj(got), mha3(x3)[0], atol=1e-5), T(
                    "out_proj of your merged heads differs from the module's output",
                    "你合并后的各个头经过 out_proj 后与模块的输出不同")
            print(T("right", "正确"))
            """,
        wrong="""
            def ex3_attention(q, k, v):
                B, H, L, d = q.shape
                w = torch.softmax(torch.einsum("bhqd,bhkd->bhqk", q, k) / d ** 0.5, dim=-1)
                out = torch.einsum("bhqk,bhkd->bhqd", w, v)
                return out.reshape(B, L, H * d)  # merged without the transpose: runs, but wrong
            """),
))
