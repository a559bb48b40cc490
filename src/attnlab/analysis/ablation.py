"""Is a bright cell an important token? Attention-based importances checked against the
effect of removing the token, measured by real forward passes.

For a causal language model, ids and target rows ``T`` (row ``t`` predicts token
``t + 1``), the **effect** of key ``j`` is how much the mean next-token loss over ``T`` rises
when ``j`` is hidden from every query but its own, in every layer and head (an additive
``-inf`` column in the model's 4-D attention mask; row ``j`` still attends to itself, so no
row is left empty and no position moves). Ablations run in batches, one mask per copy of
the input, through torch's ``sdpa`` attention where the model has it (its own
implementation otherwise: the forwards read no weight); the logits are computed at the
target rows only.

In a causal model hiding key ``j`` changes nothing in the rows before ``j``, which never see
it: the rows ``[0, s)`` of every ablated forward whose keys are all ``>= s`` are the clean
forward's, keys and values included. So the clean forward keeps its key/value cache, the
keys run in order, and each batch (smallest key ``s``) runs only the tokens ``[s, t + 1)``
(``t`` the last target) on the clean cache's first ``s`` positions, its position ids going
on from ``s``; the target rows before ``s`` keep their clean loss, and a key at or after the
last target changes no target's loss (effect 0). Where the model's forward takes no cache,
no ``position_ids`` or no ``use_cache``, or its cache does not hold every layer's keys and
values of the whole input (an encoder–decoder, a recurrent or linear-attention layer), each
batch runs the whole input instead; both give the same effects (tested).

Each **importance** is a score per key read from the clean trace:

- ``weights``: the mean attention the target rows pay key ``j``, over every layer and head;
- ``last_layer``: the same in the last layer only;
- ``rollout``: the target rows' residual-adjusted rollout (:mod:`attnlab.tracing.attribution`);
- ``accumulated``: the attention every query pays key ``j`` over every layer and head (the
  heavy-hitter score of KV-cache eviction);
- ``random``: a seeded random score, the baseline every importance must beat.

:func:`rank_agreement` gives each importance's Spearman correlation with the effect. The
numbers are what they are: a low correlation is a finding about attention, not an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import torch
from torch import Tensor

from attnlab._errors import check_int
from attnlab.analysis.alignment import spearman
from attnlab.tracing._hf_forward import cache_keyword, fast_attention
from attnlab.tracing._hf_forward import forward_params as _params
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.attribution import rollout_rows

__all__ = ["IMPORTANCES", "Ablation", "AblationSettings", "ablate_keys", "importances",
           "rank_agreement"]

IMPORTANCES = ("weights", "last_layer", "rollout", "accumulated", "random")

#: Bytes one batched forward of the ablation may take for what grows with the batch: the
#: masks, each layer's scores and probabilities (eager attention keeps both, per head), and
#: the logits of the target rows over the vocabulary.
BATCH_BYTES = 256 << 20


def _per_batch(n: int, heads: int, targets: int, vocab: int) -> int:
    """How many ablations share one forward within :data:`BATCH_BYTES` (at least one).

    >>> _per_batch(512, 9, 127, 49152), _per_batch(8192, 9, 1, 49152)  # SmolLM2's shapes
    (5, 1)
    """
    each = 4 * n * n * (1 + 2 * heads) + 4 * targets * vocab
    return max(1, BATCH_BYTES // each)


def _check_rows(name: str, rows: Any, n: int, lo: int = 0) -> list[int]:
    if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence) or not rows:
        raise ValueError(f"{name} must be a non-empty sequence of positions, got {rows!r}")
    out = []
    for i, r in enumerate(rows):
        out.append(check_int(f"{name}[{i}]", r, minimum=lo, maximum=n - 1))
    if len(set(out)) != len(out):
        raise ValueError(f"{name} must not repeat a position, got {out}")
    return sorted(out)


class AblationSettings(TypedDict, total=False):
    """How :func:`ablate_keys` ran (every key set by it; none on a result made by hand)."""

    batch: int  # ablated keys per forward pass
    mask: str  # how a key is hidden
    forward: str  # what each batch runs: the suffix on the clean cache, or the whole input


@dataclass
class Ablation:
    """The measured effect (len(keys),) of hiding each of ``keys`` on the mean loss over
    ``targets``; ``clean`` is the loss without ablation."""

    keys: list[int]
    targets: list[int]
    clean: float
    effect: Tensor
    settings: AblationSettings = field(default_factory=AblationSettings)


def _mask(n: int, keys: Sequence[int | None], dtype: torch.dtype, start: int = 0) -> Tensor:
    """Additive (len(keys), 1, n - start, n) causal masks of the rows ``[start, n)``, key
    ``j`` hidden from every row but its own in mask ``b`` (``None``: nothing hidden)."""
    allow = torch.ones(n, n, dtype=torch.bool).tril()[start:]
    masks = allow.repeat(len(keys), 1, 1)
    for b, j in enumerate(keys):
        if j is not None:
            masks[b, :, j] = False
            if j >= start:
                masks[b, j - start, j] = True
    out = torch.zeros(len(keys), 1, n - start, n, dtype=dtype)
    return out.masked_fill_(~masks[:, None], torch.finfo(dtype).min)


def _nll(net: Any, ids: Tensor, masks: Tensor, rows: list[int], gold: Tensor,
         **kwargs: Any) -> Tensor:
    """Next-token loss (B, len(rows)) of ``rows`` (positions in ``ids`` (1, q)) against
    ``gold`` (len(rows),) for each mask (B, 1, q, K); ``kwargs`` go to the forward (a
    cache, its position ids). The logits are computed at ``rows`` only where the forward
    takes ``logits_to_keep``; the attention runs through torch's ``sdpa`` where the model has
    it (:func:`~attnlab.tracing._hf_forward.fast_attention`: no weight is read here)."""
    b = masks.shape[0]
    keep = torch.tensor(rows)
    if "logits_to_keep" in _params(net):
        kwargs["logits_to_keep"] = keep
    with torch.no_grad(), fast_attention(net):
        out = net(input_ids=ids.repeat(b, 1), attention_mask=masks, **kwargs)
    logits = out.logits.float()  # (B, len(rows), V), or (B, q, V) without logits_to_keep
    if logits.shape[1] != len(rows):
        logits = logits[:, keep]
    nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), gold.repeat(b),
                                            reduction="none")
    return nll.view(b, -1)


def _losses(net: Any, ids: Tensor, masks: Tensor, targets: list[int]) -> Tensor:
    """Mean next-token loss over ``targets`` for each mask (B,)."""
    rows = torch.tensor(targets)
    return _nll(net, ids, masks, targets, ids[0, rows + 1]).mean(1)


def _cache_name(net: Any) -> str | None:
    """The forward's keyword for a key/value cache (``cache`` from transformers 5.2x,
    ``past_key_values`` before), or None where the ablations cannot run on the clean
    forward's cache: the forward takes no cache, ``position_ids`` or ``use_cache``, the
    model is an encoder–decoder, or one of its layers is not attention (a recurrent or
    linear-attention layer keeps a state that is not keys and values)."""
    try:
        from transformers import DynamicCache  # noqa: F401  (the cache the ablations use)
    except ImportError:
        return None
    params = _params(net)
    name = cache_keyword(net)
    if not {name, "position_ids", "use_cache"} <= set(params):
        return None
    cfg = getattr(net, "config", None)
    if getattr(cfg, "is_encoder_decoder", False):
        return None
    kinds = getattr(cfg, "layer_types", None)
    if kinds is not None and not set(kinds) <= {"full_attention", "sliding_attention"}:
        return None
    return name


def _new_cache() -> Any:
    """An empty transformers ``DynamicCache`` (its layers made as the forward fills them)."""
    from transformers import DynamicCache

    return DynamicCache()


def _keys_values(cache: Any, n: int, layers: int | None) -> list[tuple[Tensor, Tensor]] | None:
    """Each layer's keys and values (1, H_kv, n, d) in the clean forward's ``cache``, or
    None where it does not hold them for every layer and all ``n`` positions."""
    held = getattr(cache, "layers", None)
    if held is not None:  # recent transformers: one object per layer; earlier, two lists
        pairs = [(getattr(c, "keys", None), getattr(c, "values", None)) for c in held]
    else:
        pairs = list(zip(getattr(cache, "key_cache", []), getattr(cache, "value_cache", [])))
    out = []
    for k, v in pairs:
        if not (isinstance(k, Tensor) and isinstance(v, Tensor) and k.dim() == v.dim() == 4
                and k.shape[0] == v.shape[0] == 1 and k.shape[2] == v.shape[2] == n):
            return None
        out.append((k, v))
    return out if out and (layers is None or len(out) == layers) else None


def _prefix_cache(kv: list[tuple[Tensor, Tensor]], length: int, b: int) -> Any:
    """A new cache of the first ``length`` positions of ``kv``, for ``b`` copies of the
    input (views expanded over the batch, which the cache copies at most once)."""
    cache = _new_cache()
    for layer, (k, v) in enumerate(kv):
        cache.update(k[:, :, :length].expand(b, -1, -1, -1),
                     v[:, :, :length].expand(b, -1, -1, -1), layer)
    return cache


def _positions(start: int, stop: int) -> Tensor:
    """The position ids (1, stop - start) of the tokens ``[start, stop)``."""
    return torch.arange(start, stop)[None]


def _start(keys: list[int]) -> int:
    """Where a batch of sorted ``keys`` starts: its smallest key (the rows before it, and
    their keys and values, are the clean forward's in every copy)."""
    return keys[0]


def _suffix(net: Any, x: Tensor, kv: list[tuple[Tensor, Tensor]], name: str,
            keys: list[int], rows: list[int], dtype: torch.dtype, start: int) -> Tensor:
    """Next-token loss (len(keys), len(rows)) of the target ``rows`` (each at or after
    ``start``), each key hidden in its copy: the tokens from ``start`` to the last row run
    on the clean cache ``kv`` of the positions before ``start``."""
    stop = rows[-1] + 1
    masks = _mask(stop, keys, dtype, start)  # (B, 1, stop - start, stop)
    gold = x[0, torch.tensor(rows) + 1]
    at = [r - start for r in rows]
    if start == 0:  # nothing before the first key: the whole input up to the last row
        return _nll(net, x[:, :stop], masks, at, gold)
    return _nll(net, x[:, start:stop], masks, at, gold, use_cache=True,
                position_ids=_positions(start, stop),
                **{name: _prefix_cache(kv, start, len(keys))})


def ablate_keys(model: Any, ids: Sequence[int], *, targets: Sequence[int] | None = None,
                keys: Sequence[int] | None = None, batch: int | None = None) -> Ablation:
    """The effect of hiding each key (see the module docstring). ``model`` is a Hugging Face
    causal LM (or an object whose ``.model`` is one, like ``attnlab.models.load``'s);
    ``targets`` default to every row but the last, ``keys`` to every position up to the last
    target; ``batch`` ablations share a forward (default: as many as :data:`BATCH_BYTES`
    allow for their masks, scores and target logits).
    """
    net = getattr(model, "model", model) if hasattr(model, "tokenizer") else model
    if not callable(net):
        raise TypeError(f"model must be a causal language model, got {type(model).__name__}")
    if isinstance(ids, Tensor):
        ids = ids.flatten().tolist()
    n = len(ids)
    if n < 3:
        raise ValueError(f"ids must hold at least 3 tokens, got {n}")
    tg = _check_rows("targets", list(range(n - 1)) if targets is None else list(targets), n - 1)
    ks = _check_rows("keys", list(range(max(tg) + 1)) if keys is None else list(keys), n)
    dtype = next(net.parameters()).dtype if hasattr(net, "parameters") else torch.float32
    dtype = dtype if dtype.is_floating_point else torch.float32
    cfg = getattr(net, "config", None)
    heads = int(getattr(cfg, "num_attention_heads", 0) or 1)
    vocab = int(getattr(cfg, "vocab_size", 0) or 0)
    per = _per_batch(n, heads, len(tg), vocab) if batch is None else batch
    per = check_int("batch", per, minimum=1)
    x = torch.tensor([ids])
    gold = x[0, torch.tensor(tg) + 1]
    name = _cache_name(net)
    kv = None
    if name is None:
        clean_rows = _nll(net, x, _mask(n, [None], dtype), tg, gold)  # (1, T)
    else:
        cache = _new_cache()
        clean_rows = _nll(net, x, _mask(n, [None], dtype), tg, gold, use_cache=True,
                          **{name: cache})
        layers = getattr(cfg, "num_hidden_layers", None)
        kv = _keys_values(cache, n, layers if isinstance(layers, int) else None)
    clean = float(clean_rows.mean(1)[0])
    effect = torch.zeros(len(ks), dtype=torch.float64)
    if kv is None or name is None:
        for s in range(0, len(ks), per):
            chunk = ks[s:s + per]
            effect[s:s + len(chunk)] = (_losses(net, x, _mask(n, chunk, dtype), tg)
                                        - clean).double()
        return Ablation(ks, tg, clean, effect, {"batch": per, "mask": "additive, own row kept",
                                                "forward": "whole input"})
    live = [k for k in ks if k < tg[-1]]  # (a key at or after the last target: effect 0)
    for s in range(0, len(live), per):
        chunk = live[s:s + per]
        start = _start(chunk)
        before = sum(t < start for t in tg)  # the target rows the batch leaves clean
        rows = torch.cat([clean_rows[:, :before].expand(len(chunk), -1),
                          _suffix(net, x, kv, name, chunk, tg[before:], dtype, start)], dim=1)
        effect[s:s + len(chunk)] = (rows.mean(1) - clean).double()
    return Ablation(ks, tg, clean, effect, {"batch": per, "mask": "additive, own row kept",
                                            "forward": "suffix on the clean cache"})


def importances(trace: AttentionTrace, targets: Sequence[int], keys: Sequence[int], *,
                seed: int = 0) -> dict[str, Tensor]:
    """Each importance of :data:`IMPORTANCES` for ``keys`` (float64 (len(keys),)), read
    from the clean causal ``trace`` for the target rows."""
    if not isinstance(trace, AttentionTrace) or trace.seq_len != trace.key_len:
        raise TypeError("trace must be one self-attention AttentionTrace")
    tg = torch.tensor(list(targets))
    kk = torch.tensor(list(keys))
    nl, nh = trace.num_layers, trace.num_heads
    weights = torch.zeros(trace.key_len, dtype=torch.float64)
    last = torch.zeros_like(weights)
    accumulated = torch.zeros_like(weights)
    for layer in range(nl):
        for head in range(nh):
            w = trace.weights_rows(layer, head, tg).double().mean(0)
            weights += w
            if layer == nl - 1:
                last += w
            for _r0, _r1, tile in trace.iter_row_tiles(layer, head):
                accumulated += tile.double().sum(0)
    roll = rollout_rows(trace, tg).mean(0)
    gen = torch.Generator().manual_seed(seed)
    return {"weights": (weights / (nl * nh))[kk], "last_layer": (last / nh)[kk],
            "rollout": roll[kk], "accumulated": accumulated[kk],
            "random": torch.rand(len(kk), generator=gen, dtype=torch.float64)}


def rank_agreement(effect: Tensor, scores: dict[str, Tensor]) -> dict[str, float]:
    """Spearman's ρ (:func:`attnlab.analysis.alignment.spearman`: ties share their mean
    rank) of each importance with the measured effect; NaN when either side is constant."""
    out = {}
    for name, s in scores.items():
        if s.numel() != effect.numel():
            raise ValueError(f"{name}: {s.numel()} scores for {effect.numel()} keys")
        out[name] = spearman(effect.tolist(), s.tolist())
    return out
