"""The outcome of one experiment: a claim, the number measured for it, and the verdict."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, TypedDict

__all__ = ["Result", "Check", "Control", "RELATIONS", "ORIGINS", "VERDICTS", "CHECK_ID",
           "fmt_num", "relation_holds", "control_margin", "ControlJSON", "CheckJSON",
           "ResultJSON"]


def fmt_num(x: float) -> str:
    """A number for humans: 3 significant digits, exponent for tiny/huge values."""
    x = float(x)
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    if abs(x) < 1e-3 or abs(x) >= 1e5:
        return f"{x:.2e}"
    return f"{x:.3g}"


#: How ``measured`` is compared with ``expected``:
#: ``"=="``  |measured − expected| <= tolerance
#: ``"<="``  measured <= expected + tolerance
#: ``">="``  measured >= expected − tolerance
RELATIONS = ("==", "<=", ">=")

#: Whose claim an experiment tests: one of the two articles', or attnlab's own extension.
ORIGINS = ("article", "attnlab")

#: What the numbers say of a claim (:attr:`Result.verdict`): ``"holds by construction"``
#: is a claim that holds as an identity or a count that no input can break
#: (:attr:`Result.by_construction`), shown but not evidence.
VERDICTS = ("holds", "does not hold", "holds by construction")

#: What a check id looks like: a short lowercase slug (letters, digits, ``-`` and ``.``).
CHECK_ID = re.compile(r"[a-z0-9]+(?:[-.][a-z0-9]+)*")


def relation_holds(measured: float, relation: str, expected: float, tolerance: float) -> bool:
    """``measured`` stands in ``relation`` (:data:`RELATIONS`) to ``expected`` within
    ``tolerance``; a NaN or infinite ``measured`` never does.

    >>> relation_holds(1.02, "==", 1.0, 0.05), relation_holds(2.0, "<=", 1.0, 0.5)
    (True, False)
    """
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    m, e, t = float(measured), float(expected), float(tolerance)
    if not math.isfinite(m):
        return False
    if relation == "==":
        return abs(m - e) <= t
    return m <= e + t if relation == "<=" else m >= e - t


class ControlJSON(TypedDict):
    """A :class:`Control` as JSON."""

    what: str
    what_zh: str
    measured: float | None  # None where not finite
    holds: bool


class CheckJSON(TypedDict):
    """A :class:`Check` as JSON (numbers that are not finite are None)."""

    id: str
    name: str
    value: float | None
    expected: str
    passed: bool
    support: bool
    control: ControlJSON | None
    control_value: float | None  # the control's measurement
    control_margin: float | None
    by_construction: bool


class ResultJSON(TypedDict):
    """A :class:`Result` as JSON (:meth:`Result.to_json`; numbers that are not finite are
    None)."""

    name: str
    claim: str
    claim_zh: str
    quantity: str
    measured: float | None
    expected: float | None
    relation: str
    tolerance: float | None
    holds: bool
    verdict: str
    expect_holds: bool
    expect_why: str
    finding: bool
    origin: str
    passed: bool
    checks: list[CheckJSON]
    control: ControlJSON | None
    control_value: float | None  # the control's measurement
    control_margin: float | None
    by_construction: str
    by_construction_zh: str
    timed: bool
    seconds: float


@dataclass(frozen=True)
class Control:
    """The same measurement on something that should *not* show the property: random or
    untrained weights, shuffled positions or labels, a null model, or — for an identity —
    the deliberately wrong variant the check must catch.

    ``holds`` is whether the control meets the very test the measurement meets; it is
    computed by whoever applies the test (:class:`Result` for the headline, the
    ``check_*`` helpers for a check), never written by hand. A claim's measurement is
    evidence only when its control fails: a threshold that a random model also meets
    tests nothing.

    >>> Control("random W^O", "随机 W^O", 0.5).to_json()["holds"]
    False
    """

    what: str
    what_zh: str
    measured: float
    holds: bool = False

    def __post_init__(self) -> None:
        for f in ("what", "what_zh"):
            if not isinstance(getattr(self, f), str) or not getattr(self, f).strip():
                raise ValueError(f"a control needs {f} (what it is, in "
                                 f"{'Chinese' if f == 'what_zh' else 'English'}), got "
                                 f"{getattr(self, f)!r}")
        object.__setattr__(self, "measured", float(self.measured))
        object.__setattr__(self, "holds", bool(self.holds))

    def judged(self, holds: bool) -> Control:
        """This control with ``holds`` set by the test it was put to."""
        return Control(self.what, self.what_zh, self.measured, bool(holds))

    def to_json(self) -> ControlJSON:
        m = self.measured
        return {"what": self.what, "what_zh": self.what_zh,
                "measured": m if math.isfinite(m) else None, "holds": self.holds}


def control_margin(measured: float, control: float, relation: str,
                   expected: float | None = None) -> float:
    """How far the measurement beats its control on the test they share, in the test's
    units: ``measured − control`` for ``">="``, ``control − measured`` for ``"<="``, and
    ``|control − expected| − |measured − expected|`` for ``"=="`` (without ``expected``:
    ``|measured − control|``). Positive: the measurement is on the passing side of its
    control; NaN when either is not finite.

    >>> control_margin(45.0, 60.0, ">="), control_margin(0.0, 0.2, "<=")
    (-15.0, 0.2)
    """
    m, c = float(measured), float(control)
    if not (math.isfinite(m) and math.isfinite(c)):
        return math.nan
    if relation == ">=":
        return m - c
    if relation == "<=":
        return c - m
    if expected is None:
        return abs(m - c)
    return abs(c - expected) - abs(m - expected)


def _relation_of(expected_text: str) -> str:
    """The relation a check's ``expected`` text states (``"≥ 4"``: ``">="``)."""
    t = expected_text.strip()
    return ">=" if t.startswith("≥") else "<=" if t.startswith("≤") else "=="


@dataclass(frozen=True)
class Check:
    """A secondary check behind the headline number.

    A claim check (the default) is part of the claim: all must pass for the claim to hold.
    A ``support`` check is attnlab's own expectation whatever the verdict (its code is
    right, its corrected version runs, its measurement is sound): failing one is a defect
    even when the claim is expected not to hold.

    ``control``: the same check on a control (:class:`Control`); the ``check_*`` helpers
    make ``passed`` require the value to pass *and* the control to fail.
    ``by_construction``: the check is an identity or a count that holds whatever the input
    (it shows the code is right, not that the claim is a fact about models).

    ``id`` is the check's stable name for code (:data:`CHECK_ID`, unique within its
    experiment, written explicitly where the check is made): the claim inventory's evidence
    names checks by id, so the human-readable ``name`` can be reworded freely. A check
    without an id cannot be named as evidence.
    """

    name: str
    value: float
    expected: str  # as a human reads it, e.g. "≤ 1e-12"
    passed: bool
    support: bool = False
    id: str = ""
    control: Control | None = None
    by_construction: bool = False

    @property
    def control_margin(self) -> float | None:
        """How far :attr:`value` beats its control (:func:`control_margin`, the relation
        read from :attr:`expected`); None without a control."""
        if self.control is None:
            return None
        return control_margin(self.value, self.control.measured, _relation_of(self.expected))

    def __post_init__(self) -> None:
        if self.control is not None and not isinstance(self.control, Control):
            raise TypeError(f"check {self.name!r}: control must be a Control, got "
                            f"{type(self.control).__name__}")
        if self.id and not CHECK_ID.fullmatch(self.id):
            raise ValueError(f"check {self.name!r}: id must be a lowercase slug (letters, "
                             f"digits, '-' and '.'), got {self.id!r}")


@dataclass
class Result:
    """What one experiment measured, what that says of its claim, and whether attnlab
    expected it.

    ``holds`` is computed: the headline ``measured`` must stand in ``relation`` to
    ``expected`` within ``tolerance``, and every claim check must pass — the numbers
    support the claim as stated.

    Each experiment states *in advance* the verdict it expects (``expect_holds``) and why
    (``expect_why``). ``passed`` is ``holds == expect_holds`` with every ``support`` check
    passing (:class:`Check`): a claim of the articles that
    the numbers refute, when the experiment said so beforehand, is a *finding*
    (``finding``; shown, not a failure); a verdict other than the one expected is a
    defect (``passed`` False), whichever way it goes. A deliberately wrong variant of the
    code must therefore flip ``holds`` and fail.

    ``origin`` is ``"article"`` for the articles' claims and ``"attnlab"`` for attnlab's
    own additions (RoPE, linear attention, the no-NaN rule ...).
    ``control`` (:class:`Control`): the headline measurement on something that should not
    show the property; its ``holds`` is computed here with the same relation, and
    :attr:`holds` requires the measurement to pass *and* the control to fail.
    ``by_construction`` / ``by_construction_zh``: why the claim holds whatever the input
    (an identity, a count equal by construction); the verdict is then
    ``"holds by construction"`` and the control is the wrong variant that shows the check
    can fail.
    ``timed``: the verdict depends on the machine's timing (a speed comparison). No verdict
    can be stated in advance for a machine not yet seen, so ``passed`` asks only that every
    support check and every check that holds by construction pass: a run where the timing
    does not reach the threshold is that run's result (a finding), not a defect.

    ``table`` is ``(headers, rows)``: the small set of numbers behind the claim.
    ``figure`` is a ``matplotlib.figure.Figure`` (or None when plotting was skipped).
    """

    name: str
    claim: str
    claim_zh: str
    quantity: str  # what ``measured`` is, in one phrase
    quantity_zh: str
    measured: float
    expected: float
    tolerance: float
    relation: str = "=="
    checks: list[Check] = field(default_factory=list)
    table: tuple[list[str], list[list[Any]]] | None = None
    figure: Any = None
    caption: str = ""
    caption_zh: str = ""
    seconds: float = 0.0
    expect_holds: bool = True
    expect_why: str = ""
    expect_why_zh: str = ""
    origin: str = "article"
    control: Control | None = None
    by_construction: str = ""
    by_construction_zh: str = ""
    timed: bool = False
    holds: bool = field(init=False)

    def __post_init__(self) -> None:
        if self.relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {self.relation!r}")
        if self.origin not in ORIGINS:
            raise ValueError(f"origin must be one of {ORIGINS}, got {self.origin!r}")
        if not self.expect_holds and not self.expect_why:
            raise ValueError(f"{self.name}: an experiment that expects its claim not to "
                             "hold must say why (expect_why)")
        ids = [c.id for c in self.checks if c.id]
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        if repeated:
            raise ValueError(f"{self.name}: check ids must be unique within an experiment, "
                             f"repeated: {repeated}")
        if bool(self.by_construction) != bool(self.by_construction_zh):
            raise ValueError(f"{self.name}: by_construction needs both by_construction and "
                             "by_construction_zh")
        self.measured = float(self.measured)
        if self.control is not None:
            if not isinstance(self.control, Control):
                raise TypeError(f"{self.name}: control must be a Control, got "
                                f"{type(self.control).__name__}")
            self.control = self.control.judged(relation_holds(
                self.control.measured, self.relation, self.expected, self.tolerance))
        self.holds = bool(self.headline_holds
                          and (self.control is None or not self.control.holds)
                          and all(c.passed for c in self.checks if not c.support))

    @property
    def headline_holds(self) -> bool:
        """The headline relation alone: ``measured`` against ``expected`` within
        ``tolerance`` (:attr:`holds` also requires every claim check)."""
        return relation_holds(self.measured, self.relation, self.expected, self.tolerance)

    def check(self, id_: str) -> Check:
        """The check whose id is ``id_``; ValueError naming this result's check ids
        otherwise."""
        for c in self.checks:
            if c.id and c.id == id_:
                return c
        ids = ", ".join(c.id for c in self.checks if c.id) or "none"
        raise ValueError(f"{self.name}: no check has the id {id_!r} (its check ids: {ids})")

    @property
    def control_margin(self) -> float | None:
        """How far the headline measurement beats its control on the headline's test
        (:func:`control_margin`); None without a control."""
        if self.control is None:
            return None
        return control_margin(self.measured, self.control.measured, self.relation,
                              self.expected)

    @property
    def passed(self) -> bool:
        """The verdict is the one the experiment expected and every support check passed
        (False: a defect to fix). A :attr:`timed` result expects no verdict: every support
        check and every check that holds by construction must pass, whatever the timing."""
        if self.timed:
            return all(c.passed for c in self.checks if c.support or c.by_construction)
        return self.holds == self.expect_holds and all(c.passed for c in self.checks
                                                       if c.support)

    @property
    def verdict(self) -> str:
        """What the numbers say of the claim: ``"holds"``, ``"does not hold"`` or ``"holds by
        construction"`` (:attr:`by_construction`)."""
        if not self.holds:
            return VERDICTS[1]
        return VERDICTS[2] if self.by_construction else VERDICTS[0]

    @property
    def finding(self) -> bool:
        """The claim does not hold, as the experiment expected: a result, not a defect."""
        return not self.holds and self.passed

    @property
    def expected_text(self) -> str:
        """``expected`` with its relation and tolerance, e.g. ``"1 ± 0.03"`` or ``"≤ 0.8"``."""
        e, t = fmt_num(self.expected), fmt_num(self.tolerance)
        if self.relation == "==":
            return f"{e} ± {t}" if self.tolerance else f"= {e}"
        sign = "≤" if self.relation == "<=" else "≥"
        return f"{sign} {e}" + (f" (slack {t})" if self.tolerance else "")

    def to_json(self) -> ResultJSON:
        """Plain JSON (no NaN): name, claim, claim_zh, measured, expected, tolerance, holds,
        verdict, expect_holds, finding, origin, passed…"""

        def num(x: float | None) -> float | None:
            return float(x) if x is not None and math.isfinite(float(x)) else None

        return {
            "name": self.name,
            "claim": self.claim,
            "claim_zh": self.claim_zh,
            "quantity": self.quantity,
            "measured": num(self.measured),
            "expected": num(self.expected),
            "relation": self.relation,
            "tolerance": num(self.tolerance),
            "holds": self.holds,
            "verdict": self.verdict,
            "expect_holds": self.expect_holds,
            "expect_why": self.expect_why,
            "finding": self.finding,
            "origin": self.origin,
            "passed": self.passed,
            "checks": [
                {"id": c.id, "name": c.name, "value": num(c.value),
                 "expected": c.expected, "passed": c.passed, "support": c.support,
                 "control": c.control.to_json() if c.control else None,
                 "control_value": num(c.control.measured) if c.control else None,
                 "control_margin": num(c.control_margin),
                 "by_construction": c.by_construction}
                for c in self.checks
            ],
            "control": self.control.to_json() if self.control else None,
            "control_value": num(self.control.measured) if self.control else None,
            "control_margin": num(self.control_margin),
            "by_construction": self.by_construction,
            "by_construction_zh": self.by_construction_zh,
            "timed": self.timed,
            "seconds": round(self.seconds, 3),
        }
