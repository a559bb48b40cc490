"""attnlab's compiled CPU kernel against the float64 formula: values, weights, logsumexp and
gradients, under every mask form, causal, grouped heads, fully-masked rows, NaN in masked
keys and values, and tiles that do not divide the rows; and the PyTorch fallback, taken and
reported when the kernel is disabled."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from attention_reference import make_mask, reference  # tests/core/attention_reference.py
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab
import attnlab.core.explicit as explicit
from attnlab.core import _kernel
from attnlab.core.functional import kernel_status, release_kernel_memory, why_not_kernel
from forked import python_c
from limits import CHILD_S, SLOW_CHILD_S

SETTINGS = settings(max_examples=15, deadline=None, derandomize=True)
HAVE_COMPILER = shutil.which(os.environ.get("CXX") or "c++") is not None


@pytest.fixture(scope="module", autouse=True)
def kernel():
    """The kernel, built or loaded once for this module (skipped without a compiler)."""
    ops = _kernel.get()
    if ops is None:
        if HAVE_COMPILER and not _kernel._disabled():
            pytest.fail(f"a compiler is here but the kernel is not: {kernel_status()}")
        # justified: no compiler, or ATTNLAB_NO_KERNEL=1 asks for the PyTorch path (whose
        # results the rest of the suite checks); with a compiler and no opt-out it fails
        pytest.skip(f"no kernel: {kernel_status()['reason']}")
    return ops


KINDS = ["none", "bool", "bool-bcast", "row", "float", "key"]


def _err(a, b):
    return float((a.detach().double() - b.detach().double()).abs().max()) if a.numel() else 0.0


@st.composite
def inputs(draw, max_len=45):
    b, h_kv, group = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.sampled_from([1, 3]))
    lq, lk = draw(st.integers(1, max_len)), draw(st.integers(1, max_len))
    d = draw(st.sampled_from([4, 16, 17]))
    dv = draw(st.sampled_from([d, 3]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    q = torch.randn(b, h_kv * group, lq, d, generator=g)
    k = torch.randn(b, h_kv, lk, d, generator=g)
    v = torch.randn(b, h_kv, lk, dv, generator=g)
    mask = make_mask(draw(st.sampled_from(KINDS)), b, h_kv * group, lq, lk, g)
    rows = draw(st.sampled_from([0, 1, 4, 7]))  # 0: the kernel's own tile height
    return q, k, v, mask, draw(st.booleans()), rows


def _through_kernel(t):
    """Whether t's autograd graph passes through the kernel's backward."""
    todo, seen = [t.grad_fn], set()
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        if "KernelAttention" in type(fn).__name__:
            return True
        todo.extend(f for f, _ in fn.next_functions)
    return False


def _expand_kv(t, group):
    return t.repeat_interleave(group, dim=-3)


@SETTINGS
@given(inputs(), st.sampled_from([torch.float32, torch.float64]))
def test_forward_equals_the_formula(inputs, dtype):
    q, k, v, mask, causal, rows = inputs
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    if mask is not None and mask.is_floating_point():
        mask = mask.to(dtype)
    group = q.shape[-3] // k.shape[-3]
    ref_out, ref_w, ref_lse = reference(q, _expand_kv(k, group), _expand_kv(v, group), mask,
                                        causal)
    assert why_not_kernel(q, k, v, mask) is None
    old, explicit._KERNEL_ROWS = explicit._KERNEL_ROWS, rows
    try:
        out, w, lse = attnlab.scaled_dot_product_attention(
            q, k, v, mask, causal=causal, return_weights=True, return_lse=True,
            backend="explicit")
    finally:
        explicit._KERNEL_ROWS = old
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    assert out.dtype == w.dtype == lse.dtype == dtype
    assert _err(out, ref_out) <= tol and _err(w, ref_w) <= tol
    alive = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), alive)
    assert bool((lse[~alive] == -math.inf).all())
    assert _err(lse[alive], ref_lse[alive]) <= tol
    assert not torch.isnan(out).any() and not torch.isnan(w).any()


@pytest.fixture
def monkeypatch_rows():
    """Set the kernel's tile height for one test (0 = its own choice)."""
    old = explicit._KERNEL_ROWS

    def set_rows(rows):
        explicit._KERNEL_ROWS = rows

    yield set_rows
    explicit._KERNEL_ROWS = old


@pytest.mark.parametrize(("lq", "lk", "causal", "kind", "group", "rows"), [
    (37, 37, True, "none", 1, 5), (37, 37, True, "float", 1, 0), (23, 41, True, "bool", 2, 4),
    (41, 23, True, "key", 1, 6), (41, 23, True, "none", 3, 7), (30, 30, False, "bool-bcast", 1, 8),
    (30, 19, False, "float", 2, 3), (19, 30, True, "key", 1, 0), (25, 25, False, "row", 1, 4)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gradients_equal_autograd_of_the_formula(lq, lk, causal, kind, group, rows, dtype,
                                                 monkeypatch_rows):
    monkeypatch_rows(rows)
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 2 * group, lq, 8, generator=g, dtype=dtype).requires_grad_()
    k = torch.randn(2, 2, lk, 8, generator=g, dtype=dtype).requires_grad_()
    v = torch.randn(2, 2, lk, 5, generator=g, dtype=dtype).requires_grad_()
    mask = make_mask(kind, 2, 2 * group, lq, lk, g)
    if mask is not None and mask.is_floating_point():
        mask = mask.to(dtype)
    ref_out, ref_w, ref_lse = reference(q, _expand_kv(k, group), _expand_kv(v, group), mask,
                                        causal)
    g_out, g_w = torch.randn_like(ref_out), torch.randn_like(ref_w)
    alive = torch.isfinite(ref_lse)
    g_lse = torch.randn_like(ref_lse).masked_fill(~alive, 0.0)
    loss = ((ref_out * g_out).sum() + (ref_w * g_w).sum()
            + (ref_lse.masked_fill(~alive, 0.0) * g_lse).sum())
    want = torch.autograd.grad(loss, (q, k, v))
    out, w, lse = attnlab.scaled_dot_product_attention(
        q, k, v, mask, causal=causal, return_weights=True, return_lse=True, backend="explicit")
    assert _through_kernel(out)
    loss = ((out * g_out).sum() + (w * g_w).sum()
            + (lse.masked_fill(~alive, 0.0) * g_lse).sum())
    got = torch.autograd.grad(loss, (q, k, v))
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    for a, b in zip(got, want):
        assert torch.isfinite(a).all()
        assert _err(a, b) <= tol
    # the comparison can fail: the gradient of the wrong loss (no weights term) is far off
    out2 = attnlab.scaled_dot_product_attention(q, k, v, mask, causal=causal,
                                                return_weights=True, backend="explicit")[0]
    wrong = torch.autograd.grad((out2 * g_out).sum(), (q, k, v))
    assert max(_err(a, b) for a, b in zip(wrong, want)) > 1e-3


def test_the_comparison_catches_a_wrong_kernel(monkeypatch):
    """A kernel that got its scale or its causal flag wrong fails these comparisons."""
    g = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(1, 2, 13, 8, generator=g) for _ in range(3))
    ref_out, ref_w, _ = reference(q[..., 4:, :], k, v, causal=True)
    ops = _kernel.get()

    class Wrong:
        def __init__(self, flip):
            self.flip = flip

        def forward(self, q5, k4, v4, m, v_raw, bad, causal, scale, *rest):
            if self.flip == "scale":
                scale = 1.0
            else:
                causal = not causal
            return ops.forward(q5, k4, v4, m, v_raw, bad, causal, scale, *rest)

    out, w = attnlab.scaled_dot_product_attention(q[..., 4:, :], k, v, causal=True,
                                                  return_weights=True)
    assert _err(out, ref_out) <= 1e-5 and _err(w, ref_w) <= 1e-5
    for flip in ("scale", "causal"):
        monkeypatch.setattr(_kernel, "get", lambda flip=flip: Wrong(flip))
        out = attnlab.scaled_dot_product_attention(q[..., 4:, :], k, v, causal=True,
                                                   return_weights=True)[0]
        assert _err(out, ref_out) > 1e-3


def test_only_the_output_or_only_the_weights_carry_a_gradient():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 9, 8, generator=g, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    for pick in (0, 1):  # the output alone, then the weights alone (v gets no gradient)
        ref = reference(q, k, v, causal=True)[pick]
        want = torch.autograd.grad(ref.pow(2).sum(), (q, k, v), allow_unused=True)
        res = attnlab.scaled_dot_product_attention(q, k, v, causal=True, return_weights=True)
        got = torch.autograd.grad(res[pick].pow(2).sum(), (q, k, v), allow_unused=True)
        for a, b in zip(got, want):
            if b is None:
                assert a is None or not a.any()
            else:
                assert _err(a, b) <= 1e-10


def test_nan_in_masked_keys_and_values_does_not_leak(monkeypatch_rows):
    monkeypatch_rows(6)
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 2, 20, 8, generator=g, requires_grad=True)
    k = torch.randn(1, 2, 30, 8, generator=g)
    v = torch.randn(1, 2, 30, 8, generator=g)
    v[..., 25, :] = float("nan")
    v[..., 27, 0] = float("inf")
    k[..., 26, 3] = float("nan")
    k.requires_grad_()
    v.requires_grad_()
    keep = torch.arange(30) < 24
    for mask in (keep, torch.zeros(30).masked_fill(~keep, -math.inf)):  # bool and float
        out, w = attnlab.scaled_dot_product_attention(q, k, v, mask, return_weights=True)
        ref_out, ref_w, _ = reference(q, k[..., :24, :], v[..., :24, :])
        assert _err(out, ref_out) <= 1e-5 and _err(w[..., :24], ref_w) <= 1e-5
        assert not w[..., 24:].any()
        gq, gk, gv = torch.autograd.grad(out.sum() + w.pow(2).sum(), (q, k, v))
        want = torch.autograd.grad(ref_out.sum() + ref_w.pow(2).sum(), (q,))[0]
        assert _err(gq, want) <= 1e-4
        assert torch.isfinite(gk).all() and torch.isfinite(gv).all()
        assert not gk[..., 24:, :].any() and not gv[..., 24:, :].any()
    # a row that does attend the NaN value is NaN there; the others stay finite
    mask = keep.expand(20, 30).clone()
    mask[3, 25] = True
    out = attnlab.scaled_dot_product_attention(q, k, v, mask, return_weights=True)[0]
    assert torch.isnan(out[..., 3, :]).all() and torch.isfinite(out[..., 4:, :]).all()
    # causal: keys past the diagonal of the first 15 rows hold NaN and inf; those rows stay
    # exact, the later rows (which see them) are NaN
    kc, vc = k.detach()[..., :20, :].clone(), v.detach()[..., :20, :].clone()
    kc[..., 15:, 0] = float("nan")
    vc[..., 15:, :] = float("inf")
    out = attnlab.scaled_dot_product_attention(q.detach(), kc, vc, causal=True,
                                               return_weights=True)[0]
    ref_out = reference(q.detach()[..., :15, :], kc[..., :15, :], vc[..., :15, :],
                        causal=True)[0]
    assert _err(out[..., :15, :], ref_out) <= 1e-5
    assert torch.isnan(out[..., 15:, :]).all()


def test_nan_scores_give_nan_rows_as_softmax_does():
    q = torch.randn(1, 1, 4, 8)
    k = torch.randn(1, 1, 6, 8)
    k[..., 2, 0] = float("nan")
    out, w, lse = attnlab.scaled_dot_product_attention(q, k, k, return_weights=True,
                                                       return_lse=True)
    ref_out, ref_w, _ = reference(q, k, k)
    assert torch.isnan(ref_w).all() and torch.isnan(w).all() and torch.isnan(out).all()
    assert torch.isnan(lse).all()


def test_layouts_without_copies_heads_inside_rows_and_broadcast_batches():
    g = torch.Generator().manual_seed(6)
    b, n, h, d = 2, 33, 4, 8
    x = torch.randn(b, n, 3 * h * d, generator=g)
    q, k, v = (t.view(b, n, h, d).transpose(1, 2) for t in x.split(h * d, dim=-1))
    out, w = attnlab.scaled_dot_product_attention(q, k, v, return_weights=True)
    ref_out, ref_w, _ = reference(q, k, v)
    assert _err(out, ref_out) <= 1e-5 and _err(w, ref_w) <= 1e-5
    assert out.stride(-3) < out.stride(-2)  # the output takes q's layout: (B, N, H, d) inside
    assert out.transpose(1, 2).reshape(b, n, h * d).data_ptr() == out.data_ptr()  # a view
    # grouped heads read in place from (B, N, H_kv, d) projections, gradients included
    y = torch.randn(b, n, 2 * 2 * d, generator=g, dtype=torch.float64)
    kg, vg = (t.view(b, n, 2, d).transpose(1, 2).requires_grad_() for t in y.split(2 * d, -1))
    qg = q.detach().double().requires_grad_()
    out, w = attnlab.scaled_dot_product_attention(qg, kg, vg, causal=True, return_weights=True)
    assert _through_kernel(out)
    got = torch.autograd.grad(out.sum() + w.pow(2).sum(), (qg, kg, vg))
    ref_out, ref_w, _ = reference(qg, _expand_kv(kg, 2), _expand_kv(vg, 2), causal=True)
    assert _err(out, ref_out) <= 1e-12 and _err(w, ref_w) <= 1e-12
    want = torch.autograd.grad(ref_out.sum() + ref_w.pow(2).sum(), (qg, kg, vg))
    assert max(_err(a, c) for a, c in zip(got, want)) <= 1e-10
    # batch dims that broadcast (k and v shared over the first dim), q as a 3-D tensor
    q = torch.randn(3, 2, 10, 8, generator=g)
    k, v = torch.randn(1, 2, 12, 8, generator=g), torch.randn(2, 12, 5, generator=g)
    out, w = attnlab.scaled_dot_product_attention(q, k, v, return_weights=True)
    ref_out, ref_w, _ = reference(q, k.expand(3, 2, 12, 8), v.expand(3, 2, 12, 5))
    assert _err(out, ref_out) <= 1e-5 and _err(w, ref_w) <= 1e-5
    q2 = torch.randn(10, 8, generator=g)
    out, w = attnlab.scaled_dot_product_attention(q2, k[0, 0], v[0], return_weights=True)
    ref_out, ref_w, _ = reference(q2, k[0, 0], v[0])
    assert out.shape == (10, 5) and _err(out, ref_out) <= 1e-5 and _err(w, ref_w) <= 1e-5


def test_multihead_module_weights_equal_torchs():
    torch.manual_seed(7)
    theirs = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    ours = attnlab.nn.MultiHeadAttention.from_torch(theirs)
    x = torch.randn(2, 40, 32)
    want, want_w = theirs(x, x, x, need_weights=True, average_attn_weights=False)
    got, got_w = ours(x, need_weights=True)
    assert _err(got, want) <= 1e-5 and _err(got_w, want_w) <= 1e-5


def test_reused_weights_memory_is_written_whole():
    """The kernel reuses a freed weights buffer: a causal map written into one that held a
    full map must still be 0 above the diagonal, and a fully-masked row all 0."""
    q = k = v = torch.randn(1, 4, 1024, 16)  # 16 MiB of weights: the kernel's own memory
    full = attnlab.scaled_dot_product_attention(q, k, v, return_weights=True)[1]
    assert full.min() > 0
    del full
    mask = torch.ones(1024, 1024, dtype=torch.bool)
    mask[5] = False
    w = attnlab.scaled_dot_product_attention(q, k, v, mask, causal=True, return_weights=True)[1]
    upper = torch.ones(1024, 1024, dtype=torch.bool).triu(1)
    assert not w[..., upper].any() and not w[..., 5, :].any()
    assert _err(w.sum(-1)[..., 6:], torch.ones(1, 4, 1018)) <= 1e-5
    del w
    assert release_kernel_memory() >= 16 << 20
    assert release_kernel_memory() == 0  # nothing is kept twice


def test_empty_shapes():
    q = torch.randn(2, 2, 5, 4)
    k = torch.randn(2, 2, 0, 4)
    out, w, lse = attnlab.scaled_dot_product_attention(q, k, k, return_weights=True,
                                                       return_lse=True)
    assert out.shape == (2, 2, 5, 4) and not out.any() and w.shape == (2, 2, 5, 0)
    assert bool((lse == -math.inf).all())
    out, w = attnlab.scaled_dot_product_attention(q[:, :, :0], q, q, return_weights=True)
    assert out.shape == (2, 2, 0, 4) and w.shape == (2, 2, 0, 5)


def test_what_the_kernel_does_not_take_goes_to_pytorch():
    q = k = v = torch.randn(1, 2, 6, 8)
    assert why_not_kernel(q, k, v) is None
    assert "float32 and float64" in why_not_kernel(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert why_not_kernel(q, k, v, dropout_p=0.2) == "the kernel has no dropout"
    bias = torch.zeros(6, 6, requires_grad=True)
    assert "mask requires grad" in why_not_kernel(q, k, v, bias)
    with pytest.raises(ValueError, match="dropout_p"):
        why_not_kernel(q, k, v, dropout_p=2.0)
    with pytest.raises(TypeError, match="build must be a bool"):
        why_not_kernel(q, k, v, build=1)
    out, w = attnlab.scaled_dot_product_attention(q, k, v, bias, return_weights=True)
    assert out.grad_fn is not None and not _through_kernel(out)


def test_disabled_kernel_falls_back_to_pytorch_and_says_so(monkeypatch):
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(2, 3, 21, 8, generator=g) for _ in range(3))
    with_kernel = attnlab.scaled_dot_product_attention(q, k, v, causal=True,
                                                       return_weights=True, return_lse=True)
    monkeypatch.setenv(_kernel.ENV_DISABLE, "1")
    _kernel._reset_for_tests()
    try:
        status = kernel_status()
        assert not status["available"] and _kernel.ENV_DISABLE in status["reason"]
        assert "ATTNLAB_NO_KERNEL=1" in why_not_kernel(q, k, v)
        without = attnlab.scaled_dot_product_attention(q, k, v, causal=True,
                                                       return_weights=True, return_lse=True)
        assert _kernel.get() is None
        for a, b in zip(with_kernel, without):
            assert _err(a, b) <= 1e-5
        qg = q.clone().requires_grad_()
        out = attnlab.scaled_dot_product_attention(qg, k, v, return_weights=True)[0]
        assert not _through_kernel(out)
    finally:
        monkeypatch.delenv(_kernel.ENV_DISABLE)
        _kernel._reset_for_tests()
    assert _kernel.get() is not None and kernel_status()["available"]


def test_status_reports_the_build():
    status = kernel_status()
    assert status["available"] and status["reason"] is None
    assert status["capability"] in ("AVX512", "AVX2", "DEFAULT")
    assert status["source"] in ("built", "cache") and "-O3" in status["flags"]
    assert not any(f.startswith("-march") for f in status["flags"])
    assert (status["build_seconds"] is None) == (status["source"] == "cache")


def _checked(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.mark.slow
# justified: building needs g++ and ninja; the fallback without them is tested apart
@pytest.mark.skipif(not HAVE_COMPILER, reason="no C++ compiler")
def test_a_fresh_cache_builds_once_and_reports_the_time(tmp_path):
    code = ("import json, torch\n"
            "from attnlab.core.functional import kernel_status, scaled_dot_product_attention\n"
            "q = torch.randn(1, 1, 3, 4)\n"
            "scaled_dot_product_attention(q, q, q, return_weights=True)\n"
            "print(json.dumps(kernel_status()))\n")
    kernels, home, tmp = tmp_path / "kernels", tmp_path / "home", tmp_path / "tmp"
    for folder in (home, tmp):
        folder.mkdir()
    # a home and a temporary folder of their own: the build writes nothing but its folder
    env = dict(os.environ, ATTNLAB_KERNEL_DIR=str(kernels), HOME=str(home), TMPDIR=str(tmp))
    env.pop(_kernel.ENV_DISABLE, None)
    env.pop("XDG_CACHE_HOME", None)
    import json

    # two processes on the cold cache at once (pytest's workers, torchrun's ranks): one
    # compiles, the other waits for that build and loads it
    together = [subprocess.Popen([sys.executable, "-c", code], env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                for _ in range(2)]
    got = []
    for proc in together:
        out, err = proc.communicate(timeout=SLOW_CHILD_S)
        assert proc.returncode == 0, err[-2000:]
        got.append(json.loads(out))
    first, waited = sorted(got, key=lambda status: status["source"])  # "built" < "cache"
    assert first["available"] and first["source"] == "built" and first["build_seconds"] > 0
    assert first["cache_dir"].startswith(str(kernels))
    assert waited["available"] and waited["source"] == "cache", got
    assert waited["build_seconds"] is None and waited["cache_dir"] == first["cache_dir"]
    assert sorted(p.name for p in kernels.iterdir()) == [Path(first["cache_dir"]).name]
    left = [str(p.relative_to(tmp_path)) for folder in (home, tmp) for p in folder.rglob("*")]
    assert not left, f"the build wrote outside its folder: {left}"
    # the later processes: attnlab fresh in a process forked from one that imported torch
    second = json.loads(_checked(python_c(code, env=env, timeout=CHILD_S)))
    assert second["source"] == "cache" and second["build_seconds"] is None
    # a compiler that does not exist: no kernel, a reason, and the results still come
    env = dict(env, ATTNLAB_KERNEL_DIR=str(tmp_path / "other"), CXX="no-such-compiler")
    third = json.loads(_checked(python_c(code, env=env, timeout=CHILD_S)))
    assert not third["available"] and "no-such-compiler" in third["reason"]


@pytest.mark.parametrize("shape_kw", [
    dict(causal=True), dict(causal=False), dict(causal=True, window=5), dict(window=7),
    dict(causal=True, key_mask="mask"), dict(causal=True, sinks="sinks")])
def test_weights_from_the_logsumexp_equal_the_pytorch_path(shape_kw, monkeypatch):
    from attnlab.core.scores import ScoreShape, row_logsumexp
    from attnlab.core.weights import shaped_weights

    g = torch.Generator().manual_seed(10)
    h, lq, lk, d = 2, 23, 4133, 8  # keys over one kernel tile, not a multiple of it
    q, k = torch.randn(h, lq, d, generator=g), torch.randn(h, lk, d, generator=g)
    kw = dict(shape_kw)
    if kw.get("key_mask") == "mask":
        kw["key_mask"] = torch.rand(lk, generator=g) > 0.3
    if kw.get("sinks") == "sinks":
        kw["sinks"] = torch.randn(h, generator=g)
    shape = ScoreShape(scale=0.4, **kw)
    lse = row_logsumexp(q, k, shape)
    lse[0, 3] = -math.inf  # a row that sees nothing
    cases = [dict(rows=range(lq), cols=None, head=0, sel=(slice(None), slice(None))),
             dict(rows=[0, 5, 22, 3], cols=range(100, 4133), head=1,
                  sel=([0, 5, 22, 3], slice(100, 4133))),
             dict(rows=[7], cols=[9, 2, 40], head=0, sel=([7], [9, 2, 40]))]  # unordered keys
    for case in cases:
        rows, cols, sel = case["rows"], case["cols"], case["sel"]
        for heads in (0, [0, 1]):
            q_rows = q[heads][..., sel[0], :]
            k_cols = k[heads][..., sel[1], :]
            lse_rows = lse[heads][..., sel[0]]
            args = (q_rows, k_cols, lse_rows, shape)
            kw2 = dict(rows=rows, cols=cols, head=heads, lq=lq, lk=lk)
            fast = shaped_weights(*args, **kw2)
            with monkeypatch.context() as m:
                m.setattr(_kernel, "get", lambda: None)
                slow = shaped_weights(*args, **kw2)
            assert fast.shape == slow.shape and fast.dtype == slow.dtype == torch.float32
            assert _err(fast, slow) <= 1e-6
            assert torch.equal(fast == 0, slow == 0)  # hidden keys exactly 0, the rest not
    # whole rows from the lse sum to 1 (exp(-inf) rows to 0): the lse is the formula's
    full = shaped_weights(q[1], k[1], lse[1], shape, rows=range(lq), lq=lq, lk=lk)
    total = torch.ones(lq)
    if shape.sinks is not None:  # the sink takes its share of each row
        total = total - torch.exp(shape.sinks[1] - lse[1])
    assert _err(full.sum(-1), total) <= 1e-5
    wrong = shaped_weights(q[1], k[1], lse[1] - 1.0, shape, rows=range(lq), lq=lq, lk=lk)
    assert _err(wrong.sum(-1), full.sum(-1)) > 1.0  # a wrong lse shows


@SETTINGS
@given(inputs(max_len=40))
def test_the_pytorch_fallback_still_equals_the_formula(inputs):
    """Without the kernel, the explicit path's PyTorch tiles (small ones: row blocks, causal
    skipping and tails) give the same values, weights, logsumexp and gradients."""
    import attnlab.core._tiles as tiles

    q, k, v, mask, causal, _ = inputs
    group = q.shape[-3] // k.shape[-3]
    ref_out, ref_w, ref_lse = reference(q, _expand_kv(k, group), _expand_kv(v, group), mask,
                                        causal)
    saved = _kernel.get, tiles._TILE_BYTES, tiles._MIN_ROWS
    _kernel.get, tiles._TILE_BYTES, tiles._MIN_ROWS = (lambda: None), 4 * 12 * 70, 5
    try:
        assert why_not_kernel(q, k, v, mask) is not None
        qg = q.clone().requires_grad_()
        out, w, lse = attnlab.scaled_dot_product_attention(
            qg, k, v, mask, causal=causal, return_weights=True, return_lse=True)
        assert not _through_kernel(out)
        grad = torch.autograd.grad(out.sum() + w.pow(2).sum(), qg)[0]
    finally:
        _kernel.get, tiles._TILE_BYTES, tiles._MIN_ROWS = saved
    assert _err(out, ref_out) <= 1e-5 and _err(w, ref_w) <= 1e-5
    alive = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), alive) and _err(lse[alive], ref_lse[alive]) <= 1e-5
    qd = q.double().requires_grad_()
    ref_out, ref_w, _ = reference(qd, _expand_kv(k, group), _expand_kv(v, group), mask, causal)
    want = torch.autograd.grad(ref_out.sum() + ref_w.pow(2).sum(), qd)[0]
    assert _err(grad, want) <= 1e-4


@pytest.mark.parametrize("form", ["scalar-true", "scalar-false", "scalar-float", "key-1d",
                                  "row-float", "transposed", "per-head"])
def test_every_mask_form_broadcasts_as_the_formula_says(form):
    g = torch.Generator().manual_seed(11)
    q, k, v = torch.randn(2, 3, 5, 4, generator=g), *torch.randn(2, 2, 3, 7, 4, generator=g)
    mask = {"scalar-true": torch.tensor(True), "scalar-false": torch.tensor(False),
            "scalar-float": torch.tensor(-1.5), "key-1d": torch.rand(7, generator=g) > 0.4,
            "row-float": torch.randn(5, 1, generator=g),
            "transposed": (torch.rand(7, 5, generator=g) > 0.4).T,
            "per-head": torch.rand(3, 1, 7, generator=g) > 0.4}[form]
    out, w = attnlab.scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    ref_out, ref_w, _ = reference(q, k, v, mask.expand(2, 3, 5, 7))
    assert _err(out, ref_out) <= 1e-5 and _err(w, ref_w) <= 1e-5
    if mask.dtype == torch.bool and mask.dim():  # read the wrong way round: caught
        bad = attnlab.scaled_dot_product_attention(q, k, v, ~mask, return_weights=True)[1]
        assert _err(bad, ref_w) > 1e-3
