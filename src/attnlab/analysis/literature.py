"""Head scores exactly as the literature defines them, next to attnlab's own.

A score read from a paper or a tool means something only when it is computed the way that
source computes it: on the same inputs, over the same query rows, with the same
normalisation. Each function here states its definition and cites its source; the
registry :data:`DEFINITIONS` lists them all (``attnlab diagnose --definition NAME``).

Sources, as read:

* **TransformerLens head detector** (Nanda and Bloom, TransformerLens, 2022),
  ``transformer_lens/head_detector.py`` at commit ``4cd36aae``: ``detect_head``,
  ``get_previous_token_head_detection_pattern``,
  ``get_duplicate_token_head_detection_pattern``,
  ``get_induction_head_detection_pattern``, ``compute_head_attention_similarity_score``.
* **TransformerLens main demonstration** (``demos/Main_Demo.ipynb``, same commit): the
  induction score of ``induction_score_hook``.
* **Olsson et al. 2022**, "In-context Learning and Induction Heads" (Transformer Circuits
  Thread): the prefix-matching score.
* **Gu et al. 2025**, "When Attention Sink Emerges in Language Models: An Empirical View"
  (ICLR 2025, arXiv:2410.10781): token importance, the sink criterion with ε = 0.3,
  Sink%.

Every score comes in the form that takes attention patterns — dense tensors
``(..., N, N)``, rows summing to 1, which is how the sources state them
(:mod:`attnlab.analysis.detection`, re-exported here) — and, where a model is needed, in a
form that takes an already-loaded model (duck-typed like
:class:`attnlab.models.LoadedModel`) and builds the inputs the source uses, run as padded
batches by :func:`attnlab.tracing.runner.for_each_layer`. :func:`text_scores` computes the
text-based scores from an :class:`~attnlab.tracing.AttentionTrace` streamed over tiles of
rows (no N x N tensor), for long texts, with the sums of :mod:`attnlab.analysis.sums`:
where a literature score is one of attnlab's (TransformerLens's ``"mul"`` measure is
attnlab's share of mass), it is computed by attnlab's code, not restated. Everything is
computed in float64 from float32 weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import torch
from torch import Tensor

from attnlab._text import too_long
from attnlab.analysis._records import DemoInductionInfo, PrefixMatchingInfo
from attnlab.analysis.detection import (
    EPSILON,
    ERROR_MEASURES,
    HEAD_NAMES,
    abs_from_sums,
    demo_induction_stripe,
    detection_pattern,
    duplicate_token_pattern,
    head_similarity,
    induction_pattern,
    prefix_matching_score,
    previous_token_pattern,
    sink_percent,
    token_importance,
)
from attnlab.analysis.heads import induction_trace, repeat_induction
from attnlab.analysis.scores import head_scores, scan
from attnlab.analysis.sums import SUMS, Occurrences, scores_from_sums
from attnlab.tracing.runner import attention_patterns, check_loaded, for_each_layer, vocab_size
from attnlab.tracing.tracer import trace as run_trace

__all__ = [
    "DEFINITIONS", "EPSILON", "ERROR_MEASURES", "HEAD_NAMES", "Definition", "GuSinkRate",
    "abs_from_sums", "attention_patterns", "compute_definitions", "demo_induction_score",
    "demo_induction_stripe", "detect_head", "detection_pattern", "duplicate_token_pattern",
    "for_each_layer", "gu_sink_rate", "head_similarity", "induction_pattern",
    "literature_ids", "prefix_matching", "prefix_matching_score", "previous_token_pattern",
    "sink_percent", "text_scores", "token_importance",
]

# --------------------------------------------------------------------------------------
# the inputs the sources use
# --------------------------------------------------------------------------------------


def literature_ids(tokenizer: Any, text: str) -> list[int]:
    """The token ids TransformerLens's ``model.to_tokens(text)`` gives: the tokenizer's
    BOS token, then the text's tokens without the tokenizer's own special tokens. A
    tokenizer with no BOS token (BERT-style) gives its usual encoding instead, with its
    own special tokens (``[CLS] ... [SEP]``); an attnlab run's tokenizer its ``encode``
    (which starts with its ``<bos>``)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not callable(tokenizer) or not hasattr(tokenizer, "convert_ids_to_tokens"):
        return [int(i) for i in tokenizer.encode(text)]
    bos = getattr(tokenizer, "bos_token_id", None)
    if isinstance(bos, int):
        return [bos] + [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]
    return [int(i) for i in tokenizer(text, add_special_tokens=True)["input_ids"]]


# --------------------------------------------------------------------------------------
# the sources' procedures on a model
# --------------------------------------------------------------------------------------


def detect_head(model: Any, seq: str | Sequence[str], detection: str | Tensor, *,
                error_measure: str = "mul", exclude_bos: bool = False,
                exclude_current_token: bool = False) -> Tensor:
    """TransformerLens ``detect_head(model, seq, detection_pattern, ...)``: (L, H) float64.

    A string becomes the model's input as ``model.to_tokens`` makes it (BOS first, see
    :func:`literature_ids`); its length ``n`` must satisfy ``1 < n < max_length``
    (TransformerLens asserts ``1 < n < n_ctx``). ``detection`` is a name of
    :data:`HEAD_NAMES` (the pattern is built from the string's tokens) or an (n, n) lower
    triangular tensor. Each head's pattern is scored by :func:`head_similarity`. A list of
    strings gives the mean of the strings' scores.

    One difference, stated: for a list, TransformerLens (at 4cd36aae) passes only the
    detection pattern on to each string, so its list scores always use ``"mul"`` without
    exclusions whatever was asked; here each string is scored with the arguments given
    (the same numbers for ``"mul"`` without exclusions).
    """
    check_loaded(model)
    if isinstance(seq, (list, tuple)):
        if not seq:
            raise ValueError("seq is an empty list: give at least one string")
        return torch.stack([detect_head(model, s, detection, error_measure=error_measure,
                                        exclude_bos=exclude_bos,
                                        exclude_current_token=exclude_current_token)
                            for s in seq]).mean(0)
    if not isinstance(seq, str):
        raise TypeError(f"seq must be a str or a list of str, got {type(seq).__name__}")
    ids = literature_ids(model.tokenizer, seq)
    if not 1 < len(ids) < int(model.max_length):
        raise ValueError(f"the sequence is {len(ids)} tokens; it must be non-empty and fit "
                         f"within the model's context (1 < n < {model.max_length})")
    pattern = (detection_pattern(detection, ids) if isinstance(detection, str)
               else detection)
    (patterns,) = attention_patterns(model, [ids])
    return head_similarity(patterns, pattern, error_measure=error_measure,
                           exclude_bos=exclude_bos,
                           exclude_current_token=exclude_current_token)


def _id_pool(model: Any, low: int, high: int) -> tuple[Tensor | None, list[int], bool]:
    """The ids random tokens are drawn from: ``[low, high)`` as is when the vocabulary
    holds it (returns None as pool: draw with ``randint(low, high)``), else the same
    proportions of the vocabulary ``V``, ``[V // 10, V)`` (TransformerLens's 1,000-10,000
    is 10 % to 100 % of 10,000) without the tokenizer's special ids. Returns (pool or
    None, [lo, hi), scaled)."""
    vocab = vocab_size(model)
    if vocab is None or vocab >= high:
        return None, [low, high], False
    lo = vocab // 10
    special = set(getattr(model.tokenizer, "all_special_ids", None) or [])
    pool = torch.tensor([i for i in range(lo, vocab) if i not in special], dtype=torch.long)
    if pool.numel() < 2:
        raise ValueError(f"{model.name}'s vocabulary ({vocab}) is too small for random tokens")
    return pool, [lo, vocab], True


def demo_induction_score(model: Any, *, batch: int = 10, seq_len: int = 50,
                         low: int = 1000, high: int = 10000, seed: int = 0
                         ) -> tuple[Tensor, DemoInductionInfo]:
    """The induction score of TransformerLens's main demonstration: ``batch`` sequences of
    ``seq_len`` random token ids drawn uniformly with replacement from ``[low, high)``
    (``torch.randint(1000, 10000, (10, 50))``), each repeated twice, no BOS; the score of
    a head is :func:`demo_induction_stripe` averaged over the batch. Returns (L, H) float64
    and what was used.

    Where the model cannot take the demo as is, it is scaled, and the returned info says
    so: ids from ``[V // 10, V)`` without the special ids for a vocabulary ``V < high``;
    ``seq_len`` cut to half the model's context when ``2 seq_len`` exceeds it. ``seed`` seeds a
    ``torch.Generator`` (the demo uses the global generator).
    """
    check_loaded(model)
    pool, span, scaled_ids = _id_pool(model, low, high)
    n = min(seq_len, int(model.max_length) // 2)
    if n < 2:
        raise ValueError(f"{model.name} accepts {model.max_length} tokens: too few for a "
                         "repeated sequence")
    g = torch.Generator().manual_seed(seed)
    if pool is None:
        tokens = torch.randint(low, high, (batch, n), generator=g)
    else:
        tokens = pool[torch.randint(0, pool.numel(), (batch, n), generator=g)]
    repeated = torch.cat([tokens, tokens], dim=1)
    pats = torch.stack(attention_patterns(model, repeated.tolist()))  # (B, L, H, 2n, 2n)
    score = demo_induction_stripe(pats, n).mean(0)
    info: DemoInductionInfo = {"batch": batch, "seq_len": n, "ids": span, "seed": seed,
                               "bos": False, "scaled": scaled_ids or n != seq_len}
    return score, info


def prefix_matching(model: Any, *, period: int = 25, repeats: int = 4, batch: int = 10,
                    low: int = 1000, high: int = 10000, seed: int = 0
                    ) -> tuple[Tensor, PrefixMatchingInfo]:
    """Olsson et al.'s prefix-matching score on a model: ``batch`` sequences, each the
    model's BOS token (when its tokenizer has one) then ``period`` distinct random ids
    from ``[low, high)`` (scaled like :func:`demo_induction_score` for a small
    vocabulary; ``period`` cut to the ids there are and to the model's context, which the
    returned info says) repeated ``repeats`` times; :func:`prefix_matching_score` averaged over the
    batch. Returns (L, H) float64 and what was used. The sizes are attnlab's defaults, not
    the paper's: any can be given."""
    check_loaded(model)
    pool, span, scaled = _id_pool(model, low, high)
    if pool is None:
        pool = torch.arange(low, high)
    bos = getattr(model.tokenizer, "bos_token_id", None)
    prefix = [bos] if isinstance(bos, int) else []
    given = period
    period = min(period, pool.numel(), (int(model.max_length) - len(prefix)) // repeats)
    if period < 2:
        raise ValueError(f"{model.name} cannot take {repeats} repeats of 2 tokens or more "
                         f"(context {model.max_length}, {pool.numel()} ids to draw from)")
    g = torch.Generator().manual_seed(seed)
    seqs = []
    for _ in range(batch):
        r = pool[torch.randperm(pool.numel(), generator=g)[:period]].tolist()
        seqs.append(prefix + r * repeats)
    pats = torch.stack(attention_patterns(model, seqs))
    score = prefix_matching_score(pats, period=period, repeats=repeats,
                                  start=len(prefix)).mean(0)
    info: PrefixMatchingInfo = {"batch": batch, "period": period, "repeats": repeats,
                                "ids": span, "seed": seed, "bos": bool(prefix),
                                "scaled": scaled or period != given}
    return score, info


class GuSinkRate(TypedDict):
    """Gu et al.'s Sink% on a model (:func:`gu_sink_rate`), and what it was counted on."""

    sink_percent: float
    per_head: Tensor  # (L, H) float64: the share of the samples with a sink
    importance: Tensor  # (L, H): the first token's mean importance alpha_1
    samples: int  # the texts of ``tokens`` tokens or more
    skipped: int  # the shorter ones
    tokens: int
    epsilon: float


def gu_sink_rate(model: Any, texts: Sequence[str], *, tokens: int = 64,
                 epsilon: float = EPSILON, batch_size: int = 8) -> GuSinkRate:
    """Gu et al.'s Sink% on a model: each text's first ``tokens`` tokens (BOS first, see
    :func:`literature_ids`; texts shorter than ``tokens`` are skipped, as the metric is
    defined on inputs of one length), the first token's importance
    (:func:`token_importance`) in every layer and head, and the share with importance
    above ``epsilon``. Returns a :class:`GuSinkRate`."""
    check_loaded(model)
    inputs = []
    skipped = 0
    for t in texts:
        ids = literature_ids(model.tokenizer, t)
        if len(ids) < tokens:
            skipped += 1
        else:
            inputs.append(ids[:tokens])
    if not inputs:
        raise ValueError(f"no text has {tokens} tokens or more ({skipped} too short)")
    alphas = []
    for b0 in range(0, len(inputs), batch_size):
        for p in attention_patterns(model, inputs[b0:b0 + batch_size]):
            alphas.append(token_importance(p, causal=bool(model.causal))[..., 0])
    a = torch.stack(alphas)  # (S, L, H)
    return {"sink_percent": sink_percent(a, epsilon=epsilon),
            "per_head": (a > epsilon).double().mean(0), "importance": a.mean(0),
            "samples": len(inputs), "skipped": skipped, "tokens": tokens,
            "epsilon": epsilon}


# --------------------------------------------------------------------------------------
# the text-based scores of one trace, streamed (any length)
# --------------------------------------------------------------------------------------


def text_scores(trace: Any, *, tile_rows: int | None = None) -> dict[str, Tensor]:
    """The text-based literature scores of a self-attention trace of the input the source
    uses (for TransformerLens, BOS first: trace :func:`literature_ids`), name -> (L, H)
    float64, streamed over tiles of rows (O(tile x N) memory, any length):

    * ``tl-previous-mul``, ``tl-duplicate-mul``, ``tl-induction-mul``: TransformerLens's
      ``"mul"`` scores without exclusions, ``hits / mass`` (equal to attnlab's
      ``previous``, ``duplicate``, ``induction``);
    * ``tl-*-abs`` (causal traces only): ``1 - round(sum|A - P| / N, 3)``, using that for a
      0/1 pattern ``P`` and weights in [0, 1], ``sum|A - P| = mass - 2 hits + |P|``;
    * ``gu-sink``: the first token's importance ``alpha_1`` (:func:`token_importance`).
    """
    n, lk = trace.seq_len, trace.key_len
    if n != lk:
        raise ValueError(f"text_scores needs a self-attention trace, got {n} queries and "
                         f"{lk} keys")
    ids = getattr(trace, "token_ids", None)
    if ids is None or len(ids) != n:
        raise ValueError("text_scores needs the trace's token ids (trace token ids, or a "
                         "text with its tokenizer)")
    sums, _, _ = scan(trace, token_ids=ids, tile_rows=tile_rows)
    s = dict(zip(SUMS, sums.unbind(-1)))
    own = scores_from_sums(sums, True)
    out = {"tl-previous-mul": own["previous"], "tl-duplicate-mul": own["duplicate"],
           "tl-induction-mul": own["induction"]}
    if trace.causal:
        dup = float(Occurrences(torch.as_tensor(ids)).rank.sum())  # ones of the pattern
        for key, size in (("previous", n - 1), ("duplicate", dup), ("induction", dup)):
            out[f"tl-{key}-abs"] = abs_from_sums(s["mass"], s[key], size, n)
    # every query sees key 0 (itself when causal, all keys otherwise): alpha_1 is the
    # first token's mass over the N queries
    out["gu-sink"] = s["first"] / n
    return out


# --------------------------------------------------------------------------------------
# the registry
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Definition:
    """One score: its name, what it is (English and Chinese), its source, and on what it
    is computed: ``"text"`` (the given text; BOS first for the literature ones) or
    ``"probe"`` (generated random tokens)."""

    name: str
    summary: str
    summary_zh: str
    source: str
    on: str


_TL = "TransformerLens head_detector.py (4cd36aae)"
_OWN = "attnlab.analysis.scores"

#: Every score ``attnlab diagnose --definition`` knows, by name.
DEFINITIONS: dict[str, Definition] = {d.name: d for d in (
    Definition("tl-previous-mul", "detect_head previous_token_head, 'mul': share of "
               "attention on the token before", "detect_head previous_token_head，'mul'："
               "落在前一个词元上的注意力占比", _TL, "text"),
    Definition("tl-previous-abs", "detect_head previous_token_head, 'abs': "
               "1 - round(sum|A - P| / N, 3), one minus the mean row distance to the pattern",
               "detect_head previous_token_head，'abs'：1 - round(sum|A - P| / N, 3)，"
               "即 1 减去与检测模式的平均行距离", _TL, "text"),
    Definition("tl-duplicate-mul", "detect_head duplicate_token_head, 'mul': share on "
               "earlier copies of the query's token", "detect_head duplicate_token_head，"
               "'mul'：落在查询词元的先前副本上的注意力占比", _TL, "text"),
    Definition("tl-duplicate-abs", "detect_head duplicate_token_head, 'abs': one minus "
               "the mean row distance to the pattern", "detect_head duplicate_token_head，"
               "'abs'：1 减去与检测模式的平均行距离", _TL, "text"),
    Definition("tl-induction-mul", "detect_head induction_head, 'mul': share on the "
               "tokens right after earlier copies", "detect_head induction_head，'mul'："
               "落在先前副本之后那个词元上的注意力占比", _TL, "text"),
    Definition("tl-induction-abs", "detect_head induction_head, 'abs': one minus the "
               "mean row distance to the pattern", "detect_head induction_head，'abs'："
               "1 减去与检测模式的平均行距离", _TL, "text"),
    Definition("tl-demo-induction", "TransformerLens main demo: 10 x 50 random ids in "
               "[1000, 10000) repeated twice, no BOS, mean of the diagonal at offset 1 - 50",
               "TransformerLens 主演示：10 条 50 个 [1000, 10000) 内的随机 id，重复两次，"
               "无 BOS，取偏移 1 - 50 的对角线均值",
               "TransformerLens demos/Main_Demo.ipynb (4cd36aae)", "probe"),
    Definition("olsson-prefix-matching", "Olsson et al. 2022 prefix matching: attention "
               "from a repeated token to the token after its earlier occurrences",
               "Olsson 等 2022 的前缀匹配：重复出现的词元对其先前出现位置之后那个词元"
               "的注意力", "Olsson et al. 2022, In-context Learning and Induction Heads",
               "probe"),
    Definition("gu-sink", "Gu et al. 2025 importance of the first token: its attention "
               "summed over the queries that see it, over their number (sink when > 0.3)",
               "Gu 等 2025 的首词元重要性：看得见它的查询对它的注意力之和除以查询数"
               "（> 0.3 即为汇聚）", "Gu et al. 2025, When Attention Sink Emerges "
               "(arXiv:2410.10781)", "text"),
    Definition("entropy", "mean row entropy in nats", "每行熵的均值（奈特）", _OWN, "text"),
    Definition("max_weight", "mean largest weight of a row", "每行最大权重的均值", _OWN,
               "text"),
    Definition("sink", "share of attention on the first token, queries after it",
               "首词元之后的查询落在首词元上的注意力占比", _OWN, "text"),
    Definition("previous", "share of attention on the token before (= TransformerLens "
               "'mul')", "落在前一个词元上的注意力占比（= TransformerLens 'mul'）", _OWN,
               "text"),
    Definition("diagonal", "share of attention on the query's own token (self)",
               "落在查询自身词元上的注意力占比（自身）", _OWN, "text"),
    Definition("distance", "mean attention distance in tokens", "平均注意力距离（词元数）",
               _OWN, "text"),
    Definition("duplicate", "share on earlier copies of the query's token (= "
               "TransformerLens 'mul')", "落在查询词元的先前副本上的占比（= TransformerLens "
               "'mul'）", _OWN, "text"),
    Definition("induction", "share on the tokens right after earlier copies (= "
               "TransformerLens 'mul')", "落在先前副本之后那个词元上的占比（= "
               "TransformerLens 'mul'）", _OWN, "text"),
    Definition("repeat_induction", "induction share on the second copy of a repeated "
               "random sequence (BOS + 40 distinct ids, twice)", "重复随机序列第二份上的"
               "归纳占比（BOS + 40 个不同 id，重复两次）", "attnlab.analysis.heads", "probe"),
)}


def compute_definitions(model: Any, text: str, names: Sequence[str] | None = None, *,
                        seed: int = 0, truncate: bool = False,
                        own: dict[str, Tensor] | None = None) -> dict[str, dict[str, Any]]:
    """The scores of :data:`DEFINITIONS` named in ``names`` (default: all) for ``model``
    (already loaded) and ``text``: name -> ``{"scores": (L, H) float64, "info": {...}}``,
    or ``{"unavailable": reason}`` for a score the model cannot have (the ``"abs"`` measure
    of a bidirectional model; ``repeat_induction`` of one).

    The literature's text-based scores are computed on the input the source uses
    (:func:`literature_ids`: BOS first), streamed (:func:`text_scores`, any length);
    attnlab's own on the text as the tokenizer makes it (as ``attnlab diagnose`` does),
    or taken from ``own`` (name -> (L, H), e.g. :class:`HeadDiagnostics` scores); the
    probes on generated random tokens (``seed``).
    """
    check_loaded(model)
    wanted = list(DEFINITIONS) if names is None else list(names)
    unknown = [n for n in wanted if n not in DEFINITIONS]
    if unknown:
        raise ValueError(f"unknown definition {', '.join(map(repr, unknown))}; valid names: "
                         f"{', '.join(DEFINITIONS)}")
    out: dict[str, dict[str, Any]] = {}
    lit_names = [n for n in wanted if DEFINITIONS[n].on == "text"
                 and DEFINITIONS[n].source != _OWN]
    if lit_names:
        ids = literature_ids(model.tokenizer, text)
        limit = int(model.max_length)
        if len(ids) > limit:
            if not truncate:
                raise ValueError(too_long("text", len(ids), limit,
                                          "tokens as TransformerLens feeds it (BOS first)"))
            ids = ids[:limit]
        t = run_trace(model, ids)
        got = text_scores(t)
        for n in lit_names:
            if n in got:
                out[n] = {"scores": got[n], "info": {"tokens": len(ids), "bos_first": True}}
            else:
                out[n] = {"unavailable": "TransformerLens's 'abs' measure needs a causal "
                                         "model (it asserts lower-triangular patterns)"}
    own_names = [n for n in wanted if DEFINITIONS[n].source == _OWN]
    if own_names:
        if own is None or any(n not in own for n in own_names):
            t = run_trace(model, text, truncate=truncate, merge_pieces=False)
            own = head_scores(t)
        for n in own_names:
            out[n] = {"scores": own[n], "info": {"tokens_as_tokenized": True}}
    if "repeat_induction" in wanted:
        if own is not None and "repeat_induction" in own:
            out["repeat_induction"] = {"scores": own["repeat_induction"], "info": {}}
        elif not model.causal:
            out["repeat_induction"] = {"unavailable": "needs a causal model"}
        else:
            s, repeat_info = repeat_induction(induction_trace(model, seed=seed))
            out["repeat_induction"] = {"scores": s, "info": repeat_info}
    if "tl-demo-induction" in wanted:
        s, demo_info = demo_induction_score(model, seed=seed)
        out["tl-demo-induction"] = {"scores": s, "info": demo_info}
    if "olsson-prefix-matching" in wanted:
        s, prefix_info = prefix_matching(model, seed=seed)
        out["olsson-prefix-matching"] = {"scores": s, "info": prefix_info}
    return {n: out[n] for n in wanted}
