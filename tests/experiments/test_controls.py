"""Every verdict survives a hostile reader: each experiment measures a control beside its
claim, a "holds" needs its controls to fail, and a refutation names the reading it refutes."""

from __future__ import annotations

import json

import pytest
from experiment_sizes import result_of

from attnlab.experiments import EXPERIMENTS, Control, Result
from attnlab.experiments._common import check_ge, check_le
from attnlab.experiments.claims import (
    CLAIMS,
    Claim,
    Reading,
    evidence,
    verdicts,
)

HOLDING = ("holds", "holds under stated conditions", "holds by construction")


def _result(name="toy", measured=1.0, control=None, checks=(), by_construction=""):
    return Result(name, "c", "论断", "q", "量", measured, expected=0.5, tolerance=0.0,
                  relation=">=", control=control, checks=list(checks),
                  by_construction=by_construction,
                  by_construction_zh="恒等式" if by_construction else "")


# --- the rules, on results made by hand -------------------------------------------------

def test_a_control_that_also_passes_means_the_claim_is_not_shown():
    assert _result(control=Control("random", "随机", 0.1)).holds
    r = _result(control=Control("random", "随机", 0.9))
    assert r.control.holds and not r.holds and r.verdict == "does not hold"
    # the control is judged by the result's own relation, whatever it was built with
    assert not _result(control=Control("random", "随机", 0.1, holds=True)).control.holds


def test_check_helpers_put_the_control_to_the_same_test():
    good = check_ge("x", 1.0, 0.5, id="x", control=Control("null", "零模型", 0.2))
    bad = check_ge("x", 1.0, 0.5, id="x", control=Control("null", "零模型", 0.7))
    assert good.passed and not good.control.holds
    assert not bad.passed and bad.control.holds
    assert check_le("y", 0.1, 0.5, id="y", control=Control("n", "零", 0.9)).passed
    with pytest.raises(TypeError, match="control must be a Control"):
        check_ge("x", 1.0, 0.5, id="x", control=0.2)
    with pytest.raises(ValueError, match="what_zh"):
        Control("random", "", 0.1)


def test_by_construction_is_a_verdict_of_its_own():
    r = _result(control=Control("wrong variant", "错误变体", 0.0), by_construction="identity")
    assert r.holds and r.verdict == "holds by construction"
    with pytest.raises(ValueError, match="by_construction_zh"):
        Result("toy", "c", "论断", "q", "量", 1.0, 0.5, 0.0, by_construction="x")


def test_json_gives_the_control():
    d = _result(control=Control("random W^O", "随机 W^O", 0.1)).to_json()
    assert d["control"] == {"what": "random W^O", "what_zh": "随机 W^O", "measured": 0.1,
                            "holds": False}
    assert _result().to_json()["control"] is None


def _claim(**kw) -> Claim:
    base = dict(id="x-1", article="000", kind="claim", quote_zh="引文", claim_en="claim",
                claim_zh="论断", evidence=evidence("toy:headline"))
    return Claim(**(base | kw))


def test_readings_that_disagree_give_depends_on_the_reading():
    plain = _result(control=Control("random", "随机", 0.1))
    other = _result("toy2", measured=0.2, control=Control("random", "随机", 0.1))
    c = _claim(reading_en="plain", reading_zh="字面",
               readings=(Reading("stronger", "更强的理解", evidence("toy2:headline")),))
    (v,) = verdicts([plain, other], [c])
    assert v.verdict == "depends on the reading"
    d = v.to_json()
    assert d["reading"] == "plain" and d["readings"][0]["verdict"] == "does not hold"
    agree = _claim(reading_en="plain", reading_zh="字面",
                   readings=(Reading("same", "同样", evidence("toy:headline")),))
    assert verdicts([plain], [agree])[0].verdict == "holds"
    with pytest.raises(ValueError, match="states its own"):
        _claim(readings=(Reading("same", "同样", evidence("toy:headline")),))


def test_identities_grade_as_holds_by_construction():
    r = _result(control=Control("wrong", "错误", 0.0), by_construction="identity")
    assert verdicts([r], [_claim()])[0].verdict == "holds by construction"
    assert verdicts([_result(control=Control("random", "随机", 0.0))],
                    [_claim()])[0].verdict == "holds"


def test_a_claim_whose_control_passes_too_is_not_decided_either_way():
    from attnlab.experiments import Check

    def result(control_holds: bool) -> Result:
        # a check made by hand, its control already judged: the verdict must read it
        ctl = Control("untrained", "未训练", 0.9, holds=control_holds)
        return _result(control=Control("random", "随机", 0.1),
                       checks=[Check("gap", 1.0, "≥ 0.5", True, id="gap", control=ctl)])

    for spec in ("toy:gap", "!toy:gap"):  # for the article, and against it (an error)
        c = _claim(evidence=evidence(spec), **({"kind": "error", "reading_en": "plain",
                                                "reading_zh": "字面"}
                                               if spec.startswith("!") else {}))
        told = verdicts([result(False)], [c])[0]
        assert told.verdict == ("does not hold" if spec.startswith("!") else "holds")
        (v,) = verdicts([result(True)], [c])
        assert v.verdict == "not decided here", spec
        assert not v.measurements[0].tells and told.measurements[0].tells


def test_each_control_states_the_margin_over_it():
    from attnlab.experiments import Check
    from attnlab.report.claims_markdown import markdown

    r = _result(control=Control("random", "随机", 0.1),
                checks=[Check("gap", 1.0, "≥ 0.5", True, id="gap",
                              control=Control("untrained", "未训练", 0.2))])
    (v,) = verdicts([r], [_claim(evidence=evidence("toy:gap"))])
    m = v.measurements[0]
    assert m.margins == (pytest.approx(0.8),)
    assert "(margin 0.8)" in m.text() and "余量 0.8" in m.control_text(m.controls[0], True)
    assert v.to_json()["measured"][0]["controls"][0]["margin"] == pytest.approx(0.8)
    page = markdown([v])
    assert "(margin 0.8)" in page and "余量 0.8" in page
    # a headline's margin is read in its own relation
    (h,) = verdicts([r], [_claim()])
    assert h.measurements[0].margins == (pytest.approx(0.9),)


# --- the inventory, on the real results ---------------------------------------------------

@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_every_experiment_measures_a_control(fast_results, name):
    r = result_of(fast_results, name)
    assert r.control is not None, f"{name}: no control beside its measurement"
    d = json.loads(json.dumps(r.to_json()))
    assert set(d["control"]) == {"what", "what_zh", "measured", "holds"}
    assert r.control.what.strip() and r.control.what_zh.strip()
    if r.holds:
        assert not r.control.holds


@pytest.fixture(scope="module")
def inventory(fast_results):
    from experiment_sizes import Unavailable

    results = [r for r in fast_results.values() if not isinstance(r, Unavailable)]
    have = {r.name for r in results}
    return [v for v in verdicts(results, [c for c in CLAIMS if set(c.covered_by) <= have])]


def test_every_holding_verdict_rests_on_controls_that_fail(inventory):
    bare = [f"{v.claim.id} ({m.experiment}:{m.part or 'all'})"
            for v in inventory if v.verdict in HOLDING
            for m in v.measurements if not m.controlled]
    assert not bare, ("these verdicts hold on evidence without a failing control: "
                      + ", ".join(bare))


def test_every_refutation_names_the_reading_it_refutes(inventory):
    unnamed = [v.claim.id for v in inventory
               if v.verdict in ("does not hold", "depends on the reading")
               and not v.claim.reading_en]
    assert not unnamed, f"refutations without a stated reading: {unnamed}"
