"""``attnlab attribute`` on the real SmolLM2 (offline weights): the JSON's parts, the text
table, and bad input named.

Each run traces the text once and then pays for what it is asked: one forward per ablated
key, and one forward of the later tokens per eviction policy and budget for the loss with
only the kept keys. The JSON run asserts the ablation and the eviction table, so it skips
that loss; the text run prints the loss, on two budgets. The loss's numbers are checked
against :func:`attnlab.analysis.eviction_loss.eviction_losses` in
tests/analysis/test_attribute.py."""

from __future__ import annotations

import json

import pytest

from attnlab.cli import main

TEXT = ("The cat sat on the mat. The dog sat on the log. The cat sat on the mat again, "
        "and the dog sat on the log again, while the bird sang in the tree.")


def test_attribute_json_on_smollm2(capsys):
    rc = main(["attribute", "--model", "smollm2", "--text", TEXT, "--ablation-tokens", "30",
               "--max-keys", "12", "--budgets", "0.25,0.5", "--no-eviction-loss", "--json",
               "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0
    got = json.loads(out)
    a, e = got["ablation"], got["eviction"]
    assert a["keys"] == 12 and a["tokens"] == 30 and a["clean_loss"] > 0
    assert set(a["rho"]) == {"weights", "last_layer", "rollout", "accumulated", "random"}
    assert all(-1 <= v <= 1 for v in a["rho"].values())
    assert e["budgets"] == [0.25, 0.5]
    table = {r["policy"]: r for r in e["table"]}
    for policy in ("h2o", "snapkv", "tova", "streaming", "knorm", "random"):
        for b in ("0.25", "0.5"):
            assert table["oracle"][f"lost@{b}"] <= table[policy][f"lost@{b}"] + 1e-12
    # a trained model's heavy hitters are worth keeping: H2O loses less than a random choice
    assert table["h2o"]["lost@0.25"] < table["random"]["lost@0.25"]
    assert got["run"]["tokens"] > 30
    assert "loss" not in e  # --no-eviction-loss: the table alone


def test_attribute_text_table_and_refusals(capsys):
    assert main(["attribute", "--model", "smollm2", "--text", TEXT, "--no-ablation",
                 "--budgets", "0.25,0.5", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "eviction:" in out and "oracle" in out and "ablation:" not in out
    assert "keep 0.25" in out and "keep 0.5" in out and "keep 0.1" not in out
    # the loss with only the kept keys, one row per policy, after the table
    assert out.index("change of the later tokens' loss") > out.index("eviction:")
    loss = out[out.index("change of the later tokens' loss"):].splitlines()
    assert [line.split()[0] for line in loss[2:]] == ["h2o", "snapkv", "tova", "streaming",
                                                      "knorm", "random", "oracle"]
    with pytest.raises(SystemExit) as bad:  # argparse's own refusal, with the usage line
        main(["attribute", "--model", "smollm2", "--text", TEXT, "--budgets", "2"])
    assert bad.value.code == 2
    assert "--budgets: expected fractions in (0, 1], got '2'" in capsys.readouterr().err
    assert main(["attribute", "--model", "smollm2", "--text", TEXT, "--context", "9999",
                 "--no-ablation", "--quiet"]) == 2
    assert "context must be an int" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["attribute", "--help"])
