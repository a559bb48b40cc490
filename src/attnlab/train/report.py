"""The report's "trained model" section: train the induction model (or reuse it), show its
training curve, and find its previous-token and induction heads by their scores.

The run lives in ``<report dir>/trained-induction/``: a finished run with the same config is
reused, a killed one is resumed, anything else is trained afresh.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from attnlab.train.checkpoint import CheckpointError, is_run_dir, load_run, read_config
from attnlab.train.config import TrainConfig
from attnlab.train.heads import capture_weights, score_heads
from attnlab.train.tasks import get_task
from attnlab.train.trainer import plot_metrics, read_metrics, train

__all__ = ["REPORT_CONFIG", "PREVIOUS_THRESHOLD", "INDUCTION_THRESHOLD", "STANDOUT",
           "ACCURACY_TARGET",
           "report_section", "trained_model_section"]

#: The run the report trains: ``attnlab train --task induction`` with its defaults.
REPORT_CONFIG = TrainConfig.for_task("induction")
ACCURACY_TARGET = 0.95  # held-out accuracy on the induction positions
# A head is "found" when its score clears an absolute bar and stands out from the others
# (>= 3x the median head). Attention spread evenly over the earlier tokens of a 32-token
# sequence scores about 0.1 on either score.
PREVIOUS_THRESHOLD = 0.3  # the trained layer-0 heads share the job; the best reaches ~0.42
INDUCTION_THRESHOLD = 0.5  # most of the mass on the tokens after earlier occurrences
STANDOUT = 3.0  # times the lower median of all heads' scores
RUN_NAME = "trained-induction"


def _ensure_run(run_dir: Path, config: TrainConfig, progress: Any) -> None:
    if run_dir.exists():
        try:
            same = read_config(run_dir) == config
        except CheckpointError:
            same = False
        finished = same and any(r.get("final") and r["step"] >= config.steps
                                for r in read_metrics(run_dir))
        if finished and is_run_dir(run_dir):
            return
        if same and is_run_dir(run_dir):
            try:
                train(config, run_dir, resume=True, progress=progress, quiet=progress is None)
                return
            except CheckpointError:
                pass
        shutil.rmtree(run_dir)
    train(config, run_dir, progress=progress, quiet=progress is None)


def _pattern_figure(model, tokens: list[str], idx: torch.Tensor, heads: list[tuple]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    w = capture_weights(model, idx)[:, 0]  # (L, H, N, N)
    fig, axes = plt.subplots(1, len(heads), figsize=(5.2 * len(heads), 5))
    for ax, (label, layer, head, score) in zip(axes, heads):
        ax.imshow(w[layer, head].numpy(), cmap="viridis", vmin=0, vmax=1)
        ax.set_title(f"{label}: layer {layer} head {head} (score {score:.2f})", fontsize=10)
        ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=6)
        ax.set_yticks(range(len(tokens)), tokens, fontsize=6)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.tight_layout()
    return fig


def trained_model_section(run_dir: str | Path, *, seed: int = 0):
    """The section for an existing induction run directory."""
    import matplotlib.pyplot as plt

    from attnlab.viz.html import Section, bilingual, escape, figure_to_svg, fmt, table

    run_dir = Path(run_dir)
    model, tok = load_run(run_dir)
    config = read_config(run_dir)
    task = get_task(config.task)
    rows = read_metrics(run_dir)
    final = next((r for r in reversed(rows) if r.get("final")), None)
    if final is None:
        raise CheckpointError(f"{run_dir}: the run has no final evaluation yet")
    idx = task.batch(0, 16, seed, split="eval").inputs
    scores = score_heads(model, idx)
    pl, ph, ps = scores.best_previous_token
    il, ih, is_ = scores.best_induction
    example = task.batch(1, 1, seed, split="eval").inputs

    curve = plot_metrics(rows, f"attnlab train --task {config.task}")
    curve_svg = figure_to_svg(curve)
    plt.close(curve)
    pats = _pattern_figure(model, tok.decode_tokens(example[0]), example,
                           [("previous-token", pl, ph, ps), ("induction", il, ih, is_)])
    pats_svg = figure_to_svg(pats)
    plt.close(pats)

    acc = float(final["eval_accuracy"])
    checks = [
        (f"held-out accuracy on induction positions >= {ACCURACY_TARGET}", fmt(acc),
         acc >= ACCURACY_TARGET),
        (f"previous-token head found (score >= {PREVIOUS_THRESHOLD}, >= {STANDOUT:g}x median)",
         f"L{pl}H{ph} {ps:.2f}", ps >= PREVIOUS_THRESHOLD
         and ps >= STANDOUT * float(scores.previous_token.median())),
        (f"induction head found (score >= {INDUCTION_THRESHOLD}, >= {STANDOUT:g}x median)",
         f"L{il}H{ih} {is_:.2f}", is_ >= INDUCTION_THRESHOLD
         and is_ >= STANDOUT * float(scores.induction.median())),
        ("induction head sits above the previous-token head (layer order)",
         f"{il} > {pl}", il > pl),
    ]
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
        bilingual(f"Task: {task.relation}.",
                  f"任务：{task.name}；需要的关系：前一词元头 + 归纳头。"),
        table(["check", "value", "result"], [list(c) for c in checks], passed_col=2),
        f"<p class='muted'><code>attnlab train --task {escape(config.task)} --out DIR</code>"
        f" &middot; {config.steps} steps, {config.n_layer} layers x {config.n_head} heads, "
        f"dim {config.n_embd}, batch {config.batch_size} &middot; "
        f"{fmt(float(final.get('seconds', 0.0)))} s in the last training session</p>",
        f"<figure>{curve_svg}<figcaption>"
        + bilingual("Loss and accuracy on the scored positions; the red point is held-out.",
                    "计分位置上的损失与准确率；红点为留出集。", tag="span")
        + "</figcaption></figure>",
        f"<figure>{pats_svg}<figcaption>"
        + bilingual("Left: the previous-token head: a clean one-back diagonal while the tokens "
                    "are new; once the sequence repeats it spreads out, and the induction head "
                    "carries the prediction. Right: the induction head: in the repeats each "
                    "token looks at the token that followed its earlier occurrence (stripes "
                    "parallel to the diagonal, one period back).",
                    "左：前一词元头：词元首次出现时是一条干净的“看前一个”对角线；序列开始重复后它"
                    "变得分散，由归纳头负责预测。右：归纳头：在重复段中，每个词元看它上一次出现之后"
                    "的那个词元（与对角线平行、相隔一个周期的斜线）。", tag="span")
        + "</figcaption></figure>",
        table(["head", "previous-token score", "induction score"], score_rows),
    ]
    return Section(
        id="trained-model", title="Trained model: heads specialize",
        title_zh="训练的模型：头的分工", html="".join(html_parts),
        passed=all(c[2] for c in checks),
        rows=[(c[0], c[1], c[2]) for c in checks],
    )


def report_section(ctx):
    """Report provider: train (or reuse) the induction run under ``ctx.out_dir``."""
    run_dir = Path(ctx.out_dir) / RUN_NAME
    config = TrainConfig.for_task("induction", seed=ctx.seed)
    _ensure_run(run_dir, config, ctx.progress)
    return trained_model_section(run_dir, seed=ctx.seed)
