"""The golden score-shaping cases the explorer's JavaScript is checked against: the file
equals what ScoreShape computes now, covers every rule, and its rows are the model's own
attention (exp(s − lse), the sink included)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

from attnlab.core.scores import ScoreShape
from attnlab.viz.codec import decode_blob

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _script():
    spec = importlib.util.spec_from_file_location(
        "make_score_shape_golden", FIXTURES / "make_score_shape_golden.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def stored() -> dict:
    return json.loads((FIXTURES / "score_shape_golden.json").read_text(encoding="utf-8"))


def _close(a, b, path: str) -> None:
    """``a`` equals ``b`` (nested JSON), numbers within 1e-6."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for key in a:
            _close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool) and isinstance(b, (int, float)):
        assert math.isclose(a, b, rel_tol=0, abs_tol=1e-6), f"{path}: {a} != {b}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def test_the_golden_file_is_what_score_shape_computes_now(stored):
    _close(stored, json.loads(json.dumps(_script().golden())), "golden")


def test_the_golden_file_keeps_its_format(stored):
    keys = {"name", "shape", "head", "q", "k", "rows", "temperature", "scores", "probs"}
    shape_keys = {"scale", "causal", "window", "softcap", "alibi", "key_mask", "bias", "sinks"}
    for case in stored["cases"]:
        assert keys <= case.keys(), case["name"]
        assert set(case["shape"]) == shape_keys, case["name"]
        assert len(case["scores"]) == len(case["probs"]) == len(case["rows"])
        assert all(len(r) == len(case["k"]) for r in case["scores"] + case["probs"])


def test_the_golden_cases_cover_every_rule(stored):
    by = {c["name"]: c for c in stored["cases"]}
    sh = [c["shape"] for c in stored["cases"]]
    assert any(s["softcap"] for s in sh) and any(s["alibi"] for s in sh)
    assert any(s["bias"] for s in sh) and any(s["key_mask"] for s in sh)
    assert any(s["window"] and s["causal"] for s in sh)
    assert any(s["window"] and not s["causal"] for s in sh)
    assert any(s["sinks"] and isinstance(s["sinks"][0][0], list) for s in sh)  # per row
    assert any(c["temperature"] != 1.0 for c in stored["cases"])
    assert all(x is None for x in by["fully_masked_row"]["scores"][0])
    assert by["fully_masked_row"]["probs"][0] == [0.0] * 5
    assert sum(by["sink"]["probs"][0]) < 1 - 1e-3  # the sink took its share


def _shape_of(case: dict) -> ScoreShape:
    """The ScoreShape a case's shape payload describes (the dense bias is in ``additive``)."""
    s, f64 = case["shape"], torch.float64
    sinks = None if s["sinks"] is None else torch.tensor(s["sinks"][0], dtype=f64)
    return ScoreShape(
        scale=s["scale"][0], causal=s["causal"], window=s["window"] and s["window"][0],
        softcap=s["softcap"] and s["softcap"][0],
        alibi_slopes=None if s["alibi"] is None else torch.tensor(s["alibi"], dtype=f64),
        key_mask=None if s["key_mask"] is None else decode_blob(s["key_mask"]).bool(),
        sinks=sinks)


def _page_row(case: dict, n: int, *, cap_first: bool = False, alibi_sign: float = 1.0,
              one_sided_window: bool = False) -> torch.Tensor:
    """What the page computes for row ``n`` of a case from its shape payload alone (as
    explorer.js does), in float64; ``cap_first`` (the cap on the unscaled q·k),
    ``alibi_sign`` (−1: the penalty turned into a bonus) and ``one_sided_window`` (a
    bidirectional window that hides only the keys behind) make it wrong."""
    s, i = case["shape"], case["rows"][n]
    lq, lk = len(case["q"]), len(case["k"])
    q = torch.tensor(case["q"][i], dtype=torch.float64)
    k = torch.tensor(case["k"], dtype=torch.float64)
    scale, cap = s["scale"][0], s["softcap"] and s["softcap"][0]
    z = (k @ q) * scale
    if cap:
        z = cap * torch.tanh((k @ q) / cap) * scale if cap_first else cap * torch.tanh(z / cap)
    pos, j = i + lk - lq, torch.arange(lk)
    ok = torch.ones(lk, dtype=torch.bool)
    if s["bias"]:  # no rule: the page is given the additive part (the server's /qk "bias")
        add = case["additive"][n]
        ok = torch.tensor([x is not None for x in add])  # the server's "allowed"
        z = z + torch.tensor([0.0 if x is None else x for x in add], dtype=torch.float64)
    elif s["alibi"] is not None:
        z = z - alibi_sign * s["alibi"][case["head"]] * (pos - j).double()
    if s["key_mask"] is not None:
        ok &= decode_blob(s["key_mask"]).bool()
    if s["causal"]:
        ok &= j <= pos
    if s["window"]:
        ok &= j > pos - s["window"][0]
        if not one_sided_window:
            ok &= j < pos + s["window"][0]
    z = z.masked_fill(~ok, float("-inf")) / case["temperature"]
    sink = None
    if s["sinks"] is not None:
        sk = s["sinks"][0][case["head"]]
        sink = sk[i] if isinstance(sk, list) else sk
    if sink is not None:
        tail = torch.tensor([sink / case["temperature"]], dtype=torch.float64)
        return torch.softmax(torch.cat([z, tail]), -1)[:-1]
    return torch.nan_to_num(torch.softmax(z, -1), nan=0.0)


def test_a_page_that_follows_the_payload_matches_every_golden_row(stored):
    for case in stored["cases"]:
        for n in range(len(case["rows"])):
            got = _page_row(case, n)
            want = torch.tensor(case["probs"][n], dtype=torch.float64)
            assert torch.allclose(got, want, atol=1e-9), (case["name"], n)


@pytest.mark.parametrize("wrong, name", [({"cap_first": True}, "softcap"),
                                         ({"alibi_sign": -1.0}, "alibi"),
                                         ({"one_sided_window": True}, "window_bidirectional")])
def test_a_wrong_page_misses_the_golden_rows(stored, wrong, name):
    case = next(c for c in stored["cases"] if c["name"] == name)
    worst = max(float((_page_row(case, n, **wrong) - torch.tensor(case["probs"][n],
                                                                  dtype=torch.float64)).abs().max())
                for n in range(len(case["rows"])))
    assert worst > 1e-2, worst


def test_golden_rows_are_the_models_attention(stored):
    """At temperature 1, probs = exp(scores − lse) with the eager ScoreShape's lse (sink in)."""
    for case in stored["cases"]:
        if case["temperature"] != 1.0 or case["shape"]["bias"]:
            continue
        shape = _shape_of(case)
        s = torch.tensor([[float("-inf") if x is None else x for x in r]
                          for r in case["scores"]], dtype=torch.float64)
        lse = shape.logsumexp(s, case["head"], case["rows"])
        want = torch.exp(s - lse.masked_fill(lse == float("-inf"), 0.0)[:, None])
        got = torch.tensor(case["probs"], dtype=torch.float64)
        assert torch.allclose(got, want, atol=1e-12), case["name"]
