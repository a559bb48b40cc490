"""The identities of attention (q·k = |q||k|cos θ, rows summing to 1, outputs in the convex
hull, permutation equivariance, Nadaraya–Watson, masked weights exactly 0, the linear RNN)
hold by construction, each beside the deliberately wrong variant the same test rejects; the
claims about models (the angle orders a trained head's scores, the learned kernel) beside a
real null. Each control is tested both ways: its value is what it should be, and the right
code handed as its own control makes the result not hold."""

from __future__ import annotations

import math

import pytest
import torch
from experiment_sizes import FAST

from attnlab.core import masks
from attnlab.core.functional import scaled_dot_product_attention
from attnlab.experiments import claims as inv
from attnlab.experiments import convex_combination as cc
from attnlab.experiments import dot_product_geometry as dpg
from attnlab.experiments import dynamic_graph as dg
from attnlab.experiments import kernel_smoothing as ks
from attnlab.experiments import learned_kernel as lk
from attnlab.experiments import linear_attention as lin
from attnlab.experiments import masking as msk
from attnlab.experiments.claims import verdicts

NAMES = ("dot-product-geometry", "convex-combination", "dynamic-graph", "kernel-smoothing",
         "learned-kernel", "masking", "linear-attention")
#: The experiments whose headline is an identity (the verdict "holds by construction").
IDENTITIES = ("dot-product-geometry", "convex-combination", "dynamic-graph",
              "kernel-smoothing", "masking", "linear-attention")
HOLDING = ("holds", "holds under stated conditions", "holds by construction")


@pytest.fixture(scope="module")
def mine(fast_results):
    return {name: fast_results[name] for name in NAMES}


@pytest.mark.parametrize("name", NAMES)
def test_each_control_fails_and_each_identity_says_why(mine, name):
    r = mine[name]
    assert r.holds and r.control is not None and not r.control.holds
    assert (r.verdict == "holds by construction") == (name in IDENTITIES)
    if name in IDENTITIES:
        assert r.by_construction.strip() and r.by_construction_zh.strip()
    for c in r.checks:
        if c.support:
            continue
        assert c.control is not None, f"{name}:{c.id} has no control"
        assert c.passed and not c.control.holds, f"{name}:{c.id}: {c.control}"


# -- dot-product-geometry --------------------------------------------------------------------


def test_dot_product_identity_rejects_the_unnormalised_angle(mine):
    r = mine["dot-product-geometry"]
    assert r.measured < 1e-12
    assert r.control.measured > 0.1  # acos(q·k) is not the angle unless |q| = |k| = 1
    assert r.check("projection-no-wider").by_construction
    assert r.check("projection-no-wider").control.measured == 2.0


def test_dot_product_identity_with_the_right_angle_as_control_does_not_hold():
    r = dpg.run(plot=False, n_tokens=8, embed_dim=32, heads=4, train_steps=5,
                control_angle_fn=dpg.stable_angle)
    assert r.headline_holds and r.control.holds and not r.holds
    assert r.verdict == "does not hold"


def test_the_angle_orders_a_trained_heads_scores_and_the_lengths_do_not(mine):
    check = mine["dot-product-geometry"].check("trained-angle-order")
    assert not check.by_construction  # a measurement on a trained model
    assert check.value >= 0.9 and abs(check.control.measured) < 0.3
    before, after, loss = dpg.trained_recall_rows(0, 200, 64)
    assert loss < 0.6 * math.log(16)  # trained: well below chance log 16
    assert after["angle"] == pytest.approx(check.value)
    assert after["control"] == after["length"] == pytest.approx(check.control.measured)
    # geometry, not training: random keys' lengths concentrate, so the angle orders them too
    assert before["angle"] >= 0.9 and after["top"] > 0.8


def test_the_angle_as_its_own_control_makes_the_order_check_fail():
    def cosine(q, k):
        return torch.cos(dpg.stable_angle(q, k))

    r = dpg.run(plot=False, n_tokens=8, embed_dim=32, heads=4, train_steps=5,
                order_control_fn=cosine)
    check = r.check("trained-angle-order")
    assert check.value >= 0.9 and check.control.holds
    assert not check.passed and not r.holds


def test_row_spearman_both_ways():
    a = torch.tensor([[1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]])
    assert dpg.row_spearman(a, a[:1].expand(2, 4)).tolist() == pytest.approx([1.0, -1.0])
    assert float(dpg.row_spearman(a[0], torch.tensor([1.0, 3.0, 2.0, 4.0]))) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="a and b"):
        dpg.row_spearman(a, a[:, :3])
    with pytest.raises(ValueError, match="train_steps"):
        dpg.run(plot=False, train_steps=0)


# -- convex-combination ----------------------------------------------------------------------


def test_convexity_controls_leave_the_hull_and_break_the_rows(mine):
    r = mine["convex-combination"]
    assert r.measured == 0.0 and r.control.measured > 0.1  # signed weights leave the hull
    assert r.check("no-negative-weight").control.measured > 0  # raw scores are signed
    assert r.check("row-sum").control.measured > 0.1
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(3, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    _, w = cc.signed_weights(q, k, v)  # summing to 1 alone does not make it convex
    assert torch.allclose(w.sum(-1), torch.ones(3, 6, dtype=torch.float64), atol=1e-12)
    assert w.min() < 0


@pytest.mark.parametrize("which", ["hull_control", "weight_control"])
def test_softmax_as_its_own_convexity_control_does_not_hold(which):
    r = cc.run(plot=False, batch=4, **{which: cc.attnlab_attend})
    assert not r.holds
    if which == "hull_control":
        assert r.headline_holds and r.control.holds
    else:
        assert not r.check("no-negative-weight").passed and not r.check("row-sum").passed


# -- dynamic-graph ---------------------------------------------------------------------------


def test_positions_break_equivariance_and_a_fixed_graph_does_not_depend_on_input(mine):
    r = mine["dynamic-graph"]
    assert r.measured < 1e-12 and r.control.measured > 1e-2  # 001-positions-needed
    assert r.check("pe-breaks-symmetry").control.measured < 1e-12
    assert r.check("complete-graph").control.measured == 0.0  # a causal graph is not complete
    assert r.check("input-dependent").control.measured == 0.0  # W_Q = 0: 1/N for any input
    assert not r.check("input-dependent").by_construction
    assert r.check("row-sum").control.measured > 0.1


def test_no_positions_as_the_equivariance_control_does_not_hold():
    r = dg.run(plot=False, control_encode=dg.no_positions)
    assert r.headline_holds and r.control.holds and not r.holds


# -- kernel-smoothing and learned-kernel -----------------------------------------------------


def test_another_kernel_is_not_attention(mine):
    r = mine["kernel-smoothing"]
    assert r.measured < 1e-10 and r.control.measured > 0.1
    assert r.check("gaussian-equal-norms").control.measured > 0.1
    diff = torch.tensor([0.0, 1.0, -2.0], dtype=torch.float64)
    assert torch.equal(ks.laplace_kernel(diff, 1.0), torch.exp(-diff.abs()))
    assert not torch.equal(ks.laplace_kernel(diff, 1.0), ks.gaussian_kernel(diff, 1.0))


def test_the_gaussian_kernel_as_its_own_control_does_not_hold():
    r = ks.run(plot=False, control_kernel=ks.gaussian_kernel)
    assert r.headline_holds and r.control.holds and not r.holds


def test_the_learned_kernel_beats_the_untrained_one(mine):
    r = mine["learned-kernel"]
    mse = {row[0]: row[2] for row in r.table[1]}
    untrained = mse["exp(q·k/√d), W_Q, W_K untrained"]
    gauss = mse["Gaussian on raw inputs, best σ (leave-one-out)"]
    assert r.control.measured == pytest.approx(untrained / gauss) and r.control.measured > 1
    assert r.measured <= 0.5
    assert r.check("nw-estimate").control.measured > 0.1  # no 1/√d: another kernel
    assert r.check("polarisation").control.measured > 0.1  # the key-norm term matters
    assert r.check("gaussian-spread-norms").control.measured < 1e-12


def test_the_trained_kernel_as_its_own_control_does_not_hold(monkeypatch):
    real = lk.train_kernel

    def trained_as_initial(*args, **kwargs):
        w_q, w_k, _, _ = real(*args, **kwargs)
        return w_q, w_k, w_q, w_k

    monkeypatch.setattr(lk, "train_kernel", trained_as_initial)
    r = lk.run(plot=False)
    assert r.headline_holds and r.control.holds and not r.holds
    assert r.control.measured == pytest.approx(r.measured)


def test_the_scaled_kernel_as_its_own_nw_control_does_not_hold():
    r = lk.run(plot=False, steps=5, control_kernel_fn=lk.dot_kernel)
    assert not r.check("nw-estimate").passed and r.check("nw-estimate").control.holds


# -- masking ---------------------------------------------------------------------------------


def test_masking_controls_leave_weight_where_minus_infinity_leaves_none(mine):
    r = mine["masking"]
    assert r.measured == 0.0 and r.control.measured > 0  # off by one: the future leaks
    assert r.check("masked-weight-zero").control.measured > 0.01  # scores · mask
    assert r.check("dead-row-zero").control.measured > 0.01  # −1e4: the row attends anyway
    assert r.check("dead-row-finite").control.measured == 1.0  # the listing's NaN
    assert r.check("past-reaches").control.measured == 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_an_additive_minus_1e4_mask_is_exact_zero_too_except_on_an_empty_row(dtype):
    """Why −1e4 is not the masked weights' control: exp(−1e4) underflows to exactly 0."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 6, 8, generator=g, dtype=dtype) for _ in range(3))
    mask = torch.rand(2, 6, 6, generator=g) > 0.5
    mask[..., 0] = True
    additive = msk.additive_mask(mask).to(dtype)
    _, w = scaled_dot_product_attention(q, k, v, additive, return_weights=True)
    assert float(w.masked_select(~mask).abs().max()) == 0.0
    mask[:, 2] = False  # row 2 sees nothing
    out = scaled_dot_product_attention(q, k, v, msk.additive_mask(mask).to(dtype))
    unmasked = scaled_dot_product_attention(q, k, v)  # −1e4 on the whole row cancels
    # fp32 rounds the scores to its spacing at 1e4 (≈ 1e-3), fp64 keeps them
    tol = 1e-2 if dtype == torch.float32 else 1e-9
    assert torch.allclose(out[:, 2], unmasked[:, 2], atol=tol)
    assert float(scaled_dot_product_attention(q, k, v, mask)[:, 2].abs().max()) == 0.0


def test_the_right_causal_mask_as_its_own_control_does_not_hold():
    r = msk.run(plot=False, control_mask_fn=masks.causal)
    assert r.headline_holds and r.control.holds and not r.holds


# -- linear-attention ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_linear():
    return dict(lengths=(256, 512), flop_lengths=(64, 128), repeats=1, n_exact=100)


def test_linear_attention_controls(mine):
    r = mine["linear-attention"]
    assert r.measured < 1e-10 and r.control.measured > 0.1
    assert r.check("textbook-formula").control.measured > 0.1  # not causal
    assert r.check("chunked-scan").control.measured > 0.1  # the state not carried
    assert r.check("linear-flop-exponent").control.measured > 1.8  # parallel form: N × N
    assert r.check("softmax-flop-exponent").control.measured < 1.05  # linear backend
    assert FAST["linear-attention"]["n_exact"] > 64  # a second chunk exists to go wrong
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 80, 4, generator=g, dtype=torch.float64) for _ in range(3))
    first = lin.chunks_without_state(q, k, v)[..., :64, :]
    assert torch.allclose(first, lin.attnlab_parallel(q, k, v)[..., :64, :], atol=1e-12)


def test_the_right_rnn_as_its_own_control_does_not_hold(small_linear):
    r = lin.run(plot=False, control_fn=lin.attnlab_recurrent, **small_linear)
    assert r.headline_holds and r.control.holds and not r.holds


# -- the claims these experiments decide -----------------------------------------------------

#: What the inventory says of the claims these experiments decide (the article-code part of
#: 000-listing-weights-sum-to-one aside): identities hold by construction, the claims about
#: models hold on measurements with a null control, the article's errors do not hold.
VERDICTS = {
    "000-score-is-dot-product": "holds by construction",
    "000-dot-product-cosine": "holds by construction",
    "000-orthogonal-unrelated": "depends on the reading",
    "000-direction-similarity": "holds under stated conditions",
    "000-summary-cosine": "holds under stated conditions",
    "001-dot-product-cosine": "holds under stated conditions",
    "000-error-score-is-attention-degree": "does not hold",
    "000-global-similarity-graph": "holds by construction",
    "000-probability-matrix": "holds by construction",
    "000-convex-combination": "holds by construction",
    "000-dynamic-graph": "holds under stated conditions",
    "000-neighbour-aggregation": "holds",
    "001-positions-needed": "holds under stated conditions",
    "000-kernel-smoothing": "holds by construction",
    "000-error-kernel-measures-distance": "does not hold",
    "000-error-kernel-formula-unscaled": "does not hold",
    "000-higher-score-more-weight": "holds by construction",
    "000-learned-similarity-kernel": "holds",
    "001-mask-minus-infinity": "holds by construction",
    "001-error-masked-weights-minus-infinity": "does not hold",
}


def test_the_claims_these_experiments_decide(mine):
    vs = verdicts(list(mine.values()), [inv.claim(i) for i in VERDICTS])
    got = {v.claim.id: v.verdict for v in vs}
    assert got == VERDICTS
    for v in vs:
        if v.verdict in HOLDING:
            assert all(m.controlled for m in v.measurements), v.claim.id
        else:
            assert v.claim.reading_en and v.claim.reading_zh, v.claim.id


def test_a_control_that_passes_takes_the_model_claims_down(mine):
    """The same claims on a dot-product-geometry result whose trained check's control
    passes (the angle handed as its own control): the measurement no longer tells, so they
    are neither held nor refuted: not decided here."""
    r = dpg.run(plot=False, n_tokens=8, embed_dim=32, heads=4, train_steps=5,
                order_control_fn=lambda q, k: torch.cos(dpg.stable_angle(q, k)))
    ids = ["000-direction-similarity", "000-summary-cosine", "001-dot-product-cosine"]
    assert {v.verdict for v in verdicts([r], [inv.claim(i) for i in ids])} == {
        "not decided here"}
    assert {v.verdict for v in verdicts([mine["dot-product-geometry"]],
                                        [inv.claim(i) for i in ids])} == {
        "holds under stated conditions"}


def test_an_orthogonal_key_keeps_about_the_uniform_share_of_weight():
    """The second reading of 000-orthogonal-unrelated: the weight of a key made orthogonal
    to its query is exp(0)/Σ_j exp(s_j), computed here independently; hiding the key (a
    score of −∞, the only way to give it no weight) is what the reading would need."""
    import math

    import torch

    from attnlab.experiments.dot_product_geometry import orthogonal_key_weight

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 16, 8, generator=g, dtype=torch.float64).unbind(0)
    q, k = q[None], k[None]
    got = orthogonal_key_weight(q, k)
    s = q[0] @ k[0].T / math.sqrt(8)
    s[:, 0] = 0.0  # the orthogonal key's score
    want = float((torch.softmax(s, -1)[:, 0] * 16).mean())
    assert abs(got - want) < 1e-12 and got > 0.1
    s[:, 0] = -math.inf  # hidden: what "no weight" takes
    assert float(torch.softmax(s, -1)[:, 0].max()) == 0.0


# -- the article's errors these experiments show ----------------------------------------------


def test_the_printed_kernel_formula_is_not_the_attention_it_describes():
    """Σ softmax(q·k_i) v_i, as article 000 prints it, differs from attention; with the
    1/√d_k restored it is attention (the control); handed the restored formula as the
    article's, the support check fails."""
    r = ks.run(plot=False)
    check = r.check("article-formula-unscaled")
    assert check.passed and check.support and check.value > 1.0
    assert check.control.measured < 1e-12 and not check.control.holds
    assert r.passed and r.verdict == "holds by construction"
    wrong = ks.run(plot=False, article_fn=ks.scaled_output)
    assert not wrong.check("article-formula-unscaled").passed and not wrong.passed
    own = ks.run(plot=False, restored_fn=ks.article_output)
    assert own.check("article-formula-unscaled").control.holds and not own.passed


def test_a_kernel_measures_similarity_and_a_distance_does_not():
    r = ks.run(plot=False)
    top, falls = r.check("kernel-largest-at-zero-distance"), r.check("kernel-falls-with-distance")
    assert top.passed and top.value == 1.0 and top.control.measured == 0.0
    assert falls.passed and falls.value == pytest.approx(-1.0)
    assert falls.control.measured == pytest.approx(1.0)
    x = torch.randn(20, 4, dtype=torch.float64)
    x = x / x.norm(dim=-1, keepdim=True)
    assert ks.kernel_vs_distance(ks.sphere_kernel(x, x), ks.distance(x, x))[0] == 1.0
    wrong = ks.run(plot=False, similarity_fn=ks.distance)  # a distance as the "kernel"
    assert not wrong.check("kernel-falls-with-distance").passed
    assert not wrong.check("kernel-largest-at-zero-distance").passed and not wrong.passed


def test_a_score_is_not_a_weight():
    """Across rows the higher score can have the lower weight (within a row it never does);
    raising a row's other scores moves A_ij with s_ij fixed (a whole-row shift does not).
    Weights that are a function of the score alone (exp, unnormalised) fail the check."""
    small = dict(n_tokens=16, embed_dim=32, heads=4, train_steps=5, plot=False)
    r = dpg.run(**small)
    across, row = r.check("score-not-weight-across-rows"), r.check("weight-depends-on-row")
    assert across.passed and across.value > 0.05 and across.control.measured == 0.0
    assert row.passed and row.value > 0.3 and row.control.measured < 1e-12
    s = torch.tensor([[[0.0, 1.0], [2.0, 3.0]]])
    assert dpg.score_weight_discordance(s, torch.softmax(s, -1)) == (0.25, 0.0)
    assert dpg.score_weight_discordance(s, torch.exp(s)) == (0.0, 0.0)
    wrong = dpg.run(**small, weights_fn=lambda q, k: torch.exp(
        q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])))
    assert not wrong.check("score-not-weight-across-rows").passed and not wrong.passed
    with pytest.raises(ValueError, match="one shape"):
        dpg.score_weight_discordance(s, s[0])
