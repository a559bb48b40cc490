"""The report's "trained model" section: train the induction model (or reuse it), show its
training curve, and the previous-token and induction heads found by their scores; then the
same for the associative-recall task and its lookup head.

The runs live in ``<report dir>/trained-induction/`` and ``<report dir>/trained-assoc-recall/``:
a finished run with the same config is reused, a killed one is resumed, anything else is
trained afresh
(:func:`attnlab.train.summary.ensure_run`). Tables and figures are shown in English and in
Chinese (:data:`ZH`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlab.report.html import (
    BiText,
    ReportContext,
    Section,
    bilingual,
    escape,
    figure,
    fmt,
    table,
)
from attnlab.train.config import TrainConfig
from attnlab.train.heads import LookupScores
from attnlab.train.summary import RunSummary, ensure_run, summarize_run
from attnlab.train.trainer import plot_metrics

__all__ = ["RUN_NAME", "LOOKUP_RUN_NAME", "build", "section_for", "lookup_part", "ZH"]

RUN_NAME = "trained-induction"
LOOKUP_RUN_NAME = "trained-assoc-recall"

#: Chinese for the checks of :func:`attnlab.train.summary.summarize_run` and the figures.
ZH: dict[str, str] = {
    "held-out accuracy on induction positions >= {}": "归纳位置上的留出集准确率 ≥ {}",
    "previous-token head found (score >= {}, >= {}x median)":
        "找到前一个词元头（分数 ≥ {}，且 ≥ 中位数的 {} 倍）",
    "induction head found (score >= {}, >= {}x median)":
        "找到归纳头（分数 ≥ {}，且 ≥ 中位数的 {} 倍）",
    "induction head sits above the previous-token head (layer order)":
        "归纳头位于前一个词元头之上（按层的先后）",
    # plot_metrics
    "train": "训练集",
    "held-out": "留出集",
    "held-out {}": "留出集 {}",
    "step": "训练步数",
    "loss (scored positions)": "损失（计分位置）",
    "accuracy": "准确率",
    # the two heads
    "previous-token: layer {} head {} (score {})": "前一个词元头：第 {} 层第 {} 个头（分数 {}）",
    "induction: layer {} head {} (score {})": "归纳头：第 {} 层第 {} 个头（分数 {}）",
    "key": "键",
    "query": "查询",
    "<bos>": "<bos>",  # the task's start token, shown as the model reads it
    # the associative-recall run
    "held-out accuracy on the recalled value >= {}": "留出集上回忆出的值的准确率 ≥ {}",
    "lookup head found (attention from the query key to the value after its earlier "
    "occurrence >= {}, >= {}x median)":
        "找到查找头（查询键对其先前出现之后那个值的注意力 ≥ {}，且 ≥ 中位数的 {} 倍）",
    "lookup head: layer {} head {} (score {})": "查找头：第 {} 层第 {} 个头（分数 {}）",
    "query → value": "查询 → 值",
    "query → key": "查询 → 键",
    "attention weight": "注意力权重",
    "position": "位置",
}


def _pattern_figure(s: RunSummary) -> Any:
    """The previous-token and the induction head's attention on one held-out sequence."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (pl, ph, ps), (il, ih, is_) = s.scores.best_previous_token, s.scores.best_induction
    heads = [("previous-token", pl, ph, ps), ("induction", il, ih, is_)]
    tokens = s.example_tokens
    fig, axes = plt.subplots(1, len(heads), figsize=(5.2 * len(heads), 5))
    for ax, (label, layer, head, score) in zip(axes, heads):
        ax.imshow(s.example_weights[layer, head].numpy(), cmap="viridis", vmin=0, vmax=1)
        ax.set_title(f"{label}: layer {layer} head {head} (score {score:.2f})", fontsize=10)
        ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=6)
        ax.set_yticks(range(len(tokens)), tokens, fontsize=6)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.tight_layout()
    return fig


def section_for(s: RunSummary) -> Section:
    """The section for one summarized run (see :func:`attnlab.train.summary.summarize_run`)."""
    config, scores = s.config, s.scores
    command = f"attnlab train --task {config.task}"
    catalog = {**ZH, command: command}  # a command reads the same in both languages
    score_rows = [[f"L{layer}H{head}", float(scores.previous_token[layer, head]),
                   float(scores.induction[layer, head])]
                  for layer in range(scores.previous_token.shape[0])
                  for head in range(scores.previous_token.shape[1])]
    html_parts = [
        bilingual(
            "Article 000 claims that different heads learn different relations. Here a 2-layer "
            "attnlab GPT is trained from scratch on repeated random segments, and the heads "
            "that carry the solution are found by their scores, not chosen by hand.",
            "文章 000 说：不同的头学到不同的关系。这里从零训练一个两层的 attnlab GPT，"
            "任务是重复出现的随机片段；承担解法的头由分数自动找出，而不是人为指定。",
            cls="claim"),
        bilingual(f"Task: {s.task.relation}.",
                  f"任务：{s.task.name}；需要的关系：前一个词元头 + 归纳头。"),
        table(["check", "value", "result"], [list(c) for c in s.checks], passed_col=2,
              catalog=catalog),
        f"<p class='muted'><code>{escape(command)} --out DIR</code> &middot; "
        + bilingual(f"{config.steps} steps, {config.num_layers} layers x {config.num_heads} "
                    f"heads, dim {config.embed_dim}, batch {config.batch_size}",
                    f"{config.steps} 步，{config.num_layers} 层 × {config.num_heads} 个头，"
                    f"维度 {config.embed_dim}，批大小 {config.batch_size}", tag="span")
        + " &middot; "
        + bilingual(f"{fmt(float(s.final.get('seconds', 0.0)))} s in the last training session",
                    f"最近一次训练用时 {fmt(float(s.final.get('seconds', 0.0)))} 秒", tag="span")
        + "</p>",
        figure(plot_metrics(s.metrics, command),
               "Loss and accuracy on the scored positions; the red point is held-out.",
               "计分位置上的损失与准确率；红点为留出集。", svg=True, catalog=catalog),
        figure(_pattern_figure(s),
               "Left: the previous-token head: a clean one-back diagonal while the tokens "
               "are new; once the sequence repeats it spreads out, and the induction head "
               "carries the prediction. Right: the induction head: in the repeats each "
               "token looks at the token that followed its earlier occurrence (stripes "
               "parallel to the diagonal, one period back).",
               "左：前一个词元头：词元首次出现时是一条干净的“看前一个”对角线；序列开始重复后它"
               "变得分散，由归纳头负责预测。右：归纳头：在重复段中，每个词元看它上一次出现之后"
               "的那个词元（与对角线平行、相隔一个周期的斜线）。", svg=True, catalog=catalog),
        table([BiText("head", "头"), BiText("previous-token score", "前一个词元分数"),
               BiText("induction score", "归纳分数")], score_rows),
    ]
    return Section(id="trained-model", title="Trained model: heads specialize",
                   title_zh="训练的模型：头的分工", html="".join(html_parts), passed=s.passed,
                   rows=list(s.checks))


def _lookup_figure(s: RunSummary, lookup: LookupScores) -> Any:
    """The lookup head's attention from the query position (the last) over one held-out
    sequence of ``s`` (``lookup``: its lookup scores), its key and value marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layer, head, score = lookup.best_value
    tokens = s.example_tokens
    row = s.example_weights[layer, head, -1].numpy()
    fig, ax = plt.subplots(figsize=(7.5, 2.8))
    ax.bar(range(len(tokens)), row, color="#3558b0")
    ax.set_xticks(range(len(tokens)), tokens, fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_xlabel("position")
    ax.set_ylabel("attention weight")
    ax.set_title(f"lookup head: layer {layer} head {head} (score {score:.2f})", fontsize=10)
    fig.tight_layout()
    return fig


def lookup_part(s: RunSummary) -> tuple[str, list[tuple[str, str, bool | None]], bool]:
    """The associative-recall run's part of the section: (HTML, check rows, passed)."""
    if s.lookup is None:
        raise ValueError(f"lookup_part needs an assoc-recall run, got task {s.config.task!r}")
    config, lookup = s.config, s.lookup
    command = f"attnlab train --task {config.task}"
    catalog = {**ZH, command: command}
    rows = [[f"L{layer}H{head}", float(lookup.value[layer, head]),
             float(lookup.key[layer, head])]
            for layer in range(lookup.value.shape[0]) for head in range(lookup.value.shape[1])]
    html = "".join([
        f"<h3>{bilingual('Associative recall: a lookup head', '联想回忆：查找头', tag='span')}"
        "</h3>",
        bilingual(
            "The sequence lists key–value pairs and ends with one of the keys; the model must "
            "answer with its value. The GPT reads each token with the previous token's "
            "embedding added (a token shift), so one head can do the lookup: from the query key "
            "to the value that followed that key earlier.",
            "序列先列出若干“键—值”对，最后给出其中一个键；模型要答出它的值。这里的 GPT 在每个"
            "词元上加了前一个词元的嵌入（词元平移），于是一个头就能完成查找：从查询的键看向"
            "先前紧跟在同一个键之后的那个值。"),
        table(["check", "value", "result"], [list(c) for c in s.checks], passed_col=2,
              catalog=catalog),
        f"<p class='muted'><code>{escape(command)} --out DIR</code> &middot; "
        + bilingual(f"{config.steps} steps, {config.num_layers} layers x {config.num_heads} "
                    f"heads, dim {config.embed_dim}", f"{config.steps} 步，{config.num_layers} "
                    f"层 × {config.num_heads} 个头，维度 {config.embed_dim}", tag="span")
        + "</p>",
        figure(_lookup_figure(s, lookup),
               "The lookup head's attention from the query key (the last position) over one "
               "held-out sequence: almost all of it on the value that followed the same key.",
               "查找头从查询键（最后一个位置）出发、在一条留出序列上的注意力：几乎全部落在"
               "先前紧跟同一个键的那个值上。", svg=True, catalog=catalog),
        table([BiText("head", "头"), BiText("query → value", "查询 → 值"),
               BiText("query → key", "查询 → 键")], rows),
    ])
    return html, list(s.checks), s.passed


def build(ctx: ReportContext) -> Section:
    """Train (or reuse) the induction and the associative-recall runs under ``ctx.out_dir``
    and show what they found."""
    run_dir = Path(ctx.out_dir) / RUN_NAME
    ensure_run(run_dir, TrainConfig.for_task("induction", seed=ctx.seed), ctx.progress)
    section = section_for(summarize_run(run_dir, seed=ctx.seed))
    lookup_dir = Path(ctx.out_dir) / LOOKUP_RUN_NAME
    ensure_run(lookup_dir, TrainConfig.for_task("assoc-recall", seed=ctx.seed), ctx.progress)
    html, rows, passed = lookup_part(summarize_run(lookup_dir, seed=ctx.seed))
    return Section(id=section.id, title=section.title, title_zh=section.title_zh,
                   html=section.html + html, passed=section.passed and passed,
                   rows=section.rows + rows)
