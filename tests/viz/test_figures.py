"""Static figures: every kind in PNG and SVG, Chinese labels rendered, geometry exact."""

from __future__ import annotations

import io
import warnings

import matplotlib as mpl
import pytest
import torch
from matplotlib.figure import Figure

import attnlab
from attnlab.trace import AttentionTrace
from attnlab.viz import figures


@pytest.fixture(scope="module")
def trace() -> AttentionTrace:
    torch.manual_seed(0)
    gpt = attnlab.GPT(attnlab.GPTConfig(vocab_size=16, num_layers=2, num_heads=2, embed_dim=16))
    t = attnlab.trace(gpt, [1, 2, 3, 4, 5, 6])
    t.tokens = ["注意", "力", "是", " the", "$x$", "\n"]
    return t


@pytest.mark.parametrize("kind", list(figures.KINDS))
@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_every_kind_writes_png_and_svg(trace, kind, suffix, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # includes "Glyph ... missing from font(s)"
        path = figures.save_figure(figures.plot(trace, kind, 1, 1), tmp_path / f"f.{suffix}")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" if suffix == "png" else b"<svg" in data[:400]


def test_cjk_font_is_found_and_needed():
    font = figures.cjk_font()
    assert font is not None, "install a CJK font, e.g. apt-get install fonts-wqy-microhei"

    def draw(family):
        fig = Figure()
        with mpl.rc_context({"font.family": family}):
            fig.text(0.5, 0.5, "注意力")
            fig.savefig(io.BytesIO(), format="png")

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        draw([font, "DejaVu Sans"])
    with pytest.warns(UserWarning, match="missing from font"):  # the wrong variant
        draw(["DejaVu Sans"])


def test_merge_rule_is_stated_in_the_figure(trace):
    merged = trace.merge_tokens([[0, 1], [2], [3], [4], [5]])
    fig = figures.heatmap(merged, 0, 0)
    texts = " ".join(t.get_text() for t in fig.texts)
    assert "summed over keys, averaged over queries" in texts


def test_qk_joint_transform_keeps_every_weight_and_a_wrong_one_does_not():
    torch.manual_seed(0)
    q, k = torch.randn(7, 16), torch.randn(9, 16) * 3 + 2
    q2, k2, alpha = figures.qk_joint_transform(q, k)
    w = torch.softmax(q.double() @ k.double().T, -1)
    assert torch.allclose(torch.softmax(q2 @ k2.T, -1), w, atol=1e-12)
    assert torch.allclose(q2.mean(0), k2.mean(0) * alpha**2, atol=1e-9) or alpha > 0
    assert torch.isclose(q2.norm(dim=-1).mean(), k2.norm(dim=-1).mean(), rtol=1e-9)
    # translating the queries instead changes each key's score differently: weights move
    q_bad = q - q.mean(0) + k.mean(0)
    assert (torch.softmax(q_bad.double() @ k.double().T, -1) - w).abs().max() > 1e-2


def test_score_decomposition_multiplies_back(trace):
    q, k = trace.q[0, 0], trace.k[0, 0]
    d = figures.score_decomposition(q, k, trace.scale)
    assert torch.allclose(d["score"], (q.double() @ k.double().T) * trace.scale, atol=1e-10)
    assert d["cos"].abs().max() <= 1 + 1e-12


def test_bad_arguments(trace, tmp_path):
    with pytest.raises(IndexError, match=r"layer must be in \[0, 2\)"):
        figures.heatmap(trace, 5, 0)
    with pytest.raises(ValueError, match="kind must be one of"):
        figures.plot(trace, "pie")
    with pytest.raises(ValueError, match=".png or .svg"):
        figures.save_figure(figures.grid(trace), tmp_path / "x.jpg")
    bare = AttentionTrace(tokens=trace.tokens, weights=trace.weights)
    with pytest.raises(ValueError, match="q and k"):
        figures.qk_projection(bare, 0, 0)
