"""Take the README's two screenshots with Debian's chromium through Playwright.

    HF_HUB_OFFLINE=1 .venv/bin/python docs/img/make_screenshots.py

* ``docs/img/explorer.png``: the explorer (``attnlab explore``) on MiniLM, one head of
  layer 2 selected, its attention matrix shown;
* ``docs/img/report-figure.png``: the qk-variance experiment's figure as the report shows
  it (its section rendered by :mod:`attnlab.report` into a page of its own).

Each PNG is reduced to a 256-colour palette and must stay under 150 KB.
"""

from __future__ import annotations

import io
import shutil
import sys
import tempfile
from pathlib import Path

from PIL import Image
from playwright.sync_api import sync_playwright

HERE = Path(__file__).resolve().parent
LIMIT = 150_000
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync", "--disable-quic"]
TEXT = "The animal didn't cross the street because it was too tired."


def explorer_page(folder: Path) -> Path:
    from attnlab.viz.explorer import explore

    return explore("minilm", TEXT).save(folder / "explorer.html")


def report_page(folder: Path) -> Path:
    from attnlab.experiments import run
    from attnlab.report import render_page
    from attnlab.report.experiments import section_for

    html = render_page([section_for(run("qk-variance"))])
    path = folder / "report.html"
    path.write_text(html, encoding="utf-8")
    return path


def save_png(png: bytes, path: Path) -> int:
    """Write ``png`` reduced to a 256-colour palette; the bytes written."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    out = io.BytesIO()
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(out, "PNG", optimize=True)
    data = out.getvalue()
    if len(data) > LIMIT:
        raise SystemExit(f"{path.name}: {len(data)} bytes, over the {LIMIT}-byte limit")
    path.write_bytes(data)
    return len(data)


def main() -> None:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        raise SystemExit("chromium is not installed (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        folder = Path(tmp)
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 860, "height": 670})

        page.goto(explorer_page(folder).as_uri())
        page.wait_for_selector(".ax-thumb")
        page.click(".ax-thumb[data-layer='2'][data-head='5']")
        page.select_option(".ax-query", "7")
        page.click(".ax-tab[data-view=matrix]")
        page.wait_for_timeout(300)
        size = save_png(page.screenshot(), HERE / "explorer.png")
        print(f"explorer.png: {size / 1e3:.0f} kB")

        page.set_viewport_size({"width": 1180, "height": 900})
        page.goto(report_page(folder).as_uri())
        shot = page.locator("figure").first
        shot.scroll_into_view_if_needed()
        size = save_png(shot.screenshot(), HERE / "report-figure.png")
        print(f"report-figure.png: {size / 1e3:.0f} kB")
        browser.close()


if __name__ == "__main__":
    sys.exit(main())
