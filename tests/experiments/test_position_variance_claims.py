"""The variance, saturation, position-encoding, kernel and init-scale experiments: each gives
the verdict it expects, its wrong variants fail, and everything it shows has Chinese."""

from __future__ import annotations

import math

import pytest
import torch
from experiment_sizes import FAST

from attnlab import i18n
from attnlab.core import positional
from attnlab.core.functional import scaled_dot_product_attention
from attnlab.experiments import EXPERIMENTS, run
from attnlab.experiments import init_scale as ins
from attnlab.experiments import learned_kernel as lk
from attnlab.experiments import pe_frequency_roles as pfr
from attnlab.experiments import qk_variance as qkv
from attnlab.experiments import relative_position_learned as rpl
from attnlab.experiments.registry import catalog

#: Test sizes (still large enough for every verdict to come out as expected).
SIZES: dict[str, dict] = {
    "qk-variance": dict(pairs=2**18, dims=(16, 64, 256)),
    "softmax-saturation": dict(rows=128),
    "pe-relative-position": {},
    "dot-product-geometry": {},
    "kernel-smoothing": {},
    "init-scale": {},
    "pe-frequency-roles": dict(samples=500),
    "relative-position-learned": {},
    "learned-kernel": {},
}
NAMES = list(SIZES)


@pytest.fixture(scope="module")
def results(fast_results):
    """name -> Result at test sizes (conftest.FAST), figures drawn."""
    assert all(FAST.get(name, {}) == SIZES[name] for name in NAMES)
    return {name: fast_results[name] for name in NAMES}


def test_new_experiments_are_registered():
    for name in ("pe-frequency-roles", "relative-position-learned", "learned-kernel"):
        assert name in EXPERIMENTS


@pytest.mark.parametrize("name", NAMES)
def test_verdict_is_the_expected_one(results, name):
    r = results[name]
    failed = [(c.name, c.value, c.expected) for c in r.checks if not c.passed]
    assert r.passed, f"{name}: {r.measured} vs {r.expected_text}; failed {failed}"
    assert r.holds
    assert r.figure is not None and r.table[1]


def _shown(r) -> list[str]:
    """Every English string the report shows for ``r`` beside claim/quantity/caption."""
    headers, rows = r.table
    cells = [x for row in rows for x in row if isinstance(x, str)]
    return [c.name for c in r.checks] + list(headers) + cells + i18n.figure_texts(r.figure)


@pytest.mark.parametrize("name", NAMES)
def test_everything_shown_has_chinese(results, name):
    r = results[name]
    cat = catalog(name)
    texts = _shown(r)
    assert i18n.missing(texts, cat) == []
    for t in texts:  # templates fill (a wrong number of {} raises)
        i18n.translate(t, cat)
    assert r.claim_zh and r.quantity_zh and r.caption_zh
    assert r.expect_holds or r.expect_why_zh


@pytest.mark.parametrize("name", NAMES)
def test_catalog_templates_keep_their_placeholders(name):
    import importlib

    zh = importlib.import_module(EXPERIMENTS[name]).ZH
    assert zh and all(k.count("{}") == v.count("{}") for k, v in zh.items())


# -- qk-variance --------------------------------------------------------------------------------


def test_qk_variance_states_the_condition_and_the_mean_shift(results):
    assert "independent with mean 0 and variance 1" in qkv.CLAIM
    rows = results["qk-variance"].table[1]
    for label, d_k, _, _, mean, var, theory, ratio, scaled in rows:
        assert var / theory == pytest.approx(ratio)
        if not label.startswith("independent"):
            continue
        mu = float(label.split("μ = ")[1].split(",")[0])
        assert theory == pytest.approx(d_k * (1 + 2 * mu**2))
        assert ratio == pytest.approx(1, abs=0.1)
        assert scaled == pytest.approx(1 + 2 * mu**2, rel=0.1)  # scaling leaves 1 + 2μ²
        assert abs(mean - d_k * mu**2) < 0.05 * d_k


def test_qk_variance_reports_minilm(results):
    rows = [r for r in results["qk-variance"].table[1] if r[0].startswith("MiniLM")]
    if not rows:
        pytest.skip("MiniLM is not available here")
    assert len(rows) == 6 and all(math.isfinite(x) for r in rows for x in r[1:])


@pytest.mark.parametrize("wrong, failing", [
    (dict(scale_fn=lambda d: 1.0), "headline"),
    (dict(variance_theory=lambda d, mu: d), "relative error of Var"),
])
def test_qk_variance_wrong_variants_fail(wrong, failing):
    r = run("qk-variance", plot=False, pairs=2**16, dims=(16, 64), real_model=None, **wrong)
    assert not r.passed
    if failing != "headline":
        bad = [c.name for c in r.checks if not c.passed]
        assert bad and all(failing in n for n in bad)


def test_qk_variance_rejects_unknown_model():
    with pytest.raises(ValueError, match="real_model"):
        qkv.run(real_model="gpt-5", plot=False)


# -- softmax-saturation --------------------------------------------------------------------------


def test_softmax_saturation_gradient_vanishes_at_the_scores_and_grows_at_wq(results):
    r = results["softmax-saturation"]
    assert "the gradient reaching W_q does grow" in r.claim and "梯度爆炸问题" in r.claim_zh
    checks = {c.name: c for c in r.checks}
    assert checks["unscaled Jacobian norm at largest d_k / at smallest"].passed  # inventory
    vanish = [c for n, c in checks.items() if n.startswith("unscaled gradient vanishes")]
    assert len(vanish) == 2 and all(c.value < 1e-3 for c in vanish)
    headers, rows = r.table
    raw, scaled = (headers.index("batch ‖∂L/∂W_q‖ (raw)"),
                   headers.index("batch ‖∂L/∂W_q‖ (scaled)"))
    assert rows[-1][raw] > 5 * rows[-1][scaled]  # what grows: the unsaturated rows' share
    assert "the gradient to the scores vanishes, it does not explode" in r.caption
    # the explosion, measured: unscaled the W_q gradient grows, scaled (the control) is flat
    grow, flat = r.check("wq-gradient-grows-unscaled"), r.check("wq-gradient-flat-scaled")
    assert grow.passed and grow.value >= 4 and flat.passed and flat.value <= 2
    rel_raw, rel_scaled = (headers.index("RMS row ‖∂L/∂W_q‖ / ‖W_q‖ (raw)"),
                           headers.index("RMS row ‖∂L/∂W_q‖ / ‖W_q‖ (scaled)"))
    assert max(row[rel_raw] for row in rows) >= 4 * rows[0][rel_raw]
    assert max(row[rel_scaled] for row in rows) <= 2 * min(row[rel_scaled] for row in rows)


def test_softmax_saturation_explosion_checks_can_fail():
    """Not scaling the control makes it explode too; too small a d_k range shows no growth."""
    r = run("softmax-saturation", plot=False, scale_fn=lambda d: 1.0, rows=64,
            dims=(4, 64, 1024))
    assert not r.check("wq-gradient-flat-scaled").passed and not r.holds
    r = run("softmax-saturation", plot=False, rows=64, dims=(4, 8))
    assert not r.check("wq-gradient-grows-unscaled").passed and not r.holds


def test_softmax_saturation_gradient_checks_can_fail():
    """At small d_k nothing has saturated yet: the vanishing checks must not pass."""
    r = run("softmax-saturation", plot=False, rows=64, dims=(4, 8))
    bad = [c.name for c in r.checks if not c.passed]
    assert any(n.startswith("unscaled gradient vanishes") for n in bad)


# -- wording of pe-relative-position and dot-product-geometry -----------------------------------


def test_pe_wavelength_wording_and_largest_wavelength(results):
    r = results["pe-relative-position"]
    assert "2π·10000^(1−2/d)" in r.claim and "to 10000·2π" not in r.claim
    d = 128
    largest = float(2 * math.pi / positional.frequencies(d)[-1])
    assert largest == pytest.approx(2 * math.pi * 10000 ** (1 - 2 / d), rel=1e-12)
    assert largest < 10000 * 2 * math.pi * 0.9  # clearly short of 10000·2π at d = 128
    assert f"{largest:.1f}" in r.caption
    assert all(c.passed for c in r.checks if "wavelength" in c.name)


def test_dot_product_geometry_says_what_the_vectors_are(results):
    r = results["dot-product-geometry"]
    assert "real" not in r.claim and "randomly initialised" in r.claim
    assert "真实" not in r.claim_zh


# -- pe-frequency-roles ---------------------------------------------------------------------------


def test_pe_frequency_roles_bands(results):
    rows = results["pe-frequency-roles"].table[1]
    steps = [r[3] for r in rows]
    near = [r[4] for r in rows]
    assert steps == sorted(steps, reverse=True)  # slower pairs move less per position
    assert near == sorted(near)  # and resolve neighbours worse
    assert rows[0][5] > 0.9 and rows[-1][5] < 0.1  # aliasing at Δ = 1000 vs decoded


@pytest.mark.parametrize("table_fn", [pfr.shuffled_table, pfr.constant_table])
def test_pe_frequency_roles_wrong_tables_fail(table_fn):
    r = pfr.run(table_fn=table_fn, samples=300, plot=False)
    assert not r.passed


def test_pe_frequency_roles_rejects_short_tables():
    with pytest.raises(ValueError, match="n_positions"):
        pfr.run(n_positions=500, far=1000, plot=False)


# -- relative-position-learned ------------------------------------------------------------------


def test_relative_position_learned_numbers(results):
    rows = {(r[0], r[1]): r for r in results["relative-position-learned"].table[1]}
    sin = rows["sinusoidal table", "positions only"]
    learned = rows["learned nn.Embedding", "positions only"]
    assert min(sin[2:]) >= 0.95
    assert learned[2] >= 0.95 and max(learned[3:5]) < 0.5  # learns, does not generalise


@pytest.mark.parametrize("positions", ["learned", "shuffled"])
def test_relative_position_learned_wrong_positions_fail(positions):
    r = rpl.run(positions=positions, mixed=False, plot=False)
    assert not r.passed and r.measured < 0.5


def test_relative_position_learned_rejects_bad_arguments():
    with pytest.raises(ValueError, match="positions"):
        rpl.OffsetModel(rpl.OffsetConfig(), "alibi")
    with pytest.raises(ValueError, match="config"):
        rpl.run(config=rpl.OffsetConfig(window=128), plot=False)


# -- learned-kernel --------------------------------------------------------------------------------


def test_attention_is_nadaraya_watson_with_the_dot_kernel():
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(5, 8, generator=g, dtype=torch.float64), torch.randn(9, 8, generator=g,
                                                                            dtype=torch.float64)
    v = torch.randn(9, 2, generator=g, dtype=torch.float64)
    nw = lk.nadaraya_watson(lk.dot_kernel(q, k), v)
    assert torch.allclose(scaled_dot_product_attention(q, k, v), nw, atol=1e-14, rtol=0)


def test_learned_kernel_numbers(results):
    r = results["learned-kernel"]
    mse = {row[0]: row[2] for row in r.table[1]}
    gauss = mse["Gaussian on raw inputs, best σ (leave-one-out)"]
    assert mse["exp(q·k/√d), W_Q, W_K learned"] < 0.5 * gauss
    assert mse["exp(q·k/√d), W_Q, W_K untrained"] > gauss  # learning, not the form, helps


@pytest.mark.parametrize("wrong, failing", [
    (dict(kernel_fn=lambda q, k: torch.exp(q @ k.T)), "NW estimate"),
    (dict(steps=0), "headline"),
])
def test_learned_kernel_wrong_variants_fail(wrong, failing):
    r = lk.run(plot=False, **wrong)
    assert not r.passed
    bad = [c.name for c in r.checks if not c.passed]
    if failing == "headline":
        assert r.measured > 0.5 and not bad
    else:
        assert bad and all(failing in n for n in bad)


def test_learned_kernel_rejects_spreads_without_equal_norms():
    with pytest.raises(ValueError, match="spreads"):
        lk.run(spreads=(0.1, 0.5), plot=False)


# -- init-scale ----------------------------------------------------------------------------------


def test_init_scale_helps_where_saturated_and_not_in_the_control(results):
    r = results["init-scale"]
    assert r.holds and r.expect_holds and not r.finding
    assert r.measured <= 0.9  # saturated regime: the tip's run ends with the lower loss
    assert r.check("saturated-default-entropy").value < 0.5  # the default init saturates
    assert r.check("control-default-entropy").value > 0.9  # the control does not
    # the control (same d_k, scaled): nothing to cure, the tip gains nothing (both schemes)
    assert r.check("control-no-gain").value >= 0.9 and r.control.measured >= 0.9
    assert r.check("control-no-gain-uniform").value >= 0.9
    assert r.check("saturated-final-loss-ratio").value <= 0.9
    rows = {row[0]: row for row in r.table[1]}
    assert rows[0.02][5] > 0.9999 and rows[10.0][5] < 0.5  # xavier_normal_ at init
    assert rows[10.0][8] > 2.5  # a saturating init stays near chance log 16
    assert rows[1.0][9] < 0.5 and rows[0.02][9] > 0.9999  # saturated regime at init
    assert rows[0.02][11] < rows[1.0][11]  # saturated regime: final losses


def test_init_scale_where_nothing_is_saturated_flips_the_verdict():
    """The tip tested only where the default init is not saturated: refuted, a defect."""
    r = run("init-scale", plot=False, saturating_gain=None,
            saturated_config=ins.InitTrainConfig())
    assert not r.check("saturated-default-entropy").passed
    assert not r.holds and not r.passed and r.measured > 1.0


def test_init_scale_against_a_saturating_baseline_is_a_wrong_variant():
    """Comparing the tip with gain 10 instead of the default makes it look helpful, in the
    control too: the control passes, so the result does not hold."""
    r = run("init-scale", plot=False, baseline_gain=10.0, saturating_gain=None,
            train_config=ins.InitTrainConfig(heads=1, steps=150))
    assert r.headline_holds and r.control.holds and not r.holds and not r.passed
    assert not r.check("control-no-gain").passed  # the tip "helps" in the control


def test_init_scale_rejects_a_tip_gain_outside_gains():
    with pytest.raises(ValueError, match="tip_gain"):
        run("init-scale", plot=False, tip_gain=0.05)
