"""Shared fixtures. Browser tests drive Debian's chromium through Playwright's Python API."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from limits import PAGE_MS

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

#: The threads torch runs on in a pytest-xdist worker. `make test` runs two workers on the
#: machine's cores: each on one thread (and what it starts, notebook kernels and command
#: lines, inherits it), so the two do not fight over the same cores (measured on 2 cores:
#: 8-19 % less CPU for the same tests). tests/core runs its kernels on two threads, so that
#: the compiled kernel's split of the rows between threads is tested too (`two_threads`).
WORKER_THREADS = 1
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", str(WORKER_THREADS))
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_collection_finish(session):
    """In a pytest-xdist worker, what collecting left (every test module, torch's and
    transformers' modules, the parametrized ids) is frozen (``gc.freeze``): it lives as long
    as the worker, and each full collection of cycles after this one looks only at what
    the tests make (a worker's full collections walked its half a million objects each time,
    15 to 17 times a run). The tests' own garbage is collected as before."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import gc

        gc.collect()
        gc.freeze()


def pytest_unconfigure(config):
    """A pytest-xdist worker ends right after this: its objects (every model, trace and
    result its tests kept, torch's and transformers' modules) are frozen (``gc.freeze``),
    so that the interpreter's exit does not walk them all looking for cycles, on both
    cores at the suite's end (a process that ran three of the suite's files spent 1.7 s
    of its exit on that walk, 0.2 s frozen). Only in a worker: a process that goes on
    after pytest (``pytest.main`` called in it) keeps collecting its cycles."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import gc

        gc.freeze()


CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """Where tests leave screenshots and other artifacts (git-ignored)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def browser():
    """A headless Debian chromium driven by Playwright (no browser download)."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; .ci/run installs it with apt-get")
        # Outside CI only: a developer without Debian's chromium can still run the rest of
        # the suite. Under CI (CI=true, set by the runner) a missing browser fails above.
        # justified: the browser tests need Debian's chromium; .ci/run installs it
        pytest.skip("chromium not installed (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True,
                              timeout=PAGE_MS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser):
    """A fresh page that fails the test on console errors or any non-local request; each
    of its waits (load, selector, click) gives up only after tests/limits.py's PAGE_MS, so
    a page call needs no ``timeout=`` of its own."""
    context = browser.new_context()
    context.set_default_timeout(PAGE_MS)
    context.set_default_navigation_timeout(PAGE_MS)
    pg = context.new_page()
    errors: list[str] = []
    outside: list[str] = []

    def on_console(msg):
        if msg.type == "error":
            errors.append(msg.text)

    def on_route(route):
        url = route.request.url
        local = url.startswith(("file:", "data:", "blob:", "about:")) or url.startswith(
            ("http://127.0.0.1", "http://localhost", "http://[::1]")
        )
        if local:
            route.continue_()
        else:
            outside.append(url)
            route.abort()

    pg.on("console", on_console)
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    context.route("**/*", on_route)
    pg.console_errors = errors  # type: ignore[attr-defined]
    pg.outside_requests = outside  # type: ignore[attr-defined]
    yield pg
    context.close()
    assert not outside, f"the page tried to reach the network: {outside}"
    assert not errors, f"console errors: {errors}"



@pytest.fixture
def two_threads():
    """Torch on two threads for the test (the compiled kernel's split of rows between
    threads is then exercised, whatever the worker's own count)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)
