"""The document the report's long-contexts part writes (``long_contexts.json``) and reads
back: the machine, the text, each point of the curve, the dense path's stop, the target, the
chosen head, its exact rows and the map (:mod:`attnlab.report.long_contexts`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from attnlab.report._measure import Failed, Measured

if TYPE_CHECKING:  # Python 3.11's; the annotations below are never evaluated at run time
    from typing import NotRequired

__all__ = ["Machine", "TextSource", "Point", "DenseStop", "Target", "HeadChoice", "KeyWeight",
           "ExactRow", "MapInfo", "LongContextsDoc"]


class Machine(TypedDict):
    """The machine the curve was measured on."""

    cpus: int | None
    memory_bytes: int | None
    platform: str
    python: str
    loadavg_start: list[float]  # 1, 5 and 15 minutes
    loadavg_end: NotRequired[list[float]]


class TextSource(TypedDict):
    """The long text (:func:`attnlab.report.long_text.long_text`)."""

    source: str  # "course", or the folder of its texts
    en: str  # its name in English
    zh: str  # and in Chinese


class Point(TypedDict):
    """The curve at one N: the trace's process, and eager's when it ran."""

    tokens: int
    trace: Measured | Failed
    eager: Measured | Failed | None  # None: not run
    eager_predicted_bytes: int | None  # None: the trace failed, so nothing was predicted


class DenseStop(TypedDict):
    """Where the dense curve stopped, and why."""

    tokens: int
    predicted_bytes: int
    reason: str  # "over budget", or "failed: ..."


class Target(TypedDict):
    """The trace's peak at :data:`TARGET_TOKENS` against its target."""

    tokens: int
    trace_peak_bytes: int  # the target
    measured_bytes: int | None  # None: the curve did not reach the tokens, or failed there
    passed: bool | None  # None: not checked


class HeadChoice(TypedDict):
    """The head the map shows (:func:`choose_head`)."""

    layer: int
    head: int
    score: float  # its repeat_induction
    role: str
    period: int  # the repeated random sequence's
    seed: int


class KeyWeight(TypedDict):
    """One of a row's largest weights (:func:`exact_rows`)."""

    key: int
    token: str
    weight: float
    after_copy: bool  # the key follows an earlier copy of the query's token


class ExactRow(TypedDict):
    """One row of a head computed on demand (:func:`exact_rows`)."""

    query: int
    token: str
    row_sum: float
    milliseconds: float  # the row's computation
    top: list[KeyWeight]


class MapInfo(TypedDict):
    """One head's pooled map (:func:`article_map`); the section's map adds what it shows
    beside it (``doc["map"]``)."""

    layer: int
    head: int
    block: int  # tokens per block
    blocks: int  # blocks a side
    tokens: int
    seconds: float  # the pooled computation
    max_row_sum_error: float
    title: NotRequired[str]
    title_zh: NotRequired[str]
    text_en: NotRequired[str]  # the long text's name
    text_zh: NotRequired[str]
    text_tokens: NotRequired[int]  # the long text's tokens (the map shows the first ones)
    window: NotRequired[int]  # the model's
    trace_seconds: NotRequired[float]
    choice: NotRequired[HeadChoice]
    rows: NotRequired[list[ExactRow]]


class LongContextsDoc(TypedDict):
    """The section's numbers (:func:`measure`; :func:`build` adds ``settings`` and ``map``),
    written as :data:`JSON_NAME`."""

    model: str
    sizes: list[int]
    dense_budget_bytes: int
    dense_budget_origin: str  # "given", "environment" or "default"
    machine: Machine
    text: TextSource
    points: list[Point]
    dense_stop: DenseStop | None  # None: eager ran at every N
    num_layers: NotRequired[int]  # the model's, once a trace ran
    num_heads: NotRequired[int]
    num_kv_heads: NotRequired[int]
    target: NotRequired[Target]
    settings: NotRequired[dict[str, int | str | None]]  # the environment's settings, by name
    map: NotRequired[MapInfo]
