"""Test sizes of the experiments, and how a test reads a result whose model may be absent."""

from __future__ import annotations

import pytest

from attnlab.experiments import multihead_cost as mhc
from attnlab.experiments import one_relation_per_head as orh
from attnlab.experiments import qkv_roles as qkv
from attnlab.experiments._heads import TwoRelationTask

#: Smaller sizes than ``attnlab verify`` uses, still large enough for every verdict to come
#: out as expected (each experiment's own test file checks the numbers behind it).
FAST: dict[str, dict] = {
    "qk-variance": dict(pairs=2**18, dims=(16, 64, 256)),
    "softmax-saturation": dict(rows=128),
    "linear-attention": dict(lengths=(512, 1024, 2048), repeats=1, n_exact=100),
    "multihead-cost": dict(config=mhc.HeadsConfig(seeds=1), n=16),
    "one-relation-per-head": dict(
        config=orh.RelationConfig(runs=((TwoRelationTask("offsets"), 100),))),
    "qkv-roles": dict(config=qkv.RolesConfig(steps=150)),
    "pe-frequency-roles": dict(samples=500),
    "contextualisation": dict(permutations=199),
}


class Unavailable:
    """Stands for an experiment whose real model is not installed here."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def result_of(results: dict, name: str):
    """The Result of ``name``, or skip the test when its model is not installed."""
    r = results[name]
    if isinstance(r, Unavailable):
        # justified: the experiment needs a real model package the Makefile installs
        pytest.skip(f"{name}: {r.reason}")
    return r
