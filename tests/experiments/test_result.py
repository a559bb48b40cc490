"""A Result's verdict: what the numbers say (holds), what was expected (passed), findings."""

from __future__ import annotations

import pytest

from attnlab.experiments import Check, Result


def _result(measured: float, *, expect_holds: bool = True, checks=(), why: str = "pilot") -> Result:
    return Result("x", "claim", "论断", "q", "量", measured=measured, expected=1.0,
                  tolerance=0.1, relation=">=", checks=list(checks), expect_holds=expect_holds,
                  expect_why="" if expect_holds else why)


def test_a_claim_that_holds_as_expected_passes():
    r = _result(1.0)
    assert r.holds and r.passed and not r.finding and r.verdict == "holds"


def test_a_claim_refuted_against_expectation_is_a_defect():
    r = _result(0.5)
    assert not r.holds and not r.passed and not r.finding and r.verdict == "does not hold"


def test_a_claim_refuted_as_expected_is_a_finding():
    r = _result(0.5, expect_holds=False)
    assert not r.holds and r.passed and r.finding


def test_a_claim_that_holds_against_a_refutation_expected_is_a_defect():
    r = _result(1.0, expect_holds=False)
    assert r.holds and not r.passed and not r.finding


@pytest.mark.parametrize("expect_holds", [True, False])
def test_a_failed_support_check_is_a_defect_whatever_the_verdict(expect_holds):
    support = Check("attnlab's corrected code runs", 0.0, "≥ 1", False, support=True)
    r = _result(1.0 if expect_holds else 0.5, expect_holds=expect_holds, checks=[support])
    assert r.holds == expect_holds, "support checks do not decide the claim"
    assert not r.passed and not r.finding


def test_a_failed_claim_check_refutes_the_claim():
    r = _result(1.0, checks=[Check("part of the claim", 0.0, "≥ 1", False)])
    assert not r.holds and not r.passed


def _timed(measured: float, checks=()) -> Result:
    return Result("x", "claim", "论断", "q", "量", measured=measured, expected=1.0,
                  tolerance=0.0, relation=">=", checks=list(checks), timed=True)


@pytest.mark.parametrize("measured", [1.2, 0.9])
def test_a_timed_verdict_is_the_runs_either_way(measured):
    """A speed claim: the machine's timing decides, no verdict is expected in advance."""
    r = _timed(measured)
    assert r.holds == (measured >= 1.0) and r.passed and r.finding == (not r.holds)
    assert r.to_json()["timed"] is True


def test_a_timed_result_with_a_wrong_identity_is_a_defect():
    """Wrong on purpose: the two implementations timed do not compute the same thing."""
    same = Check("same output", 0.5, "≤ 1e-05", False, by_construction=True)
    assert not _timed(1.2, [same]).passed
    assert _timed(1.2, [Check("same output", 0.0, "≤ 1e-05", True, by_construction=True)]).passed


def test_a_refutation_expected_must_say_why():
    with pytest.raises(ValueError, match="expect_why"):
        _result(0.5, expect_holds=False, why="")


def test_origin_is_checked_and_serialised():
    with pytest.raises(ValueError, match="origin"):
        Result("x", "c", "论", "q", "量", 1.0, 1.0, 0.0, origin="blog")
    j = _result(0.5, expect_holds=False).to_json()
    assert (j["holds"], j["passed"], j["finding"], j["verdict"], j["origin"]) == (
        False, True, True, "does not hold", "article")
