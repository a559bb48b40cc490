"""KV-cache eviction measured exactly on a trace: what each standard policy would keep of a
causal model's cache, and how much of the attention that later queries pay it loses.

The setting is the one every eviction press uses: a context of ``C`` tokens is read
(prefill), the cache is cut to a budget, and the model goes on with the later tokens. A
causal trace of ``N`` tokens holds both parts: its first ``C`` rows are the prefill (they
see only context keys), rows ``[C, N)`` are the later queries. Each policy scores every
context key per layer and KV head from the prefill alone, exactly as it would in a
kernel, and keeps the best ``round(budget · C)``:

- ``h2o`` (Zhang et al. 2023, heavy hitters): the attention each key received, summed over
  every prefill query;
- ``snapkv`` (Li et al. 2024): the attention of the last ``window`` prefill queries, averaged
  over a ``pool``-wide window of keys; the observation window itself is always kept;
- ``tova`` (Oren et al. 2024): the attention of the last prefill query;
- ``streaming`` (Xiao et al. 2023, StreamingLLM): the first ``sinks`` keys and the most recent;
- ``knorm`` (Devoto et al. 2024): the keys of smallest norm;
- ``random``: a seeded random choice — the control every policy must beat;
- ``oracle``: the keys the later queries actually attend to most (not realisable: it reads
  the future; the bound no policy can pass).

Scores of the query heads that share a KV head are averaged (the cache is per KV head).
The measure is exact: for every later query row and head, the share of its attention that
fell on evicted keys (``lost``), from exact weight rows recomputed in tiles — O(tile · N)
memory at any length. The change in the model's loss when it runs on with only the kept
keys is :mod:`attnlab.analysis.eviction_loss` (a forward of the later tokens per policy and
budget, the prefill's cache shared).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab._errors import check_int
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.attribution import RolloutRows

__all__ = ["POLICIES", "CONTROLS", "EvictionJSON", "EvictionResult", "EvictionSettings",
           "EvictionTable", "key_scores", "evict", "kept_keys"]

#: The realisable policies, in the order tables show them.
POLICIES = ("h2o", "snapkv", "tova", "streaming", "knorm")
#: The two references every policy is read against: a random choice and the oracle.
CONTROLS = ("random", "oracle")

_ROW_BYTES = 8 << 20  # about 8 MiB of float32 weight rows per tile
#: One head's (h2o, snapkv-window, tova, future) column sums over the context keys.
_HeadSums = tuple[Tensor, Tensor, Tensor, Tensor]


def _check(trace: Any, context: int | None) -> tuple[AttentionTrace, int]:
    if not isinstance(trace, AttentionTrace):
        raise TypeError(f"trace must be an AttentionTrace (one stack), got "
                        f"{type(trace).__name__}")
    if not trace.causal or trace.seq_len != trace.key_len:
        raise ValueError("eviction is measured on a causal self-attention trace (a decoder's "
                         f"cache); this one is stack {trace.stack!r}, causal={trace.causal}")
    if trace.groups is not None:
        raise ValueError(
            f"eviction keeps or drops entries of the key/value cache, and the cache holds one "
            f"key and value per piece the tokenizer made (each byte piece of a character is "
            f"an entry of its own); this trace merges its {trace.unmerged().seq_len} pieces "
            f"into {trace.seq_len} tokens, and a merged token is no cache entry: trace again "
            f"with merge_pieces=False (or pass trace.unmerged())")
    if trace.q is None or trace.k is None:
        raise ValueError("eviction scores need the trace's q and k (knorm reads the keys)")
    n = trace.seq_len
    c = n - max(1, n // 8) if context is None else context
    c = check_int("context", c, minimum=2, maximum=n - 1)
    return trace, c


def _tile(n: int) -> int:
    return max(1, _ROW_BYTES // (4 * max(1, n)))


#: Rows a column sum adds in float32 before its float64 total (:func:`_column_sums`).
_BLOCK = 32


def _column_sums(w: Tensor) -> Tensor:
    """The float64 column sums (K,) of a float32 tile of weight rows (T, K): each block of
    :data:`_BLOCK` rows summed in float32 (at most 31 roundings of 2⁻²⁴ relative to a
    partial sum of at most 32 weights: the order of the weights' own float32 rounding), the
    blocks' sums in float64. ``w.sum(0, dtype=torch.float64)`` casts every element on the
    way and took about 20x as long; the float64 total keeps a long context's sums from
    losing the small weights.

    >>> w = torch.rand(70, 5)
    >>> bool(torch.allclose(_column_sums(w), w.double().sum(0), rtol=1e-6, atol=0))
    True
    """
    full = w.shape[0] - w.shape[0] % _BLOCK
    out = w[:full].reshape(-1, _BLOCK, w.shape[1]).sum(1).sum(0, dtype=torch.float64)
    if full < w.shape[0]:
        out += w[full:].sum(0, dtype=torch.float64)
    return out


def _layer_sums(trace: AttentionTrace, layer: int, heads: Sequence[int], c: int, window: int,
                rollout: RolloutRows | None = None) -> dict[int, _HeadSums]:
    """Each of ``heads``' (h2o, snapkv-window, tova, future) column sums over the context
    keys, float64 (C,), from one pass over the layer's weight rows: a tile of rows at a
    time, every head's weights of it computed once. With ``rollout`` (``heads`` then every
    head of the layer), the same tiles, summed over the heads, are the layer's share of the
    rollout rows, so the pass makes them too (every key a later row sees is computed for
    it; the sums read the context's)."""
    step = _tile(trace.key_len)
    w0 = c - window
    h2o = {h: torch.zeros(c, dtype=torch.float64) for h in heads}
    snap = {h: torch.zeros(c, dtype=torch.float64) for h in heads}
    future = {h: torch.zeros(c, dtype=torch.float64) for h in heads}
    # the context's rows, then the later ones (c is a cut: no tile holds both)
    cuts = [*range(0, c, step), *range(c, trace.seq_len, step), trace.seq_len]
    for r0, r1 in zip(cuts, cuts[1:]):
        # a causal row sees no key after it: the tile's columns from r1 on are exact zeros,
        # neither computed nor summed; a later row's sums read the context's keys only
        keys = range(r1) if r0 < c or rollout is not None else range(c)
        total: Tensor | None = None
        for h in heads:
            w = trace.weights_tile(layer, h, range(r0, r1), keys)
            if r0 < c:
                h2o[h][:r1] += _column_sums(w)
                if r1 > w0:
                    snap[h][:r1] += _column_sums(w[max(0, w0 - r0):])
            else:
                future[h] += _column_sums(w[:, :c])
            if rollout is not None:  # (w's sums are taken: it may be the heads' sum now)
                t0 = time.perf_counter()
                total = w if total is None else total.add_(w)
                rollout.seconds += time.perf_counter() - t0
        if rollout is not None and total is not None:
            rollout.add(layer, r0, r1, 0, total)
    if rollout is not None:
        rollout.end_layer(layer)
    later = trace.seq_len - c
    return {h: (h2o[h], snap[h], trace.weights_rows(layer, h, c - 1)[0, :c].double(),
                future[h] / later) for h in heads}


def _window(window: int | None, c: int) -> int:
    return min(64, max(1, c // 8)) if window is None else window


def key_scores(trace: AttentionTrace, layer: int, kv_head: int, policy: str, *,
               context: int | None = None, window: int | None = None, pool: int = 5,
               sinks: int = 4, seed: int = 0) -> Tensor:
    """One policy's score (C,) of each context key of one layer and KV head (higher =
    kept first); ``context`` defaults to all but the last eighth of the trace, ``window``
    as :func:`evict`'s."""
    trace, c = _check(trace, context)
    window = _window(window, c)
    if policy not in POLICIES + CONTROLS:
        raise ValueError(f"policy must be one of {', '.join(POLICIES + CONTROLS)}, got "
                         f"{policy!r}")
    return _scores(trace, trace._layer(layer), kv_head, c, window, pool, sinks, seed)[0][policy]


def _group(trace: AttentionTrace, kv_head: int) -> list[int]:
    check_int("kv_head", kv_head, minimum=None)
    if not 0 <= kv_head < trace.num_kv_heads:
        raise IndexError(f"kv_head must be an int in [0, {trace.num_kv_heads}), got {kv_head!r}")
    return [h for h in range(trace.num_heads) if trace.kv_head(h) == kv_head]


def _check_knobs(c: int, window: int, pool: int, sinks: int) -> None:
    check_int("window", window, minimum=1)
    check_int("pool", pool, minimum=1)
    check_int("sinks", sinks)
    if window >= c:
        raise ValueError(f"window must be shorter than the context ({c} tokens), got {window}")
    if pool % 2 == 0:
        raise ValueError(f"pool must be odd (a centred window of keys), got {pool}")


def _scores(trace: AttentionTrace, layer: int, kv_head: int, c: int, window: int, pool: int,
            sinks: int, seed: int, sums: dict[int, _HeadSums] | None = None
            ) -> tuple[dict[str, Tensor], dict[int, Tensor]]:
    """(each policy's key scores, each query head's later attention per key); ``sums``:
    the layer's :func:`_layer_sums`, already made for the group's heads."""
    _check_knobs(c, window, pool, sinks)
    heads = _group(trace, kv_head)
    if sums is None:
        sums = _layer_sums(trace, layer, heads, c, window)
    parts = [sums[h] for h in heads]
    h2o, snap, tova, future = (torch.stack(x).mean(0) for x in zip(*parts))
    later = {h: part[3] for h, part in zip(heads, parts)}
    pos = torch.arange(c, dtype=torch.float64)
    snap = F.avg_pool1d(snap[None, None], pool, stride=1, padding=pool // 2,
                        count_include_pad=False)[0, 0]
    snap[c - window:] = float("inf")  # the observation window stays
    streaming = pos.clone()
    streaming[:sinks] = float("inf")
    norms = trace.layer_tensor("k", layer)[kv_head, :c].double().norm(dim=-1)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + layer * 1009 + kv_head)
    return {"h2o": h2o, "snapkv": snap, "tova": tova, "streaming": streaming,
            "knorm": -norms, "random": torch.rand(c, generator=gen, dtype=torch.float64),
            "oracle": future}, later


def kept_keys(scores: Tensor, budget: float) -> Tensor:
    """Bool (C,): the ``round(budget · C)`` keys of highest score (at least one; ties by
    position, the earlier first)."""
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget <= 1:
        raise ValueError(f"budget must be a fraction in (0, 1], got {budget!r}")
    c = scores.shape[0]
    n = min(c, max(1, round(budget * c)))
    order = torch.argsort(scores, descending=True, stable=True)
    keep = torch.zeros(c, dtype=torch.bool)
    keep[order[:n]] = True
    return keep


class EvictionSettings(TypedDict, total=False):
    """What :func:`evict` ran with (every key set by it; none on a result made by hand)."""

    window: int  # SnapKV's observation window (queries)
    pool: int  # SnapKV's pooling width
    sinks: int  # StreamingLLM's sink tokens
    seed: int  # the random control's seed


class EvictionTable(TypedDict):
    """An eviction measure's summary (:meth:`EvictionResult.summary`): its sizes, settings
    and the table of every policy at every budget."""

    context: int  # the prefill's tokens, the cache the policies evict from
    later: int  # the queries after it whose attention is read
    budgets: list[float]
    settings: EvictionSettings
    table: list[dict[str, Any]]  # :meth:`EvictionResult.table`: a column per budget


class EvictionJSON(EvictionTable):
    """:meth:`EvictionResult.to_json`: the summary, and the (L, H) loss of every policy at
    every budget (``lost[policy]["0.25"]``)."""

    lost: dict[str, dict[str, list[list[float]]]]


@dataclass
class EvictionResult:
    """``lost[policy][budget]``: (L, H) float64, the mean share of a later query's attention
    that fell on evicted keys, per layer and query head."""

    context: int
    later: int
    budgets: tuple[float, ...]
    policies: tuple[str, ...]
    lost: dict[str, dict[float, Tensor]]
    settings: EvictionSettings = field(default_factory=EvictionSettings)
    #: ``keep[policy][budget]``: bool (L, H_kv, C), the context keys each layer and KV head
    #: keeps (what :func:`attnlab.analysis.eviction_loss.eviction_losses` runs the model with).
    keep: dict[str, dict[float, Tensor]] = field(default_factory=dict, repr=False)
    #: :func:`evict`'s ``rollout`` rows (len(rows), N) float64, made in its pass, and the
    #: seconds they added to it (None when not asked).
    rollout: Tensor | None = field(default=None, repr=False)
    rollout_seconds: float | None = None

    def mean(self, policy: str, budget: float) -> float:
        return float(self.lost[policy][budget].mean())

    def worst(self, policy: str, budget: float) -> tuple[int, int, float]:
        t = self.lost[policy][budget]
        i = int(t.argmax())
        return i // t.shape[1], i % t.shape[1], float(t.flatten()[i])

    def table(self) -> list[dict[str, Any]]:
        """One row per policy: ``policy``, then at each budget ``b`` the mean loss
        (``lost@b``, a float) and the worst head's (``worst@b``: ``{"layer", "head",
        "lost"}``); the columns are the budgets measured, not a fixed set."""
        rows = []
        for p in self.policies:
            row: dict[str, Any] = {"policy": p}
            for b in self.budgets:
                layer, head, worst = self.worst(p, b)
                row[f"lost@{b:g}"] = self.mean(p, b)
                row[f"worst@{b:g}"] = {"layer": layer, "head": head, "lost": worst}
            rows.append(row)
        return rows

    def summary(self) -> EvictionTable:
        """The sizes, the settings and :meth:`table`, as JSON-ready data."""
        return {"context": self.context, "later": self.later, "budgets": list(self.budgets),
                "settings": self.settings, "table": self.table()}

    def to_json(self) -> EvictionJSON:
        """:meth:`summary` and every head's loss, as JSON-ready data."""
        return {**self.summary(),
                "lost": {p: {f"{b:g}": self.lost[p][b].tolist() for b in self.budgets}
                         for p in self.policies}}


def evict(trace: AttentionTrace, budgets: tuple[float, ...] = (0.1, 0.25, 0.5), *,
          context: int | None = None, policies: tuple[str, ...] = POLICIES + CONTROLS,
          window: int | None = None, pool: int = 5, sinks: int = 4, seed: int = 0,
          rollout: Any = None) -> EvictionResult:
    """Every policy at every budget over every layer and head of ``trace`` (see the module
    docstring): the share of the later queries' attention each one loses. SnapKV's
    ``window`` defaults to 64 queries (kvpress's), or an eighth of a shorter context.

    The measure recomputes every weight of the trace once. ``rollout`` (output rows: int,
    range or sequence) makes their residual-adjusted rollout from the same weights on the
    way (:func:`attnlab.tracing.attribution.rollout_rows`, in :attr:`EvictionResult.rollout`,
    with the seconds it added in ``rollout_seconds``) instead of a second pass over them."""
    trace, c = _check(trace, context)
    acc = None if rollout is None else RolloutRows(trace, rollout)
    window = _window(window, c)
    unknown = [p for p in policies if p not in POLICIES + CONTROLS]
    if unknown or not policies:
        raise ValueError(f"policies must be among {', '.join(POLICIES + CONTROLS)}, got "
                         f"{list(policies)!r}")
    for b in budgets:
        kept_keys(torch.zeros(1), b)  # the budget's own check
    nl, nh = trace.num_layers, trace.num_heads
    lost = {p: {b: torch.zeros(nl, nh, dtype=torch.float64) for b in budgets} for p in policies}
    keep = {p: {b: torch.zeros(nl, trace.num_kv_heads, c, dtype=torch.bool) for b in budgets}
            for p in policies}
    for layer in reversed(range(nl)):  # (the rollout's order; each layer stands alone)
        sums = _layer_sums(trace, layer, range(nh), c, window, acc)
        for g in range(trace.num_kv_heads):
            sc, later = _scores(trace, layer, g, c, window, pool, sinks, seed, sums)
            for p in policies:
                for b in budgets:
                    kept = kept_keys(sc[p], b)
                    keep[p][b][layer, g] = kept
                    gone = (~kept).double()
                    for h, seen in later.items():
                        lost[p][b][layer, h] = seen @ gone
    return EvictionResult(c, trace.seq_len - c, tuple(budgets), tuple(policies), lost,
                          {"window": window, "pool": pool, "sinks": sinks, "seed": seed},
                          keep, None if acc is None else acc.result(),
                          None if acc is None else acc.seconds)

