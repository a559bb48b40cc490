"""Part 8 of the course, The modules: its cells in English and in Chinese (see build.py)."""

from cells import Code, Exercise, Part, Text  # noqa: F401

# ======================================================================================
# 08 the modules
# ======================================================================================

PART = Part(8, "modules", "The modules", "模块", (
    Text("""
        Article 001 writes multi-head attention with one fused projection:
        「通过 nn.Linear(3*d_model) 一次性计算 QKV，比分开三次计算更快」. attnlab's
        `MultiHeadAttention` does the same (`qkv_proj`), is weight-compatible with
        `torch.nn.MultiheadAttention` (`from_torch`, `to_torch`), and adds grouped-query
        attention and a KV cache. Article 000's `PureSelfAttention` is attnlab's
        `SelfAttention`.
        """, """
        文章 001 用一个融合的投影写多头注意力：「通过 nn.Linear(3*d_model) 一次性计算 QKV，比分开
        三次计算更快」。attnlab 的 `MultiHeadAttention` 也这样做（`qkv_proj`），与
        `torch.nn.MultiheadAttention` 权重兼容（`from_torch`、`to_torch`），并增加了分组查询注意力
        和 KV 缓存。文章 000 的 `PureSelfAttention` 就是 attnlab 的 `SelfAttention`。
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
        **Article 000's listing runs**, and equals `SelfAttention` once the weights are
        copied. (Article 001's listing fails as printed, three times over; notebook 07
        showed the first error, `attnlab verify --only article-code` all three.)
        """, """
        **文章 000 的代码清单可以运行**，复制权重后与 `SelfAttention` 完全相等。（文章 001 的清单
        原样无法运行，而且有三处错误；第 07 节展示了第一处，`attnlab verify --only article-code`
        展示全部三处。）
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
        print(T("article 000 vs SelfAttention:", "文章 000 与 SelfAttention："),
              float((o1 - o2).detach().abs().max()), float((w1 - w2).detach().abs().max()))
        """),
    Text("""
        **Grouped-query attention** (`num_kv_heads`): groups of query heads share one
        key/value head, which shrinks the K and V projections and the cache. **KV cache**:
        decoding one token at a time with a `KVCache` gives what one causal pass over the
        whole sequence gives.
        """, """
        **分组查询注意力**（`num_kv_heads`）：若干个 query 头共享一个 key/value 头，K、V 的投影与缓
        存
        都因此变小。**KV 缓存**：用 `KVCache` 一次解码一个词，结果与对整个序列做一次因果计算相同。
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
))
