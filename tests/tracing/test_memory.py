"""Memory bounds of a long trace, measured in a fresh process (peak resident set size).

An attnlab GPT traced at 8,192 tokens keeps q, k, v and the log-sum-exp: a few MiB. Its
dense weights would be 2 layers x 4 heads x 8192² x 4 bytes = 2 GiB; the trace, the
on-demand methods and saving stay far below that.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from limits import SLOW_CHILD_S

N = 8192
#: Stated bound on the growth of the peak resident set while tracing, pooling one head,
#: reading rows and saving (dense weights alone would be 2048 MiB).
BOUND_MIB = 300

SCRIPT = textwrap.dedent(f"""
    import json, resource, sys, time
    import torch
    from attnlab.nn.transformer import GPT, GPTConfig
    from attnlab.tracing.attention import AttentionTrace
    from attnlab.tracing.tracer import trace

    def peak_mib():
        from attnlab._proc import peak_rss_bytes  # this process's own peak (VmHWM)
        return peak_rss_bytes() / 2**20

    torch.manual_seed(0)
    torch.set_num_threads(1)
    gpt = GPT(GPTConfig(vocab_size=64, block_size={N}, num_layers=2, num_heads=4,
                        embed_dim=64, num_kv_heads=2, positional="rope")).eval()
    ids = torch.randint(0, 64, ({N},)).tolist()
    gpt(torch.tensor([ids[:8]]))  # warm-up
    before = peak_mib()
    t0 = time.perf_counter()
    t = trace(gpt, ids)
    traced = peak_mib()
    pooled = t.pooled(1, 3, 256)
    rows = t.weights_rows(0, 0, [0, {N} - 1])
    path = sys.argv[1]
    t.save(path)
    back = AttentionTrace.load(path)
    try:
        t.weights
        refused = False
    except ValueError as exc:
        refused = "DENSE_BUDGET_BYTES" in str(exc)
    print(json.dumps({{
        "before": before, "traced": traced, "after": peak_mib(),
        "seconds": time.perf_counter() - t0, "refused": refused,
        "pooled_rows": pooled.sum(-1).tolist(), "row_sums": rows.sum(-1).tolist(),
        "tokens": back.seq_len, "kv_heads": back.num_kv_heads,
    }}))
""")


def test_trace_of_8k_tokens_stays_within_its_bound(tmp_path):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "t.safetensors")],
                         capture_output=True, text=True, timeout=SLOW_CHILD_S)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    grown = r["after"] - r["before"]
    assert grown < BOUND_MIB, f"peak grew by {grown:.0f} MiB (bound {BOUND_MIB} MiB): {r}"
    assert r["refused"] and r["tokens"] == N and r["kv_heads"] == 2
    assert r["pooled_rows"] == pytest.approx([1.0] * (N // 256), abs=1e-4)
    assert r["row_sums"] == pytest.approx([1.0, 1.0], abs=1e-4)
    # the file holds q, k, v and lse only: (4 + 2 + 2) x 8192 x 16 + 4 x 8192 floats a layer
    assert (tmp_path / "t.safetensors").stat().st_size < 12 * 2**20
