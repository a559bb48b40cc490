"""Is a bright cell an important token? Attention-based importances checked against the
effect of removing the token, measured by real forward passes.

For a causal language model, ids and target rows ``T`` (row ``t`` predicts token
``t + 1``), the **effect** of key ``j`` is how much the mean next-token loss over ``T`` rises
when ``j`` is hidden from every query but its own, in every layer and head (an additive
``-inf`` column in the model's 4-D attention mask; row ``j`` still attends to itself, so no
row is left empty and no position moves). Ablations run in batches, one mask per copy of
the input; the logits are computed at the target rows only.

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


@dataclass
class Ablation:
    """The measured effect (len(keys),) of hiding each of ``keys`` on the mean loss over
    ``targets``; ``clean`` is the loss without ablation."""

    keys: list[int]
    targets: list[int]
    clean: float
    effect: Tensor
    settings: AblationSettings = field(default_factory=AblationSettings)


def _mask(n: int, keys: Sequence[int | None], dtype: torch.dtype) -> Tensor:
    """Additive (len(keys), 1, n, n) causal masks, key ``j`` hidden from every row but its
    own in mask ``b`` (``None``: nothing hidden)."""
    allow = torch.ones(n, n, dtype=torch.bool).tril()
    masks = allow.repeat(len(keys), 1, 1)
    for b, j in enumerate(keys):
        if j is not None:
            masks[b, :, j] = False
            masks[b, j, j] = True
    out = torch.zeros(len(keys), 1, n, n, dtype=dtype)
    return out.masked_fill_(~masks[:, None], torch.finfo(dtype).min)


def _losses(net: Any, ids: Tensor, masks: Tensor, targets: list[int]) -> Tensor:
    """Mean next-token loss over ``targets`` for each mask (B,)."""
    b = masks.shape[0]
    rows = torch.tensor(targets)
    with torch.no_grad():
        out = net(input_ids=ids.repeat(b, 1), attention_mask=masks, logits_to_keep=rows)
    logits = out.logits.float()  # (B, T, V)
    gold = ids[0, rows + 1].repeat(b, 1)
    nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), gold.flatten(),
                                            reduction="none")
    return nll.view(b, -1).mean(1)


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
    clean = float(_losses(net, x, _mask(n, [None], dtype), tg)[0])
    effect = torch.empty(len(ks), dtype=torch.float64)
    for s in range(0, len(ks), per):
        chunk = ks[s:s + per]
        effect[s:s + len(chunk)] = (_losses(net, x, _mask(n, chunk, dtype), tg) - clean).double()
    return Ablation(ks, tg, clean, effect, {"batch": per, "mask": "additive, own row kept"})


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
