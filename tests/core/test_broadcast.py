"""attnlab's own ``broadcast_shapes`` (its checks' shapes, without torch.fx) gives what
``torch.broadcast_shapes`` gives, and refuses what it refuses."""

from __future__ import annotations

import random

import pytest
import torch

from attnlab.core._checks import broadcast_shapes


def test_it_agrees_with_torch_on_random_shapes():
    rng = random.Random(0)
    refused = 0
    for _ in range(2000):
        shapes = [tuple(rng.choice((0, 1, 1, 2, 3)) for _ in range(rng.randint(0, 4)))
                  for _ in range(rng.randint(1, 4))]
        try:
            expected = tuple(torch.broadcast_shapes(*shapes))
        except RuntimeError:
            refused += 1
            with pytest.raises(ValueError, match="do not broadcast"):
                broadcast_shapes(*shapes)
        else:
            assert broadcast_shapes(*shapes) == expected, shapes
    assert 200 < refused < 1800  # both ways were exercised


def test_it_takes_torch_sizes_and_names_the_clash():
    assert broadcast_shapes(torch.Size([4, 1, 3]), torch.Size([5, 1])) == (4, 5, 3)
    assert broadcast_shapes() == ()
    with pytest.raises(ValueError, match=r"shapes \(2, 3\) and \(4, 3\) do not broadcast: "
                                         r"2 against 4 at dim -2"):
        broadcast_shapes((2, 3), (4, 3))


def test_a_wrong_rule_would_be_caught():
    """The wrong variant: a broadcast that aligns shapes from the left disagrees with torch
    on the shapes above."""
    def from_left(*shapes):
        n = max(map(len, shapes))
        padded = [tuple(s) + (1,) * (n - len(s)) for s in shapes]
        return tuple(max(col) for col in zip(*padded))

    assert from_left((2, 1, 4), (3, 1)) != tuple(torch.broadcast_shapes((2, 1, 4), (3, 1)))
    assert broadcast_shapes((2, 1, 4), (3, 1)) == (2, 3, 4)
