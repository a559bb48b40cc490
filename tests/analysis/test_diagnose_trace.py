"""`attnlab diagnose --trace FILE`: a saved trace diagnosed without the model, on one process
or split over real torchrun processes, equal to the in-memory diagnosis."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from attnlab import cli
from attnlab.analysis.heads import diagnose
from attnlab.analysis.scores import scan
from attnlab.tracing import trace
from limits import SLOW_CHILD_S
from random_models import random_llama

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    ids = torch.randint(1, 97, (80,), generator=torch.Generator().manual_seed(3)).tolist()
    t = trace(random_llama(layers=3, heads=4, kv_heads=2), ids)
    path = tmp_path_factory.mktemp("trace") / "t.safetensors"
    t.save(path)
    return t, path


def test_disjoint_heads_add_up_to_the_whole_pass_exactly(saved):
    t, _ = saved
    every = [(layer, head) for layer in range(3) for head in range(4)]
    whole, pooled, _ = scan(t, pool_block=8)
    a, pa, _ = scan(t, pool_block=8, heads=every[0::2])
    b, pb, _ = scan(t, pool_block=8, heads=every[1::2])
    assert torch.equal(a + b, whole) and torch.equal(pa + pb, pooled)
    assert not torch.equal(a, whole)  # half the heads are not the whole pass
    with pytest.raises(ValueError, match=r"heads must hold \(layer, head\) pairs"):
        scan(t, heads=[(3, 0)])
    with pytest.raises(ValueError, match="twice"):
        scan(t, heads=[(0, 0), (0, 0)])


def _scores(doc):
    """score name -> (L·H,) values, from the JSON's one row per head."""
    rows = doc["heads"]
    skip = {"layer", "head", "cluster", "roles"}
    return {k: torch.tensor([r[k] for r in rows], dtype=torch.float64)
            for k in rows[0] if k not in skip}


def test_the_command_on_a_saved_trace_equals_the_in_memory_diagnosis(saved, capsys):
    t, path = saved
    assert cli.main(["diagnose", "--trace", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    want = diagnose(t).to_json()
    assert doc["run"]["processes"] == 1 and doc["definitions"] is None
    got, ref = _scores(doc), _scores(want)
    assert set(got) == set(ref) and "repeat_induction" not in got
    for k in ref:
        assert torch.allclose(got[k], ref[k], atol=1e-6, rtol=0), k
    assert doc["roles"] == want["roles"]


def test_bad_combinations_and_files_are_refused_by_name(saved, tmp_path, capsys):
    _, path = saved
    assert cli.main(["diagnose", "--trace", str(path), "--model", "smollm2"]) == 2
    assert "leave out --model" in capsys.readouterr().err
    assert cli.main(["diagnose", "--trace", str(tmp_path / "none.safetensors")]) == 2
    assert "--trace: no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a trace")
    assert cli.main(["diagnose", "--trace", str(bad)]) == 2
    assert "not a readable attnlab trace" in capsys.readouterr().err
    assert cli.main(["diagnose", "--text", "hello"]) == 2
    assert "diagnose needs --model" in capsys.readouterr().err


def test_a_corrupt_tensor_is_refused_before_any_score(saved, tmp_path, capsys):
    _, path = saved
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # the last tensor's bytes, not the header
    bad = tmp_path / "flipped.safetensors"
    bad.write_bytes(bytes(data))
    assert cli.main(["diagnose", "--trace", str(bad), "--json"]) == 2
    assert "sha256" in capsys.readouterr().err


@pytest.mark.slow
def test_torchrun_two_processes_give_the_one_process_diagnosis(saved, capsys):
    t, path = saved
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "-m", "attnlab", "diagnose", "--trace", str(path), "--json"],
        env=env, capture_output=True, text=True, timeout=SLOW_CHILD_S)
    assert run.returncode == 0, run.stderr[-3000:]
    two = json.loads(run.stdout)  # rank 0 alone prints
    assert two["run"]["processes"] == 2
    one = diagnose(t).to_json()
    for k, ref in _scores(one).items():
        assert (_scores(two)[k] - ref).abs().max() <= 1e-6, k
    assert two["roles"] == one["roles"] and two["num_clusters"] == one["num_clusters"]


@pytest.mark.slow
def test_torchrun_processes_check_a_streamed_file_together(tmp_path, capsys):
    """A streamed (version-5) file under torchrun: the two processes check it together,
    each every other layer (attnlab.tracing.verify_across), and diagnose it to the one
    process's JSON, bit for bit; a layer corrupted in the second process's share fails
    both processes, the first saying which process found it, and none waits for the
    other."""
    from trace_files import flip_layer_bit

    ids = torch.randint(1, 97, (80,), generator=torch.Generator().manual_seed(3)).tolist()
    path = tmp_path / "streamed.safetensors"
    trace(random_llama(layers=3, heads=4, kv_heads=2), ids, out=path)
    assert cli.main(["diagnose", "--trace", str(path), "--json"]) == 0
    one = json.loads(capsys.readouterr().out)

    def torchrun(file):
        return subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone",
             "--nproc_per_node=2", "-m", "attnlab", "diagnose", "--trace", str(file), "--json"],
            env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
            timeout=SLOW_CHILD_S)

    run = torchrun(path)
    assert run.returncode == 0, run.stderr[-3000:]
    two = json.loads(run.stdout)
    assert two.pop("run")["processes"] == 2 and one.pop("run")["processes"] == 1
    assert two == one
    bad = flip_layer_bit(path, tmp_path / "bad.safetensors", "q", 1)  # layer 1: process 1
    run = torchrun(bad)
    assert run.returncode != 0 and run.stdout == ""
    assert "tensor 'q' layer 1 does not match the sha256" in run.stderr
    assert "process 1 of the 2 that checked the file together found it" in run.stderr
