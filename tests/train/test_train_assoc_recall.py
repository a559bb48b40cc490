"""assoc-recall: the token shift that its default run uses, the lookup heads it is checked
for, and a short run showing the default learns where the plain GPT does not."""

from __future__ import annotations

import argparse

import pytest
import torch

from attnlab.nn.transformer import GPT as PlainGPT
from attnlab.nn.transformer import GPTConfig
from attnlab.tracing.attention import AttentionTrace
from attnlab.train.checkpoint import build_model, load_run
from attnlab.train.config import TrainConfig, add_arguments, config_from_args
from attnlab.train.heads import score_lookup_heads, score_lookup_traces
from attnlab.train.summary import summarize_run
from attnlab.train.tasks import get_task
from attnlab.train.tokenshift import GPT, shifted_input
from attnlab.train.trainer import train

_CFG = GPTConfig(vocab_size=12, block_size=8, num_layers=1, num_heads=2, embed_dim=8)


def test_the_input_adds_the_previous_tokens_embedding():
    torch.manual_seed(0)
    m = GPT(_CFG)
    idx = torch.tensor([[3, 7, 5, 1, 9]])
    x = shifted_input(m, idx)
    pos = m.wpe(torch.arange(5))
    assert torch.allclose(x[0, 0], m.wte.weight[3] + pos[0])  # nothing before position 0
    for t in range(1, 5):
        want = m.wte.weight[idx[0, t]] + m.wshift.weight[idx[0, t - 1]] + pos[t]
        assert torch.allclose(x[0, t], want)
    # wrong variants: the token two back, the current token in the shift table
    assert not torch.allclose(x[0, 3], m.wte.weight[1] + m.wshift.weight[7] + pos[3])
    assert not torch.allclose(x[0, 3], m.wte.weight[1] + m.wshift.weight[1] + pos[3])


def test_with_a_zero_shift_table_it_is_the_plain_gpt():
    torch.manual_seed(0)
    m = GPT(_CFG).eval()
    plain = PlainGPT(_CFG).eval()
    plain.load_state_dict({k: v for k, v in m.state_dict().items() if k != "wshift.weight"})
    idx = torch.randint(12, (2, 6))
    assert not torch.allclose(m(idx), plain(idx), atol=1e-6)  # the shift changes the output
    with torch.no_grad():
        m.wshift.weight.zero_()
    assert torch.allclose(m(idx), plain(idx), atol=1e-6)


def test_no_kv_cache_and_generate_recomputes_the_prefix():
    torch.manual_seed(0)
    m = GPT(_CFG).eval()
    idx = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="caches"):
        m(idx, [])
    with pytest.raises(ValueError, match="use_cache"):
        m.generate(idx, 2, use_cache=True)
    out = m.generate(idx, 3, greedy=True)
    x = idx
    for _ in range(3):  # the same greedy decoding, by hand
        x = torch.cat([x, m(x)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, x)
    with pytest.raises(TypeError, match="integer tensor"):
        m(idx.float())
    with pytest.raises(ValueError, match="outside the vocabulary"):
        m(torch.tensor([[12]]))
    with pytest.raises(ValueError, match="block_size"):
        m(torch.zeros(1, 9, dtype=torch.long))


def test_token_shift_is_assoc_recalls_default_only():
    assert TrainConfig.for_task("assoc-recall").token_shift is True
    assert not any(TrainConfig.for_task(t).token_shift
                   for t in ("copy", "reverse", "sort", "induction", "modular-add"))
    assert TrainConfig.for_task("assoc-recall", token_shift=False).token_shift is False
    assert isinstance(build_model(TrainConfig.for_task("assoc-recall")), GPT)
    assert type(build_model(TrainConfig.for_task("induction"))) is PlainGPT
    with pytest.raises(ValueError, match="--token-shift"):
        TrainConfig(token_shift=1)
    # a run written before the field existed ran without the shift
    old = TrainConfig.for_task("induction").to_dict()
    del old["token_shift"]
    assert TrainConfig.from_dict(old).token_shift is False
    p = add_arguments(argparse.ArgumentParser())
    assert config_from_args(p.parse_args(["--task", "assoc-recall", "--out", "x"])).token_shift
    assert not config_from_args(p.parse_args(
        ["--task", "assoc-recall", "--out", "x", "--no-token-shift"])).token_shift
    assert config_from_args(p.parse_args(
        ["--task", "copy", "--out", "x", "--token-shift"])).token_shift


def _trace(ids: list[int], target: str) -> AttentionTrace:
    """One head whose last row puts all its weight on ``target`` ("value": the token after
    the earlier occurrence of the last token, "key": that occurrence, "uniform")."""
    n = len(ids)
    w = torch.zeros(n, n)
    for t in range(n):
        w[t, : t + 1] = 1.0 / (t + 1)
    k = ids.index(ids[-1])
    if target != "uniform":
        w[-1] = 0.0
        w[-1, k + 1 if target == "value" else k] = 1.0
    return AttentionTrace(tokens=[str(i) for i in ids], weights=w[None, None], token_ids=ids)


def test_lookup_scores_find_the_value_not_its_neighbours():
    ids = [0, 20, 5, 21, 6, 22, 7, 1, 21]  # <bos> k v k v k v ? k -> the answer is 6
    value = score_lookup_traces([_trace(ids, "value")])
    key = score_lookup_traces([_trace(ids, "key")])
    uniform = score_lookup_traces([_trace(ids, "uniform")])
    assert value.value.item() == pytest.approx(1.0) and value.key.item() == 0.0
    assert key.value.item() == 0.0 and key.key.item() == pytest.approx(1.0)
    assert uniform.value.item() == pytest.approx(1 / len(ids))
    no_key = _trace([0, 20, 5, 1, 23], "uniform")  # the query key never occurred
    both = score_lookup_traces([_trace(ids, "value"), no_key])
    assert both.sequences == 1 and both.value.item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no key to look up"):
        score_lookup_traces([no_key])
    js = value.to_json()
    assert js["query_to_value"]["score"] == 1.0 and js["sequences"] == 1


@pytest.mark.slow
def test_default_learns_the_lookup_where_the_plain_gpt_does_not(tmp_path):
    chance = get_task("assoc-recall").chance
    runs = {}
    for shift in (True, False):
        cfg = TrainConfig.for_task("assoc-recall", steps=150, token_shift=shift,
                                   log_every=50, checkpoint_every=1000, eval_batches=4)
        runs[shift] = train(cfg, tmp_path / str(shift), quiet=True)
    assert runs[True].eval_accuracy >= 0.9, runs[True].eval_accuracy
    assert runs[False].eval_accuracy < 0.4, runs[False].eval_accuracy  # one of the 6 values
    assert runs[False].eval_accuracy > 2 * chance
    head = runs[True].heads["query_to_value"]
    assert head["score"] >= 0.5 and runs[False].heads["query_to_value"]["score"] < 0.5
    # the run reads back as a token-shift GPT and passes the lookup checks; the plain fails
    model, _ = load_run(tmp_path / "True")
    assert isinstance(model, GPT)
    idx = get_task("assoc-recall").batch(0, 16, 0, split="eval").inputs
    assert score_lookup_heads(model, idx).best_value[2] == pytest.approx(head["score"],
                                                                         abs=1e-3)
    assert summarize_run(tmp_path / "True").passed
    assert not any(ok for _, _, ok in summarize_run(tmp_path / "False").checks)


def test_heads_text_names_each_tasks_heads():
    from pathlib import Path

    from attnlab.train.trainer import TrainResult

    def result(heads):
        return TrainResult(Path("r"), TrainConfig(), 1, 0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1, heads)

    h = {"layer": 1, "head": 0, "score": 0.987}
    assert result({"previous_token": {**h, "layer": 0, "head": 3, "score": 0.41},
                   "induction": h}).heads_text() == (
        "previous-token head L0H3 (score 0.41), induction head L1H0 (score 0.99)")
    assert result({"query_to_value": h, "query_to_key": h}).heads_text() == (
        "lookup head (query key -> value after it) L1H0 (score 0.99)")
    assert result(None).heads_text() == ""


def test_a_token_shift_run_resumes_exactly_and_refuses_a_plain_checkpoint(tmp_path, tiny):
    from attnlab.train.checkpoint import CheckpointError, load_checkpoint

    straight = tiny("assoc-recall", steps=6, checkpoint_every=3)
    assert straight.token_shift
    train(straight, tmp_path / "straight", quiet=True)
    train(tiny("assoc-recall", steps=3, checkpoint_every=3), tmp_path / "split", quiet=True)
    train(straight, tmp_path / "split", resume=True, quiet=True)
    a, b = build_model(straight), build_model(straight)
    load_checkpoint(tmp_path / "straight", a, config=straight, restore_rng=False)
    load_checkpoint(tmp_path / "split", b, config=straight, restore_rng=False)
    sa, sb = a.state_dict(), b.state_dict()
    assert "wshift.weight" in sa
    assert max(float((sa[k] - sb[k]).abs().max()) for k in sa) <= 1e-6
    plain = tiny("assoc-recall", steps=6, checkpoint_every=3, token_shift=False)
    with pytest.raises(CheckpointError, match="token_shift"):  # another model: refused
        train(plain, tmp_path / "straight", resume=True, quiet=True)
