"""The controls of qk-variance, softmax-saturation, scaling-training and init-scale: each
control measures what it should (the law it must not fit, the flat run, the second seed,
the untrained model, the unsaturated regime), a wrong variant that makes the control pass
makes the result not hold, and the claims these experiments decide rest on them."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from attnlab.experiments import init_scale as ins
from attnlab.experiments import qk_variance as qkv
from attnlab.experiments import run
from attnlab.experiments import scaling_training as st
from attnlab.experiments.claims import claim, verdicts

NAMES = ("qk-variance", "softmax-saturation", "scaling-training", "init-scale")
HOLDING = ("holds", "holds under stated conditions", "holds by construction")


@pytest.fixture(scope="module")
def results(fast_results):
    return {name: fast_results[name] for name in NAMES}


def _mine():
    from attnlab.experiments.claims import CLAIMS

    return [c for c in CLAIMS if c.covered_by and set(c.covered_by) <= set(NAMES)]


# -- qk-variance ---------------------------------------------------------------------------


def test_correlated_components_break_the_variance_law_as_computed():
    g = torch.Generator().manual_seed(1)
    d, rho = 64, 0.1
    q, k = qkv.correlated_within(g, 8, 256, d, 0.0, rho)
    assert float(q.mean()) == pytest.approx(0, abs=0.05) and float(q.var()) == pytest.approx(
        1, rel=0.05)
    var = float((q @ k.transpose(-2, -1)).pow(2).mean())
    assert var / d == pytest.approx(1 + (d - 1) * rho**2, rel=0.15)  # 1.63, not 1
    mu = 0.5
    q, k = qkv.correlated_within(g, 8, 256, d, mu, rho)
    s = q @ k.transpose(-2, -1)
    theory = d * (1 + 2 * mu**2) + d * (d - 1) * (rho**2 + 2 * mu**2 * rho)
    assert float((s - d * mu**2).pow(2).mean()) == pytest.approx(theory, rel=0.2)


def test_q_and_k_correlated_with_each_other_shift_the_mean_as_computed():
    g = torch.Generator().manual_seed(2)
    d, rho = 32, 0.1
    for mu in (0.0, 0.5):
        q, k = qkv.correlated_across(g, 64, 128, d, mu, rho)
        assert float(q.var()) == pytest.approx(1, rel=0.05)
        mean = float((q @ k.transpose(-2, -1)).mean())
        assert mean == pytest.approx(d * (mu**2 + rho), rel=0.15)  # not d μ²


def test_qk_variance_controls_fail_the_tests_the_measurements_pass(results):
    r = results["qk-variance"]
    assert r.holds and r.control is not None and not r.control.holds
    assert r.control.measured > 10 * r.tolerance  # the law misses by far without independence
    for id_ in ("centred-mean", "mu-0.5-mean", "mu-0.5-variance", "mu-1-mean", "mu-1-variance"):
        c = r.check(id_)
        assert c.passed and c.control is not None and not c.control.holds, id_
    rows = [row for row in r.table[1] if row[0].startswith("control")]
    assert len(rows) == 3  # one per d_k of the test sizes
    ratios = [row[7] for row in rows]
    assert ratios == sorted(ratios) and ratios[-1] > 2  # Var/d_k grows as 1 + (d_k − 1)ρ²


def test_qk_variance_a_control_that_meets_the_condition_makes_it_not_hold():
    """ρ → 0: the "control" is independent again, fits every law, and so shows nothing."""
    r = run("qk-variance", plot=False, pairs=2**16, dims=(16, 64), real_model=None,
            mean_blocks=8, control_rho=1e-9)
    assert r.headline_holds and r.control.holds and not r.holds and not r.passed
    for id_ in ("centred-mean", "mu-0.5-mean", "mu-0.5-variance"):
        assert r.check(id_).control.holds and not r.check(id_).passed, id_
    with pytest.raises(ValueError, match="control_rho"):
        run("qk-variance", plot=False, control_rho=0.0)


# -- softmax-saturation ----------------------------------------------------------------------


def test_softmax_saturation_controls_are_the_scaled_rows(results):
    r = results["softmax-saturation"]
    assert r.holds and not r.control.holds
    assert 1 / 16 < r.control.measured < 0.5  # scaled rows at the largest d_k: not one-hot
    c = {x.id: x for x in r.checks}
    assert all(x.control is not None and not x.control.holds for x in r.checks)
    assert c["unscaled-entropy"].control.measured > 0.5 * math.log(16)
    assert 0.5 < c["gradient-vanishes-scores"].control.measured < 2  # scaled: flat
    assert c["wq-gradient-grows-unscaled"].control.measured < 2  # scaled: no growth ...
    assert c["wq-gradient-flat-scaled"].control.measured > 4  # ... unscaled: not flat
    assert c["no-explosion"].control.measured > 2  # the W_q gradient's largest row does grow
    assert c["saturated-share"].control.measured > 0.5  # most rows are saturated
    for id_ in ("jacobian-formula", "wq-gradient-formula"):
        assert c[id_].by_construction and c[id_].control.measured > 1e-6


def test_softmax_saturation_unscaled_control_saturates_too_and_the_result_fails():
    r = run("softmax-saturation", plot=False, rows=64, dims=(4, 64, 1024),
            scale_fn=lambda d: 1.0)
    assert r.control.holds and not r.holds
    assert r.check("unscaled-entropy").control.holds
    assert r.check("wq-gradient-grows-unscaled").control.holds


# -- scaling-training --------------------------------------------------------------------------


class _Fixed(torch.nn.Module):
    """A stand-in head whose query puts all its weight on one chosen pair."""

    def __init__(self, pick) -> None:
        super().__init__()
        self.pick = pick

    def weights(self, tokens):
        w = torch.zeros(tokens.shape[0], tokens.shape[1])
        w[torch.arange(tokens.shape[0]), self.pick(tokens)] = 1.0
        return w


def test_match_weight_reads_the_matching_pair_both_ways():
    c = st.RecallConfig(batch=32)
    tokens, target = st.recall_batch(c, torch.Generator().manual_seed(0))
    key_of = tokens[:, :-1] // c.n_keys
    matching = (key_of == tokens[:, -1:] - c.n_keys**2).int().argmax(-1)
    assert torch.equal(tokens[torch.arange(32), matching] % c.n_keys, target)
    assert st.match_weight(_Fixed(lambda t: matching), tokens, c.n_keys) == 1.0
    assert st.match_weight(_Fixed(lambda t: (matching + 1) % c.n_pairs), tokens, c.n_keys) == 0.0
    assert st.match_weight(_Fixed(lambda t: torch.full_like(matching, c.n_pairs)), tokens,
                           c.n_keys) == 0.0  # the query attending to itself is no lookup


def test_scaling_training_controls(results):
    r = results["scaling-training"]
    assert r.holds and not r.control.holds
    assert r.control.measured > st.RATIO and r.measured < st.RATIO  # seed + 1 vs the scale
    match = r.check("match-attention")
    assert match.passed and match.value >= st.MATCH
    slots = st.RecallConfig().n_pairs + 1
    assert match.control.measured == pytest.approx(1 / slots, abs=0.03)  # untrained: chance
    assert r.check("scaled-vs-chance").control.measured == pytest.approx(1, abs=0.05)


def test_scaling_training_wrong_controls_flip_the_verdict(monkeypatch):
    """The control run unscaled (it differs by the scale, not by chance) and the trained
    model read as its own untrained control: both controls pass, the result does not hold."""
    real = st.train_and_probe

    def wrong(c, scale, seed, probe=1024):
        out = real(c, 1.0 if seed == 1 else scale, seed, probe)
        return replace(out, initial_match=out.probe_match, initial_loss=out.probe_loss)

    monkeypatch.setattr(st, "train_and_probe", wrong)
    r = st.run(seed=0, plot=False, probe=256)
    assert r.headline_holds and r.control.holds and not r.holds and not r.passed
    assert r.check("match-attention").control.holds and not r.check("match-attention").passed
    assert r.check("scaled-vs-chance").control.holds


# -- init-scale ------------------------------------------------------------------------------


def test_init_scale_controls(results):
    r = results["init-scale"]
    assert r.holds and not r.control.holds
    assert r.control.measured >= 0.9  # with the scale (same d_k) the tip gains nothing
    for c in r.checks:
        assert c.control is not None and not c.control.holds, c.id
    assert r.check("normal-near-uniform").control.measured < 0.999  # the default: not uniform
    assert r.check("entropy-monotone").by_construction
    assert r.check("entropy-monotone").control.measured > 0.1  # gains reversed: it rises
    assert r.check("saturated-default-entropy").control.measured > 0.9
    assert ins.UNSATURATED.head_dim == ins.SATURATED.head_dim and ins.UNSATURATED.scaled


def test_init_scale_control_in_the_saturated_regime_flips_the_verdict():
    """The saturated regime as its own control: the tip "helps" there too, which shows
    nothing about saturation."""
    r = run("init-scale", plot=False, saturating_gain=None, train_config=ins.SATURATED)
    assert r.headline_holds and r.control.holds and not r.holds and not r.passed
    assert not r.check("saturated-final-loss-ratio").passed
    with pytest.raises(ValueError, match="baseline_gain"):
        run("init-scale", plot=False, baseline_gain=2.0)


# -- the claims ------------------------------------------------------------------------------


def test_every_holding_claim_of_these_experiments_rests_on_failing_controls(results):
    vs = verdicts(list(results.values()), _mine())
    assert {v.claim.id for v in vs} >= {"000-qk-mean-zero", "000-qkv-retrieval",
                                         "001-gradient-explosion", "001-small-init"}
    for v in vs:
        if v.verdict in HOLDING:
            assert all(m.controlled for m in v.measurements), v.claim.id
        else:
            assert v.claim.reading_en and v.claim.reading_zh, v.claim.id


def test_qkv_retrieval_is_decided_by_the_attention_on_the_matching_pair(results):
    c = claim("000-qkv-retrieval")
    assert [e.check_ids for e in c.evidence] == [("match-attention", "scaled-vs-chance")]
    (v,) = verdicts([results["scaling-training"]], [c])
    assert v.verdict == "holds" and v.measurements[0].controlled


def test_gradient_explosion_depends_on_the_reading_both_ways(results):
    c = claim("001-gradient-explosion")
    (v,) = verdicts([results["softmax-saturation"]], [c])
    assert v.verdict == "depends on the reading"
    assert all(m.supports and m.controlled for m in v.measurements)  # the W_q gradient grows
    (other,) = v.readings
    assert not other.holds  # the gradient through the saturated rows does not
    # where d_k is too small for any growth the plain reading's measurement fails
    small = run("softmax-saturation", plot=False, rows=64, dims=(4, 8))
    (v_small,) = verdicts([small], [c])
    assert not any(m.supports for m in v_small.measurements)


def test_small_init_follows_the_saturated_regime(results):
    c = claim("001-small-init")
    (v,) = verdicts([results["init-scale"]], [c])
    assert v.verdict == "holds under stated conditions"
    assert all(m.controlled for m in v.measurements)
    # the "saturated" regime made the unsaturated control: whatever the tip does there, the
    # measurement and its control are the same run, and the claim is not shown
    short = replace(ins.UNSATURATED, steps=60)
    flat = run("init-scale", plot=False, saturating_gain=None, saturated_config=short,
               train_config=short)
    assert verdicts([flat], [c])[0].verdict == "does not hold"
