"""Part 10 of the course, Training a head: its cells in English and in Chinese (see build.py)."""

from cells import Code, Exercise, Part, Text  # noqa: F401

# ======================================================================================
# 10 training a head
# ======================================================================================

PART = Part(10, "training_a_head", "Training a head", "训练一个头", (
    Text("""
        Article 000 says that, because heads start from different weights,
        「梯度下降会驱使它们收敛到不同的表征子空间」. Let us watch heads specialise. The
        *induction* task repeats a random segment, `<bos> s1..sn s1..sn s1..`: to predict the
        next token the model must find the earlier occurrence of the current token and copy
        what followed it. The known solution takes two cooperating heads in a two-layer
        attnlab `GPT`: a **previous-token head** in layer 0 and an **induction head** in layer
        1. The run below is tiny (200 steps, seconds on a CPU); `attnlab train --task
        induction` is the full one (600 steps).
        """, """
        文章 000 说，由于各个头从不同的权重出发，「梯度下降会驱使它们收敛到不同的表征子空间」。
        我们来看头如何分工。*induction*（归纳）任务重复一段随机序列
        `<bos> s1..sn s1..sn s1..`：要预测下一个词，模型必须找到当前词上一次出现的位置，
        并复制紧随其后的词。已知的解法需要两层 attnlab `GPT` 中两个协作的头：
        第 0 层的**前一词头**和第 1 层的**归纳头**。下面的训练很小（200 步，CPU 上几秒钟）；
        完整的训练是 `attnlab train --task induction`（600 步）。
        """),
    Code("""
        import tempfile

        from attnlab import train as tr

        config = tr.TrainConfig.for_task("induction", steps=200, batch_size=32, log_every=25,
                                         checkpoint_every=1000, eval_batches=2)
        workdir = tempfile.TemporaryDirectory(prefix="attnlab-course-")  # removed at exit
        result = tr.train(config, workdir.name, quiet=True)
        print(T("held-out accuracy:", "留出集准确率："), round(result.eval_accuracy, 3),
              f"({result.seconds:.1f} s)")
        print(result.heads_text())
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
        **看看这些头。** 训练目录可以像任何模型一样加载（`models.load`）；我们对任务中周期为 8 的
        一个序列做 trace，并画出训练找到的两个头。前一词头把权重放在对角线正下方的一条线上（key
        $i - 1$）；归纳头放在往回一个周期再错开一位的一条线上（key $i - 8 + 1$）。
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
        definitions for every head in one pass over the trace (no N × N memory). In a run this
        short the roles are shared rather than clean: compare the heads of each layer below,
        then train longer (`steps=600`, the task's default) and compare again.
        """, """
        这些头是按分数找出来的：`attnlab.analysis` 在对 trace 的一次遍历中为每个头计算
         TransformerLens
        的定义（不需要 N × N 的内存）。训练这么短时，各个角色是由几个头分担的，还不够干净：比较下面
        每一层的各个头，再训练得更久一些（`steps=600`，任务的默认值）后重新比较。
        """),
    Code("""
        s = head_scores(tt, token_ids=ids)
        for name in ("previous", "induction"):
            print(name, [[round(float(v), 2) for v in row] for row in s[name]])
        """),
    Exercise("ex1", """
        **Exercise 1.** In `ids` (`<bos>` then the segment three times, period 8), which key
        should an induction head at query position `i` attend to? Write
        `ex1_target(i, period)` for the positions of the second and third copies.
        """, """
        **练习 1.** 在 `ids`（`<bos>` 之后是重复三次、周期为 8 的片段）中，位于 query 位置 `i` 的
        归纳头应该关注哪个 key？对第二、第三份拷贝中的位置写出 `ex1_target(i, period)`。
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
                    f"位置 {i}：key {j} 并不紧跟在更早出现的 {ids[i]} 之后")
            w_ind = tt.head_weights(ind["layer"], ind["head"])
            mass = sum(float(w_ind[i, ex1_target(i, period)]) for i in rows_) / len(rows_)
            print(T("right; the induction head puts", "正确；归纳头在这些 key 上平均放了"),
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
        **练习 2.** 一个头的前一词分数，是落在 key `i - 1` 上的注意力质量对各行求和，再除以**全部**
        N 行（第 0 行没有前一个词，记为 0）。为前一词头手工算出它：`ex2_score`。
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
