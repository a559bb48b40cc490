"""Head diagnostics: what each head of a trace does, in a few numbers.

For one head with weights ``W`` (Lq x Lk, rows sum to 1) and ``N`` queries:

=================  ==================================================================
entropy            mean_i  -sum_j W_ij log W_ij   (nats; 0 = one key, log Lk = uniform)
max_weight         mean_i  max_j W_ij             (saturation: near 1 = one-hot rows)
sink               mean_{i>=1} W_i0               (mass on the first token)
previous           mean_{i>=1} W_{i,i-1}          (previous-token head)
diagonal           mean_i  W_ii                   (attends to itself)
induction          mean over the second copy of a repeated random sequence of period T
                   of W_{i, i-T+1}: the token *after* the earlier occurrence
=================  ==================================================================

Redundancy: cosine similarity of the heads' flattened patterns; heads are clustered by
average linkage, merging while the mean similarity between two clusters is >= 0.9.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor

from attnlab.trace.trace import AttentionTrace

__all__ = ["HeadDiagnostics", "Thresholds", "head_scores", "induction_scores",
           "pattern_similarity", "cluster_heads", "diagnose", "recompute_errors",
           "repeated_random_tokens", "diagnose_model"]


@dataclass(frozen=True)
class Thresholds:
    """When a head earns a role name; each is a mean weight, so 0.5 = "most of its mass"."""

    sink: float = 0.5  # half a head's mass on token 0 is far above uniform 1/N
    previous: float = 0.4  # a clear majority pattern; real previous-token heads reach 0.5-0.9
    induction: float = 0.3  # random repeated tokens: 1/N chance level is ~0.02 at N=80
    diagonal: float = 0.5  # mostly itself
    cluster_similarity: float = 0.9  # near-duplicate patterns


def _check(trace: AttentionTrace) -> Tensor:
    if not isinstance(trace, AttentionTrace):
        raise TypeError(f"trace must be an AttentionTrace, got {type(trace).__name__}")
    return trace.weights.float()


def head_scores(trace: AttentionTrace) -> dict[str, Tensor]:
    """entropy, max_weight, sink, previous, diagonal: each (L, H).

    >>> w = torch.eye(4).expand(1, 1, 4, 4)  # every token attends to itself
    >>> s = head_scores(AttentionTrace(tokens=list("abcd"), weights=w))
    >>> s["diagonal"].item(), s["previous"].item(), abs(s["entropy"].item())
    (1.0, 0.0, 0.0)
    """
    w = _check(trace)  # (L, H, Lq, Lk)
    lq, lk = w.shape[-2:]
    off = lk - lq  # bottom-right alignment: query i sits at key position i + off
    ent = -(w * torch.log(w.clamp_min(1e-30))).sum(-1).mean(-1) + 0.0  # + 0.0: no -0.0
    idx = torch.arange(lq)
    diag = w[..., idx, idx + off].mean(-1)
    if lq > 1:
        later = idx[1:]
        prev = w[..., later, later + off - 1].mean(-1)
        sink = w[..., later, 0].mean(-1)
    else:
        prev = torch.zeros(w.shape[:2])
        sink = w[..., 0, 0]
    return {"entropy": ent, "max_weight": w.amax(-1).mean(-1), "sink": sink,
            "previous": prev, "diagonal": diag}


def induction_scores(trace: AttentionTrace, period: int, start: int = 0) -> Tensor:
    """(L, H) mean weight from each token of the repeat to the token after its first copy.

    The input is ``prefix (start tokens) + r_1..r_T + r_1..r_T`` with ``T = period``: the
    query at ``start + T + t`` (t >= 1) should attend key ``start + t + 1``... i.e. the
    key one after the earlier occurrence, at ``i - T + 1``.
    """
    w = _check(trace)
    n = w.shape[-1]
    if period < 2 or start + 2 * period > n:
        raise ValueError(
            f"period={period} with start={start} needs {start + 2 * period} tokens, trace has {n}"
        )
    q = torch.arange(start + period + 1, start + 2 * period)
    return w[..., q, q - period + 1].mean(-1)


def pattern_similarity(trace: AttentionTrace) -> Tensor:
    """(L·H, L·H) cosine similarity of the flattened patterns, head index = l·H + h."""
    w = _check(trace)
    flat = w.reshape(w.shape[0] * w.shape[1], -1)
    flat = flat / flat.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return flat @ flat.T


def cluster_heads(similarity: Tensor, threshold: float = 0.9) -> list[int]:
    """Average-linkage clusters: merge the two most similar clusters while their mean
    pairwise similarity is >= ``threshold``. Returns a cluster id per head (0, 1, ...
    in order of first appearance).

    >>> s = torch.tensor([[1.0, 0.95, 0.1], [0.95, 1.0, 0.2], [0.1, 0.2, 1.0]])
    >>> cluster_heads(s, 0.9)
    [0, 0, 1]
    """
    import numpy as np  # small serial loops: numpy avoids torch's per-op thread overhead

    sim = similarity.detach().double().cpu().numpy()
    n = sim.shape[0]
    owner = np.arange(n)  # cluster id (its first head) of each head
    sums = sim.copy()  # sum of pairwise similarities between clusters
    sizes = np.ones(n)
    alive = np.ones(n, dtype=bool)
    mean = sums / np.outer(sizes, sizes)
    np.fill_diagonal(mean, -np.inf)
    while True:
        a, b = np.unravel_index(int(np.argmax(mean)), mean.shape)
        if mean[a, b] < threshold:
            break
        a, b = min(a, b), max(a, b)
        owner[owner == b] = a
        sums[a, :] += sums[b, :]
        sums[:, a] += sums[:, b]
        sizes[a] += sizes[b]
        alive[b] = False
        row = np.where(alive, sums[a] / (sizes[a] * sizes), -np.inf)
        mean[a, :] = row
        mean[:, a] = row
        mean[b, :] = -np.inf
        mean[:, b] = -np.inf
        mean[a, a] = -np.inf
    order: dict[int, int] = {}
    return [order.setdefault(int(o), len(order)) for o in owner]


def recompute_errors(trace: AttentionTrace, *, mask: Tensor | None = None) -> dict[str, float]:
    """Max |error| of softmax(q kᵀ·scale + mask) and of its product with v, against the
    weights and per-head context the model itself computed.

    The causal mask comes from ``trace.causal``; ``mask`` adds any other (bool True = may
    attend, or float added).
    """
    if trace.q is None or trace.k is None:
        raise ValueError("recompute_errors needs a trace with q and k (trace(..., qkv=True))")
    scale = trace.scale if trace.scale is not None else trace.q.shape[-1] ** -0.5
    s = (trace.q.double() @ trace.k.double().transpose(-2, -1)) * scale  # (L, H, Lq, Lk)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    if trace.causal:
        lq, lk = s.shape[-2:]
        keep = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq)
        s = s.masked_fill(~keep, float("-inf"))
    w = torch.softmax(s, dim=-1)
    out = {"weights": float((w - trace.weights.double()).abs().max())}
    if trace.v is not None and trace.context is not None:
        out["context"] = float((w @ trace.v.double() - trace.context.double()).abs().max())
    return out


@dataclass
class HeadDiagnostics:
    """Scores (L, H) for every head of one trace, the roles they earn, and clusters."""

    model: str
    tokens: list[str]
    scores: dict[str, Tensor]  # name -> (L, H)
    similarity: Tensor  # (L·H, L·H)
    clusters: list[int]
    thresholds: Thresholds = field(default_factory=Thresholds)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def num_layers(self) -> int:
        return self.scores["entropy"].shape[0]

    @property
    def num_heads(self) -> int:
        return self.scores["entropy"].shape[1]

    def redundancy(self) -> Tensor:
        """(L, H) highest similarity of each head to any other head."""
        s = self.similarity.clone()
        s.fill_diagonal_(-1.0)
        return s.amax(-1).reshape(self.num_layers, self.num_heads)

    def roles(self) -> dict[str, list[tuple[int, int, float]]]:
        """role -> [(layer, head, score)] best first, for heads above the role's threshold."""
        t = self.thresholds
        out: dict[str, list[tuple[int, int, float]]] = {}
        for role, key, th in (("sink", "sink", t.sink), ("previous-token", "previous", t.previous),
                              ("induction", "induction", t.induction),
                              ("self", "diagonal", t.diagonal)):
            if key not in self.scores:
                continue
            s = self.scores[key]
            hits = [(int(lh // s.shape[1]), int(lh % s.shape[1]), float(s.flatten()[lh]))
                    for lh in torch.nonzero(s.flatten() >= th).flatten().tolist()]
            out[role] = sorted(hits, key=lambda x: -x[2])
        return out

    def top(self, key: str, k: int = 1) -> list[tuple[int, int, float]]:
        """The k heads with the highest score ``key``."""
        s = self.scores[key].flatten()
        vals, idx = s.topk(min(k, s.numel()))
        h = self.num_heads
        return [(int(i) // h, int(i) % h, float(v)) for v, i in zip(vals, idx)]

    def rows(self) -> list[dict[str, Any]]:
        """One dict per head: layer, head, every score, redundancy, cluster, roles."""
        red = self.redundancy()
        roles = {(l_, h): [] for l_ in range(self.num_layers) for h in range(self.num_heads)}
        for role, hits in self.roles().items():
            for l_, h, _ in hits:
                roles[(l_, h)].append(role)
        out = []
        for l_ in range(self.num_layers):
            for h in range(self.num_heads):
                row: dict[str, Any] = {"layer": l_, "head": h}
                for k, v in self.scores.items():
                    row[k] = round(float(v[l_, h]), 6)
                row["redundancy"] = round(float(red[l_, h]), 6)
                row["cluster"] = self.clusters[l_ * self.num_heads + h]
                row["roles"] = roles[(l_, h)]
                out.append(row)
        return out

    def tables(self, top: int = 5) -> list[Any]:
        """rich Tables for the terminal: the roles with their strongest heads, then the
        most distinctive head for each score."""
        from rich.table import Table

        roles = Table(title=f"{self.model}: head roles ({self.num_layers} layers x "
                      f"{self.num_heads} heads, {len(self.tokens)} tokens)")
        roles.add_column("role")
        roles.add_column("heads", justify="right")
        roles.add_column(f"strongest (layer.head score), top {top}")
        names = {"sink": "attention sink (first token)", "previous-token": "previous-token",
                 "induction": "induction", "self": "self / diagonal"}
        for role, hits in self.roles().items():
            best = ", ".join(f"L{l_}.H{h} {s:.2f}" for l_, h, s in hits[:top]) or "none"
            roles.add_row(names.get(role, role), str(len(hits)), best)
        red = self.redundancy()
        n_clusters = len(set(self.clusters))
        roles.caption = (f"{n_clusters} clusters of heads at similarity >= "
                         f"{self.thresholds.cluster_similarity}; most redundant head "
                         f"{float(red.max()):.2f}")
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

    def to_json(self) -> dict[str, Any]:
        roles = {r: [{"layer": l_, "head": h, "score": round(s, 6)} for l_, h, s in hits]
                 for r, hits in self.roles().items()}
        n_clusters = len(set(self.clusters))
        return {"model": self.model, "tokens": self.tokens, "num_layers": self.num_layers,
                "num_heads": self.num_heads, "roles": roles, "num_clusters": n_clusters,
                "thresholds": asdict(self.thresholds),
                "heads": self.rows(), "meta": self.meta}


def diagnose(trace: AttentionTrace, *, induction: AttentionTrace | None = None,
             period: int | None = None, start: int = 0,
             thresholds: Thresholds | None = None) -> HeadDiagnostics:
    """Diagnose every head of ``trace``; ``induction`` is a trace of a repeated random
    sequence of ``period`` tokens after ``start`` prefix tokens (see
    :func:`repeated_random_tokens`), from the same model."""
    th = thresholds or Thresholds()
    scores = head_scores(trace)
    meta: dict[str, Any] = {}
    if induction is not None:
        if period is None:
            raise ValueError("period is required with an induction trace")
        if induction.weights.shape[:2] != trace.weights.shape[:2]:
            raise ValueError(
                f"induction trace has (L, H)={tuple(induction.weights.shape[:2])}, trace has "
                f"{tuple(trace.weights.shape[:2])}: not the same model"
            )
        scores["induction"] = induction_scores(induction, period, start)
        meta["induction"] = {"period": period, "start": start,
                             "tokens": len(induction.tokens)}
    sim = pattern_similarity(trace)
    return HeadDiagnostics(model=trace.model, tokens=list(trace.tokens), scores=scores,
                           similarity=sim, clusters=cluster_heads(sim, th.cluster_similarity),
                           thresholds=th, meta=meta)


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


def diagnose_model(model: Any, text: str, *, seed: int = 0, period: int = 40,
                   thresholds: Thresholds | None = None, truncate: bool = False
                   ) -> HeadDiagnostics:
    """Trace ``text`` through ``model`` (name, path or LoadedModel) and diagnose it; for a
    causal model, also trace a repeated random sequence for the induction score."""
    from attnlab.models import LoadedModel, load
    from attnlab.trace.tracer import trace as run_trace

    loaded = model if isinstance(model, LoadedModel) else load(model)
    main = run_trace(loaded, text, qkv=False, truncate=truncate)
    ind = None
    start = 0
    if loaded.causal:
        tok = loaded.tokenizer
        bos = getattr(tok, "bos_token_id", None)
        prefix = [bos] if isinstance(bos, int) else []
        start = len(prefix)
        vocab = int(getattr(getattr(loaded.model, "config", None), "vocab_size", 0) or 0)
        if vocab <= 0:
            vocab = len(tok) if hasattr(tok, "__len__") else 0
        special = set(getattr(tok, "all_special_ids", []) or [])
        lo = min(1000, vocab // 10)  # skip the low ids: bytes and special tokens
        pool = [i for i in range(lo, vocab) if i not in special]
        # the repeated sequence must fit the model: prefix + 2 * period <= max_length
        period = min(period, len(pool), (loaded.max_length - len(prefix)) // 2)
        if period < 2:
            raise ValueError(
                f"model {loaded.name!r} is too small for an induction test (vocabulary "
                f"{vocab}, max_length {loaded.max_length})"
            )
        ids = repeated_random_tokens(pool, period, seed=seed, prefix=prefix)
        ind = run_trace(loaded, ids, qkv=False)
    d = diagnose(main, induction=ind, period=period if ind is not None else None, start=start,
                 thresholds=thresholds)
    d.meta["text"] = text
    d.meta["seed"] = seed
    if "merged" in main.meta:
        d.meta["merged"] = main.meta["merged"]["rule"]
    return d
