"""A matplotlib figure as a PNG in one drawing pass.

``fig.savefig(..., bbox_inches="tight")`` draws the figure twice: once with rendering
disabled, to find where its artists end (and to run a layout engine, constrained or tight,
which a figure that has one needs before it is drawn), then again for the pixels, on a canvas
cut to that box. :func:`figure_png` draws it once, layout included (``Figure.draw`` runs
the layout engine itself), reads the box from the same renderer, and cuts the image to it:
the same size, the same padding (``savefig.pad_inches``, filled with the figure's colour),
the same pixels up to where a fraction of a pixel falls (matplotlib shifts the drawing by
the box's fractional origin; the cut moves it by a whole pixel).

A figure without a layout engine often reaches past its own edge (tick labels, a title): it
is drawn on a canvas :data:`MARGIN_IN` wider on every side (the figure's own geometry, as
matplotlib's second pass moves it: ``matplotlib._tight_bbox.adjust_bbox``), so the cut holds
what lies there too. An artist beyond even that (a legend placed far outside, say), or
beyond the edge of a figure whose layout engine placed it, is saved by matplotlib's two
passes.

The PNG is lossless and small: an opaque figure is stored as RGB (no alpha channel) and
compressed with Pillow's ``optimize``.

>>> import matplotlib
>>> matplotlib.use("Agg")
>>> from matplotlib.figure import Figure
>>> fig = Figure(figsize=(2, 1))
>>> _ = fig.add_subplot().plot([0, 1], [1, 0])
>>> data = figure_png(fig, dpi=50)
>>> data[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
True
"""

from __future__ import annotations

import io
from typing import Any

__all__ = ["figure_png"]

#: How far (pixels) an artist may reach past the canvas's edge and still be cut from the
#: one drawing (text extents are computed in floating point).
EDGE_PX = 0.5
#: The margin (inches, each side) of the canvas a figure without a layout engine is drawn on.
MARGIN_IN = 0.5


def _encode(rgba: Any) -> bytes:
    """An (H, W, 4) uint8 array as an optimized PNG, RGB where every pixel is opaque."""
    from PIL import Image

    im = Image.fromarray(rgba, "RGBA")
    if int(rgba[..., 3].min()) == 255:
        im = im.convert("RGB")
    buf = io.BytesIO()
    im.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def _two_passes(fig: Any, dpi: float, tight: bool) -> bytes:
    """matplotlib's own ``savefig`` (uncompressed, then encoded as :func:`_encode` does)."""
    import numpy as np
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight" if tight else None,
                pil_kwargs={"compress_level": 0})
    buf.seek(0)
    with Image.open(buf) as im:
        return _encode(np.asarray(im.convert("RGBA")))


def figure_png(fig: Any, *, dpi: float, tight: bool = True) -> bytes:
    """``fig`` as PNG bytes at ``dpi``, cut to its artists plus ``savefig.pad_inches``
    (``tight``, as ``savefig(bbox_inches="tight")``) or whole; drawn once (see the module)."""
    import matplotlib as mpl
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import to_rgba
    from matplotlib.transforms import Bbox

    # cut to its artists without a layout engine: the canvas is widened around the axes
    widened = tight and fig.get_layout_engine() is None
    try:  # (private in matplotlib; a version without it saves in its own two passes)
        from matplotlib._tight_bbox import adjust_bbox
    except ImportError:
        if widened:
            return _two_passes(fig, dpi, tight)
    old_canvas, old_dpi = fig.canvas, fig.dpi
    canvas = FigureCanvasAgg(fig)  # (the figure's canvas, for this drawing)
    restore = None
    try:
        fig.set_dpi(dpi)
        if widened:
            # the axes placed as a drawing places them (their aspect applied), then the
            # canvas widened around them
            renderer = canvas.get_renderer()
            for ax in fig.axes:
                if ax.get_axes_locator() is None:
                    ax.apply_aspect()
            w, h = fig.get_size_inches()
            restore = adjust_bbox(fig, Bbox.from_extents(-MARGIN_IN, -MARGIN_IN,
                                                         w + MARGIN_IN, h + MARGIN_IN), renderer)
        canvas.draw()
        image = np.asarray(canvas.buffer_rgba())
        if not tight:
            return _encode(image)
        height, width = image.shape[:2]
        box = fig.get_tightbbox(canvas.get_renderer())  # inches, from the canvas's corner
        if (box.x0 * dpi < -EDGE_PX or box.y0 * dpi < -EDGE_PX
                or box.x1 * dpi > width + EDGE_PX or box.y1 * dpi > height + EDGE_PX):
            if restore is not None:
                restore()
                restore = None
            return _two_passes(fig, dpi, tight)
        pad = mpl.rcParams["savefig.pad_inches"]
        box = box.padded(pad)
        out_w, out_h = int(box.width * dpi), int(box.height * dpi)
        left = int(round(box.x0 * dpi))
        top = int(round(height - box.y1 * dpi))
        colour = np.array([round(c * 255) for c in to_rgba(fig.get_facecolor())], np.uint8)
        out = np.empty((out_h, out_w, 4), np.uint8)
        out[...] = colour
        # the part of the drawing inside the cut (the rest of the cut is padding)
        x0, y0 = max(left, 0), max(top, 0)
        x1, y1 = min(left + out_w, width), min(top + out_h, height)
        if x1 > x0 and y1 > y0:
            out[y0 - top:y1 - top, x0 - left:x1 - left] = image[y0:y1, x0:x1]
        return _encode(out)
    finally:
        if restore is not None:
            restore()
        fig.set_dpi(old_dpi)
        fig.set_canvas(old_canvas)
