"""The records the survey writes and reads back, shared by the modules that make them.

A survey's JSON document (``OUT/survey.json``, :meth:`attnlab.analysis.survey_result
.SurveyResult.to_json`) is :class:`SurveyDocument`; its headline numbers
(:meth:`~attnlab.analysis.survey_result.SurveyResult.headline`, what ``attnlab survey``
prints) are :class:`SurveyHeadline`; the random-token probes it records are
:class:`ProbeScores`, whose ``info`` is what :mod:`attnlab.analysis.literature` says it
used. Shapes are given as (L, H) for layers x heads. These are the documents' types, for
the code that writes them and the code that reads them back; nothing here runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from attnlab.analysis.survey_config import SurveyConfigFields

if TYPE_CHECKING:  # Python 3.11's; the annotations below are never evaluated at run time
    from typing import NotRequired

__all__ = ["DemoInductionInfo", "DistanceProfile", "InductionHead", "JSONScalar",
           "PrefixMatchingInfo", "PreviousTokenHead", "ProbeScores", "RepeatInductionInfo",
           "RepeatProbeInfo", "RoleShares", "ScoreStats", "SinkHead", "SinkStats",
           "SurveyCorpus", "SurveyDocument", "SurveyHeadline", "SurveyRun"]

#: A JSON value that is not a list or an object.
JSONScalar = str | int | float | bool | None


# -- the probes' settings (attnlab.analysis.literature, attnlab.analysis.heads) ---------------


class DemoInductionInfo(TypedDict):
    """What :func:`attnlab.analysis.literature.demo_induction_score` used."""

    batch: int
    seq_len: int  # the random sequence's length (before it is repeated)
    ids: list[int]  # [low, high) of the ids drawn
    seed: int
    bos: bool  # whether a BOS token comes first (never, as in the demo)
    scaled: bool  # whether the ids or the length were scaled to fit the model


class PrefixMatchingInfo(TypedDict):
    """What :func:`attnlab.analysis.literature.prefix_matching` used."""

    batch: int
    period: int  # distinct random ids per copy
    repeats: int  # copies of them per sequence
    ids: list[int]  # [low, high) of the ids drawn
    seed: int
    bos: bool  # whether the tokenizer's BOS token comes first
    scaled: bool  # whether the ids or the period were scaled to fit the model


class RepeatInductionInfo(TypedDict):
    """The repeated random sequence :func:`attnlab.analysis.heads.repeat_induction` read:
    ``prefix (start tokens) + r + r`` with ``r`` of ``period`` tokens, ``tokens`` in all."""

    period: int
    start: int
    tokens: int


class RepeatProbeInfo(TypedDict):
    """The survey's record of its ``repeat_induction`` probe (its sequence and seed)."""

    period: int
    start: int
    seed: int


class ProbeScores(TypedDict):
    """One random-token probe of a survey (``probes[name]``): its (L, H) scores and what
    it used."""

    scores: list[list[float]]
    info: DemoInductionInfo | PrefixMatchingInfo | RepeatProbeInfo


# -- the survey's document ----------------------------------------------------------------


class SurveyCorpus(TypedDict):
    """The corpus a survey read."""

    name: str
    sha256: str  # the digest of its texts (:meth:`attnlab.analysis.corpus.Corpus.scan`)
    texts: int


class ScoreStats(TypedDict):
    """One score of a survey (``scores[name]``), over the texts where it is defined."""

    texts: int  # the texts where the score is defined
    range: list[float]  # [low, high] of the histogram
    mean: list[list[float]]  # (L, H)
    std: list[list[float]]  # (L, H), population (ddof 0)
    histogram: list[list[list[float]]]  # (L, H, bins), the share of the texts in each bin
    # (L, H) the sum over every text, as TransformerLens averages it (the scores that need
    # a repeated token only)
    mean_all_texts: NotRequired[list[list[float]]]


class RoleShares(TypedDict):
    """One role of a survey (``roles[name]``): its rule and, per head, the share of the
    texts in which the head plays it."""

    score: str  # the score the rule reads
    threshold: float
    relation: str  # ``">"`` or ``">="``
    texts: int  # the texts where the score is defined
    share: list[list[float]]  # (L, H)


class DistanceProfile(TypedDict):
    """A survey's attention by relative distance ``i - j`` (``profile``)."""

    offsets: list[str]  # each bin's label: ``"<-D"``, ``"-D"`` ... ``"D"``, ``">D"``
    mean: list[list[list[float]]]  # (L, H, 2D + 3), each head's mean attention per query


class SinkStats(TypedDict):
    """Gu et al.'s sink count of a survey (``sink``)."""

    epsilon: float
    tokens: int  # the length of the inputs it is counted on
    samples: int  # the texts that had that many tokens
    sink_percent: float | None  # None when no text had
    per_head: list[list[float]]  # (L, H), the share of the samples with a sink


class SurveyDocument(TypedDict):
    """A survey's JSON document: ``OUT/survey.json``, and what the survey's page is drawn
    from (:mod:`attnlab.report.survey`)."""

    format: str  # :data:`attnlab.analysis.survey_result.FORMAT`
    version: int
    # the model's ``describe()`` fields that are JSON scalars (else its name alone)
    model: dict[str, JSONScalar]
    corpus: SurveyCorpus
    config: SurveyConfigFields
    num_layers: int
    num_heads: int
    world_size: int  # the processes that ran it
    split: str  # how they shared the work: ``"batches"`` or ``"heads"``
    backend: str | None  # the process group's backend (None: one process)
    threads: int
    # ``survey`` and ``probes`` (seconds), ``resumed_from_batch`` when it was resumed
    seconds: dict[str, float]
    texts: int
    tokens: int
    truncated: int
    skipped: int
    scores: dict[str, ScoreStats]
    roles: dict[str, RoleShares]
    profile: DistanceProfile
    sink: SinkStats
    probes: dict[str, ProbeScores]


# -- the survey's headline ----------------------------------------------------------------


class InductionHead(TypedDict):
    """One of the strongest induction heads by TransformerLens's demo score, with the other
    scores of the same head that were computed (4 decimals)."""

    layer: int
    head: int
    tl_demo_induction: float
    olsson_prefix_matching: NotRequired[float]
    attnlab_repeat_induction: NotRequired[float]
    corpus_induction_mul: NotRequired[float]
    corpus_induction_abs: NotRequired[float]
    corpus_induction_share: NotRequired[float]


class PreviousTokenHead(TypedDict):
    """One of the strongest previous-token heads by the corpus mean of ``previous``
    (TransformerLens's ``"mul"``), with the other scores of the same head that were
    computed (4 decimals)."""

    layer: int
    head: int
    previous_mul: float
    previous_abs: NotRequired[float]
    share_of_texts: NotRequired[float]
    diagonal: NotRequired[float]


class SinkHead(TypedDict):
    """One of the heads with a sink in the largest share of the texts (4 decimals)."""

    layer: int
    head: int
    share_of_texts: float
    gu_importance: float  # the corpus mean of Gu et al.'s first-token importance
    attnlab_sink: NotRequired[float]


class SurveyRun(TypedDict):
    """A survey's size and time, as its headline gives them first."""

    model: JSONScalar  # the model's name
    texts: int
    tokens: int
    world_size: int
    backend: str | None
    threads: int
    seconds: dict[str, float]
    sink_percent: float | None
    sink_samples: int


class SurveyHeadline(SurveyRun):
    """The numbers a reader asks first of a survey (what ``attnlab survey`` prints, and
    ``--json`` adds to its output): its size and time, then its strongest heads."""

    induction: NotRequired[list[InductionHead]]  # when the probes ran
    previous_token: list[PreviousTokenHead]
    sink: list[SinkHead]
