"""article-code: the articles' listings run as printed in a fresh interpreter; 001 fails,
its minimal corrections are found by running it; corrected code, attnlab and the einsum
formulation agree; wrong listings, patches and formulas are caught."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest
import torch
from articles import SKIP_WHY, article_text
from zh_helpers import untranslated

from attnlab.experiments import _common
from attnlab.experiments import article_code as ac
from attnlab.experiments import article_listings as al
from attnlab.experiments.claims import claim, verdicts
from attnlab.nn import MultiHeadAttention

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def result(fast_results):
    """The session's run (default arguments, with its figure)."""
    return fast_results["article-code"]


def _check(r, start):
    return next(c for c in r.checks if c.name.startswith(start))


def _row(r, start):
    return next(row for row in r.table[1] if row[0].startswith(start))


# -- the listings ----------------------------------------------------------------------------


@pytest.mark.parametrize("article", ["000", "001"])
def test_listing_is_verbatim_from_the_article(article):
    text = article_text(article)
    if text is None:
        # justified: the articles' text is not in the repository (only beside a checkout)
        pytest.skip(SKIP_WHY)
    listing = ac.listing_source(article)
    assert listing.startswith("import torch\n") and listing.rstrip("\n") in text


def test_the_fused_call_and_the_heat_map_snippet_are_verbatim_from_the_article():
    text = article_text("001")
    if text is None:
        # justified: the articles' text is not in the repository (only beside a checkout)
        pytest.skip(SKIP_WHY)
    assert f"通过 {al.FUSED_CALL_001} 一次性计算 QKV" in text
    assert al.HEATMAP_001.rstrip("\n") in text
    assert f"self.qkv_proj = {al.LISTING_CALL_001}\n" in ac.listing_source("001")
    assert "        return self.out_proj(out)\n" in ac.listing_source("001")


def test_listings_ship_in_the_wheel():
    """pyproject's package-data covers every listing file (setuptools reads these globs)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = conf["tool"]["setuptools"]["package-data"]["attnlab"]
    files = sorted((ROOT / "src" / "attnlab" / "experiments" / "listings").iterdir())
    assert len(files) == 2
    for f in files:
        rel = f.relative_to(ROOT / "src" / "attnlab").as_posix()
        assert any(fnmatch.fnmatch(rel, g) for g in globs), rel


def test_unknown_article_and_bad_edit_are_refused():
    with pytest.raises(ValueError, match="article must be one of"):
        ac.listing_source("002")
    with pytest.raises(ValueError, match="exactly once.*found 0 times"):
        ac.apply_edits("x = 1\n", [ac.Edit("y = 2\n", "y = 3\n", "no such line")])


def test_fixes_change_only_what_fails():
    src = ac.listing_source("001")
    fixed = ac.apply_edits(src, ac.FIXES_001)
    diff = ac.diff_lines(src, fixed)
    assert sorted(d[0] for d in diff) == ["+"] * 6 + ["-"]
    assert "+        if mask is not None:" in diff
    assert len(fixed.splitlines()) == len(src.splitlines()) + 5


# -- the experiment --------------------------------------------------------------------------


def test_001_fails_as_printed_a_finding(result):
    r = result
    assert r.measured == 1 and not r.holds and r.passed and r.finding
    assert all(c.passed for c in r.checks), [c for c in r.checks if not c.passed]
    row = _row(r, "001 as printed")
    assert row[1:] == ["IndentationError", 27, "unexpected indent"]
    assert ac.listing_source("001").splitlines()[26].strip().startswith(
        "scores = scores.masked_fill(")
    row = _row(r, "001 + fix 1:")
    assert row[1] == "AttributeError" and "no attribute 'n_heads'" in row[3]
    row = _row(r, "001 + fixes 1–2")
    assert row[1] == "RuntimeError" and row[3].startswith("einsum()")
    assert _row(r, "001 + fixes 1–3")[1] == "runs"
    row = _row(r, "001, other reading")
    assert row[1] == "TypeError" and row[3].startswith("masked_fill()")


def test_the_fused_call_as_printed_raises_and_the_listings_call_builds(result):
    c = result.check("fused-call-raises")
    assert c.passed and c.support and c.value == 1
    assert c.control.measured == 0 and not c.control.holds
    row = _row(result, "001 tip as printed: qkv_proj = nn.Linear(3*d_model)")
    assert row[1] == "TypeError" and "out_features" in row[3]
    assert _row(result, "001's listing call")[1] == "runs"
    (v,) = verdicts([result], [claim("001-error-fused-linear-call")])
    assert v.verdict == "does not hold" and v.measurements[0].controlled


def test_the_heat_map_snippet_needs_weights_the_listing_never_returns(result):
    c = result.check("heatmap-snippet-raises")
    assert c.passed and c.support and c.value == 1
    assert c.control.measured == 0 and not c.control.holds
    row = _row(result, "001 heat-map snippet after the corrected listing and out =")
    assert row[1:] == ["NameError", 3, "name 'attn' is not defined"]
    assert al.HEATMAP_001.splitlines()[2].startswith("plt.matshow(attn[0,0]")
    row = _row(result, "001 heat-map snippet after the corrected listing and attn =")
    assert row[1] == "ValueError" and row[2] == 3  # matshow refuses the output's vector
    assert _row(result, "001 heat-map snippet, control")[1:] == [
        "runs", "", f"drew a {ac.SEQ} × {ac.SEQ} image"]
    (v,) = verdicts([result], [claim("001-heatmap-code")])
    assert v.verdict == "does not hold" and v.measurements[0].controlled


def test_a_valid_fused_call_and_a_snippet_without_attn_fail_their_checks():
    """The wrong variants: the listing's own call in place of the tip's, and a snippet that
    plots the output (defined) instead of attn: both run, so both checks fail (a defect:
    support checks) and the items they decide would hold."""
    plots_out = al.HEATMAP_001.replace("attn[0,0]", "out[0]")
    r = ac.run(plot=False, fused_call_001=al.LISTING_CALL_001, heatmap_001=plots_out)
    for i in ("fused-call-raises", "heatmap-snippet-raises"):
        assert r.check(i).value == 0 and not r.check(i).passed, i
    assert not r.passed
    vs = verdicts([r], [claim("001-error-fused-linear-call"), claim("001-heatmap-code")])
    assert [v.verdict for v in vs] == ["holds", "holds"]
    # a listing whose forward cannot return its weights leaves the snippet no control:
    # the check fails rather than pass without one
    r = ac.run(plot=False, listing_001=ac.listing_source("001").replace(
        "        return self.out_proj(out)\n", "        return (self.out_proj(out))\n"))
    c = r.check("heatmap-snippet-raises")
    assert c.control.holds and not c.passed


def test_000_runs_as_printed_and_equals_attnlab(result):
    row = _row(result, "000 as printed, run as __main__")
    assert row[1] == "runs" and row[3].startswith("Sum of attention weights for token 0: ")
    assert abs(float(row[3].rsplit(" ", 1)[1]) - 1) < 1e-5
    assert _check(result, "000 as printed vs attnlab SelfAttention, same").value <= 1e-6


def test_contiguous_tip_measured(result):
    assert _row(result, "view after transpose, (B, H, L, d)")[1] == "RuntimeError"
    assert _row(result, "view after transpose, one head")[1] == "runs"
    assert _row(result, "view after transpose, one token")[1] == "runs"


def test_every_visible_string_has_chinese(result):
    assert untranslated(result, _common.ZH, ac.ZH) == []
    axes = result.figure.axes
    assert axes[0].get_xlabel() and axes[1].get_xlabel()


def test_a_correct_listing_flips_the_verdict():
    """Were article 001's listing correct, the experiment would not see its finding."""
    fixed = ac.apply_edits(ac.listing_source("001"), ac.FIXES_001)
    r = ac.run(plot=False, listing_001=fixed, fixes_001=())
    assert r.measured == 0 and r.holds and not r.passed


def test_wrong_listing_patch_and_formula_are_caught():
    """A 000 without the 1/√d scaling, a 001 'fixed' by deleting the masking and an einsum
    without the scale: each fails its own check."""
    no_scale = ac.listing_source("000").replace(
        "scores = scores / math.sqrt(self.head_dim)", "scores = scores")
    drop_mask = (ac.Edit("        # 3. 掩码处理（解码器需要）if mask is not None:\n"
                         "            scores = scores.masked_fill(mask == 0, float('-inf'))\n",
                         "", "delete the masking"), *ac.FIXES_001[1:])

    def einsum_no_scale(mha, x, mask=None):
        mha.scale, scale = 1.0, mha.scale
        try:
            return ac.einsum_attention(mha, x, mask)
        finally:
            mha.scale = scale

    r = ac.run(plot=False, listing_000=no_scale, fixes_001=drop_mask,
               einsum_fn=einsum_no_scale)
    assert r.measured == 2 and not r.holds
    assert not r.passed, "a wrong corrected listing or einsum is a defect, finding or not"
    assert not _check(r, "000 as printed vs attnlab SelfAttention, same").passed
    assert not _check(r, "001 with the 3 fixes").passed
    assert not _check(r, "tip: attn.masked_fill").passed  # the tip sees the unmasked weights
    assert not _check(r, "einsum formulation").passed
    assert _check(r, "tip: torch.allclose").passed  # rows still sum to 1


# -- the driver and the einsum formulation ---------------------------------------------------


def test_driver_reports_the_failing_line():
    src = "import torch\n\nclass A(torch.nn.Module):\n    def forward(self, x):\n" \
          "        return x / 0 if False else 1 // 0\n"
    runs = [{"label": "a", "source": src, "filename": "a.py", "cls": "A", "args": [],
             "calls": [["x", None]]},
            {"label": "b", "source": "def f(:\n", "filename": "b.py"}]
    ((recs, outs),) = ac.run_listings([(runs, {"x": torch.ones(2)})])
    err = recs[0]["calls"][0]["error"]
    assert (err["type"], err["line"], err["message"]) == (
        "ZeroDivisionError", 5, "integer division or modulo by zero")
    assert recs[1]["error"]["type"] == "SyntaxError" and recs[1]["error"]["line"] == 1
    assert outs == {}


def test_einsum_attention_equals_attnlab_in_fp64():
    torch.manual_seed(0)
    mha = MultiHeadAttention(24, 3).double()
    with torch.no_grad():
        mha.qkv_proj.bias.normal_()
    x = torch.randn(2, 7, 24, dtype=torch.float64)
    mask = torch.rand(2, 1, 7, 7) > 0.3
    mask[..., 0] = True
    for m in (None, mask):
        out, w = ac.einsum_attention(mha, x, m)
        ref, ref_w = mha(x, mask=m, need_weights=True)
        assert (out - ref).abs().max() < 1e-12 and (w - ref_w).abs().max() < 1e-12


def test_einsum_attention_refuses_what_it_cannot_compute():
    with pytest.raises(ValueError, match="num_kv_heads == num_heads"):
        ac.einsum_attention(MultiHeadAttention(16, 4, num_kv_heads=2), torch.randn(1, 3, 16))
    with pytest.raises(ValueError, match=r"x must have shape \(B, N, 16\), got \(1, 3, 8\)"):
        ac.einsum_attention(MultiHeadAttention(16, 4), torch.randn(1, 3, 8))
    with pytest.raises(TypeError, match="attnlab MultiHeadAttention"):
        ac.einsum_attention(torch.nn.MultiheadAttention(16, 4), torch.randn(1, 3, 16))
