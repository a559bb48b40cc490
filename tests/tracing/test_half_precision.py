"""A model run in half precision (bfloat16, float16) traces exactly: the trace's rows sum to
1 within float32 rounding (its log-sum-exp is computed in float32 from the q and k it
stores), its weights equal the model's own eager weights within the bound
:mod:`attnlab.tracing.precision` derives, and the model's result is the same with and
without the capture. Each claim against a wrong variant: the old log-sum-exp (from the
model's rounded scores) breaks the rows' sums, the float32 rule and float16's bound reject
a bfloat16 model's maps, a module that scales its scores otherwise is refused."""

from __future__ import annotations

import copy
import math
import sys

import pytest
import torch
from torch import nn

from attnlab.core.scores import ScoreShape
from attnlab.nn.transformer import GPT, GPTConfig
from attnlab.tracing import capture, precision, tiny, verify
from attnlab.tracing.adapters import huggingface as hf
from attnlab.tracing.adapters._base import UnreadableAttentionError

HALF = [torch.bfloat16, torch.float16]
SENTENCE = "The cat sat on the mat because it was tired of standing."
ROW_TOL = 1e-5  # the rows of a trace sum to 1 within float32 rounding


def _fp16_or_skip(dtype: torch.dtype) -> None:
    """Skip (with torch's reason) when this CPU build cannot run the dtype's matmul."""
    try:
        torch.ones(2, 2, dtype=dtype) @ torch.ones(2, 2, dtype=dtype)
        torch.softmax(torch.ones(2, dtype=dtype), -1)
    except RuntimeError as exc:  # pragma: no cover - depends on the torch build
        pytest.skip(f"{dtype} is not supported on this CPU build of torch: {exc}")


def _tiny_llama(dtype: torch.dtype) -> nn.Module:
    """A random-weight Llama (2 layers, 4 heads sharing 2 key/value heads of 16) built as
    attnlab's tiny models are, its weights drawn wide enough (std 0.2) that its scores
    reach |s| ≈ 10: rounding them in bfloat16 then moves the weights visibly."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = tiny._eager(LlamaConfig, dict(
        vocab_size=128, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        initializer_range=0.2))
    return tiny._seeded(LlamaForCausalLM, config, 0).to(dtype)


IDS = torch.randint(0, 128, (1, 24), generator=torch.Generator().manual_seed(1))


def _traced(model: nn.Module, ids: torch.Tensor):
    with torch.no_grad(), capture(model) as cap:
        logits = model(input_ids=ids).logits
    return cap.trace(meta={"precision": precision.precision_of(model)}), logits


def _maps(model: nn.Module, ids: torch.Tensor) -> list[torch.Tensor]:
    with torch.no_grad():
        return [a[0] for a in model(input_ids=ids, output_attentions=True).attentions]


@pytest.fixture(scope="module", params=HALF, ids=["bfloat16", "float16"])
def tiny_half(request):
    _fp16_or_skip(request.param)
    return _tiny_llama(request.param)


@pytest.fixture(scope="module")
def smollm2_bf16():
    from attnlab import models

    loaded = models.load("smollm2")  # shared: cast a copy, never the loaded model
    model = copy.deepcopy(loaded.model).to(torch.bfloat16).eval()
    model.set_attn_implementation("eager")
    ids = torch.tensor([loaded.tokenizer(SENTENCE).input_ids])
    return model, ids, loaded.model


# -- the rule ---------------------------------------------------------------------------------


def test_precision_of_names_the_dtype_and_the_rule():
    bf = precision.precision_of(_tiny_llama(torch.bfloat16))
    assert bf == {"dtype": "bfloat16", "rule": precision.HALF_RULE,
                  "unit_roundoff": 0.00390625}
    assert precision.precision_of(_tiny_llama(torch.float16))["unit_roundoff"] == 2.0 ** -11
    f32 = precision.precision_of(_tiny_llama(torch.float32))
    assert f32["dtype"] == "float32" and f32["rule"] == precision.EXACT_RULE
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got str"):
        precision.precision_of("smollm2")
    with pytest.raises(ValueError, match="must name a floating torch dtype.*'int8'"):
        precision.dtype_named("int8")
    with pytest.raises(ValueError, match="scores_max must be a finite number >= 0, got -1"):
        precision.half_tolerance(torch.bfloat16, -1)


@pytest.mark.parametrize("dtype", HALF)
def test_the_bound_holds_for_rounded_scores_and_not_for_a_smaller_roundoff(dtype):
    """The derivation on its own: scores rounded twice as eager rounds them, softmax in
    float32, rounded again: within weight_bound of the exact softmax; the same maps held to
    a bound with half the unit roundoff (too few roundings) fail somewhere."""
    _fp16_or_skip(dtype)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(4, 32, 16, generator=g) * 2, torch.randn(4, 32, 16, generator=g) * 2
    q, k = q.to(dtype).float(), k.to(dtype).float()  # the model's values, stored as float32
    scale = 16 ** -0.5
    s = (q @ k.mT) * scale
    p = torch.softmax(s, -1)
    s_model = ((q.to(dtype) @ k.to(dtype).mT) * scale)  # rd(rd(q·k)·scale)
    p_model = torch.softmax(s_model, -1, dtype=torch.float32).to(dtype).float()
    shape = ScoreShape(scale=scale)
    eps = precision.row_score_error(q, k, shape, dtype)
    bound = precision.weight_bound(p, p_model, eps, dtype, 1e-6)
    ratio = float(((p - p_model).abs() / bound).max())
    assert ratio <= 1, ratio
    # the same bound for a dtype with a quarter of the roundoff: not met
    u = precision.unit_roundoff(dtype) / 4
    tight = p * torch.expm1(2 * eps[..., None] / 4) + u * p_model + 1e-6
    assert float(((p - p_model).abs() / tight).max()) > 1
    assert float((p - p_model).abs().max()) > 100 * verify.EXACT_TOL  # not float32's rule


# -- a tiny Llama in bfloat16 and float16 -----------------------------------------------------


def test_tiny_rows_sum_to_one_and_weights_are_within_the_bound(tiny_half):
    t, _ = _traced(tiny_half, IDS)
    rows = verify.row_sum_error(t)
    assert rows <= ROW_TOL
    chk = verify.check_stack(t, _maps(tiny_half, IDS), recompute=True)
    dtype = next(tiny_half.parameters()).dtype
    print(f"\ntiny llama {dtype}: rows sum to 1 ± {rows:.2e}; max |trace − eager| = "
          f"{chk.weights_error:.3e}, bound over the stack {chk.weights_tol:.3e}, largest "
          f"error / own bound {chk.bound_ratio:.3f}")
    assert chk.passed, chk.problems
    assert chk.precision == str(dtype).removeprefix("torch.")
    assert chk.weights_error <= chk.weights_tol and chk.bound_ratio <= 1
    assert chk.recompute_error <= chk.recompute_tol
    # the rounding is visible: the float32 rule alone could not judge this model
    assert chk.weights_error > 100 * verify.EXACT_TOL


def test_tiny_old_lse_from_rounded_scores_breaks_the_rows(tiny_half, monkeypatch):
    """The old behaviour: the log-sum-exp of the model's rounded scores, recorded beside
    float32 q and k: rows of exp(s − lse) no longer sum to 1, and the recompute check sees
    it."""
    monkeypatch.setattr(hf, "is_half", lambda dtype: False)
    t, _ = _traced(tiny_half, IDS)
    rows = verify.row_sum_error(t)
    assert rows > ROW_TOL, rows
    chk = verify.check_stack(t, _maps(tiny_half, IDS), recompute=True)
    assert chk.recompute_error > chk.recompute_tol
    assert not chk.passed


def test_tiny_float32_rule_and_a_tighter_dtype_reject_the_maps(tiny_half):
    t, _ = _traced(tiny_half, IDS)
    maps = [m.float() for m in _maps(tiny_half, IDS)]  # float32 maps: no dtype to infer
    t.meta["precision"] = precision.precision_of(_tiny_llama(torch.float32))
    chk = verify.check_stack(t, maps)
    assert chk.precision == "float32" and chk.weights_tol < 1e-5
    assert not chk.passed and "differ from output_attentions" in chk.problems[0]
    if next(tiny_half.parameters()).dtype == torch.bfloat16:
        t.meta["precision"] = {"dtype": "float16"}  # 8 times too small a roundoff
        chk = verify.check_stack(t, maps)
        assert chk.bound_ratio > 1 and not chk.passed
        assert "beyond the float16 bound" in chk.problems[0]


def test_tiny_maps_dtype_selects_the_rule_without_meta(tiny_half):
    t, _ = _traced(tiny_half, IDS)
    del t.meta["precision"]
    chk = verify.check_stack(t, _maps(tiny_half, IDS))  # maps in the model's dtype
    assert chk.passed and chk.precision != "float32"
    t.meta["precision"] = "bfloat16"
    with pytest.raises(ValueError, match=r"trace.meta\['precision'\] must be a mapping"):
        verify.check_stack(t, _maps(tiny_half, IDS))


def test_tiny_outputs_are_bit_identical_with_and_without_capture(tiny_half):
    with torch.no_grad():
        plain = tiny_half(input_ids=IDS).logits
    _, captured = _traced(tiny_half, IDS)
    assert captured.dtype == plain.dtype and torch.equal(captured, plain)
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want = tiny_half.generate(IDS[:, :8], **kw)
        with capture(tiny_half):
            got = tiny_half.generate(IDS[:, :8], **kw)
    assert torch.equal(got, want)


def test_tiny_long_input_path_records_a_float32_lse(monkeypatch):
    """The path beyond EAGER_ORDER_MAX_TOKENS (attnlab's scaled_dot_product_attention)
    records the same float32 log-sum-exp; the output is still the model's."""
    model = _tiny_llama(torch.bfloat16)
    maps = _maps(model, IDS)
    monkeypatch.setattr(hf, "EAGER_ORDER_MAX_TOKENS", 8)
    t, logits = _traced(model, IDS)
    assert verify.row_sum_error(t) <= ROW_TOL
    # layer 0 sees the same input as eager (later layers see this path's own rounding, as
    # the model's sdpa path does): within the bound there
    q, k = t.layer_tensor("q", 0), t.layer_tensor("k", 0)
    eps = precision.row_score_error(q, k, t.score_shape(0), torch.bfloat16)
    for h in range(t.num_heads):
        p, want = t.head_weights(0, h), maps[0][h].float()
        bound = precision.weight_bound(p, want, eps[h], torch.bfloat16, 1e-5)
        assert float(((p - want).abs() / bound).max()) <= 1
    monkeypatch.setattr(hf, "is_half", lambda dtype: False)  # the old lse
    t, old_logits = _traced(model, IDS)
    assert verify.row_sum_error(t) > ROW_TOL
    assert torch.equal(logits, old_logits)  # only the record changed, not the model's result


def test_eager_check_refuses_a_misread_scale_in_bfloat16(monkeypatch):
    """The check against eager, now held to the derived bound, still refuses a module whose
    eager path scales its scores otherwise than attnlab reads (10 % here)."""
    model = _tiny_llama(torch.bfloat16)
    mod = sys.modules[type(model.model.layers[0].self_attn).__module__]
    own = mod.eager_attention_forward

    def rescaled(module, q, k, v, mask, scaling, **kw):
        return own(module, q, k, v, mask, scaling=scaling * 1.1, **kw)

    monkeypatch.setattr(mod, "eager_attention_forward", rescaled)
    with pytest.raises(UnreadableAttentionError, match="shapes its attention in a way"):
        _traced(model, IDS)


@pytest.mark.parametrize("dtype", HALF)
def test_attnlab_and_torch_modules_in_half_precision_sum_to_one(dtype):
    _fp16_or_skip(dtype)
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=20, block_size=64, num_layers=2, num_heads=4,
                        embed_dim=32)).eval()
    with torch.no_grad():
        for p in gpt.parameters():
            p.mul_(3)  # scores of a few units: the rounding shows
    gpt = gpt.to(dtype)
    ids = torch.randint(0, 20, (1, 16))
    for qkv in (True, False):
        with torch.no_grad():
            plain = gpt(ids)
            with capture(gpt, qkv=qkv) as cap:
                out = gpt(ids)
        assert verify.row_sum_error(cap.trace()) <= ROW_TOL
        if qkv:  # observing the weights (qkv=False) makes the module compute them densely
            assert torch.equal(out, plain)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0,
                                                           batch_first=True), 2).eval()
    enc = enc.to(dtype)
    x = (torch.randn(1, 16, 32) * 3).to(dtype)
    with torch.no_grad():
        plain = enc(x)
        with capture(enc) as cap:
            out = enc(x)
    assert verify.row_sum_error(cap.trace()) <= ROW_TOL
    assert torch.equal(out, plain)


# -- SmolLM2 in bfloat16 ----------------------------------------------------------------------


@pytest.mark.models
def test_smollm2_bf16_rows_weights_and_outputs(smollm2_bf16):
    model, ids, _ = smollm2_bf16
    with torch.no_grad():
        plain = model(input_ids=ids).logits
    t, captured = _traced(model, ids)
    assert torch.equal(captured, plain)  # the capture does not change the model's result
    rows = verify.row_sum_error(t)
    assert rows <= ROW_TOL
    w = t.head_weights(18, 6)
    assert abs(float(w[-1].double().sum()) - 1) <= ROW_TOL
    maps = _maps(model, ids)
    chk = verify.check_stack(t, maps, recompute=True)
    print(f"\nsmollm2 bfloat16 ({len(t.tokens)} tokens): rows sum to 1 ± {rows:.2e}; "
          f"max |trace − eager| = {chk.weights_error:.3e}, bound over the stack "
          f"{chk.weights_tol:.3e}, largest error / own bound {chk.bound_ratio:.3f}")
    assert chk.passed, chk.problems
    assert chk.weights_error > 100 * verify.EXACT_TOL
    t.meta["precision"] = {"dtype": "float32"}  # the float32 rule: not met
    assert not verify.check_stack(t, maps).passed
    t.meta["precision"] = {"dtype": "float16"}  # float16's roundoff: not met either
    assert verify.check_stack(t, maps).bound_ratio > 1


@pytest.mark.models
def test_smollm2_bf16_old_lse_is_off_one(smollm2_bf16, monkeypatch):
    model, ids, _ = smollm2_bf16
    monkeypatch.setattr(hf, "is_half", lambda dtype: False)
    t, _ = _traced(model, ids)
    rows = verify.row_sum_error(t)
    print(f"\nsmollm2 bfloat16, lse from the rounded scores: rows sum to 1 ± {rows:.2e}")
    assert rows > 10 * ROW_TOL


@pytest.mark.models
def test_smollm2_half_precision_check_beside_float32(smollm2_bf16):
    _, ids, f32 = smollm2_bf16
    bf = verify.half_precision_check(f32, ids[0], torch.bfloat16)
    full = verify.half_precision_check(f32, ids[0], torch.float32)
    assert next(f32.parameters()).dtype == torch.float32  # the shared model is left alone
    assert bf.passed and full.passed and bf.dtype == "bfloat16" and full.dtype == "float32"
    assert math.isnan(full.bound_ratio) and full.weights_tol < 1e-5 < bf.weights_error
    assert bf.rows_ok and bf.row_sum_error <= ROW_TOL
