"""`attnlab trace --target` and `attnlab diagnose` on an encoder–decoder model folder: the
saved file holds every stack; diagnostics come stack by stack; a target given to a model of
one stack is refused naming the argument."""

from __future__ import annotations

import json

import pytest
import torch
from word_tokenizer import word_tokenizer

transformers = pytest.importorskip("transformers")

import attnlab.tracing.support as support  # noqa: E402
from attnlab.cli import main  # noqa: E402
from attnlab.tracing import StackedTrace, load_trace  # noqa: E402

_tokenizer = word_tokenizer  # tests/tracing/word_tokenizer.py


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A tiny BART folder and a tiny Llama folder, each with the word-level tokenizer."""
    root = tmp_path_factory.mktemp("models")
    out = {}
    for family in ("bart", "llama"):
        model = support.tiny_model(family)
        model.save_pretrained(root / family)
        _tokenizer().save_pretrained(root / family)
        out[family] = str(root / family)
    return out


def test_trace_with_a_target_saves_every_stack(folders, tmp_path, capsys):
    out = tmp_path / "bart.safetensors"
    target = tmp_path / "target.txt"
    target.write_text("x y z", encoding="utf-8")
    rc = main(["trace", "--model", folders["bart"], "--text", "a b c d", "--target-file",
               str(target), "--out", str(out), "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["target"] == "x y z" and doc["target_from"] == "given"
    assert {n: (s["queries"], s["keys"], s["causal"]) for n, s in doc["stacks"].items()} == {
        "encoder": (5, 5, False), "decoder": (5, 5, True), "cross": (5, 5, False)}
    st = load_trace(out)
    assert isinstance(st, StackedTrace) and st.text == "a b c d" and st.target == "x y z"
    assert st["encoder"].tokens == ["a", "b", "c", "d", "</s>"]
    assert st["cross"].tokens[1:] == ["x", "y", "z", "</s>"]


def test_a_target_for_a_model_of_one_stack_is_refused_naming_it(folders, tmp_path, capsys):
    rc = main(["trace", "--model", folders["llama"], "--text", "a b c", "--target", "x",
               "--out", str(tmp_path / "t.safetensors")])
    err = capsys.readouterr().err
    assert rc == 2 and "--target is for encoder–decoder models" in err
    assert "one attention stack" in err and "Traceback" not in err
    rc = main(["diagnose", "--model", folders["llama"], "--text", "a b c", "--target", "x"])
    err = capsys.readouterr().err
    assert rc == 2 and "--target: a target is for encoder-decoder models" in err


def test_diagnose_scores_each_stack(folders, capsys):
    rc = main(["diagnose", "--model", folders["bart"], "--text", "a b c d e f",
               "--target", "x y z w", "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc["stacks"]) == ["encoder", "decoder", "cross"]
    cross, enc = doc["stacks"]["cross"], doc["stacks"]["encoder"]
    assert "previous" in enc["heads"][0] and "entropy" in cross["heads"][0]
    assert "previous" not in cross["heads"][0] and "diagonal" not in cross["heads"][0]
    assert "cross-attention's queries are target tokens" in cross["meta"][
        "skipped_scores"]["previous"]
    assert cross["num_layers"] == 2 and len(cross["tokens"]) == 6  # the target's rows
    rc = main(["diagnose", "--model", folders["bart"], "--text", "a b", "--target", "x",
               "--definition", "previous"])
    assert rc == 2 and "--definition" in capsys.readouterr().err
    main(["diagnose", "--model", folders["bart"], "--text", "a b c", "--target", "x y"])
    shown = capsys.readouterr().out
    assert "cross stack: head roles" in shown and "encoder stack" in shown
    assert "skipped: sink, previous" in shown


def test_diagnose_of_a_stacked_trace_skips_positional_scores_for_cross():
    from attnlab.analysis import StackedDiagnostics, diagnose
    from attnlab.analysis.heads import POSITIONAL_SCORES

    model = support.tiny_model("t5")
    st = __import__("attnlab.tracing", fromlist=["trace"]).trace(
        model, [5, 6, 7, 8, 9], target=[0, 10, 11])
    d = diagnose(st)
    assert isinstance(d, StackedDiagnostics) and list(d.stacks) == ["encoder", "decoder",
                                                                     "cross"]
    assert set(POSITIONAL_SCORES) <= set(d["encoder"].scores)
    assert set(d["cross"].scores) == {"entropy", "max_weight"}
    assert d["cross"].num_layers == 2 and d["cross"].similarity.shape == (8, 8)
    # the entropy of cross-attention is the entropy of its own rows, nothing else
    w = st["cross"].weights.double()
    want = -(w * w.clamp_min(1e-30).log()).sum(-1).mean(-1)
    assert torch.allclose(d["cross"].scores["entropy"], want, atol=1e-5)
    with pytest.raises(KeyError, match="diagnosed: encoder, decoder, cross"):
        d["self"]


@pytest.mark.parametrize("command", ["trace", "diagnose", "explore"])
def test_a_target_too_long_names_its_argument_and_its_cut_is_announced(
        command, folders, tmp_path, capsys):
    from attnlab.models import load

    limit = int(load(folders["bart"]).max_length)
    words = " ".join(["x", "y", "z"] * limit)  # past the decoder's limit
    given = 3 * limit + 2  # the words, the decoder's start token and </s>
    target = tmp_path / "target.txt"
    target.write_text(words, encoding="utf-8")
    out = {"trace": ["--out", str(tmp_path / "t.safetensors")], "diagnose": [],
           "explore": ["--out", str(tmp_path / "page.html")]}[command]
    base = [command, "--model", folders["bart"], "--text", "a b c d", *out]
    for flag, value in (("--target", words), ("--target-file", str(target))):
        assert main([*base, flag, value]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bar
        assert err.startswith(f"attnlab {command}: error: {flag}: {given} tokens") \
            and f"at most {limit}" in err and "--truncate" in err, err
    assert main([*base, "--target", words, "--truncate"]) == 0
    err = capsys.readouterr().err
    assert f"--target truncated: kept {limit} of {given} tokens" in err, err
