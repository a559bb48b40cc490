"""``attnlab.trace(model, text_or_token_ids)``: one input through one model, as a trace.

Tokens are labelled as people read them. A byte-level BPE (GPT-2, Llama, SmolLM2) may cut
one Chinese character into several byte pieces; pieces that share a character (found via
the tokenizer's offsets) are merged into one token whose weights are **summed over keys
and averaged over queries** (rows still sum to 1). The merge is recorded in
``trace.meta["merged"]``; pass ``merge_pieces=False`` to keep the pieces (and q, k, v).
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.trace.capture import capture
from attnlab.trace.trace import AttentionTrace

__all__ = ["trace", "MERGE_RULE", "UNKNOWN_WARN_FRACTION"]

MERGE_RULE = "pieces of one character merged: weights summed over keys, averaged over queries"
#: Warn when more than this share of the real tokens is the tokenizer's unknown token.
UNKNOWN_WARN_FRACTION = 0.2
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def _check_text(text: str) -> str:
    if not text.strip():
        raise ValueError(
            f"text is empty or only whitespace ({text!r}); give at least one word to trace"
        )
    return text


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


def _encode_hf(tokenizer: Any, text: str, model_name: str) -> dict[str, Any]:
    enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=True)
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


def _id_labels(tokenizer: Any, ids: list[int]) -> list[str]:
    """Readable labels of single ids: the decoded text, or the bytes in hex when a token
    holds only part of a character (never U+FFFD or byte-level mojibake)."""
    pieces = tokenizer.convert_ids_to_tokens(ids)
    dec = None
    out = []
    for i, piece in zip(ids, pieces):
        text = tokenizer.decode([i])
        if "\ufffd" in text:
            dec = dec or _byte_decoder()
            if all(c in dec for c in piece):
                text = "".join(f"\\x{dec[c]:02x}" for c in piece)
            else:
                text = str(piece)
        out.append(text)
    return out


def _ids_from(token_ids: Any) -> list[int]:
    if isinstance(token_ids, Tensor):
        if token_ids.dim() == 2 and token_ids.shape[0] == 1:
            token_ids = token_ids[0]
        if token_ids.dim() != 1 or token_ids.dtype not in (torch.long, torch.int, torch.int16):
            raise ValueError(
                f"token_ids must be an integer tensor (N,) or (1, N), got dtype "
                f"{token_ids.dtype} shape {tuple(token_ids.shape)}"
            )
        return [int(i) for i in token_ids.tolist()]
    ids = list(token_ids)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise TypeError("token_ids must be a sequence of ints")
    return ids


def _is_hf(model: nn.Module) -> bool:
    return hasattr(model, "config") and hasattr(model.config, "model_type")


def _resolve(model: Any, tokenizer: Any) -> Any:
    """A LoadedModel for names, paths, LoadedModels and bare modules."""
    from attnlab.models import LoadedModel, load

    if isinstance(model, LoadedModel):
        return model
    if isinstance(model, (str, os.PathLike)):
        return load(model)
    if not isinstance(model, nn.Module):
        raise TypeError(
            "model must be a model name ('minilm', 'smollm2'), a path, a LoadedModel or a "
            f"torch.nn.Module, got {type(model).__name__}"
        )
    if _is_hf(model):
        from attnlab.models.registry import _from_hf, _is_causal_config

        causal = _is_causal_config(model.config)
        return _from_hf(model.config.model_type, model, tokenizer, causal, None, {})
    from attnlab.models.registry import LoadedModel as LM
    from attnlab.models.registry import describe_attnlab_model

    try:
        info = describe_attnlab_model(model)
    except TypeError:
        info = {"causal": False, "num_layers": 0, "num_heads": 0, "num_kv_heads": 0,
                "head_dim": 0, "max_length": 1 << 20}
    return LM(name=type(model).__name__, kind="attnlab", model=model, tokenizer=tokenizer,
              **info)


def _forward(loaded: Any, ids: Tensor) -> None:
    model = loaded.model
    if loaded.kind.startswith("hf"):
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    elif type(model).__name__ == "Transformer" and hasattr(model, "encode"):
        model(ids, ids)  # encoder-decoder: the same tokens on both sides
    else:
        model(ids)


def trace(
    model: Any,
    text_or_token_ids: str | Sequence[int] | Tensor,
    *,
    tokenizer: Any = None,
    qkv: bool = True,
    scores: bool = False,
    truncate: bool = False,
    merge_pieces: bool = True,
) -> AttentionTrace:
    """Run one input through ``model`` under :func:`capture` and return its trace.

    Args:
        model: a registered name (``"minilm"``, ``"smollm2"``), a model folder, a
            :class:`attnlab.models.LoadedModel`, a Hugging Face model (give ``tokenizer``
            for text) or any ``nn.Module`` built from attnlab / torch attention modules.
        text_or_token_ids: text (tokenized by the model's tokenizer, special tokens added)
            or token ids (N,) / (1, N).
        qkv: keep per-head q, k, v and context (after RoPE; GQA heads repeated).
        scores: also keep q kᵀ·scale + mask (-inf where masked).
        truncate: cut an input longer than the model's limit to the limit (recorded in
            ``meta["truncated_from"]``); without it such an input raises ``ValueError``.
        merge_pieces: merge byte pieces of one character (see the module docstring).

    Returns:
        an :class:`AttentionTrace` (batch of one) whose ``meta`` holds the model's
        description, the layer names, ``unknown_fraction`` and any merge.

    >>> import torch, attnlab
    >>> gpt = attnlab.GPT(attnlab.GPTConfig(vocab_size=10, n_layer=2, n_head=2, n_embd=8))
    >>> t = attnlab.trace(gpt, [1, 2, 3, 4])
    >>> tuple(t.weights.shape), t.causal
    ((2, 2, 4, 4), True)
    """
    loaded = _resolve(model, tokenizer)
    tok = tokenizer if tokenizer is not None else loaded.tokenizer
    info: dict[str, Any]
    text = None
    if isinstance(text_or_token_ids, str):
        text = _check_text(text_or_token_ids)
        if tok is None:
            raise ValueError(
                "text needs a tokenizer: pass tokenizer=..., or give token ids instead of text"
            )
        info = (_encode_hf(tok, text, loaded.name) if callable(tok) and hasattr(
            tok, "convert_ids_to_tokens") else _encode_plain(tok, text))
    else:
        ids = _ids_from(text_or_token_ids)
        if not ids:
            raise ValueError("token_ids is empty; give at least one token")
        labels = (_id_labels(tok, ids) if hasattr(tok, "convert_ids_to_tokens")
                  else list(tok.decode_tokens(ids)) if hasattr(tok, "decode_tokens")
                  else [str(i) for i in ids])
        info = {"ids": ids, "labels": labels, "groups": [[i] for i in range(len(ids))]}
    ids = info["ids"]
    meta: dict[str, Any] = {"model_info": {k: v for k, v in loaded.describe().items()
                                           if isinstance(v, (str, int, float, bool, type(None)))}}
    if len(ids) > loaded.max_length:
        if not truncate:
            raise ValueError(
                f"the input is {len(ids)} tokens but {loaded.name} accepts at most "
                f"{loaded.max_length}; shorten it or pass truncate=True (CLI: --truncate) "
                f"to keep the first {loaded.max_length}"
            )
        meta["truncated_from"] = len(ids)
        n = loaded.max_length
        ids = ids[:n]
        info["labels"] = info["labels"][:n]
        info["groups"] = [[i for i in g if i < n] for g in info["groups"]]
        info["groups"] = [g for g in info["groups"] if g]
    if "unknown_fraction" in info:
        meta["unknown_fraction"] = info["unknown_fraction"]
    x = torch.tensor([ids], dtype=torch.long)
    was_training = loaded.model.training
    loaded.model.eval()
    try:
        with torch.no_grad(), capture(loaded.model, qkv=qkv) as cap:
            _forward(loaded, x)
    finally:
        loaded.model.train(was_training)
    causal = loaded.causal if loaded.kind != "attnlab" or loaded.num_layers else None
    t = cap.trace(tokens=info["labels"], model=loaded.name, causal=causal, scores=scores,
                  token_ids=ids, text=text, meta=meta)
    groups = info["groups"]
    if merge_pieces and any(len(g) > 1 for g in groups):
        t = t.merge_tokens(groups, [_group_label(info, g, text) for g in groups],
                           rule=MERGE_RULE)
    return t


def _group_label(info: dict[str, Any], g: list[int], text: str | None) -> str:
    """A merged group's label: the text its pieces' character spans cover together."""
    spans = info.get("spans")
    if len(g) == 1 or spans is None or text is None:
        return "".join(info["labels"][i] for i in g)
    return text[min(spans[i][0] for i in g): max(spans[i][1] for i in g)]
