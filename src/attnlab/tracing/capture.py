"""Capture attention from a running model: attnlab, torch and Hugging Face modules.

``with capture(model) as cap: model(x)`` records, for every attention call inside
``model``, the per-head q, k, v (after RoPE; grouped key/value heads stored once), the
log-sum-exp of each row of scores and the
:class:`~attnlab.core.scores.ScoreShape` that shaped them: O(N·d) per head, never the
N x N weights. ``cap.trace()`` stacks the records into an
:class:`~attnlab.tracing.attention.AttentionTrace`, which computes any weight exactly on
demand; for a model of several attention stacks (``nn.Transformer``,
``nn.TransformerDecoder``, attnlab's ``Transformer``, Hugging Face encoder–decoder models)
into a :class:`~attnlab.tracing.stacks.StackedTrace` of its encoder, decoder and
cross-attention stacks, told apart by :func:`stack_table`. With ``qkv=False`` the records
hold dense weights (B, H, Lq, Lk) instead (short inputs); with ``context=True`` they also
keep each head's output (B, H, Lq, dv).

**Streaming.** ``capture(model, out=PATH)`` writes each layer to a trace file (format
version 5, :class:`~attnlab.tracing.trace_stream.TraceStream`) as soon as its attention call
is recorded, and drops it: the capture's own memory is one layer, whatever the number of
layers. ``cap.trace()`` then writes the header, renames the file into place and returns the
trace opened from it (:meth:`~attnlab.tracing.attention.AttentionTrace.open`); its tensors
equal, bit for bit, those of the same capture in memory. A streamed capture holds one
attention stack of one batch element (``batch_index``), ``num_layers`` calls alike (the
model's own count, read from its config, else its number of attention modules); anything
else is refused, naming what differs.

Each kind of model is read by an adapter (:mod:`attnlab.tracing.adapters`): attnlab modules
through their hook points, ``torch.nn.MultiheadAttention`` through a forward pre-hook that
recomputes q, k, v from its weights, Hugging Face models through an attention function
registered with transformers, and the Hugging Face modules that compute their softmax
inline (BLOOM, MPT, Falcon) through hooks of their own. A model holding an attention module
that no adapter reads is refused before it runs
(:class:`~attnlab.tracing.adapters._base.UnreadableAttentionError`, naming the class and
what is missing): a trace without it would be silently incomplete. Adapters only mark the
modules they observe; nothing global changes, so capturing one model never changes the
path of another, and everything is put back in ``finally``.

>>> import torch
>>> mha = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
>>> x = torch.randn(1, 5, 16)
>>> with capture(mha) as cap:
...     out, w = mha(x, x, x, need_weights=False)
>>> t = cap.trace()
>>> w is None, tuple(t.q.shape), tuple(t.lse.shape)
(True, (1, 4, 5, 4), (1, 4, 5))
>>> round(t.weights_rows(0, 0, [4]).sum().item(), 5)
1.0
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

import torch
from torch import Tensor, nn

from attnlab._errors import check_int
from attnlab.tracing._file_records import TraceTensors
from attnlab.tracing.adapters import ADAPTERS, AttentionRecord
from attnlab.tracing.adapters._base import UnreadableAttentionError
from attnlab.tracing.adapters.huggingface import is_hf_model, is_hf_module, unreadable_reason
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.capture_stream import LayerStream, stream_layers
from attnlab.tracing.forward_sums import SumsTaker
from attnlab.tracing.generation import CacheSteps, GenerationError
from attnlab.tracing.model_parts import RopeLayout, output_projections, rope_layout
from attnlab.tracing.precision import Precision, precision_of
from attnlab.tracing.stacks import STACK_ORDER, StackedTrace
from attnlab.tracing.trace_stream import TraceStream

if TYPE_CHECKING:  # Python 3.11's; the annotations below are never evaluated at run time
    from typing import NotRequired

__all__ = ["AttentionRecord", "Capture", "CaptureInfo", "GenerationError",
           "UnreadableAttentionError", "capture", "stack_table"]

#: A record (or a stacked layer) at least this large hands freed memory back to the OS.
_TRIM_BYTES = 8 << 20
_LIBC: list[Any] = []


def _give_back_memory() -> None:
    """Return the freed pages of the C heap to the OS (glibc's ``malloc_trim``).

    A long trace keeps a record per layer while the forward pass frees its activations
    around them; without this, those freed pages stay in the process's resident memory
    (and stacking the records would count them twice). A no-op without glibc.
    """
    if not _LIBC:
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name) if name else None
            _LIBC.append(libc if libc is not None and hasattr(libc, "malloc_trim") else None)
        except OSError:
            _LIBC.append(None)
    if _LIBC[0] is not None:
        _LIBC[0].malloc_trim(0)


def _nbytes(record: AttentionRecord) -> int:
    return sum(t.numel() * t.element_size() for t in (record.q, record.k, record.v,
                                                        record.lse, record.weights,
                                                        record.context) if t is not None)


#: What :meth:`Capture.trace` merges: (groups of consecutive pieces, their labels or None,
#: the rule recorded in ``meta["merged"]``), as :meth:`AttentionTrace.merge_tokens` takes them.
Merge = tuple[list[list[int]], list[str] | None, str]


class CaptureInfo(TypedDict):
    """What a capture records in its trace's ``meta``, before the ``meta`` it is given
    (which follows, and wins on a shared key)."""

    #: The attention modules stacked as layers, in call order.
    layer_names: list[str]
    #: The adapter that read them (``"huggingface"``, ``"attnlab"``, ...).
    source: str
    #: Which rule ties the trace to the model's own weights (given the model).
    precision: NotRequired[Precision]
    #: The model's rotary layout, for a model with rotary positions (not cross-attention).
    positional: NotRequired[RopeLayout]
    #: The modules called with another (H, Lq, Lk) than the first one, not stacked.
    skipped: NotRequired[list[str]]


class _StackLabels(TypedDict):
    """The labels of one stack of a :class:`StackedTrace` (its queries', and its keys' for
    cross-attention), as :func:`_one_stack` takes them."""

    tokens: list[str] | None
    token_ids: list[int] | None
    text: str | None
    key_tokens: list[str] | None


@dataclass(frozen=True)
class _Labels:
    """The labels given to :meth:`Capture.trace`: the queries' (or the encoder's)
    ``tokens``, ``token_ids`` and ``text``, cross-attention's ``key_tokens``, and the
    decoder's rows (``target_tokens``, ``target_ids``, ``target``)."""

    tokens: list[str] | None
    token_ids: list[int] | None
    text: str | None
    key_tokens: list[str] | None
    target_tokens: list[str] | None
    target_ids: list[int] | None
    target: str | None


class Capture:
    """The records of one ``capture`` block, in call order; :meth:`trace` assembles them.

    ``on_record`` (settable) is called with each record as it arrives (e.g. progress). A
    streamed capture (``capture(..., out=PATH)``) keeps no records: each is written to the
    file as it arrives (:attr:`streamed` says so).
    """

    def __init__(self, root: nn.Module, qkv: bool, context: bool = False) -> None:
        self.root = root
        self.qkv = qkv
        self.context = context
        self.records: list[AttentionRecord] = []
        self.on_record: Callable[[AttentionRecord], Any] | None = None
        self._names = {id(m): n for n, m in root.named_modules()}
        self._stacks = stack_table(root)
        self._cross: set[str] = set()  # modules seen attending to the encoder's states
        self._lock = threading.Lock()
        self._stream: LayerStream | None = None
        #: The calls that continue one another through a KV cache (a generation).
        self.cache_steps = CacheSteps()
        #: False: the model still runs through the adapters (attnlab's attention, in tiles:
        #: O(tile · N) memory where eager holds every N x N map) but no record is kept.
        self.keep = True
        #: The taker of the recorded calls' head sums (:mod:`attnlab.tracing.forward_sums`;
        #: the tracer sets it for one forward), or None.
        self.taker: SumsTaker | None = None

    @property
    def streamed(self) -> bool:
        """Whether the records go to a file as they arrive (``capture(..., out=PATH)``)."""
        return self._stream is not None

    def name_of(self, module: nn.Module) -> str:
        """The module's dotted name inside the captured model."""
        return self._names.get(id(module)) or type(module).__name__

    def add(self, record: AttentionRecord) -> None:
        """Append a record (adapters call this, from any thread); a streamed capture
        writes it to its file instead, in call order."""
        if not self.keep:
            return
        with self._lock:
            stack = self.stack_of(record.name)
            if self._stream is not None:
                self._stream.add(record, stack)
            else:
                self.records.append(self.cache_steps.admit(record, stack))
        if _nbytes(record) >= _TRIM_BYTES:
            _give_back_memory()
        if self.on_record is not None:
            self.on_record(record)

    def __len__(self) -> int:
        """The attention calls recorded (a streamed capture: written or skipped)."""
        if self._stream is not None:
            return len(self._stream.names) + len(self._stream.skipped)
        return len(self.records)

    def stack_of(self, name: str) -> str:
        """The stack the attention module ``name`` belongs to: ``"encoder"``, ``"decoder"``
        or ``"cross"`` inside an encoder–decoder model (see :func:`stack_table`), else
        ``"self"``."""
        if name in self._cross:
            return "cross"
        return self._stacks.get(name, "self")

    def trace(self, batch_index: int = 0, *, tokens: list[str] | None = None,
              model: str = "", token_ids: list[int] | None = None, text: str | None = None,
              key_tokens: list[str] | None = None,
              meta: dict[str, Any] | None = None, release: bool = False,
              target_tokens: list[str] | None = None, target_ids: list[int] | None = None,
              target: str | None = None, merge: Merge | None = None
              ) -> AttentionTrace | StackedTrace:
        """One input of the batch as an :class:`AttentionTrace` (layers in call order), or
        a :class:`~attnlab.tracing.stacks.StackedTrace` when the records come from more
        than one attention stack (encoder, decoder, cross: ``nn.Transformer``,
        ``nn.TransformerDecoder``, Hugging Face encoder–decoder models).

        Within a stack, only attention calls with the same (H, Lq, Lk) as its first one are
        stacked; the others' names are listed in its ``meta["skipped"]``. Labels default to
        ``"0", "1", ...``: ``tokens``, ``token_ids``, ``text`` describe the queries of a
        one-stack trace or the encoder's (source) side; ``target_tokens``, ``target_ids``,
        ``target`` the decoder's rows (decoder and cross stacks; without an encoder stack,
        ``tokens`` label them when ``target_tokens`` is not given); ``key_tokens`` the keys
        of cross-attention (default: the encoder's tokens). ``release=True`` moves the
        records' tensors into the trace and empties :attr:`records`, so the trace never
        exists twice in memory. ``merge``: (groups, labels, rule) merged into the one-stack
        trace (:meth:`AttentionTrace.merge_tokens`).

        A streamed capture finishes its file here (the header written with these labels,
        the merge and ``meta``; renamed into place) and returns the trace opened from it;
        its ``batch_index`` is the one given to :func:`capture`. A failure deletes the
        unfinished file.
        """
        if self._stream is not None:
            return self._finish_stream(batch_index, tokens=tokens, model=model,
                                       token_ids=token_ids, text=text, key_tokens=key_tokens,
                                       meta=meta, merge=merge)
        if not self.records:
            raise ValueError(
                "nothing was captured: no attention module of the model ran inside the "
                "capture block (attnlab modules, torch.nn.MultiheadAttention and Hugging "
                "Face models are recognised)"
            )
        records = self.cache_steps.stitched(self.records)  # a generation: one sequence
        generation = self.cache_steps.describe()
        if generation:
            meta = {**generation, **(meta or {})}
        b = records[0].batch
        check_int("batch_index", batch_index, minimum=None)
        if not -b <= batch_index < b:
            raise IndexError(f"batch_index must be in [0, {b}), got {batch_index}")
        bi = batch_index % b
        by_stack: dict[str, list[AttentionRecord]] = {}
        for r in records:
            by_stack.setdefault(self.stack_of(r.name), []).append(r)
        if release:
            self.records = []
        del records
        model = model or type(self.root).__name__
        labels = _Labels(tokens, token_ids, text, key_tokens, target_tokens, target_ids, target)
        if len(by_stack) == 1:
            (name, records), = by_stack.items()
            return self._single_stack(name, records, bi, release, labels, model=model,
                                      meta=meta, merge=merge)
        if merge is not None:
            raise ValueError("merge applies to a trace of one attention stack; this capture "
                             f"holds several ({', '.join(by_stack)})")
        return self._stacked(by_stack, bi, release, labels, model=model, meta=meta)

    def _single_stack(self, name: str, records: list[AttentionRecord], bi: int,
                      release: bool, labels: _Labels, *, model: str,
                      meta: dict[str, Any] | None, merge: Merge | None) -> AttentionTrace:
        """The trace of a capture whose records come from one stack ``name`` (``"self"``
        when it is the model's only stack), its rows labelled by the target when it is a
        decoder or cross stack given ``target_tokens``; ``merge`` applied."""
        if name != "self" and set(self._stacks.values()) | (
                {"cross"} if self._cross else set()) == {name}:
            name = "self"  # the model's only stack (nn.TransformerEncoder on its own)
        tokens, token_ids, text = labels.tokens, labels.token_ids, labels.text
        if name in ("decoder", "cross") and labels.target_tokens is not None:
            tokens, token_ids, text = labels.target_tokens, labels.target_ids, labels.target
        one = _one_stack(records, name, bi, release, tokens=tokens, model=model,
                         token_ids=token_ids, text=text, key_tokens=labels.key_tokens,
                         meta=meta, root=self.root)
        if merge is not None:
            one = one.merge_tokens(merge[0], merge[1], rule=merge[2])
        return one

    def _stacked(self, by_stack: dict[str, list[AttentionRecord]], bi: int, release: bool,
                 labels: _Labels, *, model: str,
                 meta: dict[str, Any] | None) -> StackedTrace:
        """The :class:`StackedTrace` of records from several stacks (``by_stack`` is
        emptied): the encoder labelled by ``tokens``, the decoder and cross stacks' rows by
        the target (by ``tokens`` too without an encoder or a target), cross-attention's
        keys by ``key_tokens`` or the encoder's tokens. Calls outside every stack are
        listed in the first stack's ``meta["skipped"]``."""
        tokens, token_ids, text = labels.tokens, labels.token_ids, labels.text
        target_tokens, target_ids, target = labels.target_tokens, labels.target_ids, labels.target
        if "encoder" not in by_stack and target_tokens is None:
            target_tokens, target_ids, target = tokens, token_ids, text
        stacks: dict[str, AttentionTrace] = {}
        for name in STACK_ORDER:
            if name not in by_stack:
                continue
            records = by_stack.pop(name)
            own: _StackLabels
            if name == "encoder":
                own = _StackLabels(tokens=tokens, token_ids=token_ids, text=text,
                                   key_tokens=None)
            else:
                keys = None
                if name == "cross":
                    keys = labels.key_tokens if labels.key_tokens is not None else (
                        stacks["encoder"].tokens if "encoder" in stacks else None)
                own = _StackLabels(tokens=target_tokens, token_ids=target_ids, text=target,
                                   key_tokens=keys)
            if name == "cross" and "encoder" in stacks:
                self._check_cross(records, stacks["encoder"].seq_len)
            stacks[name] = _one_stack(records, name, bi, release, model=model, meta=meta,
                                      root=self.root, **own)
        if by_stack:  # calls outside every stack of an encoder–decoder model
            extra = [r.name for rs in by_stack.values() for r in rs]
            first = next(iter(stacks.values()))
            first.meta["skipped"] = first.meta.get("skipped", []) + extra
        return StackedTrace(stacks, model=model, text=text, target=target,
                            meta=dict(meta or {}))

    def _finish_stream(self, batch_index: int, *, tokens: list[str] | None, model: str,
                       token_ids: list[int] | None, text: str | None,
                       key_tokens: list[str] | None, meta: dict[str, Any] | None,
                       merge: Merge | None) -> AttentionTrace:
        """The streamed capture's file finished: header, merge, rename; the trace opened
        from it. The unfinished file is deleted on any failure."""
        s = self._stream
        assert s is not None
        try:
            if s.dims is None:
                raise ValueError(
                    "nothing was captured: no attention module of the model ran inside the "
                    "capture block (attnlab modules, torch.nn.MultiheadAttention and Hugging "
                    "Face models are recognised)")
            check_int("batch_index", batch_index, minimum=None)
            if s.repeat is not None:
                raise GenerationError(s.repeat)
            if batch_index % s.batch != s.bi:
                raise ValueError(f"batch_index: a streamed capture keeps the batch element "
                                 f"given to capture() ({s.bi}), got {batch_index}")
            if s.writer.layers != s.writer.num_layers:
                raise ValueError(
                    f"the stream was laid out for {s.writer.num_layers} layers but the model "
                    f"made {s.writer.layers} attention calls of the first one's shape (heads, "
                    f"queries, keys) = {s.dims}: give capture() num_layers="
                    f"{s.writer.layers}, or trace it in memory")
            heads, lq, lk = s.dims
            if key_tokens is None and lk != lq:
                key_tokens = [str(j) for j in range(lk)]
            info: CaptureInfo = {"layer_names": list(s.names), "source": s.source,
                                 "precision": precision_of(self.root)}
            layout = rope_layout(self.root)
            if layout is not None:
                info["positional"] = layout
            if s.skipped:
                info["skipped"] = list(s.skipped)
            labels = [str(t) for t in tokens] if tokens is not None else [
                str(i) for i in range(lq)]
            for name, got, want in (("tokens", labels, lq), ("key_tokens", key_tokens, lk),
                                    ("token_ids", token_ids, lq)):
                if got is not None and len(got) != want:
                    raise ValueError(f"{name} has {len(got)} entries; the trace has {want} "
                                     f"{'key' if name == 'key_tokens' else 'query'} positions")
            s.writer.write_header({
                "stack": "self", "tokens": labels,
                "key_tokens": None if key_tokens is None else [str(t) for t in key_tokens],
                "token_ids": None if token_ids is None else [int(i) for i in token_ids],
                "model": model or type(self.root).__name__, "causal": s.causal, "text": text,
                "meta": {**info, **(meta or {})}, "groups": None})
            if merge is not None:
                merged = AttentionTrace.open(s.writer.temp_path).merge_tokens(
                    merge[0], merge[1], rule=merge[2])
                s.writer.write_header(merged._file_fields())
                del merged
            path = s.writer.commit()
        except BaseException:
            s.writer.discard()
            raise
        return AttentionTrace.open(path)

    def _check_cross(self, records: list[AttentionRecord], n_source: int) -> None:
        """Cross-attention reads exactly the encoder's positions; a module that reads more
        (the decoder's own states and the encoder's in one softmax) is refused."""
        for r in records:
            lk = r.dims[2]
            if lk != n_source:
                try:
                    cls = type(self.root.get_submodule(r.name)).__name__
                except AttributeError:
                    cls = r.name
                raise UnreadableAttentionError(
                    f"{type(self.root).__name__} cannot be traced as separate stacks: {cls} "
                    f"({r.name}) attends to {lk} keys where the encoder has {n_source} "
                    "positions: it mixes the decoder's own states with the encoder's in one "
                    "softmax (merged self- and cross-attention), which is neither attnlab's "
                    "decoder nor its cross stack")


def _one_stack(records: list[AttentionRecord], stack: str, bi: int, release: bool, *,
               tokens: list[str] | None, model: str, token_ids: list[int] | None,
               text: str | None, key_tokens: list[str] | None,
               meta: dict[str, Any] | None, root: nn.Module | None = None) -> AttentionTrace:
    """The records of one stack as an :class:`AttentionTrace`: the calls with the (H, Lq,
    Lk) of the first one, stacked as layers; the others named in ``meta["skipped"]``."""
    first = records[0]
    kept = [r for r in records if r.dims == first.dims]
    skipped = [r.name for r in records if r.dims != first.dims]
    _refuse_repeats(kept, skipped)
    dense = first.weights is not None
    heads, lq, lk = first.dims
    if key_tokens is None and (lk != lq or stack == "cross"):
        key_tokens = [str(j) for j in range(lk)]
    names = ("weights", "context") if dense else ("q", "k", "v", "lse", "context")

    def part(name: str) -> Tensor | None:
        return _stack(kept, name, bi, release) if name in names else None

    # the trace's tensors (AttentionTrace's keyword arguments), stacked in this order
    stacked = TraceTensors(weights=part("weights"), q=part("q"), k=part("k"), v=part("v"),
                           lse=part("lse"), context=part("context"), out_proj=None)
    shapes = [r.shapes[bi] for r in kept]
    info: CaptureInfo = {"layer_names": [r.name for r in kept], "source": first.source}
    if root is not None:
        info["precision"] = precision_of(root)  # which rule ties the trace to the model
        v = stacked["v"]
        if v is not None:
            stacked["out_proj"] = output_projections(root, info["layer_names"], heads,
                                                     v.shape[-1])
        layout = rope_layout(root) if stack != "cross" else None
        if layout is not None:
            info["positional"] = layout
    if skipped:
        info["skipped"] = skipped
    return AttentionTrace(
        tokens=tokens if tokens is not None else [str(i) for i in range(lq)],
        **stacked, shapes=shapes, model=model, token_ids=token_ids, key_tokens=key_tokens,
        text=text, meta={**info, **(meta or {})}, stack=stack)


def _refuse_repeats(kept: list[AttentionRecord], skipped: list[str]) -> None:
    """A module kept as a layer and also called with other shapes ran in more than one
    forward pass of the capture (two inputs, or a cache this capture cannot stitch): a
    trace of the first alone would leave calls out, so it is refused, naming the module."""
    names = {r.name for r in kept}
    again = [n for n in skipped if n in names]
    if again:
        (_, lq, lk), calls = kept[0].dims, 1 + skipped.count(again[0])
        raise GenerationError(
            f"{again[0]} was called {calls} times with different shapes in this capture "
            f"(first with {lq} queries over {lk} keys): the capture holds more than one "
            "forward pass of other inputs, and a trace is one of them; capture each input "
            "in its own block")


def _stack(records: list[AttentionRecord], name: str, bi: int, release: bool
           ) -> Tensor | None:
    """records' ``name`` tensors at batch index ``bi`` stacked on a new first dim (L),
    copied layer by layer (and each record's tensor dropped at once with ``release``);
    None when they differ in shape (k and v may differ in their number of heads)."""
    parts = [getattr(r, name) for r in records]
    if any(p is None for p in parts):
        return None
    shape = tuple(parts[0].shape)
    heads = {p.shape[1] for p in parts}
    if name in ("k", "v") and len({(p.shape[0], *p.shape[2:]) for p in parts}) == 1 and all(
            max(heads) % n == 0 for n in heads):
        # layers with fewer key/value heads (e.g. sliding layers with their own count) are
        # stored at the largest count, each head repeated for the query heads it serves
        shape = (shape[0], max(heads), *shape[2:])
    elif len({tuple(p.shape) for p in parts}) != 1:
        return None
    out = torch.empty(len(parts), *shape[1:], dtype=torch.float32)
    big = parts[0].numel() * 4 >= _TRIM_BYTES
    del parts
    for i, r in enumerate(records):
        part = getattr(r, name)[bi]
        out[i] = part.repeat_interleave(shape[1] // part.shape[0], dim=0)
        if release:
            setattr(r, name, None)
            if big:
                _give_back_memory()
    return out


#: Arguments whose value, given to an attention module of a Hugging Face decoder, makes the
#: call cross-attention (the keys and values come from the encoder).
CROSS_ARGUMENTS = ("key_value_states", "encoder_hidden_states", "cross_attention_states")
#: Names a Hugging Face decoder layer gives its cross-attention module.
_CROSS_NAMES = frozenset({"encoder_attn", "EncDecAttention", "crossattention", "cross_attn",
                          "cross_attention", "encoder_decoder_attention", "multihead_attn"})


def stack_table(root: nn.Module) -> dict[str, str]:
    """Dotted module name -> ``"encoder"``, ``"decoder"`` or ``"cross"`` for the modules of
    the attention stacks of an encoder–decoder ``root`` (empty for a model of one stack).

    * ``torch.nn`` and attnlab layers: a ``TransformerEncoderLayer``'s ``self_attn`` is the
      encoder's; a ``TransformerDecoderLayer``'s ``self_attn`` the decoder's, its
      ``multihead_attn`` (attnlab: ``cross_attn``) cross-attention.
    * Hugging Face (``config.is_encoder_decoder``, ``root`` or a model inside it): every
      module inside ``get_encoder()`` is the encoder's, inside ``get_decoder()`` the
      decoder's, except those a decoder layer names as its cross-attention
      (``encoder_attn``, ``EncDecAttention``, ...). While capturing, a decoder module
      called with the encoder's states (:data:`CROSS_ARGUMENTS`) is also counted as
      cross-attention.
    """
    from attnlab.nn.transformer import TransformerDecoderLayer as OwnDecoderLayer
    from attnlab.nn.transformer import TransformerEncoderLayer as OwnEncoderLayer

    names = {id(m): n for n, m in root.named_modules()}
    table: dict[str, str] = {}

    def put(m: nn.Module | None, stack: str) -> None:
        if isinstance(m, nn.Module) and id(m) in names:
            for sub in m.modules():
                if id(sub) in names:
                    table[names[id(sub)]] = stack

    for m in root.modules():
        if isinstance(m, (nn.TransformerEncoderLayer, OwnEncoderLayer)):
            put(m.self_attn, "encoder")
        elif isinstance(m, nn.TransformerDecoderLayer):
            put(m.self_attn, "decoder")
            put(m.multihead_attn, "cross")
        elif isinstance(m, OwnDecoderLayer):
            put(m.self_attn, "decoder")
            put(m.cross_attn, "cross")
    for hf in root.modules():  # the model itself, or one inside it
        if not (is_hf_model(hf) and getattr(hf.config, "is_encoder_decoder", False)):
            continue
        for side in ("encoder", "decoder"):
            try:
                part = getattr(hf, f"get_{side}")()
            except (AttributeError, NotImplementedError, TypeError):
                part = None
            if isinstance(part, nn.Module) and part is not hf:
                put(part, side)
    if table:
        for name, stack in list(table.items()):
            if stack == "decoder" and _CROSS_NAMES & set(name.split(".")):
                table[name] = "cross"
    return table


def _watch_cross(cap: Capture, module: nn.Module) -> Any:
    """A forward pre-hook that counts the module as cross-attention in ``cap`` when it is
    called with the encoder's states (one of :data:`CROSS_ARGUMENTS`, not None)."""
    import inspect

    try:
        sig: inspect.Signature | None = inspect.signature(module.forward)
    except (TypeError, ValueError):
        sig = None
    name = cap.name_of(module)

    def pre(_mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        given = kwargs
        if args and sig is not None:
            try:
                given = sig.bind_partial(*args, **kwargs).arguments
            except TypeError:
                given = kwargs
        if any(given.get(a) is not None for a in CROSS_ARGUMENTS):
            cap._cross.add(name)

    return module.register_forward_pre_hook(pre, with_kwargs=True)


def _refuse_unreadable(root: nn.Module, matched: set[int]) -> None:
    """Raise :class:`UnreadableAttentionError` before the model runs when an attention
    module of ``root`` is one no adapter reads (and holds none that one reads): a trace
    without it would be silently incomplete."""
    found: dict[str, tuple[str, int]] = {}

    def visit(m: nn.Module) -> bool:  # True when m or a module inside it is read
        inner = [visit(c) for c in m.children()]
        if id(m) in matched or any(inner):
            return True
        reason = unreadable_reason(m)
        if reason is not None and not any(
                unreadable_reason(d) for d in m.modules() if d is not m):
            cls = type(m).__name__
            found[cls] = (reason, found.get(cls, ("", 0))[1] + 1)
        return False

    visit(root)
    if found:
        parts = [f"{reason} [{n} module{'s' if n > 1 else ''}]"
                 for reason, n in found.values()]
        raise UnreadableAttentionError(
            f"{type(root).__name__} cannot be traced exactly: " + "; ".join(parts))


@contextlib.contextmanager
def capture(module: nn.Module, *, qkv: bool = True, context: bool = False,
            out: str | os.PathLike[str] | None = None, num_layers: int | None = None,
            batch_index: int = 0, reserve: int | None = None) -> Iterator[Capture]:
    """Record every attention call inside ``module`` while the block runs.

    Args:
        module: any ``nn.Module``: an attnlab model, a torch model built from
            ``nn.MultiheadAttention`` / ``nn.TransformerEncoder``, or a Hugging Face model.
        qkv: keep per-head q, k, v and the log-sum-exp (O(N·d) per head; the weights are
            then computed on demand). ``False`` keeps dense weights (B, H, Lq, Lk) instead:
            for short inputs only.
        context: also keep each head's output (B, H, Lq, dv).
        out: stream the trace to this file as the model runs (see the module docstring):
            one layer in memory at a time; ``cap.trace()`` finishes the file and returns the
            trace opened from it. A block that raises leaves no file.
        num_layers: with ``out``, the layers the file is laid out for (default: the
            model's config, else its number of attention modules).
        batch_index: with ``out``, the batch element streamed.
        reserve: with ``out``, bytes of header room kept for the labels and ``meta`` (the
            tracer gives its estimate; a header that outgrows its room costs one copy of
            the file).

    Yields:
        a :class:`Capture`; ``cap.records`` fill up as the model runs (unless streamed),
        ``cap.trace()`` assembles an :class:`AttentionTrace`.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    for name, flag in (("qkv", qkv), ("context", context)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
    if out is None and (num_layers is not None or reserve is not None or batch_index != 0):
        raise ValueError("num_layers, batch_index and reserve are for a streamed capture: "
                         "give out=PATH too")
    cap = Capture(module, qkv, context)
    matched: dict[int, list[nn.Module]] = {}
    for m in module.modules():
        for i, adapter in enumerate(ADAPTERS):
            if adapter.matches(m):
                matched.setdefault(i, []).append(m)
                break
    _refuse_unreadable(module, {id(m) for ms in matched.values() for m in ms})
    if not matched:
        raise ValueError(
            f"{type(module).__name__} has no attention module that attnlab can read "
            "(attnlab MultiHeadAttention/SelfAttention, torch.nn.MultiheadAttention, or a "
            "Hugging Face model whose attention goes through its attention interface)"
        )
    if out is not None:
        stacks = set(cap._stacks.values())
        if len(stacks) > 1:
            raise ValueError(
                f"out: {type(module).__name__} has several attention stacks "
                f"({', '.join(s for s in STACK_ORDER if s in stacks)}); a streamed trace holds "
                "one: capture it without out= (in memory) and save its StackedTrace")
        layers = (num_layers if num_layers is not None
                  else stream_layers(module, sum(len(ms) for ms in matched.values())))
        writer = TraceStream(out, layers, reserve=65536 if reserve is None else reserve)
        cap._stream = LayerStream(module, writer, batch_index)
    handles: list[Any] = []
    try:
        for mods in matched.values():
            for m in mods:
                if cap._stacks.get(cap.name_of(m)) == "decoder" and is_hf_module(m):
                    handles.append(_watch_cross(cap, m))
        for i, mods in matched.items():
            handles.extend(ADAPTERS[i].attach(cap, mods))
        yield cap
    except BaseException:
        if cap._stream is not None:
            cap._stream.writer.discard()
        raise
    finally:
        for hnd in reversed(handles):
            hnd.remove()
