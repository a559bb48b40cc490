"""The literature's head scores, each on hand-built attention patterns whose value is known
exactly, against a line-by-line reimplementation of the source's formula where there is
code to follow (TransformerLens, commit 4cd36aae), and with a deliberately wrong variant
that the same check catches."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from oracles import own_scores
from survey_helpers import tiny_gpt, tiny_hf

from attnlab import cli
from attnlab.analysis import literature as lit
from attnlab.analysis.scores import head_scores
from attnlab.tracing.attention import AttentionTrace

# --------------------------------------------------------------------------------------
# TransformerLens, reimplemented as its source reads (numpy / torch, float32)
# --------------------------------------------------------------------------------------


def tl_previous(tokens: torch.Tensor) -> torch.Tensor:
    p = torch.zeros(tokens.shape[-1], tokens.shape[-1])
    p[1:, :-1] = torch.eye(tokens.shape[-1] - 1)
    return torch.tril(p)


def tl_duplicate(tokens: torch.Tensor) -> torch.Tensor:
    token_pattern = tokens.repeat(tokens.shape[-1], 1).numpy()
    eq_mask = np.equal(token_pattern, token_pattern.T).astype(int)
    np.fill_diagonal(eq_mask, 0)
    return torch.tril(torch.as_tensor(eq_mask.astype(int)).float())


def tl_induction(tokens: torch.Tensor) -> torch.Tensor:
    dup = tl_duplicate(tokens)
    shifted = torch.roll(dup, shifts=1, dims=1)
    return torch.tril(torch.cat((torch.zeros(dup.shape[0], 1), shifted[:, 1:]), dim=1))


def tl_score(attention: torch.Tensor, detection: torch.Tensor, *, exclude_bos=False,
             exclude_current_token=False, error_measure="mul") -> float:
    attention = attention.clone()
    if error_measure == "mul":
        if exclude_bos:
            attention[:, 0] = 0
        if exclude_current_token:
            attention.fill_diagonal_(0)
        score = attention * detection
        return (score.sum() / attention.sum()).item()
    abs_diff = (attention - detection).abs()
    assert (abs_diff - torch.tril(abs_diff)).sum() == 0
    size = len(abs_diff)
    if exclude_bos:
        abs_diff[:, 0] = 0
    if exclude_current_token:
        abs_diff.fill_diagonal_(0)
    return 1 - round((abs_diff.mean() * size).item(), 3)


def _causal_patterns(n: int, heads: int = 3, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(heads, n, n, generator=g) * 2
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1)


TOKENS = torch.tensor([7, 3, 9, 3, 7, 3, 5, 9, 2])


@pytest.mark.parametrize("maker, ref", [(lit.previous_token_pattern, tl_previous),
                                        (lit.duplicate_token_pattern, tl_duplicate),
                                        (lit.induction_pattern, tl_induction)])
def test_detection_patterns_are_transformerlens_patterns(maker, ref):
    arg = len(TOKENS) if maker is lit.previous_token_pattern else TOKENS
    assert torch.equal(maker(arg), ref(TOKENS))
    assert torch.equal(lit.detection_pattern(
        {tl_previous: "previous_token_head", tl_duplicate: "duplicate_token_head",
         tl_induction: "induction_head"}[ref], TOKENS), ref(TOKENS))


def test_the_patterns_by_hand():
    # tokens a b a b: duplicates at (2, 0), (3, 1); induction one key right: (2, 1), (3, 2)
    t = [1, 2, 1, 2]
    assert lit.duplicate_token_pattern(t).nonzero().tolist() == [[2, 0], [3, 1]]
    assert lit.induction_pattern(t).nonzero().tolist() == [[2, 1], [3, 2]]
    assert lit.previous_token_pattern(4).nonzero().tolist() == [[1, 0], [2, 1], [3, 2]]


@pytest.mark.parametrize("measure", ["mul", "abs"])
@pytest.mark.parametrize("exclude_bos, exclude_current", [(False, False), (True, False),
                                                          (False, True), (True, True)])
def test_similarity_equals_transformerlens_on_random_causal_patterns(measure, exclude_bos,
                                                                     exclude_current):
    a = _causal_patterns(len(TOKENS))
    for ref in (tl_previous, tl_duplicate, tl_induction):
        p = ref(TOKENS)
        got = lit.head_similarity(a, p, error_measure=measure, exclude_bos=exclude_bos,
                                  exclude_current_token=exclude_current)
        want = [tl_score(a[h], p, exclude_bos=exclude_bos,
                         exclude_current_token=exclude_current, error_measure=measure)
                for h in range(a.shape[0])]
        tol = 1e-6 if measure == "mul" else 1e-12  # abs: both rounded to 3 decimals
        assert got.tolist() == pytest.approx(want, abs=tol)


def test_similarity_exact_values_by_hand():
    n = 4
    prev = torch.zeros(n, n)
    prev[0, 0] = 1.0
    prev[torch.arange(1, n), torch.arange(n - 1)] = 1.0  # a perfect previous-token head
    p = lit.previous_token_pattern(n)
    assert lit.head_similarity(prev, p).item() == 0.75  # rows 1..3 of 4 on target
    assert lit.head_similarity(prev, p, error_measure="abs").item() == 0.75  # |A-P| = 1 / 4
    # excluding BOS zeroes key 0: row 0 and row 1 lose their mass, 2 of 2 left on target
    assert lit.head_similarity(prev, p, exclude_bos=True).item() == 1.0
    uniform = torch.tril(torch.ones(n, n, dtype=torch.float64)) / torch.arange(1, n + 1)[:, None]
    assert lit.head_similarity(uniform, p).item() == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 4,
                                                                   abs=1e-15)
    # abs rounds sum|A - P| / N to 3 decimals before 1 - x, as TransformerLens does
    raw = (uniform.double() - p.double()).abs().sum().item() / n
    got = lit.head_similarity(uniform, p, error_measure="abs").item()
    assert got == 1 - round(raw, 3) and got != 1 - raw
    assert lit.head_similarity(uniform, p, error_measure="abs",
                               round_abs=False).item() == pytest.approx(1 - raw, abs=1e-15)


def test_a_wrong_similarity_is_caught():
    """The check of the test above fails for the usual slips: no 'x N' in abs, a mean
    instead of a share in mul."""
    a = _causal_patterns(len(TOKENS))
    p = tl_previous(TOKENS)
    want = [tl_score(a[h], p, error_measure="abs") for h in range(3)]
    wrong_abs = [1 - round((a[h] - p).abs().mean().item(), 3) for h in range(3)]
    assert wrong_abs != pytest.approx(want, abs=1e-3)
    want_mul = [tl_score(a[h], p) for h in range(3)]
    wrong_mul = [(a[h] * p).mean().item() for h in range(3)]
    assert wrong_mul != pytest.approx(want_mul, abs=1e-3)


def test_similarity_refuses_what_transformerlens_refuses():
    bidirectional = torch.full((3, 3), 1 / 3)
    with pytest.raises(ValueError, match="causal"):
        lit.head_similarity(bidirectional, lit.previous_token_pattern(3), error_measure="abs")
    assert lit.head_similarity(bidirectional, lit.previous_token_pattern(3)).item() == \
        pytest.approx(2 / 9)  # 'mul' has no such assertion
    with pytest.raises(ValueError, match="lower triangular"):
        lit.head_similarity(bidirectional, torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"\(3, 3\) pattern"):
        lit.head_similarity(bidirectional, torch.zeros(2, 2))
    with pytest.raises(ValueError, match="error_measure"):
        lit.head_similarity(bidirectional, lit.previous_token_pattern(3), error_measure="max")
    with pytest.raises(ValueError, match="square"):
        lit.head_similarity(torch.zeros(2, 3), torch.zeros(2, 2))


# --------------------------------------------------------------------------------------
# the TransformerLens demo stripe, Olsson et al.'s prefix matching
# --------------------------------------------------------------------------------------


def _induction_head(t: int, repeats: int = 2, start: int = 0) -> torch.Tensor:
    """Rows of the first copy on themselves; later rows on the token after their first
    occurrence."""
    n = start + repeats * t
    a = torch.zeros(n, n)
    for i in range(n):
        j = i - start
        a[i, i if j < t else start + j % t + 1] = 1.0
    return a


def test_demo_stripe_counts_the_last_row_of_the_first_copy():
    t = 5
    a = _induction_head(t)
    # the stripe runs over rows t - 1 ... 2t - 1: t + 1 entries; row t - 1 (first copy)
    # attends to itself, so exactly t of t + 1 are 1
    assert lit.demo_induction_stripe(a, t).item() == pytest.approx(t / (t + 1), abs=1e-15)
    assert lit.demo_induction_stripe(torch.stack([a, torch.eye(2 * t)]), t).tolist() == \
        pytest.approx([t / (t + 1), 0.0])
    # the wrong stripe (offset -t: the earlier copy itself, a duplicate head) is 0 here
    assert a.diagonal(offset=-t).mean().item() == 0.0
    with pytest.raises(ValueError, match="repeated twice"):
        lit.demo_induction_stripe(a, t + 1)


def test_prefix_matching_scores_only_later_repeats_and_every_earlier_copy():
    t, start = 4, 1
    a = _induction_head(t, repeats=3, start=start)
    assert lit.prefix_matching_score(a, period=t, repeats=3, start=start).item() == 1.0
    # split the third repeat's mass over the tokens after both earlier copies: still 1
    b = a.clone()
    for k in range(t):
        i = start + 2 * t + k
        b[i] = 0.0
        b[i, start + k + 1] = 0.5
        b[i, start + t + k + 1] = 0.5
    assert lit.prefix_matching_score(b, period=t, repeats=3, start=start).item() == 1.0
    # a duplicate head (on the earlier copy itself, not the token after it) scores 0
    dup = torch.zeros_like(a)
    for i in range(a.shape[0]):
        j = i - start
        dup[i, i if j < t else start + j % t] = 1.0
    assert lit.prefix_matching_score(dup, period=t, repeats=3, start=start).item() == 0.0
    with pytest.raises(ValueError, match="repeats >= 2"):
        lit.prefix_matching_score(a, period=t, repeats=4, start=start)


# --------------------------------------------------------------------------------------
# Gu et al.
# --------------------------------------------------------------------------------------


def test_token_importance_divides_by_the_queries_that_see_the_key():
    n = 4
    a = torch.zeros(n, n, dtype=torch.float64)
    a[0, 0] = 1.0
    a[1:, 0] = 0.5
    a[torch.arange(1, n), torch.arange(1, n)] = 0.5
    alpha = lit.token_importance(a, causal=True)
    assert alpha[0].item() == (1.0 + 0.5 * 3) / 4  # all 4 queries see key 0
    assert alpha[3].item() == 0.5  # only the last query sees key 3
    assert alpha[1].item() == 0.5 / 3
    # bidirectional: every query sees every key, so each is divided by N
    assert lit.token_importance(a, causal=False)[3].item() == 0.5 / 4


def test_sink_is_strictly_above_epsilon():
    alpha = torch.tensor([0.3, 0.30001, 0.0, 1.0], dtype=torch.float64)
    assert lit.sink_percent(alpha) == 50.0
    assert lit.sink_percent(alpha, epsilon=0.0) == 75.0
    with pytest.raises(ValueError, match="empty"):
        lit.sink_percent(torch.zeros(0))


# --------------------------------------------------------------------------------------
# attnlab's own scores, dense and streamed, and the streamed literature scores
# --------------------------------------------------------------------------------------


def test_own_scores_are_the_streamed_head_scores():
    a = _causal_patterns(len(TOKENS), heads=4, seed=3).reshape(2, 2, len(TOKENS), len(TOKENS))
    t = AttentionTrace(tokens=[str(i) for i in TOKENS.tolist()], weights=a,
                       token_ids=TOKENS.tolist())
    streamed = head_scores(t, tile_rows=3)
    dense = own_scores(a, TOKENS)
    assert set(dense) == set(streamed)
    for k in dense:
        assert torch.allclose(dense[k], streamed[k], atol=1e-6), k


def test_streamed_literature_scores_equal_the_dense_formulas():
    n = len(TOKENS)
    a = _causal_patterns(n, heads=4, seed=5).reshape(2, 2, n, n)
    t = AttentionTrace(tokens=[str(i) for i in TOKENS.tolist()], weights=a,
                       token_ids=TOKENS.tolist(), causal=True)
    got = lit.text_scores(t, tile_rows=2)
    for name, ref in (("previous", tl_previous), ("duplicate", tl_duplicate),
                      ("induction", tl_induction)):
        p = ref(TOKENS)
        for measure in ("mul", "abs"):
            want = torch.tensor([[tl_score(a[i, j], p, error_measure=measure) for j in range(2)]
                                 for i in range(2)], dtype=torch.float64)
            assert torch.allclose(got[f"tl-{name}-{measure}"], want, atol=1e-6), (name, measure)
    assert torch.allclose(got["gu-sink"], a[..., :, 0].double().sum(-1) / n, atol=1e-7)


# --------------------------------------------------------------------------------------
# on a model
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpt():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is faster on a busy machine
    yield tiny_gpt(block_size=120)
    torch.set_num_threads(before)


def test_literature_ids_put_bos_first_like_to_tokens():
    class Tok:  # a Hugging Face-like tokenizer that adds no BOS of its own
        bos_token_id = 5

        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": ([99] if add_special_tokens else []) + [len(w) for w in
                                                                         text.split()]}

        def convert_ids_to_tokens(self, ids):
            return [str(i) for i in ids]

    assert lit.literature_ids(Tok(), "ab c") == [5, 2, 1]
    Tok.bos_token_id = None  # BERT-style: its own special tokens
    assert lit.literature_ids(Tok(), "ab c") == [99, 2, 1]


def test_detect_head_on_a_model_is_transformerlens_on_its_patterns(gpt):
    texts = ["the cat sat on the mat and the cat sat", "a dog ran far away"]
    for name, ref in (("previous_token_head", tl_previous),
                      ("duplicate_token_head", tl_duplicate), ("induction_head", tl_induction)):
        for measure in ("mul", "abs"):
            got = lit.detect_head(gpt, texts, name, error_measure=measure)
            per_text = []
            for text in texts:
                ids = gpt.tokenizer.encode(text)  # <bos> first
                (pat,) = lit.attention_patterns(gpt, [ids])
                p = ref(torch.tensor(ids))
                per_text.append([[tl_score(pat[i, j], p, error_measure=measure)
                                  for j in range(2)] for i in range(2)])
            want = torch.tensor(per_text, dtype=torch.float64).mean(0)
            assert torch.allclose(got, want, atol=1e-6), (name, measure)
    with pytest.raises(ValueError, match="1 < n"):
        lit.detect_head(gpt, "", "previous_token_head")


def test_padded_batches_give_each_input_its_own_pattern(gpt):
    a = gpt.tokenizer.encode("the cat sat on the mat")
    b = gpt.tokenizer.encode("a dog")
    together = lit.attention_patterns(gpt, [a, b])
    alone = lit.attention_patterns(gpt, [b])[0]
    assert together[1].shape == alone.shape == (2, 2, 3, 3)
    assert torch.allclose(together[1], alone, atol=1e-6)
    assert torch.allclose(together[0].sum(-1), torch.ones(2, 2, len(a)), atol=1e-6)


def test_demo_induction_on_a_small_vocabulary_is_scaled_and_says_so(gpt):
    score, info = lit.demo_induction_score(gpt, seed=3)
    vocab = len(gpt.tokenizer.vocab)
    assert info["scaled"] and info["ids"] == [vocab // 10, vocab] and info["seq_len"] == 50
    # the same tokens, drawn the same way, scored by hand
    pool = torch.tensor([i for i in range(vocab // 10, vocab) if i != 0])
    g = torch.Generator().manual_seed(3)
    toks = pool[torch.randint(0, len(pool), (10, 50), generator=g)]
    pats = torch.stack(lit.attention_patterns(gpt, torch.cat([toks, toks], 1).tolist()))
    want = pats.double().diagonal(offset=-49, dim1=-2, dim2=-1).mean((0, -1))
    assert torch.allclose(score, want, atol=1e-12)
    small = tiny_gpt(block_size=40)
    _, info = lit.demo_induction_score(small)
    assert info["seq_len"] == 20 and info["scaled"]


def test_prefix_matching_on_a_model_uses_distinct_tokens_after_bos(gpt):
    score, info = lit.prefix_matching(gpt, period=6, repeats=3, batch=2, seed=1)
    assert info["bos"] and info["period"] == 6 and score.shape == (2, 2)
    assert bool(((score >= 0) & (score <= 1)).all())


def test_gu_sink_rate_counts_only_inputs_of_the_given_length(gpt):
    long = " ".join(["the cat"] * 40)
    r = lit.gu_sink_rate(gpt, [long, "a dog"], tokens=64)
    assert r["samples"] == 1 and r["skipped"] == 1
    (pat,) = lit.attention_patterns(gpt, [gpt.tokenizer.encode(long)[:64]])
    alpha = pat.double()[..., :, 0].mean(-1)
    assert torch.allclose(r["importance"], alpha, atol=1e-12)
    assert r["sink_percent"] == pytest.approx(float((alpha > 0.3).double().mean()) * 100)
    with pytest.raises(ValueError, match="no text has 64"):
        lit.gu_sink_rate(gpt, ["a dog"], tokens=64)


def test_every_definition_is_documented_and_computable(gpt):
    for name, d in lit.DEFINITIONS.items():
        assert d.summary and d.source and d.on in ("text", "probe")
        assert any("\u4e00" <= c <= "\u9fff" for c in d.summary_zh), name
    got = lit.compute_definitions(gpt, "the cat sat on the mat the cat")
    assert set(got) == set(lit.DEFINITIONS)
    for name, entry in got.items():
        assert entry["scores"].shape == (2, 2), name
    # the text-based TransformerLens scores are those of detect_head (BOS first)
    assert torch.allclose(got["tl-induction-abs"]["scores"],
                          lit.detect_head(gpt, "the cat sat on the mat the cat",
                                          "induction_head", error_measure="abs"), atol=1e-9)
    with pytest.raises(ValueError, match="valid names: tl-previous-mul"):
        lit.compute_definitions(gpt, "the cat", ["tl-nothing"])


# --------------------------------------------------------------------------------------
# attnlab diagnose --definition
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    """A tiny Hugging Face Llama folder (random weights, a word tokenizer with a BOS)."""
    return tiny_hf(tmp_path_factory.mktemp("llama"), "llama")


def test_diagnose_definition_picks_one_and_json_gives_all(llama_dir, capsys):
    text = "the cat sat on a mat the cat sat"
    assert cli.main(["diagnose", "--model", str(llama_dir), "--text", text,
                     "--definition", "tl-previous-abs", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["definition"] == "tl-previous-abs" and "head_detector" in one["source"]
    assert len(one["scores"]) == 2 and len(one["scores"][0]) == 4
    assert cli.main(["diagnose", "--model", str(llama_dir), "--text", text, "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert set(full["definitions"]) == set(lit.DEFINITIONS)
    assert full["definitions"]["tl-previous-abs"]["scores"] == one["scores"]
    assert cli.main(["diagnose", "--model", str(llama_dir), "--text", text,
                     "--definition", "gu-sink"]) == 0
    assert "gu-sink" in capsys.readouterr().out


def test_diagnose_refuses_an_unknown_definition_before_loading(capsys):
    assert cli.main(["diagnose", "--model", "no-such-model", "--text", "x",
                     "--definition", "induction-ish"]) == 2
    err = capsys.readouterr().err
    assert "--definition: unknown definition 'induction-ish'" in err
    assert "tl-demo-induction" in err and "olsson-prefix-matching" in err


def test_the_runner_refuses_an_encoder_decoder_model():
    from types import SimpleNamespace

    from attnlab.nn.transformer import Transformer, TransformerConfig

    net = Transformer(TransformerConfig(embed_dim=8, num_heads=2, ff_dim=16))
    model = SimpleNamespace(model=net, tokenizer=None, name="seq2seq", causal=False,
                            num_layers=2, max_length=16)
    with pytest.raises(TypeError, match="'seq2seq' is an encoder-decoder"):
        lit.for_each_layer(model, [[1, 2, 3]], lambda layer, w: None)
