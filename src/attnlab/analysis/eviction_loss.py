"""What KV-cache eviction costs the model: the change in its loss when it runs on with only
the keys a policy kept, measured by real forward passes.

The setting is that of :mod:`attnlab.analysis.eviction`: a causal model reads a context of
``C`` tokens (the prefill, with its whole cache), the cache is cut to what a policy keeps —
per layer and KV head, a bool (L, H_kv, C) from :attr:`EvictionResult.keep
<attnlab.analysis.eviction.EvictionResult.keep>` — and the model goes on with the later
tokens ``[C, N)``, which see the kept context keys and each other (causally). The loss is
the mean next-token cross-entropy of the later rows (row ``t`` predicts token ``t + 1``).

The prefill runs once. :func:`later_loss` then runs the ``N − C`` later tokens of one policy
on a copy of its cache, through an attention function registered with transformers
(``AttentionInterface``) that leaves out each layer's and head's evicted keys (gathers the
kept ones: the softmax over exactly the keys a ``-inf`` mask would leave, at the cost of the
kept cache), nothing else changed. Keeping every key gives the loss of the
full forward (tested), so a difference is the eviction's and nothing else's.

:func:`eviction_losses` runs the same attention for many keep masks at once: the policies
of one budget are the items of one batch, and the prefill's cache is neither copied nor
expanded per item. Its keys and values (batch 1) are read by reference; the model gets a
fresh cache that holds only the later tokens (batch ``B``), and the attention puts before
them, per layer and item, that item's kept context keys (gathered per KV head into a
buffer every layer reuses, padded to the most any head of any item keeps, the padding
masked). The later tokens keep their places ``[C, N)`` in the position ids (the rotary
embedding sees the distance to each context key as in one forward). Each item's loss is
its own, the one :func:`later_loss` gives (tested); keep masks that are equal run once.

Both runs go through the model in chunks of ``chunk`` tokens (default 256), each chunk
reading the cache of those before it: the same attention, row for row, as one forward, in
memory that grows with ``chunk × N`` rather than ``N²`` (a batch of ``B`` keep masks:
``B × chunk`` rows per forward). The prefill uses the model's ``sdpa`` attention where it
has one (its weights are not needed) and computes no logits: at 8,192 tokens of SmolLM2 the
prefill of 7,168 tokens in one eager forward peaked at 5.7 GB (its N×N scores per head and
its logits over the vocabulary).

A Hugging Face causal LM with a per-layer ``layer_idx`` on its attention modules (Llama,
Qwen, Mistral, SmolLM2 …) and a dynamic cache is required.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab._errors import check_int
from attnlab._proc import release_memory
from attnlab.tracing._hf_forward import attention_implementation, cache_keyword, fast_attention
from attnlab.tracing._hf_forward import forward_params as _params

__all__ = ["CHUNK", "IMPLEMENTATION", "EvictionLosses", "EvictionLossesJSON", "later_loss",
           "eviction_losses", "trace_cache"]

#: The name attnlab's eviction attention is registered under with transformers.
IMPLEMENTATION = "attnlab_evict"

_STATE = threading.local()


def _attention(module: Any, query: Tensor, key: Tensor, value: Tensor,
               attention_mask: Tensor | None, scaling: float | None = None,
               dropout: float = 0.0, **kwargs: Any) -> tuple[Tensor, None]:
    """Scaled dot-product attention of the later rows, each layer's and KV head's evicted
    context keys hidden (``_STATE.keep``: bool (L, H_kv, C)); causal among the later rows.
    query (B, H, Lq, d), key / value (B, H_kv, Lk, d) → (B, Lq, H, d).

    The evicted keys are left out, not masked: each KV head's kept context keys are gathered
    (in order, padded to the most any head keeps, the padding masked), so the attention
    costs what the kept cache costs — a tenth of the context at a budget of 10 % — and
    gives the softmax over exactly the keys a masked one would.

    Inside ``_routed(net, batch=...)`` (the cache then holds only the later tokens, the context is
    aside) it is :func:`_batched_attention`."""
    batch: _Kept | None = getattr(_STATE, "batch", None)
    if batch is not None:
        return _batched_attention(batch, module, query, key, value, scaling)
    keep: Tensor = _STATE.keep
    layer = int(module.layer_idx)
    b, h, lq, d = query.shape
    hkv, lk = key.shape[1], key.shape[2]
    c = keep.shape[-1]
    past = lk - lq  # rows of the cache before this chunk
    if past < c:
        raise RuntimeError(f"the eviction attention runs after a prefill of {c} tokens; this "
                           f"chunk sees {past} cached tokens")
    kept = keep[layer].to(query.device)  # (H_kv, C)
    counts = kept.sum(-1)
    most = int(counts.max())
    real = kept  # which of the (gathered) context slots hold a kept key: (H_kv, most)
    if most < c:  # (some head keeps every key: nothing is gathered, the rest masked)
        # each head's kept context positions first, in order (a stable sort of "evicted")
        where = torch.sort(~kept, dim=-1, stable=True).indices[:, :most]  # (H_kv, most)
        at = where[None, :, :, None].expand(b, hkv, most, d)
        key = torch.cat([key[:, :, :c].gather(2, at), key[:, :, c:]], dim=2)
        value = torch.cat([value[:, :, :c].gather(2, at), value[:, :, c:]], dim=2)
        real = torch.arange(most, device=query.device)[None, :] < counts[:, None]
    rows = torch.arange(past, lk, device=query.device)[:, None]
    later = torch.arange(c, lk, device=query.device)[None, :] <= rows  # (Lq, Lk − C) causal
    allowed = torch.cat([real[:, None, :].expand(hkv, lq, most),
                         later[None].expand(hkv, lq, lk - c)], dim=-1)  # (H_kv, Lq, ·)
    mask = allowed.repeat_interleave(h // hkv, dim=0)[None]  # (1, H, Lq, ·)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask,
                                         scale=scaling, enable_gqa=hkv != h)
    return out.transpose(1, 2).contiguous(), None


@dataclass
class _Kept:
    """What :func:`_batched_attention` reads for a batch of ``B`` keep masks: per layer, the
    prefill's context keys and values (each (1, H_kv, C, d), the cache's own tensors, never
    written) and the items' kept context slots (:func:`_slots`); ``later``: the most later
    tokens a layer sees."""

    context: list[tuple[Tensor, Tensor]]
    slots: list[tuple[Tensor | None, Tensor | None]]
    batch: int
    later: int
    _room: Tensor | None = None  # (2, B, H_kv, most + later, d), shared by every layer
    _causal: dict[tuple[int, int, int], Tensor] | None = None  # this chunk's unpadded mask

    def causal(self, lq: int, lk: int, most: int, device: Any) -> Tensor:
        """Bool (Lq, most + Lk): every context slot, and the later keys up to each row (the
        chunk's last ``Lq`` rows of ``Lk``); made once a chunk for every layer that keeps
        ``most`` keys a head."""
        if self._causal is None or (lq, lk, most) not in self._causal:
            past = lk - lq  # later tokens before this chunk
            later = (torch.arange(lk, device=device)[None, :]
                     <= torch.arange(past, lk, device=device)[:, None])  # (Lq, Lk)
            self._causal = {(lq, lk, most): torch.cat([later.new_ones(lq, most), later], -1)}
        return self._causal[lq, lk, most]

    def joined(self, layer: int, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Each item's kept context keys and values of ``layer`` followed by the later ones
        (``key``, ``value``: (B, H_kv, Lk, d)): (B, H_kv, most + Lk, d) views of one buffer
        that every layer and chunk write over (the layers run one after another): joining
        them allocates nothing and copies each key once."""
        keys, values = self.context[layer]  # (1, H_kv, C, d)
        where = self.slots[layer][0]
        b, hkv, lk, d = key.shape
        most = keys.shape[2] if where is None else where.shape[-1]
        if self._room is None:
            room = max(keys.shape[2] if w is None else w.shape[-1] for w, _ in self.slots)
            self._room = key.new_empty(2, b, hkv, room + max(self.later, lk), d)
        if self._room.shape[3] < most + lk:
            raise RuntimeError(f"the eviction attention was sized for {self.later} later "
                               f"tokens; this chunk sees {lk}")
        k, v = self._room[0, :, :, :most + lk], self._room[1, :, :, :most + lk]
        if where is None:
            k[:, :, :most] = keys
            v[:, :, :most] = values
        else:
            at = where[..., None].expand(-1, -1, -1, d)  # (B, H_kv, most, d)
            torch.gather(keys.expand(b, -1, -1, -1), 2, at, out=k[:, :, :most])
            torch.gather(values.expand(b, -1, -1, -1), 2, at, out=v[:, :, :most])
        k[:, :, most:] = key
        v[:, :, most:] = value
        return k, v


def _slots(keeps: Tensor) -> list[tuple[Tensor | None, Tensor | None]]:
    """Per layer of ``keeps`` (bool (B, L, H_kv, C)): where each item's and KV head's kept
    context keys are (long (B, H_kv, most): their positions in order, padded to the most
    any head of any item keeps; None where every item keeps every key) and which of those
    slots hold a kept key (bool (B, H_kv, most); None where no slot is padding)."""
    c = keeps.shape[-1]
    out: list[tuple[Tensor | None, Tensor | None]] = []
    for layer in range(keeps.shape[1]):
        kept = keeps[:, layer]  # (B, H_kv, C)
        counts = kept.sum(-1)  # (B, H_kv)
        most, least = int(counts.max()), int(counts.min())
        if least == c:
            out.append((None, None))
            continue
        # each head's kept context positions first, in order (a stable sort of "evicted")
        where = torch.sort(~kept, dim=-1, stable=True).indices[..., :most]
        real = None if least == most else \
            torch.arange(most, device=kept.device) < counts[..., None]
        out.append((where, real))
    return out


def _batched_attention(kept: _Kept, module: Any, query: Tensor, key: Tensor, value: Tensor,
                       scaling: float | None) -> tuple[Tensor, None]:
    """Scaled dot-product attention of the later rows of ``B`` keep masks at once: per layer
    and item, the item's kept context keys (gathered from the prefill's, batch 1) before the
    later keys of the cache (batch ``B``), causal among the later rows; padded context
    slots masked. query (B, H, Lq, d), key / value (B, H_kv, Lk, d): the later tokens so far
    → (B, Lq, H, d).

    Where no slot is padding the mask is the later rows' causal one, (1, 1, Lq, ·), the same
    for every item and head; otherwise it is (B, H, Lq, ·)."""
    layer = int(module.layer_idx)
    b, h, lq, d = query.shape
    hkv, lk = key.shape[1], key.shape[2]
    if b != kept.batch:
        raise RuntimeError(f"the eviction attention runs {kept.batch} keep masks; this chunk "
                           f"has a batch of {b}")
    real = kept.slots[layer][1]
    key, value = kept.joined(layer, key, value)  # (B, H_kv, most + Lk, d)
    most = key.shape[2] - lk
    mask = kept.causal(lq, lk, most, query.device)  # (Lq, most + Lk)
    if real is None:
        mask = mask[None, None]
    else:
        allowed = mask.expand(b, hkv, lq, most + lk).clone()
        allowed[..., :most] = real[:, :, None, :]  # (B, H_kv, Lq, ·): padding hidden
        mask = allowed.repeat_interleave(h // hkv, dim=1)  # (B, H, Lq, ·)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask,
                                         scale=scaling, enable_gqa=hkv != h)
    return out.transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers.modeling_utils import AttentionInterface

    if AttentionInterface._global_mapping.get(IMPLEMENTATION) is not _attention:
        AttentionInterface.register(IMPLEMENTATION, _attention)


@contextlib.contextmanager
def _routed(net: Any, keep: Tensor | None = None, batch: _Kept | None = None
            ) -> Iterator[None]:
    """``net``'s attention through :func:`_attention` for the block: with one ``keep``
    mask, or with a ``batch`` of them (:func:`_batched_attention`)."""
    _register()
    _STATE.keep, _STATE.batch = keep, batch
    try:
        with attention_implementation(net, IMPLEMENTATION):
            yield
    finally:
        _STATE.keep = _STATE.batch = None


def _net(model: Any) -> Any:
    net = getattr(model, "model", model) if hasattr(model, "tokenizer") else model
    if not callable(net) or not hasattr(net, "config"):
        raise TypeError(f"model must be a Hugging Face causal language model, got "
                        f"{type(model).__name__}")
    if getattr(net.config, "is_encoder_decoder", False):
        raise ValueError("eviction runs on a decoder's cache; this model is an encoder–decoder")
    return net


def _ids(ids: Any) -> Tensor:
    if isinstance(ids, Tensor):
        ids = ids.flatten().tolist()
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence) or len(ids) < 3:
        raise ValueError(f"ids must be a sequence of at least 3 token ids, got {ids!r:.80}")
    return torch.tensor([list(ids)])


#: Tokens per forward of the chunked prefill and later run.
CHUNK = 256


def _check_chunk(chunk: Any) -> int:
    return check_int("chunk", chunk, minimum=1)


def _positions(start: int, stop: int) -> Tensor:
    """The position ids (1, stop − start) of tokens ``[start, stop)``: their places in the
    whole sequence, whatever the cache they run on holds."""
    return torch.arange(start, stop)[None]


def _run(net: Any, x: Tensor, start: int, stop: int, cache: Any, batch: int = 1,
         **kw: Any) -> Any:
    """The forward of tokens ``[start, stop)`` of ``x`` (1, N) on ``cache``, the same tokens
    as each of ``batch`` items."""
    with torch.no_grad():
        return net(input_ids=x[:, start:stop].expand(batch, -1), use_cache=True,
                   position_ids=_positions(start, stop), **{cache_keyword(net): cache}, **kw)


def _later_nll(net: Any, x: Tensor, context: int, cache: Any, chunk: int = CHUNK) -> Tensor:
    """The later rows' mean next-token loss, given the prefill's ``cache`` (which grows by
    the later tokens), the later tokens run ``chunk`` at a time."""
    n = x.shape[1]
    total = torch.zeros((), dtype=torch.float64)
    for s in range(context, n - 1, chunk):
        e = min(s + chunk, n - 1)  # rows [s, e) predict tokens [s+1, e]; the last row none
        logits = _run(net, x, s, e, cache).logits[0].float()
        total += F.cross_entropy(logits, x[0, s + 1:e + 1], reduction="sum").double()
    return (total / (n - 1 - context)).float()


def _later_nlls(net: Any, x: Tensor, context: int, cache: Any, keeps: Tensor,
                chunk: int = CHUNK) -> list[float]:
    """The later rows' mean next-token loss of each keep mask of ``keeps`` (bool
    (B, L, H_kv, C)), run as one batch on the prefill's ``cache`` (read, never changed):
    the later tokens ``chunk`` at a time on a cache of their own, each item's loss
    accumulated as :func:`_later_nll` does."""
    from transformers import DynamicCache

    layers = net.config.num_hidden_layers
    b, n = keeps.shape[0], x.shape[1]
    context_kv = [(cache.layers[i].keys, cache.layers[i].values) for i in range(layers)]
    kept = _Kept(context=context_kv, slots=_slots(keeps.to(context_kv[0][0].device)),
                 batch=b, later=n - 1 - context)
    run = DynamicCache(config=net.config)
    totals = [torch.zeros((), dtype=torch.float64) for _ in range(b)]
    with _routed(net, batch=kept):
        for s in range(context, n - 1, chunk):
            e = min(s + chunk, n - 1)  # rows [s, e) predict tokens [s+1, e]; the last row none
            logits = _run(net, x, s, e, run, batch=b).logits.float()  # (B, e − s, vocab)
            for i in range(b):
                totals[i] += F.cross_entropy(logits[i], x[0, s + 1:e + 1],
                                             reduction="sum").double()
            del logits
    return [float((t / (n - 1 - context)).float()) for t in totals]


def _prefill(net: Any, x: Tensor, context: int, chunk: int = CHUNK) -> Any:
    """The cache of the first ``context`` tokens, run ``chunk`` at a time, through the
    model's ``sdpa`` attention where it has one, without logits."""
    from transformers import DynamicCache

    cache = DynamicCache(config=net.config)
    keep_logits = {"logits_to_keep": 1} if "logits_to_keep" in _params(net) else {}
    with fast_attention(net):
        for s in range(0, context, chunk):
            _run(net, x, s, min(s + chunk, context), cache, **keep_logits)
    return cache


@dataclass
class _CacheLayer:
    keys: Tensor  # (1, H_kv, C, d)
    values: Tensor


@dataclass
class _TraceCache:
    """A prefill's cache read from a trace: per layer, the context's keys and values (views
    of the trace's tensors, never written): what :func:`_later_nlls` reads of a cache."""

    layers: list[_CacheLayer]


def trace_cache(trace: Any, model: Any, ids: Any, context: int) -> Any:
    """The cache a prefill of the first ``context`` of ``ids`` leaves, read from ``trace``
    (the model's trace of ``ids``, with values): each layer's keys (after the rotary
    embedding, as the model caches them) and values of those tokens, as views of the
    trace's own tensors. Refused (``ValueError`` naming what differs) unless the trace is
    of these ids, unmerged, with keys and values of the model's layers, KV heads and dtype."""
    from attnlab.tracing.attention import AttentionTrace

    if not isinstance(trace, AttentionTrace):
        raise TypeError(f"trace must be an AttentionTrace, got {type(trace).__name__}")
    net = _net(model)
    x = _ids(ids)
    cfg = net.config
    layers = cfg.num_hidden_layers
    kv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    if trace.token_ids is None or trace.token_ids != x[0].tolist():
        raise ValueError("trace must be the trace of these ids (its token_ids differ)")
    if trace.groups is not None or trace.k is None or trace.v is None:
        raise ValueError("trace must be unmerged, with its keys and values (trace(..., "
                         "merge_pieces=False), which keeps v)")
    k, v = trace.k, trace.v
    dtype = next(net.parameters()).dtype
    if (k.shape[0], k.shape[1]) != (layers, kv) or k.dtype != dtype or v.dtype != dtype:
        raise ValueError(f"trace must hold keys of {layers} layers and {kv} KV heads in "
                         f"{dtype}, got {tuple(k.shape[:2])} in {k.dtype}")
    check_int("context", context, minimum=1, maximum=x.shape[1] - 2)
    return _TraceCache([_CacheLayer(k[i, None, :, :context], v[i, None, :, :context])
                        for i in range(layers)])


def _check_keep(keep: Any, net: Any, context: int) -> Tensor:
    cfg = net.config
    layers = cfg.num_hidden_layers
    kv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    if not isinstance(keep, Tensor) or keep.dtype != torch.bool:
        got = f"{keep.dtype} tensor" if isinstance(keep, Tensor) else type(keep).__name__
        raise TypeError(f"keep must be a bool tensor (L, H_kv, C), got {got}")
    if tuple(keep.shape) != (layers, kv, context):
        raise ValueError(f"keep must have shape (layers, kv heads, context) = "
                         f"({layers}, {kv}, {context}), got {tuple(keep.shape)}")
    return keep


def later_loss(model: Any, ids: Any, context: int, keep: Tensor | None = None, *,
               cache: Any = None, chunk: int = CHUNK) -> float:
    """The mean next-token loss of the later rows ``[C, N)`` when the model runs on from a
    prefill of ``context`` tokens with only the ``keep`` keys (bool (L, H_kv, C); None: the
    whole cache, the model's own attention). ``cache``: the prefill's cache, reused (it is
    copied, never changed). ``chunk``: tokens per forward (see the module's doc)."""
    net = _net(model)
    x = _ids(ids)
    n = x.shape[1]
    chunk = _check_chunk(chunk)
    check_int("context", context, minimum=1, maximum=n - 2)
    if keep is not None:
        keep = _check_keep(keep, net, context)
    base = _prefill(net, x, context, chunk) if cache is None else cache
    run = copy.deepcopy(base)
    try:
        if keep is None:
            return float(_later_nll(net, x, context, run, chunk))
        with _routed(net, keep):
            return float(_later_nll(net, x, context, run, chunk))
    finally:
        del run
        release_memory()  # the copy and the chunks' scores: the next policy starts clean


class EvictionLosses(TypedDict):
    """:func:`eviction_losses`: the later rows' mean loss with each policy's kept keys, by
    policy and budget, beside the loss with the whole cache."""

    context: int  # the prefill's tokens
    later: int  # the rows whose loss is measured
    full: float  # the loss with every key kept
    loss: dict[str, dict[float, float]]
    delta: dict[str, dict[float, float]]  # loss - full


class EvictionLossesJSON(TypedDict):
    """:func:`to_json`: :class:`EvictionLosses` with the budgets as strings (``"0.25"``)."""

    context: int
    later: int
    full: float
    loss: dict[str, dict[str, float]]
    delta: dict[str, dict[str, float]]


def eviction_losses(model: Any, ids: Any, result: Any, *,
                    budgets: Sequence[float] | None = None,
                    policies: Sequence[str] | None = None,
                    chunk: int = CHUNK, trace: Any = None) -> EvictionLosses:
    """The loss of the later rows with each policy's kept keys at each budget, beside the
    loss with the whole cache: ``{"full": float, "loss": {policy: {budget: float}},
    "delta": {policy: {budget: float}}}`` (``delta`` = loss − full). ``result`` is the
    :class:`~attnlab.analysis.eviction.EvictionResult` of the same ids' trace; ``budgets``
    and ``policies`` default to all of it. ``full`` runs through the same attention as the
    policies with every key kept, so a delta is the eviction's alone (0 at budget 1).

    The prefill runs once; the policies of each budget then run as one batch, and keep
    masks that are equal (every key kept: ``full``'s) run once (see the module's doc).

    ``trace``: the model's :class:`~attnlab.tracing.attention.AttentionTrace` of these ids,
    with its values (the one the eviction result was measured on): its keys and values of
    the first ``C`` tokens are the prefill's cache, read instead of running the prefill
    (:func:`trace_cache`; the same cache to float32's rounding, from the trace's own
    forward)."""
    from attnlab.analysis.eviction import EvictionResult

    if not isinstance(result, EvictionResult) or not result.keep:
        raise TypeError("result must be the EvictionResult of evict() on these ids' trace")
    net = _net(model)
    x = _ids(ids)
    chunk = _check_chunk(chunk)
    c = result.context
    if x.shape[1] != c + result.later:
        raise ValueError(f"ids hold {x.shape[1]} tokens; the eviction result was measured on "
                         f"{c + result.later} (context {c} + later {result.later})")
    bs = tuple(result.budgets if budgets is None else budgets)
    ps = tuple(result.policies if policies is None else policies)
    missing = [f"{p}@{b:g}" for p in ps for b in bs
               if p not in result.keep or b not in result.keep[p]]
    if missing:
        raise ValueError(f"the eviction result has no kept keys for {missing}")
    keeps = {(p, b): _check_keep(result.keep[p][b], net, c) for b in bs for p in ps}
    # the distinct keep masks (every key first, alone), run a batch per budget; a mask is
    # known by its bytes (comparing tensors one pair at a time costs more than the hashing)
    everything = torch.ones_like(keeps[ps[0], bs[0]])
    masks: list[Tensor] = [everything]
    index = {everything.cpu().numpy().tobytes(): 0}
    batches: list[list[int]] = [[0]]
    which: dict[tuple[str, float], int] = {}
    for b in bs:
        batches.append([])
        for p in ps:
            i = index.setdefault(keeps[p, b].cpu().numpy().tobytes(), len(masks))
            if i == len(masks):
                masks.append(keeps[p, b])
                batches[-1].append(i)
            which[p, b] = i
    cache = _prefill(net, x, c, chunk) if trace is None else trace_cache(trace, net, x, c)
    release_memory()
    losses = [0.0] * len(masks)
    for batch in filter(None, batches):
        got = _later_nlls(net, x, c, cache, torch.stack([masks[i] for i in batch]), chunk)
        for i, v in zip(batch, got):
            losses[i] = v
        release_memory()  # the batch's cache and scores: the next batch starts clean
    full = losses[0]
    loss = {p: {b: losses[which[p, b]] for b in bs} for p in ps}
    return {"context": c, "later": result.later, "full": full, "loss": loss,
            "delta": {p: {b: v - full for b, v in row.items()} for p, row in loss.items()}}


def to_json(losses: EvictionLosses) -> EvictionLossesJSON:
    """:func:`eviction_losses` with budgets as strings (JSON keys)."""
    return {"context": losses["context"], "later": losses["later"], "full": losses["full"],
            "loss": {p: {f"{b:g}": v for b, v in r.items()} for p, r in losses["loss"].items()},
            "delta": {p: {f"{b:g}": v for b, v in r.items()}
                      for p, r in losses["delta"].items()}}
