"""The input of a trace as the model reads it: :class:`Encoded` (token ids, their labels, the
pieces that share one character, the text) and :func:`encode`, which makes it from text or
token ids.

Tokens are labelled as people read them. A byte-level BPE (GPT-2, Llama, SmolLM2) may cut
one Chinese character into several byte pieces; pieces that share a character (found via
the tokenizer's offsets) form one *group*, which the tracer may merge into one token
(:meth:`Encoded.merge`). With ``chat=True`` the text is first wrapped as a user turn in the
tokenizer's own chat template (:func:`~attnlab.tracing.run_settings.chat_text`); the
template's own special tokens are then part of the text, so none are added.

>>> e = Encoded(ids=[5, 6, 7], labels=["a", "b", "c"], groups=[[0], [1], [2]], text="abc")
>>> e.cut(2).ids, e.with_generated(None, [9]).labels
([5, 6], ['a', 'b', 'c', '9'])
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from attnlab.tracing.budget import check_text
from attnlab.tracing.decode import id_labels, ids_from
from attnlab.tracing.run_settings import chat_text

__all__ = ["UNKNOWN_WARN_FRACTION", "Encoded", "encode"]

#: Warn when more than this share of the real tokens is the tokenizer's unknown token.
UNKNOWN_WARN_FRACTION = 0.2
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")

#: What a trace merges: (groups of consecutive pieces, their labels, the rule), as
#: :meth:`~attnlab.tracing.attention.AttentionTrace.merge_tokens` takes them.
Merge = tuple[list[list[int]], list[str] | None, str]


@dataclass(frozen=True)
class Encoded:
    """One input as token ids: ``labels`` (one per id), ``groups`` (consecutive ids that
    share a character: one group per token as people read them), ``text`` (None for ids
    given as such), the tokenizer's character ``spans`` and ``pieces`` where it gives them,
    the share of unknown tokens, and ``user_text``: the user's own text when it was wrapped
    in a chat template."""

    ids: list[int]
    labels: list[str]
    groups: list[list[int]]
    text: str | None = None
    spans: list[tuple[int, int]] | None = None
    pieces: list[str] | None = None
    unknown_fraction: float | None = None
    user_text: str | None = None

    def cut(self, limit: int) -> Encoded:
        """The first ``limit`` ids (their labels and groups with them)."""
        groups = [g for g in ([i for i in g if i < limit] for g in self.groups) if g]
        return dataclasses.replace(self, ids=self.ids[:limit], labels=self.labels[:limit],
                                   groups=groups)

    def with_generated(self, tokenizer: Any, new: list[int]) -> Encoded:
        """The ids the model generated appended, each its own token, labelled by its own
        text or bytes (:func:`~attnlab.tracing.decode.id_labels`)."""
        n = len(self.ids)
        return dataclasses.replace(
            self, ids=self.ids + list(new), labels=self.labels + id_labels(tokenizer, new),
            groups=self.groups + [[n + i] for i in range(len(new))])

    @property
    def merges(self) -> bool:
        """Whether some token is several pieces (a character cut into bytes)."""
        return any(len(g) > 1 for g in self.groups)

    def group_label(self, g: list[int]) -> str:
        """A group's label: the text its pieces' character spans cover together."""
        if len(g) == 1 or self.spans is None or self.text is None:
            return "".join(self.labels[i] for i in g)
        return self.text[min(self.spans[i][0] for i in g): max(self.spans[i][1] for i in g)]

    def merge(self, rule: str) -> Merge | None:
        """The merge of its groups under ``rule`` (None when no token is several pieces)."""
        if not self.merges:
            return None
        return self.groups, [self.group_label(g) for g in self.groups], rule

    def piece_labels(self, tokenizer: Any) -> list[str]:
        """The labels when pieces stay apart: a piece that shares its character with
        others is labelled by its own bytes, not the whole character."""
        labels = list(self.labels)
        for g in self.groups:
            if len(g) > 1:
                for i, label in zip(g, id_labels(tokenizer, [self.ids[i] for i in g])):
                    labels[i] = label
        return labels


def encode(tokenizer: Any, text_or_token_ids: str | Sequence[int] | Tensor, name: str, *,
           chat: bool = False) -> Encoded:
    """``text_or_token_ids`` as the model ``name`` reads it: text tokenized by its
    tokenizer (special tokens added; inside its chat template with ``chat``), or token ids
    as given (labelled by the tokenizer where it knows them)."""
    if chat and not isinstance(text_or_token_ids, str):
        raise ValueError("chat wraps a text in the model's chat template: give text, not "
                         "token ids")
    if not isinstance(text_or_token_ids, str):
        ids = ids_from(text_or_token_ids)
        if not ids:
            raise ValueError("token_ids is empty; give at least one token")
        return Encoded(ids=ids, labels=id_labels(tokenizer, ids),
                       groups=[[i] for i in range(len(ids))])
    text = check_text(text_or_token_ids, "text")
    if tokenizer is None:
        raise ValueError(
            f"text needs a tokenizer and {name} has none: pass tokenizer=..., or give "
            "token ids instead of text (their labels are then the ids)")
    user = text
    if chat:
        text = chat_text(tokenizer, text, name)
    if callable(tokenizer) and hasattr(tokenizer, "convert_ids_to_tokens"):
        enc = _encode_hf(tokenizer, text, name, special_tokens=not chat)
    else:
        enc = _encode_plain(tokenizer, text)
    return dataclasses.replace(enc, user_text=user if chat else None)


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
               ) -> Encoded:
    enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=special_tokens)
    ids = list(enc["input_ids"])
    offsets = [tuple(o) for o in enc["offset_mapping"]]
    special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    special = [i in special_ids and s == e for i, (s, e) in zip(ids, offsets)]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    labels = [pieces[i] if special[i] else text[s:e] for i, (s, e) in enumerate(offsets)]
    unknown = None
    unk = getattr(tokenizer, "unk_token_id", None)
    real = [i for i, sp in zip(ids, special) if not sp]
    if unk is not None and real:
        n_unk = sum(i == unk for i in real)
        unknown = n_unk / len(real)
        if n_unk and unknown > UNKNOWN_WARN_FRACTION:
            hint = ("its vocabulary lacks most Chinese/Japanese/Korean characters; use a "
                    "model that covers them, e.g. --model smollm2"
                    if _CJK.search(text) else "use a model whose vocabulary covers the text, "
                    "e.g. --model smollm2 (byte-level: no unknown tokens)")
            warnings.warn(
                f"{n_unk} of {len(real)} tokens ({unknown:.0%}) are unknown to "
                f"{model_name} ({tokenizer.unk_token}); {hint}", UserWarning, stacklevel=5)
    return Encoded(ids=ids, labels=labels, groups=_groups_from_offsets(offsets, special),
                   text=text, spans=offsets, pieces=pieces, unknown_fraction=unknown)


def _encode_plain(tokenizer: Any, text: str) -> Encoded:
    ids = list(tokenizer.encode(text))
    labels = (list(tokenizer.decode_tokens(ids)) if hasattr(tokenizer, "decode_tokens")
              else [str(i) for i in ids])
    return Encoded(ids=ids, labels=labels, groups=[[i] for i in range(len(ids))], text=text)
