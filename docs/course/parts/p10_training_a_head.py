"""Part 10 of the course, Training a head: its cells in English and in Chinese (see build.py)."""

from cells import Code, Exercise, Part, Predict, Text, by_hand, measured  # noqa: F401

# ======================================================================================
# 10 training a head
# ======================================================================================

PART = Part(10, "training_a_head", "Training a head", "训练一个头", (
    Text("""
        Article 000 says that, because heads start from different weights,
        「梯度下降会驱使它们收敛到不同的表征子空间」: read plainly, trained heads end up in
        different subspaces. We train a small model, look at what its heads learned, and then
        measure their subspaces before and after training. The *induction* task repeats a
        random segment, `<bos> s1..sn s1..sn s1..`: to predict the next token the model must
        find the earlier occurrence of the current token and copy what followed it. The known
        solution takes two cooperating heads in a two-layer attnlab `GPT`: a
        **previous-token head** in layer 0 and an **induction head** in layer 1. The run
        below is tiny (200 steps; the cell prints how long it took); `attnlab train --task
        induction` is the full one (600 steps).
        """, """
        文章 000 说，由于各个头从不同的权重出发，「梯度下降会驱使它们收敛到不同的表征子空间」：
        按字面读，训练后的各个头落在不同的子空间中。我们训练一个小模型，看看它的头学到了什么，再测量
        训练前后它们的子空间。归纳任务重复一段随机序列
        `<bos> s1..sn s1..sn s1..`：要预测下一个词元，模型必须找到当前词元上一次出现的位置，
        并复制紧随其后的词元。已知的解法需要两层 attnlab `GPT` 中两个协作的头：
        第 0 层的**前一个词元头**和第 1 层的**归纳头**。下面的训练很小（200 步；单元格会打印用时）；
        完整的训练是 `attnlab train --task induction`（600 步）。
        """),
    Text("""
        `tr.train` repeats one step, `steps` times, logging and saving as it goes. Here is
        that step, as attnlab runs it: set the learning rate (a linear warm-up), draw the
        step's batch of the task, compute the loss on the scored positions, backpropagate,
        clip the gradient's norm and let Adam update the weights.
        """, """
        `tr.train` 把同一个训练步重复 `steps` 次，一边记录、一边保存。
        下面就是 attnlab 运行的这一步：
        设定学习率（线性预热），取出这一步的任务批次，在需要打分的位置上算出损失，反向传播，
        裁剪梯度的范数，再让优化器更新权重。
        """),
    Code("""
        from attnlab.course import show_code
        from attnlab.train import trainer

        show_code(trainer._train_step)
        """),
    Code("""
        import tempfile

        from attnlab import train as tr

        config = tr.TrainConfig.for_task("induction", steps=200, batch_size=32, log_every=25,
                                         checkpoint_every=1000, eval_batches=2)
        workdir = tempfile.TemporaryDirectory(prefix="attnlab-course-")  # removed at exit
        result = tr.train(config, workdir.name, quiet=True)
        print(T("held-out accuracy:", "留出集准确率："), round(result.eval_accuracy, 3),
              T(f"({result.seconds:.1f} s)", f"（{result.seconds:.1f} 秒）"))
        for key, en, zh in (("previous_token", "previous-token head", "前一个词元头"),
                            ("induction", "induction head", "归纳头")):
            h = result.heads[key]
            print(T(f"{en}: layer {h['layer']}, head {h['head']} (score {h['score']:.2f})",
                    f"{zh}：第 {h['layer']} 层第 {h['head']} 个头（分数 {h['score']:.2f}）"))
        """),
    Code("""
        from attnlab.train.trainer import read_metrics

        rows = read_metrics(result.run_dir)
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.plot([r_["step"] for r_ in rows], [r_["loss"] for r_ in rows], "o-")
        ax.set_xlabel(T("step", "步数"))
        ax.set_ylabel(T("training loss", "训练损失"))
        ax.set_title(T("induction task", "归纳任务"))
        plt.show()
        """),
    Text("""
        **Look at the heads.** The run folder loads like any model (`models.load`); we
        trace one sequence of the task, with a period of 8, and draw the two heads the run
        found. A previous-token head puts its weight on the line just below the diagonal
        (key $i - 1$); an induction head on the line one period back, shifted by one (key
        $i - 8 + 1$).
        """, """
        **看看这些头**。训练目录可以像任何模型一样加载（`models.load`）；我们对任务中周期为 8 的
        一个序列做追踪，并画出训练找到的两个头。前一个词元头把权重放在对角线正下方的一条线上（键
        $i - 1$）；归纳头放在往回一个周期再错开一位的一条线上（键 $i - 8 + 1$）。
        """),
    Code("""
        from attnlab import models
        from attnlab.analysis.scores import head_scores
        from attnlab.viz import figures

        task = tr.get_task("induction")
        period = 8
        seg = torch.randperm(task.n_values, generator=torch.Generator().manual_seed(3))[:period]
        ids = [task.special("<bos>")] + (seg + task.n_specials).tolist() * 3
        run_model = models.load(result.run_dir)
        tt = attnlab.trace(run_model, ids)
        prev, ind = result.heads["previous_token"], result.heads["induction"]
        fig = figures.heatmap(tt, prev["layer"], prev["head"], lang=LANG)
        display(fig)
        figures.heatmap(tt, ind["layer"], ind["head"], lang=LANG)
        """),
    Text("""
        The heads are found by scores: `attnlab.analysis` computes TransformerLens's
        definitions for every head in one pass over the trace (no N × N memory). Compare the
        heads of each layer below: whether one head stands out for each role or several share
        it is what these scores tell. Then train longer (`steps=600`, the task's default) and
        compare again.
        """, """
        这些头是按分数找出来的：`attnlab.analysis` 在对追踪的一次遍历中为每个头计算
        TransformerLens 的定义（不需要 N × N 的内存）。比较下面每一层的各个头：每个角色是由一个头
        突出地承担，还是由几个头分担，要看这些分数。然后训练得更久一些（`steps=600`，任务的默认值）
        再比较一次。
        """),
    Code("""
        s = head_scores(tt, token_ids=ids)
        for name, label in (("previous", T("previous-token scores", "前一个词元分数")),
                            ("induction", T("induction scores", "归纳分数"))):
            for layer, row in enumerate(s[name]):
                print(label, T(f"layer {layer}:", f"第 {layer} 层："),
                      [round(float(v), 2) for v in row])
        """),
    Predict("predict", """
        **Predict, then check.** Before training does anything: in this model ($E = 64$, 4
        heads, so each head's slice of $W_q$ spans a 16-dimensional subspace of
        $\\mathbb{R}^{64}$), what is the mean principal angle, in degrees, between the
        slices of heads 0 and 1 of the first layer **at initialisation**? Write a number in
        `predict_angle`; the check rebuilds the run's initial weights (within 15° passes).
        """, """
        **先预测，再核对。** 在训练起任何作用之前：这个模型（$E = 64$，4 个头，所以每个头在 $W_q$
        中的切片张成 $\\mathbb{R}^{64}$ 中的一个 16 维子空间）第一层的第 0 与第 1 个头的切片之间，
        **初始化时**的平均主夹角是多少度？把一个数写进 `predict_angle`；检查单元格会重建这次训练的
        初始权重（相差不超过 15° 即通过）。
        """,
        blank="predict_angle = ...  # your prediction: the mean angle between 2 heads at init, °",
        answer="predict_angle = 60  # two random 16-dim subspaces of R^64 are already far apart",
        check="""
            from attnlab.train.checkpoint import build_model as build_model_

            attn0 = build_model_(config).blocks[0].attn  # the run's initial weights (its seed)
            slices_ = attn0.qkv_proj.weight.detach()[:attn0.embed_dim].chunk(attn0.num_heads, 0)
            qa_, qb_ = (torch.linalg.qr(s_.T.double()).Q for s_ in slices_[:2])
            angle_ = float(torch.rad2deg(torch.acos(torch.linalg.svdvals(qa_.T @ qb_)
                                                    .clamp(-1, 1))).mean())
            predicted(predict_angle, angle_, within=15, why_en=(
                "Random subspaces of a larger space are far apart already: heads start in "
                "different subspaces, before gradient descent has done anything. That is why "
                "the initial weights are the control below."), why_zh=(
                "大空间中的随机子空间本来就相距很远：各头在梯度下降起作用之前就处在不同的子空间里。"
                "所以下面用初始权重作对照。"))
            """,
        wrong="predict_angle = 0  # as if the heads started in one subspace, split by training"),
    Text("""
        **Different subspaces?** Each head reads its queries through its own slice of $W_q$
        ($E/h$ rows of the $E \\times E$ matrix) and its keys through its slice of $W_k$: each
        slice spans a subspace of dimension $E/h$. Two subspaces are compared by their
        principal angles (notebook 04): all 0° for one and the same subspace, all 90° for
        orthogonal ones. The cell computes, in each layer, the principal angles between every
        pair of heads, in the trained model and in the same model at initialisation (the
        run's own initial weights, rebuilt from its seed). The initial weights are the
        control: if they already pass a test, passing it after training says nothing about
        what gradient descent did. The last line is the change that training made.
        """, """
        **不同的子空间吗**？每个头通过 $W_q$ 中属于自己的切片（$E \\times E$ 矩阵中的 $E/h$ 行）读取
        查询，通过 $W_k$ 中的切片读取键：每个切片张成一个 $E/h$ 维的子空间。两个子空间用它们之间的
        主夹角来比较（第 04 部分）：同一个子空间的主夹角全是 0°，正交的子空间全是 90°。下面的单元格
        在每一层计算每两个头之间的主夹角，既在训练后的模型上，也在初始化时的同一个模型上（这次训练
        自己的初始权重，由它的随机种子重建）。初始权重就是对照：如果它们已经通过某个检验，那么训练后
        通过同一个检验并不能说明梯度下降做了什么。最后一行是训练带来的变化。
        """),
    Code("""
        from attnlab.train.checkpoint import build_model


        def principal_angles(A, B):
            \"\"\"Principal angles (degrees) between the row spaces of A and B.\"\"\"
            qa, qb = torch.linalg.qr(A.T.double()).Q, torch.linalg.qr(B.T.double()).Q
            return torch.rad2deg(torch.acos(torch.linalg.svdvals(qa.T @ qb).clamp(-1, 1)))


        def pair_means(model, part):
            \"\"\"Per layer, the mean principal angle of every pair of heads between their
            slices of W_q (part 0) or W_k (part 1).\"\"\"
            out = []
            for block in model.blocks:
                attn = block.attn
                e = attn.embed_dim
                w = attn.qkv_proj.weight.detach()[part * e:(part + 1) * e]
                heads = w.chunk(attn.num_heads, dim=0)
                out.append(torch.tensor([float(principal_angles(heads[a], heads[b]).mean())
                                         for a in range(len(heads))
                                         for b in range(a + 1, len(heads))]))
            return out


        init_model = build_model(config)  # the run's initial weights (same seed)
        angles = {when: {part: pair_means(m_, i) for i, part in enumerate(("W_q", "W_k"))}
                  for when, m_ in (("init", init_model), ("trained", run_model.model))}
        for part in ("W_q", "W_k"):
            for layer in range(len(angles["init"][part])):
                a0, a1 = angles["init"][part][layer], angles["trained"][part][layer]
                print(T(f"layer {layer}, {part}: mean angle between heads {a0.mean():.1f}° at "
                        f"initialisation, {a1.mean():.1f}° trained (closest pair {a1.min():.1f}°)",
                        f"第 {layer} 层，{part}：各头之间的平均主夹角，初始化时 {a0.mean():.1f}°，"
                        f"训练后 {a1.mean():.1f}°（最接近的一对 {a1.min():.1f}°）"))
        closest = {when: min(float(v.min()) for d_ in angles[when].values() for v in d_)
                   for when in angles}
        mean = {when: float(torch.cat([v for d_ in angles[when].values() for v in d_]).mean())
                for when in angles}
        SAME = 1.0  # degrees: a pair of heads closer than this shares its subspace
        for when, en, zh in (("trained", "after training", "训练后"),
                             ("init", "at initialisation (the control)", "初始化时（对照）")):
            apart = closest[when] > SAME
            print(T(f"{en}: the closest pair of heads is {closest[when]:.1f}° apart: "
                    + ("every head has its own subspace" if apart else "some heads share one"),
                    f"{zh}：最接近的两个头相距 {closest[when]:.1f}°："
                    + ("每个头都有自己的子空间" if apart else "有的头共用一个子空间")))
        change = mean["trained"] - mean["init"]
        print(T(f"training changed the mean angle by {change:+.1f}° "
                + ("(the heads moved apart)" if change > 0 else "(the heads moved closer)"),
                f"训练使平均主夹角变化了 {change:+.1f}°"
                + ("（各头彼此远离）" if change > 0 else "（各头彼此靠近）")))
        plain, control = closest["trained"] > SAME, closest["init"] > SAME
        if plain and control:
            print(T("So the heads have different subspaces after training, as they had before "
                    "it: this test cannot credit gradient descent with it.",
                    "所以训练后各头的子空间互不相同，训练前也是如此：这个检验无法把它归功于梯度下降。"))
        elif plain:
            print(T("So the heads have different subspaces after training and did not before it.",
                    "所以训练后各头的子空间互不相同，而训练前并非如此。"))
        else:
            print(T("So after training some heads share a subspace: the plain reading does not "
                    "hold in this run.",
                    "所以训练后有的头共用一个子空间：字面的读法在这次训练中不成立。"))
        """),
    Text("""
        The plain reading of the sentence, different subspaces after training, is tested by
        the closest pair of heads; the initial weights, put to the same test, say whether
        passing it is evidence for gradient descent. The stronger reading, that training
        drives the heads further apart, is the sign of the change in the mean angle;
        `attnlab claims --only 000-gradient-descent-diversifies` tests it on more runs.
        """, """
        这句话字面的读法——训练后落在不同的子空间——由最接近的两个头来检验；初始权重接受同一个检验，
        说明通过它能否作为梯度下降的证据。更强的读法——训练把各个头推得更开——看平均主夹角变化的
        正负号；`attnlab claims --only 000-gradient-descent-diversifies` 在更多次训练上检验它。
        """),
    Exercise("ex1", """
        **Exercise 1.** In `ids` (`<bos>` then the segment three times, period 8), which key
        should an induction head at query position `i` attend to? Write
        `ex1_target(i, period)` for the positions of the second and third copies.
        """, """
        **练习 1.** 在 `ids`（`<bos>` 之后是重复三次、周期为 8 的片段）中，位于查询位置 `i` 的
        归纳头应该关注哪个键？对第二、第三份拷贝中的位置写出 `ex1_target(i, period)`。
        """,
        blank="""
            def ex1_target(i, period):
                return ...  # the key an induction head at query i attends to
            """,
        answer="""
            def ex1_target(i, period):
                return i - period + 1  # the token after the previous occurrence of ids[i]
            """,
        check="""
            answered(ex1_target=ex1_target(period + 1, period))
            rows_ = range(period + 1, len(ids))
            for i in rows_:
                j = ex1_target(i, period)
                assert 1 <= j <= i and ids[j - 1] == ids[i], T(
                    f"position {i}: key {j} does not follow an earlier {ids[i]}",
                    f"位置 {i}：键 {j} 并不紧跟在更早出现的 {ids[i]} 之后")
            w_ind = tt.head_weights(ind["layer"], ind["head"])
            mass = sum(float(w_ind[i, ex1_target(i, period)]) for i in rows_) / len(rows_)
            print(T("right; the induction head puts", "正确；归纳头在这些键上平均放了"),
                  round(mass, 2), T("of its weight there", "的权重"))
            """,
        wrong="""
            def ex1_target(i, period):
                return i - period  # the previous occurrence itself
            """),
    Exercise("ex2", """
        **Exercise 2.** The previous-token score of a head is the attention mass on key
        `i - 1`, summed over the rows and divided by **all** N rows (row 0 has no previous
        token and counts as 0). Compute it by hand for the previous-token head:
        `ex2_score`.
        """, """
        **练习 2.** 一个头的前一个词元分数，是落在键 `i - 1` 上的注意力质量对各行求和，再除以
        **全部** N 行（第 0 行没有前一个词元，记为 0）。为前一个词元头手工算出它：`ex2_score`。
        """,
        blank="ex2_score = ...  # the previous-token score of the head prev, by hand",
        answer="""
            w_prev = tt.head_weights(prev["layer"], prev["head"])
            ex2_score = float(w_prev.diagonal(-1).sum() / w_prev.shape[0])
            """,
        check="""
            answered(ex2_score=ex2_score)
            ref = float(s["previous"][prev["layer"], prev["head"]])
            assert abs(ex2_score - ref) < 1e-5, T(f"{ex2_score:.6f}, attnlab says {ref:.6f}",
                                                   f"{ex2_score:.6f}，attnlab 给出 {ref:.6f}")
            print(T("right:", "正确："), round(ex2_score, 3))
            """,
        wrong="""
            w_prev = tt.head_weights(prev["layer"], prev["head"])
            ex2_score = float(w_prev.diagonal(-1).mean())
            """),
))
