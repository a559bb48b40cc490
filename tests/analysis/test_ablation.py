"""Importance against intervention (attnlab.analysis.ablation): the ablation hides exactly
the key it names, batches change nothing, importances equal their dense definitions, and
the rank agreement is Spearman's ρ."""

from __future__ import annotations

import pytest
import torch

from attnlab.analysis.ablation import _mask, ablate_keys, importances, rank_agreement
from attnlab.tracing import trace
from random_models import random_llama

transformers = pytest.importorskip("transformers")

N = 40


@pytest.fixture(scope="module")
def model():
    return random_llama(vocab=61, positions=128)


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
