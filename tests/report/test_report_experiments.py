"""One report section per experiment Result: the verdict, the numbers and the figure."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from attnlab.experiments import Check, Result  # noqa: E402
from attnlab.report import PROVIDERS  # noqa: E402
from attnlab.report.experiments import section_for  # noqa: E402


def _result(measured: float, *, figure=None, check_ok: bool = True) -> Result:
    return Result(name="toy-claim", claim="Rows sum to one.", claim_zh="每行之和为一。",
                  quantity="max |row sum - 1|", quantity_zh="行和误差", measured=measured,
                  expected=0.0, tolerance=1e-6,
                  checks=[Check("weights >= 0", 0.0, "≥ 0", check_ok)],
                  table=(["n", "error"], [[4, 1.5e-7]]), figure=figure,
                  caption="A toy figure.", caption_zh="示意图。")


def test_provider_is_registered_after_parity():
    keys = list(PROVIDERS)
    assert keys[keys.index("parity") + 1] == "experiments"
    assert PROVIDERS["experiments"] == "attnlab.report.experiments:build"


def test_a_passing_result_becomes_a_passing_section_with_its_figure():
    fig, ax = plt.subplots(figsize=(2, 2), layout="constrained")
    ax.plot([0, 1], [1, 0])
    r = _result(2e-7, figure=fig)
    s = section_for(r, dpi=40)
    assert s.id == "exp-toy-claim" and s.passed is True
    assert s.html.count("<table") == 3  # headline, checks, numbers
    assert '<img src="data:image/png;base64,' not in s.html  # alt comes first
    assert 'src="data:image/png;base64,' in s.html and "A toy figure." in s.html
    assert r.figure is None and not plt.fignum_exists(fig.number)  # memory freed
    assert s.rows[0] == ("max |row sum - 1|", "2.00e-07", True)


def test_a_failing_claim_or_check_fails_the_section():
    assert section_for(_result(1e-3)).passed is False  # the headline number is off
    s = section_for(_result(0.0, check_ok=False))  # a secondary check is off
    assert s.passed is False and ("weights >= 0", "0", False) in s.rows
    assert 'class="bad"' in s.html


def test_a_figure_is_stored_as_its_one_drawing_compressed_once():
    """The data URI holds the PNG of :func:`attnlab._render.figure_png` (tests/test_render.py:
    matplotlib's tight image, drawn once), RGB since the figure is opaque, and the size of
    the image matplotlib's ``savefig(bbox_inches="tight")`` writes."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    from attnlab._render import figure_png
    from attnlab.report.html import figure_to_data_uri

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot(np.linspace(0, 1, 50), np.sin(np.linspace(0, 6, 50)), label="sin")
    ax.set_title("exact pixels")
    ax.legend()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=50, bbox_inches="tight")  # matplotlib's defaults
    buf.seek(0)
    with Image.open(buf) as im:
        size = im.size
    head = "data:image/png;base64,"
    uri = figure_to_data_uri(fig, dpi=50)
    once = figure_png(fig, dpi=50)
    plt.close(fig)
    assert uri.startswith(head)
    stored = base64.b64decode(uri[len(head):])
    assert stored == once
    with Image.open(io.BytesIO(stored)) as im:
        assert im.mode == "RGB" and im.size == size
