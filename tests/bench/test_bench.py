"""``attnlab bench`` at a tiny size: the JSON keys, the plain progress lines, the whole
table, and the pieces it is built from (speeds are not tested)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from attnlab._proc import IsolatedCallError, call_isolated
from attnlab.bench import BenchConfig, attention_flops, naive_attention
from attnlab.cli import main
from limits import CHILD_S, SLOW_CHILD_S

KEYS = ("fused_vs_sdpa", "explicit_vs_naive", "mha_weights_vs_torch", "chunked_peak_mb_n32k")
ROW_KEYS = {"device", "n", "causal", "mode", "contender", "ms", "gflops", "frac_peak",
            "cell_gemm_gflops", "peak_mb"}
TINY = ["bench", "--quick", "--sizes", "64", "--repeats", "1"]


@pytest.mark.slow
def test_json_is_one_object_with_the_documented_keys(capsys):
    assert main([*TINY, "--json", "--quiet"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)  # stdout holds the JSON object and nothing else
    assert captured.err == ""  # --quiet: no progress
    assert result["format_version"] == 1
    for key in KEYS:
        assert isinstance(result[key], (int, float)) and not isinstance(result[key], bool), key
        assert math.isfinite(result[key]) and result[key] > 0, key
    assert set(result) >= {"chunked_vs_sdpa", "linear_vs_softmax", "chunked_n32k_time_vs_sdpa",
                           "fused_frac_peak_n4096", "gemm_gflops", "long_probe", "machine",
                           "config", "memory_method", "results", "targets"}
    assert result["long_probe"]["n"] == 32768 and result["long_probe"]["error"] is None
    assert result["long_probe"]["query_rows"] == 256  # --quick
    assert result["chunked_n32k_time_vs_sdpa"] > 0
    assert result["gemm_gflops"]["cpu"] > 0
    contenders = {r["contender"] for r in result["results"]}
    assert contenders == {"torch_sdpa", "fused", "explicit", "naive", "chunked", "linear",
                          "torch_mha", "attnlab_mha"}
    for r in result["results"]:
        assert set(r) == ROW_KEYS and r["ms"] > 0 and r["n"] == 64 and r["mode"] == "fwd"
        measured = not r["causal"] and not r["contender"].endswith("_mha")  # kernels, full
        assert (r["peak_mb"] is not None) == measured, r
    assert set(result["targets"]) >= set(KEYS)


@pytest.mark.slow
def test_off_a_terminal_progress_is_plain_lines_and_the_whole_table_prints():
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="80")
    proc = subprocess.run([sys.executable, "-m", "attnlab", *TINY], capture_output=True,
                          text=True, timeout=SLOW_CHILD_S, env=env)
    assert proc.returncode == 0, proc.stderr
    steps = [line for line in proc.stderr.splitlines() if line.startswith("bench [")]
    total = len(steps)
    assert total == 5  # GEMM rate, 2 cells, 1 memory probe, the long probe
    assert steps[0].startswith(f"bench [1/{total}] GEMM rate on cpu")
    assert steps[-1].startswith(f"bench [{total}/{total}] chunked vs torch SDPA at N=32768")
    assert "\x1b[" not in proc.stderr + proc.stdout  # no terminal control codes
    table = [line for line in proc.stdout.splitlines() if " 64 " in line]
    assert len(table) == 2  # N=64, causal and not
    header = next(line for line in proc.stdout.splitlines() if "torch_sdpa" in line)
    for column in ("attnlab_mha", "fused×", "explicit×", "mha×", "fused %peak"):
        assert column in header  # no column cut, even at COLUMNS=80
    assert "…" not in proc.stdout
    assert "fused_vs_sdpa" in proc.stdout and "long probe: N=32768" in proc.stdout


def test_isolated_call_runs_a_named_function_in_its_own_process():
    assert call_isolated("attnlab._proc:echo", value={"a": [1, 2.5]},
                         timeout=CHILD_S) == {"a": [1, 2.5]}
    with pytest.raises(ValueError, match="attnlab.module:function"):
        call_isolated("os:getpid")  # only attnlab's own functions
    with pytest.raises(IsolatedCallError, match="peak_memory failed in its own process"):
        call_isolated("attnlab.bench.memory:peak_memory", config={"sizes": [0]}, n=4,
                      timeout=CHILD_S)


def test_cli_bad_values_are_one_line_errors(capsys):
    assert main(["bench", "--long-rows", "0"]) == 2
    assert main(["bench", "--sizes", "64", "-3"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "long_rows" in err[0] and "sizes" in err[1]


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="sizes must be positive ints"):
        BenchConfig(sizes=(64, -1))
    with pytest.raises(ValueError, match="repeats must be a positive int"):
        BenchConfig(repeats=0)
    with pytest.raises(ValueError, match="long_rows"):
        BenchConfig(long_n=100, long_rows=200)
    cfg = BenchConfig(sizes=(8,), devices=("cpu",))
    assert BenchConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg


def test_naive_baseline_is_the_article_formula():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=g) for _ in range(3))
    out, w = naive_attention(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)
    assert not torch.allclose(out, torch.softmax(q @ k.transpose(-2, -1), -1) @ v)  # no √d
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    out, _ = naive_attention(q, k, v, mask)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)
    assert not torch.allclose(out, naive_attention(q, k, v, mask.T)[0])


def test_flop_count_convention():
    cfg = BenchConfig(batch=1, heads=8, head_dim=64)
    full = attention_flops(1024, cfg, causal=False, mode="fwd")
    assert full == 4 * 8 * 1024 * 1024 * 64
    assert attention_flops(1024, cfg, causal=True, mode="fwd") == full / 2
    assert attention_flops(1024, cfg, causal=False, mode="fwd+bwd") == 3.5 * full


def _row(n, causal, mode, contender, ms):
    return {"device": "cpu", "n": n, "causal": causal, "mode": mode, "contender": contender,
            "ms": ms, "gflops": None, "frac_peak": None, "cell_gemm_gflops": 1.0,
            "peak_mb": None}


def test_per_cell_targets_take_the_worst_cell_of_their_sizes():
    from attnlab.bench.suite import summarize

    cells = [(1024, False, "fwd", "naive", 30.0), (1024, False, "fwd", "explicit", 10.0),
             (2048, False, "fwd", "naive", 90.0), (2048, False, "fwd", "explicit", 30.0),
             (2048, True, "fwd", "naive", 80.0), (2048, True, "fwd", "explicit", 20.0),
             (4096, False, "fwd", "naive", 400.0), (4096, False, "fwd", "explicit", 200.0),
             (1024, True, "fwd+bwd", "naive", 12.0), (1024, True, "fwd+bwd", "explicit", 10.0),
             (1024, False, "fwd", "torch_mha", 16.0), (1024, False, "fwd", "attnlab_mha", 8.0),
             (4096, False, "fwd", "torch_mha", 70.0), (4096, False, "fwd", "attnlab_mha", 50.0)]
    rows = [_row(*c) for c in cells]
    long = {"seconds": {}, "peak_mb": {}}
    res = summarize(BenchConfig(sizes=(1024,), devices=("cpu",)), {}, {"cpu": 1.0}, rows, long,
                    {"explicit_grad_max_err": 3.14159e-6, "load_avg": {"start": [1, 2, 3]}})
    assert res["weights_vs_naive_min"] == 2.0  # N = 4096; the 3x at N = 1024 does not count
    assert res["mha_weights_vs_torch_min"] == 1.4
    assert res["explicit_fwd_bwd_vs_naive_min"] == 1.2
    assert res["explicit_grad_max_err"] == 3.14e-6  # significant digits, not 0.0
    t = res["targets"]
    assert t["weights_vs_naive_min"]["met"] is False
    assert t["mha_weights_vs_torch_min"]["met"] is False
    assert t["explicit_fwd_bwd_vs_naive_min"]["met"] is True
    assert t["explicit_grad_max_err"]["met"] is True
    assert res["load_avg"] == {"start": [1, 2, 3]}
    rows = [r for r in rows if r["mode"] == "fwd"]  # no backward measured: not "met", null
    res = summarize(BenchConfig(sizes=(1024,), devices=("cpu",)), {}, {"cpu": 1.0}, rows, long)
    assert res["explicit_fwd_bwd_vs_naive_min"] is None
    assert res["targets"]["explicit_fwd_bwd_vs_naive_min"]["met"] is None


def test_gradient_check_compares_with_the_naive_code(monkeypatch):
    import attnlab.bench.suite as suite

    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 24, 8, generator=g) for _ in range(3))
    for causal in (False, True):
        assert suite.grad_error(q, k, v, causal) <= 1e-5
    real = suite.scaled_dot_product_attention
    monkeypatch.setattr(suite, "scaled_dot_product_attention",
                        lambda *a, **kw: real(*a, **dict(kw, scale=1.0)))  # a wrong variant
    assert suite.grad_error(q, k, v, True) > 1e-3
