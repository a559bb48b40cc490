"""The report's attribution part: does a bright cell mean an important token, and what is
a KV cache worth — SmolLM2 on the long text, measured exactly.

1. **Importance against ablation** (:mod:`attnlab.analysis.ablation`): on the first 512
   tokens, each of 128 keys is hidden from every layer in a real forward pass, and the rise
   of the next-token loss over the last quarter's rows is the key's effect; each
   attention-based importance is read against it by Spearman's ρ, beside a random score.
2. **KV-cache eviction** (:mod:`attnlab.analysis.eviction`): on the whole trace (up to
   ``$ATTNLAB_REPORT_LONG_TOKENS``, 8,192 by default), every policy at 10 %, 25 % and 50 % of
   the cache, with random and oracle controls: the share of the later queries' attention
   that falls on evicted keys. The same pass over the weights makes the last token's
   rollout row through every layer (:class:`attnlab.tracing.attribution.RolloutRows`).
3. **Why a head attends** (:func:`attnlab.tracing.attribution.band_lift`): for the
   strongest induction and previous-token heads, which RoPE bands lift the attended keys.

The section's verdict is the measurement's own sanity (the oracle loses no more than any
policy, the numbers are finite); what the numbers say of attention is shown as found. The
numbers are also written next to the page as :data:`JSON_NAME` (an
:class:`AttributionDoc`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from attnlab._io import atomic_write_text
from attnlab.report._lanes import ahead_key
from attnlab.report.html import ReportContext, Section, bilingual, figure, fmt, table
from attnlab.report.long_contexts import (
    LONG_TRACE_KEY,
    LongTextTrace,
    max_tokens_from_env,
    strongest_heads,
)
from attnlab.report.long_text import long_text

if TYPE_CHECKING:  # NotRequired is Python 3.11's; annotations here are never evaluated
    from typing import NotRequired

    from attnlab.analysis.attribute import AblationStudy, EvictionStudy, RolloutRowStudy

__all__ = ["JSON_NAME", "AttributionDoc", "ablation_ahead", "build", "measure",
           "render", "text_ids", "trace_of"]

JSON_NAME = "attribution.json"
ABLATION_TOKENS, MAX_KEYS = 512, 128

ZH: dict[str, str] = {
    "importance": "重要性", "Spearman ρ with the effect": "与效应的 Spearman ρ",
    "Spearman ρ with |effect|": "与 |效应| 的 Spearman ρ",
    "weights": "权重", "last_layer": "最后一层", "rollout": "rollout",
    "accumulated": "累积注意力", "random": "随机",
    "policy": "策略", "h2o": "H2O", "snapkv": "SnapKV", "tova": "TOVA",
    "streaming": "StreamingLLM", "knorm": "KNorm", "oracle": "先知（读未来）",
    "keep {}": "保留 {}", "worst head at {}": "{} 时最差的头",
    "share of the cache kept": "保留的缓存比例",
    "attention lost by later queries": "后续查询损失的注意力",
    "KV-cache eviction": "KV 缓存淘汰", "importance against ablation": "重要性与消融",
    "head": "头", "band (dims)": "频带（维度）", "wavelength (tokens)": "波长（词元）",
    "share of the lift": "提升的占比",
    "check": "检查", "measured": "测得", "result": "结果",
    "the oracle loses no more than any policy": "先知的损失不超过任何策略",
    "every number finite": "每个数都是有限的",
    "best importance (ρ)": "最好的重要性（ρ）", "random baseline (ρ)": "随机基线（ρ）",
    "induction L{} H{}": "归纳头 L{} H{}", "previous-token L{} H{}": "前一个词元头 L{} H{}",
}


class Band(TypedDict):
    """One rotary band's share of a head's lift."""

    dims: list[int]  # the band's pair of dimensions
    wavelength: float | None  # in tokens (None: a band that does not rotate)
    share: float


class HeadBands(TypedDict):
    """The rotary bands that lift one head's attended keys, the largest shares first."""

    layer: int
    head: int
    lift: float  # the head's whole lift
    bands: list[Band]


class DocText(TypedDict):
    """The long text's name."""

    en: str
    zh: str


class AttributionDoc(TypedDict):
    """The part's numbers (:func:`measure`; :func:`build` adds ``text``), written as
    :data:`JSON_NAME`: the study of :func:`attnlab.analysis.attribute.attribute` (an
    :class:`~attnlab.analysis.attribute.AttributionStudy`: the model, the tokens and the
    two parts), the trace's time, the rollout row and the bands of the strongest heads."""

    model: str
    tokens: int
    trace_s: float
    ablation: NotRequired[AblationStudy]
    eviction: NotRequired[EvictionStudy]
    rollout_row: NotRequired[RolloutRowStudy]  # the last token's
    bands: NotRequired[dict[str, HeadBands]]  # role -> its strongest head's bands
    text: NotRequired[DocText]


def _heads(loaded: Any, seed: int) -> dict[str, tuple[int, int]]:
    """The strongest induction and previous-token heads, on a repeated random sequence."""
    top, _ = strongest_heads(loaded, ("repeat_induction", "previous"), seed=seed)
    return {"induction": top["repeat_induction"][:2], "previous-token": top["previous"][:2]}


def trace_of(loaded: Any, ids: list[int], traced: LongTextTrace | None = None,
             log: Any = print) -> LongTextTrace:
    """The trace of ``loaded`` on ``ids`` and its seconds: ``traced`` where its tokens are
    ``ids`` (read, not made again), else a new one."""
    from attnlab.tracing import trace

    if traced is not None and traced.trace.token_ids == list(ids):
        log(f"attribution: reading the long contexts part's trace of these {len(ids)} tokens")
        return traced
    t0 = time.perf_counter()
    t = trace(loaded, ids, merge_pieces=False)
    return LongTextTrace(t, time.perf_counter() - t0)


def measure(loaded: Any, ids: list[int], *, seed: int = 0, log: Any = print,
            ablation_tokens: int = ABLATION_TOKENS, max_keys: int = MAX_KEYS,
            traced: LongTextTrace | None = None,
            ablated: Callable[[], AblationStudy | None] | None = None) -> AttributionDoc:
    """Every number the part shows, as a JSON-ready document. ``traced``: a trace already
    made of the model on these ids (the long contexts part's, and its seconds), read
    instead of tracing again when its tokens are ``ids``. ``ablated``: the ablation study
    measured elsewhere on the same ids (:func:`ablation_ahead`), called for it once the rest
    is measured (None from it: measured here after all)."""
    from attnlab.analysis.attribute import ablation_study, attribute
    from attnlab.tracing.attribution import band_lift

    t, seconds = trace_of(loaded, ids, traced, log)
    doc: AttributionDoc = {"model": loaded.name, "tokens": t.seq_len,
                           "trace_s": round(seconds, 1)}
    if ablated is None:
        log(f"attribution: a trace of {t.seq_len} tokens; ablating {max_keys} keys")
    else:
        log(f"attribution: a trace of {t.seq_len} tokens; {max_keys} keys ablated beside")
    doc.update(attribute(loaded, t, ablation_tokens=ablation_tokens, max_keys=max_keys,
                         seed=seed, ablation=ablated is None, rollout_row=t.seq_len - 1))
    bands: dict[str, HeadBands] = {}
    rows = range(max(0, t.seq_len - 512), t.seq_len)
    for role, (layer, head) in _heads(loaded, seed).items():
        got = band_lift(t, layer, head, rows=rows)
        top = sorted(got["bands"], key=lambda b: -abs(b["share"]))[:4]
        bands[role] = {"layer": layer, "head": head, "lift": got["lift"],
                       "bands": [{"dims": b["dims"], "wavelength": b["wavelength"],
                                  "share": b["share"]} for b in top]}
    doc["bands"] = bands
    if ablated is not None:
        study = ablated()
        if study is None or study["tokens"] != min(t.seq_len, ablation_tokens):
            # (the other process could not load the model, or measured other tokens)
            study = ablation_study(loaded, t, ablation_tokens=ablation_tokens,
                                   max_keys=max_keys, seed=seed)
        doc = _ablation_first(doc, study)
    return doc


def _ablation_first(doc: AttributionDoc, study: AblationStudy) -> AttributionDoc:
    """``doc`` with ``study`` as its ``ablation``, in the place :func:`attribute` gives it
    (the JSON's order is the same whichever process measured it)."""
    out: AttributionDoc = {"model": doc["model"], "tokens": doc["tokens"],
                           "trace_s": doc["trace_s"], "ablation": study}
    out.update(doc)
    return out


def ablation_ahead(seed: int) -> AblationStudy | None:
    """The part's ablation study, alone, for a process of its own
    (:data:`attnlab.report._lanes.AHEAD`): SmolLM2 on the first :data:`ABLATION_TOKENS`
    of the long text's ids, traced here (the prefix of the long trace, made again); None
    without SmolLM2."""
    from attnlab.analysis.attribute import ablation_study
    from attnlab.models import ModelNotAvailableError, load
    from attnlab.tracing import one_stack, trace

    try:
        loaded = load("smollm2", progress=False)
    except ModelNotAvailableError:
        return None
    ids = text_ids(loaded)[:ABLATION_TOKENS]
    return ablation_study(loaded, one_stack(trace(loaded, ids, merge_pieces=False)),
                          ablation_tokens=ABLATION_TOKENS, max_keys=MAX_KEYS, seed=seed)


def text_ids(loaded: Any) -> list[int]:
    """The part's token ids: the long text's, up to ``$ATTNLAB_REPORT_LONG_TOKENS``."""
    ids: list[int] = loaded.tokenizer(long_text().text)["input_ids"][: max_tokens_from_env()]
    return ids


def _figure(doc: AttributionDoc) -> Any:
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.4))
    e = doc["eviction"]
    budgets = e["budgets"]
    for row in e["table"]:
        style = {"random": ":", "oracle": "--"}.get(row["policy"], "-")
        ax1.plot(budgets, [row[f"lost@{b:g}"] for b in budgets], style, marker="o",
                 label=row["policy"])
    ax1.set_xlabel("share of the cache kept")
    ax1.set_ylabel("attention lost by later queries")
    ax1.set_title("KV-cache eviction")
    ax1.legend(fontsize=7)
    a = doc["ablation"]
    names = list(a["rho"])
    ax2.bar(names, [a["rho"][n] for n in names], color=["C0"] * (len(names) - 1) + ["0.6"])
    ax2.axhline(0, color="0.3", lw=0.8)
    ax2.set_ylabel("Spearman ρ with the effect")
    ax2.set_title("importance against ablation")
    ax2.tick_params(axis="x", labelrotation=30, labelsize=8)
    fig.tight_layout()
    return fig


def _finite(doc: AttributionDoc) -> bool:
    vals = [v for row in doc["eviction"]["table"] for k, v in row.items()
            if k.startswith("lost@")]
    vals += [doc["ablation"]["clean_loss"]]
    if "loss" in doc["eviction"]:
        vals += [v for row in doc["eviction"]["loss"]["delta"].values() for v in row.values()]
    return all(math.isfinite(v) for v in vals)


def _best_rho(a: AblationStudy) -> float | None:
    """The best importance's ρ (None when every importance's ρ is NaN: no best)."""
    return None if a["best"] is None else a["rho"][a["best"]]


def _importance_parts(doc: AttributionDoc) -> list[str]:
    """What the section tests, and how well each importance read from the clean trace
    ranks with the measured effect of hiding a token."""
    a = doc["ablation"]
    parts = [bilingual(
        "A weight is not an importance: a large α_ij can move a small vector, and removing a "
        "token is the test. Here each importance read from the clean trace is ranked against "
        f"the measured rise of the loss when the token is hidden from every layer "
        f"({a['keys']} keys of the first {a['tokens']} tokens, loss over rows "
        f"{a['targets'][0]}–{a['targets'][1]}), and every KV-cache policy is measured exactly "
        f"on {doc['tokens']:,} tokens of {doc['text']['en']} ({doc['model']}).",
        "权重不等于重要性：大的 α_ij 可能搬运的是很小的向量，删掉词元才是检验。"
        "这里把从干净追踪读出的每种"
        f"重要性与“把该词元从每一层中隐藏后损失的上升”做排序比较（前 {a['tokens']} 个词元中的 "
        f"{a['keys']} 个键，损失取第 {a['targets'][0]}–{a['targets'][1]} 行），并在"
        f"{doc['text']['zh']}的 {doc['tokens']:,} 个词元上精确测量每种 KV 缓存策略"
        f"（{doc['model']}）。", cls="claim")]
    imp_rows = [(name, fmt(a["rho"][name]), fmt(a["rho_abs"][name])) for name in a["rho"]]
    parts.append(table(["importance", "Spearman ρ with the effect", "Spearman ρ with |effect|"],
                       imp_rows, catalog=ZH))
    best, rand = str(a["best"]), a["rho"]["random"]
    parts.append(bilingual(
        f"Best predictor of the effect: {best} (ρ = {fmt(_best_rho(a))}), against "
        f"{fmt(rand)} for a random score. The rollout row of the last token through all "
        f"layers, made in the eviction measure's pass over the weights (its own arithmetic "
        f"{doc['rollout_row']['seconds']} s), gives the first token "
        f"{fmt(doc['rollout_row']['first_token_share'])} of its mass.",
        f"最能预测效应的是 {ZH.get(best, best)}（ρ = {fmt(_best_rho(a))}），随机分数为 "
        f"{fmt(rand)}。最后一个词元穿过所有层的 rollout 行在淘汰测量对权重的同一遍计算中得出"
        f"（其自身运算用时 {doc['rollout_row']['seconds']} 秒），首个词元得到其质量的 "
        f"{fmt(doc['rollout_row']['first_token_share'])}。"))
    return parts


def _eviction_parts(e: EvictionStudy) -> list[str]:
    """The attention each KV-cache policy loses by budget, and (when measured) what that
    costs the model's loss."""
    budgets = e["budgets"]
    ev_rows = [(row["policy"], *[fmt(row[f"lost@{b:g}"]) for b in budgets])
               for row in e["table"]]
    parts = [table(["policy", *[f"keep {b:g}" for b in budgets]], ev_rows, catalog=ZH)]
    if "loss" in e:
        lo = e["loss"]
        parts.append(bilingual(
            f"What the eviction costs the model: the change of the later tokens' mean "
            f"next-token loss (full cache: {fmt(lo['full'])} nats) when the model runs on from "
            f"the prefill with only each policy's kept keys (a real forward per policy and "
            f"budget; {lo['seconds']} s).",
            f"淘汰让模型付出的代价：模型从预填充出发、只带着各策略保留的键继续运行时，后续词元平均"
            f"下一词元损失的变化（完整缓存：{fmt(lo['full'])} 奈特；每种策略和预算各做一次"
            f"真实前向，共 {lo['seconds']} 秒）。"))
        parts.append(table(["policy", *[f"keep {b:g}" for b in budgets]],
                           [(p, *[f"{row[f'{b:g}']:+.4f}" for b in budgets])
                            for p, row in lo["delta"].items()], catalog=ZH))
    return parts


def _bands_table(doc: AttributionDoc) -> str:
    """Each strongest head's share of the lift by rotary band."""
    band_rows = []
    for role, info in doc["bands"].items():
        label = f"{role} L{info['layer']} H{info['head']}"
        for b in info["bands"]:
            wl = "–" if b["wavelength"] is None else f"{b['wavelength']:,.0f}"
            band_rows.append((label, f"{b['dims'][0]}, {b['dims'][1]}", wl, fmt(b["share"])))
    return table(["head", "band (dims)", "wavelength (tokens)", "share of the lift"],
                 band_rows, catalog=ZH)


def render(doc: AttributionDoc) -> tuple[str, bool, list[tuple[str, str, bool | None]]]:
    """The section's HTML, verdict and summary rows from a :func:`measure` document."""
    a, e = doc["ablation"], doc["eviction"]
    parts = _importance_parts(doc)
    best, rand = a["best"], a["rho"]["random"]
    budgets = e["budgets"]
    parts.extend(_eviction_parts(e))
    parts.append(_bands_table(doc))
    parts.append(figure(_figure(doc),
                        "Left: the share of later queries' attention each policy loses, by the "
                        "share of the cache kept. Right: each importance's rank agreement with "
                        "the measured effect (grey: a random score).",
                        "左：各策略按保留的缓存比例损失的后续查询注意力。右：每种重要性与测得效应的"
                        "排序一致性（灰色：随机分数）。", catalog=ZH))
    oracle = next(r for r in e["table"] if r["policy"] == "oracle")
    bound = all(oracle[f"lost@{b:g}"] <= r[f"lost@{b:g}"] + 1e-12
                for b in budgets for r in e["table"])
    finite = _finite(doc)
    checks = [("the oracle loses no more than any policy", "yes" if bound else "no", bound),
              ("every number finite", "yes" if finite else "no", finite)]
    parts.append(table(["check", "measured", "result"], checks, passed_col=2, catalog=ZH))
    parts.append(bilingual(f"These numbers are also in {JSON_NAME} beside this page.",
                           f"这些数字也写在本页旁边的 {JSON_NAME} 中。", cls="muted"))
    summary = [*checks, ("best importance (ρ)", f"{best} {fmt(_best_rho(a))}", None),
               ("random baseline (ρ)", fmt(rand), None)]
    return "".join(parts), bound and finite, summary


def build(ctx: ReportContext) -> Section:
    """The part on SmolLM2 (skipped, not failed, without it)."""
    from attnlab.models import ModelNotAvailableError, load

    source = long_text()
    try:
        loaded = load("smollm2", progress=not ctx.quiet)
    except ModelNotAvailableError as exc:
        return Section("attribution", "Attribution", "归因",
                       bilingual(f"skipped smollm2: {exc}", f"已跳过 smollm2：{exc}",
                                 cls="muted"), None, [("skipped", str(exc), None)])
    # the long contexts part traced the same tokens (when it ran first, and they agree); the
    # ablation study may have run beside from the report's start (_lanes.AHEAD)
    doc = measure(loaded, text_ids(loaded), seed=ctx.seed, log=ctx.log,
                  traced=ctx.cache.pop(LONG_TRACE_KEY, None),
                  ablated=ctx.cache.pop(ahead_key("attribution"), None))
    doc["text"] = {"en": source.name_en, "zh": source.name_zh}
    atomic_write_text(Path(ctx.out_dir) / JSON_NAME, json.dumps(doc, indent=1,
                                                                ensure_ascii=False))
    body, passed, rows = render(doc)
    return Section("attribution", "Attribution", "归因", body, passed, rows)
