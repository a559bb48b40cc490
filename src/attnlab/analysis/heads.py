"""Head diagnostics: the scores of every head, the roles they earn, and redundancy.

:func:`diagnose` takes traces (the caller makes them: :func:`attnlab.tracing.tracer.trace`,
or :func:`induction_trace` for the repeated random sequence) and returns a
:class:`HeadDiagnostics`: the scores of :mod:`attnlab.analysis.scores` per head, the
induction score on a repeated random sequence (``repeat_induction``), the roles heads earn
by :class:`Thresholds`, and clusters of heads with near-identical patterns.

Redundancy: cosine similarity of the heads' (pooled) patterns, see
:func:`attnlab.analysis.scores.pattern_similarity`; heads are clustered by average
linkage, merging while the mean similarity between two clusters is >= the threshold.
Everything is computed in one streamed pass per trace (O(tile x N) memory per head).

An encoder–decoder trace (:class:`attnlab.tracing.stacks.StackedTrace`) is diagnosed stack
by stack (:class:`StackedDiagnostics`): the encoder's and the decoder's self-attention with
every score, cross-attention with the scores that do not place a query among the keys
(entropy, max weight): the others (:data:`POSITIONAL_SCORES`) need queries and keys from
one sequence, and are listed as skipped in its ``meta["skipped_scores"]`` with the reason.

What the diagnostics say beside the scores is a :class:`DiagnosticsMeta`; their JSON
(``attnlab diagnose --json``) a :class:`HeadDiagnosticsJSON` or
:class:`StackedDiagnosticsJSON`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, overload

import torch
from torch import Tensor

from attnlab._errors import check_int
from attnlab.analysis._diagnostics_records import (
    DiagnosticsMeta,
    HeadDiagnosticsJSON,
    RoleHit,
    StackedDiagnosticsJSON,
    ThresholdValues,
)
from attnlab.analysis._records import RepeatInductionInfo
from attnlab.analysis.scores import ForwardSums, check_trace, pattern_cosine, pool_block, scan
from attnlab.analysis.sums import scores_from_sums
from attnlab.tracing.runner import check_loaded

if TYPE_CHECKING:
    from attnlab.tracing.attention import AttentionTrace
    from attnlab.tracing.stacks import StackedTrace

__all__ = ["MAX_CLUSTER_HEADS", "POOLED_BYTES", "POSITIONAL_SCORES", "ROLES", "DiagnosticsMeta",
           "HeadDiagnostics", "HeadDiagnosticsJSON", "StackedDiagnostics",
           "StackedDiagnosticsJSON", "Thresholds", "ThresholdValues", "cluster_heads", "diagnose",
           "diagnose_model", "induction_trace", "pooled_block", "repeat_induction",
           "repeated_random_tokens"]

#: Scores that place query ``i`` at key position ``i + Lk − Lq`` (the first key, the
#: previous or same token, distances, earlier copies): defined when queries and keys are one
#: sequence, so cross-attention (target queries over source keys) leaves them out.
POSITIONAL_SCORES = ("sink", "previous", "diagonal", "distance", "duplicate", "induction")
#: Why cross-attention leaves out :data:`POSITIONAL_SCORES`.
CROSS_SKIPPED = ("needs queries and keys from one sequence; cross-attention's queries are "
                 "target tokens and its keys source tokens")


@dataclass(frozen=True)
class Thresholds:
    """When a head earns a role: its score must be >= the role's threshold.

    Every role score is a share of the head's attention mass (0 to 1; see
    :mod:`attnlab.analysis.scores`), so 0.5 means "half of what the head attends to":

    * ``sink``: score ``sink``, the mean weight on the first token over the queries after
      it. Half the mass on one token is far above uniform attention (1/N).
    * ``previous``: score ``previous`` (TransformerLens ``previous_token_head``), the mass
      on the token just before each query. Real previous-token heads reach 0.5 to 0.9.
    * ``induction``: score ``repeat_induction`` (TransformerLens ``induction_head`` on the
      second copy of a repeated random sequence), the mass on the token after the earlier
      copy of each query's token; chance is about 1/N (0.02 at N = 80).
    * ``diagonal``: score ``diagonal``, the mass on the query's own token ("self" role).
    * ``cluster_similarity``: heads are put in one cluster while the mean pairwise cosine
      similarity of their pooled patterns is >= this (near-duplicate patterns).
    """

    sink: float = 0.5
    previous: float = 0.4
    induction: float = 0.3
    diagonal: float = 0.5
    cluster_similarity: float = 0.9

    def to_json(self) -> ThresholdValues:
        """Every field, in the order they are declared.

        >>> import dataclasses
        >>> Thresholds().to_json() == dataclasses.asdict(Thresholds())
        True
        """
        return {"sink": self.sink, "previous": self.previous, "induction": self.induction,
                "diagonal": self.diagonal, "cluster_similarity": self.cluster_similarity}


#: role name -> (score it is read from, field of :class:`Thresholds` that gates it).
ROLES = {"sink": ("sink", "sink"), "previous-token": ("previous", "previous"),
         "induction": ("repeat_induction", "induction"), "self": ("diagonal", "diagonal")}


def cluster_heads(similarity: Tensor, threshold: float = 0.9) -> list[int]:
    """Average-linkage clusters: merge the two most similar clusters while their mean
    pairwise similarity is >= ``threshold``. Returns a cluster id per head (0, 1, ...
    in order of first appearance).

    The merges are found by the nearest-neighbour chain (Murtagh 1983), O(n²) time and one
    (n, n) float64 copy of ``similarity``, where merging the globally most similar pair
    each time costs O(n³): average linkage is reducible, so the two give the same clusters
    (up to ties). A cluster whose nearest cluster is below ``threshold`` is final (its mean
    similarity to any union of the others is a mean of values below it) and leaves the
    chain. A NaN similarity never merges.

    >>> s = torch.tensor([[1.0, 0.95, 0.1], [0.95, 1.0, 0.2], [0.1, 0.2, 1.0]])
    >>> cluster_heads(s, 0.9)
    [0, 0, 1]
    """
    import numpy as np  # small serial loops: numpy avoids torch's per-op thread overhead

    if not isinstance(similarity, Tensor) or similarity.dim() != 2 or (
            similarity.shape[0] != similarity.shape[1]):
        got = (f"shape {tuple(similarity.shape)}" if isinstance(similarity, Tensor)
               else type(similarity).__name__)
        raise ValueError(f"similarity must be a square (n, n) tensor, got {got}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise TypeError(f"threshold must be a number, got {type(threshold).__name__}")
    n = similarity.shape[0]
    # mean similarity between live clusters (Lance-Williams, average linkage); -inf marks
    # a cluster that is gone (merged or final) and the diagonal
    mean = np.array(similarity.detach().cpu().numpy(), dtype=np.float64)  # the one copy
    mean[np.isnan(mean)] = -np.inf
    np.fill_diagonal(mean, -np.inf)
    size = np.ones(n)
    owner = np.arange(n)  # the cluster each head was merged into (followed to its root)
    live = n
    chain: list[int] = []
    nxt = 0  # the lowest head that may still start a chain
    alive = np.ones(n, dtype=bool)

    def drop(i: int) -> None:
        mean[i, :] = -np.inf
        mean[:, i] = -np.inf
        alive[i] = False

    while live > 1:
        if not chain:
            while not alive[nxt]:
                nxt += 1
            chain.append(nxt)
        a = chain[-1]
        row = mean[a]
        b = int(np.argmax(row))
        if len(chain) > 1 and row[chain[-2]] >= row[b]:
            b = chain[-2]  # a tie with the chain's previous cluster: close the pair
        if not row[b] >= threshold:  # a's nearest cluster is too far: a is final
            chain.pop()
            drop(a)
            live -= 1
            continue
        if len(chain) < 2 or b != chain[-2]:
            chain.append(b)
            continue
        chain.pop()
        chain.pop()
        keep, gone = min(a, b), max(a, b)
        merged = (size[keep] * mean[keep] + size[gone] * mean[gone]) / (size[keep] + size[gone])
        size[keep] += size[gone]
        owner[gone] = keep
        drop(gone)
        merged[keep] = -np.inf  # (gone and final clusters are -inf in both rows already)
        mean[keep, :] = merged
        mean[:, keep] = merged
        live -= 1
    for i in range(n):  # each head to its root: merged clusters point to lower indices
        owner[i] = owner[owner[i]]
    order: dict[int, int] = {}
    return [order.setdefault(int(o), len(order)) for o in owner]


#: Above this many heads (layers x heads) :func:`diagnose` leaves out the similarity of
#: every pair of heads and the clusters: their memory grows as the heads squared, 12 bytes
#: a pair (the float32 similarity and the clustering's float64 copy), 3.2 GB at 16,384.
#: Every public model's heads are fewer (16,128 for the Llama-3.1-405B shape).
MAX_CLUSTER_HEADS = 16384

#: The pooled patterns the similarity compares take at most this many bytes (float32) in
#: all: a model of many heads gets coarser blocks (e.g. 91 a side instead of 256 for the
#: 16,128 heads of a Llama-3.1-405B shape). 270 heads at 256 blocks take 71 MB.
POOLED_BYTES = 512 << 20


def pooled_block(heads: int, lq: int, lk: int, max_blocks: int,
                 budget: int | None = None) -> int:
    """The side of the blocks that pool ``heads`` (lq, lk) patterns to at most
    ``max_blocks`` a side and at most ``budget`` bytes of float32 in all (default
    :data:`POOLED_BYTES`; never coarser than one block a side).

    >>> pooled_block(270, 8192, 8192, 256), pooled_block(16128, 3072, 3072, 256)
    (32, 34)
    """
    budget = POOLED_BYTES if budget is None else budget
    block = pool_block(lq, lk, max_blocks)
    top = max(lq, lk, 1)
    while block < top and heads * -(-lq // block) * -(-lk // block) * 4 > budget:
        block += 1
    return block


def forward_sums(max_blocks: int = 256) -> ForwardSums:
    """A taker of the head sums that :func:`diagnose` with ``max_blocks`` scans, for a
    trace to compute in its forward (:class:`~attnlab.analysis.scores.ForwardSums`)."""
    return ForwardSums(lambda heads, lq, lk: pooled_block(heads, lq, lk, max_blocks))


def traced_with_sums(trace_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``trace_fn(*args, **kwargs)`` (a :func:`~attnlab.tracing.tracer.trace`) with the head
    sums :func:`diagnose` scans taken in its forward and attached to the trace it returns,
    where they could be taken (:meth:`~attnlab.analysis.scores.ForwardSums.attach`)."""
    taker = forward_sums()
    traced = trace_fn(*args, sums=taker, **kwargs)
    taker.attach(traced)
    return traced


@dataclass
class HeadDiagnostics:
    """Scores (L, H) for every head of one trace, the roles they earn, and clusters.

    ``scores`` maps a score name (see :mod:`attnlab.analysis.scores`, plus
    ``repeat_induction`` when an induction trace was given) to an (L, H) tensor;
    ``similarity`` is (L·H, L·H) with head index l·H + h; ``clusters`` one id per head
    (both None for a model of more than :data:`MAX_CLUSTER_HEADS` heads, the reason in
    ``meta["similarity_skipped"]``);
    ``pooled`` (L, H, nq, nk) float32 are the pooled patterns the similarity compares
    (each block: mean over its queries of the sum over its keys, blocks of
    ``meta["similarity_block"]`` tokens), made in the same pass (None if not kept).
    """

    model: str
    tokens: list[str]
    scores: dict[str, Tensor]  # name -> (L, H)
    similarity: Tensor | None  # (L·H, L·H)
    clusters: list[int] | None
    thresholds: Thresholds = field(default_factory=Thresholds)
    meta: DiagnosticsMeta = field(default_factory=DiagnosticsMeta)
    pooled: Tensor | None = None  # (L, H, nq, nk)

    @property
    def num_layers(self) -> int:
        return self.scores["entropy"].shape[0]

    @property
    def num_heads(self) -> int:
        return self.scores["entropy"].shape[1]

    def redundancy(self) -> Tensor:
        """(L, H) highest similarity of each head to any other head (0 for a lone head;
        NaN where the similarity was not computed)."""
        if self.similarity is None:
            return torch.full((self.num_layers, self.num_heads), float("nan"))
        s = self.similarity.clone()
        if s.shape[0] < 2:
            return torch.zeros(self.num_layers, self.num_heads)
        s.fill_diagonal_(-1.0)
        return s.amax(-1).reshape(self.num_layers, self.num_heads)

    def roles(self) -> dict[str, list[tuple[int, int, float]]]:
        """role -> [(layer, head, score)] best first, for the heads whose score is >= the
        role's threshold (see :class:`Thresholds` and :data:`ROLES`); a role whose score
        was not computed is left out."""
        out: dict[str, list[tuple[int, int, float]]] = {}
        for role, (key, gate) in ROLES.items():
            if key not in self.scores:
                continue
            s = self.scores[key]
            th = getattr(self.thresholds, gate)
            hits = [(int(lh // s.shape[1]), int(lh % s.shape[1]), float(s.flatten()[lh]))
                    for lh in torch.nonzero(s.flatten() >= th).flatten().tolist()]
            out[role] = sorted(hits, key=lambda x: -x[2])
        return out

    def top(self, key: str, k: int = 1) -> list[tuple[int, int, float]]:
        """The k heads with the highest score ``key``, as (layer, head, score)."""
        if key not in self.scores:
            raise KeyError(f"no score {key!r}; computed: {', '.join(self.scores)}")
        s = self.scores[key].flatten()
        vals, idx = s.topk(min(k, s.numel()))
        h = self.num_heads
        return [(int(i) // h, int(i) % h, float(v)) for v, i in zip(vals, idx)]

    def rows(self) -> list[dict[str, Any]]:
        """One dict per head: layer, head, every score, redundancy, cluster, roles. The
        columns are the scores computed (:attr:`scores`), so a row's keys are the data's,
        not a fixed set; callers reshape the rows (the explorer joins the roles)."""
        red = self.redundancy()
        roles: dict[tuple[int, int], list[str]] = {
            (l_, h): [] for l_ in range(self.num_layers) for h in range(self.num_heads)}
        for role, hits in self.roles().items():
            for l_, h, _ in hits:
                roles[(l_, h)].append(role)
        out = []
        for l_ in range(self.num_layers):
            for h in range(self.num_heads):
                row: dict[str, Any] = {"layer": l_, "head": h}
                for k, v in self.scores.items():
                    row[k] = round(float(v[l_, h]), 6)
                row["redundancy"] = (None if self.clusters is None
                                     else round(float(red[l_, h]), 6))
                row["cluster"] = (None if self.clusters is None
                                  else self.clusters[l_ * self.num_heads + h])
                row["roles"] = roles[(l_, h)]
                out.append(row)
        return out

    def tables(self, top: int = 5) -> list[Any]:
        """rich Tables for the terminal: the roles with their strongest heads, then the
        most distinctive head for each score."""
        from rich.table import Table

        stack = self.meta.get("stack")
        where = f", {stack} stack" if stack not in (None, "self") else ""
        roles = Table(title=f"{self.model}{where}: head roles ({self.num_layers} layers x "
                      f"{self.num_heads} heads, {len(self.tokens)} tokens)")
        roles.add_column("role")
        roles.add_column("heads", justify="right")
        roles.add_column(f"strongest (layer.head score), top {top}")
        names = {"sink": "attention sink (first token)", "previous-token": "previous-token",
                 "induction": "induction (repeated random tokens)", "self": "self / diagonal"}
        for role, hits in self.roles().items():
            best = ", ".join(f"L{l_}.H{h} {s:.2f}" for l_, h, s in hits[:top]) or "none"
            roles.add_row(names.get(role, role), str(len(hits)), best)
        if self.clusters is None:
            roles.caption = f"no clusters: {self.meta['similarity_skipped']}"
        else:
            roles.caption = (f"{len(set(self.clusters))} clusters of heads at similarity >= "
                             f"{self.thresholds.cluster_similarity}; most redundant head "
                             f"{float(self.redundancy().max()):.2f}")
        skipped = self.meta.get("skipped_scores")
        if skipped:
            reasons = sorted(set(skipped.values()))
            roles.caption += (f"; skipped: {', '.join(skipped)} ({'; '.join(reasons)})")
        heads = Table(title="most distinctive head per score")
        for col in ("score", "layer.head", "value", "mean over heads"):
            heads.add_column(col, justify="right" if col != "score" else "left")
        for key, v in self.scores.items():
            (l_, h, s), = self.top(key, 1)
            heads.add_row(key, f"L{l_}.H{h}", f"{s:.3f}", f"{float(v.mean()):.3f}")
        low = self.scores["entropy"].flatten().argmin()
        heads.add_row("lowest entropy", f"L{int(low) // self.num_heads}.H"
                      f"{int(low) % self.num_heads}",
                      f"{float(self.scores['entropy'].flatten()[low]):.3f}", "")
        return [roles, heads]

    def to_json(self) -> HeadDiagnosticsJSON:
        """Everything as JSON-ready data (scores rounded to 6 decimals)."""
        roles: dict[str, list[RoleHit]] = {
            r: [{"layer": l_, "head": h, "score": round(s, 6)} for l_, h, s in hits]
            for r, hits in self.roles().items()}
        n_clusters = None if self.clusters is None else len(set(self.clusters))
        return {"model": self.model, "tokens": self.tokens, "num_layers": self.num_layers,
                "num_heads": self.num_heads, "roles": roles, "num_clusters": n_clusters,
                "thresholds": self.thresholds.to_json(),
                "heads": self.rows(), "meta": self.meta}


def _repeat_ids(start: int, period: int, n: int) -> list[int]:
    """Stand-in token ids with the structure ``prefix + r + r``: equal where the repeated
    sequence repeats, distinct everywhere else."""
    ids = [-1 - i for i in range(start)] + list(range(period)) * 2
    return ids + [-1 - start - i for i in range(n - len(ids))]


def _repeat_spec(induction: Any, period: int | None, start: int | None) -> tuple[int, int]:
    spec = getattr(induction, "meta", {}).get("repeated_random") or {}
    period = spec.get("period") if period is None else period
    start = spec.get("start", 0) if start is None else start
    if period is None:
        raise ValueError("period is required with an induction trace that was not made by "
                         "induction_trace (no meta['repeated_random'])")
    n = induction.seq_len
    period = check_int("period", period, minimum=2)
    start = check_int("start", start)
    if start + 2 * period > n or induction.key_len != n:
        raise ValueError(
            f"period={period} with start={start} needs a self-attention trace of "
            f"{start + 2 * period} tokens or more, the induction trace has {n} queries and "
            f"{induction.key_len} keys")
    return period, start


def repeat_induction(induction: Any, *, period: int | None = None, start: int | None = None,
                     tile_rows: int | None = None) -> tuple[Tensor, RepeatInductionInfo]:
    """attnlab's ``repeat_induction``: TransformerLens's ``induction_head`` score over the
    rows of the second copy of a repeated random sequence (``prefix + r + r``, the trace
    of :func:`induction_trace`, or ``period``/``start`` given); (L, H) float64 and
    ``{"period", "start", "tokens"}``."""
    period, start = _repeat_spec(induction, period, start)
    ids = getattr(induction, "token_ids", None)
    if ids is None or len(ids) != induction.key_len:
        ids = _repeat_ids(start, period, induction.key_len)
    sums, _, _ = scan(induction, queries=range(start + period, start + 2 * period),
                      token_ids=ids, tile_rows=tile_rows)
    return (scores_from_sums(sums, True)["induction"],
            {"period": period, "start": start, "tokens": induction.seq_len})


@contextlib.contextmanager
def _progress(show: bool, what: str) -> Iterator[Callable[[int, int], Any] | None]:
    """A rich progress bar on stderr, advanced by ``(done, total)`` calls; None if not
    shown."""
    if not show:
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


@overload
def diagnose(trace: AttentionTrace, *, induction: Any = ..., period: int | None = ...,
             start: int | None = ..., thresholds: Thresholds | None = ...,
             tile_rows: int | None = ..., max_blocks: int = ..., progress: bool = ...,
             group: Any = ...) -> HeadDiagnostics: ...


@overload
def diagnose(trace: StackedTrace, *, induction: Any = ..., period: int | None = ...,
             start: int | None = ..., thresholds: Thresholds | None = ...,
             tile_rows: int | None = ..., max_blocks: int = ..., progress: bool = ...,
             group: Any = ...) -> StackedDiagnostics: ...


@overload
def diagnose(trace: Any, *, induction: Any = ..., period: int | None = ...,
             start: int | None = ..., thresholds: Thresholds | None = ...,
             tile_rows: int | None = ..., max_blocks: int = ..., progress: bool = ...,
             group: Any = ...) -> HeadDiagnostics | StackedDiagnostics: ...


def diagnose(trace: Any, *, induction: Any = None, period: int | None = None,
             start: int | None = None, thresholds: Thresholds | None = None,
             tile_rows: int | None = None, max_blocks: int = 256,
             progress: bool = False, group: Any = None) -> HeadDiagnostics | StackedDiagnostics:
    """Diagnose every head of ``trace`` in one streamed pass.

    Args:
        trace: an :class:`attnlab.tracing.AttentionTrace` of any text, or a
            :class:`attnlab.tracing.stacks.StackedTrace` (diagnosed stack by stack: a
            :class:`StackedDiagnostics`; cross-attention without the positional scores).
        induction: optional trace of a repeated random sequence from the same model,
            ``prefix (start tokens) + r + r`` with ``r`` of ``period`` distinct tokens
            (made by :func:`induction_trace`, which records ``period`` and ``start`` in its
            meta). Gives ``repeat_induction``: TransformerLens's ``induction_head`` score
            over the rows of the second copy, and with it the induction role.
        period, start: the sequence's structure, when the induction trace does not record
            it.
        thresholds: when heads earn roles (:class:`Thresholds`).
        tile_rows: query rows per tile (memory O(tile_rows x N) per head).
        max_blocks: the similarity compares patterns pooled to at most this many blocks a
            side (exact up to that many tokens), and coarser where the heads' patterns
            would take more than :data:`POOLED_BYTES` (:func:`pooled_block`).
        progress: show a progress bar over the query rows on stderr.
        group: a :class:`attnlab._dist.Group` (``attnlab._dist.join()`` under ``torchrun``):
            each of its processes scans every ``world``-th head, and the sums and pooled
            patterns are summed over the group, so every process returns the diagnostics of
            one process, to the bit (the other heads' entries are zeros). None or a group of
            one process: one pass over every head.

    >>> from attnlab.tracing.attention import AttentionTrace
    >>> prev = torch.eye(5).roll(1, 0).tril()  # every token on the one before it...
    >>> prev[0, 0] = 1.0  # ...and the first on itself
    >>> d = diagnose(AttentionTrace(tokens=list("abcde"), weights=prev[None, None]))
    >>> [(l, h) for l, h, _ in d.roles()["previous-token"]], round(d.top("previous")[0][2], 4)
    ([(0, 0)], 0.8)
    """
    from attnlab.tracing.stacks import StackedTrace

    if isinstance(trace, StackedTrace):
        if induction is not None:
            raise ValueError("induction is for a one-stack (decoder) trace; an "
                             "encoder–decoder trace is diagnosed stack by stack without it")
        return StackedDiagnostics(
            model=trace.model, meta={"text": trace.text, "target": trace.target},
            # (each stack's trace is an AttentionTrace: one HeadDiagnostics each)
            stacks={name: diagnose(t, thresholds=thresholds, tile_rows=tile_rows,
                                   max_blocks=max_blocks, progress=progress, group=group)
                    for name, t in trace.items()})
    check_trace(trace)
    if induction is not None:
        check_trace(induction)
    th = thresholds or Thresholds()
    if not isinstance(th, Thresholds):
        raise TypeError(f"thresholds must be a Thresholds, got {type(th).__name__}")
    block = pooled_block(trace.num_layers * trace.num_heads, trace.seq_len, trace.key_len,
                         max_blocks)
    share = None
    if group is not None and group.distributed:
        every = [(layer, head) for layer in range(trace.num_layers)
                 for head in range(trace.num_heads)]
        share = every[group.rank::group.world]
    with _progress(progress, "scoring heads (query rows)") as on_tile:
        sums, pooled, with_ids = scan(trace, tile_rows=tile_rows, pool_block=block,
                                      on_tile=on_tile, heads=share)
    if share is not None:
        import torch.distributed as dist

        dist.all_reduce(sums)
        if pooled is not None:
            dist.all_reduce(pooled)
    scores = scores_from_sums(sums, with_ids)
    meta: DiagnosticsMeta = {"similarity_block": block}
    stack = getattr(trace, "stack", "self")
    if stack != "self":
        meta["stack"] = stack
    if stack == "cross":
        if induction is not None:
            raise ValueError("induction needs a self-attention trace, got cross-attention")
        meta["skipped_scores"] = {k: CROSS_SKIPPED for k in POSITIONAL_SCORES}
        scores = {k: v for k, v in scores.items() if k not in POSITIONAL_SCORES}
    if induction is not None:
        shape = (induction.num_layers, induction.num_heads)
        if shape != (trace.num_layers, trace.num_heads):
            raise ValueError(f"induction trace has (L, H)={shape}, trace has "
                             f"{(trace.num_layers, trace.num_heads)}: not the same model")
        scores["repeat_induction"], meta["induction"] = repeat_induction(
            induction, period=period, start=start, tile_rows=tile_rows)
    heads = trace.num_layers * trace.num_heads
    sim = clusters = None
    if heads <= MAX_CLUSTER_HEADS:
        if share is None:
            sim = pattern_cosine(pooled)
        else:  # each process its rows, summed: the one process's matrix, to the bit
            sim = pattern_cosine(pooled, share=(group.rank, group.world))
            dist.all_reduce(sim)
        clusters = cluster_heads(sim, th.cluster_similarity)
    else:
        meta["similarity_skipped"] = (
            f"{heads:,} heads: the similarity of every pair and its clustering are left out "
            f"above {MAX_CLUSTER_HEADS:,} heads (their memory grows as the heads squared, "
            "their time faster)")
    return HeadDiagnostics(model=str(getattr(trace, "model", "") or ""),
                           tokens=list(trace.tokens), scores=scores, similarity=sim,
                           clusters=clusters, thresholds=th, meta=meta, pooled=pooled)


@dataclass
class StackedDiagnostics:
    """The :class:`HeadDiagnostics` of each stack of an encoder–decoder trace (``encoder``,
    ``decoder``, ``cross``, in that order); cross-attention's positional scores skipped
    (see the module docstring)."""

    model: str
    stacks: dict[str, HeadDiagnostics]
    meta: DiagnosticsMeta = field(default_factory=DiagnosticsMeta)

    def __getitem__(self, stack: str) -> HeadDiagnostics:
        try:
            return self.stacks[stack]
        except KeyError:
            raise KeyError(f"no stack {stack!r}; diagnosed: {', '.join(self.stacks)}"
                           ) from None

    def tables(self, top: int = 5) -> list[Any]:
        """The tables of :meth:`HeadDiagnostics.tables`, stack by stack (titles name it)."""
        return [t for d in self.stacks.values() for t in d.tables(top)]

    def to_json(self) -> StackedDiagnosticsJSON:
        """``{"model", "stacks": {name: HeadDiagnostics.to_json()}, "meta"}``."""
        return {"model": self.model, "stacks": {n: d.to_json() for n, d in self.stacks.items()},
                "meta": self.meta}


def repeated_random_tokens(vocab: Sequence[int] | int, period: int, *, seed: int = 0,
                           prefix: Sequence[int] = ()) -> list[int]:
    """``prefix + r + r`` with ``r`` = ``period`` distinct random ids drawn from ``vocab``
    (an int = range(vocab), or the candidate ids).

    >>> repeated_random_tokens(100, 3, seed=0, prefix=[7])[1:4] == \\
    ...     repeated_random_tokens(100, 3, seed=0, prefix=[7])[4:]
    True
    """
    pool = torch.arange(vocab) if isinstance(vocab, int) else torch.tensor(list(vocab))
    if period < 2 or period > len(pool):
        raise ValueError(f"period must be in [2, {len(pool)}], got {period}")
    g = torch.Generator().manual_seed(seed)
    r = pool[torch.randperm(len(pool), generator=g)[:period]].tolist()
    return list(prefix) + r + r


#: What :func:`induction_trace` and :func:`diagnose_model` read of a loaded model.
_LOADED = ("model", "tokenizer", "name", "causal", "max_length")

#: The keys of a trace's meta :func:`diagnose_model` copies to the diagnostics' meta: how
#: the model ran on the text.
_RUN_META: tuple[Literal["prompt_tokens", "generated", "generation", "chat", "run"], ...] = (
    "prompt_tokens", "generated", "generation", "chat", "run")


def induction_trace(model: Any, *, period: int = 40, seed: int = 0) -> Any:
    """Trace a repeated random token sequence through an already-loaded causal model.

    ``model`` is duck-typed like :class:`attnlab.models.LoadedModel` (``.model``,
    ``.tokenizer``, ``.name``, ``.causal``, ``.max_length``). The sequence is the
    tokenizer's BOS (if it has one) + ``period`` distinct random ids + the same ids again,
    drawn from the vocabulary without its special and lowest ids (bytes); ``period`` is
    cut to fit the model. The trace's ``meta["repeated_random"]`` records ``period``,
    ``start`` (prefix length) and ``seed`` for :func:`diagnose`.
    """
    check_loaded(model, _LOADED)
    from attnlab.tracing.tracer import trace as run_trace

    if not model.causal:
        raise ValueError(f"model {model.name!r} is not causal: the induction test needs a "
                         "model that predicts the next token")
    tok = model.tokenizer
    bos = getattr(tok, "bos_token_id", None)
    prefix = [bos] if isinstance(bos, int) else []
    vocab = int(getattr(getattr(model.model, "config", None), "vocab_size", 0) or 0)
    if vocab <= 0:
        vocab = len(tok) if hasattr(tok, "__len__") else 0
    special = set(getattr(tok, "all_special_ids", []) or [])
    lo = min(1000, vocab // 10)  # skip the low ids: bytes and special tokens
    pool = [i for i in range(lo, vocab) if i not in special]
    period = min(period, len(pool), (model.max_length - len(prefix)) // 2)
    if period < 2:
        raise ValueError(
            f"model {model.name!r} is too small for an induction test (vocabulary {vocab}, "
            f"max_length {model.max_length})")
    ids = repeated_random_tokens(pool, period, seed=seed, prefix=prefix)
    t = run_trace(model, ids)
    t.meta["repeated_random"] = {"period": period, "start": len(prefix), "seed": seed}
    return t


def diagnose_model(model: Any, text: str, *, seed: int = 0, period: int = 40,
                   thresholds: Thresholds | None = None, truncate: bool = False,
                   tile_rows: int | None = None, progress: bool = False,
                   target: str | None = None, run: dict[str, Any] | None = None
                   ) -> HeadDiagnostics | StackedDiagnostics:
    """Trace ``text`` through an already-loaded ``model`` and diagnose it; for a causal
    model, also trace a repeated random sequence (:func:`induction_trace`) for the
    induction role.

    ``model`` is duck-typed like :class:`attnlab.models.LoadedModel`; loading by name is
    the caller's (``attnlab.models.load``). Byte pieces are not merged, so the scores are
    those of the model's own tokens. ``progress`` shows the tracing and scoring on stderr.
    An encoder–decoder model is traced with ``text`` as its source and ``target`` (or its
    own generation) and diagnosed stack by stack (:class:`StackedDiagnostics`). ``run``:
    how the model runs on ``text`` (the tracer's ``chat``, ``generate``, ``temperature``,
    ``top_p``, ``seed``, ``dtype``, ``device``).
    """
    check_loaded(model, _LOADED)
    from attnlab.tracing.tracer import trace as run_trace

    # the head sums come from the forward's own attention where they can (traced_with_sums)
    main = traced_with_sums(run_trace, model, text, target=target, truncate=truncate,
                            merge_pieces=False, progress=progress, **(run or {}))
    if not hasattr(main, "weights_rows"):  # a StackedTrace
        d = diagnose(main, thresholds=thresholds, tile_rows=tile_rows, progress=progress)
        d.meta["seed"] = seed
        d.meta["target_from"] = main.meta.get("target_from")
        if "target_truncated_from" in main.meta:
            d.meta["target_truncated_from"] = main.meta["target_truncated_from"]
            d.meta["target_tokens"] = main["decoder"].seq_len
        return d
    ind = induction_trace(model, period=period, seed=seed) if model.causal else None
    d = diagnose(main, induction=ind, thresholds=thresholds, tile_rows=tile_rows,
                 progress=progress)
    d.meta["text"] = text
    d.meta["seed"] = seed
    for key in _RUN_META:
        if key in main.meta:  # how the model ran on the text
            d.meta[key] = main.meta[key]
    return d
