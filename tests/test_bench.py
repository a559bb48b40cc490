"""The benchmark's quick mode runs end to end and prints its keys (speeds are not tested)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import torch

from attnlab.bench import BenchConfig, attention_flops, naive_attention, render_table

KEYS = ("fused_vs_sdpa", "explicit_vs_naive", "mha_weights_vs_torch", "chunked_peak_mb_n32k")


def test_quick_bench_prints_one_json_object_with_the_keys():
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "attnlab", "bench", "--quick", "--json", "--quiet",
         "--sizes", "64", "--repeats", "1"],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # stdout holds the JSON object and nothing else
    for key in KEYS:
        assert isinstance(result[key], (int, float)) and not isinstance(result[key], bool), key
        assert math.isfinite(result[key]) and result[key] > 0, key
    assert result["long_probe"]["n"] == 32768
    assert result["gemm_gflops"]["cpu"] > 0
    contenders = {r["contender"] for r in result["results"]}
    assert {"torch_sdpa", "fused", "explicit", "naive", "chunked", "linear", "torch_mha",
            "attnlab_mha"} <= contenders
    for r in result["results"]:
        assert r["ms"] > 0 and r["n"] == 64
    assert set(result["targets"]) >= set(KEYS)
    table = render_table(result)
    assert table.row_count == 2  # N=64, causal and not, forward only


def test_naive_baseline_is_the_article_formula():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=g) for _ in range(3))
    out, w = naive_attention(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)
    assert not torch.allclose(out, torch.softmax(q @ k.transpose(-2, -1), -1) @ v)  # no √d


def test_flop_count_convention():
    cfg = BenchConfig(batch=1, heads=8, head_dim=64)
    full = attention_flops(1024, cfg, causal=False, mode="fwd")
    assert full == 4 * 8 * 1024 * 1024 * 64
    assert attention_flops(1024, cfg, causal=True, mode="fwd") == full / 2
    assert attention_flops(1024, cfg, causal=False, mode="fwd+bwd") == 3.5 * full
