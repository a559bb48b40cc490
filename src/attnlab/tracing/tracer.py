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

import inspect
import json
import os
import re
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from attnlab._text import too_long
from attnlab.tracing.adapters.attnlab import describe_model as describe_attnlab
from attnlab.tracing.adapters.huggingface import describe_model as describe_hf
from attnlab.tracing.adapters.huggingface import is_hf_model
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.budget import check_text, check_trace_budget
from attnlab.tracing.capture import capture
from attnlab.tracing.decode import (
    check_ids,
    continue_ids,
    fit_target,
    generate,
    generated_text,
    id_labels,
    ids_from,
    start_id,
    target_ids,
)
from attnlab.tracing.inputs import TRUNCATE_HINT
from attnlab.tracing.run_settings import (
    RunSettings,
    chat_text,
    model_device,
    model_dtype,
    resolve_device,
    resolve_dtype,
)
from attnlab.tracing.stacks import StackedTrace

__all__ = ["trace", "is_seq2seq", "token_limit", "BeyondWindowWarning", "MAX_NEW_TOKENS",
           "MERGE_RULE", "UNKNOWN_WARN_FRACTION"]

MERGE_RULE = "pieces of one character merged: weights summed over keys, averaged over queries"
#: Warn when more than this share of the real tokens is the tokenizer's unknown token.
UNKNOWN_WARN_FRACTION = 0.2
#: The most tokens an encoder–decoder model generates as the target when none is given.
MAX_NEW_TOKENS = 32
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


# -- the model --------------------------------------------------------------------------------


class _Bare:
    """What the tracer needs to know of a bare ``nn.Module`` (a LoadedModel's fields)."""

    def __init__(self, model: nn.Module, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = type(model).__name__
        if is_hf_model(model):
            info = describe_hf(model, tokenizer)
            self.kind = "hf"
        else:
            try:
                info = describe_attnlab(model)
            except TypeError:
                info = {"causal": False, "num_layers": 0, "num_heads": 0, "num_kv_heads": 0,
                        "head_dim": 0, "max_length": 1 << 30}
            self.kind = "attnlab"
        self.info = info
        self.causal = bool(info["causal"])
        self.num_layers = int(info["num_layers"])
        self.max_length = int(info["max_length"])

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, **self.info}


def _resolve(model: Any, tokenizer: Any) -> Any:
    if isinstance(model, nn.Module):
        return _Bare(model, tokenizer)
    inner = getattr(model, "model", None)
    if isinstance(inner, nn.Module) and all(
            hasattr(model, a) for a in ("tokenizer", "name", "max_length", "describe")):
        return model
    if isinstance(model, str):
        raise TypeError(
            f"model must be a loaded model or a torch.nn.Module, got the name {model!r}; "
            "load it first (attnlab.models.load(name)) or call attnlab.trace(name, text), "
            "which loads then traces"
        )
    raise TypeError(
        "model must be a loaded model (with .model, .tokenizer, .name, .max_length, "
        f".describe(), like attnlab.models.LoadedModel) or a torch.nn.Module, got "
        f"{type(model).__name__}"
    )


class BeyondWindowWarning(UserWarning):
    """A trace past the model's trained window (``max_tokens=`` above ``max_length``)."""


#: The names a model gives a learned table of absolute positions.
_POSITION_TABLES = ("wpe", "position_embeddings", "embed_positions", "pos_embed",
                    "position_embedding")


def _rope_theta(cfg: Any) -> float | None:
    """The rotary base a config states (``rope_theta``, or inside ``rope_parameters`` /
    ``rope_scaling``), else None."""
    theta = getattr(cfg, "rope_theta", None)
    for name in ("rope_parameters", "rope_scaling"):
        params = getattr(cfg, name, None)
        if theta is None and isinstance(params, dict):
            theta = params.get("rope_theta")
    ok = isinstance(theta, (int, float)) and not isinstance(theta, bool) and theta > 0
    return float(theta) if ok else None


def _past_window_refusal(loaded: Any) -> str | None:
    """None when ``loaded``'s positions go on past its window (rotary positions, stated by
    its config), else why they do not."""
    net, window = loaded.model, int(loaded.max_length)
    cfg = getattr(net, "config", None)
    if not is_hf_model(net):
        if getattr(cfg, "positional", None) == "rope":
            return (f"it is an attnlab model whose forward accepts at most its block_size "
                    f"({window}) tokens")
        return ("it learns one absolute position embedding per position (positional="
                f"{getattr(cfg, 'positional', None)!r}): there is none past the window")
    if _rope_theta(cfg) is not None:
        return None
    kind = getattr(cfg, "position_embedding_type", None)
    tables = [n for n, m in net.named_modules()
              if isinstance(m, nn.Embedding) and n.rsplit(".", 1)[-1] in _POSITION_TABLES]
    if kind == "absolute" or tables:
        where = f" ({tables[0]})" if tables else ""
        return (f"its config ({cfg.model_type}) gives it learned absolute positions{where}, "
                f"one embedding per position up to {window}: there is none past the window")
    return (f"its config ({cfg.model_type}) states no rotary positions (no rope_theta or "
            "rope_parameters)")


def token_limit(loaded: Any, max_tokens: int | None = None) -> int:
    """The most tokens :func:`trace` admits for ``loaded``: its own window
    (``max_length``), or ``max_tokens``. Past the window only for a model with rotary
    positions (see the module docstring); any other raises ``ValueError`` naming the
    model and why."""
    window = int(loaded.max_length)
    if max_tokens is None:
        return window
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
    if max_tokens > window:
        why = _past_window_refusal(loaded)
        if why is not None:
            raise ValueError(
                f"max_tokens: {max_tokens} is past {loaded.name}'s window of {window} tokens "
                f"and {loaded.name} cannot go past it: {why}; tracing past the window is for "
                "models with rotary positions (RoPE)")
    return max_tokens


def beyond_window_note(name: str, n: int, window: int) -> str:
    """The warning of a trace of ``n`` tokens past a window of ``window``."""
    return (f"{n} tokens are past {name}'s trained window of {window}: the attention there is "
            f"traced exactly as the model computes it, but the model never saw positions past "
            f"{window} in training; quality there is not the point: it shows how its rotary "
            "positions extrapolate, not how it reads a text")


def _header_reserve(info: dict[str, Any], text: str | None, meta: dict[str, Any],
                    layers: int) -> int:
    """Bytes of header room a streamed trace keeps for its labels and ``meta``: the labels,
    ids, text and meta as JSON, three times over (tokens, a merge's pieces and groups, the
    escaping of JSON inside the header), plus the layer names."""
    size = len(json.dumps([info["labels"], info["ids"], text, meta],
                          ensure_ascii=False).encode("utf-8"))
    return 3 * size + 160 * max(layers, 1) + 65536


def is_seq2seq(model: nn.Module) -> bool:
    """Whether ``model`` is an encoder–decoder model: a Hugging Face model whose config says
    ``is_encoder_decoder``, or attnlab's :class:`~attnlab.nn.transformer.Transformer`."""
    if is_hf_model(model):
        return bool(getattr(model.config, "is_encoder_decoder", False))
    from attnlab.nn.transformer import Transformer

    return isinstance(model, Transformer)


def _forward(model: nn.Module, ids: Tensor, target: Tensor | None = None) -> None:
    """One forward pass with what the trace needs (no KV cache, no vocabulary logits);
    ``target``: the decoder's input ids of an encoder–decoder model."""
    if is_hf_model(model):
        base = getattr(model, "base_model", model)  # skips the LM head: no N x V logits
        params = inspect.signature(base.forward).parameters
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if target is not None:
            kwargs["decoder_input_ids"] = target
            if "decoder_attention_mask" in params:
                kwargs["decoder_attention_mask"] = torch.ones_like(target)
        if "use_cache" in params:
            kwargs["use_cache"] = False
        base(**kwargs)
    elif is_seq2seq(model):
        model(ids, target if target is not None else ids)
    else:
        model(ids)


def _vocab_size(model: nn.Module) -> int | None:
    """How many token ids ``model`` embeds, when it says (None when it does not)."""
    if is_hf_model(model):
        try:
            n = getattr(model.get_input_embeddings(), "num_embeddings", None)
        except (AttributeError, NotImplementedError):
            n = None
        return n if isinstance(n, int) else None
    config = getattr(model, "config", None)  # attnlab: one vocabulary, or src and tgt ones
    sizes = [getattr(config, n, None) for n in ("vocab_size", "src_vocab_size",
                                                "tgt_vocab_size")]
    sizes = [n for n in sizes if isinstance(n, int) and not isinstance(n, bool)]
    return min(sizes) if sizes else None


# -- the text ---------------------------------------------------------------------------------


def _groups_from_offsets(offsets: Sequence[tuple[int, int]], special: Sequence[bool]
                         ) -> list[list[int]]:
    """Consecutive tokens whose character spans overlap form one group."""
    groups: list[list[int]] = []
    end = -1
    for i, ((s, e), sp) in enumerate(zip(offsets, special)):
        if not sp and groups and s < end and not special[groups[-1][-1]]:
            groups[-1].append(i)
            end = max(end, e)
        else:
            groups.append([i])
            end = e if not sp else -1
    return groups


def _encode_hf(tokenizer: Any, text: str, model_name: str, special_tokens: bool = True
               ) -> dict[str, Any]:
    enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=special_tokens)
    ids = list(enc["input_ids"])
    offsets = [tuple(o) for o in enc["offset_mapping"]]
    special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    special = [i in special_ids and s == e for i, (s, e) in zip(ids, offsets)]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    labels = [pieces[i] if special[i] else text[s:e] for i, (s, e) in enumerate(offsets)]
    info: dict[str, Any] = {"ids": ids, "labels": labels, "pieces": pieces, "spans": offsets,
                            "groups": _groups_from_offsets(offsets, special)}
    unk = getattr(tokenizer, "unk_token_id", None)
    real = [i for i, sp in zip(ids, special) if not sp]
    if unk is not None and real:
        n_unk = sum(i == unk for i in real)
        info["unknown_fraction"] = n_unk / len(real)
        if n_unk and (n_unk / len(real) > UNKNOWN_WARN_FRACTION):
            hint = ("its vocabulary lacks most Chinese/Japanese/Korean characters; use a "
                    "model that covers them, e.g. --model smollm2"
                    if _CJK.search(text) else "use a model whose vocabulary covers the text, "
                    "e.g. --model smollm2 (byte-level: no unknown tokens)")
            warnings.warn(
                f"{n_unk} of {len(real)} tokens ({n_unk / len(real):.0%}) are unknown to "
                f"{model_name} ({tokenizer.unk_token}); {hint}", UserWarning, stacklevel=3)
    return info


def _encode_plain(tokenizer: Any, text: str) -> dict[str, Any]:
    ids = list(tokenizer.encode(text))
    labels = (list(tokenizer.decode_tokens(ids)) if hasattr(tokenizer, "decode_tokens")
              else [str(i) for i in ids])
    return {"ids": ids, "labels": labels, "groups": [[i] for i in range(len(ids))]}


def _group_label(info: dict[str, Any], g: list[int], text: str | None) -> str:
    """A merged group's label: the text its pieces' character spans cover together."""
    spans = info.get("spans")
    if len(g) == 1 or spans is None or text is None:
        return "".join(info["labels"][i] for i in g)
    return text[min(spans[i][0] for i in g): max(spans[i][1] for i in g)]


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
        if out is not None or max_tokens is not None:
            raise ValueError("out and max_tokens are for text or token ids; trace an image or "
                             "a sound without them (and save the trace)")
        from attnlab.tracing.media import trace_media

        return trace_media(model, text_or_token_ids, image=image, audio=audio, target=target,
                           tokenizer=tokenizer, qkv=qkv, context=context, truncate=truncate,
                           max_memory=max_memory, max_new_tokens=max_new_tokens)
    if text_or_token_ids is None:
        raise TypeError("trace needs text_or_token_ids (text or token ids), image= or audio=")
    dt_name = str(dtype).removeprefix("torch.") if dtype is not None else None
    settings = RunSettings(chat=chat, generate=generate, temperature=temperature,
                           top_p=top_p, seed=seed, dtype=dt_name,
                           device=None if device is None else str(device))
    loaded = _resolve(model, tokenizer)
    tok = tokenizer if tokenizer is not None else loaded.tokenizer
    net = placed(loaded.model, dtype, device)
    reads = getattr(net, "main_input_name", "input_ids")
    if reads in _MEDIA_INPUTS:  # a vision or speech model given text or token ids
        raise ValueError(
            f"text_or_token_ids: {loaded.name} reads {reads} ({_MEDIA_INPUTS[reads]}), not "
            f"text or token ids: give {'image' if reads == 'pixel_values' else 'audio'}= "
            f"(--{'image' if reads == 'pixel_values' else 'audio'} FILE) instead")
    seq2seq = is_seq2seq(net)
    if target is not None and not seq2seq:
        raise ValueError(
            f"target is for encoder–decoder models (a source and a target text); "
            f"{loaded.name} has one attention stack and reads one text: put all of it in "
            "text_or_token_ids and leave target out")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or (
            max_new_tokens < 1):
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    if out is not None and seq2seq:
        raise ValueError(
            f"out: {loaded.name} is an encoder–decoder model (encoder, decoder and "
            "cross-attention stacks); a streamed trace holds one stack: trace it without "
            "out= and save its StackedTrace")
    if out is not None and (not isinstance(out, (str, os.PathLike)) or not os.fspath(out)):
        raise ValueError(f"out must be a file path, got {out!r}")
    limit = token_limit(loaded, max_tokens)
    window = int(loaded.max_length)
    info: dict[str, Any]
    text = None
    if settings.chat and not isinstance(text_or_token_ids, str):
        raise ValueError("chat wraps a text in the model's chat template: give text, not "
                         "token ids")
    if settings.generate and (seq2seq or not loaded.causal):
        raise ValueError(
            f"generate: {loaded.name} is not a causal language model (it reads "
            f"{'a source and a target' if seq2seq else 'its text in both directions'}); "
            "generation is for decoder-only models such as smollm2")
    if isinstance(text_or_token_ids, str):
        text = check_text(text_or_token_ids, "text")
        if tok is None:
            raise ValueError(
                f"text needs a tokenizer and {loaded.name} has none: pass tokenizer=..., or "
                "give token ids instead of text (their labels are then the ids)"
            )
        user_text = text
        if settings.chat:
            text = chat_text(tok, text, loaded.name)
        info = (_encode_hf(tok, text, loaded.name, special_tokens=not settings.chat)
                if callable(tok) and hasattr(tok, "convert_ids_to_tokens")
                else _encode_plain(tok, text))
    else:
        ids = ids_from(text_or_token_ids)
        if not ids:
            raise ValueError("token_ids is empty; give at least one token")
        info = {"ids": ids, "labels": id_labels(tok, ids),
                "groups": [[i] for i in range(len(ids))]}
    ids = info["ids"]
    meta: dict[str, Any] = {"model_info": {k: v for k, v in loaded.describe().items()
                                           if isinstance(v, (str, int, float, bool, type(None)))}}
    if len(ids) > limit:
        if not truncate:
            raise ValueError(too_long("text" if text is not None else "token_ids", len(ids),
                                      limit, "tokens", flag=TRUNCATE_HINT))
        meta["truncated_from"] = len(ids)
        ids = ids[:limit]
        info["labels"] = info["labels"][:limit]
        info["groups"] = [g for g in ([i for i in g if i < limit] for g in info["groups"])
                          if g]
    if len(ids) > window:
        meta["trained_window"] = window
        warnings.warn(BeyondWindowWarning(beyond_window_note(loaded.name, len(ids), window)),
                      stacklevel=2)
    vocab = _vocab_size(net)
    check_ids(ids, vocab, loaded.name)
    if "unknown_fraction" in info:
        meta["unknown_fraction"] = info["unknown_fraction"]
    meta["run"] = {"dtype": str(model_dtype(net)).removeprefix("torch."),
                   "device": str(model_device(net))}
    if settings.chat:
        meta["chat"] = {"template": True, "user_text": user_text}
    if settings.generate and len(ids) + settings.generate > limit:
        raise ValueError(
            f"generate: the prompt's {len(ids)} tokens and {settings.generate} new ones "
            f"exceed {loaded.name}'s limit of {limit} tokens; generate fewer or shorten the "
            "text")
    x = torch.tensor([ids], dtype=torch.long, device=model_device(net))
    new: list[int] = []
    if settings.generate and out is not None:  # generated first, then one streamed forward
        new = continue_ids(net, loaded.name, x, settings, feed_last=False)
        _append_generated(info, meta, tok, new, settings, merge_pieces, streamed=True)
        ids = info["ids"]
        x = torch.tensor([ids], dtype=torch.long, device=x.device)
    tgt: dict[str, Any] | None = None
    if seq2seq:
        meta["model_info"]["encoder_decoder"] = True
        tgt = _target(loaded, tok, target, x, limit, max_new_tokens, truncate)
        check_ids(tgt["ids"], vocab, loaded.name, "target")
        info["labels"] = _piece_labels(info, tok)
        meta["target_from"] = tgt["from"]
        if "truncated_from" in tgt:
            meta["target_truncated_from"] = tgt["truncated_from"]
    if max_memory is not None:
        # an encoder–decoder model keeps the source once (encoder) and the target twice
        # (decoder and cross rows): counted as that many tokens of one stack
        n = len(ids) + (2 * len(tgt["ids"]) if tgt is not None else 0) + (
            settings.generate if out is None else 0)
        check_trace_budget(loaded, n, max_memory, what="text", keep_weights=not qkv,
                           keep_context=context, streamed=out is not None)
    y = None if tgt is None else torch.tensor([tgt["ids"]], dtype=torch.long)
    was_training = net.training
    net.eval()
    calls = None if seq2seq else getattr(loaded, "num_layers", None)  # 3 stacks: unknown
    decoding = bool(settings.generate) and out is None
    if decoding and calls:
        calls *= settings.generate + 1  # the prompt, then one call per new token
    bar = _Progress(calls, loaded.name) if progress else None
    stream: dict[str, Any] = {}
    if out is not None:
        layers = int(getattr(loaded, "num_layers", 0) or 0)
        stream = {"out": out, "num_layers": layers or None,
                  "reserve": _header_reserve(info, text, meta, layers)}
    try:
        with torch.no_grad(), capture(net, qkv=qkv, context=context, **stream) as cap:
            def run() -> list[int]:
                if decoding:  # the generation itself, through the model's KV cache
                    return continue_ids(net, loaded.name, x, settings, feed_last=True)
                _forward(net, x, y)
                return []

            if bar is not None:
                cap.on_record = bar.advance
                with bar:
                    new = run() or new
            else:
                new = run() or new
    finally:
        net.train(was_training)
    if decoding:
        _append_generated(info, meta, tok, new, settings, merge_pieces, streamed=False)
        ids = info["ids"]
    if tgt is not None:
        t = cap.trace(tokens=info["labels"], model=loaded.name, token_ids=ids, text=text,
                      target_tokens=tgt["labels"], target_ids=tgt["ids"],
                      target=tgt["text"], meta=meta, release=True)
        if not isinstance(t, StackedTrace):
            raise ValueError(
                f"{loaded.name} is an encoder–decoder model but only its {t.stack!r} "
                "attention was recorded; attnlab could not tell its encoder, decoder and "
                "cross-attention apart")
        return t
    groups = info["groups"]
    if out is not None:  # the file finished, the merge in its header; opened from it
        merge = ((groups, [_group_label(info, g, text) for g in groups], MERGE_RULE)
                 if merge_pieces and any(len(g) > 1 for g in groups) else None)
        return cap.trace(tokens=info["labels"], model=loaded.name, token_ids=ids, text=text,
                         meta=meta, merge=merge)
    t = cap.trace(tokens=info["labels"], model=loaded.name, token_ids=ids, text=text,
                  meta=meta, release=True)
    if (isinstance(t, AttentionTrace) and merge_pieces and any(len(g) > 1 for g in groups)):
        t = t.merge_tokens(groups, [_group_label(info, g, text) for g in groups],
                           rule=MERGE_RULE)
    return t


# -- a generation -----------------------------------------------------------------------------


def _append_generated(info: dict[str, Any], meta: dict[str, Any], tok: Any, new: list[int],
                      settings: RunSettings, merge_pieces: bool, *, streamed: bool) -> None:
    """The generated ids appended to the encoded prompt (each its own token: labelled by
    its own text or bytes), and what the trace's ``meta`` says of the generation:
    ``prompt_tokens`` and ``generated`` (positions as the trace shows them, after any
    merge of the prompt's pieces) and ``generation``."""
    p = len(info["ids"])
    groups = info["groups"]
    shown = len(groups) if merge_pieces and any(len(g) > 1 for g in groups) else p
    info["ids"] = list(info["ids"]) + list(new)
    info["labels"] = list(info["labels"]) + id_labels(tok, new)
    info["groups"] = list(groups) + [[p + i] for i in range(len(new))]
    meta["prompt_tokens"] = shown
    meta["generated"] = list(range(shown, shown + len(new)))
    meta["generation"] = {
        **settings.describe(), "generated_tokens": len(new),
        "text": generated_text(tok, new) if tok is not None else None,
        "traced_as": ("one forward pass over the prompt and the generated tokens, after "
                      "the model generated them" if streamed else
                      "the decoding steps through the model's KV cache, stitched")}


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


def _piece_labels(info: dict[str, Any], tok: Any) -> list[str]:
    """The source labels when pieces stay apart: a piece that shares its character with
    others is labelled by its own bytes (:func:`~attnlab.tracing.decode.id_labels`), not
    the whole character."""
    labels = list(info["labels"])
    for g in info["groups"]:
        if len(g) > 1:
            for i, label in zip(g, id_labels(tok, [info["ids"][i] for i in g])):
                labels[i] = label
    return labels


def _target(loaded: Any, tok: Any, target: Any, x: Tensor, limit: int, max_new_tokens: int,
            truncate: bool) -> dict[str, Any]:
    """The decoder's input: ``ids``, ``labels``, ``text`` and where it came from
    (``"given"``, ``"generated"``, or ``"source"`` for attnlab's Transformer, which has no
    generation of its own, given no target)."""
    net = loaded.model
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
    out: dict[str, Any] = {} if cut_from is None else {"truncated_from": cut_from}
    out.update({"ids": ids, "labels": id_labels(tok, ids), "text": text, "from": origin})
    return out
