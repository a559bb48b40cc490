"""attnlab.tracing.verify on real tiny models, both ways: the trace of the model passes
against the model's own eager maps (a decoder, one with learned sinks, an encoder–decoder
stack by stack); a deliberately wrong one fails (a perturbed q, another head's map, a layer
missing, a causal flag flipped, a sink row not renormalised)."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("transformers")

from attnlab.core.scores import ScoreShape  # noqa: E402
from attnlab.tracing import (  # noqa: E402
    AttentionTrace,
    StackedTrace,
    support,
    tiny,
    trace,
    verify,
)


def _traced(family: str):
    """(the trace of ``family``'s tiny model on 12 ids, the model's own eager maps)."""
    model = tiny.tiny_model(family)
    ids = torch.randint(3, 80, (1, support.SEQ_LEN), generator=torch.Generator().manual_seed(0))
    return trace(model, ids[0].tolist(), merge_pieces=False), support.eager_maps(model, ids)


def _with(t: AttentionTrace, *, q=None, **shape_change) -> AttentionTrace:
    """The same record with q or the score shapes changed: a deliberately wrong trace."""
    shapes = [ScoreShape(**{"scale": s.scale, "causal": s.causal, "window": s.window,
                            "softcap": s.softcap, "sinks": s.sinks, **shape_change})
              for s in t.shapes]
    return AttentionTrace(tokens=t.tokens, q=t.q if q is None else q, k=t.k, lse=t.lse,
                          shapes=shapes, token_ids=t.token_ids)


@pytest.fixture(scope="module")
def llama():
    return _traced("llama")


def test_the_trace_of_the_model_passes(llama):
    t, maps = llama
    c = verify.check_stack(t, maps)
    assert c.passed, c.problems
    assert (c.layers, c.heads, c.queries, c.keys) == (2, 4, 12, 12) and c.shape_ok
    assert 0 <= c.weights_error <= verify.EXACT_TOL
    assert 0 <= c.recompute_error <= verify.RECOMPUTE_TOL
    assert c.weights_tol == verify.EXACT_TOL  # a tiny model's |lse| stays below LSE_SCALE
    assert len(c.head_errors) == 2 and all(len(r) == 4 for r in c.head_errors)
    assert max(max(r) for r in c.head_errors) == c.weights_error
    assert c.compared == ""
    assert verify.verify(t, maps) == {"self": c}
    assert verify.verify(t, {"self": maps})["self"] == c


def test_a_perturbed_q_fails(llama):
    t, maps = llama
    c = verify.check_stack(_with(t, q=t.q * 1.01), maps)
    assert not c.passed
    assert c.weights_error > 10 * verify.EXACT_TOL
    assert c.recompute_error > verify.RECOMPUTE_TOL  # its weights no longer sum to 1
    assert any(p.startswith("weights differ from output_attentions") for p in c.problems)
    assert any(p.startswith("weights recomputed from q and k differ") for p in c.problems)


def test_the_map_of_another_head_fails_and_says_which_heads(llama):
    t, maps = llama
    swapped = [m.clone() for m in maps]
    swapped[1][:, [0, 3]] = maps[1][:, [3, 0]]  # layer 1: heads 0 and 3 exchanged
    c = verify.check_stack(t, swapped)
    assert not c.passed and c.recompute_error <= verify.RECOMPUTE_TOL  # the trace is fine
    bad = {(layer, h) for layer, row in enumerate(c.head_errors) for h, e in enumerate(row)
           if e > verify.EXACT_TOL}
    assert bad == {(1, 0), (1, 3)}


def test_wrong_sizes_and_a_flipped_causal_flag_fail(llama):
    t, maps = llama
    c = verify.check_stack(t, maps[:1])
    assert not c.shape_ok and c.weights_error == math.inf and not c.passed
    assert c.problems == ("2 layers traced, the model returns 1 maps",)
    c = verify.check_stack(t, [m[:, :2] for m in maps])
    assert not c.shape_ok and "(2, 4, 12, 12)" in c.problems[0]
    c = verify.check_stack(_with(t, causal=False), maps)
    assert "layer 0 is marked causal=False but its maps do not reach later keys" in c.problems


def test_sinks_a_row_renormalised_by_the_rule_and_one_not(monkeypatch):
    """gpt-oss returns its softmax with the sinks' share (rows sum below 1): the trace
    matches as it is. Maps renormalised to sum 1 (what a model that scales its output
    instead returns) match under the sink rule; a record without its sink logits does not
    get the rule, and fails."""
    t, maps = _traced("gpt_oss")
    c = verify.check_stack(t, maps)
    assert c.passed and c.compared == "", c.problems
    renormed = [m / m.sum(-1, keepdim=True) for m in maps]
    assert max(float((r - m).abs().max()) for r, m in zip(renormed, maps)) > 1e-3
    c = verify.check_stack(t, renormed)
    assert c.passed and c.compared == verify.SINK_RULE, c.problems
    no_sinks = _with(t, sinks=None)
    c = verify.check_stack(no_sinks, renormed)
    assert not c.passed and c.compared == "" and c.weights_error > 1e-3
    partly = [m.clone() for m in maps]
    partly[0][:, :, 5] = renormed[0][:, :, 5]  # one row renormalised, the others not
    assert not verify.check_stack(t, partly).passed


def test_an_encoder_decoder_stack_by_stack():
    model = tiny.tiny_model("bart")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 80, (1, support.SEQ_LEN), generator=g)
    target = torch.randint(3, 80, (1, support.TARGET_LEN), generator=g)
    st = trace(model, ids[0].tolist(), target=target[0].tolist())
    assert isinstance(st, StackedTrace)
    maps = support.eager_stack_maps(model, ids, target)
    checks = verify.verify(st, maps, recompute=True)
    assert list(checks) == ["encoder", "decoder", "cross"]
    assert all(c.passed for c in checks.values()), {n: c.problems for n, c in checks.items()}
    assert (checks["cross"].queries, checks["cross"].keys) == (support.TARGET_LEN,
                                                             support.SEQ_LEN)
    top = verify.worst(checks)
    assert top["weights"] == max(c.weights_error for c in checks.values()) <= verify.EXACT_TOL
    wrong = verify.verify(st, dict(maps, cross=maps["decoder"]))  # the decoder's for cross
    assert not wrong["cross"].passed and not wrong["cross"].shape_ok
    assert wrong["encoder"].passed and wrong["decoder"].passed
    flipped = verify.verify(st, dict(maps, encoder=maps["encoder"][::-1]))  # layers swapped
    assert not flipped["encoder"].passed and flipped["encoder"].weights_error > 1e-3
    with pytest.raises(ValueError, match=r"no attention for stack 'decoder'; it holds "
                                         r"\['encoder'\]"):
        verify.verify(st, {"encoder": maps["encoder"]})


def test_the_recompute_check_is_asked_for_or_left_out(llama):
    t, maps = llama
    dense = AttentionTrace(tokens=t.tokens, weights=t.weights)  # no q and k
    c = verify.check_stack(dense, maps)
    assert c.passed and math.isnan(c.recompute_error)
    c = verify.check_stack(dense, maps, recompute=True)
    assert not c.passed and "no q and k" in c.problems[0]
    assert math.isnan(verify.check_stack(t, maps, recompute=False).recompute_error)


def test_the_tolerance_grows_with_the_log_sum_exp(llama):
    t, _ = llama
    assert verify.tolerance(verify.EXACT_TOL, t) == verify.EXACT_TOL
    big = AttentionTrace(tokens=t.tokens, q=t.q, k=t.k, lse=t.lse + 4 * verify.LSE_SCALE,
                         shapes=list(t.shapes))
    top = float((t.lse + 4 * verify.LSE_SCALE).abs().max())
    assert verify.tolerance(verify.EXACT_TOL, big) == pytest.approx(
        verify.EXACT_TOL * top / verify.LSE_SCALE)
    assert verify.tolerance(verify.EXACT_TOL, big) > 4 * verify.EXACT_TOL


def test_bad_arguments_are_named():
    w = torch.softmax(torch.randn(1, 2, 3, 3), -1)
    t = AttentionTrace(tokens=list("abc"), weights=w)
    with pytest.raises(TypeError, match="trace must be an AttentionTrace"):
        verify.check_stack({"self": t}, [w])
    with pytest.raises(ValueError, match=r"reference\[0\] must be a \(1, H, Lq, Lk\)"):
        verify.check_stack(t, [w[0, 0]])
    with pytest.raises(TypeError, match="reference must be a tensor or a sequence"):
        verify.check_stack(t, None)
    with pytest.raises(TypeError, match="reference must map each stack"):
        verify.verify({"self": t}, [w])
