"""The attribution study of one text through one causal model: attention-based importances
against the measured effect of removing each token (:mod:`attnlab.analysis.ablation`), and
every KV-cache eviction policy at every budget (:mod:`attnlab.analysis.eviction`), as one
JSON-ready mapping, an :class:`AttributionStudy` (what ``attnlab attribute --json``
prints).

The ablation study costs one forward pass per ablated key, so it runs on the first
``ablation_tokens`` tokens of the text (the rows of a causal trace before position ``n`` are
the trace of those ``n`` tokens, so no second trace is made) and on at most ``max_keys``
keys spread evenly; the eviction measure reads the whole trace, and the change in the
loss of the later tokens when the model runs on with only each policy's kept keys
(:mod:`attnlab.analysis.eviction_loss`) costs one forward of those tokens per policy and
budget; the context's cache they run on is the trace's own keys and values (no prefill).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import torch

from attnlab._errors import check_int
from attnlab._proc import release_memory
from attnlab.analysis.ablation import IMPORTANCES, ablate_keys, importances, rank_agreement
from attnlab.analysis.eviction import EvictionTable, evict
from attnlab.analysis.eviction_loss import EvictionLossesJSON, eviction_losses
from attnlab.analysis.eviction_loss import to_json as losses_to_json
from attnlab.tracing.attention import AttentionTrace

if TYPE_CHECKING:  # Python 3.11's; the annotations below are never evaluated at run time
    from typing import NotRequired

__all__ = ["AblationEffect", "AblationStudy", "AttributionStudy", "EvictionLossStudy",
           "EvictionStudy", "RolloutRowStudy", "ablation_study", "attribute", "prefix"]


class AblationEffect(TypedDict):
    """The measured effects of hiding the keys, summed up."""

    mean: float
    max: float
    argmax_key: int  # the key whose hiding raises the loss most


class AblationStudy(TypedDict):
    """The importances against the ablation (``ablation``)."""

    tokens: int  # the prefix it ran on
    targets: list[int]  # [first, last] of the rows whose loss is measured
    num_targets: int
    keys: int  # the keys hidden, one at a time
    clean_loss: float
    effect: AblationEffect
    rho: dict[str, float]  # importance -> Spearman's rho with the effect
    rho_abs: dict[str, float]  # importance -> Spearman's rho with |effect|
    importances: list[str]
    best: str | None  # the importance of highest rho, the random one aside (None: all NaN)
    seconds: float


class EvictionLossStudy(EvictionLossesJSON):
    """The loss with each policy's kept keys (``eviction["loss"]``), and its time."""

    seconds: float


class EvictionStudy(EvictionTable):
    """Every eviction policy at every budget (``eviction``), and its time."""

    seconds: float
    loss: NotRequired[EvictionLossStudy]  # unless eviction_loss=False


class RolloutRowStudy(TypedDict):
    """One output row's residual-adjusted rollout through every layer (``rollout_row``),
    made in the eviction's pass over the weights."""

    row: int
    seconds: float  # its own arithmetic in that pass
    first_token_share: float
    top: list[int]  # its five largest keys, the largest first


class AttributionStudy(TypedDict):
    """:func:`attribute`'s study: each part that ran."""

    model: str  # the trace's model
    tokens: int
    ablation: NotRequired[AblationStudy]
    eviction: NotRequired[EvictionStudy]
    rollout_row: NotRequired[RolloutRowStudy]  # when asked


def prefix(trace: AttentionTrace, n: int) -> AttentionTrace:
    """The trace of the first ``n`` tokens of a causal trace, read from it (rows and keys
    before ``n`` do not depend on what follows in a causal model)."""
    if not trace.causal or trace.seq_len != trace.key_len or trace.groups is not None:
        raise ValueError("a prefix is read from a causal self-attention trace of pieces")
    check_int("n", n, minimum=1, maximum=trace.seq_len)
    if n == trace.seq_len:
        return trace
    if any(s.key_mask is not None or s.bias is not None
           or (s.sinks is not None and s.sinks.dim() > 1) for s in trace.shapes):
        raise ValueError("this trace's score shapes hold per-position tensors (a key mask, a "
                         "bias, per-row sinks): trace the prefix itself")
    def first(name: str) -> Any:  # each layer read checked (an opened trace's chunks)
        if getattr(trace, name) is None:
            return None
        return torch.stack([trace.layer_tensor(name, layer)[:, :n]
                            for layer in range(trace.num_layers)])

    cut = {name: first(name) for name in ("q", "k", "v", "lse", "context")}
    return AttentionTrace(trace.tokens[:n], shapes=list(trace.shapes), model=trace.model,
                          token_ids=None if trace.token_ids is None else trace.token_ids[:n],
                          meta={**trace.meta, "prefix_of": trace.seq_len}, **cut)


def _spread(top: int, most: int) -> list[int]:
    if top <= most:
        return list(range(top))
    return sorted({round(i * (top - 1) / (most - 1)) for i in range(most)})


def _check_study(trace: Any, ablation_tokens: int, max_keys: int) -> None:
    if not isinstance(trace, AttentionTrace):
        raise TypeError(f"trace must be an AttentionTrace, got {type(trace).__name__}")
    if trace.token_ids is None:
        raise ValueError("the trace must keep its token ids (the ablation re-runs the model)")
    check_int("ablation_tokens", ablation_tokens, minimum=3)
    check_int("max_keys", max_keys, minimum=2)


def ablation_study(model: Any, trace: AttentionTrace, *, ablation_tokens: int = 512,
                   max_keys: int = 128, targets: Sequence[int] | None = None,
                   batch: int | None = None, seed: int = 0) -> AblationStudy:
    """:func:`attribute`'s first part alone: each of at most ``max_keys`` keys (spread
    evenly) hidden from every layer of ``model`` on the first ``ablation_tokens`` tokens of
    ``trace`` (a causal trace of ``model`` that keeps its token ids; a longer one is read as
    its prefix), the loss over ``targets`` (default: the last quarter's rows) against each
    attention-based importance."""
    _check_study(trace, ablation_tokens, max_keys)
    t0 = time.perf_counter()
    n = min(trace.seq_len, ablation_tokens)
    short = prefix(trace, n)
    rows = list(range((3 * n) // 4, n - 1)) if targets is None else list(targets)
    if not rows:
        raise ValueError(f"the ablation needs target rows; {n} tokens leave none")
    keys = _spread(max(rows) + 1, max_keys)
    if short.token_ids is None:  # (a prefix keeps the trace's ids)
        raise ValueError("the trace must keep its token ids (the ablation re-runs the model)")
    ab = ablate_keys(model, short.token_ids, targets=rows, keys=keys, batch=batch)
    imp = importances(short, rows, keys, seed=seed)
    rho = rank_agreement(ab.effect, imp)
    rho_abs = rank_agreement(ab.effect.abs(), imp)
    real = {k: v for k, v in rho.items() if k != "random" and v == v}
    return {"tokens": n, "targets": [rows[0], rows[-1]], "num_targets": len(rows),
            "keys": len(keys), "clean_loss": ab.clean,
            "effect": {"mean": float(ab.effect.mean()), "max": float(ab.effect.max()),
                       "argmax_key": keys[int(ab.effect.argmax())]},
            "rho": rho, "rho_abs": rho_abs, "importances": list(IMPORTANCES),
            "best": max(real, key=lambda name: real[name]) if real else None,
            "seconds": round(time.perf_counter() - t0, 2)}


def attribute(model: Any, trace: AttentionTrace, *, ablation: bool = True,
              eviction: bool = True, ablation_tokens: int = 512, max_keys: int = 128,
              targets: Sequence[int] | None = None, budgets: Sequence[float] = (0.1, 0.25, 0.5),
              context: int | None = None, batch: int | None = None, seed: int = 0,
              eviction_loss: bool = True, rollout_row: int | None = None) -> AttributionStudy:
    """The study (see the module docstring) of ``trace``, the trace of ``model`` (a causal
    Hugging Face LM, or a loaded model whose ``.model`` is one) on ``trace.token_ids``.

    ``rollout_row``: an output row (negative counts from the end) whose residual-adjusted
    rollout through every layer the eviction's pass over the weights makes on the way
    (:func:`attnlab.analysis.eviction.evict`'s ``rollout``), summed up in the study's
    ``rollout_row``; it needs ``eviction=True``."""
    _check_study(trace, ablation_tokens, max_keys)
    if rollout_row is not None:
        rollout_row = check_int("rollout_row", rollout_row, minimum=-trace.seq_len,
                                maximum=trace.seq_len - 1) % trace.seq_len
        if not eviction:
            raise ValueError("rollout_row is made in the eviction's pass over the weights: "
                             "pass eviction=True, or use trace.rollout_rows([row])")
    out: AttributionStudy = {"model": trace.model, "tokens": trace.seq_len}
    release_memory()  # what tracing freed: each phase below starts from what is live
    if ablation:
        out["ablation"] = ablation_study(model, trace, ablation_tokens=ablation_tokens,
                                         max_keys=max_keys, targets=targets, batch=batch,
                                         seed=seed)
        release_memory()  # the batched forwards' pages: the eviction starts from what is live
    if eviction:
        t0 = time.perf_counter()
        ev = evict(trace, tuple(budgets), context=context, seed=seed,
                   rollout=None if rollout_row is None else [rollout_row])
        out["eviction"] = {**ev.summary(), "seconds": round(time.perf_counter() - t0, 2)}
        if ev.rollout is not None and rollout_row is not None:
            row = ev.rollout[0]
            out["rollout_row"] = {"row": rollout_row,
                                  "seconds": round(ev.rollout_seconds or 0.0, 2),
                                  "first_token_share": float(row[0]),
                                  "top": [int(i) for i in row.topk(min(5, row.numel())).indices]}
        release_memory()
        if eviction_loss:
            t0 = time.perf_counter()
            # the prefill's cache is the trace's own keys and values where it has them
            kv = trace if trace.v is not None and trace.groups is None else None
            losses = losses_to_json(eviction_losses(model, trace.token_ids, ev, trace=kv))
            out["eviction"]["loss"] = {**losses,
                                       "seconds": round(time.perf_counter() - t0, 2)}
    return out

