"""``trace(model, text_or_token_ids)``: one input through one already-loaded model.

``model`` is a loaded model (any object with ``.model``, ``.tokenizer``, ``.name``,
``.max_length`` and ``.describe()``, as :class:`attnlab.models.LoadedModel` has), or an
``nn.Module`` (a Hugging Face model, an attnlab model, a torch model) with its tokenizer.
Nothing here loads a model by name: that is :func:`attnlab.models.load`'s job (the root
``attnlab.trace(name_or_model, text)`` loads, then calls this).

Tokens are labelled as people read them. A byte-level BPE (GPT-2, Llama, SmolLM2) may cut
one Chinese character into several byte pieces; pieces that share a character (found via
the tokenizer's offsets) are merged into one token whose weights are **summed over keys
and averaged over queries** (rows still sum to 1). The trace keeps the pieces' q, k, v and
applies the merge on demand; it is recorded in ``trace.meta["merged"]``. Pass
``merge_pieces=False`` to see the pieces.

An encoder–decoder model (Hugging Face ``config.is_encoder_decoder``: T5, BART, Marian,
...; attnlab's ``Transformer``) reads a source and a target: ``trace(model, source,
target=...)`` runs one forward pass with the target as the decoder's input (after its start
token) and returns a :class:`~attnlab.tracing.stacks.StackedTrace` of the encoder, decoder
and cross-attention stacks; without a target, the model's own greedy generation is the
target (``meta["target_from"] == "generated"``).

**Streaming.** ``trace(model, text, out=PATH)`` writes the trace to ``PATH`` layer by layer
as the model runs (format version 5, :func:`~attnlab.tracing.capture.capture` with
``out=``) and returns it opened from the file
(:meth:`~attnlab.tracing.attention.AttentionTrace.open`): one layer in memory at a time,
whatever the number of layers; ``max_memory`` then counts one layer
(:mod:`attnlab.tracing.budget`). One-stack models, text or token ids.

**Past the window.** ``max_tokens=N`` admits up to N tokens instead of the model's own
limit (``max_length``); past that window only for a model with rotary positions (RoPE, told
by its config: ``rope_theta``, ``rope_parameters``), whose positions are computed, not
looked up in a table. Such a trace warns (:class:`BeyondWindowWarning`) and records the
window in ``meta["trained_window"]``: the model never saw those positions in training, so
its attention there shows how its rotary positions extrapolate, not how it reads text.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import torch
from torch import Tensor, nn

from attnlab._errors import AttnlabWarning
from attnlab._proc import release_memory
from attnlab._text import too_long
from attnlab.tracing._trace_records import (  # noqa: F401 (the records: importable here too)
    MAX_NEW_TOKENS,
    ChatInfo,
    GenerationInfo,
    RunInfo,
    Target,
    TracedMeta,
    TraceOptions,
)
from attnlab.tracing._traced_model import (
    _forward,
    _resolve,
    _vocab_size,
    beyond_window_note,
    is_seq2seq,
    token_limit,
)
from attnlab.tracing.adapters.huggingface import is_hf_model
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.budget import check_trace_budget
from attnlab.tracing.capture import Capture, capture
from attnlab.tracing.decode import (
    check_ids,
    continue_ids,
    fit_target,
    generate,
    generated_text,
    id_labels,
    start_id,
    target_ids,
)
from attnlab.tracing.encoded import UNKNOWN_WARN_FRACTION, Encoded, encode
from attnlab.tracing.forward_sums import SumsTaker
from attnlab.tracing.inputs import TRUNCATE_HINT
from attnlab.tracing.run_settings import (
    RunSettings,
    model_device,
    model_dtype,
    resolve_device,
    resolve_dtype,
)
from attnlab.tracing.stacks import StackedTrace

__all__ = ["trace", "is_seq2seq", "placed", "token_limit", "BeyondWindowWarning",
           "MAX_NEW_TOKENS", "MERGE_RULE", "UNKNOWN_WARN_FRACTION", "Target", "TraceOptions",
           "TracedMeta"]

MERGE_RULE = "pieces of one character merged: weights summed over keys, averaged over queries"


class BeyondWindowWarning(AttnlabWarning):
    """A trace past the model's trained window (``max_tokens=`` above ``max_length``)."""


def _header_reserve(enc: Encoded, meta: TracedMeta, layers: int) -> int:
    """Bytes of header room a streamed trace keeps for its labels and ``meta``: the labels,
    ids, text and meta as JSON, three times over (tokens, a merge's pieces and groups, the
    escaping of JSON inside the header), plus the layer names."""
    size = len(json.dumps([enc.labels, enc.ids, enc.text, meta],
                          ensure_ascii=False).encode("utf-8"))
    return 3 * size + 160 * max(layers, 1) + 65536


# -- progress ---------------------------------------------------------------------------------


class _Progress:
    """A rich progress bar on stderr advanced by each recorded attention call."""

    def __init__(self, total: int | None, name: str) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.bar = Progress(TextColumn(f"tracing {name}: layer"), BarColumn(),
                            MofNCompleteColumn(), console=Console(stderr=True),
                            transient=True)
        self.task = self.bar.add_task("trace", total=total or None)

    def __enter__(self) -> _Progress:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def advance(self, _record: object) -> None:
        self.bar.advance(self.task)


# -- trace ------------------------------------------------------------------------------------


#: What a model whose ``main_input_name`` is one of these reads instead of token ids.
_MEDIA_INPUTS = {"pixel_values": "an image", "input_features": "a sound (log-mel features)",
                 "input_values": "a sound (waveform samples)"}


def trace(
    model: Any,
    text_or_token_ids: str | Sequence[int] | Tensor | None = None,
    *,
    target: str | Sequence[int] | Tensor | None = None,
    image: Any = None,
    audio: Any = None,
    tokenizer: Any = None,
    qkv: bool = True,
    context: bool = False,
    truncate: bool = False,
    merge_pieces: bool = True,
    max_memory: int | str | None = None,
    progress: bool = False,
    max_new_tokens: int = MAX_NEW_TOKENS,
    out: str | os.PathLike[str] | None = None,
    max_tokens: int | None = None,
    chat: bool = False,
    generate: int = 0,
    temperature: float | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    sums: SumsTaker | None = None,
) -> AttentionTrace | StackedTrace:
    """Run one input through ``model`` under :func:`~attnlab.tracing.capture.capture`.

    Args:
        model: a loaded model (``attnlab.models.load(...)``, or any object with ``.model``,
            ``.tokenizer``, ``.name``, ``.max_length``, ``.describe()``), or an
            ``nn.Module`` (Hugging Face, attnlab or torch attention modules; give
            ``tokenizer`` for text).
        text_or_token_ids: text (tokenized by the model's tokenizer, special tokens added)
            or token ids (N,) / (1, N), each in the model's vocabulary (checked when the
            model states its size). For an encoder–decoder model: the source.
        target: encoder–decoder models only: the target the decoder reads, as text
            (tokenized as the model's target, after its decoder start token) or token ids
            (fed to the decoder as they are). ``None``: the model's own greedy generation
            from the source (at most ``max_new_tokens`` new tokens; ``meta["target_from"]``
            says ``"generated"``).
        image: an image (a path or a PIL image) for a vision transformer, instead of text;
            audio: a 16 kHz mono WAV file for a speech model, whose text is ``target`` (see
            :mod:`attnlab.tracing.media`).
        tokenizer: overrides the loaded model's tokenizer.
        qkv: keep per-head q, k, v and the log-sum-exp (O(N·d) per head; weights are
            computed on demand). ``False`` keeps dense weights instead (short inputs).
        context: also keep each head's output (L, H, N, dv).
        truncate: cut an input longer than the model's limit to the limit (recorded in
            ``meta["truncated_from"]``); without it such an input raises ``ValueError``.
        merge_pieces: merge byte pieces of one character (see the module docstring;
            one-stack models: an encoder–decoder trace keeps the pieces, each labelled by
            its own bytes, so that its stacks' labels agree).
        max_memory: refuse, before the model runs, an input whose trace would need more
            memory (bytes or a size such as ``"4GB"``; see :mod:`attnlab.tracing.budget`;
            with ``out``, one layer is counted).
        progress: show a progress bar per layer on stderr.
        max_new_tokens: the longest generation when an encoder–decoder model gets no
            ``target``.
        out: stream the trace to this file as the model runs (format version 5, written
            atomically) and return it opened from there (one-stack models, text or ids).
        max_tokens: admit up to this many tokens instead of the model's own limit; past it
            only for rotary-position models (:func:`token_limit`), with a
            :class:`BeyondWindowWarning`.
        chat: wrap the text as one user turn in the tokenizer's own chat template (with
            the prompt for the assistant's answer); refused for a tokenizer without one.
        generate: append up to this many tokens of the model's own continuation (a causal
            model): in memory the trace is the generation itself, every decoding step
            through the model's KV cache stitched into one sequence
            (:mod:`attnlab.tracing.generation`); with ``out`` the model generates first,
            then one streamed forward over the prompt and the continuation is traced.
            ``meta`` records ``prompt_tokens``, ``generated`` (the generated tokens'
            positions) and ``generation`` (the sampling, the text, how it was traced).
        temperature, top_p, seed: sample the continuation instead of taking the most
            likely token (``seed``: reproducibly, the caller's random state untouched).
        dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"``: run the model in it (a copy
            when the given model is in another); None traces it as it is.
        device: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"mps"``: run the model there (a copy
            when the given model is elsewhere); None runs it where it is. The trace's
            tensors come back to the host one layer at a time.
        sums: a :class:`~attnlab.tracing.forward_sums.SumsTaker` (attnlab's analysis:
            :func:`attnlab.analysis.heads.traced_with_sums`) that may compute the forward's
            attention calls and their head sums in one pass; the trace is the same within
            float32 rounding.

    Returns:
        an :class:`AttentionTrace` (batch of one) whose ``meta`` holds the model's
        description, the layer names, ``unknown_fraction`` and any merge; for an
        encoder–decoder model a :class:`~attnlab.tracing.stacks.StackedTrace` of its
        ``"encoder"``, ``"decoder"`` and ``"cross"`` stacks (source tokens label the
        encoder and the cross-attention's columns, target tokens the decoder and the
        cross-attention's rows).

    >>> import torch
    >>> from attnlab.nn.transformer import GPT, GPTConfig
    >>> gpt = GPT(GPTConfig(vocab_size=10, num_layers=2, num_heads=2, embed_dim=8))
    >>> t = trace(gpt, [1, 2, 3, 4])
    >>> t.num_layers, t.num_heads, t.seq_len, t.causal, t.has_qk
    (2, 2, 4, True, True)
    >>> t.weights_rows(0, 1, [0])  # the first token can only see itself
    tensor([[1., 0., 0., 0.]])
    """
    if image is not None or audio is not None:  # an image or a sound: attnlab.tracing.media
        if out is not None or max_tokens is not None or generate or chat or sums is not None:
            raise ValueError("out, max_tokens, chat, generate and sums are for text or token "
                             "ids; trace an image or a sound without them (and save the trace)")
        from attnlab.tracing.media import trace_media

        return trace_media(model, text_or_token_ids, image=image, audio=audio, target=target,
                           tokenizer=tokenizer, qkv=qkv, context=context, truncate=truncate,
                           max_memory=max_memory, max_new_tokens=max_new_tokens)
    if text_or_token_ids is None:
        raise TypeError("trace needs text_or_token_ids (text or token ids), image= or audio=")
    settings = RunSettings(chat=chat, generate=generate, temperature=temperature,
                           top_p=top_p, seed=seed, dtype=_dtype_name(dtype),
                           device=None if device is None else str(device))
    opts = TraceOptions(qkv=qkv, context=context, truncate=truncate, merge_pieces=merge_pieces,
                        max_memory=max_memory, progress=progress, out=out,
                        max_new_tokens=max_new_tokens, max_tokens=max_tokens, sums=sums)
    run = _Run.start(model, tokenizer, settings, opts, target=target, dtype=dtype,
                     device=device)
    enc, meta = run.encode(text_or_token_ids)
    tgt = run.target(enc, target, meta)
    run.check_budget(enc, tgt, meta)
    cap, enc = run.record(enc, tgt, meta)
    return run.finish(cap, enc, tgt, meta)


# -- the seams of a trace -----------------------------------------------------------------------


class _StreamTo(TypedDict, total=False):
    """Where a streamed trace goes (:func:`~attnlab.tracing.capture.capture`'s keywords of
    these names); none for a trace in memory."""

    out: str | os.PathLike[str]
    num_layers: int | None
    reserve: int


def _dtype_name(dtype: str | torch.dtype | None) -> str | None:
    return None if dtype is None else str(dtype).removeprefix("torch.")


@dataclass
class _Run:
    """One trace being made: the model (placed), its tokenizer, how it runs and what is
    kept; each method one step of :func:`trace`."""

    loaded: Any
    tok: Any
    net: nn.Module
    settings: RunSettings
    opts: TraceOptions
    seq2seq: bool
    limit: int

    @classmethod
    def start(cls, model: Any, tokenizer: Any, settings: RunSettings, opts: TraceOptions, *,
              target: Any, dtype: Any, device: Any) -> _Run:
        """The model resolved and placed, and every refusal that needs only the model."""
        loaded = _resolve(model, tokenizer)
        name = loaded.name
        net = placed(loaded.model, dtype, device)
        reads = getattr(net, "main_input_name", "input_ids")
        if reads in _MEDIA_INPUTS:  # a vision or speech model given text or token ids
            kind = "image" if reads == "pixel_values" else "audio"
            raise ValueError(
                f"text_or_token_ids: {name} reads {reads} ({_MEDIA_INPUTS[reads]}), not "
                f"text or token ids: give {kind}= (--{kind} FILE) instead")
        seq2seq = is_seq2seq(net)
        if target is not None and not seq2seq:
            raise ValueError(
                f"target is for encoder–decoder models (a source and a target text); {name} "
                "has one attention stack and reads one text: put all of it in "
                "text_or_token_ids and leave target out")
        if opts.out is not None and seq2seq:
            raise ValueError(
                f"out: {name} is an encoder–decoder model (encoder, decoder and "
                "cross-attention stacks); a streamed trace holds one stack: trace it without "
                "out= and save its StackedTrace")
        limit = token_limit(loaded, opts.max_tokens)
        if settings.generate and (seq2seq or not loaded.causal):
            raise ValueError(
                f"generate: {name} is not a causal language model (it reads "
                f"{'a source and a target' if seq2seq else 'its text in both directions'}); "
                "generation is for decoder-only models such as smollm2")
        tok = tokenizer if tokenizer is not None else loaded.tokenizer
        return cls(loaded, tok, net, settings, opts, seq2seq, limit)

    def encode(self, text_or_token_ids: Any) -> tuple[Encoded, TracedMeta]:
        """The input as ids (cut to the limit with ``truncate``, else refused), checked
        against the vocabulary, and the trace's ``meta`` so far."""
        loaded, s = self.loaded, self.settings
        enc = encode(self.tok, text_or_token_ids, loaded.name, chat=s.chat)
        meta: TracedMeta = {"model_info": {
            k: v for k, v in loaded.describe().items()
            if isinstance(v, (str, int, float, bool, type(None)))}}
        n, limit, window = len(enc.ids), self.limit, int(loaded.max_length)
        if n > limit:
            if not self.opts.truncate:
                raise ValueError(too_long("text" if enc.text is not None else "token_ids", n,
                                          limit, "tokens", flag=TRUNCATE_HINT))
            meta["truncated_from"] = n
            enc = enc.cut(limit)
        if len(enc.ids) > window:
            meta["trained_window"] = window
            warnings.warn(BeyondWindowWarning(beyond_window_note(
                loaded.name, len(enc.ids), window)), stacklevel=3)
        check_ids(enc.ids, _vocab_size(self.net), loaded.name)
        if enc.unknown_fraction is not None:
            meta["unknown_fraction"] = enc.unknown_fraction
        meta["run"] = {"dtype": _dtype_name(model_dtype(self.net)),
                       "device": str(model_device(self.net))}
        if s.chat:
            meta["chat"] = {"template": True, "user_text": enc.user_text}
        if s.generate and len(enc.ids) + s.generate > limit:
            raise ValueError(
                f"generate: the prompt's {len(enc.ids)} tokens and {s.generate} new ones "
                f"exceed {loaded.name}'s limit of {limit} tokens; generate fewer or shorten "
                "the text")
        return enc, meta

    def _ids(self, enc: Encoded) -> Tensor:
        return torch.tensor([enc.ids], dtype=torch.long, device=model_device(self.net))

    def target(self, enc: Encoded, target: Any, meta: TracedMeta) -> Target | None:
        """An encoder–decoder model's target (given, or its own generation), else None."""
        if not self.seq2seq:
            return None
        meta["model_info"]["encoder_decoder"] = True
        tgt = _target(self.loaded, self.net, self.tok, target, self._ids(enc), self.limit,
                      self.opts.max_new_tokens, self.opts.truncate)
        check_ids(tgt.ids, _vocab_size(self.net), self.loaded.name, "target")
        meta["target_from"] = tgt.origin
        if tgt.truncated_from is not None:
            meta["target_truncated_from"] = tgt.truncated_from
        return tgt

    def check_budget(self, enc: Encoded, tgt: Target | None, meta: TracedMeta) -> None:
        """Refuse, before the model runs, a trace that would not fit ``max_memory``."""
        o = self.opts
        if o.max_memory is None:
            return
        # an encoder–decoder model keeps the source once (encoder) and the target twice
        # (decoder and cross rows): counted as that many tokens of one stack
        n = len(enc.ids) + (2 * len(tgt.ids) if tgt is not None else 0) + (
            self.settings.generate)
        check_trace_budget(self.loaded, n, o.max_memory, what="text", keep_weights=not o.qkv,
                           keep_context=o.context, streamed=o.out is not None)

    def record(self, enc: Encoded, tgt: Target | None, meta: TracedMeta
               ) -> tuple[Capture, Encoded]:
        """The model run under capture: one forward pass; or a generation through its KV
        cache (in memory); or, streamed, the model's generation first, then one streamed
        forward over the prompt and the continuation. Returns the capture and the input
        with the generated ids appended."""
        s, o, net, name = self.settings, self.opts, self.net, self.loaded.name
        decoding = bool(s.generate) and o.out is None
        if s.generate and o.out is not None:
            # generated through attnlab's tiled attention (eager's numbers, not its N x N
            # maps), nothing kept: then one streamed forward over the whole sequence
            with torch.no_grad(), capture(net) as quiet:
                quiet.keep = False
                new = continue_ids(net, name, self._ids(enc), s, feed_last=False)
            release_memory()  # the generation's cache is gone: the forward starts afresh
            enc = _generated(enc, meta, self.tok, new, s, o.merge_pieces, streamed=True)
        x = self._ids(enc)
        y = None if tgt is None else torch.tensor([tgt.ids], dtype=torch.long)
        calls = None if self.seq2seq else getattr(self.loaded, "num_layers", None)
        if decoding and calls:
            calls *= s.generate + 1  # the prompt, then one call per new token
        bar = _Progress(calls, name) if o.progress else None
        stream: _StreamTo = {}
        if o.out is not None:
            layers = int(getattr(self.loaded, "num_layers", 0) or 0)
            stream = {"out": o.out, "num_layers": layers or None,
                      "reserve": _header_reserve(enc, meta, layers)}
        was_training = net.training
        net.eval()
        try:
            with torch.no_grad(), capture(net, qkv=o.qkv, context=o.context,
                                          **stream) as cap, bar or contextlib.nullcontext():
                if bar is not None:
                    cap.on_record = bar.advance
                if decoding:  # the generation itself, through the model's KV cache
                    new = continue_ids(net, name, x, s, feed_last=True)
                else:
                    cap.taker = self._taker(enc, x, y)
                    _forward(net, x, y)
        finally:
            net.train(was_training)
        if decoding:
            enc = _generated(enc, meta, self.tok, new, s, o.merge_pieces, streamed=False)
        return cap, enc

    def _taker(self, enc: Encoded, x: Tensor, y: Tensor | None) -> SumsTaker | None:
        """The taker of the forward's attention calls (``sums``), told what the forward of
        ``x`` will see; None without one, or for other than one sequence traced in memory
        (not streamed) without a target."""
        taker = self.opts.sums
        if taker is None or y is not None or self.opts.out is not None or x.shape[0] != 1:
            return None
        merge = enc.merge(MERGE_RULE) if self.opts.merge_pieces else None
        taker.prepare(pieces=int(x.shape[1]), groups=None if merge is None else merge[0],
                      token_ids=x[0].tolist(),
                      num_layers=getattr(self.loaded, "num_layers", None))
        return taker

    def finish(self, cap: Capture, enc: Encoded, tgt: Target | None, meta: TracedMeta
               ) -> AttentionTrace | StackedTrace:
        """The capture's trace, labelled, its pieces merged (streamed: the file finished,
        the merge in its header, the trace opened from it)."""
        name = self.loaded.name
        # the trace's meta: an open document from here on (the capture's record goes first;
        # a merge, a StackedTrace's stacks add their own)
        labelled = functools.partial(cap.trace, model=name, token_ids=enc.ids, text=enc.text,
                                     meta=dict(meta))
        if tgt is not None:
            t = labelled(tokens=enc.piece_labels(self.tok), target_tokens=tgt.labels,
                         target_ids=tgt.ids, target=tgt.text, release=True)
            if not isinstance(t, StackedTrace):
                raise ValueError(
                    f"{name} is an encoder–decoder model but only its {t.stack!r} attention "
                    "was recorded; attnlab could not tell its encoder, decoder and "
                    "cross-attention apart")
            return t
        merge = enc.merge(MERGE_RULE) if self.opts.merge_pieces else None
        if self.opts.out is not None:
            return labelled(tokens=enc.labels, merge=merge)
        t = labelled(tokens=enc.labels, release=True)
        if isinstance(t, AttentionTrace) and merge is not None:
            t = t.merge_tokens(*merge[:2], rule=merge[2])
        return t


# -- a generation -----------------------------------------------------------------------------


def _generated(enc: Encoded, meta: TracedMeta, tok: Any, new: list[int],
               settings: RunSettings, merge_pieces: bool, *, streamed: bool) -> Encoded:
    """The input with the generated ids appended (each its own token), and what the trace's
    ``meta`` says of the generation: ``prompt_tokens`` and ``generated`` (positions as the
    trace shows them, after any merge of the prompt's pieces) and ``generation``."""
    shown = len(enc.groups) if merge_pieces and enc.merges else len(enc.ids)
    meta["prompt_tokens"] = shown
    meta["generated"] = list(range(shown, shown + len(new)))
    meta["generation"] = {
        **settings.describe(), "generated_tokens": len(new),
        "text": generated_text(tok, new) if tok is not None else None,
        "traced_as": ("one forward pass over the prompt and the generated tokens, after "
                      "the model generated them" if streamed else
                      "the decoding steps through the model's KV cache, stitched")}
    return enc.with_generated(tok, new)


def placed(model: nn.Module, dtype: str | torch.dtype | None,
           device: str | torch.device | None) -> nn.Module:
    """``model`` in ``dtype`` on ``device`` (each None: as it is): the model itself when it
    already is, else a copy moved there (the given model is never changed)."""
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev if dev is not None else model_device(model))
    if (dev is None or dev == model_device(model)) and (dt is None or dt == model_dtype(model)):
        return model
    import copy

    return copy.deepcopy(model).to(device=dev, dtype=dt)


# -- the target of an encoder–decoder model -------------------------------------------------


def _target(loaded: Any, net: nn.Module, tok: Any, target: Any, x: Tensor, limit: int,
            max_new_tokens: int, truncate: bool) -> Target:
    """The decoder's input: given, the model's own greedy generation, or (attnlab's
    Transformer, which has no generation of its own, given no target) the source."""
    hf = is_hf_model(net)
    if target is None:
        if not hf:
            ids, text, origin = x[0].tolist(), None, "source"
        else:
            ids = generate(net, loaded.name, x, max_new_tokens)
            text, origin = generated_text(tok, ids), "generated"
    else:
        ids, text = target_ids(target, tok, start=start_id(net) if hf else None,
                               name=loaded.name)
        origin = "given"
    ids, cut_from = fit_target(ids, limit, truncate=truncate)
    return Target(ids=ids, labels=id_labels(tok, ids), text=text, origin=origin,
                  truncated_from=cut_from)
