"""The loss with only the kept keys (attnlab.analysis.eviction_loss) against a full forward
of the model with the same keys hidden by a dense 4-D mask."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnlab.analysis.eviction import evict
from attnlab.analysis.eviction_loss import eviction_losses, later_loss, to_json
from attnlab.tracing import trace
from random_models import random_llama

transformers = pytest.importorskip("transformers")

N, C = 96, 72


@pytest.fixture(scope="module")
def model_and_ids():
    ids = torch.randint(1, 97, (N,), generator=torch.Generator().manual_seed(5)).tolist()
    return random_llama(layers=2, heads=4, kv_heads=2), ids


def _dense_loss(model, ids, hidden_from_later):
    """The later rows' loss from one full forward whose 4-D mask hides ``hidden_from_later``
    (context keys) from the rows [C, N) only: the same keys in every layer and head."""
    allow = torch.ones(N, N, dtype=torch.bool).tril()
    allow[C:, hidden_from_later] = False
    mask = torch.zeros(1, 1, N, N).masked_fill_(~allow, torch.finfo(torch.float32).min)
    x = torch.tensor([ids])
    with torch.no_grad():
        logits = model(input_ids=x, attention_mask=mask).logits[0].float()
    return float(F.cross_entropy(logits[C:N - 1], x[0, C + 1:]))


def _keep_all_but(model, hidden):
    cfg = model.config
    keep = torch.ones(cfg.num_hidden_layers, cfg.num_key_value_heads, C, dtype=torch.bool)
    keep[:, :, hidden] = False
    return keep


def test_the_whole_cache_gives_the_full_forwards_loss(model_and_ids):
    model, ids = model_and_ids
    full = _dense_loss(model, ids, [])
    assert later_loss(model, ids, C) == pytest.approx(full, abs=2e-5)
    assert later_loss(model, ids, C, _keep_all_but(model, [])) == pytest.approx(full, abs=2e-5)


def test_hidden_keys_equal_a_dense_mask_and_the_prefill_is_untouched(model_and_ids):
    model, ids = model_and_ids
    hidden = [0, 3, 10, 40, 71]
    want = _dense_loss(model, ids, hidden)
    got = later_loss(model, ids, C, _keep_all_but(model, hidden))
    assert got == pytest.approx(want, abs=2e-5)
    assert abs(got - _dense_loss(model, ids, [])) > 1e-4  # hiding keys changes the loss
    # wrong variant: hiding the keys from the prefill rows as well gives another loss
    allow = torch.ones(N, N, dtype=torch.bool).tril()
    allow[:, hidden] = False
    allow[torch.arange(N), torch.arange(N)] = True
    mask = torch.zeros(1, 1, N, N).masked_fill_(~allow, torch.finfo(torch.float32).min)
    x = torch.tensor([ids])
    with torch.no_grad():
        logits = model(input_ids=x, attention_mask=mask).logits[0].float()
    wrong = float(F.cross_entropy(logits[C:N - 1], x[0, C + 1:]))
    assert abs(wrong - got) > 1e-4


def test_per_layer_and_head_keys_are_each_layers_own(model_and_ids):
    model, ids = model_and_ids
    keep = _keep_all_but(model, [])
    keep[1, 0, :20] = False  # only layer 1, KV head 0
    one = later_loss(model, ids, C, keep)
    keep2 = _keep_all_but(model, [])
    keep2[0, 0, :20] = False  # the same keys in layer 0 instead
    assert abs(one - later_loss(model, ids, C, keep2)) > 1e-5
    assert abs(one - later_loss(model, ids, C)) > 1e-5


def test_every_policy_and_budget_from_an_eviction_result(model_and_ids):
    model, ids = model_and_ids
    res = evict(trace(model, ids), (0.25, 1.0), context=C)
    out = eviction_losses(model, ids, res)
    assert set(out["loss"]) == set(res.policies)
    for p in res.policies:  # keeping the whole cache (budget 1) costs nothing
        assert out["delta"][p][1.0] == pytest.approx(0.0, abs=2e-5)
    assert any(abs(out["delta"][p][0.25]) > 1e-4 for p in res.policies)
    assert to_json(out)["loss"]["h2o"]["0.25"] == out["loss"]["h2o"][0.25]


def test_bad_input_is_refused_by_name(model_and_ids):
    model, ids = model_and_ids
    with pytest.raises(ValueError, match="context must be an int"):
        later_loss(model, ids, N)
    with pytest.raises(ValueError, match=r"keep must have shape \(layers, kv heads, context\)"):
        later_loss(model, ids, C, torch.ones(2, 2, C - 1, dtype=torch.bool))
    with pytest.raises(TypeError, match="keep must be a bool tensor"):
        later_loss(model, ids, C, torch.ones(2, 2, C))
    with pytest.raises(TypeError, match="EvictionResult"):
        eviction_losses(model, ids, {"keep": {}})


@pytest.mark.parametrize("chunk", [1, 7, 25])
def test_chunked_runs_equal_one_forward(model_and_ids, chunk):
    """The prefill and the later rows, a chunk at a time on a growing cache, equal the dense
    forward; the prefill runs through sdpa, the later rows through the eviction attention."""
    model, ids = model_and_ids
    hidden = [2, 9, 33, 70]
    want = _dense_loss(model, ids, hidden)
    got = later_loss(model, ids, C, _keep_all_but(model, hidden), chunk=chunk)
    assert got == pytest.approx(want, abs=2e-5)
    assert later_loss(model, ids, C, chunk=chunk) == pytest.approx(_dense_loss(model, ids, []),
                                                                    abs=2e-5)


def test_chunks_that_do_not_read_the_cache_before_them_are_caught(model_and_ids):
    """The wrong variant the chunked test rejects: a prefill whose chunks each start from an
    empty cache (their keys and values joined afterwards), so no chunk sees the ones before."""
    from transformers import DynamicCache

    model, ids = model_and_ids
    x = torch.tensor([ids])
    parts = []
    with torch.no_grad():
        for s in range(0, C, 25):
            e = min(s + 25, C)
            own = DynamicCache(config=model.config)
            model(input_ids=x[:, s:e], use_cache=True, cache=own,
                  position_ids=torch.arange(s, e)[None])
            parts.append(own)
    joined = DynamicCache(config=model.config)
    for layer in range(model.config.num_hidden_layers):
        joined.update(torch.cat([p.layers[layer].keys for p in parts], 2),
                      torch.cat([p.layers[layer].values for p in parts], 2), layer)
    wrong = later_loss(model, ids, C, cache=joined)
    assert abs(wrong - _dense_loss(model, ids, [])) > 1e-4


def test_budget_one_costs_exactly_nothing(model_and_ids):
    model, ids = model_and_ids
    res = evict(trace(model, ids), (1.0,), context=C)
    out = eviction_losses(model, ids, res, chunk=16)
    assert all(out["delta"][p][1.0] == 0.0 for p in res.policies)  # the same path, bit for bit
    with pytest.raises(ValueError, match="chunk must be a positive int"):
        eviction_losses(model, ids, res, chunk=0)


def _masked_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                      **kwargs):
    """The reference: every context key scored, the evicted ones masked with -inf (what
    the gathering attention must equal)."""
    from attnlab.analysis import eviction_loss as el

    keep = el._STATE.keep[int(module.layer_idx)]
    b, h, lq, d = query.shape
    hkv, lk = key.shape[1], key.shape[2]
    c, past = keep.shape[-1], lk - lq
    allowed = (torch.arange(lk)[None, :] <= torch.arange(past, lk)[:, None]).expand(
        hkv, lq, lk).clone()
    allowed[:, :, :c] &= keep[:, None, :]
    mask = allowed.repeat_interleave(h // hkv, dim=0)[None]
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling,
                                         enable_gqa=hkv != h)
    return out.transpose(1, 2).contiguous(), None


def test_gathered_kept_keys_equal_masking_the_evicted_ones(model_and_ids, monkeypatch):
    """Heads that keep different numbers of keys (the gathered keys padded, the padding
    masked) give the loss of scoring every key and masking the evicted ones."""
    from attnlab.analysis import eviction_loss as el

    model, ids = model_and_ids
    keep = _keep_all_but(model, [])
    g = torch.Generator().manual_seed(1)
    keep[0, 0] = torch.rand(C, generator=g) < 0.2  # about 14 keys kept
    keep[1, 1] = torch.rand(C, generator=g) < 0.6  # about 43
    keep[1, 0, :] = False  # none: only the later tokens
    got = later_loss(model, ids, C, keep)
    monkeypatch.setattr(el, "_attention", _masked_attention)
    want = later_loss(model, ids, C, keep)
    assert got == pytest.approx(want, abs=2e-5)
    # a wrong variant: the gathered keys with their padding left unmasked
    monkeypatch.setattr(el, "_attention", _unmasked_padding)
    assert abs(later_loss(model, ids, C, keep) - want) > 1e-4


def _unmasked_padding(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                      **kwargs):
    """The gathering attention with its padded slots attended to (wrong)."""
    from attnlab.analysis import eviction_loss as el

    keep = el._STATE.keep[int(module.layer_idx)]
    b, h, lq, d = query.shape
    hkv, lk = key.shape[1], key.shape[2]
    c, past = keep.shape[-1], lk - lq
    most = int(keep.sum(-1).max())
    where = torch.sort(~keep, dim=-1, stable=True).indices[:, :most]
    at = where[None, :, :, None].expand(b, hkv, most, d)
    key = torch.cat([key[:, :, :c].gather(2, at), key[:, :, c:]], dim=2)
    value = torch.cat([value[:, :, :c].gather(2, at), value[:, :, c:]], dim=2)
    later = torch.arange(c, lk)[None, :] <= torch.arange(past, lk)[:, None]
    allowed = torch.cat([torch.ones(hkv, lq, most, dtype=torch.bool),
                         later[None].expand(hkv, lq, lk - c)], dim=-1)
    mask = allowed.repeat_interleave(h // hkv, dim=0)[None]
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling,
                                         enable_gqa=hkv != h)
    return out.transpose(1, 2).contiguous(), None


def _result(keeps):
    """An eviction result made by hand: ``keeps[policy][budget]``, bool (L, H_kv, C)."""
    from attnlab.analysis.eviction import EvictionResult

    budgets = tuple(next(iter(keeps.values())))
    return EvictionResult(context=C, later=N - C, budgets=budgets, policies=tuple(keeps),
                          lost={}, keep=keeps)


def test_the_batch_equals_each_policy_alone(model_and_ids):
    """Every policy and budget of an eviction result, run as one batch per budget, gives the
    loss of running its keep mask alone."""
    model, ids = model_and_ids
    res = evict(trace(model, ids), (0.1, 0.25, 0.5), context=C)
    out = eviction_losses(model, ids, res)
    assert out["full"] == pytest.approx(later_loss(model, ids, C), abs=2e-5)
    for p in res.policies:
        for b in res.budgets:
            alone = later_loss(model, ids, C, res.keep[p][b])
            assert out["loss"][p][b] == pytest.approx(alone, abs=2e-5), (p, b)
    assert len({round(v, 4) for row in out["loss"].values() for v in row.values()}) > 10


@pytest.mark.parametrize("chunk", [7, 256])
def test_the_batch_equals_a_dense_mask(model_and_ids, chunk):
    """Keys hidden from every layer and head, three sets at once, against one full forward
    each whose 4-D mask hides them from the later rows."""
    model, ids = model_and_ids
    hidden = {"a": [0, 3, 10, 40, 71], "b": list(range(0, C, 3)), "c": list(range(20, 60))}
    out = eviction_losses(model, ids, _result(
        {p: {0.5: _keep_all_but(model, h)} for p, h in hidden.items()}), chunk=chunk)
    assert out["full"] == pytest.approx(_dense_loss(model, ids, []), abs=2e-5)
    for p, h in hidden.items():
        assert out["loss"][p][0.5] == pytest.approx(_dense_loss(model, ids, h), abs=2e-5), p


def test_heads_and_items_that_keep_different_counts(model_and_ids, monkeypatch):
    """Items and heads that keep different numbers of keys in one batch (the gathered keys
    padded to the most any head of any item keeps, the padding masked), one head keeping
    none and one every key, give each item's loss alone; with the padding left unmasked
    (wrong) they do not."""
    from attnlab.analysis import eviction_loss as el

    model, ids = model_and_ids
    g = torch.Generator().manual_seed(2)
    keeps = {}
    for name, share in {"sparse": 0.15, "half": 0.4, "dense": 0.8}.items():
        keep = torch.rand(2, 2, C, generator=g) < share  # (L, H_kv, C)
        keep[1, 0] = False  # layer 1's KV head 0 keeps no context key
        keeps[name] = {0.3: keep}
    keeps["dense"][0.3][1, 1] = True  # and one head keeps every one
    counts = torch.stack([k[0.3].sum(-1) for k in keeps.values()])  # (items, L, H_kv)
    assert len(set(counts[:, 0].flatten().tolist())) == 6  # layer 0: six counts, no two equal
    out = eviction_losses(model, ids, _result(keeps))
    alone = {p: later_loss(model, ids, C, k[0.3]) for p, k in keeps.items()}
    for p in keeps:
        assert out["loss"][p][0.3] == pytest.approx(alone[p], abs=2e-5), p
    assert len({round(v, 4) for v in alone.values()}) == 3
    slots = el._slots
    monkeypatch.setattr(el, "_slots", lambda keeps: [(w, None) for w, _ in slots(keeps)])
    wrong = eviction_losses(model, ids, _result(keeps))
    assert all(abs(wrong["loss"][p][0.3] - alone[p]) > 1e-4 for p in keeps)


def test_items_that_read_each_others_keys_are_caught(model_and_ids, monkeypatch):
    """The wrong variant the batch tests reject: each item's kept slots taken from another
    item (the batch's keep masks in reverse order)."""
    from attnlab.analysis import eviction_loss as el

    model, ids = model_and_ids
    keeps = {"front": {0.5: _keep_all_but(model, list(range(C // 2)))},
             "back": {0.5: _keep_all_but(model, list(range(C // 2, C)))}}
    right = eviction_losses(model, ids, _result(keeps))
    slots = el._slots
    monkeypatch.setattr(el, "_slots", lambda keeps: slots(keeps.flip(0)))
    wrong = eviction_losses(model, ids, _result(keeps))
    for p in keeps:
        assert abs(wrong["loss"][p][0.5] - right["loss"][p][0.5]) > 1e-4
    assert wrong["loss"]["front"][0.5] == pytest.approx(right["loss"]["back"][0.5], abs=2e-5)


def test_later_positions_start_at_the_context(model_and_ids, monkeypatch):
    """The later tokens run at positions [C, N) although their cache holds only them: the
    wrong variant, positions from 0 (the rotary embedding then puts them before the context
    keys), gives another loss. The queries and keys are scaled up so that the attention is
    sharp and the distances matter."""
    from attnlab.analysis import eviction_loss as el

    _, ids = model_and_ids
    model = random_llama(layers=2, heads=4, kv_heads=2, seed=3)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(8)
            layer.self_attn.k_proj.weight.mul_(8)
    res = _result({"h": {0.5: _keep_all_but(model, [1, 5, 30])}})
    right = eviction_losses(model, ids, res)
    assert right["loss"]["h"][0.5] == pytest.approx(_dense_loss(model, ids, [1, 5, 30]),
                                                    abs=2e-5)
    assert right["full"] == pytest.approx(_dense_loss(model, ids, []), abs=2e-5)
    positions = el._positions
    monkeypatch.setattr(el, "_positions",
                        lambda start, stop: positions(start, stop) - (C if start >= C else 0))
    wrong = eviction_losses(model, ids, res)
    assert abs(wrong["loss"]["h"][0.5] - right["loss"]["h"][0.5]) > 1e-4
    assert abs(wrong["full"] - right["full"]) > 1e-4


def test_the_prefill_cache_is_read_not_changed(model_and_ids, monkeypatch):
    """The batch reads the prefill's keys and values by reference and never writes them."""
    from attnlab.analysis import eviction_loss as el

    model, ids = model_and_ids
    seen = []
    prefill = el._prefill

    def kept_aside(*args, **kwargs):
        cache = prefill(*args, **kwargs)
        seen.append((cache, [(layer.keys.clone(), layer.values.clone())
                             for layer in cache.layers]))
        return cache

    monkeypatch.setattr(el, "_prefill", kept_aside)
    res = evict(trace(model, ids), (0.25, 0.5), context=C)
    eviction_losses(model, ids, res)
    (cache, before), = seen
    assert cache.get_seq_length() == C
    for layer, (keys, values) in zip(cache.layers, before):
        assert keys.shape[0] == 1 and torch.equal(layer.keys, keys)
        assert torch.equal(layer.values, values)


def test_equal_keep_masks_run_once(model_and_ids, monkeypatch):
    """Policies that keep the same keys share one run (and so one loss, to the bit), every
    key kept being the full run's; each budget's other masks run as one batch."""
    from attnlab.analysis import eviction_loss as el

    model, ids = model_and_ids
    a, b = _keep_all_but(model, [4, 8]), _keep_all_but(model, [9])
    everything = _keep_all_but(model, [])
    batches = []
    nlls = el._later_nlls

    def counted(net, x, context, cache, keeps, chunk=el.CHUNK):
        batches.append(keeps.shape[0])
        return nlls(net, x, context, cache, keeps, chunk)

    monkeypatch.setattr(el, "_later_nlls", counted)
    out = eviction_losses(model, ids, _result({"p": {0.5: a, 1.0: everything},
                                               "q": {0.5: a.clone(), 1.0: everything},
                                               "r": {0.5: b, 1.0: everything}}))
    assert batches == [1, 2]
    assert out["loss"]["p"][0.5] == out["loss"]["q"][0.5] != out["loss"]["r"][0.5]
    assert all(out["delta"][p][1.0] == 0.0 for p in "pqr")


def test_the_traces_keys_and_values_are_the_prefills_cache(model_and_ids, monkeypatch):
    """The losses on the cache read from the trace (its keys after the rotary embedding,
    and values) are the losses on a prefill's cache, to float32's rounding; another layer's
    keys and values, or a trace of other ids, are not that cache."""
    from attnlab.analysis.eviction_loss import trace_cache

    model, ids = model_and_ids
    t = trace(model, ids, merge_pieces=False)
    res = evict(t, (0.25, 0.5), context=C)
    ref = eviction_losses(model, ids, res)
    got = eviction_losses(model, ids, res, trace=t)
    assert got["full"] == pytest.approx(ref["full"], abs=2e-6)
    for p in res.policies:
        for b in (0.25, 0.5):
            assert got["loss"][p][b] == pytest.approx(ref["loss"][p][b], abs=2e-6), (p, b)
    # wrong variant: each layer reads another layer's keys and values
    cache = trace_cache(t, model, ids, C)
    cache.layers.reverse()
    with monkeypatch.context() as m:
        m.setattr("attnlab.analysis.eviction_loss.trace_cache", lambda *a: cache)
        wrong = eviction_losses(model, ids, res, trace=t)
    assert abs(wrong["full"] - ref["full"]) > 1e-4, (wrong["full"], ref["full"])
    other = trace(model, ids[::-1], merge_pieces=False)
    with pytest.raises(ValueError, match="trace must be the trace of these ids"):
        eviction_losses(model, ids, res, trace=other)
    with pytest.raises(TypeError, match="trace must be an AttentionTrace"):
        eviction_losses(model, ids, res, trace={"k": None})

