"""The report's attribution part on the real SmolLM2 (a short text), and its verdict's
both ways: a sound measurement passes, an oracle that loses more than a policy fails."""

from __future__ import annotations

import copy

import pytest

from attnlab.report import attribution as part
from attnlab.report.long_text import long_text


@pytest.fixture(scope="module")
def doc():
    from attnlab.models import load

    m = load("smollm2", progress=False)
    ids = m.tokenizer(long_text().text)["input_ids"][:160]
    d = part.measure(m, ids, log=lambda _m: None, ablation_tokens=48, max_keys=8)
    d["text"] = {"en": "the course", "zh": "课程"}
    return d


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
