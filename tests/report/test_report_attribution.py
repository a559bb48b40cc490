"""The report's attribution part on the real SmolLM2 (a short text), and its verdict's
both ways: a sound measurement passes, an oracle that loses more than a policy fails."""

from __future__ import annotations

import copy

import pytest

from attnlab.report import attribution as part
from attnlab.report.long_contexts import LongTextTrace
from attnlab.report.long_text import long_text


@pytest.fixture(scope="module")
def model_and_ids():
    from attnlab.models import load

    m = load("smollm2", progress=False)
    return m, m.tokenizer(long_text().text)["input_ids"][:160]


@pytest.fixture(scope="module")
def doc(model_and_ids):
    """The part's document, from a trace made before (as the long contexts part's is): the
    part reads it and traces nothing (a second trace would fail here)."""
    from attnlab.tracing import trace

    m, ids = model_and_ids
    made = LongTextTrace(trace(m, ids, merge_pieces=False), 1.25)
    said = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("attnlab.tracing.trace", _no_second_trace)
        d = part.measure(m, ids, log=said.append, ablation_tokens=48, max_keys=8,
                         traced=made)
    assert d["trace_s"] == 1.2 and d["tokens"] == 160
    assert any("reading the long contexts part's trace of these 160 tokens" in s for s in said)
    d["text"] = {"en": "the course", "zh": "课程"}
    return d


def _no_second_trace(*args, **kwargs):
    raise AssertionError("the part traced again the tokens it was given a trace of")


def test_a_trace_of_other_tokens_is_not_read(model_and_ids):
    from attnlab.tracing import trace

    m, ids = model_and_ids
    other = LongTextTrace(trace(m, ids[:20], merge_pieces=False), 9.0)
    t, seconds = part.trace_of(m, ids[:24], other, log=lambda _m: None)
    assert t.token_ids == ids[:24] and t is not other.trace and seconds != 9.0
    assert part.trace_of(m, ids[:20], other, log=lambda _m: None) is other


def test_the_part_shows_every_measure_in_both_languages(doc):
    html, passed, rows = part.render(doc)
    assert passed is True
    assert doc["tokens"] == 160 and doc["ablation"]["keys"] == 8
    assert {r["policy"] for r in doc["eviction"]["table"]} >= {"h2o", "random", "oracle"}
    assert set(doc["bands"]) == {"induction", "previous-token"}
    for role in doc["bands"].values():  # the top bands, largest share first
        shares = [abs(b["share"]) for b in role["bands"]]
        assert len(shares) == 4 and shares == sorted(shares, reverse=True)
    assert "先知" in html and "重要性" in html and "<figure>" in html
    lo = doc["eviction"]["loss"]  # the loss with only the kept keys, every policy and budget
    assert set(lo["delta"]) == {r["policy"] for r in doc["eviction"]["table"]}
    assert lo["delta"]["random"]["0.1"] > 0 and "淘汰让模型付出的代价" in html
    assert any(r[0] == "random baseline (ρ)" for r in rows)


def test_an_oracle_worse_than_a_policy_fails_the_part(doc):
    bad = copy.deepcopy(doc)
    oracle = next(r for r in bad["eviction"]["table"] if r["policy"] == "oracle")
    oracle["lost@0.1"] = 2.0
    assert part.render(bad)[1] is False
    nan = copy.deepcopy(doc)
    nan["ablation"]["clean_loss"] = float("nan")
    assert part.render(nan)[1] is False
    nan = copy.deepcopy(doc)
    nan["eviction"]["loss"]["delta"]["h2o"]["0.1"] = float("nan")
    assert part.render(nan)[1] is False


def _no_ablation_here(*args, **kwargs):
    raise AssertionError("the part ablated keys itself though the study was measured beside")


def test_a_study_measured_beside_is_read_in_its_place_and_none_is_measured_here(
        model_and_ids, doc):
    """``ablated`` (the report's work ahead): called once the rest is measured, its study
    put where attribute() puts its own, no key ablated here; None from it: measured here."""
    m, ids = model_and_ids
    study = copy.deepcopy(doc["ablation"])
    calls = []

    def beside():
        calls.append(1)
        return study

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("attnlab.analysis.attribute.ablate_keys", _no_ablation_here)
        got = part.measure(m, ids, ablation_tokens=48, max_keys=8, log=lambda _m: None,
                           ablated=beside)
    assert calls == [1] and got["ablation"] is study
    assert list(got)[:4] == list(doc)[:4] == ["model", "tokens", "trace_s", "ablation"]
    assert {k: v for k, v in got.items() if k not in ("trace_s", "eviction", "rollout_row")} \
        == {k: v for k, v in doc.items() if k not in ("trace_s", "eviction", "rollout_row",
                                                         "text")}
    here = part.measure(m, ids[:60], ablation_tokens=48, max_keys=8, log=lambda _m: None,
                        ablated=lambda: None)
    assert here["ablation"]["keys"] == 8 and list(here)[3] == "ablation"
    other = part.measure(m, ids[:40], ablation_tokens=48, max_keys=8, log=lambda _m: None,
                         ablated=lambda: study)  # a study of 48 tokens: not these 40
    assert other["ablation"]["tokens"] == 40 and other["ablation"] is not study


def test_the_study_ahead_is_the_one_measured_on_the_long_texts_first_tokens(monkeypatch):
    """ablation_ahead (run in a process of its own by the report) gives exactly the study
    made here on the same first tokens of the long text: SmolLM2, its own trace."""
    from attnlab.analysis.attribute import ablation_study
    from attnlab.models import load
    from attnlab.tracing import trace

    monkeypatch.setenv("ATTNLAB_REPORT_LONG_TOKENS", "24")
    ahead = part.ablation_ahead(3)
    m = load("smollm2", progress=False)
    ids = m.tokenizer(long_text().text)["input_ids"][:24]
    assert part.text_ids(m) == ids
    here = ablation_study(m, trace(m, ids, merge_pieces=False), ablation_tokens=512,
                          max_keys=128, seed=3)
    assert ahead is not None and ahead.pop("seconds") > 0 and here.pop("seconds") > 0
    assert ahead == here and ahead["tokens"] == 24 and ahead["keys"] == 23
