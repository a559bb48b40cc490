"""Attention through a KV cache: the calls of one generation stitched into one sequence.

A model that generates runs one forward pass over its prompt (the *prefill*), then one per
new token (a *decoding step*): each step's attention has one query row (or a few) and
reads every key the cache holds. :class:`CacheSteps` watches the records of a capture as
they arrive and keeps, for each attention module, a *chain*: its first call, then every call
that continues it. A call continues the chain when

* its keys are the chain's keys plus as many new ones as it has queries
  (``Lk − Lq`` equals the keys held so far), and
* the keys and values it reads where the chain already has them are the chain's own
  (compared bit for bit at each step: the previous call's new keys all, and the first
  call's at :data:`CHECK_POSITIONS` evenly spread positions): the cache was neither
  reordered (beam search) nor rewritten.

Cross-attention (a decoder step reading the encoder's states) continues its chain when it
reads the same keys again, with new queries. A continuing call is kept as only its new
rows and new keys (``AttentionRecord.past`` says how many keys came before), so a
generation of N tokens holds O(N·d) per head, as one forward over N tokens does.

A preallocated (static) cache reads every slot and hides the unfilled ones from every
query; the Hugging Face adapter cuts those trailing keys, so its calls continue a chain as
a dynamic cache's do. A call that repeats a module with keys the chain cannot explain — a
cache that was cropped (assisted decoding), a sliding cache that evicts keys, a cache
reordered between steps — is not dropped: the capture remembers why, and
:meth:`CacheSteps.stitched` refuses to make a trace from it (:class:`GenerationError`,
naming the module, the step and what it saw).

:meth:`CacheSteps.stitched` turns each chain into one record of the whole sequence: the
query rows, log-sum-exp and outputs of every call in order, the keys and values as the
cache held them, and a :class:`~attnlab.core.scores.ScoreShape` that is causal over the
whole sequence. Each call's own shape is checked against the rows it fills (a prompt read
bidirectionally, a position bias or a window that changes are refused): the stitched trace
is the attention the model computed, row by row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

import torch
from torch import Tensor

from attnlab._errors import Error
from attnlab.core.scores import ScoreShape
from attnlab.tracing.adapters._base import AttentionRecord

__all__ = ["CHECK_POSITIONS", "CacheSteps", "GenerationError", "GenerationSteps"]

#: Positions of the cache compared with the chain's keys and values at each step (all of
#: them when the chain holds no more; otherwise this many spread evenly, the last always).
CHECK_POSITIONS = 48


class GenerationSteps(TypedDict, total=False):
    """What a trace's ``meta`` says of a generation stitched from a KV cache's calls
    (:meth:`CacheSteps.describe`): all three fields, or none without a generation."""

    #: The first call's queries: the prompt's positions.
    prompt_tokens: int
    #: The positions fed in the later calls.
    generated: list[int]
    #: How many calls continued the cache.
    steps: int


class GenerationError(Error):
    """Calls of a capture that cannot be stitched into one sequence (a cache reordered,
    cropped or evicting, several sequences, dense weights): named, never dropped."""


@dataclass
class _Chain:
    """One module's calls that continue one another: ``records[0]`` is the first (its
    ``past`` is 0), each later one holds only its new keys."""

    stack: str
    records: list[AttentionRecord] = field(default_factory=list)
    keys: int = 0  # keys held so far (the last call's Lk)
    #: the first call's keys and values at spread positions (the positions, k, v),
    #: gathered once: what every step's cache is compared with
    sample: tuple[Tensor, Tensor, Tensor | None] | None = None

    @property
    def steps(self) -> int:
        return len(self.records) - 1


def _positions(n: int, most: int = CHECK_POSITIONS) -> list[int]:
    """Positions compared among ``n``: all of them when few, else an even spread with the
    last one."""
    if n <= most:
        return list(range(n))
    step = n / (most - 1)
    return sorted({min(n - 1, int(i * step)) for i in range(most - 1)} | {n - 1})


def _sample(first: AttentionRecord) -> tuple[Tensor, Tensor, Tensor | None]:
    """The first call's keys and values at :data:`CHECK_POSITIONS` spread positions."""
    idx = torch.as_tensor(_positions(first._k.shape[2]), device=first._k.device)
    v = None if first.v is None else first.v.index_select(2, idx)
    return idx, first._k.index_select(2, idx), v


def _same_keys(r: AttentionRecord, chain: _Chain, held: int) -> tuple[bool, str]:
    """Whether the keys and values ``r`` reads where the chain holds them are the chain's:
    the last call's own keys (all of them: what a reordered cache changes first) and the
    first call's at spread positions; else False and where they differ."""
    first, last = chain.records[0], chain.records[-1]
    n = min(last._k.shape[2], held - last.past)
    if n > 0 and last is not first:
        a, b = last.past, last.past + n
        if not (torch.equal(r._k[:, :, a:b], last._k[:, :, :n]) and (
                last.v is None or r.v is None or torch.equal(r.v[:, :, a:b], last.v[:, :, :n]))):
            return False, f"{a}..{b - 1}"
    if first._k.shape[2]:
        if chain.sample is None:
            chain.sample = _sample(first)
        idx, k, v = chain.sample
        if not (torch.equal(r._k.index_select(2, idx), k) and (
                v is None or r.v is None or torch.equal(r.v.index_select(2, idx), v))):
            return False, f"{int(idx[0])}..{int(idx[-1])}"
    return True, ""


class CacheSteps:
    """The chains of one capture (see the module docstring): :meth:`admit` each record as it
    arrives, :meth:`stitched` the records a trace is made of."""

    def __init__(self) -> None:
        self.chains: dict[str, list[_Chain]] = {}
        #: Why the capture cannot be one sequence, or None.
        self.broken: str | None = None
        self.dense_steps = 0

    @property
    def steps(self) -> int:
        """Decoding steps recorded (calls that continued a chain)."""
        return sum(c.steps for cs in self.chains.values() for c in cs)

    def admit(self, r: AttentionRecord, stack: str) -> AttentionRecord:
        """The record to keep for ``r``: ``r`` itself for a module's first call (or a call
        that starts anew), its new rows and keys for a call that continues the chain."""
        chains = self.chains.setdefault(r.name, [])
        last = chains[-1] if chains else None
        h, lq, lk = r.dims
        if r.q is None:  # dense weights: no keys to compare, no stitching
            if last is not None and lk != lq:
                self.dense_steps += 1
            chains.append(_Chain(stack, [r], lk))
            return r
        if last is not None and last.records[0].q is not None:
            kind = self._continues(last, r, stack)
            if kind is not None:
                past = last.keys if kind == "self" else lk
                step = AttentionRecord(
                    name=r.name, source=r.source, shapes=r.shapes, q=r.q,
                    k=r._k[:, :, past:].clone(),
                    v=None if r.v is None else r.v[:, :, past:].clone(),
                    lse=r.lse, context=r.context, past=past)
                last.records.append(step)
                last.keys = lk
                return step
            if lk != lq and stack != "cross" and self.broken is None:
                call = len(chains) + last.steps
                self.broken = (
                    f"{r.name}, call {call + 1}: {lq} new quer{'y' if lq == 1 else 'ies'} "
                    f"read {lk} keys, but its cache held {last.keys} before (a continuing "
                    f"call reads {last.keys + lq}): the cache was cropped or evicted keys "
                    "(a sliding cache), so its steps are "
                    "not one sequence")
        chains.append(_Chain(stack, [r], lk))
        return r

    def _continues(self, chain: _Chain, r: AttentionRecord, stack: str) -> str | None:
        """``"self"`` when ``r`` extends the chain's cache, ``"cross"`` when it reads the
        chain's keys again with new queries, None when it does not continue it (a reason
        is kept in :attr:`broken` when it looks like a step of a cache that changed)."""
        first = chain.records[0]
        h, lq, lk = r.dims
        if r.batch != first.batch or r._q.shape[1] != first._q.shape[1] or (
                r._k.shape[1] != first._k.shape[1]):
            return None
        if stack == "cross" and chain.stack == "cross":
            kind, held = "cross", lk
            if lk != chain.keys:
                return None
        elif lk > lq and lk - lq == chain.keys:
            kind, held = "self", chain.keys
        else:
            return None
        same, where = _same_keys(r, chain, held)
        if not same:
            if self.broken is None:
                self.broken = (
                    f"{r.name}, step {chain.steps + 1}: the cache's keys or values at "
                    f"positions {where} are not the ones recorded before: the cache was "
                    "reordered or rewritten between steps (beam search reorders it), so its "
                    "rows are not one sequence")
            return None
        return kind

    def stitched(self, records: list[AttentionRecord]) -> list[AttentionRecord]:
        """``records`` (the capture's, in call order) with each chain's calls joined into one
        record of the whole sequence, at the place of its first call; unchanged when no
        call continued another. Raises :class:`GenerationError` when the capture cannot be
        one sequence."""
        if self.dense_steps:
            raise GenerationError(
                f"{self.dense_steps} calls read a KV cache (more keys than queries) while "
                "the capture kept dense weights (qkv=False): a generation is traced from q, "
                "k and the log-sum-exp; capture it with qkv=True")
        if self.broken is not None:
            raise GenerationError(self.broken)
        if not self.steps:
            return records
        several = sorted(n for n, cs in self.chains.items() if len(cs) > 1)
        if several:
            n = max(len(self.chains[name]) for name in several)
            raise GenerationError(
                f"{several[0]} started {n} sequences in this capture (calls that begin anew "
                "instead of continuing its cache): a trace is one sequence; capture each "
                "generation in its own block")
        joined: dict[int, AttentionRecord] = {}
        for cs in self.chains.values():
            chain = cs[0]
            joined[id(chain.records[0])] = _join(chain)
        out = []
        for r in records:
            if r.past:
                continue
            out.append(joined.get(id(r), r))
        return out

    def describe(self) -> GenerationSteps:
        """What the trace's ``meta`` says of the generation: ``prompt_tokens`` (the first
        call's queries), ``generated`` (the positions fed in later calls) and ``steps``."""
        chains = [cs[0] for cs in self.chains.values() if cs and cs[0].stack != "cross"]
        if not chains or not self.steps:
            return {}
        chain = max(chains, key=lambda c: c.steps)
        prompt = chain.records[0].dims[1]
        total = prompt + sum(r.dims[1] for r in chain.records[1:])
        return {"prompt_tokens": prompt, "generated": list(range(prompt, total)),
                "steps": chain.steps}


def _join(chain: _Chain) -> AttentionRecord:
    """One chain's calls as one record of the whole sequence, each call's shape checked
    against the rows it fills."""
    rs = chain.records
    first = rs[0]
    if len(rs) == 1:
        return first
    cross = chain.stack == "cross"

    def cat(name: str, dim: int) -> Tensor | None:
        parts = [getattr(r, name) for r in rs]
        return None if any(p is None for p in parts) else torch.cat(parts, dim=dim)

    q, lse, context = cat("q", 2), cat("lse", 2), cat("context", 2)
    k, v = (first.k, first.v) if cross else (cat("k", 2), cat("v", 2))
    if q is None or k is None:  # (a chain is made of records with q and k only)
        raise GenerationError(f"{first.name}: a chain of calls without q and k")
    n, lk = q.shape[2], k.shape[2]
    shapes = [_stitched_shape([r.shapes[b] for r in rs], [r.dims for r in rs], rs[0].name,
                              n, lk, cross) for b in range(first.batch)]
    return AttentionRecord(name=first.name, source=first.source, shapes=shapes, q=q, k=k,
                           v=v, lse=lse, context=context)


def _same(a: Tensor | None, b: Tensor | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and torch.equal(a.cpu(), b.cpu())


def _stitched_shape(shapes: list[ScoreShape], dims: list[tuple[int, int, int]], name: str,
                    n: int, lk: int, cross: bool) -> ScoreShape:
    """The shape of the whole sequence (causal over ``n`` tokens; cross-attention: no rule,
    ``lk`` keys), checked against every call's own: the rows each call filled must see
    exactly the keys it saw."""
    first = shapes[0]
    for s in shapes:
        if s.bias is not None:
            raise GenerationError(
                f"{name}: a call of this generation adds a dense term to its scores (a "
                "position bias or a mask no rule describes), which attnlab does not stitch "
                "across decoding steps; trace one forward over the whole sequence instead")
        for what in ("scale", "softcap"):
            if getattr(s, what) != getattr(first, what):
                raise GenerationError(f"{name}: its {what} changed between decoding steps "
                                      f"({getattr(first, what)} then {getattr(s, what)})")
        if not _same(s.alibi_slopes, first.alibi_slopes):
            raise GenerationError(f"{name}: its ALiBi slopes changed between decoding steps")
        if (s.sinks is not None and s.sinks.dim() != 1) or not _same(s.sinks, first.sinks):
            raise GenerationError(f"{name}: its sink logits change between decoding steps; "
                                  "attnlab stitches only one sink logit per head")
    windows = {s.window for s in shapes if s.window is not None}
    if len(windows) > 1:
        raise GenerationError(f"{name}: its sliding window changed between decoding steps "
                              f"({sorted(windows)})")
    real = torch.ones(lk, dtype=torch.bool)  # a key is real if every call says so
    for s in shapes:
        if s.key_mask is not None:
            real[: s.key_mask.shape[0]] &= s.key_mask.cpu()
    key_mask = None if bool(real.all()) else real
    out = ScoreShape(scale=first.scale, causal=not cross,
                     window=next(iter(windows)) if windows else None, key_mask=key_mask,
                     softcap=first.softcap, alibi_slopes=first.alibi_slopes,
                     sinks=first.sinks)
    row = 0
    for i, (s, (_, lq, lkc)) in enumerate(zip(shapes, dims)):
        rows = torch.arange(lq)
        got = s.visible(rows, None, lq=lq, lk=lkc)
        got = torch.ones(lq, lkc, dtype=torch.bool) if got is None else got.cpu()
        want = out.visible(rows + (row if not cross else 0), torch.arange(lkc),
                           lq=n if not cross else lq, lk=n if not cross else lkc)
        want = torch.ones(lq, lkc, dtype=torch.bool) if want is None else want.cpu()
        if not torch.equal(got, want):
            what = "the prompt" if i == 0 else f"decoding step {i}"
            raise GenerationError(
                f"{name}: in {what} the rows {row}..{row + lq - 1} see other keys than a "
                "causal reading of the whole sequence gives (a prompt read bidirectionally, "
                "or a mask that changed between steps): not one causal sequence")
        row += lq
    return out
