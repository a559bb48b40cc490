"""The package that installs anywhere: `python -m build` makes an sdist and a wheel (built from
the sdist), `twine check` passes, and the wheel, installed into a fresh virtual environment
(torch first and alone, as the Makefile does), runs `attnlab verify`, `attnlab train` and
`attnlab trace` outside the source tree."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import resource
import subprocess
import sys
import time
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from limits import CHILD_S, SLOW_CHILD_S

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src/attnlab"
TORCH = "torch==2.13.0"  # the CPU build the Makefile installs first (pip finds it in its links)

pytestmark = pytest.mark.slow


def run(*cmd, cwd: Path, env: dict[str, str] | None = None,
        timeout: float = SLOW_CHILD_S) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", **(env or {})}
    result = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=timeout)
    assert result.returncode == 0, f"{cmd}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def _require(module: str) -> None:
    if importlib.util.find_spec(module) is not None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{module} is not installed; `make test` installs the dev extra")
    # justified: outside CI only, a checkout without the dev extra runs the rest
    pytest.skip(f"{module} is not installed (pip install -e '.[dev]')")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _local_torch_wheel() -> Path | None:
    """torch 2.13.0's wheel in a folder of pip's find-links (its PIP_FIND_LINKS, else its
    configuration), where the Makefile's set-up takes it from; None where there is none."""
    links = os.environ.get("PIP_FIND_LINKS") or subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.find-links"],
        capture_output=True, text=True, timeout=CHILD_S).stdout
    for folder in links.split():
        tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
        wheels = sorted(Path(folder).glob(f"torch-2.13.0[+-]*-{tag}-{tag}-*.whl"))
        if wheels:
            return wheels[0]
    return None


def _version() -> str:
    text = (ROOT / "pyproject.toml").read_text()
    return re.search(r'^version = "([^"]+)"', text, re.MULTILINE).group(1)


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """`python -m build` into a temporary folder: the sdist, then the wheel from the sdist."""
    _require("build")
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT, cwd=out)
    return out


def _wheel(dist: Path) -> Path:
    (wheel,) = dist.glob("attnlab-*.whl")
    return wheel


def test_build_makes_an_sdist_and_a_wheel_that_twine_accepts(dist):
    version = _version()
    assert sorted(p.name for p in dist.iterdir()) == [
        f"attnlab-{version}-py3-none-any.whl", f"attnlab-{version}.tar.gz"]
    _require("twine")
    result = run(sys.executable, "-m", "twine", "check", "--strict", *dist.iterdir(), cwd=dist)
    assert result.stdout.count("PASSED") == 2
    print(f"\nwheel: {_wheel(dist).stat().st_size / 1e3:.0f} kB, "
          f"sdist: {(dist / f'attnlab-{version}.tar.gz').stat().st_size / 1e3:.0f} kB")


def test_wheel_holds_every_file_of_the_package(dist):
    """Every file under src/attnlab (modules, static JS/CSS, templates, listings, py.typed)
    is in the wheel, and nothing from outside the package is."""
    names = set(zipfile.ZipFile(_wheel(dist)).namelist())
    source = {p.relative_to(SRC.parent).as_posix() for p in SRC.rglob("*")
              if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    assert source - names == set()
    assert {n.split("/")[0] for n in names} == {"attnlab", f"attnlab-{_version()}.dist-info"}
    assert any(n.startswith("attnlab/viz/static/") and n.endswith(".js") for n in names)
    assert any(n.startswith("attnlab/experiments/listings/") for n in names)


def _metadata(dist: Path):
    with zipfile.ZipFile(_wheel(dist)) as z:
        text = z.read(f"attnlab-{_version()}.dist-info/METADATA").decode()
    return Parser().parsestr(text)


def _requires(meta) -> dict[str, set[str]]:
    """Requirement names per extra ("" for the base), as the wheel's metadata states them."""
    out: dict[str, set[str]] = {}
    for req in meta.get_all("Requires-Dist"):
        name = re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower()
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", req)
        out.setdefault(extra.group(1) if extra else "", set()).add(name)
    return out


def test_wheel_metadata_declares_the_extras(dist):
    meta = _metadata(dist)
    assert {"models", "serve", "docs", "dev"} <= set(meta.get_all("Provides-Extra"))
    req = _requires(meta)
    assert req[""] == {"torch", "numpy", "safetensors", "matplotlib", "rich", "latex2mathml"}
    assert {"transformers", "tokenizers", "gguf"} <= req["models"]
    assert req["serve"] == {"fastapi", "uvicorn"}
    assert {"mkdocs", "mkdocs-material", "mkdocstrings", "mkdocs-jupyter"} <= req["docs"]
    assert {"build", "twine", "pytest", "attnlab"} <= req["dev"]
    assert not any("torch" in names for extra, names in req.items() if extra)  # torch: base only
    assert meta["Requires-Python"] == ">=3.10" and meta["Version"] == _version()
    assert "make report" in meta.get_payload()  # the README is the long description


def test_wheel_installs_and_runs_outside_the_source_tree(dist, tmp_path):
    times: dict[str, tuple[float, float]] = {}  # step: (wall s, CPU s of its processes)

    def step(name, *cmd):
        t0, c0 = time.perf_counter(), _children_cpu()
        result = run(*cmd, cwd=tmp_path, env=env)
        times[name] = (time.perf_counter() - t0, _children_cpu() - c0)
        return result

    # the optional compiled kernel would build on first use (about a minute); its source
    # being in the wheel is checked above, and attnlab runs the same without it. While pip
    # installs, no interpreter writes bytecode of its own (the new environment's python
    # imports setuptools' _distutils_hack at start-up): a .pyc found after it is pip's
    env = {"ATTNLAB_NO_KERNEL": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    step("venv", sys.executable, "-m", "venv", "--without-pip", tmp_path / "venv")
    bindir = tmp_path / "venv/bin"
    # this environment's pip installs into the new one; --no-compile: byte-compiling all of
    # torch's modules costs more than compiling, on first import, the few that attnlab uses
    pip = [sys.executable, "-m", "pip", "--python", bindir / "python", "install", "--quiet",
           "--no-compile"]
    # first and alone: the CPU build, no CUDA (as the Makefile does: where pip's find-links
    # hold its wheel, uv unpacks that file, 3 s against pip's 7.5; its dependencies come
    # with the wheel's below)
    uv = [Path(sys.executable).parent / "uv", "pip", "install", "--quiet", "--python",
          bindir / "python"]
    local = _local_torch_wheel()
    if local is not None:
        step("torch", *uv, "--no-deps", local)
    else:
        step("torch", *pip, TORCH)
    # the wheel and its dependencies as the Makefile installs attnlab's: with uv (which
    # compiles nothing unless asked), beside the torch installed above (1 s against pip's 9)
    step("wheel", *uv, _wheel(dist))
    # what keeps the install cheap, whatever the machine's load: nothing byte-compiled
    # (pip's --no-compile, uv's default) and the CPU build of torch, without CUDA's libraries
    (site,) = (tmp_path / "venv/lib").glob("python*/site-packages")
    compiled = [p.relative_to(site).as_posix() for p in site.rglob("*.pyc")]
    assert not compiled, f"{len(compiled)} modules byte-compiled: {compiled[:5]}"
    dists = sorted(p.name.split("-")[0].lower() for p in site.glob("*.dist-info"))
    assert "torch" in dists and not [d for d in dists if d.startswith(("nvidia", "triton"))]
    attnlab = bindir / "attnlab"
    # the commands cache the bytecode of what they import, as Python does by default (the
    # environment's PYTHONDONTWRITEBYTECODE, set on CI, had each of them compile torch's and
    # attnlab's modules again: the 4 commands took 17 s instead of 12)
    env = {**env, "PYTHONDONTWRITEBYTECODE": ""}

    where = step("import", bindir / "python", "-c",
                 "import attnlab, torch; from attnlab.viz.explorer import static_asset; "
                 "print(attnlab.__file__, torch.__version__, len(static_asset('explorer.js')))"
                 ).stdout.split()
    assert Path(where[0]).is_relative_to(tmp_path / "venv") and where[1].startswith("2.13.0")
    assert int(where[2]) > 1000  # the explorer's JS, read from the installed package
    out = step("verify", attnlab, "verify", "--only", "pe-relative-position", "--quiet",
               "--json").stdout
    (result,) = json.loads(out)
    assert result["name"] == "pe-relative-position" and result["passed"] is True
    step("train", attnlab, "train", "--task", "induction", "--out", tmp_path / "run",
         "--steps", "4", "--layers", "1", "--heads", "2", "--dim", "16", "--log-every", "2",
         "--quiet")
    out = step("trace", attnlab, "trace", "--model", tmp_path / "run", "--text",
               "1 2 3 4 1 2 3", "--out", tmp_path / "t.safetensors", "--quiet", "--json").stdout
    assert json.loads(out)["tokens"] == 8 and (tmp_path / "t.safetensors").stat().st_size > 0
    wall, cpu = (sum(t[i] for t in times.values()) for i in (0, 1))
    print("\nwheel test, wall (CPU) s: "
          + ", ".join(f"{k} {w:.0f} ({c:.0f})" for k, (w, c) in times.items())
          + f"; {wall:.0f} s in all ({cpu:.0f} s CPU)")
