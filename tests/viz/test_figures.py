"""Static figures: every kind in PNG and SVG, Chinese labels rendered, geometry exact; a long
trace drawn from its on-demand methods (pooled maps, windows), never its dense weights."""

from __future__ import annotations

import io
import warnings

import matplotlib as mpl
import pytest
import torch
from explorer_traces import dense_pooled, synthetic_trace
from matplotlib.figure import Figure

import attnlab
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.tracer import trace as trace_model
from attnlab.viz import figures


@pytest.fixture(scope="module")
def trace() -> AttentionTrace:
    torch.manual_seed(0)
    gpt = attnlab.GPT(attnlab.GPTConfig(vocab_size=16, num_layers=2, num_heads=2, embed_dim=16))
    t = trace_model(gpt, [1, 2, 3, 4, 5, 6])
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
    scale = trace.score_shape(0).scale
    d = figures.score_decomposition(q, k, scale)
    assert torch.allclose(d["score"], (q.double() @ k.double().T) * scale, atol=1e-10)
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


@pytest.fixture(scope="module")
def long_trace() -> AttentionTrace:
    return synthetic_trace(1500, layers=1, heads=2, kv_heads=1, d=16)


@pytest.fixture
def no_dense(monkeypatch):
    def refuse(self):
        raise AssertionError("the dense trace.weights was used")

    monkeypatch.setattr(AttentionTrace, "weights", property(refuse))


def test_head_map_is_exact_when_short_and_the_pooled_definition_when_long(trace, long_trace,
                                                                         no_dense):
    m, rows, cols, block = figures.head_map(trace, 1, 0, 64)
    assert block == 1 and rows == cols and torch.equal(m, trace.head_weights(1, 0))
    m, rows, cols, block = figures.head_map(long_trace, 0, 1, 64)
    assert block == 24 and m.shape == (63, 63) and len(rows) == len(cols) == 63
    exact = dense_pooled(long_trace.head_weights(0, 1), 24)
    assert torch.allclose(m.double(), exact, atol=1e-6)
    assert torch.allclose(m.sum(-1), torch.ones(63), atol=1e-5)
    assert rows[1] == "24–47 w24…"
    # averaging over a block's keys too (a plain block mean) is a different picture
    sizes = torch.tensor([min(24, 1500 - c) for c in range(0, 1500, 24)], dtype=torch.float64)
    block_mean = exact / sizes
    assert (block_mean.sum(-1) - 1).abs().min() > 0.5 and not torch.allclose(
        m.double(), block_mean, atol=1e-3)


@pytest.mark.parametrize("kind", list(figures.KINDS))
def test_a_long_trace_draws_every_kind_without_dense_weights(long_trace, kind, no_dense,
                                                              tmp_path):
    fig = figures.plot(long_trace, kind, 0, 1)
    titles = " ".join([ax.get_title() for ax in fig.axes] + [fig._suptitle.get_text()
                                                             if fig._suptitle else ""])
    if kind in ("heatmap", "grid", "arcs"):
        assert "pooled in blocks of" in titles and "sum over its keys" in titles
    if kind == "decomposition":
        assert "queries 1372–1499, keys 1372–1499 of 1500" in titles
    if kind == "qk":
        assert "1500 tokens" in titles
    figures.save_figure(fig, tmp_path / "f.png")


def test_heatmap_of_a_long_head_shows_the_pooled_values(long_trace, no_dense):
    fig = figures.heatmap(long_trace, 0, 0, max_blocks=50)
    shown = torch.tensor(fig.axes[0].images[0].get_array().data)
    assert torch.allclose(shown.double(), dense_pooled(long_trace.head_weights(0, 0), 30),
                          atol=1e-6)


def test_decomposition_window_is_checked_and_masked(long_trace):
    fig = figures.decomposition(long_trace, 0, 0, rows=range(10, 20), cols=range(0, 30))
    cos = fig.axes[0].images[0].get_array()
    assert cos.shape == (10, 30) and bool(cos.mask[0, 11]) and not bool(cos.mask[0, 10])
    with pytest.raises(ValueError, match="rows must be a range of step 1 within"):
        figures.decomposition(long_trace, 0, 0, rows=range(0, 2000))
