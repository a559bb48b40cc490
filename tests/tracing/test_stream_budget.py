"""The memory of a streamed trace, stated and enforced: its budget counts one layer plus the
forward pass, an input that does not fit even so is refused before the model runs, and the
peak resident set of a streamed capture of a many-layer model stays far below that of the
same capture in memory (measured in fresh processes). And ``attnlab trace``: streaming when
the whole trace would not fit (said on stderr) or with --stream; --max-tokens past the
window of a rotary model (with a warning), refused for learned positions."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from attnlab import cli
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.budget import (
    MemoryBudgetError,
    ModelShape,
    check_trace_budget,
    estimate_trace_bytes,
)
from attnlab.tracing.tracer import BeyondWindowWarning, trace
from limits import SLOW_CHILD_S

transformers = pytest.importorskip("transformers")

from random_models import random_llama  # noqa: E402  (tests/random_models.py)

TESTS = Path(__file__).resolve().parent.parent
WORDS = ["the", "cat", "sat", "on", "mat", "it", "was", "tired", "a", "dog"]
SHAPE = ModelShape(num_layers=30, num_heads=9, num_kv_heads=3, head_dim=64, hidden_size=576,
                   ff_size=1536, vocab_size=49152)


def test_a_streamed_estimate_counts_one_layer():
    for keep in ({}, {"keep_context": True}, {"keep_weights": True}):
        whole = estimate_trace_bytes(SHAPE, 8192, **keep)
        one = estimate_trace_bytes(SHAPE, 8192, streamed=True, **keep)
        assert whole.kept == SHAPE.num_layers * one.kept and whole.forward == one.forward
        assert one.total == 2 * one.kept + one.forward and one.streamed
    assert "kept of one layer while the trace streams" in one.describe()
    with pytest.raises(TypeError, match="streamed must be a bool, got str"):
        estimate_trace_bytes(SHAPE, 10, streamed="yes")
    whole, one = (estimate_trace_bytes(SHAPE, 32768, streamed=s).total for s in (False, True))
    between = (whole + one) // 2
    assert check_trace_budget(SHAPE, 32768, between, streamed=True).total == one
    with pytest.raises(MemoryBudgetError, match="above the memory budget"):
        check_trace_budget(SHAPE, 32768, between)
    with pytest.raises(MemoryBudgetError, match="even streamed to the file layer by layer"):
        check_trace_budget(SHAPE, 32768, one - 1, streamed=True)


def test_a_streamed_trace_that_does_not_fit_is_refused_before_the_model_runs(tmp_path):
    model = random_llama(layers=8, heads=2, kv_heads=2, hidden=32, positions=256)
    calls = []
    model.model.register_forward_pre_hook(lambda *a: calls.append(1))  # the tracer runs it
    ids = [i % 96 + 1 for i in range(200)]
    whole, one = (estimate_trace_bytes(model, len(ids), streamed=s).total for s in (False, True))
    out = tmp_path / "t.safetensors"
    with pytest.raises(MemoryBudgetError, match="even streamed"):
        trace(model, ids, out=out, max_memory=one - 1)
    assert not calls and list(tmp_path.iterdir()) == []
    with pytest.raises(MemoryBudgetError):  # in memory it does not fit
        trace(model, ids, max_memory=(whole + one) // 2)
    assert not calls
    t = trace(model, ids, out=out, max_memory=(whole + one) // 2)  # streamed it does
    assert calls and t.num_layers == 8 and t.opened_from == out


PEAK = textwrap.dedent("""
    import json, os, sys, tempfile
    sys.path.insert(0, sys.argv[1])
    import torch
    torch.set_num_threads(1)
    from random_models import random_llama
    from attnlab._proc import peak_rss_bytes
    from attnlab.tracing.tracer import trace

    def reset():  # the high-water mark from here on (Linux: reset to the current resident set)
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    layers, n = 128, 512
    model = random_llama(layers=layers, heads=2, kv_heads=2, hidden=64, positions=n)
    ids = torch.randint(1, 97, (n,), generator=torch.Generator().manual_seed(0)).tolist()
    trace(model, ids[:16])  # warm-up
    got = {}
    for mode in sys.argv[2].split(","):  # the streamed one first: it leaves little behind
        ok = reset()
        before = peak_rss_bytes()
        out = os.path.join(tempfile.mkdtemp(), "t.safetensors") if mode == "stream" else None
        t = trace(model, ids, out=out)
        got[mode] = {"growth": peak_rss_bytes() - before, "reset": ok,
                     "kept": sum(getattr(t, a).numel() * 4 for a in ("q", "k", "v", "lse")),
                     "layers": t.num_layers, "opened": t.opened_from is not None}
        del t
    print(json.dumps(got))
""")


def _peaks(modes: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", PEAK, str(TESTS), modes],
                          capture_output=True, text=True, timeout=SLOW_CHILD_S, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_streamed_capture_s_peak_memory_stays_far_below_the_in_memory_one():
    """128 layers x 512 tokens: q, k, v and lse are 48.5 MiB; in memory the capture holds
    them all (and stacks them), streamed it holds one layer (0.4 MiB). Both in one fresh
    process, the peak reset before each; where it cannot be reset, one process each."""
    got = _peaks("stream,memory")
    if not got["stream"]["reset"]:
        got = {**_peaks("stream"), **_peaks("memory")}
    memory, streamed = got["memory"], got["stream"]
    assert memory["layers"] == streamed["layers"] == 128
    assert streamed["opened"] and not memory["opened"]
    kept = memory["kept"]
    assert kept == streamed["kept"] > 48 * 2**20
    assert memory["growth"] > kept  # the whole trace was resident at once
    assert streamed["growth"] < kept / 4  # far below: what stays is the forward pass's own
    assert memory["growth"] - streamed["growth"] > 0.75 * kept


# -- attnlab trace ------------------------------------------------------------------------


def _tokenizer(d: Path) -> None:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}).save_pretrained(d)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> Path:
    """A tiny Llama folder (rotary positions, a window of 32 tokens, 6 layers)."""
    d = tmp_path_factory.mktemp("tiny-llama")
    _tokenizer(d)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(WORDS) + 5, hidden_size=16,
                                   intermediate_size=32, num_hidden_layers=6,
                                   num_attention_heads=2, num_key_value_heads=2,
                                   max_position_embeddings=32)
    transformers.LlamaForCausalLM(cfg).save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    """A tiny BERT folder (learned absolute positions, 32 of them)."""
    d = tmp_path_factory.mktemp("tiny-bert")
    _tokenizer(d)
    cfg = transformers.BertConfig(vocab_size=len(WORDS) + 5, hidden_size=16,
                                  num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=32)
    transformers.BertModel(cfg).save_pretrained(d)
    return d


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    got = capsys.readouterr()
    return rc, got.out, got.err


def _version(path: Path) -> int:
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return json.loads(json.loads(raw[8:8 + n])["__metadata__"]["attnlab"])["format_version"]


def test_attnlab_trace_streams_when_the_whole_trace_would_not_fit(llama_dir, tmp_path, capsys):
    from attnlab.models import load

    text = " ".join(WORDS * 2)  # 20 words, 22 tokens with [CLS] and [SEP]
    loaded = load(str(llama_dir))
    whole, one = (estimate_trace_bytes(loaded, 22, streamed=s).total for s in (False, True))
    out = tmp_path / "t.safetensors"
    args = ("trace", "--model", str(llama_dir), "--text", text, "--out", str(out), "--json")
    rc, stdout, err = _run(capsys, *args, "--max-memory", str((whole + one) // 2))
    assert rc == 0 and json.loads(stdout)["streamed"] is True
    assert "above the memory budget" in err and "streaming the trace to its file" in err
    assert _version(out) == 5 and AttentionTrace.open(out).verify().seq_len == 22
    rc, stdout, err = _run(capsys, *args, "--max-memory", str(whole + 1))  # it fits
    assert rc == 0 and json.loads(stdout)["streamed"] is False and "streaming" not in err
    assert _version(out) == 4
    rc, stdout, err = _run(capsys, *args, "--stream")
    assert rc == 0 and json.loads(stdout)["streamed"] is True and _version(out) == 5
    rc, _, err = _run(capsys, *args, "--max-memory", str(one - 1))
    assert rc == 2 and "even streamed to the file layer by layer" in err
    assert err.count("\n") == 1 and _version(out) == 5  # refused before: the file untouched


def test_max_tokens_goes_past_a_rotary_window_with_a_warning(llama_dir, bert_dir, tmp_path,
                                                             capsys):
    text = " ".join(WORDS * 4)  # 42 tokens; the window is 32
    out = tmp_path / "t.safetensors"
    base = ("trace", "--model", str(llama_dir), "--text", text, "--out", str(out), "--quiet")
    rc, _, err = _run(capsys, *base)
    assert rc == 2 and "42 tokens, the model accepts at most 32" in err
    rc, _, err = _run(capsys, *base, "--max-tokens", "64")
    assert rc == 0 and "warning: 42 tokens are past" in err and "trained window of 32" in err
    t = AttentionTrace.load(out)
    assert t.seq_len == 42 and t.meta["trained_window"] == 32
    rc, _, err = _run(capsys, *base, "--max-tokens", "36", "--truncate")
    assert rc == 0 and "kept 36 of 42 tokens (--max-tokens 36)" in err
    assert AttentionTrace.load(out).seq_len == 36
    rc, _, err = _run(capsys, *base, "--max-tokens", "36")
    assert rc == 2 and "42 tokens, the model accepts at most 36" in err
    rc, _, err = _run(capsys, *base, "--max-tokens", "0")
    assert rc == 2 and "--max-tokens must be a positive number of tokens, got 0" in err
    rc, _, err = _run(capsys, "trace", "--model", str(bert_dir), "--text", text, "--out",
                      str(tmp_path / "b.safetensors"), "--max-tokens", "64")
    assert rc == 2 and err.count("\n") == 1
    assert "--max-tokens 64: 64 is past" in err and "learned absolute positions" in err
    rc, _, err = _run(capsys, "trace", "--model", str(bert_dir), "--text", "the cat", "--out",
                      str(tmp_path / "b.safetensors"), "--max-tokens", "16")
    assert rc == 0  # below the window: only a lower limit


def test_trace_max_tokens_in_python(tmp_path):
    model = random_llama(layers=2, positions=16)
    ids = [i % 96 + 1 for i in range(40)]
    with pytest.raises(ValueError, match="40 tokens, the model accepts at most 16"):
        trace(model, ids)
    with pytest.warns(BeyondWindowWarning, match="40 tokens are past LlamaForCausalLM's "
                                                 "trained window of 16"):
        t = trace(model, ids, max_tokens=64, out=tmp_path / "t.safetensors")
    assert t.seq_len == 40 and t.meta["trained_window"] == 16
    with pytest.raises(ValueError, match="max_tokens must be a positive int, got 0"):
        trace(model, ids, max_tokens=0)
    from attnlab.nn.transformer import GPT, GPTConfig

    gpt = GPT(GPTConfig(vocab_size=50, block_size=16, num_layers=1, num_heads=2,
                        embed_dim=8))
    with pytest.raises(ValueError, match="learns one absolute position embedding"):
        trace(gpt, ids, max_tokens=64)
