"""The report's trained-model section, on a tiny run (an untrained model must not pass)."""

from __future__ import annotations

from attnlab.train.report import _ensure_run, trained_model_section


def test_section_renders_and_fails_for_an_undertrained_model(tmp_path, tiny):
    cfg = tiny("induction", n_layer=2, steps=3)
    run = tmp_path / "trained-induction"
    _ensure_run(run, cfg, None)
    mtime = (run / "checkpoint.safetensors").stat().st_mtime_ns
    _ensure_run(run, cfg, None)  # finished and same config: reused, not retrained
    assert (run / "checkpoint.safetensors").stat().st_mtime_ns == mtime
    s = trained_model_section(run)
    assert s.id == "trained-model" and s.html.count("<svg") == 2
    assert '<span class="zh"' in s.html or 'class="zh' in s.html
    assert len(s.rows) == 4 and s.passed is False  # 3 steps do not make an induction head
    assert "induction head found" in s.rows[2][0]
