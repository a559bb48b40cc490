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

Every function comes in the form that takes attention patterns — dense tensors
``(..., N, N)``, rows summing to 1, query ``i`` and key ``j`` both positions in one
sequence — which is how the sources state them, and, where a model is needed, in a form
that takes an already-loaded model (duck-typed like :class:`attnlab.models.LoadedModel`)
and builds the inputs the source uses. :func:`text_scores` computes the text-based scores
from an :class:`~attnlab.tracing.AttentionTrace` streamed over tiles of rows (no N x N
tensor), for long texts. Everything is computed in float64 from float32 weights.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attnlab.analysis.heads import _check_loaded as _check_loaded_as
from attnlab.analysis.scores import _SUMS, _scan, _scores_from_sums
from attnlab.core.weights import shaped_weights
from attnlab.tracing.adapters.huggingface import is_hf_model
from attnlab.tracing.capture import capture

__all__ = [
    "DEFINITIONS", "EPSILON", "HEAD_NAMES", "Definition", "attention_patterns",
    "compute_definitions", "demo_induction_score", "demo_induction_stripe", "detect_head",
    "detection_pattern", "duplicate_token_pattern", "for_each_layer", "gu_sink_rate",
    "head_similarity", "induction_pattern", "literature_ids", "own_scores",
    "prefix_matching", "prefix_matching_score", "previous_token_pattern", "sink_percent",
    "text_scores", "token_importance",
]

#: TransformerLens's named detection patterns.
HEAD_NAMES = ("previous_token_head", "duplicate_token_head", "induction_head")
ERROR_MEASURES = ("mul", "abs")
#: Gu et al.'s threshold: a head has an attention sink when the first token's importance
#: exceeds it.
EPSILON = 0.3


# --------------------------------------------------------------------------------------
# TransformerLens head detector: detection patterns and the similarity score
# --------------------------------------------------------------------------------------


def previous_token_pattern(n: int) -> Tensor:
    """TransformerLens ``get_previous_token_head_detection_pattern``: (n, n) float32 with
    ones at ``(i, i - 1)`` for ``i >= 1`` (the diagonal just below the main one), zeros
    elsewhere.

    >>> previous_token_pattern(3).tolist()
    [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    """
    _check_length(n)
    p = torch.zeros(n, n)
    p[1:, :-1] = torch.eye(n - 1)
    return torch.tril(p)


def duplicate_token_pattern(tokens: Sequence[int] | Tensor) -> Tensor:
    """TransformerLens ``get_duplicate_token_head_detection_pattern``: (n, n) float32 with
    ones at ``(i, j)`` for ``j < i`` and ``x_j = x_i`` (earlier copies of the query's
    token; the diagonal is zeroed, the upper triangle dropped).

    >>> duplicate_token_pattern([5, 7, 5]).tolist()
    [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    """
    t = _ids_tensor(tokens)
    eq = (t[None, :] == t[:, None]).float()
    eq.fill_diagonal_(0.0)
    return torch.tril(eq)


def induction_pattern(tokens: Sequence[int] | Tensor) -> Tensor:
    """TransformerLens ``get_induction_head_detection_pattern``: the duplicate pattern
    shifted one key to the right (first column zero, lower triangle kept): ones at
    ``(i, j)`` for ``1 <= j <= i`` and ``x_{j-1} = x_i``, the token right after an earlier
    copy of the query's token.

    >>> induction_pattern([5, 7, 5]).tolist()
    [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    """
    dup = duplicate_token_pattern(tokens)
    out = torch.zeros_like(dup)
    out[:, 1:] = dup[:, :-1]
    return torch.tril(out)


def detection_pattern(name: str, tokens: Sequence[int] | Tensor) -> Tensor:
    """The named TransformerLens detection pattern (one of :data:`HEAD_NAMES`) for
    ``tokens``."""
    if name == "previous_token_head":
        return previous_token_pattern(len(_ids_tensor(tokens)))
    if name == "duplicate_token_head":
        return duplicate_token_pattern(tokens)
    if name == "induction_head":
        return induction_pattern(tokens)
    raise ValueError(f"detection_pattern must be one of {', '.join(HEAD_NAMES)}, got {name!r}")


def head_similarity(patterns: Tensor, detection: Tensor, *, error_measure: str = "mul",
                    exclude_bos: bool = False, exclude_current_token: bool = False,
                    round_abs: bool = True) -> Tensor:
    """TransformerLens ``compute_head_attention_similarity_score`` for every pattern of
    ``patterns`` (..., N, N) against one ``detection`` pattern (N, N); float64 (...).

    * ``"mul"``: ``sum(A * P) / sum(A)``, where ``exclude_bos`` first zeroes the attention
      to key 0 and ``exclude_current_token`` the diagonal (of A, so the denominator
      changes too): the share of the head's attention that falls on the pattern.
    * ``"abs"``: ``1 - round(sum|A - P| / N, 3)`` (TransformerLens writes it
      ``1 - round(mean|A - P| * N, 3)``), with the exclusions zeroing those entries of
      ``|A - P|``; 1 is a perfect match, -1 a perfect mismatch. TransformerLens asserts
      that ``|A - P|`` is lower triangular (a causal pattern): a pattern with weight above
      the diagonal is refused here too. ``round_abs=False`` skips the rounding to 3
      decimals (for averaging many texts without rounding each).

    >>> a = torch.tensor([[1.0, 0.0], [0.25, 0.75]])
    >>> p = previous_token_pattern(2)
    >>> head_similarity(a, p).item(), head_similarity(a, p, error_measure="abs").item()
    (0.125, -0.25)
    """
    if error_measure not in ERROR_MEASURES:
        raise ValueError(f"error_measure must be one of {', '.join(ERROR_MEASURES)}, got "
                         f"{error_measure!r}")
    if not isinstance(patterns, Tensor) or patterns.dim() < 2 or (
            patterns.shape[-1] != patterns.shape[-2]):
        got = tuple(patterns.shape) if isinstance(patterns, Tensor) else type(patterns).__name__
        raise ValueError(f"patterns must be square attention patterns (..., N, N), got {got}")
    n = patterns.shape[-1]
    if not isinstance(detection, Tensor) or tuple(detection.shape) != (n, n):
        got = tuple(detection.shape) if isinstance(detection, Tensor) else type(detection)
        raise ValueError(f"detection must be an ({n}, {n}) pattern, got {got}")
    if bool((detection.triu(1) != 0).any()):
        raise ValueError("detection must be lower triangular (TransformerLens refuses a "
                         "detection pattern with entries above the diagonal)")
    a = patterns.double()
    p = detection.double()
    if error_measure == "mul":
        if exclude_bos or exclude_current_token:
            a = a.clone()
            if exclude_bos:
                a[..., :, 0] = 0.0
            if exclude_current_token:
                a.diagonal(dim1=-2, dim2=-1).zero_()
        return (a * p).sum((-2, -1)) / a.sum((-2, -1))
    diff = (a - p).abs()
    if bool((diff.triu(1) != 0).any()):
        raise ValueError("the 'abs' error measure needs causal (lower-triangular) attention "
                         "patterns: TransformerLens asserts |A - P| is lower triangular; "
                         "use error_measure='mul' for a bidirectional model")
    if exclude_bos:
        diff[..., :, 0] = 0.0
    if exclude_current_token:
        diff.diagonal(dim1=-2, dim2=-1).zero_()
    raw = diff.sum((-2, -1)) / n
    if not round_abs:
        return 1.0 - raw
    return torch.tensor([1.0 - round(v, 3) for v in raw.flatten().tolist()],
                        dtype=torch.float64).reshape(raw.shape)


# --------------------------------------------------------------------------------------
# Gu et al.: token importance, the sink criterion, Sink%
# --------------------------------------------------------------------------------------


def token_importance(patterns: Tensor, *, causal: bool) -> Tensor:
    """Gu et al. (2025), eq. of the attention-sink metric: the importance of key ``k``,
    ``alpha_k = (1 / |Q_k|) * sum_{i in Q_k} A_ik``, where ``Q_k`` are the queries that can
    see key ``k``: ``i >= k`` when causal (``1 / (T - k + 1) * sum_{i=k}^{T}`` in the
    paper's 1-based notation), every query otherwise. ``patterns`` (..., N, N) ->
    float64 (..., N).

    >>> a = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    >>> token_importance(a, causal=True).tolist()
    [0.75, 0.5]
    """
    _check_square("patterns", patterns)
    n = patterns.shape[-1]
    seen_by = (n - torch.arange(n)).double() if causal else torch.full((n,), float(n),
                                                                         dtype=torch.float64)
    return patterns.double().sum(-2) / seen_by


def sink_percent(importance_first: Tensor, *, epsilon: float = EPSILON) -> float:
    """Gu et al.'s Sink%: 100 x the share of (sample, layer, head) whose first-token
    importance ``alpha_1`` exceeds ``epsilon`` (strictly), from ``importance_first`` of any
    shape (e.g. (samples, L, H)).

    >>> sink_percent(torch.tensor([[0.9, 0.3], [0.31, 0.0]], dtype=torch.float64))
    50.0
    """
    if importance_first.numel() == 0:
        raise ValueError("importance_first is empty: no (sample, layer, head) to count")
    return float((importance_first.double() > epsilon).double().mean()) * 100.0


# --------------------------------------------------------------------------------------
# Repeated random tokens: the TransformerLens demo, Olsson et al.'s prefix matching
# --------------------------------------------------------------------------------------


def demo_induction_stripe(patterns: Tensor, seq_len: int) -> Tensor:
    """TransformerLens main demo, ``induction_score_hook``: the mean of the attention
    pattern's diagonal at offset ``1 - seq_len`` (query ``i`` to key ``i - seq_len + 1``,
    for ``i = seq_len - 1 ... 2 seq_len - 1``: ``seq_len + 1`` entries) of patterns
    (..., 2 seq_len, 2 seq_len) of a sequence repeated twice; float64 (...). The demo
    averages this over its batch as well (:func:`demo_induction_score`).

    >>> demo_induction_stripe(torch.eye(4), 2).item()  # the identity has no stripe at -1
    0.0
    """
    _check_square("patterns", patterns)
    if patterns.shape[-1] != 2 * seq_len:
        raise ValueError(f"patterns must be of a sequence of {seq_len} tokens repeated twice "
                         f"({2 * seq_len} tokens), got {patterns.shape[-1]}")
    return patterns.double().diagonal(offset=1 - seq_len, dim1=-2, dim2=-1).mean(-1)


def prefix_matching_score(patterns: Tensor, *, period: int, repeats: int = 2,
                          start: int = 0) -> Tensor:
    """Olsson et al. (2022), prefix matching: on ``start`` prefix tokens followed by a
    sequence of ``period`` distinct tokens repeated ``repeats`` times, the attention each
    token of a later repeat pays to the tokens right after its earlier occurrences,
    ``sum_{c < r} A[i, start + c * period + t + 1]`` for the query ``i`` at offset ``t`` of
    repeat ``r >= 1``, averaged over those queries; float64 (...).

    Unlike the TransformerLens demo stripe it scores only the queries of the later
    repeats, and counts every earlier occurrence when there are more than two repeats.

    >>> a = torch.zeros(4, 4); a[:, 0] = 1.0; a[2, 1] = 1.0; a[2, 0] = 0.0
    >>> prefix_matching_score(a, period=2).item()  # row 2 on key 1; row 3 on key 0
    0.5
    """
    _check_square("patterns", patterns)
    n = patterns.shape[-1]
    if period < 1 or repeats < 2 or start < 0 or start + period * repeats > n:
        raise ValueError(f"period={period}, repeats={repeats}, start={start} need period "
                         f">= 1, repeats >= 2 and start + period * repeats <= N = {n}")
    rows, cols = [], []
    for r in range(1, repeats):
        for t in range(period):
            i = start + r * period + t
            for c in range(r):
                rows.append(i)
                cols.append(start + c * period + t + 1)
    a = patterns.double()
    hit = a[..., torch.tensor(rows), torch.tensor(cols)].sum(-1)
    return hit / ((repeats - 1) * period)


# --------------------------------------------------------------------------------------
# attnlab's own scores, on dense patterns (the same definitions as analysis.scores)
# --------------------------------------------------------------------------------------


def own_scores(patterns: Tensor, token_ids: Sequence[int] | Tensor | None = None
               ) -> dict[str, Tensor]:
    """attnlab's scores of :mod:`attnlab.analysis.scores` (same names, same definitions)
    on dense self-attention patterns (..., N, N): name -> float64 (...).

    With ``m_i`` the mass of row ``i`` and ``M = sum_i m_i``: ``entropy`` = mean row
    entropy in nats ``sum_i -sum_j A log A / M``; ``max_weight`` = ``sum_i max_j A_ij / M``;
    ``sink`` = attention on key 0 over the rows ``i >= 1``, divided by their mass;
    ``previous`` / ``diagonal`` = mass fraction on ``j = i - 1`` / ``j = i``; ``distance``
    = ``sum_ij A_ij |i - j| / M``; ``duplicate`` / ``induction`` (with ``token_ids``) =
    mass fraction on TransformerLens's duplicate / induction patterns. ``previous``,
    ``duplicate`` and ``induction`` are the TransformerLens ``"mul"`` scores.

    >>> s = own_scores(torch.eye(3))
    >>> s["diagonal"].item(), s["entropy"].item(), s["distance"].item()
    (1.0, 0.0, 0.0)
    """
    _check_square("patterns", patterns)
    n = patterns.shape[-1]
    a = patterns.double()
    m = a.sum(-1)
    mass = m.sum(-1)
    pos = torch.arange(n)
    plogp = torch.where(a > 0, a * a.clamp_min(1e-300).log(), torch.zeros((), dtype=a.dtype))

    def ratio(num: Tensor, den: Tensor) -> Tensor:
        return torch.where(den > 0, num / den.clamp_min(1e-300), torch.zeros_like(num))

    out = {
        "entropy": ratio(-plogp.sum((-2, -1)), mass) + 0.0,
        "max_weight": ratio(a.amax(-1).sum(-1), mass),
        "sink": ratio(a[..., 1:, 0].sum(-1), m[..., 1:].sum(-1)),
        "previous": ratio(a.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1), mass),
        "diagonal": ratio(a.diagonal(dim1=-2, dim2=-1).sum(-1), mass),
        "distance": ratio((a * (pos[:, None] - pos[None, :]).abs().double()).sum((-2, -1)),
                          mass),
    }
    if token_ids is not None:
        ids = _ids_tensor(token_ids)
        if ids.numel() != n:
            raise ValueError(f"token_ids must give one id per position ({n}), got "
                             f"{ids.numel()}")
        out["duplicate"] = ratio((a * duplicate_token_pattern(ids).double()).sum((-2, -1)),
                                 mass)
        out["induction"] = ratio((a * induction_pattern(ids).double()).sum((-2, -1)), mass)
    return out


# --------------------------------------------------------------------------------------
# running a loaded model: the inputs the sources use, and its dense patterns
# --------------------------------------------------------------------------------------

_LOADED = ("model", "tokenizer", "name", "causal", "num_layers", "max_length")


def _check_loaded(model: Any) -> None:
    _check_loaded_as(model, _LOADED)


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


def _vocab_size(model: Any) -> int | None:
    net = model.model
    if is_hf_model(net):
        emb = net.get_input_embeddings()
        n = getattr(emb, "num_embeddings", None)
        return n if isinstance(n, int) else None
    n = getattr(getattr(net, "config", None), "vocab_size", None)
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def _forward(model: Any, ids: Tensor, mask: Tensor) -> None:
    net = model.model
    if is_hf_model(net):
        base = getattr(net, "base_model", net)  # no vocabulary logits
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask.long()}
        if "use_cache" in inspect.signature(base.forward).parameters:
            kwargs["use_cache"] = False
        base(**kwargs)
        return
    if type(net).__name__ == "Transformer" and hasattr(net, "encode"):
        raise TypeError(f"model {model.name!r} is an encoder-decoder: give a decoder-only or "
                        "an encoder model")
    if not bool(mask.all()) and not model.causal:
        raise ValueError(f"model {model.name!r} takes no padding mask and is not causal: "
                         "give inputs of one length per batch")
    net(ids)  # causal: the padding on the right is never seen by the real tokens


def _dense(record: Any) -> Tensor:
    """(B, H, Lq, Lk) float32 weights ``exp(s - lse)`` of a captured record, every head of
    a batch element in one call (grouped key/value heads read by index, not copied per
    head)."""
    q, k, lse = record.q, record.k, record.lse
    b, h, lq, _ = q.shape
    lk = k.shape[2]
    kv = torch.arange(h) // (h // k.shape[1])
    heads = list(range(h))
    rows = torch.arange(lq)
    out = torch.empty(b, h, lq, lk)
    for bi in range(b):
        out[bi] = shaped_weights(q[bi], k[bi, kv], lse[bi], record.shapes[bi], rows=rows,
                                 head=heads, lq=lq, lk=lk)
    return out


def for_each_layer(model: Any, batch: Sequence[Sequence[int]],
                   on_layer: Callable[[int, Tensor], Any]) -> None:
    """Run ``batch`` (token id lists, any lengths) through ``model`` in one forward pass,
    padded on the right with the padding hidden by the key mask, and call
    ``on_layer(layer, weights)`` with each layer's dense weights (B, H, N, N) float32 on
    the CPU as the layer runs: only one layer's weights exist at a time. Input ``b``'s own
    pattern is ``weights[b, :, :n_b, :n_b]`` (the key mask makes the padded keys 0 and the
    real rows sum to 1)."""
    _check_loaded(model)
    if not batch or any(len(x) == 0 for x in batch):
        raise ValueError("batch must hold at least one non-empty list of token ids")
    vocab = _vocab_size(model)
    lo = min(min(x) for x in batch)
    hi = max(max(x) for x in batch)
    if lo < 0 or (vocab is not None and hi >= vocab):
        raise ValueError(f"token ids in [{lo}, {hi}] lie outside the vocabulary [0, {vocab}) "
                         f"of {model.name}")
    n = max(len(x) for x in batch)
    if n > int(model.max_length):
        raise ValueError(f"an input of {n} tokens is longer than {model.name} accepts "
                         f"({model.max_length})")
    pad = getattr(model.tokenizer, "pad_token_id", None)
    pad = pad if isinstance(pad, int) and 0 <= pad < (vocab or pad + 1) else 0
    ids = torch.full((len(batch), n), pad, dtype=torch.long)
    mask = torch.zeros(len(batch), n, dtype=torch.bool)
    for b, x in enumerate(batch):
        ids[b, :len(x)] = torch.tensor(list(x), dtype=torch.long)
        mask[b, :len(x)] = True
    net = model.model
    try:
        device = next(net.parameters()).device
    except StopIteration:
        device = torch.device("cpu")
    seen = [0]
    was_training = net.training
    net.eval()
    try:
        with torch.no_grad(), capture(net, qkv=True) as cap:
            def take(record: Any) -> None:
                cap.records.clear()  # nothing kept: the caller reduces each layer
                if record.dims[1:] == (n, n):
                    on_layer(seen[0], _dense(record))
                    seen[0] += 1

            cap.on_record = take
            _forward(model, ids.to(device), mask.to(device))
    finally:
        net.train(was_training)
    if seen[0] != int(model.num_layers):
        raise ValueError(f"{model.name}: {seen[0]} self-attention layers ran, the model "
                         f"declares {model.num_layers}")


def attention_patterns(model: Any, batch: Sequence[Sequence[int]]) -> list[Tensor]:
    """The dense patterns (L, H, n_b, n_b) float32 of each input of ``batch``, run as one
    padded batch (:func:`for_each_layer`). Short inputs only: L x H x N² floats each."""
    lengths = [len(x) for x in batch]
    layers: list[list[Tensor]] = [[] for _ in batch]

    def keep(layer: int, w: Tensor) -> None:
        for b, n in enumerate(lengths):
            layers[b].append(w[b, :, :n, :n].clone())

    for_each_layer(model, batch, keep)
    return [torch.stack(ls) for ls in layers]


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
    _check_loaded(model)
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
    vocab = _vocab_size(model)
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
                         ) -> tuple[Tensor, dict[str, Any]]:
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
    _check_loaded(model)
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
    info = {"batch": batch, "seq_len": n, "ids": span, "seed": seed, "bos": False,
            "scaled": scaled_ids or n != seq_len}
    return score, info


def prefix_matching(model: Any, *, period: int = 25, repeats: int = 4, batch: int = 10,
                    low: int = 1000, high: int = 10000, seed: int = 0
                    ) -> tuple[Tensor, dict[str, Any]]:
    """Olsson et al.'s prefix-matching score on a model: ``batch`` sequences, each the
    model's BOS token (when its tokenizer has one) then ``period`` distinct random ids
    from ``[low, high)`` (scaled like :func:`demo_induction_score` for a small
    vocabulary; ``period`` cut to the ids there are and to the model's context, which the
    returned info says) repeated ``repeats`` times; :func:`prefix_matching_score` averaged over the
    batch. Returns (L, H) float64 and what was used. The sizes are attnlab's defaults, not
    the paper's: any can be given."""
    _check_loaded(model)
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
    info = {"batch": batch, "period": period, "repeats": repeats, "ids": span,
            "seed": seed, "bos": bool(prefix), "scaled": scaled or period != given}
    return score, info


def gu_sink_rate(model: Any, texts: Sequence[str], *, tokens: int = 64,
                 epsilon: float = EPSILON, batch_size: int = 8) -> dict[str, Any]:
    """Gu et al.'s Sink% on a model: each text's first ``tokens`` tokens (BOS first, see
    :func:`literature_ids`; texts shorter than ``tokens`` are skipped, as the metric is
    defined on inputs of one length), the first token's importance
    (:func:`token_importance`) in every layer and head, and the share with importance
    above ``epsilon``. Returns ``{"sink_percent", "per_head" (L, H share of samples),
    "importance" (L, H mean alpha_1), "samples", "skipped"}``."""
    _check_loaded(model)
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
    sums, _, _ = _scan(trace, token_ids=ids, tile_rows=tile_rows)
    s = dict(zip(_SUMS, sums.unbind(-1)))
    own = _scores_from_sums(sums, True)
    out = {"tl-previous-mul": own["previous"], "tl-duplicate-mul": own["duplicate"],
           "tl-induction-mul": own["induction"]}
    if trace.causal:
        dup = int(duplicate_token_pattern(ids).sum())
        sizes = {"previous": n - 1, "duplicate": dup, "induction": dup}
        for key, size in sizes.items():
            raw = (s["mass"] - 2.0 * s[key] + size) / n
            out[f"tl-{key}-abs"] = torch.tensor([1.0 - round(v, 3) for v in
                                                 raw.flatten().tolist()],
                                                dtype=torch.float64).reshape(raw.shape)
    seen = float(n)  # every query sees key 0: itself when causal, all keys otherwise
    alpha = torch.zeros(trace.num_layers, trace.num_heads, dtype=torch.float64)
    for layer in range(trace.num_layers):
        for head in range(trace.num_heads):
            col = trace.weights_tile(layer, head, range(n), range(1))
            alpha[layer, head] = col.double().sum() / seen
    out["gu-sink"] = alpha
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
               "落在前一个 token 上的注意力占比", _TL, "text"),
    Definition("tl-previous-abs", "detect_head previous_token_head, 'abs': "
               "1 - round(sum|A - P| / N, 3), one minus the mean row distance to the pattern",
               "detect_head previous_token_head，'abs'：1 - round(sum|A - P| / N, 3)，"
               "即 1 减去与检测模式的平均行距离", _TL, "text"),
    Definition("tl-duplicate-mul", "detect_head duplicate_token_head, 'mul': share on "
               "earlier copies of the query's token", "detect_head duplicate_token_head，"
               "'mul'：落在查询 token 先前副本上的注意力占比", _TL, "text"),
    Definition("tl-duplicate-abs", "detect_head duplicate_token_head, 'abs': one minus "
               "the mean row distance to the pattern", "detect_head duplicate_token_head，"
               "'abs'：1 减去与检测模式的平均行距离", _TL, "text"),
    Definition("tl-induction-mul", "detect_head induction_head, 'mul': share on the "
               "tokens right after earlier copies", "detect_head induction_head，'mul'："
               "落在先前副本之后那个 token 上的注意力占比", _TL, "text"),
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
               "Olsson 等 2022 的前缀匹配：重复出现的 token 对其先前出现位置之后那个 token "
               "的注意力", "Olsson et al. 2022, In-context Learning and Induction Heads",
               "probe"),
    Definition("gu-sink", "Gu et al. 2025 importance of the first token: its attention "
               "summed over the queries that see it, over their number (sink when > 0.3)",
               "Gu 等 2025 的首 token 重要性：看得见它的查询对它的注意力之和除以查询数"
               "（> 0.3 即为汇聚）", "Gu et al. 2025, When Attention Sink Emerges "
               "(arXiv:2410.10781)", "text"),
    Definition("entropy", "mean row entropy in nats", "每行熵的均值（奈特）", _OWN, "text"),
    Definition("max_weight", "mean largest weight of a row", "每行最大权重的均值", _OWN,
               "text"),
    Definition("sink", "share of attention on the first token, queries after it",
               "首 token 之后的查询落在首 token 上的注意力占比", _OWN, "text"),
    Definition("previous", "share of attention on the token before (= TransformerLens "
               "'mul')", "落在前一个 token 上的注意力占比（= TransformerLens 'mul'）", _OWN,
               "text"),
    Definition("diagonal", "share of attention on the query's own token (self)",
               "落在查询自身 token 上的注意力占比（自身）", _OWN, "text"),
    Definition("distance", "mean attention distance in tokens", "平均注意力距离（token 数）",
               _OWN, "text"),
    Definition("duplicate", "share on earlier copies of the query's token (= "
               "TransformerLens 'mul')", "落在查询 token 先前副本上的占比（= TransformerLens "
               "'mul'）", _OWN, "text"),
    Definition("induction", "share on the tokens right after earlier copies (= "
               "TransformerLens 'mul')", "落在先前副本之后那个 token 上的占比（= "
               "TransformerLens 'mul'）", _OWN, "text"),
    Definition("repeat_induction", "induction share on the second copy of a repeated "
               "random sequence (BOS + 40 distinct ids, twice)", "重复随机序列第二份上的"
               "归纳占比（BOS + 40 个不同 id，重复两次）", "attnlab.analysis.heads", "probe"),
)}


# --------------------------------------------------------------------------------------
# small checks
# --------------------------------------------------------------------------------------


def _check_length(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")


def _check_square(name: str, t: Any) -> None:
    if not isinstance(t, Tensor) or t.dim() < 2 or t.shape[-1] != t.shape[-2]:
        got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
        raise ValueError(f"{name} must be square attention patterns (..., N, N), got {got}")


def _ids_tensor(tokens: Sequence[int] | Tensor) -> Tensor:
    t = torch.as_tensor(tokens).flatten()
    if t.numel() == 0 or t.is_floating_point():
        raise ValueError(f"tokens must be a non-empty sequence of token ids, got {tokens!r}")
    return t.long()



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
    _check_loaded(model)
    from attnlab.analysis.heads import diagnose, induction_trace
    from attnlab.analysis.scores import head_scores
    from attnlab.tracing.tracer import trace as run_trace

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
                raise ValueError(
                    f"the text is {len(ids)} tokens as TransformerLens feeds it (BOS first); "
                    f"{model.name} accepts at most {limit}: shorten it, or truncate (CLI: "
                    f"--truncate) to keep the first {limit}")
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
            ind = induction_trace(model, seed=seed)
            t = run_trace(model, text, truncate=truncate, merge_pieces=False)
            d = diagnose(t, induction=ind)
            out["repeat_induction"] = {"scores": d.scores["repeat_induction"],
                                       "info": d.meta.get("induction", {})}
    if "tl-demo-induction" in wanted:
        s, info = demo_induction_score(model, seed=seed)
        out["tl-demo-induction"] = {"scores": s, "info": info}
    if "olsson-prefix-matching" in wanted:
        s, info = prefix_matching(model, seed=seed)
        out["olsson-prefix-matching"] = {"scores": s, "info": info}
    return {n: out[n] for n in wanted}
