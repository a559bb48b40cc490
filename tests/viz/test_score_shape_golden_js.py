"""The page's score shaping (core.js: shapeRow + softmaxRow, exposed as
window.AttnlabExplorer.scoreRow) in a real Chromium against the golden cases Python's
ScoreShape wrote (tests/fixtures/score_shape_golden.json): every case within 1e-5, and a
case with its shaping changed on purpose does not match."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from attnlab.viz.assets import static_asset
from attnlab.viz.explorer import decode_blob

pytestmark = pytest.mark.browser

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "score_shape_golden.json"
TOL = 1e-5

# one case at a time: q·k of every key in float64, then core.js's scoring of each row; a
# dense bias (no rule the page can apply) comes as the server sends it: which keys are
# visible and the additive part, to softmaxRow
_ROWS = """([c, keyMask]) => c.rows.map((row, n) => {
  const E = window.AttnlabExplorer, sh = c.shape;
  const dots = c.k.map(kv => kv.reduce((acc, x, i) => acc + c.q[row][i] * x, 0));
  const r = sh.bias
    ? E.softmaxRow({dots: dots, ok: c.scores[n].map(x => x === null ? 0 : 1),
                    bias: c.additive[n].map(x => x === null ? 0 : x),
                    softcap: sh.softcap ? sh.softcap[0] : null, sink: null},
                   sh.scale[0], c.temperature)
    : E.scoreRow(sh, {layer: 0, head: c.head, row: row, dots: dots, lq: c.Lq,
                      keyMask: keyMask, temperature: c.temperature});
  return {scores: Array.from(r.scores || r.z, x => x === -Infinity ? null : x),
          probs: Array.from(r.probs || r.p)};
})"""


def _cases() -> list[dict]:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))["cases"]


def _far(got: list[float | None], want: list[float | None]) -> float:
    """The largest |got − want| over a row; a masked score (−∞, null) must be masked in both."""
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        gm = g is None or g == -math.inf
        wm = w is None or w == -math.inf
        if gm or wm:
            worst = max(worst, 0.0 if gm and wm else math.inf)
        else:
            worst = max(worst, abs(g - w))
    return worst


def _run(page, case: dict) -> list[dict]:
    km = case["shape"]["key_mask"]
    if km is not None:  # a b8 blob, as the payload sends it (the page decodes it once)
        km = [int(x) for x in decode_blob(km).reshape(-1).tolist()]
    assert len(case["q"]) == case["Lq"] and len(case["k"]) == case["Lk"], case["name"]
    return page.evaluate(_ROWS, [case, km])


@pytest.fixture
def scored(page):
    page.set_content(f"<!DOCTYPE html><html><body><script>{static_asset('explorer.js')}"
                     f"</script></body></html>")
    return page


def test_every_golden_case_matches_python_within_1e5(scored):
    cases = _cases()
    assert {"plain", "causal_offset", "softcap", "alibi", "dense_bias", "window_bidirectional",
            "key_mask", "fully_masked_row", "sink_per_row", "temperature_half",
            "everything"} <= {c["name"] for c in cases}
    for case in cases:
        got = _run(scored, case)
        assert len(got) == len(case["rows"]), case["name"]
        for n, row in enumerate(got):
            assert _far(row["scores"], case["scores"][n]) <= TOL, (case["name"], n, "scores")
            assert _far(row["probs"], case["probs"][n]) <= TOL, (case["name"], n, "probs")


def _wrong(case: dict) -> list[tuple[str, dict]]:
    """The case once per rule it has, with that rule changed: soft-cap, ALiBi's sign, the
    window, the sinks, the temperature, the key mask, causality, the dense bias's sign."""
    sh, out = case["shape"], []

    def changed(rule: str, **shape) -> None:
        c = copy.deepcopy(case)
        c["shape"].update(shape)
        out.append((rule, c))

    if sh["softcap"]:
        changed("softcap", softcap=[x / 4 for x in sh["softcap"]])
    if sh["alibi"]:
        changed("alibi", alibi=[-x for x in sh["alibi"]])
    if sh["window"]:
        changed("window", window=[w + 2 for w in sh["window"]])
    if sh["sinks"]:
        changed("sinks", sinks=None)
    if sh["key_mask"]:
        changed("key_mask", key_mask=None)
    if not sh["bias"]:
        changed("causal", causal=not sh["causal"])
    else:
        c = copy.deepcopy(case)
        c["additive"] = [[None if x is None else -x for x in r] for r in c["additive"]]
        out.append(("bias", c))
    if case["temperature"] != 1:
        c = copy.deepcopy(case)
        c["temperature"] = 1.0
        out.append(("temperature", c))
    return out


def test_a_case_with_a_rule_changed_does_not_match(scored):
    rules = set()
    for case in _cases():
        for rule, wrong in _wrong(case):
            got = _run(scored, wrong)
            far = max(max(_far(row["probs"], case["probs"][n]),
                          _far(row["scores"], case["scores"][n])) for n, row in enumerate(got))
            assert far > 1e-3, (case["name"], rule, far)
            rules.add(rule)
    assert rules == {"softcap", "alibi", "window", "sinks", "key_mask", "causal", "bias",
                     "temperature"}
