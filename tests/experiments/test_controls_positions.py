"""The controls of the position experiments (pe-relative-position, rope-relative,
pe-frequency-roles, relative-position-learned) and of the claims they decide: each control
has the value it should, fails the test its measurement passes, and a deliberately wrong
control (the thing measured as its own control) makes the result not hold."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.core import positional
from attnlab.experiments import pe_frequency_roles as pfr
from attnlab.experiments import pe_relative_position as pe
from attnlab.experiments import relative_position_learned as rpl
from attnlab.experiments import rope_relative as rope
from attnlab.experiments.claims import claim, extension_verdicts, verdicts

NAMES = ("pe-relative-position", "rope-relative", "pe-frequency-roles",
         "relative-position-learned")


@pytest.fixture(scope="module")
def results(fast_results):
    """name -> Result of the four experiments at test sizes (the session's runs)."""
    return {n: fast_results[n] for n in NAMES}


# -- pe-relative-position: identities, beside tables that must fail them ------------------------


def test_pe_relative_position_is_an_identity_whose_controls_fail(results):
    r = results["pe-relative-position"]
    assert r.verdict == "holds by construction" and r.passed
    assert r.by_construction and r.by_construction_zh
    assert all(c.by_construction and c.control is not None and not c.control.holds
               for c in r.checks)
    # a random table of the sinusoids' scale: even its best linear map misses by a lot
    assert r.control.measured > 1.0 and not r.control.holds
    assert r.check("dot-depends-on-offset").control.measured > 10.0


def test_best_linear_map_finds_the_shift_where_one_exists():
    """The control's least-squares fit is fair: on the sinusoidal table (rank deficient in
    its slow pairs) it finds a map as good as the rotation; on a random table it cannot."""
    assert pe.control_offsets(64) == [1, 2, 4, 8, 16, 32, 64]
    assert pe.control_offsets(5) == [1, 2, 4, 5]
    sinusoid = positional.sinusoidal_table(512, 128, dtype=torch.float64)
    assert pe.best_shift_error(sinusoid, 64) < 1e-9
    rand = pe.random_table(512, 128, seed=0)
    assert rand.pow(2).mean().item() == pytest.approx(0.5, rel=0.05)  # the sinusoids' scale
    assert pe.best_shift_error(rand, 64) > 1.0
    # a table that is a fixed linear image of the sinusoids shifts linearly too
    mixing = torch.randn(128, 128, generator=torch.Generator().manual_seed(0),
                         dtype=torch.float64)
    assert pe.best_shift_error(sinusoid @ mixing.T, 64) < 1e-8


def test_pe_table_as_its_own_control_makes_the_result_not_hold():
    r = pe.run(plot=False, max_offset=8, control_fn=positional.sinusoidal_table)
    assert r.headline_holds and r.control.holds and r.control.measured < 1e-9
    assert not r.holds and not r.passed
    assert not r.check("dot-depends-on-offset").passed  # its control passes the same test


def test_wavelength_controls_are_the_slips_of_the_exponent():
    d = 128
    wl = pe.table_wavelengths(positional.sinusoidal_table(2, d, dtype=torch.float64))
    assert torch.allclose(wl, 2 * math.pi / positional.frequencies(d), rtol=1e-13, atol=0)
    shifted = pe.table_wavelengths(pe.off_by_one_table(2, d))
    assert float(shifted[0]) == pytest.approx(2 * math.pi * 10000 ** (2 / d), rel=1e-12)
    assert float(shifted[-1]) == pytest.approx(2 * math.pi * 10000, rel=1e-12)  # the article's
    halved = pe.table_wavelengths(pe.half_exponent_table(2, d))
    ratios = halved[1:] / halved[:-1]
    assert torch.allclose(ratios, torch.full_like(ratios, 10000 ** (1 / d)), rtol=1e-10)
    r = pe.run(plot=False)
    assert r.check("first-wavelength").control.measured == pytest.approx(
        2 * math.pi * (10000 ** (2 / d) - 1), rel=1e-9)
    assert r.check("wavelength-ratio").control.measured == pytest.approx(
        1 - 10000 ** (-1 / d), rel=1e-6)
    assert r.check("last-wavelength").control.measured == pytest.approx(
        10000 ** (2 / d) - 1, rel=1e-9)


def test_pe_wavelengths_are_read_from_the_table():
    """A table with the exponent slip fails the wavelength checks (they read the table, not
    the formula)."""
    r = pe.run(plot=False, max_offset=8, table_fn=pe.half_exponent_table)
    assert not r.check("wavelength-ratio").passed and not r.check("last-wavelength").passed
    assert r.check("first-wavelength").passed  # i = 0 is still 2π


def test_the_sin_half_alone_has_no_linear_shift_and_the_whole_table_has_one(results):
    """Article 001 prints only PE(pos, 2i) = sin(...): with that half alone even the best
    linear map misses (at pos = 0 the sin half is 0, which no linear map sends to PE_k);
    the whole table, sin and cos interleaved, is the control that shifts exactly."""
    c = results["pe-relative-position"].check("sin-half-no-linear-shift")
    assert c.passed and c.support and c.by_construction
    assert c.value > 1.0 and c.control.measured < 1e-9 and not c.control.holds
    d, k = 128, 1
    half = pe.sin_half(positional.sinusoidal_table(512, d, dtype=torch.float64))
    assert half.shape == (512, d // 2) and float(half[0].abs().max()) == 0.0
    # the residual at pos = 0 is PE_k itself, whatever the map: a floor on the best fit
    floor = float(torch.sin(positional.frequencies(d) * k).abs().max())
    assert floor == pytest.approx(math.sin(1.0)) and c.value >= floor
    (v,) = verdicts([results["pe-relative-position"]], [claim("001-error-pe-sin-half-only")])
    assert v.verdict == "does not hold" and v.measurements[0].controlled


def test_keeping_the_cos_half_fails_the_sin_half_check():
    """The wrong variant: a 'sin half' that keeps the cos half shifts linearly, so the check
    fails (a defect: a support check) and the error item would hold."""
    r = pe.run(plot=False, max_offset=8, half_fn=lambda table: table)
    c = r.check("sin-half-no-linear-shift")
    assert c.value < 1e-9 and not c.passed and not r.passed
    (v,) = verdicts([r], [claim("001-error-pe-sin-half-only")])
    assert v.verdict == "holds by construction"  # the error would not be confirmed
    # a control that lacks the shift too (a random table in place of the whole one) also
    # fails it: the check needs its control to shift
    r = pe.run(plot=False, max_offset=8, table_fn=pe.random_table)
    assert r.check("sin-half-no-linear-shift").control.holds
    assert not r.check("sin-half-no-linear-shift").passed


def test_pe_rejects_offsets_the_control_cannot_fit():
    with pytest.raises(ValueError, match="max_offset"):
        pe.run(plot=False, n_positions=64, embed_dim=64, max_offset=8)


# -- rope-relative ---------------------------------------------------------------------------------


def test_rope_is_an_identity_and_additive_positions_fail_it(results):
    r = results["rope-relative"]
    assert r.verdict == "holds by construction" and r.passed
    assert r.control.measured > 0.1 and not r.control.holds  # m and n matter, not only m − n
    (norm,) = r.checks
    assert norm.by_construction and norm.control.measured > 0.1 and not norm.control.holds


def test_rope_as_its_own_control_makes_the_result_not_hold():
    r = rope.run(plot=False, n_positions=32, control_fn=rope.attnlab_rope)
    assert r.headline_holds and r.control.holds and not r.holds and not r.passed


# -- pe-frequency-roles ----------------------------------------------------------------------------


def test_reversed_table_swaps_the_frequencies():
    wl = pe.table_wavelengths(positional.sinusoidal_table(2, 64, dtype=torch.float64))
    wl_rev = pe.table_wavelengths(pfr.reversed_table(2, 64))
    assert torch.equal(wl_rev, wl.flip(0))


def test_frequency_roles_control_shows_the_opposite_roles(results):
    """With the frequencies reversed, the first quarter of the pairs loses Δ = 1 and
    decodes Δ = 1000, the last one the other way round: every test fails."""
    r = results["pe-frequency-roles"]
    assert r.verdict == "holds" and r.passed
    assert r.control.measured > 0.5 and not r.control.holds  # last quarter aliases at far
    assert r.check("high-near").control.measured > 1.0
    assert r.check("high-far-aliasing").control.measured < 0.1
    assert r.check("low-near").control.measured < 0.25
    assert all(not c.control.holds for c in r.checks)


def test_frequency_roles_table_as_its_own_control_makes_the_result_not_hold():
    r = pfr.run(plot=False, samples=300, control_fn=positional.sinusoidal_table)
    assert r.headline_holds and r.control.holds
    assert not r.holds and not r.passed
    assert not any(c.passed for c in r.checks)


# -- relative-position-learned ---------------------------------------------------------------------


def test_relative_position_null_models_do_not_generalise(results):
    r = results["relative-position-learned"]
    assert r.verdict == "holds" and r.passed
    chance = 1 / rpl.OffsetConfig().vocab
    # the shuffled table learns the trained positions, and fails the unseen ones
    rows = {(x[0], x[1]): x for x in r.table[1]}
    shuffled = rows["shuffled sinusoidal table", "positions only"]
    assert shuffled[2] >= 0.95 and max(shuffled[3:5]) < 0.5
    assert r.control.measured < 0.5 and not r.control.holds
    assert r.check("peak-unseen").control.measured < 0.5
    assert r.check("trained-positions").control.measured < 3 * chance  # untrained
    assert r.check("mixed-partial").control.measured < 3 * chance
    assert r.check("absolute-fails-unseen").control.measured >= 0.95  # it did learn
    assert all(not c.control.holds for c in r.checks)


def test_untrained_is_where_training_starts():
    c = rpl.OffsetConfig(steps=0)
    a, b = rpl.untrained(c, "sinusoidal", "mixed", 3), rpl.train(c, "sinusoidal", "mixed", 3)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(),
                                                   b.state_dict().values()))


def test_relative_position_model_as_its_own_control_makes_the_result_not_hold():
    r = rpl.run(plot=False, mixed=False, control="sinusoidal")
    assert r.headline_holds and r.control.holds and not r.holds and not r.passed
    assert not r.check("peak-unseen").passed


def test_relative_position_rejects_an_unknown_control():
    with pytest.raises(ValueError, match="control must be one of"):
        rpl.run(plot=False, control="alibi")


# -- the claims these experiments decide -----------------------------------------------------------

VERDICTS = {
    "001-pe-formula": "holds by construction",
    "001-error-pe-sin-half-only": "does not hold",
    "001-pe-linear-shift": "holds by construction",
    "001-wavelengths-exponential": "holds by construction",
    "001-error-wavelength-decay": "does not hold",
    "001-frequency-roles": "holds under stated conditions",
    "001-relative-position-learned": "holds under stated conditions",
}


def test_position_claims_rest_on_controls_that_fail(results):
    vs = verdicts(list(results.values()), [claim(i) for i in VERDICTS])
    assert {v.claim.id: v.verdict for v in vs} == VERDICTS
    for v in vs:
        assert all(m.controlled for m in v.measurements), v.claim.id
        if v.verdict == "does not hold":
            assert v.claim.reading_en and v.claim.reading_zh
    (ext,) = [e for e in extension_verdicts(list(results.values()))
              if e.extension.experiment == "rope-relative"]
    assert ext.verdict == "holds" and ext.measurement.controlled


def test_the_wavelength_claim_follows_the_table():
    """Given the off-by-one table, the claim's checks fail and so does the claim."""
    r = pe.run(plot=False, max_offset=8, table_fn=pe.off_by_one_table)
    (v,) = verdicts([r], [claim("001-wavelengths-exponential")])
    assert v.verdict == "does not hold"
