"""The survey, shown: the page ``attnlab survey`` writes and the report's "survey" section.

Both are drawn from a survey's JSON (:meth:`attnlab.analysis.survey.SurveyResult.to_json`,
a :class:`~attnlab.analysis.survey_result.SurveyDocument`):

* the headline: Gu et al.'s Sink% on 64-token inputs, the strongest induction heads by
  TransformerLens's demo score beside Olsson et al.'s prefix matching and attnlab's own
  scores of the same heads, the strongest previous-token heads by both of
  TransformerLens's measures;
* the heads that play each role, with their mean score and the share of texts in which
  they play it;
* layer x head heatmaps of every score's mean; per-head distributions (histograms over
  the texts); the attention profile by relative distance;
* the definitions, each with its source.

The report section (:func:`build`) surveys SmolLM2 over the first
:data:`REPORT_TEXTS` paragraphs of attnlab's docstrings (:func:`attnlab.analysis.survey.
builtin_corpus`), computed now, and checks that a batch of texts gives the numbers one
text at a time gives. Every visible string has its Chinese in :data:`ZH`.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from attnlab._io import atomic_write_text
from attnlab.report.html import BiText, ReportContext, Section, bilingual, escape, figure, table

if TYPE_CHECKING:
    from attnlab.analysis._records import SinkStats, SurveyDocument, SurveyHeadline

__all__ = ["REPORT_TEXTS", "ZH", "build", "headline_text", "section_from", "write_page"]

#: Texts the report section surveys (the first paragraphs of attnlab's docstrings).
REPORT_TEXTS = 24
#: The report section's batched-versus-one-at-a-time check: texts, and its tolerance on
#: every mean (float32 weights of a padded batch against an unpadded one).
CHECK_TEXTS = 6
BATCH_TOL = 1e-6
#: each head's profile is the mean row mass: 1 up to float32 rounding of the weights
PROFILE_TOL = 1e-6

#: score -> (English label, Chinese label)
LABELS: dict[str, tuple[str, str]] = {
    "entropy": ("entropy (nats)", "熵（奈特）"),
    "max_weight": ("max weight", "最大权重"),
    "sink": ("first-token share (attnlab sink)", "首词元占比（attnlab 汇聚）"),
    "previous": ("previous-token (TL mul)", "前一个词元（TL mul）"),
    "diagonal": ("self (diagonal)", "自身（对角线）"),
    "distance": ("mean distance (tokens)", "平均距离（词元）"),
    "duplicate": ("duplicate-token (TL mul)", "重复词元（TL mul）"),
    "induction": ("induction (TL mul)", "归纳（TL mul）"),
    "tl-previous-abs": ("previous-token (TL abs)", "前一个词元（TL abs）"),
    "tl-duplicate-abs": ("duplicate-token (TL abs)", "重复词元（TL abs）"),
    "tl-induction-abs": ("induction (TL abs)", "归纳（TL abs）"),
    "gu-sink": ("first-token importance (Gu)", "首词元重要性（Gu）"),
    "tl-demo-induction": ("TL demo induction", "TL 演示归纳分数"),
    "olsson-prefix-matching": ("prefix matching (Olsson)", "前缀匹配（Olsson）"),
    "repeat_induction": ("attnlab repeat induction", "attnlab 重复序列归纳"),
}
#: role -> (English, Chinese)
ROLE_NAMES: dict[str, tuple[str, str]] = {
    "sink": ("attention sink (Gu: importance > 0.3)", "注意力汇聚（Gu：重要性 > 0.3）"),
    "previous-token": ("previous-token", "前一个词元"),
    "duplicate-token": ("duplicate-token", "重复词元"),
    "induction": ("induction (on texts with a repeated token)",
                  "归纳（仅含重复词元的文本）"),
    "self": ("self (diagonal)", "自身（对角线）"),
}

#: English -> Chinese for every figure text and table string of the survey.
ZH: dict[str, str] = {
    **{en: zh for en, zh in LABELS.values()},
    **{en: zh for en, zh in ROLE_NAMES.values()},
    "head": "头", "layer": "层", "score": "分数", "share of texts": "文本占比",
    "heads": "头", "role": "角色", "rule": "判定规则", "strongest heads": "最强的头",
    "mean": "均值", "definition": "定义", "source": "来源", "name": "名称",
    "check": "检查项", "value": "数值", "result": "结果",
    "computed on": "计算对象", "the texts": "语料文本", "random tokens": "随机词元",
    "layer.head": "层.头", "relative distance i − j (tokens)": "相对距离 i − j（词元）",
    "head (layer × heads + head)": "头（层 × 头数 + 头序号）",
    "mean attention per query": "每个查询的平均注意力",
    "attention by relative distance, every head": "按相对距离的注意力，所有头",
    "mean profile of the role's heads": "该角色各头的平均分布",
    "score range (bins)": "分数区间（分箱）",
    "{}: distribution over texts, per head": "{}：每个头在各文本上的分布",
    "L{}.H{}": "L{}.H{}", "none": "无",
    "{} (share {}, mean {})": "{}（占比 {}，均值 {}）",
    "heads with share ≥ {}": "占比 ≥ {} 的头",
    "TL demo induction": "TL 演示归纳分数",
    "prefix matching (Olsson)": "前缀匹配（Olsson）",
    "attnlab repeat induction": "attnlab 重复序列归纳",
    "corpus induction (TL mul)": "语料归纳（TL mul）",
    "corpus induction (TL abs)": "语料归纳（TL abs）",
    "share of texts with induction": "呈现归纳的文本占比",
    "previous-token (TL mul = attnlab previous)": "前一个词元（TL mul = attnlab previous）",
    "self (diagonal) mean": "自身（对角线）均值",
    "share of texts with a sink": "出现汇聚的文本占比",
    "first-token share (attnlab)": "首词元占比（attnlab）",
    "batch of {} texts = one at a time (max |Δ mean| / range)":
        "{} 条文本一批 = 逐条计算（最大 |Δ 均值| / 取值范围）",
    "every head's distance profile sums to 1 (max |Σ − 1|)":
        "每个头的距离分布之和为 1（最大 |Σ − 1|）",
    "Sink% (Gu et al., ε = {}, {} tokens)": "Sink%（Gu 等，ε = {}，{} 个词元）",
    "previous-token": "前一个词元", "induction": "归纳", "sink": "汇聚",
    "self": "自身", "duplicate-token": "重复词元",
    "(no probe)": "（未计算探针）",
    "attnlab docstrings": "attnlab 的文档字符串",
    "every score per layer (rows) and head (columns of each block)":
        "每个分数：按层（行）和头（每块中的列）",
    "within each block: min → max": "块内：最小 → 最大",
    "distribution over the texts, per head: score range (bins, low → high)":
        "每个头在各文本上的分布：分数区间（分箱，低 → 高）",
    "log10 mean attention per query": "每个查询平均注意力的 log10",
    **{f"{en}: {{}} … {{}}": f"{zh}：{{}} … {{}}" for en, zh in LABELS.values()},
}


def _label(score: str) -> str:
    return LABELS.get(score, (score, score))[0]


# --------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------


def _mosaic(ax: Any, panels: list[Any], labels: list[str], gap: int = 1, **kw: Any) -> Any:
    """Draw equally tall 2-D arrays side by side in one axes (cheap to lay out), each
    labelled by a categorical tick under it; returns the image."""
    import numpy as np

    rows = panels[0].shape[0]
    width = sum(p.shape[1] for p in panels) + gap * (len(panels) - 1)
    canvas = np.full((rows, width), np.nan)
    centers, x = [], 0
    for p in panels:
        canvas[:, x:x + p.shape[1]] = p
        centers.append(x + (p.shape[1] - 1) / 2)
        x += p.shape[1] + gap
    im = ax.imshow(canvas, aspect="auto", interpolation="nearest", **kw)
    ax.set_xticks(centers, labels, rotation=35, ha="right", fontsize=7)
    ax.tick_params(axis="y", labelsize=7)
    return im


def _heatmaps(data: SurveyDocument) -> Any:
    """Layer x head maps of every score's corpus mean and of the probes, side by side,
    each scaled from its own minimum to its maximum (given under it)."""
    import matplotlib.pyplot as plt
    import numpy as np

    maps = [(s, np.array(v["mean"])) for s, v in data["scores"].items()]
    maps += [(p, np.array(v["scores"])) for p, v in data.get("probes", {}).items()]
    panels, labels = [], []
    for name, m in maps:
        lo, hi = float(m.min()), float(m.max())
        panels.append((m - lo) / (hi - lo) if hi > lo else np.zeros_like(m))
        labels.append(f"{_label(name)}: {lo:.2f} … {hi:.2f}")
    nl = data["num_layers"]
    fig, ax = plt.subplots(figsize=(min(18.0, 2.0 + 0.09 * sum(p.shape[1] + 1
                                                               for p in panels)),
                                    2.2 + 0.09 * nl))
    im = _mosaic(ax, panels, labels, cmap="viridis", vmin=0.0, vmax=1.0)
    ax.set_yticks(range(0, nl, max(1, nl // 10)))
    ax.set_ylabel("layer", fontsize=8)
    ax.set_title("every score per layer (rows) and head (columns of each block)", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.02, pad=0.01, label="within each block: min → max")
    return fig


_DIST_SCORES = ("previous", "gu-sink", "induction", "entropy", "tl-previous-abs", "diagonal")


def _distributions(data: SurveyDocument) -> Any:
    """Per head (rows) the histogram of a score over the texts (columns: bins), one block
    per score."""
    import matplotlib.pyplot as plt
    import numpy as np

    names = [s for s in _DIST_SCORES if s in data["scores"]]
    nheads = data["num_layers"] * data["num_heads"]
    panels, labels = [], []
    for name in names:
        entry = data["scores"][name]
        panels.append(np.array(entry["histogram"]).reshape(nheads, -1))
        lo, hi = entry["range"]
        labels.append(f"{_label(name)}: {lo:.2f} … {hi:.2f}")
    fig, ax = plt.subplots(figsize=(11, 2.4 + min(6.0, 0.02 * nheads)))
    im = _mosaic(ax, panels, labels, cmap="magma", vmin=0.0, vmax=1.0)
    nh, step = data["num_heads"], max(1, data["num_layers"] // 10)
    ax.set_yticks([layer * nh for layer in range(0, data["num_layers"], step)],
                  [f"L{layer}" for layer in range(0, data["num_layers"], step)])
    ax.set_ylabel("head (layer × heads + head)", fontsize=8)
    ax.set_title("distribution over the texts, per head: score range (bins, low → high)",
                 fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.02, pad=0.01, label="share of texts")
    return fig


def _role_heads(data: SurveyDocument, role: str, k: int = 4) -> list[tuple[int, int, float]]:
    """The ``k`` heads that play ``role`` in the largest share of texts (ties: the higher
    mean score first), as (layer, head, share)."""
    import numpy as np

    r = data["roles"][role]
    share = np.array(r["share"]).ravel()
    mean = np.array(data["scores"][r["score"]]["mean"]).ravel()
    order = np.lexsort((-mean, -share))[:k]
    nh = data["num_heads"]
    return [(int(i) // nh, int(i) % nh, float(share[i])) for i in order]


def _profiles(data: SurveyDocument) -> Any:
    """Every head's attention by relative distance, and the mean profile of the heads
    that play each role most often."""
    import matplotlib.pyplot as plt
    import numpy as np

    prof = np.array(data["profile"]["mean"])  # (L, H, P)
    nl, nh, p = prof.shape
    d = data["config"]["max_distance"]
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(11, 4.2))
    im = a0.imshow(np.log10(prof.reshape(nl * nh, p) + 1e-6), aspect="auto", cmap="viridis",
                   interpolation="nearest", extent=(-d - 1.5, d + 1.5, nl * nh - 0.5, -0.5))
    causal = bool(data["model"].get("causal", False))
    left = -1.5 if causal else -d - 1.5  # a causal head never looks ahead
    a0.set_xlim(left, d + 1.5)
    a0.set_yticks([layer * nh for layer in range(0, nl, max(1, nl // 10))],
                  [f"L{layer}" for layer in range(0, nl, max(1, nl // 10))])
    a0.set_title("attention by relative distance, every head", fontsize=9)
    a0.set_xlabel("relative distance i − j (tokens)", fontsize=8)
    a0.set_ylabel("head (layer × heads + head)", fontsize=8)
    fig.colorbar(im, ax=a0, label="log10 mean attention per query")
    x = np.arange(-d - 1, d + 2)
    for role in ("previous-token", "sink", "self"):
        if role not in data["roles"]:
            continue
        heads = _role_heads(data, role)
        mean = np.mean([prof[l_, h] for l_, h, _ in heads], axis=0)
        a1.plot(x, mean, marker=".", label=ROLE_NAMES[role][0])
    a1.set_xlim(-1.5 if causal else -min(d, 12) - 1.5, min(d, 12) + 1.5)
    a1.set_title("mean profile of the role's heads", fontsize=9)
    a1.set_xlabel("relative distance i − j (tokens)", fontsize=8)
    a1.set_ylabel("mean attention per query", fontsize=8)
    a1.legend(fontsize=7)
    return fig


# --------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------


def _heads_cell(data: SurveyDocument, role: str, k: int = 5) -> BiText:
    import numpy as np

    score = data["roles"][role]["score"]
    mean = np.array(data["scores"][score]["mean"])
    parts_en, parts_zh = [], []
    for l_, h, share in _role_heads(data, role, k):
        if share <= 0:
            continue
        parts_en.append(f"L{l_}.H{h} (share {share:.2f}, mean {mean[l_, h]:.2f})")
        parts_zh.append(f"L{l_}.H{h}（占比 {share:.2f}，均值 {mean[l_, h]:.2f}）")
    return BiText(", ".join(parts_en) or "none", "，".join(parts_zh) or "无")


def _roles_table(data: SurveyDocument) -> str:
    import numpy as np

    rows = []
    for role, r in data["roles"].items():
        en, zh = ROLE_NAMES.get(role, (role, role))
        rel = r["relation"]
        rule = BiText(f"{_label(r['score'])} {rel} {r['threshold']}",
                      f"{LABELS.get(r['score'], (r['score'], r['score']))[1]} {rel} "
                      f"{r['threshold']}")
        many = int((np.array(r["share"]) >= 0.5).sum())
        rows.append((BiText(en, zh), rule, r["texts"], many, _heads_cell(data, role)))
    return table([BiText("role", "角色"), BiText("rule", "判定规则"),
                  BiText("texts", "文本数"), BiText("heads with share ≥ 0.5",
                                                   "占比 ≥ 0.5 的头"),
                  BiText("strongest heads (share of texts, mean score)",
                         "最强的头（文本占比，分数均值）")], rows, catalog=ZH)


def _headline_tables(head: SurveyHeadline) -> str:
    parts = []
    if head.get("induction"):
        ind_rows = [(f"L{r['layer']}.H{r['head']}", r["tl_demo_induction"],
                     r.get("olsson_prefix_matching"), r.get("attnlab_repeat_induction"),
                     r.get("corpus_induction_mul"), r.get("corpus_induction_abs"),
                     r.get("corpus_induction_share")) for r in head["induction"]]
        parts.append(table([BiText("layer.head", "层.头"), "TL demo induction",
                            "prefix matching (Olsson)", "attnlab repeat induction",
                            "corpus induction (TL mul)", "corpus induction (TL abs)",
                            "share of texts with induction"],
                           [tuple("–" if v is None else v for v in r) for r in ind_rows],
                           catalog=ZH))
    prev_rows = [(f"L{p['layer']}.H{p['head']}", p["previous_mul"], p.get("previous_abs"),
                  p.get("share_of_texts"), p.get("diagonal")) for p in head["previous_token"]]
    parts.append(table([BiText("layer.head", "层.头"),
                        "previous-token (TL mul = attnlab previous)",
                        "previous-token (TL abs)", "share of texts", "self (diagonal) mean"],
                       [tuple("–" if v is None else v for v in r) for r in prev_rows],
                       catalog=ZH))
    sink_rows = [(f"L{s['layer']}.H{s['head']}", s["share_of_texts"], s.get("gu_importance"),
                  s.get("attnlab_sink")) for s in head["sink"]]
    parts.append(table([BiText("layer.head", "层.头"), "share of texts with a sink",
                        "first-token importance (Gu)", "first-token share (attnlab)"],
                       [tuple("–" if v is None else v for v in r) for r in sink_rows],
                       catalog=ZH))
    return "".join(parts)


def _definitions_table(data: SurveyDocument) -> str:
    from attnlab.analysis.literature import DEFINITIONS

    rows = []
    for name in list(data["scores"]) + list(data.get("probes", {})):
        d = DEFINITIONS.get(name)
        if d is None:
            continue
        on = BiText("the texts", "语料文本") if d.on == "text" else BiText("random tokens",
                                                                       "随机词元")
        rows.append((name, BiText(d.summary, d.summary_zh), on, d.source))
    return table([BiText("name", "名称"), BiText("definition", "定义"),
                  BiText("computed on", "计算对象"), BiText("source", "来源")], rows,
                 catalog=ZH)


# --------------------------------------------------------------------------------------
# the section and the page
# --------------------------------------------------------------------------------------


def _headline(data: SurveyDocument) -> SurveyHeadline:
    """SurveyResult.headline() recomputed from the JSON (the page has only the JSON)."""
    import torch

    from attnlab.analysis.survey_result import SurveyConfig, SurveyResult, SurveySums

    cfg = SurveyConfig(**data["config"])
    names = list(data["scores"])
    nl, nh = data["num_layers"], data["num_heads"]
    sums = SurveySums(nl, nh, names, cfg).t
    for i, s in enumerate(names):
        e = data["scores"][s]
        sums["score_texts"][i] = e["texts"]
        sums["sum"][..., i] = torch.tensor(e["mean"], dtype=torch.float64) * e["texts"]
    for j, role in enumerate(("sink", "previous-token", "duplicate-token", "induction",
                              "self")):
        r = data["roles"].get(role)
        if r is not None:
            sums["role_texts"][j] = r["texts"]
            sums["role_hits"][..., j] = torch.tensor(r["share"], dtype=torch.float64) * r[
                "texts"]
    sums["texts"] += data["texts"]
    sums["tokens"] += data["tokens"]
    sink = data["sink"]
    sums["sink_samples"] += sink["samples"]
    sums["sink_hits"] = torch.tensor(sink["per_head"], dtype=torch.float64) * sink["samples"]
    res = SurveyResult(model=data["model"], corpus=data["corpus"], config=cfg, scores=names,
                       sums=sums, world_size=data["world_size"], backend=data["backend"],
                       seconds=data["seconds"], probes=data.get("probes", {}),
                       threads=data.get("threads", 1))
    return res.headline()


def _scope_claim(data: SurveyDocument) -> str:
    """What was surveyed: the model, the corpus, the processes and the time taken."""
    model = data["model"].get("name", "model")
    corpus = data["corpus"]
    corpus_zh = ZH.get(corpus["name"], corpus["name"])
    secs = data["seconds"]
    return bilingual(
        f"{model} ({data['num_layers']} layers × {data['num_heads']} heads) over "
        f"{data['texts']} texts of the corpus '{corpus['name']}' ({data['tokens']} tokens, "
        f"at most {data['config']['max_tokens']} per text, BOS first as TransformerLens "
        f"feeds a string), in {data['world_size']} process(es), survey {secs.get('survey')} s"
        + (f", probes {secs['probes']} s" if "probes" in secs else "") + ".",
        f"{model}（{data['num_layers']} 层 × {data['num_heads']} 个头）在语料 "
        f"“{corpus_zh}” 的 {data['texts']} 条文本上（共 {data['tokens']} 个词元，每条"
        f"最多 {data['config']['max_tokens']} 个，与 TransformerLens 处理字符串一样以 BOS "
        f"开头），用 {data['world_size']} 个进程，统计用时 {secs.get('survey')} 秒"
        + (f"，探针 {secs['probes']} 秒" if "probes" in secs else "") + "。", cls="claim")


def _sink_text(sink: SinkStats) -> str:
    """Gu et al.'s Sink% of the survey, or why there is none."""
    if sink["sink_percent"] is not None:
        return bilingual(
            f"Sink% (Gu et al., ε = {sink['epsilon']}, {sink['tokens']}-token inputs, "
            f"{sink['samples']} samples): {sink['sink_percent']:.1f} % of (sample, layer, "
            f"head) have a first-token importance above ε.",
            f"Sink%（Gu 等，ε = {sink['epsilon']}，{sink['tokens']} 个词元的输入，"
            f"{sink['samples']} 个样本）：{sink['sink_percent']:.1f}% 的（样本，层，头）"
            f"首词元重要性超过 ε。")
    return bilingual(f"Sink%: no text has {sink['tokens']} tokens.",
                     f"Sink%：没有文本达到 {sink['tokens']} 个词元。")


def _tables_note() -> str:
    """What the headline tables rank the heads by."""
    return bilingual(
        "Induction heads by TransformerLens's demo score (10 × 50 random tokens repeated "
        "twice, no BOS), beside Olsson et al.'s prefix matching, attnlab's repeat_induction "
        "and the same heads' induction scores on the corpus; previous-token heads by both "
        "TransformerLens measures; the heads with a sink in most texts. The corpus means of "
        "TransformerLens's 'abs' measure average the unrounded value (TransformerLens rounds "
        "each to 3 decimals).",
        "按 TransformerLens 演示分数（10 条 50 个随机词元重复两次，无 BOS）排序的归纳头，"
        "并列 Olsson 等的前缀匹配、attnlab 的 repeat_induction 以及同一批头在语料上的归纳分数；"
        "按 TransformerLens 两种度量排序的前一个词元头；在最多文本中出现汇聚的头。"
        "TransformerLens 'abs' 度量的语料均值取未舍入的值（TransformerLens 对每个分数保留 3 位"
        "小数）。",
        cls="muted")


def _figures(data: SurveyDocument) -> list[str]:
    """The heatmaps, the distributions over the texts and the distance profiles."""
    return [
        figure(_heatmaps(data), "Layer × head: the corpus mean of every score, and the "
               "random-token probes; each block is scaled to its own range, given under it.",
               "层 × 头：每个分数在语料上的均值，以及随机词元探针；每块按自身的取值范围着色，"
               "范围标在下方。", catalog=ZH),
        figure(_distributions(data), "Per head (rows), how a score is distributed over the "
               "texts: a role played in every text is one bright cell.",
               "每个头（行）的分数在各文本上的分布：每条文本都扮演同一角色的头只有一个亮格。",
               catalog=ZH),
        figure(_profiles(data), "Attention by relative distance i − j: previous-token heads "
               "peak at 1, self heads at 0; sink heads spread over every distance (the first "
               "token is i tokens back from query i).",
               "按相对距离 i − j 的注意力：前一个词元头在 1 处最高，自身头在 0 处；"
               "汇聚头分散在各个距离上（首词元距查询 i 恰为 i 个词元）。", catalog=ZH),
    ]


def section_from(data: SurveyDocument, *, checks: list[tuple[str, float, bool]] | None = None,
                 section_id: str = "survey") -> Section:
    """The survey of ``data`` (a survey JSON) as a report :class:`Section`; ``checks``:
    (name, value, passed) rows shown first (the section then passes or fails)."""
    head = _headline(data)
    model = data["model"].get("name", "model")
    parts = [_scope_claim(data)]
    if checks:
        parts.append(table([BiText("check", "检查项"), BiText("value", "数值"),
                            BiText("result", "结果")], checks, passed_col=2, catalog=ZH))
    sink = data["sink"]
    parts.append(_sink_text(sink))
    parts.append(_tables_note())
    parts.append(_headline_tables(head))
    parts.append("<h3>" + bilingual("Roles", "角色", tag="span") + "</h3>")
    parts.append(_roles_table(data))
    parts.extend(_figures(data))
    parts.append("<h3>" + bilingual("Definitions", "定义", tag="span") + "</h3>")
    parts.append(_definitions_table(data))
    passed = None if not checks else all(ok for _, _, ok in checks)
    rows: list[tuple[str, str, bool | None]] = [(name, f"{value:.3g}", ok)
                                                for name, value, ok in (checks or [])]
    if sink["sink_percent"] is not None:
        rows.append((f"Sink% ({model})", f"{sink['sink_percent']:.1f}", None))
    return Section(id=section_id, title=f"Head survey over a corpus: {model}",
                   title_zh=f"语料上的注意力头统计：{model}", html="".join(parts),
                   passed=passed, rows=rows)


def write_page(data: SurveyDocument, path: str | Path) -> Path:
    """The survey's own page (self-contained HTML) at ``path``."""
    from attnlab.report.page import render_page

    section = section_from(data)
    return atomic_write_text(path, render_page([section], title=f"attnlab survey: "
                                               f"{data['model'].get('name', '')}"))


def headline_text(head: SurveyHeadline) -> str:
    """The headline numbers as a few lines for the terminal."""
    secs = ", ".join(f"{k} {v} s" for k, v in head["seconds"].items()
                     if k in ("survey", "probes"))
    lines = [f"{head['model']}: {head['texts']} texts, {head['tokens']} tokens, "
             f"{head['world_size']} process(es) x {head['threads']} thread(s); {secs}"]
    if head.get("sink_percent") is not None:
        lines.append(f"Sink% (Gu et al., eps 0.3, {head['sink_samples']} samples): "
                     f"{head['sink_percent']:.1f}")
    def opt(value: float | None, name: str) -> str:
        """``, NAME VALUE`` for a score the headline has, nothing for one it has not."""
        return f", {name} {value:.3f}" if value is not None else ""

    for r in head.get("induction", []):
        lines.append(f"induction L{r['layer']}.H{r['head']}: TL demo "
                     f"{r['tl_demo_induction']:.3f}"
                     + opt(r.get("olsson_prefix_matching"), "prefix matching")
                     + opt(r.get("attnlab_repeat_induction"), "attnlab repeat"))
    for p in head["previous_token"]:
        lines.append(f"previous-token L{p['layer']}.H{p['head']}: TL mul "
                     f"{p['previous_mul']:.3f}" + opt(p.get("previous_abs"), "abs")
                     + opt(p.get("share_of_texts"), "share of texts"))
    for s in head["sink"]:
        lines.append(f"sink L{s['layer']}.H{s['head']}: share of texts "
                     f"{s['share_of_texts']:.2f}, Gu importance {s['gu_importance']:.3f}")
    return "\n".join(lines)


def build(ctx: ReportContext) -> Section:
    """Survey SmolLM2 over the first :data:`REPORT_TEXTS` paragraphs of attnlab's
    docstrings, now; check that a batch equals one text at a time. Skipped (not failed)
    without the model package."""
    from attnlab.analysis.survey import Corpus, SurveyConfig, builtin_corpus, survey
    from attnlab.models import ModelNotAvailableError, load

    t0 = time.perf_counter()
    try:
        loaded = load("smollm2", progress=not ctx.quiet)
    except ModelNotAvailableError as exc:
        return Section(id="survey", title="Head survey over a corpus",
                       title_zh="语料上的注意力头统计",
                       html=f"<p class='muted'>skipped: {escape(str(exc))}</p>")
    texts = builtin_corpus()[:REPORT_TEXTS]
    ctx.log(f"survey: smollm2 over {len(texts)} texts")
    with tempfile.TemporaryDirectory(prefix="attnlab-survey-") as tmp:
        work = Path(tmp)
        result = survey(loaded, Corpus.of(texts, name="attnlab docstrings"), work / "main",
                        config=SurveyConfig(seed=ctx.seed), write_result=False, threads=1)
        few = Corpus.of(texts[:CHECK_TEXTS], name="check")
        batched = survey(loaded, few, work / "batched",
                         config=SurveyConfig(batch_size=CHECK_TEXTS, probes=False),
                         write_result=False, threads=1)
        single = survey(loaded, few, work / "single",
                        config=SurveyConfig(batch_size=1, probes=False), write_result=False,
                        threads=1)
    # the document as a page reads it back from survey.json (JSON through and through)
    data = cast("SurveyDocument", json.loads(json.dumps(result.to_json())))
    diff = max(float((batched.mean(s) - single.mean(s)).abs().max()) / (hi - lo)
               for s, (lo, hi) in zip(batched.scores, batched.ranges()))
    prof_err = float((result.profile().sum(-1) - 1.0).abs().max())
    checks = [(f"batch of {CHECK_TEXTS} texts = one at a time (max |Δ mean| / range)", diff,
               diff <= BATCH_TOL),
              ("every head's distance profile sums to 1 (max |Σ − 1|)", prof_err,
               prof_err <= PROFILE_TOL)]
    section = section_from(data, checks=checks)
    ctx.log(f"survey: {time.perf_counter() - t0:.1f} s")
    return section
