"""The report's induction run as data: reused when finished, checked when read back (an
untrained model must not pass)."""

from __future__ import annotations

from attnlab.train.summary import ensure_run, summarize_run


def test_run_is_reused_and_an_undertrained_model_fails_its_checks(tmp_path, tiny):
    cfg = tiny("induction", num_layers=2, steps=3)
    run = tmp_path / "trained-induction"
    ensure_run(run, cfg)
    mtime = (run / "checkpoint.safetensors").stat().st_mtime_ns
    ensure_run(run, cfg)  # finished and same config: reused, not retrained
    assert (run / "checkpoint.safetensors").stat().st_mtime_ns == mtime
    s = summarize_run(run)
    assert s.config == cfg and s.final["step"] == 3
    assert [ok for _, _, ok in s.checks][0] is False  # 3 steps: far from 95% accuracy
    assert not s.passed and "induction head found" in s.checks[2][0]
    n = len(s.example_tokens)
    assert tuple(s.example_weights.shape) == (2, 2, n, n)
    rows = s.example_weights.sum(-1)  # causal softmax rows sum to one
    assert float((rows - 1).abs().max()) < 1e-5


def test_a_changed_config_trains_afresh(tmp_path, tiny):
    run = tmp_path / "trained-induction"
    ensure_run(run, tiny("induction", num_layers=2, steps=3))
    longer = tiny("induction", num_layers=2, steps=4, checkpoint_every=4)
    ensure_run(run, longer)
    assert summarize_run(run).final["step"] == 4


def test_a_folder_of_user_files_is_refused_and_left_alone(tmp_path, tiny):
    import pytest

    from attnlab.train.checkpoint import CheckpointError

    run = tmp_path / "mine"
    run.mkdir()
    (run / "notes.txt").write_text("keep me")
    (run / ".draft.tmp").write_text("keep me too")
    with pytest.raises(CheckpointError, match="not an attnlab run"):
        ensure_run(run, tiny("induction", num_layers=2, steps=3))
    assert sorted(p.name for p in run.iterdir()) == [".draft.tmp", "notes.txt"]


def test_retraining_a_run_keeps_the_users_files_beside_it(tmp_path, tiny):
    run = tmp_path / "trained-induction"
    ensure_run(run, tiny("induction", num_layers=2, steps=3))
    (run / "notes.txt").write_text("keep me")
    ensure_run(run, tiny("induction", num_layers=2, steps=4, checkpoint_every=4))
    assert (run / "notes.txt").read_text() == "keep me"
    assert summarize_run(run).final["step"] == 4
