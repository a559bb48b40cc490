"""Importance against intervention (attnlab.analysis.ablation): the ablation hides exactly
the key it names, batches change nothing, the suffix run on the clean cache gives the
effects of whole forwards (and a wrong suffix does not), importances equal their dense
definitions, and the rank agreement is Spearman's ρ."""

from __future__ import annotations

import pytest
import torch

from attnlab.analysis import ablation
from attnlab.analysis.ablation import _mask, ablate_keys, importances, rank_agreement
from attnlab.tracing import trace
from random_models import random_llama

transformers = pytest.importorskip("transformers")

N = 40


@pytest.fixture(scope="module")
def model():
    return random_llama(vocab=61, positions=128)


@pytest.fixture(scope="module")
def sharp():
    """The random model with its queries and keys 8 times as large: attention peaked
    enough that a position or a cached key out of place moves the loss by over 1e-3."""
    m = random_llama(vocab=61, positions=128)
    with torch.no_grad():
        for layer in m.model.layers:
            layer.self_attn.q_proj.weight.mul_(8)
            layer.self_attn.k_proj.weight.mul_(8)
    return m


@pytest.fixture(scope="module")
def ids():
    return torch.randint(1, 61, (N,), generator=torch.Generator().manual_seed(3)).tolist()


def test_the_mask_hides_the_key_from_every_other_row_in_every_layer(model, ids):
    j = 7
    with torch.no_grad():
        out = model(torch.tensor([ids]), attention_mask=_mask(N, [j], torch.float32),
                    output_attentions=True)
    for a in out.attentions:  # (1, H, N, N)
        col = a[0, :, :, j]
        assert float(col[:, j + 1:].abs().max()) == 0.0  # nobody after j reads it
        assert float(col[:, j].min()) > 0.0  # its own row still does
        assert torch.allclose(a[0].sum(-1), torch.ones(a.shape[1], N), atol=1e-5)


def test_a_key_after_the_targets_has_no_effect_and_batches_change_nothing(model, ids):
    late = ablate_keys(model, ids, targets=[3, 4], keys=[10, 20, 30])
    assert float(late.effect.abs().max()) <= 1e-6
    one = ablate_keys(model, ids, targets=[30, 35], keys=list(range(0, 36, 5)), batch=1)
    many = ablate_keys(model, ids, targets=[30, 35], keys=list(range(0, 36, 5)), batch=4)
    assert one.clean == pytest.approx(many.clean, abs=1e-6)
    assert torch.allclose(one.effect, many.effect, atol=1e-5)
    assert float(one.effect.abs().max()) > 1e-4  # the earlier keys do matter


def test_the_clean_loss_is_the_models_own(model, ids):
    got = ablate_keys(model, ids, targets=[5, 17, 38], keys=[0])
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    rows = torch.tensor([5, 17, 38])
    ref = torch.nn.functional.cross_entropy(logits[rows], torch.tensor(ids)[rows + 1])
    assert got.clean == pytest.approx(float(ref), abs=1e-5)


def _whole_forwards(model, ids, targets, keys, per):
    """The effects as whole forwards measure them: each key hidden by its own (N, N)
    additive mask over the whole input, ``per`` keys a forward, the mean loss of the
    targets against the clean forward's."""
    n = len(ids)
    x = torch.tensor([ids])
    rows = torch.tensor(targets)

    def losses(ks):
        allow = torch.ones(len(ks), n, n, dtype=torch.bool).tril()
        for b, j in enumerate(ks):
            if j is not None:
                allow[b, :, j] = False
                allow[b, j, j] = True
        masks = torch.zeros(len(ks), 1, n, n).masked_fill_(~allow[:, None],
                                                           torch.finfo(torch.float32).min)
        with torch.no_grad():
            logits = model(input_ids=x.repeat(len(ks), 1), attention_mask=masks).logits
        nll = torch.nn.functional.cross_entropy(
            logits[:, rows].flatten(0, 1).float(), x[0, rows + 1].repeat(len(ks)),
            reduction="none")
        return nll.view(len(ks), -1).mean(1)

    clean = float(losses([None])[0])
    effect = torch.cat([losses(keys[s:s + per]) - clean for s in range(0, len(keys), per)])
    return clean, effect.double()


#: Targets short of the end; keys at the start, between and among the targets, and after.
TARGETS = [12, 20, 27, 33]
KEYS = [0, 1, 2, 9, 15, 19, 20, 26, 30, 33, 36, 39]


@pytest.mark.parametrize("per", [1, 3, len(KEYS)])
@pytest.mark.parametrize("which", ["model", "sharp"])
def test_the_suffix_on_the_clean_cache_gives_the_whole_forwards_effects(request, ids, per,
                                                                        which):
    model = request.getfixturevalue(which)
    got = ablate_keys(model, ids, targets=TARGETS, keys=KEYS, batch=per)
    assert got.settings["forward"] == "suffix on the clean cache"
    clean, ref = _whole_forwards(model, ids, TARGETS, KEYS, per)
    assert got.clean == pytest.approx(clean, abs=1e-6)
    assert torch.allclose(got.effect, ref, atol=1e-5)
    assert float(got.effect[:6].abs().min()) > 1e-5  # keys before the targets matter ...
    assert got.effect[-3:].tolist() == [0.0, 0.0, 0.0]  # ... keys after them do not


def test_a_wrong_suffix_differs_from_the_whole_forwards(sharp, ids, monkeypatch):
    keys = [2, 9, 15, 19, 26]  # (no key at 0: every batch runs on a cache)
    clean, ref = _whole_forwards(sharp, ids, TARGETS, keys, 3)
    assert torch.allclose(ablate_keys(sharp, ids, targets=TARGETS, keys=keys, batch=3).effect,
                          ref, atol=1e-5)
    with monkeypatch.context() as m:  # the suffix's positions restarting at 0
        m.setattr(ablation, "_positions", lambda start, stop: torch.arange(stop - start)[None])
        wrong = ablate_keys(sharp, ids, targets=TARGETS, keys=keys, batch=3)
        assert float((wrong.effect - ref).abs().max()) > 1e-3
    with monkeypatch.context() as m:  # the cache up to the batch's largest key, too long
        m.setattr(ablation, "_start", lambda ks: ks[-1])
        wrong = ablate_keys(sharp, ids, targets=TARGETS, keys=keys, batch=3)
        assert float((wrong.effect - ref).abs().max()) > 1e-3


def test_the_ablations_run_through_sdpa_and_leave_the_model_as_it_was(model, ids):
    """The forwards read no weight: they run through torch's sdpa (the effects equal the
    eager whole forwards', above), and the model keeps its eager attention after."""
    assert model.config._attn_implementation == "eager"
    seen = []
    attn = model.model.layers[0].self_attn
    hook = attn.register_forward_pre_hook(
        lambda m, args: seen.append(m.config._attn_implementation))
    try:
        ablate_keys(model, ids, targets=TARGETS, keys=KEYS[:3], batch=3)
    finally:
        hook.remove()
    assert seen and set(seen) == {"sdpa"}
    assert model.config._attn_implementation == "eager"


@pytest.mark.parametrize("before,during", [("eager", "sdpa"), ("sdpa", "sdpa"),
                                           ("attnlab_evict", "attnlab_evict")])
def test_only_eager_attention_is_switched_to_sdpa(model, before, during):
    """Eager attention runs as sdpa for the block; another implementation (a capture's or
    the eviction's route, flash attention) is left as it is, and each is restored."""
    from attnlab.tracing._hf_forward import fast_attention

    saved = model.config._attn_implementation_internal
    model.config._attn_implementation_internal = before
    try:
        with fast_attention(model):
            assert model.config._attn_implementation_internal == during
        assert model.config._attn_implementation_internal == before
    finally:
        model.config._attn_implementation_internal = saved


class _NoCache(torch.nn.Module):
    """The model behind a forward that takes no cache and keeps every row's logits."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config

    def forward(self, input_ids, attention_mask):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask)


class _CacheIgnored(_NoCache):
    """A forward that names a cache but never fills it."""

    def forward(self, input_ids, attention_mask, position_ids=None, cache=None,
                use_cache=None, logits_to_keep=0):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                          logits_to_keep=logits_to_keep)


@pytest.mark.parametrize("wrap", [_NoCache, _CacheIgnored])
def test_a_model_without_a_usable_cache_runs_whole_forwards(model, ids, wrap):
    got = ablate_keys(wrap(model), ids, targets=TARGETS, keys=KEYS, batch=3)
    assert got.settings["forward"] == "whole input"
    clean, ref = _whole_forwards(model, ids, TARGETS, KEYS, 3)
    assert got.clean == pytest.approx(clean, abs=1e-6)
    assert torch.allclose(got.effect, ref, atol=1e-5)


def test_importances_equal_their_dense_definitions(model, ids):
    t = trace(model, ids)
    with torch.no_grad():
        maps = [a[0].double() for a in model(torch.tensor([ids]),
                                              output_attentions=True).attentions]
    targets, keys = [20, 30, 38], list(range(0, 39, 3))
    got = importances(t, targets, keys)
    stacked = torch.stack(maps)  # (L, H, N, N)
    assert torch.allclose(got["weights"], stacked[:, :, targets].mean((0, 1, 2))[keys],
                          atol=1e-6)
    assert torch.allclose(got["last_layer"], stacked[-1][:, targets].mean((0, 1))[keys],
                          atol=1e-6)
    assert torch.allclose(got["accumulated"], stacked.sum((0, 1, 2))[keys], atol=1e-4)
    assert torch.equal(got["random"], importances(t, targets, keys)["random"])


def test_rank_agreement_is_spearmans_rho_with_ties_averaged():
    e = torch.tensor([0.1, 0.5, 0.2, 0.9])
    assert rank_agreement(e, {"same": e * 3, "flip": -e})["same"] == pytest.approx(1.0)
    assert rank_agreement(e, {"flip": -e})["flip"] == pytest.approx(-1.0)
    rho = rank_agreement(torch.tensor([1.0, 2, 3, 4]), {"t": torch.tensor([1.0, 2, 2, 3])})
    assert rho["t"] == pytest.approx(4.5 / (4.5 ** 0.5 * 5 ** 0.5))
    assert rank_agreement(e, {"flat": torch.ones(4)})["flat"] != rank_agreement(
        e, {"flat": torch.ones(4)})["flat"]  # NaN: a constant score ranks nothing


def test_bad_arguments_are_named(model, ids):
    with pytest.raises(ValueError, match=r"targets\[0\] must be an int in \[0, "):
        ablate_keys(model, ids, targets=[N - 1])
    with pytest.raises(ValueError, match="keys must not repeat"):
        ablate_keys(model, ids, targets=[5], keys=[1, 1])
    with pytest.raises(ValueError, match="batch must be a positive int"):
        ablate_keys(model, ids, targets=[5], keys=[1], batch=0)
    with pytest.raises(ValueError, match="at least 3 tokens"):
        ablate_keys(model, ids[:2])
