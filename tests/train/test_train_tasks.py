"""Tasks: deterministic in (seed, split, step), scored positions answerable, splits apart."""

from __future__ import annotations

import pytest
import torch

from attnlab.train.tasks import TASKS, get_task


@pytest.mark.parametrize("name", list(TASKS))
def test_batch_is_a_pure_function_of_seed_split_step(name):
    t = get_task(name)
    a, b = t.batch(5, 8, seed=3), t.batch(5, 8, seed=3)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.scored, b.scored)
    other = t.batch(6, 8, seed=3)
    held = t.batch(5, 8, seed=3, split="eval")
    assert not torch.equal(a.inputs, other.inputs)
    assert not torch.equal(a.inputs, held.inputs)
    assert a.inputs.shape == (8, t.seq_len - 1) and a.targets.shape == a.inputs.shape
    assert int(a.inputs.max()) < t.vocab_size and int(a.inputs.min()) >= 0
    assert a.scored.any(dim=1).all()
    # next-token framing: the targets are the inputs shifted by one
    assert torch.equal(a.inputs[:, 1:], a.targets[:, :-1])


@pytest.mark.parametrize("name", list(TASKS))
def test_rank_slices_make_the_global_batch(name):
    t = get_task(name)
    full = t.batch(2, 8, seed=0)
    parts = [full.slice(r, 2) for r in range(2)]
    assert torch.equal(torch.cat([p.inputs for p in parts]), full.inputs)
    with pytest.raises(ValueError, match="divisible"):
        full.slice(0, 3)


def _oracle(name, x):
    """The answer the task's relation gives, for every scored position of row x (N+1,)."""
    t = get_task(name)
    n = t.n
    if name == "copy":
        return x[1:n + 1]
    if name == "reverse":
        return x[1:n + 1].flip(0)
    if name == "sort":
        return x[1:n + 1].sort().values
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["copy", "reverse", "sort"])
def test_seq2seq_scored_targets_follow_the_relation(name):
    t = get_task(name)
    b = t.batch(0, 16, seed=1)
    for i in range(16):
        x = torch.cat([b.inputs[i], b.targets[i, -1:]])
        assert torch.equal(b.targets[i][b.scored[i]], _oracle(name, x))
    if name != "copy":  # a wrong relation (plain copy) does not fit reverse/sort
        wrong = sum(torch.equal(b.targets[i][b.scored[i]], _oracle("copy", torch.cat(
            [b.inputs[i], b.targets[i, -1:]]))) for i in range(16))
        assert wrong < 4


def _induction_rule(x, t, offset=1):
    """Predict by finding the last earlier occurrence of x[t] and reading `offset` after it."""
    earlier = (x[:t] == x[t]).nonzero().flatten()
    return None if len(earlier) == 0 else int(x[int(earlier[-1]) + offset])


def test_induction_is_solved_by_the_induction_rule_and_not_by_a_wrong_one():
    t = get_task("induction")
    b = t.batch(0, 32, seed=0)
    right = wrong = total = 0
    for i in range(32):
        for pos in b.scored[i].nonzero().flatten().tolist():
            total += 1
            right += _induction_rule(b.inputs[i], pos) == int(b.targets[i, pos])
            wrong += _induction_rule(b.inputs[i], pos, offset=0) == int(b.targets[i, pos])
    assert right == total  # the relation the task names answers every scored position
    assert wrong == 0  # copying the matched token itself never does
    # the segment length varies, so no fixed positional offset answers it
    lengths = {int(b.scored[i].sum()) for i in range(32)}
    assert len(lengths) > 2


def test_assoc_recall_answer_is_the_value_after_the_query_key():
    t = get_task("assoc-recall")
    b = t.batch(0, 16, seed=0)
    for i in range(16):
        x = b.inputs[i]
        assert _induction_rule(x, len(x) - 1) == int(b.targets[i, -1])
        assert b.scored[i].sum() == 1 and b.scored[i, -1]


def test_modular_add_held_out_pairs_never_appear_in_training():
    t = get_task("modular-add")
    s = t.n_specials
    train = {tuple(r) for i in range(20)
             for r in t.batch(i, 64, seed=0).inputs[:, [1, 3]].tolist()}
    held = {tuple(r) for i in range(20)
            for r in t.batch(i, 64, seed=0, split="eval").inputs[:, [1, 3]].tolist()}
    assert train and held and not (train & held)
    b = t.batch(0, 64, seed=0)
    a_, b_ = b.inputs[:, 1] - s, b.inputs[:, 3] - s
    assert torch.equal(b.targets[:, -1] - s, (a_ + b_) % t.n_values)


def test_unknown_task_and_bad_split():
    with pytest.raises(ValueError, match="unknown task 'nope'.*induction"):
        get_task("nope")
    with pytest.raises(ValueError, match="split"):
        get_task("copy").batch(0, 2, seed=0, split="test")
