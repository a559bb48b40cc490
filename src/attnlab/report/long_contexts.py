"""The report's "Long contexts" section: memory and time against N, and one head over
SmolLM2's whole 8,192-token window.

The text is :func:`attnlab.report.long_text.long_text`: attnlab's own course (its ten
parts in English, then in Chinese, shipped in the package), or the ``*.txt`` files of
``$ATTNLAB_ARTICLES``.

1. **The curve.** For N = 256 … 8,192 tokens (the first N tokens of the long text,
   SmolLM2's tokenizer), two ways to see SmolLM2's attention, each point measured alone in
   a fresh process (:mod:`attnlab.report._measure`: peak resident set at the end, model
   loading included, and the time of the forward or the trace alone), interleaved per N:

   * Hugging Face eager attention with ``output_attentions=True``: it returns every
     layer's dense weights, L·H·N² floats;
   * attnlab's trace (:func:`attnlab.tracing.tracer.trace`): q, k, v and each row's
     log-sum-exp, O(N·d) per head; weights are computed on demand.

   The dense curve stops at the first N whose predicted peak (:func:`predicted_eager_bytes`)
   would pass the memory budget (:func:`dense_budget_bytes`); the section says where and
   why. The trace's peak at 8,192 tokens is marked against the target (≤ 3 GB).
2. **The map.** One SmolLM2 head — the strongest induction head, found on a repeated
   random sequence (:func:`choose_head`) — over the long text's first 8,192 tokens (the
   model's whole window), drawn as its pooled map, and a few of its exact rows (top-k keys)
   computed on demand at that length. The trace is the curve's own at that N: its process
   writes it to a temporary file once its point is measured, and the map (then the
   attribution part) opens that file instead of running the model over the same tokens
   again.

The numbers are also written next to the page as ``long_contexts.json``
(:data:`JSON_NAME`, a :class:`LongContextsDoc`). Tables and figures are shown in English
and in Chinese (:data:`ZH`).

Settings (environment variables, read when the section is built):

* ``ATTNLAB_REPORT_LONG_TOKENS`` (default 8192): the largest N; the curve takes the
  sizes of :data:`SIZES` up to it, and the map stops at that many tokens. A few minutes
  at the default on two cores; e.g. 1024 for a quick report.
* ``ATTNLAB_REPORT_DENSE_BUDGET_GB``: the dense curve's memory budget in GB (default:
  8 GB, or half of this machine's memory if that is less).
* ``ATTNLAB_ARTICLES``: a folder of ``*.txt`` texts to read instead of the course.

>>> sizes_up_to(1000)
[256, 512]
>>> dense_bytes(1024, num_layers=30, num_heads=9) / 1e9  # SmolLM2 at 1,024 tokens
1.212153856
"""

from __future__ import annotations

import math
import os
import platform
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

from attnlab._io import atomic_write_text, memory_temp_parent
from attnlab.report._long_records import (
    ExactRow,
    HeadChoice,
    KeyWeight,
    LongContextsDoc,
    MapInfo,
    Point,
)
from attnlab.report._measure import Failed, Job, Measured, run_isolated
from attnlab.report.html import BiText, ReportContext, Section, bilingual, figure, table
from attnlab.report.long_sizes import (
    BUDGET_ENV,
    DEFAULT_DENSE_BUDGET_BYTES,
    SIZES,
    TOKENS_ENV,
    _total_memory,
    dense_budget_bytes,
    dense_bytes,
    max_tokens_from_env,
    predicted_eager_bytes,
    sizes_up_to,
)
from attnlab.report.long_text import ARTICLES_ENV, LongText, long_text

__all__ = ["SIZES", "JSON_NAME", "TRACE_PEAK_TARGET_BYTES", "DEFAULT_DENSE_BUDGET_BYTES",
           "TOKENS_ENV", "BUDGET_ENV", "ARTICLES_ENV", "build", "sizes_up_to",
           "max_tokens_from_env", "dense_budget_bytes", "dense_bytes", "predicted_eager_bytes",
           "measure", "choose_head", "induction_queries", "exact_rows",
           "article_map", "render", "ZH", "LongContextsDoc", "MapInfo", "LONG_TRACE_KEY",
           "LongTextTrace"]

#: The file the numbers go to, in the report's folder.
JSON_NAME = "long_contexts.json"
#: The target for a whole trace process at 8,192 tokens (model loading included).
TRACE_PEAK_TARGET_BYTES = 3_000_000_000
TARGET_TOKENS = 8192
_MAP_BLOCKS = 128  # the map has at most this many blocks a side
_GB = 1e9

#: Measures one point: :func:`attnlab.report._measure.run_isolated`, or a stand-in.
Runner = Callable[[Job], Measured | Failed]


#: Chinese for the section's tables and figures (:mod:`attnlab.i18n` catalog).
ZH: dict[str, str] = {
    # the curve
    "attnlab trace (q, k, v, lse)": "attnlab 追踪（q、k、v、lse）",
    "HF eager, output_attentions": "HF eager 模式，output_attentions",
    "eager, predicted (not run)": "eager 模式，预测值（未运行）",
    "budget {} GB": "预算 {} GB",
    "trace target {} GB": "追踪的目标 {} GB",
    "tokens N": "词元数 N",
    "peak memory of the process (GB)": "进程的峰值内存（GB）",
    "forward / trace alone (s)": "只计前向 / 追踪（秒）",
    "eager peak (GB)": "eager 峰值（GB）",
    "eager predicted (GB)": "eager 预测峰值（GB）",
    "eager forward (s)": "eager 前向（秒）",
    "eager weights kept (GB)": "eager 保留的权重（GB）",
    "trace peak (GB)": "追踪峰值（GB）",
    "trace (s)": "追踪（秒）",
    "trace holds (MB)": "追踪保存的数据（MB）",
    "load avg at trace start": "追踪开始时的平均负载",
    "not run": "未运行",
    "predicted {}": "预测 {}",
    "trace peak at {},{} tokens ≤ {} GB": "{},{} 个词元时追踪的峰值 ≤ {} GB",
    "{} GB": "{} GB",
    "the process failed": "进程失败",
    # the map
    "layer {} head {}": "第 {} 层第 {} 个头",
    "key block ({} tokens)": "键块（每块 {} 个词元）",
    "query block ({} tokens)": "查询块（每块 {} 个词元）",
    "pooled weight (log scale)": "池化权重（对数刻度）",
    "query": "查询",
    "key": "键",
    "weight": "权重",
    "after a copy": "在副本之后",
    "row sum": "行和",
    "row (ms)": "该行耗时（ms）",
}


def _gb(x: float | None) -> str:
    return "–" if x is None else f"{x / _GB:.2f}"


# -- the curve --------------------------------------------------------------------------------


def measure(sizes: Sequence[int], *, model: str = "smollm2", text: str | Path | None = None,
            budget_bytes: int | None = None, runner: Runner = run_isolated,
            log: Callable[[str], Any] | None = None,
            keep: str | Path | None = None) -> LongContextsDoc:
    """Peak memory and time of the trace and of eager ``output_attentions`` at each of
    ``sizes`` (increasing), interleaved per N: the trace first, then eager while its
    predicted peak stays within ``budget_bytes``.

    The prediction (:func:`predicted_eager_bytes`) takes as ``base_bytes`` the last measured
    eager peak less its :func:`dense_bytes`, or, before any, the trace's peak at the same
    N. Once a point is over the budget (or an eager process fails) the dense curve stops
    for every larger N. ``runner`` does one job (:func:`attnlab.report._measure.run_isolated`:
    a fresh process each). ``keep``: a file the trace at the largest N is written to, once
    measured (the job's ``save``), for the caller to read instead of tracing those tokens
    again. Returns the JSON-ready document (see :func:`render`).
    """
    sizes = [int(n) for n in sizes]
    if not sizes or any(b <= a for a, b in zip(sizes, sizes[1:])) or sizes[0] < 1:
        raise ValueError(f"sizes must be increasing positive token counts, got {sizes}")
    budget = dense_budget_bytes() if budget_bytes is None else int(budget_bytes)
    origin = ("given" if budget_bytes is not None else
              "environment" if os.environ.get(BUDGET_ENV, "").strip() else "default")
    say = log or (lambda _msg: None)
    folder = None if text is None else str(text)
    source = long_text({ARTICLES_ENV: folder} if folder else {})
    doc: LongContextsDoc = {
        "model": model, "sizes": sizes, "dense_budget_bytes": budget,
        "dense_budget_origin": origin,
        "machine": {"cpus": os.cpu_count(), "memory_bytes": _total_memory(),
                    "platform": platform.platform(), "python": platform.python_version(),
                    "loadavg_start": list(os.getloadavg())},
        "text": {"source": source.source, "en": source.name_en, "zh": source.name_zh},
        "points": [], "dense_stop": None,
    }
    base: int | None = None
    for n in sizes:
        say(f"long contexts: trace, {n} tokens")
        job: Job = {"kind": "trace", "model": model, "tokens": n, "text": folder}
        if keep is not None and n == sizes[-1]:
            job["save"] = str(keep)
        tr = runner(job)
        point: Point = {"tokens": n, "trace": tr, "eager": None, "eager_predicted_bytes": None}
        doc["points"].append(point)
        if "error" in tr:
            say(f"long contexts: the trace at {n} tokens failed: {tr['error']}")
            continue
        doc.setdefault("num_layers", tr["num_layers"])
        doc.setdefault("num_heads", tr["num_heads"])
        doc.setdefault("num_kv_heads", tr["num_kv_heads"])
        shape = {"num_layers": tr["num_layers"], "num_heads": tr["num_heads"]}
        predicted = predicted_eager_bytes(
            n, **shape, base_bytes=tr["peak_rss_bytes"] if base is None else base)
        point["eager_predicted_bytes"] = predicted
        if doc["dense_stop"] is not None:
            continue
        if predicted > budget:
            doc["dense_stop"] = {"tokens": n, "predicted_bytes": predicted,
                                 "reason": "over budget"}
            say(f"long contexts: eager stops at {n} tokens (predicted {_gb(predicted)} GB > "
                f"budget {_gb(budget)} GB)")
            continue
        say(f"long contexts: eager output_attentions, {n} tokens")
        ea = runner({"kind": "eager", "model": model, "tokens": n, "text": folder})
        point["eager"] = ea
        if "error" in ea:
            doc["dense_stop"] = {"tokens": n, "predicted_bytes": predicted,
                                 "reason": f"failed: {ea['error']}"}
            continue
        base = ea["peak_rss_bytes"] - dense_bytes(n, **shape)
    doc["machine"]["loadavg_end"] = list(os.getloadavg())
    last = doc["points"][-1]
    peak = None if "error" in last["trace"] else last["trace"]["peak_rss_bytes"]
    at_target = last["tokens"] == TARGET_TOKENS
    doc["target"] = {"tokens": TARGET_TOKENS, "trace_peak_bytes": TRACE_PEAK_TARGET_BYTES,
                     "measured_bytes": peak if at_target else None,
                     "passed": (peak is not None and peak <= TRACE_PEAK_TARGET_BYTES
                                if at_target else None)}
    return doc


# -- the map ----------------------------------------------------------------------------------


def choose_head(loaded: Any, *, seed: int = 0, period: int = 40) -> HeadChoice:
    """The strongest induction head of an already-loaded causal model: the head that, on a
    repeated random sequence (:func:`attnlab.analysis.induction_trace`), puts the most
    weight on the token after the earlier copy of the current one."""
    top, period = strongest_heads(loaded, ("repeat_induction",), seed=seed, period=period)
    layer, head, score = top["repeat_induction"]
    return {"layer": layer, "head": head, "score": score, "role": "induction",
            "period": period, "seed": seed}


def strongest_heads(loaded: Any, scores: Sequence[str], *, seed: int = 0, period: int = 40
                    ) -> tuple[dict[str, tuple[int, int, float]], int]:
    """({score: (layer, head, value)} of the top head by each of ``scores``, the period) of
    one diagnosis of a repeated random sequence (:func:`attnlab.analysis.induction_trace`)."""
    from attnlab.analysis import diagnose, induction_trace

    t_ind = induction_trace(loaded, period=period, seed=seed)
    d = diagnose(t_ind, induction=t_ind)
    top = {name: d.top(name, 1)[0] for name in scores}
    return top, t_ind.meta["repeated_random"]["period"]


def induction_queries(ids: Sequence[int], *, count: int = 2, min_distance: int = 64,
                      spacing: int = 1) -> list[int]:
    """The last ``count`` positions i whose pair (ids[i-1], ids[i]) occurred before, at
    least ``min_distance`` tokens earlier, latest first and at least ``spacing`` apart:
    where an induction head has an earlier copy to look at.

    >>> induction_queries([5, 6, 7, 8, 5, 6, 9, 7, 8], count=2, min_distance=3)
    [8, 5]
    >>> induction_queries([5, 6, 7, 8, 5, 6, 9, 7, 8], count=2, min_distance=3, spacing=4)
    [8]
    """
    first: dict[tuple[int, int], int] = {}
    found: list[int] = []
    for i in range(1, len(ids)):
        pair = (ids[i - 1], ids[i])
        j = first.setdefault(pair, i)
        if j != i and i - j >= min_distance:
            found.append(i)
    out: list[int] = []
    for i in reversed(found):
        if len(out) == count:
            break
        if not out or out[-1] - i >= spacing:
            out.append(i)
    return out


def exact_rows(trace: Any, layer: int, head: int, queries: Sequence[int], *, k: int = 5
               ) -> list[ExactRow]:
    """Rows of one head computed on demand: each query's top-``k`` keys (position, token,
    weight, and whether the key follows an earlier copy of the query's token), the row's
    sum and the milliseconds the row took."""
    ids = trace.token_ids
    out: list[ExactRow] = []
    for q in queries:
        t0 = time.perf_counter()
        row = trace.weights_rows(layer, head, [q])[0]  # (Lk,), exact
        ms = (time.perf_counter() - t0) * 1e3
        values, keys = trace.topk(layer, head, q, min(k, trace.key_len))
        top: list[KeyWeight] = [
            {"key": int(j), "token": trace.tokens[int(j)], "weight": float(w),
             "after_copy": bool(ids is not None and 0 < j <= q and ids[j - 1] == ids[q])}
            for w, j in zip(values.tolist(), keys.tolist())]
        out.append({"query": int(q), "token": trace.tokens[q], "row_sum": float(row.sum()),
                    "milliseconds": ms, "top": top})
    return out


def article_map(trace: Any, layer: int, head: int, *, max_blocks: int = _MAP_BLOCKS,
                title: str = "") -> tuple[Any, MapInfo]:
    """One head of ``trace`` as its pooled map (at most ``max_blocks`` blocks a side; each
    block the mean over its queries of the sum over its keys), drawn on a log colour scale.

    Returns ``(figure, info)``: ``info`` has ``block`` (tokens per block), ``blocks``,
    ``tokens``, ``seconds`` (the pooled computation) and ``max_row_sum_error``.
    """
    import matplotlib as mpl
    import numpy as np
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure

    from attnlab.viz.figures import cjk_font, head_map

    t0 = time.perf_counter()
    m, rows, cols, block = head_map(trace, layer, head, max_blocks)  # pooled, on demand
    seconds = time.perf_counter() - t0
    err = float((m.sum(-1) - 1).abs().max())
    a = m.numpy().astype(np.float64)
    positive = a[a > 0]
    vmax = float(a.max()) if a.size else 1.0
    vmin = max(float(positive.min()) if positive.size else 1e-6, vmax * 1e-5)
    font = cjk_font()
    family = [font, "DejaVu Sans"] if font else ["DejaVu Sans"]
    with mpl.rc_context({"font.family": family, "axes.unicode_minus": False}):
        fig = Figure(figsize=(8.2, 7.2))
        ax = fig.subplots()
        cmap = mpl.colormaps["viridis"].with_extremes(bad="white")
        im = ax.imshow(np.ma.masked_less_equal(a, 0.0), cmap=cmap,
                       norm=LogNorm(vmin=vmin, vmax=max(vmax, vmin * 10), clip=True),
                       interpolation="nearest", aspect="equal")
        step = max(1, math.ceil(len(rows) / 16))
        ax.set_yticks(range(0, len(rows), step), [r[:24] for r in rows[::step]], fontsize=7)
        ax.set_xticks(range(0, len(cols), step), [c[:24] for c in cols[::step]], fontsize=7,
                      rotation=90)
        ax.set_xlabel(f"key block ({block} tokens)")
        ax.set_ylabel(f"query block ({block} tokens)")
        ax.set_title(title or f"layer {layer} head {head}", fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03,
                     label="pooled weight (log scale)")
        fig.tight_layout()
    info: MapInfo = {"layer": layer, "head": head, "block": block, "blocks": len(rows),
                     "tokens": trace.seq_len, "seconds": seconds, "max_row_sum_error": err}
    return fig, info


#: The key of :class:`~attnlab.report.html.ReportContext`'s cache under which the long
#: text's trace is kept for the attribution part (which reads the same tokens): a
#: :class:`LongTextTrace`.
LONG_TRACE_KEY = "long-text-trace"


class LongTextTrace(NamedTuple):
    """The long text's trace and the seconds it took."""

    trace: Any  # an AttentionTrace
    seconds: float


def _saved_trace(saved: tuple[Path, float] | None, ids: list[int], log: Callable[[str], Any]
                 ) -> tuple[Any, float] | None:
    """The trace the curve's process wrote (its file, and the seconds it took to make) and
    its seconds, read back, where it is the trace of ``ids``; else None."""
    from attnlab.tracing.attention import AttentionTrace

    if saved is None or not saved[0].is_file():
        return None
    t0 = time.perf_counter()
    # memory-mapped (the file this report's own process wrote a moment ago): each layer is
    # read from the page cache when first used, not copied and hashed again
    t = AttentionTrace.open(saved[0])
    if t.token_ids != ids or t.groups is not None:
        return None
    log(f"long contexts: the curve's trace of these {len(ids)} tokens, opened in "
        f"{time.perf_counter() - t0:.1f} s")
    return t, saved[1]


def _map_part(loaded: Any, source: LongText, max_tokens: int, seed: int,
              log: Callable[[str], Any], cache: dict[str, Any] | None = None,
              saved: tuple[Path, float] | None = None) -> tuple[Any, MapInfo]:
    """The map of the induction head over the long text. ``saved``: a trace file the curve
    wrote and the seconds the trace took there, read instead of tracing again when it holds
    the same tokens."""
    from attnlab.tracing.tracer import trace as run_trace

    head = choose_head(loaded, seed=seed)
    text = source.text
    limit = min(max_tokens, int(loaded.max_length))
    enc = loaded.tokenizer(text, return_offsets_mapping=True)
    n_text = len(enc["input_ids"])
    if n_text > limit:  # cut the text where token `limit` (counting from 0) starts
        text = text[:enc["offset_mapping"][limit][0]]
    got = _saved_trace(saved, list(loaded.tokenizer(text)["input_ids"]), log)
    if got is not None:
        t, trace_s = got
    else:
        log(f"long contexts: tracing {source.name_en} ({min(n_text, limit)} tokens)")
        t0 = time.perf_counter()
        t = run_trace(loaded, text, truncate=True, merge_pieces=False)
        trace_s = time.perf_counter() - t0
    if cache is not None:
        cache[LONG_TRACE_KEY] = LongTextTrace(t, trace_s)
    layer, h = head["layer"], head["head"]
    title = f"{loaded.name} layer {layer} head {h} (induction), {t.seq_len} tokens"
    title_zh = (f"{loaded.name} 第 {layer} 层第 {h} 个头（归纳头），{t.seq_len} 个词元")
    fig, info = article_map(t, layer, h, title=title)
    last = t.seq_len - 1
    queries = [last, *induction_queries(t.token_ids[:last - 31], count=2, spacing=32)]
    info.update({"title": title, "title_zh": title_zh,
                 "text_en": source.name_en, "text_zh": source.name_zh, "text_tokens": n_text,
                 "window": int(loaded.max_length),
                 "trace_seconds": trace_s,
                 "choice": head, "rows": exact_rows(t, layer, h, queries)})
    return fig, info


# -- the page ---------------------------------------------------------------------------------


def _minor_label(v: float, _pos: Any) -> str:
    """Minor ticks of a log axis: label only 2 and 5 times a power of ten."""
    if v <= 0:
        return ""
    lead = v / 10 ** math.floor(math.log10(v))
    return f"{v:g}" if round(lead) in (2, 5) and abs(lead - round(lead)) < 1e-6 else ""


def _curve_figure(doc: LongContextsDoc) -> Any:
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullFormatter

    pts = doc["points"]
    fig = Figure(figsize=(10, 3.8))
    ax_m, ax_t = fig.subplots(1, 2)
    tr = [(p["tokens"], p["trace"]) for p in pts if "error" not in p["trace"]]
    ea = [(p["tokens"], p["eager"]) for p in pts if p["eager"] and "error" not in p["eager"]]
    pred = [(p["tokens"], p["eager_predicted_bytes"]) for p in pts
            if p["eager_predicted_bytes"] is not None and not p["eager"]]
    if ea and pred:
        pred = [(ea[-1][0], ea[-1][1]["peak_rss_bytes"]), *pred]
    panels: tuple[tuple[Any, Literal["peak_rss_bytes", "forward_seconds"], float], ...] = (
        (ax_m, "peak_rss_bytes", _GB), (ax_t, "forward_seconds", 1.0))
    for ax, key, unit in panels:
        if tr:
            ax.plot([n for n, _ in tr], [r[key] / unit for _, r in tr], "o-", color="#3451b2",
                    label="attnlab trace (q, k, v, lse)")
        if ea:
            ax.plot([n for n, _ in ea], [r[key] / unit for _, r in ea], "s-", color="#b3261e",
                    label="HF eager, output_attentions")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(doc["sizes"], [f"{n:,}" for n in doc["sizes"]])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(_minor_label))
        ax.tick_params(axis="y", which="minor", labelsize=7)
        ax.set_xlabel("tokens N")
        ax.grid(True, which="both", alpha=0.3)
    if pred:
        ax_m.plot([n for n, _ in pred], [b / _GB for _, b in pred], "s:", color="#b3261e",
                  alpha=0.5, label="eager, predicted (not run)")
    ax_m.axhline(doc["dense_budget_bytes"] / _GB, color="#777", ls="--", lw=1,
                 label=f"budget {_gb(doc['dense_budget_bytes'])} GB")
    ax_m.axhline(TRACE_PEAK_TARGET_BYTES / _GB, color="#137a3a", ls="--", lw=1,
                 label="trace target 3 GB")
    ax_m.set_ylabel("peak memory of the process (GB)")
    ax_t.set_ylabel("forward / trace alone (s)")
    ax_m.legend(fontsize=7)
    ax_t.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _curve_table(doc: LongContextsDoc) -> str:
    rows = []
    for p in doc["points"]:
        tr, ea = p["trace"], p["eager"]
        if ea is None:
            pred = p["eager_predicted_bytes"]
            eager: list[str | BiText] = ["not run", f"predicted {_gb(pred)}" if pred else "–",
                                         "–", "–"]
        elif "error" in ea:
            eager = [_failed(ea["error"]), _gb(p["eager_predicted_bytes"]), "–", "–"]
        else:
            eager = [_gb(ea["peak_rss_bytes"]), _gb(p["eager_predicted_bytes"]),
                     f"{ea['forward_seconds']:.1f}", _gb(ea["kept_bytes"])]
        if "error" in tr:
            trace = [_failed(tr["error"]), "–", "–", "–"]
        else:
            trace = [_gb(tr["peak_rss_bytes"]), f"{tr['forward_seconds']:.1f}",
                     f"{tr['kept_bytes'] / 1e6:.0f}", f"{tr['loadavg'][0]:.1f}"]
        rows.append([f"{p['tokens']:,}", *eager, *trace])
    return table(["N", "eager peak (GB)", "eager predicted (GB)", "eager forward (s)",
                  "eager weights kept (GB)", "trace peak (GB)", "trace (s)",
                  "trace holds (MB)", "load avg at trace start"], rows, catalog=ZH)


def _failed(error: str) -> BiText:
    return BiText(f"failed: {error[:60]}", f"失败：{error[:60]}")


_ORIGIN = {
    "default": ("8 GB, or half of this machine's memory if that is less",
                "8 GB，若本机内存的一半更少则取一半"),
    "environment": (f"set by {BUDGET_ENV}", f"由 {BUDGET_ENV} 设定"),
    "given": ("given by the caller", "由调用者给定"),
}


def _stop_text(doc: LongContextsDoc) -> str:
    origin_en, origin_zh = _ORIGIN.get(doc.get("dense_budget_origin", "given"),
                                       _ORIGIN["given"])
    budget = _gb(doc["dense_budget_bytes"])
    stop = doc["dense_stop"]
    rule = (f"predicted peak = the model and runtime (measured: the last eager peak less its "
            f"attention) + 4 B × N² × (L·H + 2·H + 1), the weights of all L·H heads kept "
            f"for output_attentions plus one layer's scores and the causal mask; budget "
            f"{budget} GB: {origin_en}")
    rule_zh = (f"预测峰值 = 模型与运行时（实测：上一个 eager 峰值减去其注意力部分）+ 4 B × N² × "
               f"(L·H + 2·H + 1)，即为 output_attentions 保留的全部 L·H 个头的权重，加上一层的"
               f"分数与因果掩码；预算 {budget} GB：{origin_zh}")
    if stop is None:
        return bilingual(f"The dense curve ran at every N: {rule}.",
                         f"稠密曲线在每个 N 上都跑完了：{rule_zh}。", cls="claim")
    n, pred = f"{stop['tokens']:,}", _gb(stop["predicted_bytes"])
    if stop["reason"] == "over budget":
        return bilingual(
            f"The dense curve stops at N = {n}: its predicted peak, {pred} GB, passes the "
            f"budget ({rule}). At 8,192 tokens the weights alone would be "
            f"{_gb(dense_bytes(8192, num_layers=doc['num_layers'], num_heads=doc['num_heads']))}"
            " GB.",
            f"稠密曲线停在 N = {n}：预测峰值 {pred} GB 超过预算（{rule_zh}）。在 8,192 个词元"
            f"时，仅注意力权重就要 "
            f"{_gb(dense_bytes(8192, num_layers=doc['num_layers'], num_heads=doc['num_heads']))}"
            " GB。", cls="claim")
    return bilingual(f"The dense curve stops at N = {n}: the eager process {stop['reason']}.",
                     f"稠密曲线停在 N = {n}：eager 进程 {stop['reason']}。", cls="claim")


def _machine_text(doc: LongContextsDoc) -> str:
    m = doc["machine"]
    mem = _gb(m.get("memory_bytes"))
    la0 = ", ".join(f"{x:.2f}" for x in m["loadavg_start"])
    la1 = ", ".join(f"{x:.2f}" for x in m.get("loadavg_end", m["loadavg_start"]))
    return bilingual(
        f"Measured on {m['cpus']} CPU cores, {mem} GB of memory ({m['platform']}); load "
        f"average (1, 5, 15 min) {la0} at the start and {la1} at the end: the machine was "
        "shared, so times are this run's, not comparable between runs. Peak memory is the "
        "whole process's resident peak (VmHWM), model loading included; times are the "
        "forward or the trace alone. Both runs skip the vocabulary head.",
        f"测量环境：{m['cpus']} 个 CPU 核、{mem} GB 内存（{m['platform']}）；平均负载（1、5、15 "
        f"分钟）开始时 {la0}，结束时 {la1}：机器是共享的，时间只代表这一次运行，不同运行之间不可"
        "比较。峰值内存是整个进程的常驻峰值（VmHWM），包含加载模型；时间只计前向或追踪本身。"
        "两者都跳过词表输出层。", cls="muted")


def _map_html(info: MapInfo, fig: Any) -> str:
    head = info["choice"]
    layer, h, block = info["layer"], info["head"], info["block"]
    catalog = dict(ZH)
    if info.get("title") and info.get("title_zh"):
        catalog[info["title"]] = info["title_zh"]
    parts = [figure(
        fig,
        f"Layer {layer} head {h}, the strongest induction head (score {head['score']:.2f} on "
        f"{head['period']} random tokens repeated), over the first {info['tokens']:,} tokens "
        f"of {info['text_en']} (of {info['text_tokens']:,}; the model's window is "
        f"{info['window']:,}) as its pooled map: blocks of {block} tokens, each the mean "
        f"over its queries of the sum over its keys (rows sum to 1, max |error| "
        f"{info['max_row_sum_error']:.1e}); colour on a log scale, white = masked "
        f"(causal). Computed on demand from q, k and the log-sum-exp in "
        f"{info['seconds']:.1f} s; the trace took {info['trace_seconds']:.0f} s.",
        f"第 {layer} 层第 {h} 个头：最强的归纳头（在重复两次的 {head['period']} 个随机词元上"
        f"的分数为 {head['score']:.2f}），覆盖{info['text_zh']}的前 {info['tokens']:,} 个词元"
        f"（共 {info['text_tokens']:,} 个；模型的窗口为 {info['window']:,}）"
        f"的池化图：每块 {block} 个词元，每块取其查询的平均、键的求和（每行之和为 1，最大误差 "
        f"{info['max_row_sum_error']:.1e}）；颜色为对数刻度，白色为被（因果）掩码遮住的部分。由 q、"
        f"k 与 log-sum-exp 按需计算，用时 {info['seconds']:.1f} 秒；追踪用时 "
        f"{info['trace_seconds']:.0f} 秒。", catalog=catalog)]
    parts.append(bilingual(
        "Exact rows at this length, computed on demand: for each query, its five largest "
        "weights; 'after a copy' marks a key that follows an earlier occurrence of the "
        "query's token, where an induction head should look.",
        "在这个长度下按需算出的精确行：每个查询的前五大权重；“在副本之后”标出紧跟在查询词元"
        "早先一次出现之后的键，归纳头应当看向那里。"))
    rows = []
    for r in info["rows"]:
        for i, top in enumerate(r["top"]):
            rows.append([f"{r['query']} {r['token']!r}" if i == 0 else "",
                         f"{top['key']} {top['token']!r}", f"{top['weight']:.4f}",
                         "yes" if top["after_copy"] else "",
                         f"{r['row_sum']:.6f}" if i == 0 else "",
                         f"{r['milliseconds']:.0f}" if i == 0 else ""])
    parts.append(table(["query", "key", "weight", "after a copy", "row sum", "row (ms)"],
                       rows, catalog=ZH))
    return "".join(parts)


def render(doc: LongContextsDoc, map_fig: Any = None) -> tuple[str, bool | None,
                                                              list[tuple[str, str,
                                                                         bool | None]]]:
    """The section's HTML, its verdict and its summary rows from a :func:`measure`
    document (with ``doc["map"]`` and its figure ``map_fig`` when the map was drawn)."""
    parts = [bilingual(
        "A trace keeps what determines attention, not its N² image: per head q, k, v and each "
        "row's log-sum-exp, O(N·d) memory; any weight is exp(s_ij − lse_i), computed when "
        "asked. Hugging Face's output_attentions returns every weight instead. Each point "
        "below is a fresh process, the two kinds interleaved per N, on the first N tokens "
        f"of {doc['text']['en']} ({doc['model']}).",
        "追踪保存的是决定注意力的东西，而不是它的 N² 图像：每个头的 q、k、v 与每行的 "
        "log-sum-exp，内存 O(N·d)；任一权重都是 exp(s_ij − lse_i)，需要时再算。Hugging Face "
        "的 output_attentions 则返回全部权重。下面每个点都是一个新进程，两种方式按 N 交替运行，"
        f"输入为{doc['text']['zh']}的前 N 个词元（{doc['model']}）。", cls="claim")]
    parts.append(_machine_text(doc))
    parts.append(_curve_table(doc))
    if "num_layers" in doc:
        parts.append(_stop_text(doc))
    parts.append(figure(_curve_figure(doc),
                        "Peak memory and time against N (log scales). Dotted: eager's "
                        "predicted peak where it was not run.",
                        "峰值内存与时间随 N 的变化（对数坐标）。虚线：未运行处 eager 的预测峰值。",
                        catalog=ZH))
    target = doc["target"]
    summary: list[tuple[str, str, bool | None]] = []
    if target["passed"] is not None:
        check = f"trace peak at {target['tokens']:,} tokens ≤ 3 GB"
        got = ("the process failed" if target["measured_bytes"] is None
               else f"{_gb(target['measured_bytes'])} GB")
        parts.append(table(["check", "measured", "result"], [(check, got, target["passed"])],
                           passed_col=2, catalog=ZH))
        summary.append((check, got, target["passed"]))
    else:
        parts.append(bilingual(
            f"The curve stopped below {target['tokens']:,} tokens, so the trace's 3 GB target "
            "is not checked here.",
            f"曲线未到 {target['tokens']:,} 个词元，这里不检查追踪的 3 GB 目标。",
            cls="muted"))
    stop = doc["dense_stop"]
    summary.append(("dense curve stopped at N", "–" if stop is None else str(stop["tokens"]),
                    None))
    if doc.get("map") is not None and map_fig is not None:
        parts.append(_map_html(doc["map"], map_fig))
    parts.append(bilingual(f"These numbers are also in {JSON_NAME} beside this page.",
                           f"这些数字也写在本页旁边的 {JSON_NAME} 中。", cls="muted"))
    return "".join(parts), target["passed"], summary


# -- the section ------------------------------------------------------------------------------


def _skipped(why_en: str, why_zh: str) -> Section:
    return Section(id="long-contexts", title="Long contexts", title_zh="长上下文",
                   html=bilingual(why_en, why_zh, cls="muted"), passed=None,
                   rows=[("skipped", why_en, None)])


def build(ctx: ReportContext) -> Section:
    """The curve to ``$ATTNLAB_REPORT_LONG_TOKENS`` (default 8,192) and the map of one head
    over the long text (:func:`attnlab.report.long_text.long_text`); skipped (not failed)
    only without SmolLM2."""
    import json

    from attnlab.models import ModelNotAvailableError, load
    from attnlab.tracing.budget import estimate_trace_bytes

    max_tokens = max_tokens_from_env()
    source = long_text()  # a bad $ATTNLAB_ARTICLES is an error naming it
    try:
        loaded = load("smollm2", progress=not ctx.quiet)
    except ModelNotAvailableError as exc:
        return _skipped(f"skipped smollm2: {exc}", f"已跳过 smollm2：{exc}")
    folder = None if source.source == "course" else source.source
    # the curve's process writes its largest trace here, in memory where there is room (on
    # a slow disk the write alone took 12 s): the map and attribution map it back
    where = memory_temp_parent(estimate_trace_bytes(loaded, max_tokens).kept)
    with tempfile.TemporaryDirectory(prefix="attnlab-long-", dir=where) as tmp:
        kept = Path(tmp) / "trace.safetensors"
        doc = measure(sizes_up_to(max_tokens), text=folder, log=ctx.log, keep=kept)
        doc["settings"] = {TOKENS_ENV: max_tokens, ARTICLES_ENV: folder}
        last = doc["points"][-1]["trace"]
        saved = None if "error" in last else (kept, last["forward_seconds"])
        map_fig, doc["map"] = _map_part(loaded, source, max_tokens, ctx.seed, ctx.log,
                                        ctx.cache, saved)
    atomic_write_text(Path(ctx.out_dir) / JSON_NAME, json.dumps(doc, indent=1,
                                                                ensure_ascii=False))
    body, passed, rows = render(doc, map_fig)
    return Section(id="long-contexts", title="Long contexts", title_zh="长上下文", html=body,
                   passed=passed, rows=rows)
