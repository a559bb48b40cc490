"""Attention as models generate: a capture around ``generate()`` gives one trace of the
whole sequence (prompt and generated tokens) or a refusal naming why, never a shorter
trace; its rows equal Hugging Face's own per-step eager attentions and a teacher-forced
forward over the same tokens; the tracer's ``chat=``/``generate=`` and the commands'
``--chat``/``--generate``/``--dtype``/``--device``."""

from __future__ import annotations

import copy
import json

import pytest
import torch

import attnlab
from attnlab import cli, models
from attnlab.nn.transformer import GPT, GPTConfig
from attnlab.tracing import capture
from attnlab.tracing.generation import GenerationError
from attnlab.tracing.run_settings import RunSettings, resolve_device, resolve_dtype

PROMPT = "The cat sat on the mat because it"
NEW = 6
TOL = 1e-5


@pytest.fixture(scope="module")
def smollm2():
    return models.load("smollm2")


@pytest.fixture(scope="module")
def generation(smollm2):
    """SmolLM2's greedy generation of NEW tokens under capture, and its trace."""
    net, tok = smollm2.model, smollm2.tokenizer
    ids = tok(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad(), capture(net) as cap:
        out = net.generate(ids, max_new_tokens=NEW, do_sample=False, min_new_tokens=NEW)
    return ids, out, cap, cap.trace()


def _rows(t, layer: int, head: int, n: int) -> torch.Tensor:
    return t.weights_rows(layer, head, list(range(n)))


# -- a capture around generate() ----------------------------------------------------------


@pytest.mark.models
def test_capture_around_generate_is_the_whole_sequence(generation):
    ids, out, cap, t = generation
    p = ids.shape[1]
    # generate() feeds the prompt, then every new token but the last: each fed token has a row
    assert len(cap.records) == 30 * NEW
    assert t.seq_len == p + NEW - 1 == out.shape[1] - 1
    assert t.meta["prompt_tokens"] == p
    assert t.meta["generated"] == list(range(p, p + NEW - 1))
    assert t.meta["steps"] == NEW - 1
    assert t.causal and "skipped" not in t.meta
    sums = torch.stack([_rows(t, layer, h, t.seq_len).sum(-1)
                        for layer in (0, 18, 29) for h in range(t.num_heads)])
    assert (sums - 1).abs().max() < TOL


@pytest.mark.models
def test_generated_rows_equal_hugging_faces_own_per_step_attentions(smollm2, generation):
    """``generate(output_attentions=True)`` (eager): step s's attention is the row of the
    token fed at step s; the stitched trace equals it within 1e-5 — and a trace whose two
    generated rows are swapped does not (the comparison can fail)."""
    ids, out, _, t = generation
    net = smollm2.model
    with torch.no_grad():
        ref = net.generate(ids, max_new_tokens=NEW, do_sample=False, min_new_tokens=NEW,
                           output_attentions=True, return_dict_in_generate=True)
    assert torch.equal(ref.sequences, out)
    p = ids.shape[1]
    worst = 0.0
    for step, atts in enumerate(ref.attentions[1:], start=1):
        pos = p + step - 1
        for layer in range(t.num_layers):
            for h in range(t.num_heads):
                got = t.weights_rows(layer, h, [pos])[0, : pos + 1]
                worst = max(worst, float((got - atts[layer][0, h, 0]).abs().max()))
    assert worst < TOL
    # the wrong variant: the last two generated rows swapped (q and log-sum-exp together)
    bad = copy.deepcopy(t)
    a, b = p + NEW - 3, p + NEW - 2
    for name in ("q", "lse"):
        x = getattr(bad, name)
        x[:, :, [a, b]] = x[:, :, [b, a]].clone()
    got = torch.stack([bad.weights_rows(18, h, [b])[0, : b + 1] for h in range(t.num_heads)])
    assert float((got - ref.attentions[b - p + 1][18][0, :, 0]).abs().max()) > 1e-2


@pytest.mark.models
def test_generation_equals_one_teacher_forced_forward(smollm2, generation):
    ids, out, _, t = generation
    seq = out[:, :-1]
    with torch.no_grad():
        ref = smollm2.model(seq, output_attentions=True).attentions
    worst = max(float((_rows(t, layer, h, seq.shape[1]) - ref[layer][0, h]).abs().max())
                for layer in range(t.num_layers) for h in range(t.num_heads))
    assert worst < TOL


def test_attnlab_gpt_generation_is_its_teacher_forced_forward():
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=23, num_layers=2, num_heads=2, embed_dim=16)).eval()
    idx = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad(), capture(gpt) as cap:
        out = gpt.generate(idx, max_new_tokens=5)
    t = cap.trace()
    assert t.seq_len == out.shape[1] - 1 and t.meta["generated"] == [4, 5, 6, 7]
    with torch.no_grad(), capture(gpt) as cap2:
        gpt(out[:, :-1])
    ref = cap2.trace()
    for layer in range(2):
        for h in range(2):
            assert torch.allclose(_rows(t, layer, h, 8), _rows(ref, layer, h, 8), atol=1e-6)


# -- what cannot be one sequence is refused, never shortened ------------------------------


@pytest.mark.models
def test_beam_search_is_refused(smollm2):
    ids = smollm2.tokenizer("The cat sat", return_tensors="pt").input_ids
    with torch.no_grad(), capture(smollm2.model) as cap:
        smollm2.model.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False,
                               num_beams=2)
    assert len(cap.records) > 30  # the calls were recorded ...
    with pytest.raises(GenerationError, match="reordered"):  # ... and none is dropped
        cap.trace()


@pytest.mark.models
def test_a_static_cache_is_one_sequence_too(smollm2, generation):
    """A preallocated cache reads all its slots, the unfilled ones hidden: its unfilled keys
    are cut, and the generation is the dynamic cache's, token for token and row for row."""
    ids, out, _, t = generation
    with torch.no_grad(), capture(smollm2.model) as cap:
        same = smollm2.model.generate(ids, max_new_tokens=NEW, min_new_tokens=NEW,
                                      do_sample=False, cache_implementation="static")
    assert torch.equal(same, out)  # the capture did not change the generation
    s = cap.trace()
    assert s.seq_len == t.seq_len and s.meta["generated"] == t.meta["generated"]
    worst = max(float((_rows(s, layer, h, t.seq_len) - _rows(t, layer, h, t.seq_len))
                      .abs().max()) for layer in range(t.num_layers) for h in range(9))
    assert worst < TOL


@pytest.mark.models
def test_two_generations_or_two_inputs_in_one_capture_are_refused(smollm2):
    net = smollm2.model
    ids = smollm2.tokenizer("The cat sat", return_tensors="pt").input_ids
    with torch.no_grad(), capture(net) as cap:
        net.generate(ids, max_new_tokens=2, do_sample=False)
        net.generate(ids, max_new_tokens=2, do_sample=False)
    with pytest.raises(GenerationError, match="2 sequences"):
        cap.trace()
    with torch.no_grad(), capture(net) as cap:
        net(ids)
        net(ids[:, :2])
    with pytest.raises(GenerationError, match="called 2 times with different shapes"):
        cap.trace()


def test_dense_weights_of_a_generation_are_refused():
    gpt = GPT(GPTConfig(vocab_size=11, num_layers=1, num_heads=2, embed_dim=8)).eval()
    with torch.no_grad(), capture(gpt, qkv=False) as cap:
        gpt.generate(torch.tensor([[1, 2]]), max_new_tokens=3)
    with pytest.raises(GenerationError, match="qkv=True"):
        cap.trace()


def test_a_streamed_capture_of_a_generation_is_refused(tmp_path):
    gpt = GPT(GPTConfig(vocab_size=11, num_layers=2, num_heads=2, embed_dim=8)).eval()
    out = tmp_path / "g.safetensors"
    with torch.no_grad(), capture(gpt, out=out) as cap:
        gpt.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=3)
    with pytest.raises(GenerationError, match="generate=N, out=PATH"):
        cap.trace()
    assert not out.exists() and not list(tmp_path.iterdir())


def test_a_cropped_cache_is_refused_naming_the_module():
    """A cache cut back between steps (as assisted decoding does): the next call reads fewer
    keys than the chain holds plus its queries."""
    from attnlab.nn.attention import KVCache

    gpt = GPT(GPTConfig(vocab_size=11, num_layers=1, num_heads=2, embed_dim=8)).eval()
    caches = [KVCache()]
    with torch.no_grad(), capture(gpt) as cap:
        gpt(torch.tensor([[1, 2, 3, 4]]), caches)
        caches[0].k, caches[0].v = caches[0].k[:, :, :2], caches[0].v[:, :, :2]
        gpt(torch.tensor([[5]]), caches)
    with pytest.raises(GenerationError, match=r"blocks\.0\.attn.*cropped"):
        cap.trace()


# -- the tracer and the commands --------------------------------------------------------------


@pytest.mark.models
def test_trace_chat_and_generate_in_memory_and_streamed_agree(smollm2, tmp_path):
    t = attnlab.trace(smollm2, "What is the capital of France?", chat=True, generate=5)
    gen = t.meta["generated"]
    assert t.seq_len == t.meta["prompt_tokens"] + 5 and gen == list(range(t.seq_len - 5,
                                                                           t.seq_len))
    assert "<|im_start|>" in t.tokens and t.meta["chat"]["user_text"].startswith("What")
    assert t.meta["generation"]["sampling"] == "greedy" and t.meta["generation"]["text"]
    assert t.meta["run"] == {"dtype": "float32", "device": "cpu"}
    s = attnlab.trace(smollm2, "What is the capital of France?", chat=True, generate=5,
                      out=tmp_path / "g.safetensors")
    assert s.tokens == t.tokens and s.meta["generated"] == gen
    assert "one forward pass" in s.meta["generation"]["traced_as"]
    worst = max(float((_rows(t, layer, h, t.seq_len) - _rows(s, layer, h, t.seq_len))
                      .abs().max()) for layer in (0, 18, 29) for h in range(t.num_heads))
    assert worst < TOL


def test_sampling_is_reproducible_and_leaves_the_callers_random_state():
    gpt = GPT(GPTConfig(vocab_size=31, num_layers=1, num_heads=2, embed_dim=8)).eval()
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = attnlab.trace(gpt, [1, 2, 3], generate=8, temperature=1.5, seed=7)
    assert torch.equal(torch.get_rng_state(), before)
    b = attnlab.trace(gpt, [1, 2, 3], generate=8, temperature=1.5, seed=7)
    c = attnlab.trace(gpt, [1, 2, 3], generate=8, temperature=1.5, seed=8)
    assert a.token_ids == b.token_ids and len(a.token_ids) == 11
    assert a.token_ids != c.token_ids  # another seed draws another continuation
    greedy = attnlab.trace(gpt, [1, 2, 3], generate=8)
    assert greedy.meta["generation"]["sampling"] == "greedy"


@pytest.mark.parametrize("kw, words", [
    ({"generate": -1}, "generate must be an int >= 0"),
    ({"temperature": 0.5}, "give generate=N"),
    ({"generate": 2, "top_p": 1.5}, r"top_p must be a number in \(0, 1\]"),
    ({"dtype": "float8"}, "dtype must be one of float32, bfloat16, float16"),
])
def test_run_settings_refuse_bad_values(kw, words):
    with pytest.raises((ValueError, TypeError), match=words):
        RunSettings(**kw)


def test_devices_and_dtypes_are_resolved_or_refused_in_one_line():
    assert resolve_device(None) is None and resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type in ("cpu", "cuda", "mps")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            resolve_device("cuda")
    with pytest.raises(ValueError, match="device must be one of"):
        resolve_device("tpu0")
    assert resolve_dtype("bfloat16") is torch.bfloat16 and resolve_dtype(None) is None
    with pytest.raises(ValueError, match="dtype must be one of"):
        resolve_dtype("int8")


def test_trace_places_a_copy_never_the_given_model():
    gpt = GPT(GPTConfig(vocab_size=11, num_layers=1, num_heads=2, embed_dim=8)).eval()
    t = attnlab.trace(gpt, [1, 2, 3], dtype="bfloat16", device="cpu")
    assert t.meta["run"] == {"dtype": "bfloat16", "device": "cpu"}
    assert t.meta["precision"]["dtype"] == "bfloat16"  # the half-precision rule applies
    assert t.meta["precision"]["unit_roundoff"] == 2.0 ** -8
    assert next(gpt.parameters()).dtype is torch.float32
    rows = t.weights_rows(0, 1, [0, 1, 2])
    assert (rows.sum(-1) - 1).abs().max() < 1e-6


@pytest.mark.models
def test_cli_trace_chat_generate_json(tmp_path, capsys):
    out = tmp_path / "g.safetensors"
    rc = cli.main(["trace", "--model", "smollm2", "--text", "Name a fruit.", "--chat",
                   "--generate", "4", "--out", str(out), "--json"])
    got = json.loads(capsys.readouterr().out)
    assert rc == 0 and got["chat"] and len(got["generated"]) == 4
    assert got["generated"][0] == got["prompt_tokens"] and got["tokens"] == got[
        "prompt_tokens"] + 4
    assert got["dtype"] == "float32" and got["device"] == "cpu"
    t = attnlab.AttentionTrace.load(out)
    assert t.meta["generated"] == got["generated"]


@pytest.mark.parametrize("argv, words", [
    (["--device", "cuda"], "--device cuda: "),
    (["--temperature", "0.7"], "--temperature, --top-p and --seed shape a generation"),
    (["--generate", "3"], "--generate 3: minilm is not a causal language model"),
    (["--chat"], "--chat: minilm has no chat template"),
])
@pytest.mark.models
def test_cli_refusals_name_the_flag(tmp_path, capsys, argv, words):
    if argv[:2] == ["--device", "cuda"] and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    rc = cli.main(["trace", "--model", "minilm", "--text", "hi there", "--out",
                   str(tmp_path / "x.safetensors"), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and words in err[0]
