"""`attnlab trace`, `plot`, `explore` and `diagnose`, run in-process: every expected failure
is one line naming the argument and its cause; long inputs are announced, budgeted and
timed."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from attnlab import cli
from attnlab.tracing import AttentionTrace
from unprivileged import run_unprivileged

SENTENCE = "The animal didn't cross the street because it was too tired"
WORDS = ["the", "cat", "sat", "on", "mat", "it", "was", "tired", "a", "dog", "注", "意", "力"]


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    """A tiny Hugging Face BERT folder (random weights, 13-word vocabulary, 32 positions)."""
    tf = pytest.importorskip("transformers")
    d = tmp_path_factory.mktemp("tiny-bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    tok = tf.BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)})
    tok.save_pretrained(d)
    cfg = tf.BertConfig(vocab_size=len(WORDS) + 5, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    tf.BertModel(cfg).save_pretrained(d)
    return d


def _broken(bert_dir: Path, tmp_path: Path, how: str) -> Path:
    d = tmp_path / f"model-{how}"
    shutil.copytree(bert_dir, d)
    if how == "corrupt-config":
        (d / "config.json").write_text("{not json", encoding="utf-8")
    elif how == "no-weights":
        (d / "model.safetensors").unlink()
    elif how == "garbage-weights":
        (d / "model.safetensors").write_bytes(b"\x00garbage")
    elif how == "unknown-type":
        (d / "config.json").write_text('{"model_type": "no-such-architecture"}')
    return d


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.mark.models
def test_trace_then_plot_then_diagnose(tmp_path, capsys):
    out = tmp_path / "t.safetensors"
    assert cli.main(["trace", "--model", "minilm", "--text", SENTENCE, "--out", str(out),
                     "--quiet"]) == 0
    t = AttentionTrace.load(out)
    assert t.model == "minilm" and t.q is not None and "animal" in t.tokens
    assert cli.main(["plot", str(out), "--kind", "heatmap", "--layer", "0", "--head", "2",
                     "--out", str(tmp_path / "h.svg")]) == 0
    assert (tmp_path / "h.svg").read_text().lstrip().startswith("<?xml")
    assert cli.main(["plot", str(out), "--kind", "heatmap", "--layer", "9",
                     "--out", str(tmp_path / "x.png")]) == 2
    assert "layer must be in [0, 6)" in capsys.readouterr().err
    assert cli.main(["diagnose", "--model", "minilm", "--text", SENTENCE, "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["roles"]["previous-token"][0] == {"layer": 0, "head": 2,
                                                "score": js["roles"]["previous-token"][0]["score"]}
    assert len(js["heads"]) == 72 and js["tokens"][0] == "[CLS]"
    assert js["run"]["tokens"] == len(js["tokens"]) == 15 and js["run"]["peak_memory_bytes"] > 0


def test_cli_errors_name_the_fix(tmp_path, capsys):
    assert cli.main(["trace", "--model", "no-such-model", "--text", "x", "--out",
                     str(tmp_path / "t.safetensors"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--model no-such-model:" in err
    assert "known model name (minilm, smollm2, whisper-tiny-en)" in err
    assert cli.main(["plot", str(tmp_path / "missing.safetensors"), "--out",
                     str(tmp_path / "a.png")]) == 2
    assert "FILE: no such file" in capsys.readouterr().err


@pytest.mark.parametrize("how, cause", [
    ("corrupt-config", "config.json: not a usable model config (OSError: "),
    ("unknown-type", "config.json: not a usable model config (ValueError: "),
    ("no-weights", "cannot load the model's weights (OSError: "),
    ("garbage-weights", "cannot load the model's weights (SafetensorError: "),
])
def test_a_broken_model_folder_is_one_line_naming_model(bert_dir, tmp_path, capsys, how,
                                                         cause):
    d = _broken(bert_dir, tmp_path, how)
    out = tmp_path / "t.safetensors"
    rc, _, err = _run(capsys, "trace", "--model", str(d), "--text", "the cat", "--out",
                      str(out), "--quiet")
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith(f"attnlab trace: error: --model {d}: ") and cause in err
    assert not out.exists()


def test_debug_shows_the_traceback(bert_dir, tmp_path, monkeypatch):
    d = _broken(bert_dir, tmp_path, "corrupt-config")
    monkeypatch.setenv("ATTNLAB_DEBUG", "1")
    with pytest.raises(cli.UsageError, match="not a usable model config") as info:
        cli.main(["trace", "--model", str(d), "--text", "the cat", "--out",
                  str(tmp_path / "t.safetensors"), "--quiet"])
    assert isinstance(info.value.__cause__.__cause__, OSError)  # transformers' own error


def test_trace_json_reports_tokens_seconds_memory_and_bytes(bert_dir, tmp_path, capsys):
    out = tmp_path / "t.safetensors"
    rc, stdout, _ = _run(capsys, "trace", "--model", str(bert_dir), "--text", "the cat sat",
                         "--out", str(out), "--json")
    assert rc == 0
    js = json.loads(stdout)
    assert js["tokens"] == js["tokens_given"] == 5  # [CLS] the cat sat [SEP]
    assert js["bytes"] == out.stat().st_size and js["path"] == str(out)
    assert js["seconds"] > 0 and js["peak_memory_bytes"] > 10 * 2**20
    assert js["layers"] == 2 and js["heads"] == 2


def test_text_file_is_read_as_utf8(bert_dir, tmp_path, capsys):
    f = tmp_path / "in.txt"
    f.write_bytes("\ufeffthe cat 注意力\n".encode())  # a BOM is dropped
    out = tmp_path / "t.safetensors"
    for cmd in (["trace", "--out", str(out)], ["diagnose"],
                ["explore", "--out", str(tmp_path / "e.html")]):
        rc, _, err = _run(capsys, cmd[0], "--model", str(bert_dir), "--text-file", str(f),
                          *cmd[1:], "--quiet")
        assert rc == 0, err
    t = AttentionTrace.load(out)
    assert t.tokens == ["[CLS]", "the", "cat", "注", "意", "力", "[SEP]"]


@pytest.mark.parametrize("content, cause", [
    ("café".encode("latin-1"), "not UTF-8 text (byte 0xe9 at offset 3)"),
    ("注意力".encode("gbk"), "not UTF-8 text (byte 0xd2 at offset 2)"),
    ("the cat".encode("utf-16"), "not UTF-8 text (byte 0xff at offset 0)"),
    (None, "no such file"),
    ("dir", "is a directory"),
])
@pytest.mark.parametrize("command", ["trace", "explore", "diagnose"])
def test_a_bad_text_file_is_one_line_naming_text_file(bert_dir, tmp_path, capsys, content,
                                                      cause, command):
    f = tmp_path / "in.txt"
    if content == "dir":
        f.mkdir()
    elif content is not None:
        f.write_bytes(content)
    extra = {"trace": ["--out", str(tmp_path / "t.safetensors")],
             "explore": ["--out", str(tmp_path / "e.html")], "diagnose": []}[command]
    rc, _, err = _run(capsys, command, "--model", str(bert_dir), "--text-file", str(f),
                      *extra, "--quiet")
    assert rc == 2 and err.startswith(f"attnlab {command}: error: --text-file {f}: {cause}")
    assert err.count("\n") == 1


@pytest.mark.parametrize("text", ["\u200b\u200c\u200d", "\ufeff \u2060\t", "\u3164\u115f",
                                  " \n "])
def test_invisible_text_is_refused(bert_dir, tmp_path, capsys, text):
    rc, _, err = _run(capsys, "trace", "--model", str(bert_dir), "--text", text, "--out",
                      str(tmp_path / "t.safetensors"), "--quiet")
    assert rc == 2 and "--text has no visible character" in err and err.count("\n") == 1


def test_truncation_is_announced_with_tokens_kept_and_given(bert_dir, tmp_path, capsys):
    text = " ".join(["the cat sat on the mat"] * 20)  # 120 words + 2 specials > 32
    out = tmp_path / "t.safetensors"
    rc, _, err = _run(capsys, "trace", "--model", str(bert_dir), "--text", text, "--out",
                      str(out), "--quiet")
    assert rc == 2 and "--text: 122 tokens, the model accepts at most 32" in err
    assert "--truncate" in err
    rc, stdout, err = _run(capsys, "trace", "--model", str(bert_dir), "--text", text, "--out",
                           str(out), "--truncate", "--json")
    assert rc == 0
    assert "attnlab trace: --text truncated: kept 32 of 122 tokens" in err
    js = json.loads(stdout)
    assert (js["tokens"], js["tokens_given"]) == (32, 122)
    assert AttentionTrace.load(out).seq_len == 32


def test_the_memory_budget_refuses_before_the_model_runs(bert_dir, tmp_path, capsys):
    out = tmp_path / "t.safetensors"
    rc, _, err = _run(capsys, "trace", "--model", str(bert_dir), "--text", "the cat sat",
                      "--out", str(out), "--max-memory", "1KiB", "--quiet")
    assert rc == 2 and err.count("\n") == 1
    assert "--text: 5 tokens need about" in err and "above the memory budget of 1.00 KiB" in err
    assert not out.exists()
    rc, _, err = _run(capsys, "trace", "--model", str(bert_dir), "--text", "the cat", "--out",
                      str(out), "--max-memory", "4 GB", "--quiet")
    assert rc == 2 and "--max-memory must be a size such as 4GB" in err
    assert cli.main(["trace", "--model", str(bert_dir), "--text", "the cat", "--out", str(out),
                     "--max-memory", "64MiB", "--quiet"]) == 0


def test_out_errors_name_out(bert_dir, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("mine")
    for out, cause in ((tmp_path, "is a directory; give a file name inside it"),
                       (blocker / "t.safetensors", f"{blocker} is a file, not a folder")):
        rc, _, err = _run(capsys, "trace", "--model", str(bert_dir), "--text", "the cat",
                          "--out", str(out), "--quiet")
        assert rc == 2 and err == f"attnlab trace: error: --out {out}: {cause}\n"
    rc, _, err = _run(capsys, "explore", "--model", str(bert_dir), "--text", "the cat",
                      "--out", str(tmp_path / "e.txt"), "--quiet")
    assert rc == 2 and "--out must name a .html or .htm file" in err
    assert blocker.read_text() == "mine"


def test_unwritable_out_names_out_not_the_temp_file(bert_dir, tmp_path):
    base = Path(tempfile.mkdtemp(prefix="attnlab-ro-"))
    try:
        out = base / "t.safetensors"
        argv = ["trace", "--model", str(bert_dir), "--text", "the cat", "--quiet", "--out"]
        assert cli.main([*argv, str(tmp_path / "warm.safetensors")]) == 0  # imports done
        rc, err = run_unprivileged(lambda: cli.main([*argv, str(out)]), base)
        assert rc == 2, err
        assert err == f"attnlab trace: error: --out {out}: folder {base} is not writable\n"
        # and past the check (a folder that turns read-only later), the write's own error
        # names --out, not attnlab's hidden temp file
        from attnlab._cli import save
        from attnlab._io import atomic_write_bytes

        rc, err = run_unprivileged(lambda: save(lambda: atomic_write_bytes(out, b"x"),
                                                str(out)) and 0, base)
        assert rc == -1 and f"--out {out}: cannot write it (Permission denied)" in err
        assert ".attnlab-" not in err and ".tmp" not in err
    finally:
        shutil.rmtree(base)


def test_progress_per_layer_on_stderr_and_quiet_silences_it(bert_dir, tmp_path, capsys):
    out = tmp_path / "t.safetensors"
    rc, _, err = _run(capsys, "trace", "--model", str(bert_dir), "--text", "the cat", "--out",
                      str(out))
    assert rc == 0 and "tracing: layer" in err and "2/2" in err
    rc, stdout, err = _run(capsys, "trace", "--model", str(bert_dir), "--text", "the cat",
                           "--out", str(out), "--quiet")
    assert rc == 0 and stdout == "" and err == ""


def test_explore_json_and_a_trained_run(bert_dir, tmp_path, capsys):
    out = tmp_path / "e.html"
    rc, stdout, _ = _run(capsys, "explore", "--model", str(bert_dir), "--text", "the cat",
                         "--text2", "a dog", "--out", str(out), "--json")
    assert rc == 0
    js = json.loads(stdout)
    assert js["tokens"] == [4, 4] and js["bytes"] == out.stat().st_size
    assert js["peak_memory_bytes"] > 0 and js["seconds"] > 0
    rc, _, err = _run(capsys, "explore", "--model", str(bert_dir), "--text", "the cat",
                      "--text2", "\u200b", "--out", str(out), "--quiet")
    assert rc == 2 and "--text2 has no visible character" in err


def test_plot_picks_a_stack_of_an_encoder_decoder_trace(tmp_path, capsys):
    from attnlab.nn.transformer import Transformer, TransformerConfig
    from attnlab.tracing.tracer import trace

    torch.manual_seed(0)
    ed = Transformer(TransformerConfig(src_vocab_size=10, tgt_vocab_size=6, embed_dim=8,
                                       num_heads=2, num_encoder_layers=1,
                                       num_decoder_layers=1, ff_dim=16)).eval()
    path = trace(ed, [1, 5, 3], target=[0, 4]).save(tmp_path / "ed.safetensors")
    png = tmp_path / "cross.png"
    assert cli.main(["plot", str(path), "--stack", "cross", "--out", str(png)]) == 0
    assert png.stat().st_size > 0
    assert cli.main(["plot", str(path), "--out", str(tmp_path / "x.png")]) == 2
    assert "--stack must be one of encoder, decoder, cross" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
