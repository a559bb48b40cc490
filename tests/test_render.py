"""A figure as a PNG in one drawing pass (attnlab._render.figure_png) is matplotlib's
``savefig(bbox_inches="tight")`` image: the same size, the same box of ink, lossless pixels
of the one drawing; whole (``tight=False``), the very bytes of matplotlib's own drawing. A
figure with an artist beyond its edge goes through matplotlib's two passes."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402

from attnlab._render import _encode, _two_passes, figure_png  # noqa: E402

DPI = 60


def _pixels(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGBA"))


def _matplotlib(fig, tight: bool = True, **kwargs) -> np.ndarray:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight" if tight else None, **kwargs)
    return _pixels(buf.getvalue())


def _ink(rgba: np.ndarray, background: np.ndarray) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) of the pixels that are not the background."""
    rows, cols = np.nonzero((rgba != background).any(-1))
    return int(rows.min()), int(cols.min()), int(rows.max()), int(cols.max())


def _figures():
    """Figures as the report draws them: tight layout, constrained layout, none; a suptitle,
    a colour bar, rotated tick labels, a grey face."""
    out = []
    fig, (a, b) = plt.subplots(1, 2, figsize=(5, 2.2))
    a.plot(np.linspace(0, 1, 40), np.sin(np.linspace(0, 7, 40)), label="sin")
    a.legend()
    b.bar(["one", "two", "three"], [3, 1, 2])
    b.tick_params(axis="x", rotation=60)
    fig.suptitle("a suptitle")
    fig.tight_layout()
    out.append(("tight layout", fig))
    fig = plt.figure(figsize=(4, 3), layout="constrained")
    im = fig.add_subplot().imshow(np.arange(30.0).reshape(5, 6))
    fig.colorbar(im)
    out.append(("constrained", fig))
    fig, ax = plt.subplots(figsize=(3, 2), facecolor="#eeeeee")
    ax.scatter([0, 1, 2], [2, 0, 1])
    ax.set_title("no layout engine, grey face")
    fig.subplots_adjust(bottom=0.2, top=0.85)  # (room for the tick labels inside the figure)
    out.append(("grey", fig))
    return out


@pytest.fixture
def figures():
    """The figures, made anew for each drawing (a constrained layout drawn again moves its
    axes by a fraction of a pixel: each method must draw the figure as it was made)."""
    made = []

    def make():
        made.append(_figures())
        return made[-1]

    yield make
    for figs in made:
        for _, fig in figs:
            plt.close(fig)


def test_the_cut_has_matplotlibs_size_and_box_of_ink(figures):
    for (name, fig), (_, again) in zip(figures(), figures()):
        ours, theirs = _pixels(figure_png(fig, dpi=DPI)), _matplotlib(again)
        assert ours.shape == theirs.shape, name
        face = np.array([round(c * 255) for c in matplotlib.colors.to_rgba(fig.get_facecolor())],
                        np.uint8)
        assert (ours[0, 0] == face).all() and (ours[-1, -1] == face).all(), name  # padding
        got, want = _ink(ours, face), _ink(theirs, face)
        # matplotlib shifts the drawing by the box's fraction of a pixel, the cut by a whole one
        assert max(abs(g - w) for g, w in zip(got, want)) <= 1, (name, got, want)


def test_a_cut_without_padding_or_off_by_a_few_pixels_is_told_apart(figures):
    """The wrong variants of the cut fail the comparison above."""
    name, fig = figures()[0]
    theirs = _matplotlib(fig)
    face = theirs[0, 0]
    unpadded = _matplotlib(figures()[0][1], pad_inches=0)
    assert unpadded.shape != theirs.shape
    shifted = np.roll(theirs, 3, axis=1)
    assert max(abs(g - w) for g, w in zip(_ink(shifted, face), _ink(theirs, face))) > 1


def test_the_pixels_are_the_one_drawings_own(figures):
    """Lossless: the cut holds exactly the pixels of the whole figure drawn once at that
    dpi (where the cut lies inside it), at one offset; a lossy encoding is told apart."""
    for (name, fig), (_, again) in zip(figures(), figures()):
        whole = _matplotlib(again, tight=False)
        ours = _pixels(figure_png(fig, dpi=DPI))
        pad = round(matplotlib.rcParams["savefig.pad_inches"] * DPI)
        inner = ours[pad + 1:-pad - 1, pad + 1:-pad - 1]
        h, w = inner.shape[:2]
        hits = [(y, x) for y in range(whole.shape[0] - h + 1)
                for x in range(whole.shape[1] - w + 1)
                if np.array_equal(whole[y:y + h, x:x + w], inner)]
        assert len(hits) == 1, (name, len(hits))
        lossy = _pixels(_encode(np.asarray(Image.fromarray(ours).convert("RGB").quantize(16)
                                           .convert("RGBA"))))
        assert not np.array_equal(lossy, ours), name


def test_whole_it_is_matplotlibs_own_drawing_byte_for_byte(figures):
    for (name, fig), (_, again) in zip(figures(), figures()):
        assert figure_png(fig, dpi=DPI, tight=False) == _two_passes(again, DPI, False), name


def test_an_artist_beyond_the_edge_goes_through_matplotlibs_two_passes():
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [1, 0], label="a line")
    ax.legend(bbox_to_anchor=(1.6, 1))  # outside the figure: the tight box grows past it
    try:
        data = figure_png(fig, dpi=DPI)
        assert data == _two_passes(fig, DPI, True)
        whole = _matplotlib(fig, tight=False)
        assert _pixels(data).shape[1] > whole.shape[1]  # the legend is in the image
    finally:
        plt.close(fig)


def test_the_figure_keeps_its_canvas_and_dpi():
    fig, ax = plt.subplots(figsize=(2, 2), dpi=77)
    canvas = fig.canvas
    ax.plot([0, 1])
    try:
        figure_png(fig, dpi=DPI)
        assert fig.canvas is canvas and fig.dpi == 77
    finally:
        plt.close(fig)


def test_an_opaque_figure_is_rgb_a_transparent_one_keeps_its_alpha():
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1])
    try:
        with Image.open(io.BytesIO(figure_png(fig, dpi=DPI))) as im:
            assert im.mode == "RGB"
        fig.patch.set_alpha(0.0)
        ax.patch.set_alpha(0.0)
        with Image.open(io.BytesIO(figure_png(fig, dpi=DPI))) as im:
            assert im.mode == "RGBA" and im.getextrema()[3][0] == 0
    finally:
        plt.close(fig)


def test_without_matplotlibs_adjust_bbox_it_saves_in_two_passes(monkeypatch):
    """A matplotlib without the private ``_tight_bbox`` (it may move): matplotlib's own
    image, not an error."""
    import sys

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [1, 0])
    try:
        monkeypatch.setitem(sys.modules, "matplotlib._tight_bbox", None)  # import fails
        assert figure_png(fig, dpi=DPI) == _two_passes(fig, DPI, True)
    finally:
        plt.close(fig)
