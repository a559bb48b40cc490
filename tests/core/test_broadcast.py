"""attnlab's own ``broadcast_shapes`` (its checks' shapes, without torch.fx) gives what
``torch.broadcast_shapes`` gives, and refuses what it refuses."""

from __future__ import annotations

import random

import pytest
import torch

from attnlab.core._checks import broadcast_shapes


def _disagreements(fn) -> tuple[list, int]:
    """The random shape sets (seeded) on which ``fn`` and ``torch.broadcast_shapes``
    disagree (another shape, or one refuses and the other does not), and how many of the
    sets torch refuses."""
    rng = random.Random(0)
    wrong, refused = [], 0
    for _ in range(2000):
        shapes = [tuple(rng.choice((0, 1, 1, 2, 3)) for _ in range(rng.randint(0, 4)))
                  for _ in range(rng.randint(1, 4))]
        try:
            expected = tuple(torch.broadcast_shapes(*shapes))
        except RuntimeError:
            expected = None
            refused += 1
        try:
            got = fn(*shapes)
        except ValueError as e:
            got = None
            if "do not broadcast" not in str(e):
                wrong.append(shapes)
                continue
        if got != expected:
            wrong.append(shapes)
    return wrong, refused


def test_it_agrees_with_torch_on_random_shapes():
    wrong, refused = _disagreements(broadcast_shapes)
    assert wrong == []
    assert 200 < refused < 1800  # both ways were exercised


def test_it_takes_torch_sizes_and_names_the_clash():
    assert broadcast_shapes(torch.Size([4, 1, 3]), torch.Size([5, 1])) == (4, 5, 3)
    assert broadcast_shapes() == ()
    with pytest.raises(ValueError, match=r"shapes \(2, 3\) and \(4, 3\) do not broadcast: "
                                         r"2 against 4 at dim -2"):
        broadcast_shapes((2, 3), (4, 3))


def test_a_wrong_rule_disagrees():
    """The wrong variants: shapes aligned from the left, or a size 1 that does not give way,
    are caught by the comparison above."""
    def from_left(*shapes):
        n = max(map(len, shapes), default=0)
        padded = [tuple(s) + (1,) * (n - len(s)) for s in shapes]
        return tuple(max(col) for col in zip(*padded))

    def rigid(*shapes):
        n = max(map(len, shapes), default=0)
        padded = [(1,) * (n - len(s)) + tuple(s) for s in shapes]
        if any(len(set(col)) > 1 for col in zip(*padded)):
            raise ValueError("do not broadcast")
        return padded[0] if padded else ()

    assert len(_disagreements(from_left)[0]) > 100
    assert len(_disagreements(rigid)[0]) > 100
