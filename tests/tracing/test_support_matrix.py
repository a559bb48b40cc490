"""The support matrix (attnlab.tracing.support): every text decoder, encoder and
encoder–decoder family of the installed transformers, each as a tiny random model, traced
and checked against its own eager attention (an encoder–decoder one stack by stack); no
family may be traced wrongly, at least 50 exactly; refusals and families not yet covered
carry their reason; the checks themselves catch a wrong trace."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from padded_capture import padded_capture  # tests/tracing/padded_capture.py

from limits import CHILD_S

transformers = pytest.importorskip("transformers")

import attnlab.tracing.adapters.huggingface as hf  # noqa: E402
import attnlab.tracing.support as support  # noqa: E402
from attnlab.core.scores import ScoreShape  # noqa: E402
from attnlab.tracing import AttentionTrace, UnreadableAttentionError, capture, trace  # noqa: E402

FAMILIES = support.text_families()


@pytest.fixture(scope="module")
def matrix() -> dict[str, support.FamilyResult]:
    """Every text family checked once (one thread, tiny models: about a minute)."""
    return {r.family: r for r in support.support_matrix(FAMILIES)}


@pytest.mark.parametrize("family", FAMILIES)
def test_family_is_exact_or_says_why(matrix, family):
    r = matrix[family]
    assert r.status != "wrong", r.reason  # a trace that does not match is a defect
    assert r.status in support.STATUSES and r.kind in ("decoder", "encoder", "encoder-decoder")
    if r.status == "exact":
        assert r.max_weight_error <= support.EXACT_TOL
        assert r.max_recompute_error <= support.RECOMPUTE_TOL
        assert r.layers >= 1 and r.heads >= 1 and r.reason == ""
        if r.kind == "encoder-decoder":  # three stacks, each with the model's layer count
            assert r.stacks == {"encoder": 2, "decoder": 2, "cross": 2}
    else:
        assert r.reason.startswith(f"{r.status}: ") and len(r.reason) > 40
    if r.status == "refused":  # names the module class and what is missing
        assert "Attention" in r.reason and r.model_class in r.reason


def test_the_matrix_counts_and_the_families_that_matter(matrix):
    counts = support.counts(matrix.values())
    assert counts["exact"] >= 50 and counts["wrong"] == 0
    exact = {f: r for f, r in matrix.items() if r.status == "exact"}
    for f in ("bert", "roberta", "distilbert", "gpt2", "gpt_neox", "opt", "llama", "mistral",
              "qwen2", "qwen3", "gemma", "gemma2", "phi3", "modernbert", "smollm3", "gpt_oss"):
        assert f in exact, (f, matrix[f].reason)
    # what shapes the scores is recorded, and named
    assert "soft-cap" in exact["gemma2"].features
    assert any(x.startswith("window 4") for x in exact["mistral"].features)
    assert any("alternating" in x for x in exact["gemma2"].features)
    assert any(x.startswith("window") for x in exact["modernbert"].features)  # a band
    assert "sink logits" in exact["gpt_oss"].features
    assert "scale ≠ 1/√d" in exact["gemma2"].features  # query_pre_attn_scalar
    # inline softmax with ALiBi: read through their own route, slopes kept per head
    for f in ("bloom", "mpt", "falcon", "gpt_neo"):
        assert f in exact, (f, matrix[f].reason)
    assert "ALiBi" in exact["bloom"].features and "ALiBi" in exact["mpt"].features
    # other modules that compute their softmax inline are refused, by name
    for f, cls in (("deberta-v2", "DisentangledSelfAttention"),
                   ("xlnet", "XLNetRelativeAttention")):
        assert matrix[f].status == "refused" and cls in matrix[f].reason
        assert "no eager_attention_forward" in matrix[f].reason


def test_the_encoder_decoder_families_that_matter(matrix):
    exact = {f for f, r in matrix.items() if r.status == "exact"}
    for f in ("bart", "t5", "mbart", "marian", "pegasus", "m2m_100", "blenderbot",
              "blenderbot-small", "mt5", "umt5", "switch_transformers", "plbart", "nllb-moe",
              "t5gemma", "seamless_m4t"):
        assert f in exact and matrix[f].kind == "encoder-decoder", (f, matrix[f].reason)
    t5 = matrix["t5"]
    assert all(f"{s}: additive bias" in t5.features for s in ("encoder", "decoder", "cross"))
    assert "encoder 2 + decoder 2 + cross 2 layers" in t5.detail()
    # modules that compute their softmax inline, or merge self- and cross-attention: refused
    for f, cls in (("prophetnet", "ProphetNetAttention"),
                   ("led", "LEDEncoderSelfAttention"), ("longt5", "LongT5LocalAttention"),
                   ("t5gemma2", "T5Gemma2MergedAttention")):
        assert matrix[f].status == "refused" and cls in matrix[f].reason, (f, matrix[f].reason)


def test_other_kinds_are_listed_as_not_yet_with_the_reason():
    kinds = dict(support.families())
    assert kinds["t5"] == kinds["bart"] == "encoder-decoder"
    assert kinds["vit"] == "vision" and kinds["whisper"] == "speech"
    assert kinds["llama"] == "decoder" and kinds["bert"] == "encoder"
    assert kinds["qwen2_audio"] == "multimodal"  # an audio language model, not text-to-text
    unchecked = {k: n for n, k in support.families() if k not in support.CHECKERS}
    assert unchecked  # some kinds still wait for a checker
    for kind, family in unchecked.items():
        r = support.check_family(family)
        assert r.status == "not yet" and r.reason == support.NOT_YET[kind]
    assert set(support.checked_families()) >= set(FAMILIES)
    with pytest.raises(ValueError, match="family must be a model type"):
        support.check_family("no-such-family")


def _traced(family: str):
    model = support.tiny_model(family)
    ids = torch.randint(3, 80, (1, support.SEQ_LEN), generator=torch.Generator().manual_seed(0))
    maps = support.eager_maps(model, ids)
    return trace(model, ids[0].tolist()), maps, ids[0].tolist()


def _reshaped(t: AttentionTrace, **change) -> AttentionTrace:
    """The same q, k, lse under other shapes: a deliberately wrong record."""
    shapes = [ScoreShape(**{"scale": s.scale, "causal": s.causal, "window": s.window,
                            "softcap": s.softcap, "sinks": s.sinks, **change})
              for s in t.shapes]
    return AttentionTrace(tokens=t.tokens, q=t.q, k=t.k, lse=t.lse, shapes=shapes,
                          token_ids=t.token_ids)


@pytest.mark.parametrize(("family", "change"), [
    ("gemma2", {"softcap": None}), ("mistral", {"window": None}), ("gpt_oss", {"sinks": None}),
    ("llama", {"causal": False}), ("llama", {"scale": 0.5}),
])
def test_the_check_tells_a_wrong_trace(family, change):
    t, maps, ids = _traced(family)
    errors, problems = support.judge(t, maps, ids)
    assert problems == [] and errors["weights"] <= support.EXACT_TOL
    _, wrong = support.judge(_reshaped(t, **change), maps, ids)
    assert wrong  # the shaping left out (or changed) is seen
    relabelled = AttentionTrace(tokens=["x"] * len(ids), q=t.q, k=t.k, lse=t.lse,
                                shapes=t.shapes, token_ids=ids)
    assert "labels are not the token ids" in support.judge(relabelled, maps, ids)[1]


def _drop_window(read):
    def wrapped(*args, **kwargs):
        causal, _window, key_mask, dense = read(*args, **kwargs)
        return causal, None, key_mask, dense
    return wrapped


@pytest.mark.parametrize(("family", "patch", "value"), [
    ("gpt_oss", "_sinks", lambda real: lambda *a: None),  # the sink logits left out
    ("mistral", "_read_mask", _drop_window),  # the sliding window left out
    ("gemma2", "_shapes", lambda real: lambda scale, causal, window, km, softcap, *a: real(
        scale, causal, window, km, None, *a)),  # the soft-cap left out of the record only
])
def test_a_module_read_wrongly_is_refused_not_traced(monkeypatch, family, patch, value):
    """attnlab checks its reading of every call against the module's own eager function."""
    model = support.tiny_model(family)
    monkeypatch.setattr(hf, patch, value(getattr(hf, patch)))
    with pytest.raises(UnreadableAttentionError, match="differ from its eager_attention_forward"):
        trace(model, list(range(3, 15)))


def test_a_model_that_changes_its_mask_needs_the_dense_mask(monkeypatch):
    """Doge builds its own mask from the one it is given: attnlab hands it the model's own
    dense mask (exact); with only a key mask it would lose the causal part, and refuses."""
    t, maps, ids = _traced("doge")
    assert support.judge(t, maps, ids)[1] == []
    monkeypatch.setattr(hf, "DENSE_MASK_MAX_ENTRIES", 0)
    with pytest.raises(UnreadableAttentionError, match="DogeAttention changes the attention mask"):
        trace(support.tiny_model("doge"), ids)
    t2, maps2, ids2 = _traced("llama")  # a rule is enough for a model that keeps its mask
    assert support.judge(t2, maps2, ids2)[1] == []


def test_an_inline_softmax_without_a_route_is_refused_before_the_model_runs():
    model = support.tiny_model("xlnet")
    ran = []
    model.register_forward_pre_hook(lambda *a: ran.append(1))
    with pytest.raises(UnreadableAttentionError, match=r"XLNetRelativeAttention computes its "
                       r"attention inline .* \[2 modules\]"):
        with capture(model):
            model(torch.tensor([[1, 2, 3]]))
    assert ran == []


@pytest.mark.parametrize("over", [{}, {"alibi": True}, {"new_decoder_architecture": True,
                                                         "num_kv_heads": 2}])
def test_falcon_variants_are_exact(monkeypatch, over):
    """Falcon's rotary, ALiBi and grouped-key variants. Before transformers 5.25 its module
    computes the softmax inline (read by the inline adapter, which keeps ALiBi as slopes);
    from 5.25 it calls the attention interface with ALiBi folded into a dense mask, which
    the Hugging Face adapter keeps as the additive bias it is."""
    import attnlab.tracing.adapters.inline as inline

    monkeypatch.setitem(support._OVERRIDES, "falcon", over)
    r = support.check_family("falcon")
    assert r.status == "exact", r.reason
    cls = inline._HF + "falcon.modeling_falcon.FalconAttention"
    old = inline.STILL_INLINE[cls](_falcon_attention(over))
    position = "ALiBi" if old else "additive bias"
    assert (position in r.features) == bool(over.get("alibi")), r.features


def _falcon_attention(over: dict) -> torch.nn.Module:
    from transformers import FalconConfig
    from transformers.models.falcon.modeling_falcon import FalconAttention

    config = FalconConfig(hidden_size=16, num_attention_heads=4, **over)
    return FalconAttention(config, layer_idx=0)


def test_inline_alibi_with_padding_and_a_wrong_reading():
    """BLOOM's ALiBi with left padding counts positions from the first real token: no longer
    one slope per head, so the (H, 1, Lk) bias itself is kept; exact either way. Slopes read
    wrongly are refused by the check against the module's own weights."""
    import attnlab.tracing.adapters.inline as inline

    model, cap = padded_capture("bloom")
    assert cap.trace(0).shapes[0].alibi_slopes is not None
    padded = cap.trace(1).shapes[0]
    assert padded.alibi_slopes is None and tuple(padded.bias.shape) == (4, 1, 10)
    real = inline.alibi_slopes
    wrong = lambda bias: (None if (r := real(bias))[0] is None else r[0] * 2, r[1])  # noqa: E731
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(inline, "alibi_slopes", wrong)
        with pytest.raises(UnreadableAttentionError, match="differ from the module's own"):
            trace(model, list(range(3, 15)))


def test_capture_marks_causal_models_causal():
    """Through capture and through trace, the trace and the model's description agree
    with the model (configs made in code have no architectures to say it)."""
    for family, causal in (("llama", True), ("qwen3", True), ("gpt2", True),
                           ("bert", False), ("modernbert", False)):
        model = support.tiny_model(family)
        with torch.no_grad(), capture(model) as cap:
            model(torch.tensor([[5, 6, 7, 8, 9]]))
        assert cap.trace().causal == causal, family
        t = trace(model, [5, 6, 7, 8, 9])
        assert t.causal == t.meta["model_info"]["causal"] == causal, family


def test_markdown_and_json_are_made_from_the_results(matrix):
    not_yet = next(n for n, k in support.families() if k not in support.CHECKERS)
    results = [matrix["llama"], matrix["xlnet"], support.check_family(not_yet),
               matrix["t5"]]
    md = support.to_markdown(results)
    assert "| llama | decoder | exact | max \\|Δw\\|" in md
    assert "| xlnet | decoder | refused | refused: XLNetModel" in md
    assert "| t5 | encoder-decoder | exact |" in md
    assert "2 exact, 1 refused, 1 not yet" in md
    doc = support.to_json(results)
    assert doc["counts"]["exact"] == 2 and doc["families"][0]["family"] == "llama"
    json.dumps(doc, allow_nan=False)


def test_the_command_prints_the_matrix(capsys):
    """`attnlab support`, run in this process (a second interpreter would import
    transformers again); `python -m attnlab support --help` checks the entry point."""
    from attnlab.cli import main

    not_yet = next(n for n, k in support.families() if k not in support.CHECKERS)
    assert main(["support", "--family", "llama", "--family", "t5", "--family", not_yet,
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [f["status"] for f in doc["families"]] == ["exact", "exact", "not yet"]
    assert doc["families"][1]["stacks"] == {"encoder": 2, "decoder": 2, "cross": 2}
    assert main(["support", "--family", "nope"]) == 2
    assert "nope" in capsys.readouterr().err
    out = subprocess.run([sys.executable, "-m", "attnlab", "support", "--help"],
                         capture_output=True, text=True, timeout=CHILD_S)
    assert out.returncode == 0 and "encoder-decoder" in out.stdout


def test_the_readme_table_is_the_summary_of_the_whole_matrix(matrix):
    """The table of the site's "Every architecture" page (docs/families.md) is `attnlab
    support --summary`'s output: text families from the module's run, every other family
    checked here."""
    import dataclasses
    import re
    from pathlib import Path

    others = [n for n, _ in support.families() if n not in matrix]
    results = [*matrix.values(), *support.support_matrix(others)]
    summary = support.to_summary(results)
    page = (Path(__file__).resolve().parents[2] / "docs" / "families.md").read_text(
        encoding="utf-8")
    got = re.search(r"<!-- support-summary:start -->\n(.*?)<!-- support-summary:end -->",
                    page, re.S)
    assert got is not None and got.group(1) == summary
    # a family that moved status would change the table (the check can fail)
    moved = [dataclasses.replace(r, status="refused")
             if r.family == "llama" else r for r in results]
    assert support.to_summary(moved) != summary


def test_falcon_goes_to_the_adapter_of_its_transformers():
    """The inline reader takes a FalconAttention only while it still splits its own heads
    (transformers < 5.25); one without ``_split_heads`` goes to the Hugging Face adapter."""
    from attnlab.tracing.adapters import HUGGINGFACE, INLINE

    module = _falcon_attention({})
    module.config._attn_implementation_internal = "eager"
    old = hasattr(module, "_split_heads")
    assert INLINE.matches(module) == old and HUGGINGFACE.matches(module) != old
    if not old:  # the older module's signature, on the newer class: the inline reader's
        module._split_heads = lambda fused: fused
        assert INLINE.matches(module)


def test_a_mask_that_carries_a_term_per_key_is_kept_as_a_rule_and_that_term(monkeypatch):
    """Falcon with ALiBi on transformers >= 5.25 adds its bias to a dense causal mask: the
    trace keeps the causal rule, the padding as a key mask, and an (H, 1, Lk) term, not an
    (H, Lq, Lk) bias; every real row still equals the model's own maps (padded_capture).
    A term read wrongly (doubled) is refused by the check against the model's eager
    attention."""
    import attnlab.tracing.adapters.huggingface as hf_adapter

    if hasattr(_falcon_attention({}), "_split_heads"):
        # justified: constraints.txt installs transformers 5.25, where this runs; an older
        # transformers computes Falcon's attention inline and passes no dense mask
        pytest.skip("transformers < 5.25 computes Falcon's attention inline (no dense mask)")
    monkeypatch.setitem(support._OVERRIDES, "falcon", {"alibi": True})
    model, cap = padded_capture("falcon")
    for b, padded in ((0, False), (1, True)):
        s = cap.trace(b).shapes[0]
        assert s.causal and s.bias is not None and tuple(s.bias.shape) == (4, 1, 10)
        assert (s.key_mask is not None) == padded
    real = hf_adapter.split_dense_mask

    def doubled(mask):
        got = real(mask)
        return None if got is None else (got[0], got[1] * 2)

    monkeypatch.setattr(hf_adapter, "split_dense_mask", doubled)
    with pytest.raises(UnreadableAttentionError, match="differ from"):
        trace(model, list(range(3, 15)))
