"""The decoder's side of an encoder–decoder trace: the target's token ids (from a text or
from ids, checked against the decoder's length and vocabulary), their labels, and the
model's own greedy choice when no target is given.

Both tracers use it: text models (:mod:`attnlab.tracing.tracer`, through the model's
``generate`` and its generation rules) and speech models (:mod:`attnlab.tracing.media`,
through :func:`greedy`: the plain argmax, token by token, no forced or suppressed tokens).

>>> ids_from([3, 4])
[3, 4]
>>> id_labels(None, [3, 4])
['3', '4']
>>> fit_target([1, 2, 3], 2, truncate=True)
([1, 2], 3)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict

import torch
from torch import Tensor, nn

from attnlab._text import too_long
from attnlab.tracing._hf_forward import cache_keyword
from attnlab.tracing.budget import check_text
from attnlab.tracing.inputs import TRUNCATE_HINT

if TYPE_CHECKING:
    from attnlab.nn.transformer import GPT

__all__ = ["check_ids", "fit_target", "generate", "generated_text", "greedy", "id_labels",
           "ids_from", "needs_target", "next_logits", "start_id", "target_ids"]


# -- ids and their labels ---------------------------------------------------------------------


def ids_from(token_ids: Any, name: str = "text_or_token_ids") -> list[int]:
    """Token ids from a sequence of ints or an integer tensor (N,) / (1, N); ``TypeError`` or
    ``ValueError`` naming ``name`` (``token_ids`` for ``text_or_token_ids``) otherwise."""
    ids_name = "token_ids" if name == "text_or_token_ids" else name
    if isinstance(token_ids, Tensor):
        if token_ids.dim() == 2 and token_ids.shape[0] == 1:
            token_ids = token_ids[0]
        if token_ids.dim() != 1 or token_ids.dtype not in (torch.long, torch.int, torch.int16):
            raise ValueError(
                f"{ids_name} must be an integer tensor (N,) or (1, N), got dtype "
                f"{token_ids.dtype} shape {tuple(token_ids.shape)}"
            )
        return [int(i) for i in token_ids.tolist()]
    try:
        ids = list(token_ids)
    except TypeError:
        raise TypeError(f"{name} must be a str, a sequence of ints or an integer "
                        f"tensor, got {type(token_ids).__name__}") from None
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise TypeError(f"{ids_name} must be a sequence of ints")
    return ids


def check_ids(ids: list[int], vocab: int | None, name: str, arg: str = "token_ids") -> None:
    """``ValueError`` naming ``arg`` when an id is negative or outside the vocabulary
    ``[0, vocab)`` of the model ``name`` (only negative ids when ``vocab`` is None)."""
    lo, hi = min(ids, default=0), max(ids, default=0)
    if lo < 0 or (vocab is not None and hi >= vocab):
        where = f"the vocabulary [0, {vocab}) of {name}" if vocab is not None else "[0, ...)"
        raise ValueError(f"{arg} holds ids in [{lo}, {hi}], outside {where}")


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet back to bytes (printable stand-ins for all 256)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    chars, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars)}


def id_labels(tokenizer: Any, ids: list[int]) -> list[str]:
    """Readable labels of single ids: the decoded text, or the bytes in hex when a token
    holds only part of a character (never U+FFFD or byte-level mojibake), or the piece when
    the id decodes to nothing; the id itself when the tokenizer does not know it (no piece,
    or an empty one) or there is no tokenizer. attnlab's own tokenizers label by
    ``decode_tokens``."""
    if not hasattr(tokenizer, "convert_ids_to_tokens"):
        if hasattr(tokenizer, "decode_tokens"):
            return list(tokenizer.decode_tokens(ids))
        return [str(i) for i in ids]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    dec = None
    out = []
    for i, piece in zip(ids, pieces):
        if not piece:
            out.append(str(i))
            continue
        text = tokenizer.decode([i])
        if "\ufffd" in text:
            dec = dec or _byte_decoder()
            if all(c in dec for c in piece):
                text = "".join(f"\\x{dec[c]:02x}" for c in piece)
            else:
                text = str(piece)
        out.append(text or str(piece))
    return out


# -- the target ------------------------------------------------------------------------------


def start_id(net: nn.Module) -> int:
    """The decoder start token of a Hugging Face encoder–decoder model: its
    ``decoder_start_token_id``, else its ``bos_token_id``, else its ``pad_token_id`` (T5),
    from its generation config or its config."""
    for name in ("decoder_start_token_id", "bos_token_id", "pad_token_id"):
        for holder in (getattr(net, "generation_config", None), net.config):
            v = getattr(holder, name, None) if holder is not None else None
            if isinstance(v, int) and not isinstance(v, bool):
                return v
    raise ValueError(f"{type(net).__name__} states no decoder_start_token_id; give target as "
                     "token ids, its first one the decoder's start")


def target_ids(target: Any, tokenizer: Any, *, start: int | None, name: str
               ) -> tuple[list[int], str | None]:
    """The decoder's ids for ``target`` and its text (None for ids).

    A text is tokenized as the model's target (``tokenizer(text_target=...)``) after the
    decoder's ``start`` token (put first when the tokenizer does not); with ``start`` None
    (attnlab's own models) by ``tokenizer.encode``, as it is. Ids are returned as given.
    """
    if isinstance(target, str):
        text = check_text(target, "target")
        if tokenizer is None:
            raise ValueError(f"target text needs a tokenizer and {name} has none: pass "
                             "tokenizer=..., or give the target as token ids (their labels "
                             "are then the ids)")
        if start is not None and callable(tokenizer):
            ids = list(tokenizer(text_target=text)["input_ids"])
            return (ids if ids and ids[0] == start else [start, *ids]), text
        if hasattr(tokenizer, "encode"):  # attnlab's own tokenizer: the ids as they are
            return list(tokenizer.encode(text)), text
        raise ValueError(f"target text needs a tokenizer with encode(); give {name} the "
                         "target as token ids")
    ids = ids_from(target, "target")
    if not ids:
        raise ValueError("target is empty; give at least one token")
    return ids, None


def fit_target(ids: list[int], limit: int, *, truncate: bool) -> tuple[list[int], int | None]:
    """``ids`` within the decoder's ``limit`` positions, and the length it was cut from
    (None when it was not cut); ``ValueError`` naming ``target`` when it is longer and
    ``truncate`` is false."""
    if len(ids) <= limit:
        return ids, None
    if not truncate:
        raise ValueError(too_long("target", len(ids), limit, "tokens", flag=TRUNCATE_HINT))
    return ids[:limit], len(ids)


def generated_text(tokenizer: Any, ids: list[int]) -> str | None:
    """The text of generated ids (special tokens skipped), None without a tokenizer."""
    return tokenizer.decode(ids, skip_special_tokens=True) if hasattr(
        tokenizer, "decode") else None


# -- the model's own choice -------------------------------------------------------------------


def needs_target(name: str, net: nn.Module, why: str = "") -> ValueError:
    """The refusal of a model that cannot choose a target itself."""
    return ValueError(f"target is needed: {name} ({type(net).__name__}) has no language-model "
                      f"head to generate a target with{why}; pass target=... (text or token "
                      "ids), or load the model with its head (...ForConditionalGeneration)")


def generate(net: Any, name: str, input_ids: Tensor, max_new_tokens: int) -> list[int]:
    """The model's greedy target for a source under its own generation rules (Hugging
    Face's ``generate``: one beam, no sampling; its forced and banned tokens applied)."""
    if not (hasattr(net, "generate") and callable(getattr(net, "can_generate", None))
            and net.can_generate()):
        raise needs_target(name, net)
    with torch.no_grad():
        gen = net.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                           max_new_tokens=max_new_tokens, do_sample=False, num_beams=1)
    return [int(i) for i in gen[0].tolist()]


def next_logits(net: Any, config: Any) -> Callable[..., tuple[Tensor, Any]] | None:
    """``step(encoded, ids, past) -> (logits of the next token, past)``: the model's own
    head, or (a base model without one) the decoder's token embedding when the config ties
    the head to it, as the model with a head computes; None otherwise. ``past`` is the
    model's key/value cache (the cross-attention's keys and values computed once)."""
    head = net.get_output_embeddings()
    embed = getattr(net.get_decoder(), "embed_tokens", None)
    if not isinstance(head, nn.Module):
        if not (getattr(config, "tie_word_embeddings", False)
                and isinstance(embed, nn.Embedding)):
            return None

    name = cache_keyword(net)

    tied = embed if isinstance(embed, nn.Embedding) else None  # (without a head: tied)

    def step(encoded: Any, ids: Tensor, past: Any) -> tuple[Tensor, Any]:
        new = ids if past is None else ids[:, -1:]
        out = net(encoder_outputs=encoded, decoder_input_ids=new, use_cache=True,
                  **{name: past})
        past = getattr(out, name, None)
        if isinstance(head, nn.Module) or tied is None:
            return out.logits[0, -1], past
        return out.last_hidden_state[0, -1] @ tied.weight.T, past

    return step


def greedy(step: Callable[..., tuple[Tensor, Any]], encoded: Any, start: int,
           eos: int | None, vocab: int, max_new_tokens: int) -> list[int]:
    """The model's greedy choice token by token from ``start`` (no suppressed or forced
    tokens), stopping after its end token or ``max_new_tokens``."""
    ids, past = [start], None
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits, past = step(encoded, torch.tensor([ids]), past)
            ids.append(int(logits[:vocab].argmax()))
            if eos is not None and ids[-1] == eos:
                break
    return ids


# -- a causal model's own continuation ----------------------------------------------------------


class _SamplingKnobs(TypedDict, total=False):
    """The sampling keywords :func:`continue_ids` gives Hugging Face's ``generate``: whether
    it samples, and the knobs it samples with (a knob given as None is switched off, not
    left to the model's generation config)."""

    do_sample: bool
    temperature: float | None
    top_p: float | None
    top_k: int | None


def continue_ids(net: Any, name: str, input_ids: Tensor, settings: Any, *,
                 feed_last: bool = True) -> list[int]:
    """The model's own continuation of ``input_ids`` (1, P): ``settings.generate`` new ids
    at most (fewer when it ends its text), greedy or sampled as ``settings``
    (:class:`~attnlab.tracing.run_settings.RunSettings`) says, through the model's KV cache
    as it generates for a user: Hugging Face's ``generate``, or for attnlab's ``GPT`` one
    step per token through its :class:`~attnlab.nn.attention.KVCache`.

    ``feed_last``: after the last new token, run the model one more step on it through the
    same cache, so that every generated token has its attention row (``generate`` never
    feeds the token it returns last). Sampling with ``settings.seed`` draws from a generator
    of its own: the caller's random state is left as it was.
    """
    from attnlab.nn.transformer import GPT

    n = settings.generate
    ctx = torch.random.fork_rng(devices=[]) if settings.seed is not None else (
        contextlib.nullcontext())
    with ctx, torch.no_grad():
        if settings.seed is not None:
            torch.manual_seed(settings.seed)
        if isinstance(net, GPT):
            return _continue_gpt(net, input_ids, settings, feed_last)
        if not (hasattr(net, "generate") and callable(getattr(net, "can_generate", None))
                and net.can_generate()):
            raise ValueError(f"generate: {name} ({type(net).__name__}) has no language-model "
                             "head to generate with; load it with its head "
                             "(...ForCausalLM), or trace the text without --generate")
        sample: _SamplingKnobs = {"do_sample": settings.sampling}
        if settings.sampling:  # the knobs given; the generation config's for the others
            if settings.temperature is not None:
                sample["temperature"] = settings.temperature
            if settings.top_p is not None:
                sample["top_p"] = settings.top_p
        else:  # greedy: no sampling knob of the model's generation config applies
            sample.update({"temperature": None, "top_p": None, "top_k": None})
        mask = torch.ones_like(input_ids)
        out = net.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=n,
                           num_beams=1, return_dict_in_generate=True, use_cache=True,
                           pad_token_id=_pad_id(net), **sample)
        seq = out.sequences
        new = [int(i) for i in seq[0, input_ids.shape[1]:].tolist()]
        if feed_last and new:
            key = cache_keyword(net)  # the forward's keyword, the output's field
            past = getattr(out, key, None)
            if past is None:
                past = getattr(out, "past_key_values", None)
            net(input_ids=seq[:, -1:], attention_mask=torch.ones_like(seq), use_cache=True,
                **{key: past})
        return new


def _pad_id(net: nn.Module) -> int | None:
    """The id generation pads with: the model's pad token, else its end of text."""
    cfg = getattr(net, "generation_config", None) or getattr(net, "config", None)
    for attr in ("pad_token_id", "eos_token_id"):
        v = getattr(cfg, attr, None)
        if isinstance(v, (list, tuple)):
            v = v[0] if v else None
        if isinstance(v, int):
            return v
    return None


def _continue_gpt(gpt: GPT, input_ids: Tensor, settings: Any, feed_last: bool
                  ) -> list[int]:
    """attnlab's GPT, one token at a time through one KVCache per block."""
    from attnlab.nn.attention import KVCache

    limit = gpt.config.block_size
    if input_ids.shape[1] + settings.generate > limit:
        raise ValueError(f"generate: {input_ids.shape[1]} prompt tokens and "
                         f"{settings.generate} new ones exceed the model's block_size of "
                         f"{limit}")
    caches = [KVCache() for _ in gpt.blocks]
    logits = gpt(input_ids, caches)[0, -1]
    new: list[int] = []
    for i in range(settings.generate):
        nxt = _choose(logits, settings)
        new.append(nxt)
        if i + 1 < settings.generate or feed_last:
            logits = gpt(torch.tensor([[nxt]], device=input_ids.device), caches)[0, -1]
    return new


def _choose(logits: Tensor, settings: Any) -> int:
    """The next id: the most likely, or drawn at ``temperature`` from the smallest set of
    ids whose probability reaches ``top_p``."""
    if not settings.sampling:
        return int(logits.argmax())
    p = torch.softmax(logits.float() / (settings.temperature or 1.0), dim=-1)
    if settings.top_p is not None and settings.top_p < 1:
        sp, order = p.sort(descending=True)
        keep = (sp.cumsum(0) - sp) < settings.top_p
        p = torch.zeros_like(p).scatter_(0, order[keep], sp[keep])
    return int(torch.multinomial(p / p.sum(), 1))
