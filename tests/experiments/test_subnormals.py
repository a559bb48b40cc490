"""Training through a saturated softmax flushes subnormal floats to zero: the same losses,
bit for bit, without the CPU's slow path for subnormal arithmetic."""

from __future__ import annotations

import contextlib

import pytest
import torch

from attnlab.experiments import scaling_training as st
from attnlab.experiments._common import flushing_subnormals, seeded, subnormals_flushed

TINY = 1e-39  # a float32 subnormal (the smallest normal float32 is 1.18e-38)


def test_the_block_flushes_and_what_was_set_before_comes_back():
    assert torch.set_flush_denormal(False)  # an x86-64 CPU can (SSE3's DAZ and FTZ)
    assert not flushing_subnormals()
    # flushing can change a result: a subnormal scaled up is a normal number, or 0
    assert (torch.tensor([TINY]) * 1e30).item() == pytest.approx(1e-9)
    with subnormals_flushed():
        assert flushing_subnormals()
        assert (torch.tensor([TINY]) * 1e30).item() == 0.0
    assert not flushing_subnormals()
    # already flushing: the block leaves it so
    torch.set_flush_denormal(True)
    try:
        with subnormals_flushed():
            assert flushing_subnormals()
        assert flushing_subnormals()
    finally:
        torch.set_flush_denormal(False)
    # and an error inside the block restores it too
    with pytest.raises(RuntimeError, match="inside"), subnormals_flushed():
        raise RuntimeError("inside")
    assert not flushing_subnormals()


def _unscaled_losses(monkeypatch, flush: bool, steps: int = 12) -> tuple[list[float], bool]:
    """The unscaled recall model's losses over ``steps`` Adam steps, flushed or not, and
    whether any gradient of its last step was subnormal."""
    if not flush:
        monkeypatch.setattr(st, "subnormals_flushed", contextlib.nullcontext)
    c = st.RecallConfig(steps=steps)
    with seeded(0) as g:
        model = st.RecallModel(c, 1.0)
        losses = st.fit_recall(model, c, g, steps, c.lr)
    monkeypatch.undo()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    size = grads.abs()
    return losses, bool(((size > 0) & (size < torch.finfo(torch.float32).tiny)).any())


def test_unscaled_training_meets_subnormals_and_flushing_them_changes_no_loss(monkeypatch):
    plain, subnormal = _unscaled_losses(monkeypatch, flush=False)
    flushed, after_flush = _unscaled_losses(monkeypatch, flush=True)
    assert subnormal  # the saturated softmax's gradients: what the flush is for
    assert not after_flush  # flushed: none is left
    assert flushed == plain  # every loss, bit for bit (flushing could change them: above)
    assert not flushing_subnormals()
