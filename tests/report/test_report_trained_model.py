"""The report's trained-model section, on a tiny run (an untrained model must not pass)."""

from __future__ import annotations

from attnlab.report.trained_model import section_for
from attnlab.train.config import TrainConfig
from attnlab.train.summary import ensure_run, summarize_run


def test_section_renders_and_fails_for_an_undertrained_model(tmp_path):
    cfg = TrainConfig.for_task("induction", num_layers=2, num_heads=2, embed_dim=16,
                               batch_size=8, steps=3, warmup_steps=2, checkpoint_every=3,
                               log_every=2, eval_batches=2)
    run = tmp_path / "trained-induction"
    ensure_run(run, cfg)
    s = section_for(summarize_run(run))
    # two figures, each drawn in English and in Chinese
    assert s.id == "trained-model" and s.html.count("<svg") == 4
    assert 'class="zh' in s.html
    assert len(s.rows) == 4 and s.passed is False  # 3 steps do not make an induction head
    assert "induction head found" in s.rows[2][0]
    assert "2 layers x 2 heads, dim 16" in s.html


def test_lookup_part_renders_and_fails_for_an_undertrained_model(tmp_path):
    from attnlab.report.trained_model import lookup_part

    cfg = TrainConfig.for_task("assoc-recall", num_layers=2, num_heads=2, embed_dim=16,
                               batch_size=8, steps=3, warmup_steps=2, checkpoint_every=3,
                               log_every=2, eval_batches=2)
    run = tmp_path / "trained-assoc-recall"
    ensure_run(run, cfg)
    html, rows, passed = lookup_part(summarize_run(run))
    assert html.count("<svg") == 2 and 'class="zh' in html and "查找头" in html
    assert len(rows) == 2 and "lookup head found" in rows[1][0]
    assert passed is False  # 3 steps do not learn the lookup (it reaches 1.0 in 400)


def test_lookup_part_refuses_a_run_of_another_task(tmp_path):
    import pytest

    from attnlab.report.trained_model import lookup_part

    cfg = TrainConfig.for_task("induction", num_layers=1, num_heads=1, embed_dim=8,
                               batch_size=4, steps=1, warmup_steps=1, checkpoint_every=1,
                               log_every=1, eval_batches=1)
    ensure_run(tmp_path / "run", cfg)
    with pytest.raises(ValueError, match="assoc-recall run, got task 'induction'"):
        lookup_part(summarize_run(tmp_path / "run"))
