"""fused-qkv-speed: the timing machinery, verdicts from a fake clock (no test depends on how
fast this machine is), and the informative encoder-layer rows."""

from __future__ import annotations

import pytest
import torch
from zh_helpers import untranslated

from attnlab.experiments import _common
from attnlab.experiments import fused_qkv_speed as fq

TINY = ((1, 4, 8), (2, 3, 16))


class FakeClock:
    """A clock that only moves when a variant says it costs time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def costing(self, fn, seconds: float):
        def timed(*args):
            self.now += seconds
            return fn(*args)
        return timed


def _run(fused_cost: float, separate_cost: float, **kw):
    clock = FakeClock()
    return fq.run(plot=kw.pop("plot", False), sizes=TINY, rounds=2, repeats=3, layers=False,
                  clock=clock, fused_fn=clock.costing(fq.project_fused, fused_cost),
                  separate_fn=clock.costing(fq.project_separate, separate_cost), **kw)


def test_faster_fused_projection_holds():
    r = _run(1.0, 1.25, plot=True)
    assert r.measured == pytest.approx(1.25) and r.holds and r.passed
    assert all(c.passed for c in r.checks)
    assert [row[4] for row in r.table[1][:4]] == pytest.approx([1.25] * 4)
    assert untranslated(r, _common.ZH, fq.ZH) == []


@pytest.mark.parametrize("fused_cost, separate_cost", [(1.0, 1.0), (1.0, 1.02), (2.0, 1.0)])
def test_equal_marginal_or_slower_fused_does_not_hold(fused_cost, separate_cost):
    """Equal time, a 2 % gain (below the margin) and a deliberately slow fused variant: the
    claim does not hold, and that is the run's result (timed: no verdict is expected in
    advance), not a defect."""
    r = _run(fused_cost, separate_cost)
    assert r.timed and not r.holds and r.passed and r.finding


def test_the_verdict_is_the_geometric_mean_of_the_cases():
    """Fused twice as fast at E = 8 and 30 % slower at E = 16: mean ratio √(2 · 0.7)."""
    clock = FakeClock()
    costs = {8: (1.0, 2.0), 16: (1.0, 0.7)}

    def fused(x, f, s):
        clock.now += costs[x.shape[-1]][0]
        return fq.project_fused(x, f, s)

    def separate(x, f, s):
        clock.now += costs[x.shape[-1]][1]
        return fq.project_separate(x, f, s)

    r = fq.run(plot=False, sizes=TINY, rounds=1, repeats=3, layers=False, clock=clock,
               fused_fn=fused, separate_fn=separate)
    assert r.measured == pytest.approx((2.0 * 0.7) ** 0.5) and r.holds
    assert [row[4] for row in r.table[1][:4]] == pytest.approx([2.0, 2.0, 0.7, 0.7])


def test_a_fused_variant_computing_something_else_is_caught():
    def swapped(x, fused, separate):
        q, k, v = fq.project_fused(x, fused, separate)
        return k, q, v

    clock = FakeClock()
    r = fq.run(plot=False, sizes=TINY, rounds=1, repeats=1, layers=False, clock=clock,
               fused_fn=clock.costing(swapped, 1.0),
               separate_fn=clock.costing(fq.project_separate, 2.0))
    assert not r.holds
    assert not next(c for c in r.checks if c.name.startswith("fused and separate")).passed
    assert not r.passed  # a wrong projection is a defect whatever the timing


def test_interleaved_times_alternate_and_keep_the_min_of_medians():
    order: list[str] = []
    ticks = iter([0, 5, 5, 6, 6, 7, 7, 8,  # round 1: a 5, b 1, b 1, a 1 -> medians a 3, b 1
                  0, 2, 2, 6, 6, 8, 8, 9])  # round 2: a 2, b 4, b 2, a 1 -> medians a 1.5, b 3
    t = fq.interleaved_times({"a": lambda: order.append("a"), "b": lambda: order.append("b")},
                             rounds=2, repeats=2, clock=lambda: next(ticks))
    assert order == ["a", "b", "b", "a"] * 2
    assert t == {"a": 1.5, "b": 1.0}
    with pytest.raises(ValueError, match="rounds, repeats and number must be >= 1"):
        fq.interleaved_times({"a": lambda: None}, rounds=0, repeats=1)


def test_projections_are_the_same_function():
    torch.manual_seed(0)
    fused = torch.nn.Linear(8, 24)
    separate = [torch.nn.Linear(8, 8) for _ in range(3)]
    with torch.no_grad():
        for i, lin in enumerate(separate):
            lin.weight.copy_(fused.weight[8 * i:8 * (i + 1)])
            lin.bias.copy_(fused.bias[8 * i:8 * (i + 1)])
    x = torch.randn(2, 5, 8)
    for a, b in zip(fq.project_fused(x, fused, separate), fq.project_separate(x, fused, separate)):
        assert torch.allclose(a, b, atol=1e-6)


def test_encoder_layer_rows_are_measured():
    """torch's layer against attnlab's and against article 001's corrected module (in a
    fresh interpreter): rows present with positive times; their values are not judged."""
    r = fq.run(plot=False, sizes=TINY[:1], rounds=1, repeats=1, layers=True)
    rows = {row[1]: row for row in r.table[1]}
    ours = rows["torch nn.TransformerEncoderLayer | attnlab (this process), forward, eval"]
    art = next(v for k, v in rows.items() if "article 001's corrected" in k)
    assert ours[2] > 0 and ours[3] > 0 and art[2] > 0 and art[3] > 0
    assert ours[4] == pytest.approx(ours[3] / ours[2])
    assert r.table[1][-1][0] == "load average (1 min) before | after"

