"""Average-linkage clustering of heads by the nearest-neighbour chain: the clusters of
merging the globally most similar pair each time (two independent references), at sizes
where that reference is still affordable; what linkage it is (single and complete linkage
give other clusters on the same data); ties, NaN and bad input; the pooled patterns'
memory cap and the blocked cosine."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rows_only_trace import RowsOnlyTrace

from attnlab.analysis import cluster_heads, diagnose
from attnlab.analysis import heads as heads_module
from attnlab.analysis.heads import POOLED_BYTES, pooled_block
from attnlab.analysis.scores import pattern_cosine


def _greedy(sim: torch.Tensor, threshold: float, link: str = "average") -> list[int]:
    """Merge the globally most similar pair of clusters (the first in row-major order on a
    tie) while their linkage is >= threshold; O(n³), a reference only."""
    s = sim.double().numpy()
    n = len(s)
    members = {i: [i] for i in range(n)}
    reduce = {"average": np.mean, "single": np.max, "complete": np.min}[link]
    while len(members) > 1:
        keys = sorted(members)
        best, pair = -np.inf, None
        for ia, a in enumerate(keys):
            for b in keys[ia + 1:]:
                v = reduce(s[np.ix_(members[a], members[b])])
                if v > best:
                    best, pair = v, (a, b)
        if best < threshold:
            break
        a, b = pair
        members[a] += members.pop(b)
    label = {i: k for k, m in members.items() for i in m}
    order: dict[int, int] = {}
    return [order.setdefault(label[i], len(order)) for i in range(n)]


def _greedy_sums(sim: torch.Tensor, threshold: float) -> list[int]:
    """The same greedy average linkage kept as sums of similarities (the form attnlab
    shipped before the chain), vectorised, to check it at a few hundred heads."""
    s = sim.double().numpy()
    n = len(s)
    owner, sums, sizes = np.arange(n), s.copy(), np.ones(n)
    alive = np.ones(n, dtype=bool)
    mean = sums / np.outer(sizes, sizes)
    np.fill_diagonal(mean, -np.inf)
    while n > 1:
        a, b = np.unravel_index(int(np.argmax(mean)), mean.shape)
        if mean[a, b] < threshold:
            break
        a, b = min(a, b), max(a, b)
        owner[owner == b] = a
        sums[a, :] += sums[b, :]
        sums[:, a] += sums[:, b]
        sizes[a] += sizes[b]
        alive[b] = False
        row = np.where(alive, sums[a] / (sizes[a] * sizes), -np.inf)
        mean[a, :], mean[:, a] = row, row
        mean[b, :], mean[:, b] = -np.inf, -np.inf
        mean[a, a] = -np.inf
    order: dict[int, int] = {}
    return [order.setdefault(int(o), len(order)) for o in owner]


def _clustered(n: int, groups: int, spread: float, seed: int, dim: int = 24) -> torch.Tensor:
    """Cosine similarity of n unit vectors around ``groups`` centres (and the order
    shuffled, so that clusters are not runs of indices)."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(groups, dim, generator=g, dtype=torch.float64)
    x = centres[torch.randint(groups, (n,), generator=g)]
    x = x + spread * torch.randn(n, dim, generator=g, dtype=torch.float64)
    x = x / x.norm(dim=-1, keepdim=True)
    return (x @ x.T).float()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("threshold", [0.3, 0.6, 0.8, 0.95])
def test_the_chain_gives_the_clusters_of_merging_the_most_similar_pair_first(seed, threshold):
    s = _clustered(60, 7, 0.6, seed)
    got = cluster_heads(s, threshold)
    assert got == _greedy(s, threshold)
    assert got == _greedy_sums(s, threshold)


@pytest.mark.parametrize("threshold", [0.5, 0.9])
def test_the_chain_agrees_with_the_greedy_at_a_few_hundred_heads(threshold):
    s = _clustered(400, 40, 0.5, seed=3, dim=48)
    got = cluster_heads(s, threshold)
    assert got == _greedy_sums(s, threshold)
    assert 1 < len(set(got)) < 400


def test_it_is_average_linkage_not_single_or_complete():
    """On the same data the three linkages disagree, and the chain sides with average:
    a test that passed for another linkage would not be testing this one."""
    s = _clustered(60, 7, 0.6, seed=0)
    got = cluster_heads(s, 0.6)
    assert got == _greedy(s, 0.6, "average")
    assert got != _greedy(s, 0.6, "single")
    assert got != _greedy(s, 0.6, "complete")


def test_identical_heads_ties_nan_and_edges():
    ones = torch.ones(5, 5)
    assert cluster_heads(ones, 0.9) == [0] * 5  # every pair tied at 1
    block = torch.block_diag(torch.ones(3, 3), torch.ones(2, 2))
    assert cluster_heads(block[[0, 3, 1, 4, 2]][:, [0, 3, 1, 4, 2]], 0.5) == [0, 1, 0, 1, 0]
    nan = torch.ones(3, 3)
    nan[0, 1] = nan[1, 0] = float("nan")
    # 0 and 1 never merge with each other; each may join 2, and then the NaN pair's mean is
    # not >= the threshold either
    got = cluster_heads(nan, 0.5)
    assert got[0] != got[1]
    assert cluster_heads(torch.ones(1, 1), 0.9) == [0]
    assert cluster_heads(torch.ones(0, 0), 0.9) == []
    assert cluster_heads(torch.eye(4), 0.9) == [0, 1, 2, 3]
    assert cluster_heads(torch.eye(4), -1.0) == [0, 0, 0, 0]  # everything is similar enough


def test_bad_input_is_named():
    with pytest.raises(ValueError, match=r"similarity must be a square \(n, n\) tensor, got "
                                         r"shape \(2, 3\)"):
        cluster_heads(torch.ones(2, 3))
    with pytest.raises(ValueError, match="got list"):
        cluster_heads([[1.0]])
    with pytest.raises(TypeError, match="threshold must be a number, got str"):
        cluster_heads(torch.ones(2, 2), "0.9")


def test_thousands_of_heads_cluster_as_the_structure_says():
    """5,120 heads (a 70B-class model: 80 layers x 64) in 64 groups: the chain finds the
    groups (no reference is affordable here: the greedy is O(n³))."""
    n, groups = 5120, 64
    g = torch.Generator().manual_seed(5)
    centres = torch.linalg.qr(torch.randn(128, groups, generator=g, dtype=torch.float64))[0].T
    label = torch.randint(groups, (n,), generator=g)
    x = centres[label] + 0.02 * torch.randn(n, 128, generator=g, dtype=torch.float64)
    x = x / x.norm(dim=-1, keepdim=True)
    got = torch.tensor(cluster_heads((x @ x.T).float(), 0.9))
    # the same partition as the groups, whatever the numbering
    pairs = set(zip(got.tolist(), label.tolist()))
    assert len(pairs) == len(set(got.tolist())) == len(set(label.tolist()))


def test_pooled_patterns_are_capped_and_coarsen_with_the_heads(monkeypatch):
    assert pooled_block(270, 8192, 8192, 256) == 32  # SmolLM2: 256 blocks a side, 71 MB
    block = pooled_block(16128, 3072, 3072, 256)
    side = -(-3072 // block)
    assert 16128 * side * side * 4 <= POOLED_BYTES < 16128 * (side + 1) ** 2 * 4
    assert pooled_block(4, 10, 10, 256, budget=1) == 10  # never coarser than one block
    # diagnose follows the cap: four heads of 40 tokens, room for 4 x 10 x 10 floats
    w = torch.softmax(torch.randn(4, 40, 40, generator=torch.Generator().manual_seed(0)), -1)
    trace = RowsOnlyTrace(w[None])
    monkeypatch.setattr(heads_module, "POOLED_BYTES", 4 * 10 * 10 * 4)
    d = diagnose(trace, max_blocks=40)
    assert d.meta["similarity_block"] == 4 and d.pooled.shape == (1, 4, 10, 10)


def test_the_blocked_cosine_is_the_one_product():
    g = torch.Generator().manual_seed(1)
    pooled = torch.rand(3, 5, 6, 6, generator=g)
    flat = pooled.reshape(15, -1).double()
    flat = flat / flat.norm(dim=-1, keepdim=True)
    want = (flat @ flat.T).float()
    for rows in (1, 4, 15, 1024):
        got = pattern_cosine(pooled, block_rows=rows)
        assert got.dtype == torch.float32 and torch.allclose(got, want, atol=1e-7, rtol=0)
    one_turned = pooled.clone()
    one_turned[0, 0] = pooled[0, 0].T  # one head's pattern transposed: its cosines move
    assert not torch.allclose(pattern_cosine(one_turned), want, atol=1e-3)
