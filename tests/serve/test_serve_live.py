"""The server for real: uvicorn on 127.0.0.1, concurrent clients, a browser, and the
``attnlab serve`` process writing nowhere but its cache directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from serve_helpers import free_port

from attnlab.core import _kernel
from attnlab.serve.app import pinned_caches
from attnlab.viz.explorer import decode_blob
from limits import CHILD_S


def test_fifty_concurrent_requests_all_answered_correctly(live_server, toy_tracer):
    texts = [f"request {i:02d}: {'ab' * (i % 7)}" for i in range(50)]
    expected = {t: toy_tracer(t).weights.double() for t in texts}

    def ask(text: str) -> tuple[str, int, dict]:
        r = httpx.post(f"{live_server}/api/explore", json={"model": "toy-gpt", "text": text},
                       timeout=CHILD_S)
        return text, r.status_code, r.json()

    with ThreadPoolExecutor(max_workers=50) as pool:
        answers = list(pool.map(ask, texts))
    assert len(answers) == 50
    for text, status, data in answers:
        assert status == 200, data
        tr = data["traces"][0]
        assert tr["tokens"] == list(text)  # each answer belongs to its own request
        assert float((decode_blob(tr["weights"]) - expected[text]).abs().max()) < 1e-4
    bad = httpx.post(f"{live_server}/api/explore", json={"model": "toy-gpt", "text": ""},
                     timeout=CHILD_S)
    assert bad.status_code == 422
    assert bad.json() == {"error": "text is empty; give at least one word"}


@pytest.mark.browser
def test_served_page_explores_a_typed_text(page, live_server, artifacts_dir):
    page.goto(live_server + "/")
    page.fill("#ax-text", "Attention 注意力 </script>")
    page.click("button[type=submit]")
    page.wait_for_selector(".attnlab-explorer[data-ready]")
    page.click(".ax-thumb[data-layer='1'][data-head='1']")
    assert page.get_attribute(".attnlab-explorer", "data-view") == "head"
    labels = page.eval_on_selector_all(".ax-qtokens text", "els => els.map(e => e.textContent)")
    assert labels[10:13] == ["注", "意", "力"]
    page.screenshot(path=str(artifacts_dir / "explorer-served-head.png"))


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.mark.models
def test_attnlab_serve_process_writes_only_its_cache(tmp_path):
    pytest.importorskip("transformers")
    work, home, cache = tmp_path / "work", tmp_path / "home", tmp_path / "cache"
    for d in (work, home):
        d.mkdir()
    port = free_port()
    env = {**os.environ, "HOME": str(home), "TMPDIR": str(tmp_path / "tmp"),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("ATTNLAB_CACHE", None)
    (tmp_path / "tmp").mkdir()
    # a user's home already holds matplotlib's font list (the CLI imports matplotlib at
    # start-up); give the fresh home one too, so only what the server itself writes counts
    mpl = Path.home() / ".cache" / "matplotlib"
    if mpl.is_dir():
        shutil.copytree(mpl, home / ".cache" / "matplotlib")
    else:
        subprocess.run([sys.executable, "-c", "import matplotlib.font_manager"], env=env,
                       cwd=work, check=True)
    # the compiled kernel this process uses, where the server looks for it in its cache (as
    # a server started again on the same cache finds it): without it the server compiles the
    # kernel (16 s of CPU) on its first request; that a build writes only into its own
    # folder is tested in tests/core/test_kernel.py
    if _kernel.get() is not None:
        built = Path(_kernel.kernel_status()["cache_dir"])
        shutil.copytree(built, Path(pinned_caches(cache)["XDG_CACHE_HOME"]) / "attnlab"
                        / built.name)
    before = _files(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnlab", "serve", "--model", "minilm", "--port", str(port),
         "--max-chars", "200", "--max-memory", "8MiB", "--cache-dir", str(cache), "--quiet"],
        cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + CHILD_S  # loads MiniLM
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode() if proc.stdout else ""
                pytest.fail(f"attnlab serve did not come up: {out[-2000:]}")
            time.sleep(0.3)
        assert httpx.get(base + "/healthz", timeout=CHILD_S).json()["models"] == ["minilm"]
        r = httpx.post(base + "/api/explore", json={"model": "minilm", "text": "The cat sat."},
                       timeout=CHILD_S)
        assert r.status_code == 200
        tr = r.json()["traces"][0]
        assert tr["tokens"][0] == "[CLS]" and (tr["L"], tr["H"]) == (6, 12)
        too_long = httpx.post(base + "/api/explore", json={"model": "minilm", "text": "a" * 201},
                              timeout=CHILD_S)
        assert too_long.status_code == 413 and "limit is 200" in too_long.json()["error"]
        unknown = httpx.post(base + "/api/explore", json={"model": "gpt2", "text": "hi"},
                             timeout=CHILD_S)
        assert unknown.status_code == 404 and "minilm" in unknown.json()["error"]
        # the memory budget, in tokens: just over the limit it states is refused up front
        limits = httpx.get(base + "/api/models", timeout=CHILD_S).json()["limits"]
        fit = limits["minilm"]["max_tokens"]
        assert 5 < fit < 200
        over = httpx.post(base + "/api/explore", json={"model": "minilm", "text": "a " * fit},
                          timeout=CHILD_S)
        assert over.status_code == 413 and "budget of 8.00 MiB" in over.json()["error"]
        rebinding = httpx.get(base + "/healthz", headers={"Host": "attacker.example"},
                               timeout=CHILD_S)
        assert rebinding.status_code == 400 and "not allowed" in rebinding.json()["error"]
    finally:
        proc.terminate()
        proc.wait(timeout=CHILD_S)
    new = _files(tmp_path) - before
    outside = sorted(p for p in new if not p.startswith("cache" + os.sep))
    assert not outside, f"the server wrote outside its cache dir: {outside}"
