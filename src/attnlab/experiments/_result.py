"""The outcome of one experiment: a claim, the number measured for it, and the verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Result", "Check", "RELATIONS", "fmt_num"]


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


@dataclass(frozen=True)
class Check:
    """A secondary check behind the headline number (all must hold for the claim to pass)."""

    name: str
    value: float
    expected: str  # as a human reads it, e.g. "≤ 1e-12"
    passed: bool


@dataclass
class Result:
    """What one experiment measured, and whether the theory held.

    ``passed`` is computed: the headline ``measured`` must stand in ``relation`` to
    ``expected`` within ``tolerance``, and every secondary check must pass.
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
    passed: bool = field(init=False)

    def __post_init__(self) -> None:
        if self.relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {self.relation!r}")
        self.measured = float(self.measured)
        m, e, t = self.measured, float(self.expected), float(self.tolerance)
        if not math.isfinite(m):
            head = False
        elif self.relation == "==":
            head = abs(m - e) <= t
        elif self.relation == "<=":
            head = m <= e + t
        else:
            head = m >= e - t
        self.passed = bool(head and all(c.passed for c in self.checks))

    @property
    def expected_text(self) -> str:
        """``expected`` with its relation and tolerance, e.g. ``"1 ± 0.03"`` or ``"≤ 0.8"``."""
        e, t = fmt_num(self.expected), fmt_num(self.tolerance)
        if self.relation == "==":
            return f"{e} ± {t}" if self.tolerance else f"= {e}"
        sign = "≤" if self.relation == "<=" else "≥"
        return f"{sign} {e}" + (f" (slack {t})" if self.tolerance else "")

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (no NaN): name, claim, claim_zh, measured, expected, tolerance, passed…"""

        def num(x: float) -> float | None:
            return float(x) if math.isfinite(float(x)) else None

        return {
            "name": self.name,
            "claim": self.claim,
            "claim_zh": self.claim_zh,
            "quantity": self.quantity,
            "measured": num(self.measured),
            "expected": num(self.expected),
            "relation": self.relation,
            "tolerance": num(self.tolerance),
            "passed": self.passed,
            "checks": [
                {"name": c.name, "value": num(c.value), "expected": c.expected,
                 "passed": c.passed}
                for c in self.checks
            ],
            "seconds": round(self.seconds, 3),
        }
