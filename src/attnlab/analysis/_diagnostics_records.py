"""The JSON documents of a head diagnosis (:meth:`attnlab.analysis.heads.HeadDiagnostics
.to_json`, :meth:`~attnlab.analysis.heads.StackedDiagnostics.to_json`): the scores and
roles, and the meta that says how the model ran on the text (sampling, generation, chat).
These are the documents' types; nothing here runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from attnlab.analysis._records import RepeatInductionInfo

if TYPE_CHECKING:  # Python 3.11's; the annotations below are never evaluated at run time
    pass

__all__ = ["ThresholdValues", "TraceSampling", "TraceGeneration", "TraceChat", "TraceRun",
           "DiagnosticsMeta", "RoleHit", "HeadDiagnosticsJSON", "StackedDiagnosticsJSON"]


class ThresholdValues(TypedDict):
    """The fields of :class:`Thresholds`, as the diagnostics' JSON records them."""

    sink: float
    previous: float
    induction: float
    diagonal: float
    cluster_similarity: float


class TraceSampling(TypedDict):
    """How a generation sampled (``temperature`` or ``top_p`` given)."""

    temperature: float | None
    top_p: float | None
    seed: int | None


class TraceGeneration(TypedDict):
    """A generation, as the tracer records it in a trace's ``meta["generation"]``."""

    new_tokens: int  # the tokens asked for
    sampling: TraceSampling | str  # or "greedy"
    generated_tokens: int
    text: str | None  # the generated text (None without a tokenizer)
    traced_as: str  # how the generated tokens were traced


class TraceChat(TypedDict):
    """A chat template's use, as the tracer records it in a trace's ``meta["chat"]``."""

    template: bool
    user_text: str  # the text inside the template


class TraceRun(TypedDict):
    """Where the model ran, as the tracer records it in a trace's ``meta["run"]``."""

    dtype: str
    device: str


class DiagnosticsMeta(TypedDict, total=False):
    """What :class:`HeadDiagnostics` and :class:`StackedDiagnostics` say beside the scores
    (``meta``): each key only where it applies."""

    similarity_block: int  # tokens a side of the pooled blocks the similarity compares
    stack: str  # the stack diagnosed, when not "self"
    skipped_scores: dict[str, str]  # score -> why it was left out (cross-attention)
    induction: RepeatInductionInfo  # the sequence repeat_induction read
    similarity_skipped: str  # why the similarity and the clusters were left out
    text: str | None  # the text diagnosed (diagnose_model), or an encoder's source
    target: str | None  # an encoder–decoder's target text
    seed: int  # the induction sequence's seed (diagnose_model)
    target_from: str | None  # "given" or "generated" (an encoder–decoder's target)
    target_truncated_from: int  # the target's length before --truncate cut it
    target_tokens: int  # the target's tokens after the cut
    # how the model ran on the text, copied from the trace's meta (diagnose_model):
    prompt_tokens: int
    generated: list[int]  # the generated tokens' positions
    generation: TraceGeneration
    chat: TraceChat
    run: TraceRun


class RoleHit(TypedDict):
    """A head that earns a role, and its score (6 decimals)."""

    layer: int
    head: int
    score: float


class HeadDiagnosticsJSON(TypedDict):
    """:meth:`HeadDiagnostics.to_json`: what ``attnlab diagnose --json`` prints of a trace of
    one stack."""

    model: str
    tokens: list[str]
    num_layers: int
    num_heads: int
    roles: dict[str, list[RoleHit]]  # role -> its heads, best first
    num_clusters: int | None  # None where the similarity was left out
    thresholds: ThresholdValues
    heads: list[dict[str, Any]]  # :meth:`HeadDiagnostics.rows`
    meta: DiagnosticsMeta


class StackedDiagnosticsJSON(TypedDict):
    """:meth:`StackedDiagnostics.to_json`: each stack's :class:`HeadDiagnosticsJSON`."""

    model: str
    stacks: dict[str, HeadDiagnosticsJSON]
    meta: DiagnosticsMeta
