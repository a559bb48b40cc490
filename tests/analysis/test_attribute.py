"""The attribution study (attnlab.analysis.attribute): a causal trace's prefix is the
trace of the prefix, and the study's parts are the ablation and eviction measures."""

from __future__ import annotations

import pytest
import torch

from attnlab.analysis.ablation import ablate_keys
from attnlab.analysis.attribute import attribute, prefix
from attnlab.analysis.eviction import evict
from attnlab.analysis.eviction_loss import eviction_losses
from attnlab.tracing import trace
from random_models import random_llama

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def model():
    return random_llama(vocab=61, positions=256, eager=False)


@pytest.fixture(scope="module")
def ids():
    return torch.randint(1, 61, (120,), generator=torch.Generator().manual_seed(4)).tolist()


def test_a_prefix_of_a_causal_trace_is_the_trace_of_the_prefix(model, ids):
    whole = trace(model, ids)
    cut = prefix(whole, 50)
    fresh = trace(model, ids[:50])
    assert cut.seq_len == cut.key_len == 50 and cut.token_ids == ids[:50]
    for layer in range(2):
        for head in range(4):
            assert torch.allclose(cut.head_weights(layer, head),
                                  fresh.head_weights(layer, head), atol=1e-5)
    # the wrong variant — keeping the whole trace's keys — is not a trace of the prefix
    assert whole.weights_rows(0, 0, range(50)).shape[1] != 50
    with pytest.raises(ValueError, match="n must be an int"):
        prefix(whole, 0)


def test_the_study_reports_the_ablation_and_the_eviction(model, ids):
    whole = trace(model, ids)
    got = attribute(model, whole, ablation_tokens=40, max_keys=8, budgets=(0.25, 0.5))
    a = got["ablation"]
    assert a["tokens"] == 40 and a["targets"] == [30, 38] and a["keys"] == 8
    ref = ablate_keys(model, ids[:40], targets=list(range(30, 39)),
                      keys=[0, 5, 11, 16, 22, 27, 33, 38])
    assert a["clean_loss"] == pytest.approx(ref.clean, abs=1e-6)
    assert a["effect"]["max"] == pytest.approx(float(ref.effect.max()), abs=1e-6)
    assert set(a["rho"]) == {"weights", "last_layer", "rollout", "accumulated", "random"}
    assert a["best"] in a["rho"] and a["best"] != "random"
    e = got["eviction"]
    assert e["context"] == 120 - 15 and e["budgets"] == [0.25, 0.5]
    assert [r["policy"] for r in e["table"]] == ["h2o", "snapkv", "tova", "streaming",
                                                 "knorm", "random", "oracle"]
    lo = e["loss"]  # the same numbers as eviction_losses on the same eviction result
    ref_ev = evict(whole, (0.25, 0.5), context=105)
    ref_lo = eviction_losses(model, ids, ref_ev, policies=("h2o",), budgets=(0.25,))
    assert lo["delta"]["h2o"]["0.25"] == pytest.approx(ref_lo["delta"]["h2o"][0.25], abs=1e-6)
    assert "loss" not in attribute(model, whole, ablation=False, eviction_loss=False)["eviction"]
    none = attribute(model, whole, ablation=False, eviction=False)
    assert "ablation" not in none and "eviction" not in none
    with pytest.raises(ValueError, match="max_keys must be an int"):
        attribute(model, whole, max_keys=1)


def test_the_study_s_rollout_row_is_made_in_the_eviction_pass(model, ids):
    """``rollout_row``: the row's rollout from the eviction's pass, summed up as the row's
    first-token share and largest keys (those of ``rollout_rows``), a negative row counted
    from the end; refused without the eviction, or out of the trace, naming the argument."""
    whole = trace(model, ids)
    got = attribute(model, whole, ablation=False, eviction_loss=False, rollout_row=-1)
    r = got["rollout_row"]
    want = whole.rollout_rows([119])[0]
    assert r["row"] == 119 and r["seconds"] >= 0
    assert r["first_token_share"] == pytest.approx(float(want[0]), rel=1e-6)
    assert r["top"] == [int(i) for i in want.topk(5).indices]
    # a wrong row (the first instead of the last) is another rollout: not this one
    assert float(whole.rollout_rows([0])[0][0]) != pytest.approx(r["first_token_share"])
    assert "rollout_row" not in attribute(model, whole, ablation=False, eviction_loss=False)
    with pytest.raises(ValueError, match="rollout_row is made in the eviction's pass"):
        attribute(model, whole, ablation=False, eviction=False, rollout_row=3)
    with pytest.raises(ValueError, match="rollout_row must be an int"):
        attribute(model, whole, ablation=False, rollout_row=120)
