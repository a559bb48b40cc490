"""The statistics :mod:`.contextualisation` decides with: how surely two groups of leans
separate (a label-permutation p-value, exact over every split when there are few), from
which layer on they separate, and the labels shuffled as a control."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import Tensor

from attnlab._errors import check_int

#: Smallest margin of the per-context checks (a lean of exactly 0 is no lean).
MARGIN = 1e-3
#: Random relabellings of the contexts for the separation's permutation p-value (seeded).
PERMUTATIONS = 999

def permutation_p(fruit: Tensor, company: Tensor, permutations: int = PERMUTATIONS,
                  seed: int = 0) -> Tensor:
    """Per layer, the label-permutation p-value of :attr:`Leans.separation`: the leans of
    ``fruit`` (S_f, L + 1) and ``company`` (S_c, L + 1) pooled, split ``permutations``
    times at random (a generator seeded with ``seed``) into S_f "fruit" and S_c "company"
    contexts, and ``p = (1 + #{splits whose separation ≥ the real one}) / (1 +
    permutations)`` (the real split counted once, so p > 0).

    >>> f, c = torch.tensor([[1.0], [2.0]]), torch.tensor([[-1.0], [-2.0]])
    >>> float(permutation_p(f, c, 99)[0]) < 0.3, float(permutation_p(c, f, 99)[0])
    (True, 1.0)
    """
    check_int("permutations", permutations, minimum=1)
    pooled = torch.cat([fruit, company])  # (S, L + 1)
    n_f = fruit.shape[0]
    g = torch.Generator().manual_seed(seed)
    perms = torch.stack([torch.randperm(pooled.shape[0], generator=g)
                         for _ in range(permutations)])  # (P, S)
    x = pooled[perms]  # (P, S, L + 1)
    sep = x[:, :n_f].min(1).values - x[:, n_f:].max(1).values  # (P, L + 1)
    observed = fruit.min(0).values - company.max(0).values
    return (1 + (sep >= observed).sum(0)).double() / (1 + permutations)


def exact_p(fruit: Tensor, company: Tensor) -> Tensor:
    """Per layer, the exact permutation p-value of :attr:`Leans.separation`: the share of
    all ways to split the pooled contexts into S_f "fruit" and S_c "company" ones whose
    separation is ≥ the real one (at least 1 / C(S_f + S_c, S_f): the real split is one).

    >>> float(exact_p(torch.tensor([[1.0], [2.0]]), torch.tensor([[-1.0], [-2.0]]))[0])
    0.16666666666666666
    """
    pooled = torch.cat([fruit, company])
    n_f = fruit.shape[0]
    splits = torch.tensor(list(itertools.combinations(range(pooled.shape[0]), n_f)))
    inside = torch.zeros(len(splits), pooled.shape[0], dtype=torch.bool)
    inside[torch.arange(len(splits))[:, None], splits] = True
    big = torch.finfo(pooled.dtype).max
    x = pooled[None]  # (1, S, L + 1)
    lo = torch.where(inside[..., None], x, big).min(1).values
    hi = torch.where(inside[..., None], -big, x).max(1).values
    observed = fruit.min(0).values - company.max(0).values
    return ((lo - hi) >= observed).double().mean(0)


def separating_from(separation: Tensor, margin: float = MARGIN) -> int:
    """The first layer of the run of layers, up to the last, whose separation is ≥
    ``margin`` in each (the number of layers, L + 1, when the last layer does not
    separate).

    >>> separating_from(torch.tensor([0.0, 0.1, -0.1, 0.1, 0.2]))
    3
    >>> separating_from(torch.tensor([0.1, 0.1, 0.0]))
    3
    """
    first = separation.shape[0]
    while first > 0 and float(separation[first - 1]) >= margin:
        first -= 1
    return first


def shuffled(fruit: Sequence[str], company: Sequence[str], seed: int
             ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Wrong on purpose: ``fruit`` and ``company`` pooled and split at random (a generator
    seeded with ``seed``) into groups of their sizes, the first group holding some fruit
    and some company sentences (never the split as given)."""
    pooled = [*fruit, *company]
    if len(fruit) < 2 or not company:
        raise ValueError("shuffling the labels needs at least two fruit sentences and one "
                         "company sentence")
    g = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(len(pooled), generator=g).tolist()
        a = tuple(pooled[i] for i in order[:len(fruit)])
        if 0 < len(set(a) & set(fruit)) < len(fruit):
            return a, tuple(pooled[i] for i in order[len(fruit):])
