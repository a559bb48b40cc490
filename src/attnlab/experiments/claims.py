"""The claim inventory's verdicts: what the experiments' results say of every claim, code
listing and recommendation of the two articles.

Article ``"000"`` is 《拆解 Transformer：从几何与线性代数视角看透注意力机制的数学本质》
(the geometry and linear algebra of attention, with the ``PureSelfAttention`` listing);
article ``"001"`` is 《3Blue1Brown Transformer 入门指南：从数学原理到 PyTorch 实现》 (positional
encoding, the ``MultiHeadAttention`` listing and practical tips).

The inventory itself is data (:mod:`.claims_data`: :data:`CLAIMS` and :data:`EXTENSIONS`,
records of :mod:`.claim_types`, re-exported here). Each :class:`Claim` quotes the article
verbatim (``quote_zh``), restates it in English and in Chinese as attnlab tests it, and
names its :class:`Evidence`: an experiment of :data:`attnlab.experiments.EXPERIMENTS`, and
which part of its :class:`~attnlab.experiments.Result` decides the claim (the whole result,
its headline number only, or checks named by their stable id, :attr:`Check.id
<attnlab.experiments.Check.id>`). An experiment can decide several claims, and one result can
support one claim and refute another (``article-code`` runs both listings;
``multihead-cost`` counts costs and measures subspaces). A claim that no computation can
decide says why instead (``not_testable_en`` / ``not_testable_zh``).

An item of kind ``"error"`` is one of the articles' own mistakes (a wrong heading, label or
statement), quoted verbatim, with the check that shows what is true instead as evidence
against the quote: its verdict ``"does not hold"`` says the numbers confirm the error.

The verdicts are computed from results, never written by hand (:func:`verdicts`):

* ``"not testable"`` when the claim says why no experiment can decide it;
* ``"not decided here"`` when a control passes the test its measurement is put to (the
  null shows the property too, so the numbers do not tell, for or against; never
  ``"holds"``), when the claim is an existence claim (``existence``) and its
  evidence finds no witness (the search made is stated: ``search_en`` / ``search_zh``),
  or when its refutation is a null result (``null_result``: the effect did not appear)
  without a positive control that passes (``positive_control``: a variant where the
  effect does appear). Neither is ever ``"does not hold"``;
* ``"depends on the reading"`` when the claim has other readings (:class:`Reading`) and the
  readings' verdicts differ (both measurements are shown);
* ``"does not hold"`` when some evidence fails (an experiment part that does not hold, or
  one marked ``against`` that holds: its claim is the opposite of the article's); the
  claim states the reading it refutes (``reading_en`` / ``reading_zh``);
* ``"holds by construction"`` when every measurement is an identity or a count that no
  input can break (:attr:`Result.by_construction <attnlab.experiments.Result.by_construction>`):
  the code is right, but it is not evidence about models;
* ``"holds under stated conditions"`` when the evidence holds and the claim holds only
  under conditions (``conditions_en`` / ``conditions_zh``: e.g. the variance argument
  assumes independent unit-variance components);
* ``"holds"`` otherwise.

Every measurement carries its controls (:class:`~attnlab.experiments.Control`): the same
number on something that should not show the property; a part holds only when its
controls fail.

:data:`EXTENSIONS` lists what attnlab measures beyond the articles (its ``origin="attnlab"``
experiments and attnlab's own rules inside article experiments), so that every registered
experiment either decides a claim of the articles or is an extension. The inventory as
Markdown (``attnlab claims --markdown``, ``docs/claims.md``) is
:mod:`attnlab.report.claims_markdown`.

>>> len({c.id for c in CLAIMS}) == len(CLAIMS) >= 50
True
>>> sorted({c.kind for c in CLAIMS})
['claim', 'code', 'error', 'recommendation']
>>> claim("000-softmax-one-hot").covered_by
('softmax-saturation',)
>>> check_ids("masking")
('masked-weight-zero', 'printed-check-blind-to-fill', 'dead-row-zero', 'dead-row-finite')
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from ._result import Control, ControlJSON, Result, fmt_num
from .claim_types import (
    ARTICLES,
    HEADLINE,
    KIND_ZH,
    KINDS,
    Claim,
    Evidence,
    Extension,
    Reading,
    evidence,
)
from .claims_data import CLAIMS, EXTENSIONS

__all__ = ["ARTICLES", "KINDS", "KIND_ZH", "CLAIM_VERDICTS", "HEADLINE", "JSON_KEYS", "ZH",
           "Evidence", "Reading", "Claim", "Extension", "Measurement", "ReadingVerdict",
           "ClaimVerdict", "ExtensionVerdict",
           "CLAIMS", "EXTENSIONS", "claim", "check_ids", "counts", "kind_counts",
           "covering_experiments", "evidence", "measure", "verdicts", "extension_verdicts",
           "to_json", "MeasurementJSON", "ReadingVerdictJSON", "ClaimVerdictJSON",
           "ExtensionVerdictJSON", "InventoryJSON"]

#: What the numbers say of an item.
CLAIM_VERDICTS = ("holds", "holds under stated conditions", "holds by construction",
                  "depends on the reading", "does not hold", "not decided here",
                  "not testable")
#: The keys of :meth:`ClaimVerdict.to_json`, in order.
JSON_KEYS = ("id", "article", "kind", "quote_zh", "claim_en", "claim_zh", "covered_by",
             "conditions_en", "conditions_zh", "not_testable_en", "not_testable_zh", "reading",
             "reading_zh", "readings", "verdict", "verdict_zh", "measured",
             "positive_control", "existence", "search_en", "search_zh")

#: The inventory's own words in Chinese: verdicts and kinds.
ZH: dict[str, str] = {
    "holds": "成立",
    "holds under stated conditions": "在所述条件下成立",
    "holds by construction": "按构造成立",
    "depends on the reading": "取决于如何理解",
    "does not hold": "不成立",
    "not decided here": "此处未能判定",
    "not testable": "无法检验",
    **KIND_ZH,
}


class MeasuredNumber(TypedDict):
    """One number of a :class:`Measurement`, as JSON."""

    quantity: str
    measured: float | None  # None where not finite
    expected_text: str


class MeasuredControl(ControlJSON):
    """A control of a :class:`Measurement`, as JSON, with the measurement's margin over it
    (None where not finite)."""

    margin: float | None


class MeasurementJSON(TypedDict):
    """A :class:`Measurement` as JSON."""

    experiment: str
    part: str  # "all" for the whole result
    against: bool
    numbers: list[MeasuredNumber]
    holds: bool
    supports: bool
    controls: list[MeasuredControl]
    by_construction: bool


class ReadingVerdictJSON(TypedDict):
    """A :class:`ReadingVerdict` as JSON."""

    reading: str
    reading_zh: str
    verdict: str  # "holds" or "does not hold"
    measured: list[MeasurementJSON]


class ClaimVerdictJSON(TypedDict):
    """A :class:`ClaimVerdict` as JSON: the keys :data:`JSON_KEYS`, in that order."""

    id: str
    article: str
    kind: str
    quote_zh: str
    claim_en: str
    claim_zh: str
    covered_by: list[str]  # the experiments that decide it
    conditions_en: str
    conditions_zh: str
    not_testable_en: str
    not_testable_zh: str
    reading: str  # the reading it refutes (the claim's reading_en)
    reading_zh: str
    readings: list[ReadingVerdictJSON]  # its other readings
    verdict: str  # one of CLAIM_VERDICTS
    verdict_zh: str
    measured: list[MeasurementJSON]
    positive_control: list[MeasurementJSON]
    existence: bool
    search_en: str
    search_zh: str


class ExtensionVerdictJSON(TypedDict):
    """An :class:`ExtensionVerdict` as JSON."""

    experiment: str
    what_en: str
    what_zh: str
    origin: str
    verdict: str  # "holds" or "does not hold"
    verdict_zh: str
    measured: MeasurementJSON
    passed: bool


class InventoryJSON(TypedDict):
    """The whole inventory's verdicts as JSON (:func:`to_json`)."""

    claims: list[ClaimVerdictJSON]
    extensions: list[ExtensionVerdictJSON]
    counts: dict[str, int]  # by verdict, every verdict listed


@dataclass(frozen=True)
class Measurement:
    """The numbers one :class:`Evidence` read from its result.

    ``holds``: the selected part holds (before ``against``); ``supports``: it speaks for
    the article's claim. ``passed``: the experiment gave the verdict it expected (False is
    a defect of attnlab, not a finding).
    """

    experiment: str
    part: str
    against: bool
    quantities: tuple[str, ...]
    quantities_zh: tuple[str | None, ...]
    values: tuple[float, ...]
    expected: tuple[str, ...]
    holds: bool
    passed: bool
    controls: tuple[Control, ...] = ()
    by_construction: bool = False
    #: how far the measurement beats each control on the test they share (aligned with
    #: ``controls``; :func:`~attnlab.experiments.control_margin`), NaN where not finite
    margins: tuple[float, ...] = ()

    @property
    def supports(self) -> bool:
        return self.holds != self.against

    @property
    def controlled(self) -> bool:
        """The part has a control and :attr:`tells` (every control fails; for an identity
        that holds by construction, the control is the wrong variant)."""
        return bool(self.controls) and self.tells

    @property
    def tells(self) -> bool:
        """No control passes the measurement's test too: whichever way the measurement
        goes, it tells something (a measurement that its null also passes does not)."""
        return not any(c.holds for c in self.controls)

    def margin(self, c: Control) -> float | None:
        """The margin of the measurement over its control ``c`` (None if unknown)."""
        for other, m in zip(self.controls, self.margins):
            if other is c:
                return m
        return None

    def text(self) -> str:
        """One line: ``quantity = value (expected …)`` for each number, then each control
        (:meth:`control_text`), ``; ``-joined."""
        return "; ".join([f"{q}: {fmt_num(v)} (expected {e})"
                          for q, v, e in zip(self.quantities, self.values, self.expected)]
                         + [self.control_text(c) for c in self.controls])

    def control_text(self, c: Control, zh: bool = False) -> str:
        """One control in words: what it is, its value, whether it fails the test, as it
        should, and the measurement's margin over it.

        >>> m = Measurement("toy", "", False, ("q",), (None,), (1.0,), ("≥ 0.5",), True,
        ...                 True, (Control("random", "随机", 0.2),), margins=(0.8,))
        >>> m.control_text(m.controls[0])
        'control (random): 0.2, fails (margin 0.8)'
        >>> m.control_text(m.controls[0], zh=True)
        '对照（随机）：0.2，不满足，符合预期（余量 0.8）'
        """
        margin = self.margin(c)
        shown = fmt_num(margin) if margin is not None and math.isfinite(margin) else None
        if zh:
            return (f"对照（{c.what_zh}）：{fmt_num(c.measured)}，"
                    f"{'同样满足，该测量无法区分' if c.holds else '不满足，符合预期'}"
                    + (f"（余量 {shown}）" if shown is not None else ""))
        return (f"control ({c.what}): {fmt_num(c.measured)}, "
                f"{'passes too: the measurement does not tell' if c.holds else 'fails'}"
                + (f" (margin {shown})" if shown is not None else ""))

    def to_json(self) -> MeasurementJSON:
        return {
            "experiment": self.experiment,
            "part": self.part or "all",
            "against": self.against,
            "numbers": [{"quantity": q, "measured": v if math.isfinite(v) else None,
                         "expected_text": e}
                        for q, v, e in zip(self.quantities, self.values, self.expected)],
            "holds": self.holds,
            "supports": self.supports,
            "controls": [{**c.to_json(), "margin": _finite(self.margin(c))}
                         for c in self.controls],
            "by_construction": self.by_construction,
        }


def measure(ev: Evidence, result: Result) -> Measurement:
    """What ``result`` says for the evidence ``ev``: the numbers and whether they support.

    The whole result reads :attr:`Result.holds`; :data:`HEADLINE` reads
    :attr:`Result.headline_holds`; check ids read those checks (:meth:`Result.check`: an id
    no check of the result has is a ValueError naming the experiment's ids).
    """
    if not isinstance(result, Result):
        raise TypeError(f"result must be an attnlab.experiments.Result, got "
                        f"{type(result).__name__}")
    if result.name != ev.experiment:
        raise ValueError(f"evidence for {ev.experiment!r} given the result of "
                         f"{result.name!r}")
    if ev.part in ("", HEADLINE):
        holds = result.holds if ev.part == "" else (
            result.headline_holds and not (result.control and result.control.holds))
        m: list[tuple[str, str | None, float, str, bool]] = [
            (result.quantity, result.quantity_zh, result.measured, result.expected_text, holds)]
        pairs = [(result.control, result.control_margin)] + (
            [(c.control, c.control_margin) for c in result.checks if not c.support]
            if ev.part == "" else [])
        by_construction = bool(result.by_construction)
    else:
        try:
            picked = [result.check(i) for i in ev.check_ids]
        except ValueError as exc:
            raise ValueError(f"evidence {ev.experiment}:{ev.part}: {exc}") from None
        m = [(c.name, None, c.value, c.expected, c.passed) for c in picked]
        pairs = [(c.control, c.control_margin) for c in picked]
        by_construction = all(c.by_construction for c in picked)
    kept = [(c, margin) for c, margin in pairs if c is not None]
    return Measurement(
        experiment=ev.experiment, part=ev.part, against=ev.against,
        quantities=tuple(x[0] for x in m), quantities_zh=tuple(x[1] for x in m),
        values=tuple(float(x[2]) for x in m), expected=tuple(x[3] for x in m),
        holds=all(x[4] for x in m), passed=result.passed,
        controls=tuple(c for c, _ in kept),
        margins=tuple(math.nan if margin is None else float(margin) for _, margin in kept),
        by_construction=by_construction)


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def claim(id_: str) -> Claim:
    """The inventory item ``id_``; ValueError naming the valid ids otherwise."""
    for c in CLAIMS:
        if c.id == id_:
            return c
    raise ValueError(f"unknown claim id {id_!r}; valid ids: {', '.join(c.id for c in CLAIMS)}")


def covering_experiments(claims: Iterable[Claim] = CLAIMS) -> list[str]:
    """The experiments that decide ``claims``, each once, in first-use order."""
    return list(dict.fromkeys(name for c in claims for name in c.covered_by))


def check_ids(experiment: str) -> tuple[str, ...]:
    """The ids of ``experiment``'s checks that the inventory (claims, their other readings
    and extensions) reads, each once, in first-use order: the checks whose ids must not
    change."""
    parts = [e for c in CLAIMS for e in c.evidence] + [
        e for c in CLAIMS for r in c.readings for e in r.evidence] + [
        e for c in CLAIMS for e in c.positive_control] + [
        Evidence(x.experiment, x.part) for x in EXTENSIONS]
    return tuple(dict.fromkeys(i for e in parts if e.experiment == experiment
                               for i in e.check_ids))


@dataclass(frozen=True)
class ReadingVerdict:
    """What the numbers say of one other reading of a claim (:class:`Reading`)."""

    reading: Reading
    measurements: tuple[Measurement, ...]

    @property
    def holds(self) -> bool:
        return all(m.supports for m in self.measurements)

    def to_json(self) -> ReadingVerdictJSON:
        return {"reading": self.reading.en, "reading_zh": self.reading.zh,
                "verdict": "holds" if self.holds else "does not hold",
                "measured": [m.to_json() for m in self.measurements]}


@dataclass(frozen=True)
class ClaimVerdict:
    """One claim and what its experiments' numbers say of it (``readings``: the verdict
    of each of its other readings)."""

    claim: Claim
    verdict: str
    measurements: tuple[Measurement, ...]
    readings: tuple[ReadingVerdict, ...] = ()
    positive_controls: tuple[Measurement, ...] = ()

    @property
    def verdict_zh(self) -> str:
        return ZH[self.verdict]

    @property
    def defect(self) -> bool:
        """Some covering experiment gave a verdict other than the one it expected."""
        return any(not m.passed for m in self.measurements + self.positive_controls
                   + tuple(m for r in self.readings for m in r.measurements))

    def to_json(self) -> ClaimVerdictJSON:
        """Plain JSON with the keys :data:`JSON_KEYS`."""
        c = self.claim
        return {
            "id": c.id, "article": c.article, "kind": c.kind, "quote_zh": c.quote_zh,
            "claim_en": c.claim_en, "claim_zh": c.claim_zh, "covered_by": list(c.covered_by),
            "conditions_en": c.conditions_en, "conditions_zh": c.conditions_zh,
            "not_testable_en": c.not_testable_en, "not_testable_zh": c.not_testable_zh,
            "reading": c.reading_en, "reading_zh": c.reading_zh,
            "readings": [r.to_json() for r in self.readings],
            "verdict": self.verdict, "verdict_zh": self.verdict_zh,
            "measured": [m.to_json() for m in self.measurements],
            "positive_control": [m.to_json() for m in self.positive_controls],
            "existence": c.existence, "search_en": c.search_en, "search_zh": c.search_zh,
        }


@dataclass(frozen=True)
class ExtensionVerdict:
    """One of attnlab's extensions and what its experiment measured for it."""

    extension: Extension
    measurement: Measurement
    origin: str  # the experiment's Result.origin

    @property
    def verdict(self) -> str:
        return "holds" if self.measurement.holds else "does not hold"

    def to_json(self) -> ExtensionVerdictJSON:
        e = self.extension
        return {"experiment": e.experiment, "what_en": e.what_en, "what_zh": e.what_zh,
                "origin": self.origin, "verdict": self.verdict, "verdict_zh": ZH[self.verdict],
                "measured": self.measurement.to_json(), "passed": self.measurement.passed}


def _by_name(results: Iterable[Result]) -> dict[str, Result]:
    out: dict[str, Result] = {}
    for r in results:
        if not isinstance(r, Result):
            raise TypeError(f"results must be attnlab.experiments.Result objects, got "
                            f"{type(r).__name__}")
        out[r.name] = r
    return out


def verdicts(results: Iterable[Result], claims: Sequence[Claim] | None = None
             ) -> list[ClaimVerdict]:
    """The verdict of every claim (default: all of :data:`CLAIMS`) from ``results``.

    ``results`` must include every experiment that covers a testable claim among ``claims``
    (ValueError names the missing ones). Rules, in order: not testable → ``"not testable"``;
    some measurement's control passes its test too (the null shows the property: the
    measurement does not tell, whichever way it goes) → ``"not decided here"``; an existence
    claim without a witness (its evidence does not hold) → ``"not decided here"``; a null
    result (``null_result``) whose evidence does not support the claim and that has no
    positive control, or one that does not hold → ``"not decided here"``;
    the readings' verdicts differ → ``"depends on the reading"``; some evidence does not
    support the claim → ``"does not hold"``; every measurement holds by construction →
    ``"holds by construction"``; the claim has conditions → ``"holds under stated
    conditions"``; else ``"holds"``.
    """
    by_name = _by_name(results)
    chosen = CLAIMS if claims is None else tuple(claims)
    missing = sorted({n for c in chosen for n in c.covered_by} - set(by_name))
    if missing:
        raise ValueError(f"results lack the experiment(s) {missing} that decide claims "
                         f"{[c.id for c in chosen if set(c.covered_by) & set(missing)]}")
    out = []
    for c in chosen:
        ms = tuple(measure(e, by_name[e.experiment]) for e in c.evidence)
        rs = tuple(ReadingVerdict(r, tuple(measure(e, by_name[e.experiment])
                                           for e in r.evidence)) for r in c.readings)
        pcs = tuple(measure(e, by_name[e.experiment]) for e in c.positive_control)
        plain = all(m.supports for m in ms)
        if not c.testable:
            verdict = "not testable"
        elif not all(m.tells for m in ms + pcs + tuple(m for r in rs for m in r.measurements)):
            verdict = "not decided here"  # a null that passes too: the numbers do not tell
        elif c.existence and not plain:
            verdict = "not decided here"
        elif c.null_result and not plain and not (pcs and all(m.holds for m in pcs)):
            verdict = "not decided here"
        elif any(r.holds != plain for r in rs):
            verdict = "depends on the reading"
        elif not plain:
            verdict = "does not hold"
        elif ms and all(m.by_construction for m in ms):
            verdict = "holds by construction"
        elif c.conditions_en:
            verdict = "holds under stated conditions"
        else:
            verdict = "holds"
        out.append(ClaimVerdict(c, verdict, ms, rs, pcs))
    return out


def extension_verdicts(results: Iterable[Result]) -> list[ExtensionVerdict]:
    """Each of :data:`EXTENSIONS` whose experiment is among ``results``."""
    by_name = _by_name(results)
    return [ExtensionVerdict(e, measure(Evidence(e.experiment, e.part), by_name[e.experiment]),
                             by_name[e.experiment].origin)
            for e in EXTENSIONS if e.experiment in by_name]


def to_json(claim_verdicts: Sequence[ClaimVerdict],
            extensions: Sequence[ExtensionVerdict] = ()) -> InventoryJSON:
    """``{"claims": [...], "extensions": [...], "counts": {verdict: n}}``."""
    return {
        "claims": [v.to_json() for v in claim_verdicts],
        "extensions": [e.to_json() for e in extensions],
        "counts": dict(counts(claim_verdicts)),
    }


def counts(claim_verdicts: Sequence[ClaimVerdict]) -> Mapping[str, int]:
    """How many claims got each verdict (every verdict listed, in :data:`CLAIM_VERDICTS`
    order)."""
    return {name: sum(v.verdict == name for v in claim_verdicts) for name in CLAIM_VERDICTS}


def kind_counts(claim_verdicts: Sequence[ClaimVerdict]) -> Mapping[str, int]:
    """How many items are of each kind (every kind listed, in :data:`KINDS` order)."""
    return {kind: sum(v.claim.kind == kind for v in claim_verdicts) for kind in KINDS}
