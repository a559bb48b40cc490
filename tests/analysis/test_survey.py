"""The survey: its numbers are the literature definitions averaged over the texts; a padded
batch gives what one text at a time gives; a run killed with SIGKILL and resumed gives the
uninterrupted result; ``torchrun --nproc_per_node=2`` gives the one-process result; bad
input is one clear error."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from oracles import own_scores
from survey_helpers import WORDS, tiny_gpt, tiny_hf, write_corpus

from attnlab import cli
from attnlab._io import FolderBusyError
from attnlab.analysis import literature as lit
from attnlab.analysis.survey import (
    ROLES,
    Corpus,
    SurveyConfig,
    builtin_corpus,
    survey,
)
from limits import CHILD_S, SLOW_CHILD_S

HELPERS = str(Path(__file__).resolve().parent / "survey_helpers.py")
NUMERIC = ("scores", "roles", "profile", "sink", "texts", "tokens", "truncated", "skipped")


@pytest.fixture(autouse=True)
def one_thread():
    """The subprocesses run on one thread (torchrun sets OMP_NUM_THREADS=1): so does the
    in-process reference, so that both do the same float operations."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def gpt():
    return tiny_gpt(block_size=96)


def _flat(x, prefix=""):
    """Every number of a JSON tree, by path."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _flat(v, f"{prefix}/{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _flat(v, f"{prefix}/{i}")
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        yield prefix, float(x)


def _max_diff(a: dict, b: dict, keys=NUMERIC) -> float:
    fa = dict(_flat({k: a[k] for k in keys}))
    fb = dict(_flat({k: b[k] for k in keys}))
    assert fa.keys() == fb.keys()
    return max(abs(fa[k] - fb[k]) for k in fa)


# --------------------------------------------------------------------------------------
# the corpus
# --------------------------------------------------------------------------------------


def test_a_txt_corpus_is_one_text_a_line_and_jsonl_a_text_field(tmp_path):
    txt = tmp_path / "c.txt"
    txt.write_text("\ufefffirst text\n\n   \nsecond text\r\nthird\n", encoding="utf-8")
    c = Corpus(txt)
    assert list(c) == ["first text", "second text", "third"] and c.scan()[0] == 3
    js = tmp_path / "c.jsonl"
    js.write_text('{"text": "a b"}\n\n{"text": "c", "id": 2}\n', encoding="utf-8")
    assert list(Corpus(js)) == ["a b", "c"]
    n, digest = Corpus(js).scan()
    js.write_text('{"text": "a b"}\n\n{"text": "d", "id": 2}\n', encoding="utf-8")
    assert Corpus(js).scan() == (n, Corpus(js).scan()[1]) and Corpus(js).scan()[1] != digest


@pytest.mark.parametrize("name, content, message", [
    ("bad.jsonl", '{"text": "ok"}\n{"text": "ok"}\n{"text": oops}\n',
     r"line 3 is not valid JSON \(Expecting value at column 10\)"),
    ("bad.jsonl", '{"text": "ok"}\n["a list"]\n', r'line 2 has no "text" field'),
    ("bad.jsonl", '{"text": 5}\n', r'line 1: "text" must be a string, got int'),
    ("empty.txt", "\n  \n\n", r"holds no text \(every line is blank\)"),
    ("bytes.txt", b"fine\n\xff\xfe bad\n", r"line 2 is not UTF-8 \(byte 0xff at column 1\)"),
    ("corpus.csv", "a,b\n", r"must be a \.txt file .* or a \.jsonl file .* got \.csv"),
])
def test_bad_corpora_are_refused_naming_the_line(tmp_path, name, content, message):
    path = tmp_path / name
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    with pytest.raises(ValueError, match=message) as info:
        Corpus(path).scan()
    assert str(path) in str(info.value) and "--texts" in str(info.value)


def test_a_missing_corpus_names_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"--texts .*nothing\.txt: no such file"):
        Corpus(tmp_path / "nothing.txt")


def test_the_builtin_corpus_is_attnlabs_own_prose():
    texts = builtin_corpus()
    assert len(texts) >= 100 and all(len(t) >= 300 and "\n" not in t for t in texts)
    assert not any(">>>" in t for t in texts)


# --------------------------------------------------------------------------------------
# the numbers
# --------------------------------------------------------------------------------------


def _reference(model, texts, cfg):
    """The survey's means computed text by text, each from its own unbatched pattern, by
    the literature functions."""
    per: dict[str, list] = {}
    sink64 = []
    for text in texts:
        ids = model.tokenizer.encode(text)[:cfg.max_tokens]
        (a,) = lit.attention_patterns(model, [ids])  # (L, H, n, n)
        vals = own_scores(a, ids)
        for name, ref in (("previous", lit.previous_token_pattern(len(ids))),
                          ("duplicate", lit.duplicate_token_pattern(ids)),
                          ("induction", lit.induction_pattern(ids))):
            vals[f"tl-{name}-abs"] = lit.head_similarity(a, ref, error_measure="abs",
                                                         round_abs=False)
        vals["gu-sink"] = lit.token_importance(a, causal=True)[..., 0]
        repeated = bool(lit.duplicate_token_pattern(ids).any())
        for k, v in vals.items():
            if repeated or k not in ("duplicate", "induction", "tl-duplicate-abs",
                                     "tl-induction-abs"):
                per.setdefault(k, []).append(v)
        if len(ids) >= 64:
            sink64.append(lit.token_importance(a[..., :64, :64], causal=True)[..., 0])
    return {k: torch.stack(v).mean(0) for k, v in per.items()}, sink64


def test_survey_means_are_the_literature_definitions_averaged(gpt, tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 14, lo=1, hi=90)
    cfg = SurveyConfig(batch_size=1, max_tokens=80, probes=False)
    r = survey(gpt, Corpus(corpus), tmp_path / "out", config=cfg)
    texts = list(Corpus(corpus))
    ref, sink64 = _reference(gpt, texts, cfg)
    assert r.scores == list(ref) or set(r.scores) == set(ref)
    for name in r.scores:
        assert torch.allclose(r.mean(name), ref[name], atol=1e-9), name
    # roles: the share of texts in which the score is at the threshold or above (sink:
    # strictly above), among the texts where the score is defined
    nontrivial = False
    for role, (score, th, strict) in ROLES.items():
        v = _per_text(gpt, texts, cfg, score)  # (texts where defined, L, H)
        hit = (v > th) if strict else (v >= th)
        want = hit.double().mean(0)
        assert torch.equal(r.role_share(role), want), role
        nontrivial |= bool(((want > 0) & (want < 1)).any())
    assert nontrivial  # some head plays some role in some texts and not in others
    # Gu et al.'s Sink% on the first 64 tokens of the texts that have them
    a = torch.stack(sink64)
    assert r.to_json()["sink"]["samples"] == len(sink64) > 0
    assert r.sink_percent() == pytest.approx(lit.sink_percent(a))
    # each head's relative-distance profile is a distribution over offsets
    assert torch.allclose(r.profile().sum(-1), torch.ones(2, 2, dtype=torch.float64),
                          atol=1e-9)


def _per_text(model, texts, cfg, score):
    """(texts where ``score`` is defined, L, H): each text's value from its own pattern."""
    out = []
    for text in texts:
        ids = model.tokenizer.encode(text)[:cfg.max_tokens]
        if score in ("duplicate", "induction") and not lit.duplicate_token_pattern(ids).any():
            continue
        (a,) = lit.attention_patterns(model, [ids])
        vals = own_scores(a, ids)
        vals["gu-sink"] = lit.token_importance(a, causal=True)[..., 0]
        out.append(vals[score])
    return torch.stack(out)


def test_gu_sink_percent_on_causal_prefixes_is_the_64_token_inputs(gpt, tmp_path):
    """A causal model's first 64 queries never see a later key: the prefix of a longer
    input is the 64-token input."""
    corpus = write_corpus(tmp_path / "c.txt", 6, lo=70, hi=90)
    r = survey(gpt, Corpus(corpus), tmp_path / "out",
               config=SurveyConfig(max_tokens=90, probes=False))
    gu = lit.gu_sink_rate(gpt, list(Corpus(corpus)), tokens=64)
    assert gu["samples"] == 6 and r.to_json()["sink"]["samples"] == 6
    assert r.sink_percent() == pytest.approx(gu["sink_percent"], abs=1e-9)
    assert torch.allclose(r.sums["sink_hits"] / 6, gu["per_head"], atol=1e-12)


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    from attnlab.models import load

    return load(tiny_hf(tmp_path_factory.mktemp("bert"), "bert"), reuse=False)


@pytest.mark.parametrize("which", ["gpt", "bert"])
def test_a_padded_batch_gives_one_text_at_a_time(which, gpt, bert, tmp_path):
    model = gpt if which == "gpt" else bert
    corpus = Corpus(write_corpus(tmp_path / "c.txt", 12, lo=1, hi=60))
    cfg = dict(max_tokens=64, probes=False)
    one = survey(model, corpus, tmp_path / "one", config=SurveyConfig(batch_size=1, **cfg))
    many = survey(model, corpus, tmp_path / "many", config=SurveyConfig(batch_size=5, **cfg))
    a, b = one.to_json(), many.to_json()
    assert _max_diff(a, b) <= 1e-6
    assert ("tl-previous-abs" in a["scores"]) == (which == "gpt")  # abs: causal only


def test_without_the_key_mask_a_batch_would_differ(bert, tmp_path, monkeypatch):
    """The check above catches padding that leaks: a bidirectional model run without its
    padding mask gives other numbers."""
    corpus = Corpus(write_corpus(tmp_path / "c.txt", 6, lo=1, hi=40))
    cfg = dict(max_tokens=64, probes=False)
    one = survey(bert, corpus, tmp_path / "one", config=SurveyConfig(batch_size=1, **cfg))
    from attnlab.tracing import runner

    real = runner.forward
    monkeypatch.setattr(runner, "forward",
                        lambda model, ids, mask: real(model, ids, torch.ones_like(mask)))
    leaky = survey(bert, corpus, tmp_path / "leaky", config=SurveyConfig(batch_size=6, **cfg))
    assert _max_diff(one.to_json(), leaky.to_json()) > 1e-3


# --------------------------------------------------------------------------------------
# the distance profile, long texts and the memory budget
# --------------------------------------------------------------------------------------


def _profile_reference(model, texts, cfg, sign=1):
    """(L, H, 2d + 3): each text's mass at each clamped offset sign·(i - j), added over the
    texts, from its own unbatched pattern."""
    from attnlab.analysis.corpus import first_ids

    d, out = cfg.max_distance, None
    for text in texts:
        ids, _ = first_ids(model.tokenizer, text, cfg.max_tokens)  # BOS first, as surveyed
        (a,) = lit.attention_patterns(model, [ids])  # (L, H, n, n)
        n = len(ids)
        pos = torch.arange(n)
        bins = (sign * (pos[:, None] - pos[None, :])).clamp(-d - 1, d + 1) + d + 1
        onehot = torch.nn.functional.one_hot(bins, 2 * d + 3).double()  # (n, n, P)
        got = torch.einsum("lhij,ijp->lhp", a.double(), onehot)
        out = got if out is None else out + got
    return out


@pytest.mark.parametrize("which", ["gpt", "bert"])
def test_the_distance_profile_is_each_texts_mass_at_each_offset(which, gpt, bert, tmp_path):
    """Every bin, both tails included (a bidirectional model has mass on keys after the
    query), against each text's own pattern; the offset read the other way round (key
    minus query) is caught."""
    model = gpt if which == "gpt" else bert
    corpus = Corpus(write_corpus(tmp_path / "c.txt", 7, lo=2, hi=40))
    cfg = SurveyConfig(batch_size=3, max_tokens=40, max_distance=3, probes=False)
    r = survey(model, corpus, tmp_path / "out", config=cfg)
    texts = list(corpus)
    ref = _profile_reference(model, texts, cfg)
    assert torch.allclose(r.sums["profile"], ref, atol=1e-9)
    assert float(ref[..., 0].abs().max()) > 1e-3 if which == "bert" else (
        float(ref[..., 0].abs().max()) == 0.0)  # keys after the query: only bidirectional
    assert float(ref[..., -1].min()) > 1e-3  # keys beyond d before the query: both
    flipped = _profile_reference(model, texts, cfg, sign=-1)
    assert float((r.sums["profile"] - flipped).abs().max()) > 1e-2


def test_heads_reduced_one_group_at_a_time_give_the_same_sums(gpt, tmp_path, monkeypatch):
    """The layer's heads in groups of one (the smallest group the memory allows) add the
    same sums as all heads at once."""
    from attnlab.analysis import survey as mod

    corpus = Corpus(write_corpus(tmp_path / "c.txt", 9, lo=1, hi=60))
    cfg = SurveyConfig(batch_size=4, max_tokens=64, probes=False)
    whole = survey(gpt, corpus, tmp_path / "whole", config=cfg)
    groups = []
    real = mod._heads_layer
    monkeypatch.setattr(mod, "SURVEY_CHUNK", 1)
    monkeypatch.setattr(mod, "_heads_layer",
                        lambda w, *a: groups.append(w.shape[1]) or real(w, *a))
    split = survey(gpt, corpus, tmp_path / "split", config=cfg)
    assert groups and set(groups) == {1} and len(groups) == 2 * 2 * 3  # layers·heads·batches
    for k, v in whole.sums.items():
        assert torch.allclose(split.sums[k], v, rtol=0, atol=1e-12), k


def test_a_batch_past_the_memory_budget_is_refused_before_it_runs(gpt, tmp_path):
    from attnlab.tracing.budget import MemoryBudgetError, estimate_survey_bytes, parse_memory

    corpus = Corpus(write_corpus(tmp_path / "c.txt", 4, lo=1, hi=60))
    cfg = SurveyConfig(batch_size=8, max_tokens=96, probes=False)
    need = estimate_survey_bytes(gpt, 8, 96).total
    budget = need // 3
    with pytest.raises(MemoryBudgetError) as info:
        survey(gpt, corpus, tmp_path / "out", config=cfg, max_memory=budget)
    msg = str(info.value)
    assert "batch of 8 texts of up to 96 tokens" in msg and "--max-memory" in msg
    assert not (tmp_path / "out").exists()  # refused before anything was written
    # the settings it names are the largest that fit
    import re

    batches = int(re.search(r"batch_size (\d+) \(--batch-size\)", msg).group(1))
    tokens = int(re.search(r"max_tokens (\d+) \(--max-tokens\)", msg).group(1))
    assert estimate_survey_bytes(gpt, batches, 96).total <= budget
    assert estimate_survey_bytes(gpt, batches + 1, 96).total > budget
    assert estimate_survey_bytes(gpt, 8, tokens).total <= budget
    assert estimate_survey_bytes(gpt, 8, tokens + 1).total > budget
    # at the budget it needs, the same survey runs
    ok = survey(gpt, corpus, tmp_path / "ok", config=cfg, max_memory=need)
    assert int(ok.sums["texts"]) == 4
    assert parse_memory("1MB") < need  # the CLI case below is refused too


def test_texts_longer_than_the_model_accepts_are_cut_to_its_limit(tmp_path):
    """max_tokens above the model's window: each text is cut to the window, counted as
    truncated and said in a warning; the sums are those of max_tokens = the window."""
    from attnlab.analysis.survey import TextsCutWarning

    small = tiny_gpt(block_size=24)
    corpus = Corpus(write_corpus(tmp_path / "c.txt", 6, lo=10, hi=40))
    with pytest.warns(TextsCutWarning, match="above the 24 tokens tiny-gpt accepts"):
        cut = survey(small, corpus, tmp_path / "cut",
                     config=SurveyConfig(batch_size=2, max_tokens=64, probes=False))
    at = survey(small, corpus, tmp_path / "at",
                config=SurveyConfig(batch_size=2, max_tokens=24, probes=False))
    longer = sum(len(small.tokenizer.encode(t)) > 24 for t in corpus)
    assert 0 < longer < 6 and int(cut.sums["truncated"]) == longer
    for k in ("sum", "sumsq", "profile", "texts", "tokens", "truncated"):
        assert torch.allclose(cut.sums[k], at.sums[k], rtol=0, atol=1e-12), k


def test_cli_survey_past_the_memory_budget_is_one_line(llama_dir, tmp_path, capsys):
    corpus = write_corpus(tmp_path / "c.txt", 3)
    rc = cli.main(["survey", "--model", str(llama_dir), "--texts", str(corpus), "--out",
                   str(tmp_path / "o"), "--batch-size", "8", "--max-tokens", "128",
                   "--max-memory", "1MB", "--quiet", "--no-probes"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert "above the memory budget of" in err and "(--max-tokens)" in err
    assert not (tmp_path / "o" / "state").exists()
    rc = cli.main(["survey", "--model", str(llama_dir), "--texts", str(corpus), "--out",
                   str(tmp_path / "o"), "--max-memory", "4 GB"])
    err = capsys.readouterr().err
    assert rc == 2 and "--max-memory must be a size such as 4GB" in err


# --------------------------------------------------------------------------------------
# resume, and refusing a state that is not this run's
# --------------------------------------------------------------------------------------


def _state_meta(path: Path) -> dict:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return json.loads(f.metadata()["attnlab"])


@pytest.mark.slow
def test_a_survey_killed_mid_run_resumes_to_the_uninterrupted_result(gpt, tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", 300, lo=1, hi=60)
    out = tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, HELPERS, str(corpus), str(out), "2", "1"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    state = out / "state" / "rank-0-of-1.safetensors"
    deadline = time.monotonic() + SLOW_CHILD_S
    while time.monotonic() < deadline and proc.poll() is None:
        if state.is_file() and _state_meta(state)["next_batch"] >= 3:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.wait(timeout=CHILD_S)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    meta = _state_meta(state)
    assert not meta["done"] and 3 <= meta["next_batch"] < 150
    assert not (out / "survey.json").exists()
    subprocess.run(cmd, env=env, check=True, timeout=SLOW_CHILD_S, capture_output=True)
    resumed = json.loads((out / "survey.json").read_text())
    assert resumed["seconds"]["resumed_from_batch"] >= meta["next_batch"]
    ref = survey(gpt, Corpus(corpus), tmp_path / "ref",
                 config=SurveyConfig(batch_size=2, checkpoint_every=1, probes=False),
                 device="cpu").to_json()
    assert _max_diff(ref, resumed) == 0.0  # the same float64 sums, in the same order
    assert resumed["texts"] == 300


def test_a_state_of_other_settings_is_refused_and_restart_starts_over(gpt, tmp_path):
    corpus = Corpus(write_corpus(tmp_path / "c.txt", 5))
    out = tmp_path / "out"
    first = survey(gpt, corpus, out, config=SurveyConfig(batch_size=2, probes=False))
    again = survey(gpt, corpus, out, config=SurveyConfig(batch_size=2, probes=False))
    assert again.seconds["resumed_from_batch"] == 3  # the finished state: nothing redone
    assert _max_diff(first.to_json(), again.to_json()) == 0.0
    with pytest.raises(ValueError, match="another corpus, model or settings"):
        survey(gpt, corpus, out, config=SurveyConfig(batch_size=3, probes=False))
    other = Corpus(write_corpus(tmp_path / "d.txt", 5, seed=1))
    with pytest.raises(ValueError, match="another corpus, model or settings"):
        survey(gpt, other, out, config=SurveyConfig(batch_size=2, probes=False))
    fresh = survey(gpt, other, out, config=SurveyConfig(batch_size=2, probes=False),
                   restart=True)
    assert "resumed_from_batch" not in fresh.seconds


# --------------------------------------------------------------------------------------
# torchrun, and the command line
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return tiny_hf(tmp_path_factory.mktemp("llama"), "llama")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A trained-run folder of attnlab's GPT (random weights, the induction task's symbols):
    `attnlab survey --model DIR` loads it without importing transformers."""
    checkpoint = pytest.importorskip("attnlab.train.checkpoint")
    from attnlab.train.config import TrainConfig

    d = tmp_path_factory.mktemp("run")
    torch.manual_seed(0)
    cfg = TrainConfig(steps=1)
    model = checkpoint.build_model(cfg)
    checkpoint.write_config(d, cfg)
    checkpoint.save_checkpoint(d, model, torch.optim.AdamW(model.parameters()), step=0,
                               config=cfg)
    return d


@pytest.mark.slow
def test_torchrun_two_processes_equal_one(run_dir, tmp_path):
    from attnlab.models import load

    model = load(run_dir, reuse=False)
    symbols = model.tokenizer.symbols[1:]
    rng = __import__("random").Random(0)
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(" ".join(rng.choice(symbols) for _ in range(
        rng.randint(1, model.max_length - 1))) + "\n" for _ in range(23)))
    out = tmp_path / "two"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "-m", "attnlab", "survey", "--model", str(run_dir), "--texts", str(corpus),
         "--out", str(out), "--batch-size", "3", "--checkpoint-every", "2", "--no-probes",
         "--quiet"], env=env, capture_output=True, text=True, timeout=SLOW_CHILD_S)
    assert run.returncode == 0, run.stderr[-3000:]
    two = json.loads((out / "survey.json").read_text())
    assert two["world_size"] == 2 and two["backend"] == "gloo"
    assert sorted(p.name for p in (out / "state").iterdir()) == [
        "rank-0-of-2.safetensors", "rank-1-of-2.safetensors"]
    assert (out / "index.html").read_text(encoding="utf-8").count("<figure>") >= 3
    # the default max_tokens (64) is above this model's window (32): said, and no text of
    # this corpus is longer than the window
    from attnlab.analysis.survey import TextsCutWarning

    cfg = SurveyConfig(batch_size=3, probes=False)
    with pytest.warns(TextsCutWarning, match="above the 32 tokens"):
        one = survey(model, Corpus(corpus), tmp_path / "one", config=cfg).to_json()
    assert one["world_size"] == 1 and two["texts"] == one["texts"] == 23
    assert one["truncated"] == two["truncated"] == 0
    assert _max_diff(one, two) <= 1e-6
    with pytest.raises(ValueError, match="another number of processes"), \
            pytest.warns(TextsCutWarning):
        survey(model, Corpus(corpus), out, config=cfg)


@pytest.mark.slow
def test_torchrun_on_fewer_batches_than_processes_splits_the_heads(run_dir, tmp_path):
    """One long text and two processes: each runs the text for half of the heads; the
    result is the one-process result."""
    from attnlab.models import load

    model = load(run_dir, reuse=False)
    symbols = model.tokenizer.symbols[1:]
    rng = __import__("random").Random(1)
    corpus = tmp_path / "c.txt"
    corpus.write_text(" ".join(rng.choice(symbols) for _ in range(model.max_length)) + "\n")
    out = tmp_path / "two"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "-m", "attnlab", "survey", "--model", str(run_dir), "--texts", str(corpus),
         "--out", str(out), "--max-tokens", str(model.max_length), "--no-probes",
         "--quiet"], env=env, capture_output=True, text=True, timeout=SLOW_CHILD_S)
    assert run.returncode == 0, run.stderr[-3000:]
    two = json.loads((out / "survey.json").read_text())
    assert two["world_size"] == 2 and two["split"] == "heads"
    cfg = SurveyConfig(max_tokens=model.max_length, probes=False)
    one = survey(model, Corpus(corpus), tmp_path / "one", config=cfg).to_json()
    assert one["split"] == "batches" and two["texts"] == one["texts"] == 1
    assert two["truncated"] == one["truncated"] == 1  # counted once, not once a process
    assert _max_diff(one, two) <= 1e-12


@pytest.mark.parametrize("heads", [range(0, 1), range(1, 3), range(3, 4), range(0, 4)])
def test_a_layers_weights_for_a_range_of_heads_are_those_heads_of_all(llama_dir, heads):
    """Grouped key/value heads (4 query heads on 2): each query head of the range reads its
    own key/value head, and its weights are the ones all heads at once give."""
    from attnlab.models import load
    from attnlab.tracing.runner import for_each_layer

    model = load(llama_dir, reuse=False)
    batch = [[2, 5, 6, 7, 5, 6, 9], [2, 8, 8, 3]]
    whole, part = [], []
    for_each_layer(model, batch, lambda layer, w: whole.append(w))
    for_each_layer(model, batch, lambda layer, w: part.append(w), heads=heads)
    assert len(part) == len(whole) == 2
    for w, p in zip(whole, part):
        assert p.shape == (2, len(heads), 7, 7)
        assert torch.equal(p, w[:, heads.start:heads.stop])
    if heads != range(0, 4):  # the wrong key/value head would give other weights
        other = 1 - heads.start * 2 // 4
        assert not torch.equal(whole[0][:, heads.start], whole[0][:, 2 * other])


def test_a_share_of_the_heads_adds_only_those_heads_and_counts_only_if_asked(gpt):
    """What each process of a head split adds: its heads' sums (the others stay 0), and
    the texts' counts only where asked; a process with no heads runs no forward pass."""
    from attnlab.analysis import survey as mod
    from attnlab.analysis.survey_result import SurveySums, score_names

    cfg = SurveyConfig(batch_size=3, max_tokens=64, probes=False)
    texts = [" ".join(WORDS[i:i + 30]) for i in range(3)]
    names = score_names(True)

    def run(**kw):
        sums = SurveySums(2, 2, names, cfg)
        mod._run_batch(gpt, texts, cfg, names, sums, True, **kw)
        return sums.t

    whole = run()
    first = run(heads=range(0, 1), count=True)
    second = run(heads=range(1, 2), count=False)
    calls = []
    real = mod.for_each_layer
    mod.for_each_layer = lambda *a, **k: calls.append(a) or real(*a, **k)
    try:
        none = run(heads=range(0, 0), count=True)
    finally:
        mod.for_each_layer = real
    assert not calls
    for k, v in whole.items():
        if v.dim() >= 2 and v.shape[:2] == (2, 2):  # per head: (layer, head, ...)
            assert torch.equal(first[k][:, 1], torch.zeros_like(v[:, 1])), k
            assert torch.equal(second[k][:, 0], torch.zeros_like(v[:, 0])), k
            assert torch.allclose(first[k] + second[k], v, rtol=0, atol=1e-12), k
            assert torch.equal(none[k], torch.zeros_like(v)), k
        else:  # the counts
            assert torch.equal(first[k], v) and torch.equal(none[k], v), k
            assert torch.equal(second[k], torch.zeros_like(v)), k
    assert float(whole["texts"]) == 3


def test_cli_survey_writes_the_result_and_its_page(llama_dir, tmp_path, capsys):
    corpus = write_corpus(tmp_path / "c.jsonl", 0)
    corpus.write_text("".join(json.dumps({"text": " ".join(WORDS[i:i + 9])}) + "\n"
                              for i in range(6)), encoding="utf-8")
    out = tmp_path / "out"
    assert cli.main(["survey", "--model", str(llama_dir), "--texts", str(corpus), "--out",
                     str(out), "--batch-size", "4", "--json"]) == 0
    head = json.loads(capsys.readouterr().out)
    assert head["texts"] == 6 and head["world_size"] == 1
    assert len(head["induction"]) == 5 and "olsson_prefix_matching" in head["induction"][0]
    assert len(head["previous_token"]) == 5 and "previous_abs" in head["previous_token"][0]
    data = json.loads((out / "survey.json").read_text())
    assert data["probes"]["tl-demo-induction"]["info"]["scaled"] is True
    html = (out / "index.html").read_text(encoding="utf-8")
    assert "http://" not in html and "https://" not in html and 'lang="zh"' in html


@pytest.mark.parametrize("args, message", [
    (["--texts", "MISSING"], "--texts MISSING: no such file"),
    (["--texts", "EMPTY"], "holds no text"),
    (["--texts", "BAD"], "line 2 is not valid JSON"),
    (["--texts", "EMPTY", "--batch-size", "0"], "--batch-size must be a positive int, got 0"),
    (["--texts", "EMPTY", "--max-tokens", "1"], "--max-tokens must be >= 2, got 1"),
])
def test_cli_survey_bad_input_is_one_line(args, message, tmp_path, capsys):
    files = {"MISSING": tmp_path / "missing.txt", "EMPTY": tmp_path / "empty.txt",
             "BAD": tmp_path / "bad.jsonl"}
    files["EMPTY"].write_text("\n\n")
    files["BAD"].write_text('{"text": "a"}\n{"text": \n')
    argv = [str(files.get(a, a)) for a in args]
    rc = cli.main(["survey", "--model", "no-such-model", *argv, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and message in err.replace(str(tmp_path) + "/", "").replace(
        "missing.txt", "MISSING") and err.count("\n") == 1


# --------------------------------------------------------------------------------------
# the page and the report section
# --------------------------------------------------------------------------------------


def test_every_visible_string_of_the_survey_page_has_chinese(gpt, tmp_path):
    from attnlab.i18n import figure_texts, merge, missing
    from attnlab.report import page
    from attnlab.report import survey as part

    r = survey(gpt, Corpus(write_corpus(tmp_path / "c.txt", 8)), tmp_path / "o",
               config=SurveyConfig(batch_size=4))
    data = r.to_json()
    cat = merge(part.ZH)
    for draw in (part._heatmaps, part._distributions, part._profiles):
        fig = draw(data)
        assert missing(figure_texts(fig), cat) == [], draw.__name__
    section = part.section_from(data, checks=[("every head's distance profile sums to 1 "
                                               "(max |Σ − 1|)", 0.0, True)])
    assert section.passed is True and section.id == "survey"
    assert section.html.count('class="zh"') > 20 and section.html.count("<img") == 6
    html = page.render_page([section])
    assert "http://" not in html and "https://" not in html
    keys = list(page.PROVIDERS)
    at = keys.index("long-contexts")
    assert keys[at:at + 3] == ["long-contexts", "attribution", "survey"]
    assert page.PROVIDERS["survey"] == "attnlab.report.survey:build"


def _hold_lock(out: Path) -> subprocess.Popen:
    """Another process holding rank 0's survey lock of ``out`` (until killed)."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from attnlab._io import lock_folder\n"
        "with lock_folder(sys.argv[1], name='survey-rank-0'):\n"
        "    print('held', flush=True); time.sleep(600)"), str(out)], stdout=subprocess.PIPE)
    assert holder.stdout.readline().strip() == b"held"
    return holder


def test_two_surveys_on_one_folder_the_second_is_refused_or_waits(gpt, tmp_path):
    """One writer per --out: a second run is refused at once naming the first's pid (its
    result would otherwise overwrite the first's), or with ``wait`` runs once the first is
    done; a lock left by a killed process is taken over."""
    corpus = write_corpus(tmp_path / "c.txt", 300, lo=1, hi=60)
    other = write_corpus(tmp_path / "d.txt", 20, lo=1, hi=30)
    out = tmp_path / "shared-out"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, HELPERS, str(corpus), str(out), "2", "1"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    state = out / "state" / "rank-0-of-1.safetensors"
    deadline = time.monotonic() + SLOW_CHILD_S
    while time.monotonic() < deadline and not state.is_file() and proc.poll() is None:
        time.sleep(0.01)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
    cfg = SurveyConfig(batch_size=2, checkpoint_every=1, probes=False)
    with pytest.raises(FolderBusyError, match=rf"--out {out}: .*pid {proc.pid}\b.*--wait"):
        survey(gpt, Corpus(other), out, config=cfg, device="cpu")
    assert proc.poll() is None  # the first run goes on, untouched
    waited = survey(gpt, Corpus(corpus), out, config=cfg, device="cpu", wait=True)
    assert proc.wait(timeout=CHILD_S) == 0  # the waiting run started only after the first ended
    first = json.loads((out / "survey.json").read_text())
    assert _max_diff(first, waited.to_json()) == 0.0 and waited.to_json()["texts"] == 300
    # a holder killed while it holds the lock: the next run takes the lock over
    holder = _hold_lock(out)
    with pytest.raises(FolderBusyError, match=f"pid {holder.pid}"):
        survey(gpt, Corpus(corpus), out, config=cfg, device="cpu")
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=CHILD_S)
    assert (out / ".attnlab-lock-survey-rank-0").is_file()  # left behind, but not held
    again = survey(gpt, Corpus(corpus), out, config=cfg, device="cpu")
    assert _max_diff(first, again.to_json()) == 0.0


def test_cli_survey_on_a_busy_folder_is_one_line_naming_the_holder(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "c.txt", 4, lo=1, hi=10)
    out = tmp_path / "busy"
    holder = _hold_lock(out)
    try:
        # refused before the model is loaded: this model name is never looked up
        code = cli.main(["survey", "--model", "nowhere-model-not-loaded", "--texts",
                         str(corpus), "--out", str(out)])
    finally:
        holder.kill()
        holder.wait(timeout=CHILD_S)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"pid {holder.pid}" in err and "--wait" in err and "--out" in err


class _Counting:
    """A tokenizer wrapper that records the length of every text it is given."""

    def __init__(self, tok):
        self.tok, self.seen = tok, []
        self.bos_token_id = getattr(tok, "bos_token_id", None)
        self.convert_ids_to_tokens = tok.convert_ids_to_tokens

    def __call__(self, text, **kw):
        self.seen.append(len(text))
        return self.tok(text, **kw)


@pytest.mark.models
@pytest.mark.parametrize("name", ["smollm2", "minilm"])
def test_a_long_line_is_cut_before_tokenizing_and_keeps_the_same_ids(name):
    """Byte-level BPE (SmolLM2) and WordPiece (MiniLM), English and Chinese: the ids kept
    from a prefix equal the whole text's, and a 10 MB line is never tokenized whole."""
    from attnlab import models
    from attnlab.analysis.literature import literature_ids
    from attnlab.analysis.survey import CHARS_PER_TOKEN, first_ids
    from attnlab.report.long_text import long_text

    tok = models.load(name, progress=False).tokenizer
    course = long_text({}).text
    zh = course[course.index("# 01 · 向量"):]
    for text in (course[:20_000], zh[:20_000], "word " * 3000, "注意力" * 2000):
        full = literature_ids(tok, text)
        for n in (2, 16, 64, 500):
            assert first_ids(tok, text, n) == (full[:n], len(full) > n), (text[:20], n)
    huge = ("the attention weights " * 500_000)[:10_000_000]  # one 10 MB line
    counting = _Counting(tok)
    ids, longer = first_ids(counting, huge, 64)
    assert longer and ids == literature_ids(tok, huge[:100_000])[:64]
    assert max(counting.seen) <= 4 * CHARS_PER_TOKEN * 64 + 100  # never the 10 MB
