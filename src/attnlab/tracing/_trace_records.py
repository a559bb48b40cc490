"""The typed records of a trace made by :func:`attnlab.tracing.tracer.trace`: what it writes
in the trace's ``meta`` (:class:`TracedMeta`, with :class:`RunInfo`, :class:`ChatInfo` and
:class:`GenerationInfo`), the tracer's options (:class:`TraceOptions`, checked when made) and
the decoder's input of an encoder–decoder model (:class:`Target`). Each is importable from
:mod:`attnlab.tracing.tracer` too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TypedDict

from attnlab._errors import check_int
from attnlab.tracing.forward_sums import SumsTaker
from attnlab.tracing.run_settings import GenerationSettings

__all__ = ["MAX_NEW_TOKENS", "ChatInfo", "GenerationInfo", "RunInfo", "Target", "TraceOptions",
           "TracedMeta"]

#: The most tokens an encoder–decoder model generates as the target when none is given.
MAX_NEW_TOKENS = 32


# -- what a trace's meta records ----------------------------------------------------------------


class RunInfo(TypedDict):
    """How the model ran (``meta["run"]``)."""

    #: torch's name of the model's dtype, without ``torch.`` (``"float32"``).
    dtype: str | None
    device: str


class ChatInfo(TypedDict):
    """The chat template the text was wrapped in (``meta["chat"]``)."""

    template: bool
    #: The user's own text, before the template.
    user_text: str | None


class GenerationInfo(GenerationSettings):
    """A generation's settings and what it gave (``meta["generation"]``)."""

    generated_tokens: int
    #: The generated tokens' text (None without a tokenizer).
    text: str | None
    #: How the generated tokens were traced: through the KV cache, or one forward pass.
    traced_as: str


class TracedMeta(TypedDict, total=False):
    """What :func:`~attnlab.tracing.tracer.trace` records in a trace's ``meta`` (the
    capture's own record, :class:`~attnlab.tracing.capture.CaptureInfo`, comes first); each
    field only where it applies."""

    #: The model's description (``describe()``), its JSON scalars.
    model_info: dict[str, str | int | float | bool | None]
    #: The input's length before ``truncate`` cut it.
    truncated_from: int
    #: The model's window, for a trace past it (``max_tokens``).
    trained_window: int
    #: The share of the input's tokens the tokenizer did not know.
    unknown_fraction: float
    run: RunInfo
    chat: ChatInfo
    #: Where an encoder–decoder model's target came from (:attr:`Target.origin`).
    target_from: str
    #: The target's length before ``truncate`` cut it.
    target_truncated_from: int
    #: The prompt's tokens, after a merge of its pieces.
    prompt_tokens: int
    #: The generated tokens' positions in the trace.
    generated: list[int]
    generation: GenerationInfo


# -- what a trace is made with ------------------------------------------------------------------


@dataclass(frozen=True)
class TraceOptions:
    """What the tracer keeps and how (the keywords of :func:`~attnlab.tracing.tracer.trace` that
    are not how the model runs, :class:`~attnlab.tracing.run_settings.RunSettings`), checked."""

    qkv: bool = True
    context: bool = False
    truncate: bool = False
    merge_pieces: bool = True
    max_memory: int | str | None = None
    progress: bool = False
    out: str | os.PathLike[str] | None = None
    max_new_tokens: int = MAX_NEW_TOKENS
    max_tokens: int | None = None
    sums: SumsTaker | None = None

    def __post_init__(self) -> None:
        check_int("max_new_tokens", self.max_new_tokens, minimum=1)
        if self.sums is not None and not isinstance(self.sums, SumsTaker):
            raise TypeError(f"sums must be a SumsTaker (prepare and attention), got "
                            f"{type(self.sums).__name__}")
        out = self.out
        if out is not None and (not isinstance(out, (str, os.PathLike)) or not os.fspath(out)):
            raise ValueError(f"out must be a file path, got {out!r}")


@dataclass(frozen=True)
class Target:
    """The decoder's input of an encoder–decoder model: its ids and labels, its text, where
    it came from (``"given"``, ``"generated"``, or ``"source"`` for attnlab's Transformer,
    which has no generation of its own) and the length it was cut from, if it was."""

    ids: list[int]
    labels: list[str]
    text: str | None
    origin: str
    truncated_from: int | None = None
