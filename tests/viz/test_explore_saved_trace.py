"""`attnlab explore --trace FILE`: the page of a saved trace, without the model, on one
process or with its pass over the weights split over real torchrun processes; the same page
either way, and the same as the in-memory trace's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch

from attnlab import cli
from attnlab.tracing import trace
from attnlab.viz.explorer import Explorer, ExplorerConfig
from limits import SLOW_CHILD_S
from random_models import random_llama

transformers = pytest.importorskip("transformers")

N = 300  # above the page's max_tokens (256): the page holds pooled maps


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    ids = torch.randint(1, 97, (N,), generator=torch.Generator().manual_seed(4)).tolist()
    t = trace(random_llama(layers=3, heads=4, kv_heads=2), ids)
    path = tmp_path_factory.mktemp("trace") / "t.safetensors"
    t.save(path)
    return t, path


def _payload(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="([\w-]+)-data">(.*?)</script>',
                  page, re.S)
    assert m, "no explorer data in the page"
    data = json.loads(m.group(2))
    data.pop("uid")
    return data


def test_the_page_of_a_saved_trace_equals_the_in_memory_traces(saved, tmp_path, capsys):
    t, path = saved
    out = tmp_path / "page.html"
    assert cli.main(["explore", "--trace", str(path), "--out", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["processes"] == 1 and info["tokens"] == [N]
    got = _payload(out.read_text(encoding="utf-8"))
    want = _payload(Explorer(t, config=ExplorerConfig()).to_page())
    assert got["traces"][0]["pooled"] is True
    assert got == want


def test_bad_combinations_are_refused_by_name(saved, tmp_path, capsys):
    _, path = saved
    out = str(tmp_path / "p.html")
    assert cli.main(["explore", "--trace", str(path), "--model", "smollm2", "--out", out]) == 2
    assert "leave out --model" in capsys.readouterr().err
    assert cli.main(["explore", "--trace", str(tmp_path / "none.safetensors"), "--out",
                     out]) == 2
    assert "--trace: no such file" in capsys.readouterr().err
    assert cli.main(["explore", "--text", "hello", "--out", out]) == 2
    assert "explore needs --model" in capsys.readouterr().err
    assert not (tmp_path / "p.html").exists()


@pytest.mark.slow
def test_torchrun_two_processes_write_the_one_process_page(saved, tmp_path):
    t, path = saved
    out = tmp_path / "two.html"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "-m", "attnlab", "explore", "--trace", str(path), "--out", str(out), "--json"],
        env=env, capture_output=True, text=True, timeout=SLOW_CHILD_S)
    assert run.returncode == 0, run.stderr[-3000:]
    info = json.loads(run.stdout)  # rank 0 alone prints and writes
    assert info["processes"] == 2
    two = _payload(out.read_text(encoding="utf-8"))
    one = _payload(Explorer(t).to_page())
    assert two == one  # disjoint heads summed: every score and pooled block to the bit
