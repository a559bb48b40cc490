"""The compiled kernel's cache cannot take a process down: a damaged library (truncated,
empty, altered, or not a library at all) is never loaded — it is rebuilt, or skipped with one
line on stderr — a cache folder that cannot be used is said once on stderr, and
ATTNLAB_NO_KERNEL takes only the usual yes/no words.

Each damaged cache is a copy of this process's good build (built once, or found in the
cache), used by a new process with ATTNLAB_KERNEL_DIR at a tmp folder, attnlab fresh in it
(forked from a process that imported torch alone: tests/forked.py); the fast ones name a
compiler that does not exist, so that a rebuild cannot happen and the skip shows."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from attnlab.core import _kernel
from attnlab.core.functional import kernel_status
from forked import python_c
from limits import CHILD_S, SLOW_CHILD_S

HAVE_COMPILER = shutil.which(os.environ.get("CXX") or "c++") is not None
LIB, MANIFEST = "attnlab_kernel.so", "attnlab_kernel.json"

# attention twice (the line must come once), checked against the formula, then the status
CODE = """
import json, torch
from attnlab.core.functional import kernel_status, scaled_dot_product_attention
q = torch.randn(1, 2, 5, 4, generator=torch.Generator().manual_seed(0))
ref = torch.softmax(q @ q.transpose(-1, -2) / 2, -1) @ q
for _ in range(2):
    out, w = scaled_dot_product_attention(q, q, q, return_weights=True)
    assert (out - ref).abs().max() < 1e-5, "wrong result"
kernel_status()
print(json.dumps(kernel_status()))
"""


@pytest.fixture(scope="module")
def good_build() -> Path:
    """The folder of a good build of the kernel (built here if the cache has none)."""
    _kernel._reset_for_tests()
    if _kernel.get() is None:
        if HAVE_COMPILER and not _kernel._disabled():
            pytest.fail(f"a compiler is here but the kernel is not: {kernel_status()}")
        # justified: these tests damage a copy of a real build; without a compiler there is
        # none (the PyTorch fallback is tested in test_kernel.py and everywhere else)
        pytest.skip(f"no kernel: {kernel_status()['reason']}")
    return Path(kernel_status()["cache_dir"])


def _cache(tmp_path: Path, good: Path) -> Path:
    """A copy of the good build in a fresh cache root; returns the copy's folder."""
    copy = tmp_path / "cache" / good.name
    shutil.copytree(good, copy)
    return copy


def _run(cache_root: Path | str, compiler: str | None = "no-such-compiler",
         timeout: float = CHILD_S) -> tuple[dict, list[str]]:
    """CODE in a new process with ATTNLAB_KERNEL_DIR=cache_root: (status, stderr lines).
    It must exit 0 whatever the cache holds."""
    env = dict(os.environ, ATTNLAB_KERNEL_DIR=str(cache_root))
    env.pop(_kernel.ENV_DISABLE, None)
    if compiler is not None:
        env["CXX"] = compiler
    r = python_c(CODE, env=env, timeout=timeout)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}"
    return json.loads(r.stdout), [line for line in r.stderr.splitlines() if line.strip()]


def _one_line(lines: list[str], *parts: str) -> str:
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("attnlab: "), line
    for part in parts:
        assert part in line, (part, line)
    return line


def test_the_build_writes_its_size_and_hash_beside_the_library(good_build):
    manifest = json.loads((good_build / MANIFEST).read_text())
    data = (good_build / LIB).read_bytes()
    assert manifest["size"] == len(data) > 0
    assert manifest["sha256"] == hashlib.sha256(data).hexdigest()
    # the build's private folder is gone: only the final name is left in the cache root
    # (another process's build may be under way beside it: only a finished one's counts)
    assert not [p for p in good_build.parent.iterdir() if ".build-" in p.name
                and not _running(int(p.name.rsplit("-", 1)[1]))]


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a build that may still be writing its folder)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # (alive, another user's)
        return True
    return pid != os.getpid()


def test_an_intact_copy_loads_from_the_cache_silently(tmp_path, good_build):
    _cache(tmp_path, good_build)
    status, lines = _run(tmp_path / "cache")
    assert status["available"] and status["source"] == "cache" and lines == []


@pytest.mark.parametrize("damage", ["truncated", "empty", "one-byte-changed",
                                    "no-manifest", "manifest-not-json"])
def test_a_damaged_library_is_skipped_with_one_line(tmp_path, good_build, damage):
    """Without a compiler it cannot be rebuilt: the PyTorch path, and one line saying so."""
    copy = _cache(tmp_path, good_build)
    lib = copy / LIB
    data = lib.read_bytes()
    if damage == "truncated":  # a killed build or a full disk: this one crashed on SIGBUS
        lib.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        lib.write_bytes(b"")
    elif damage == "one-byte-changed":
        mid = len(data) // 2
        lib.write_bytes(data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1:])
    elif damage == "no-manifest":  # e.g. a cache written before manifests existed
        (copy / MANIFEST).unlink(missing_ok=True)
    else:
        (copy / MANIFEST).write_text("{\"size\": ")
    status, lines = _run(tmp_path / "cache")
    assert not status["available"] and status["source"] is None
    line = _one_line(lines, str(lib), "no-such-compiler", "delete")
    assert status["reason"] in line


def test_a_library_that_passes_the_check_but_cannot_load_says_so_once(tmp_path, good_build):
    copy = _cache(tmp_path, good_build)
    junk = b"not a shared library\n" * 500
    (copy / LIB).write_bytes(junk)
    (copy / MANIFEST).write_text(json.dumps(
        {"size": len(junk), "sha256": hashlib.sha256(junk).hexdigest()}))
    status, lines = _run(tmp_path / "cache", compiler=None)
    assert not status["available"]
    _one_line(lines, str(copy / LIB), "cannot load", "delete")


def test_a_file_as_the_cache_folder_says_so_once(tmp_path, good_build):
    afile = tmp_path / "a-file"
    afile.write_text("x")
    status, lines = _run(afile, compiler=None)
    assert not status["available"]
    _one_line(lines, f"ATTNLAB_KERNEL_DIR={afile}", "not a folder")
    status, lines = _run(afile / "sub", compiler=None)  # a folder that cannot be created
    assert not status["available"]
    _one_line(lines, f"ATTNLAB_KERNEL_DIR={afile / 'sub'}", "cannot be created")
    status, lines = _run(tmp_path / "cache" / "new", compiler="no-such-compiler")
    assert lines == [] and "no-such-compiler" in status["reason"]  # a good folder: quiet


UNWRITABLE = """
import os, sys
sys.path.insert(0, {tests!r})
from unprivileged import run_unprivileged
import torch
from attnlab.core import _kernel
from attnlab.core.functional import kernel_status, scaled_dot_product_attention
q = torch.randn(1, 1, 3, 4)
os.environ[_kernel.ENV_DISABLE] = "1"
scaled_dot_product_attention(q, q, q, return_weights=True)  # import what it needs first
del os.environ[_kernel.ENV_DISABLE]
_kernel._reset_for_tests()

def attend():
    scaled_dot_product_attention(q, q, q, return_weights=True)
    scaled_dot_product_attention(q, q, q, return_weights=True)
    return int(kernel_status()["available"])

rc, err = run_unprivileged(attend, {folder!r})
print(rc)
print(err, end="", file=sys.stderr)
"""


@pytest.fixture
def open_folder():
    """A fresh folder that user nobody can enter (tmp_path's parents are root's alone)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="attnlab-ro-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_an_unwritable_cache_folder_says_so_once(open_folder, good_build):
    folder = open_folder
    tests = str(Path(__file__).resolve().parent.parent)
    # one thread: a forked child must not wait on the parent's OpenMP pool
    env = dict(os.environ, ATTNLAB_KERNEL_DIR=str(folder), OMP_NUM_THREADS="1")
    env.pop(_kernel.ENV_DISABLE, None)
    r = python_c(UNWRITABLE.format(tests=tests, folder=str(folder)), env=env, timeout=CHILD_S)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "0"  # no kernel, and the result came
    _one_line([x for x in r.stderr.splitlines() if x.strip()],
              f"ATTNLAB_KERNEL_DIR={folder}", "not writable")


# the race two processes run on a cold cache: each builds and loads its own copy from its
# private folder, one copy takes the cache's folder, and the other process then finds that
# copy (the same build, at another path) when it looks again; here, the second path is a
# second cache root
SWAPPED = """
import json, os, sys, torch
from attnlab.core import _kernel
from attnlab.core.functional import kernel_status, scaled_dot_product_attention
q = torch.randn(1, 2, 5, 4, generator=torch.Generator().manual_seed(0))
ref = torch.softmax(q @ q.transpose(-1, -2) / 2, -1) @ q
assert _kernel.get() is not None, kernel_status()
os.environ["ATTNLAB_KERNEL_DIR"] = sys.argv[1]
_kernel._reset_for_tests()
out, w = scaled_dot_product_attention(q, q, q, return_weights=True)
assert (out - ref).abs().max() < 1e-5, "wrong result"
print(json.dumps(kernel_status()))
"""


def test_another_copy_of_the_loaded_build_is_not_loaded_again(tmp_path, good_build):
    """A library registers its operators once per process: loading a second file of the same
    build aborted the process (SIGABRT) before; the loaded one is used."""
    first = _cache(tmp_path / "one", good_build)
    second = _cache(tmp_path / "two", good_build)
    env = dict(os.environ, ATTNLAB_KERNEL_DIR=str(first.parent), CXX="no-such-compiler")
    env.pop(_kernel.ENV_DISABLE, None)
    r = python_c(SWAPPED, str(second.parent), env=env, timeout=CHILD_S)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}"
    status = json.loads(r.stdout)
    assert status["available"] and status["source"] == "cache", status
    assert status["cache_dir"] == str(second), status


@pytest.mark.slow
# justified: a rebuild compiles the kernel (about ten seconds); the skip without a compiler is
# tested above
@pytest.mark.skipif(not HAVE_COMPILER, reason="no C++ compiler")
def test_a_damaged_library_is_rebuilt_when_it_can_be(tmp_path, good_build):
    """One damage (a truncated library) is rebuilt: every kind of damage is caught by the
    same check of the manifest (each kind above, without a compiler), and what follows it
    is one path, so a second compile would test nothing more."""
    copy = _cache(tmp_path, good_build)
    data = (copy / LIB).read_bytes()
    (copy / LIB).write_bytes(data[: len(data) // 2])
    status, lines = _run(tmp_path / "cache", compiler=None, timeout=SLOW_CHILD_S)
    assert status["available"] and status["source"] == "built" and lines == []
    rebuilt = (copy / LIB).read_bytes()
    manifest = json.loads((copy / MANIFEST).read_text())
    assert manifest == {"size": len(rebuilt), "sha256": hashlib.sha256(rebuilt).hexdigest()}
    assert sorted(p.name for p in copy.parent.iterdir()) == [copy.name]  # nothing left over
    status, lines = _run(tmp_path / "cache", compiler=None)
    assert status["source"] == "cache" and lines == []


TRUE, FALSE = ["1", "true", "TRUE", "yes", "Yes", "on", " on "], ["0", "false", "False",
                                                                     "no", "NO", "off", ""]


@pytest.fixture
def fresh_state(monkeypatch, good_build):
    _kernel._reset_for_tests()
    yield monkeypatch
    monkeypatch.delenv(_kernel.ENV_DISABLE, raising=False)
    _kernel._reset_for_tests()
    assert _kernel.get() is not None


@pytest.mark.parametrize("value", TRUE)
def test_no_kernel_takes_the_words_for_yes(fresh_state, value):
    fresh_state.setenv(_kernel.ENV_DISABLE, value)
    assert _kernel._disabled() and _kernel.get() is None
    assert _kernel.ENV_DISABLE in kernel_status()["reason"]


@pytest.mark.parametrize("value", FALSE)
def test_no_kernel_takes_the_words_for_no(fresh_state, value):
    fresh_state.setenv(_kernel.ENV_DISABLE, value)
    assert not _kernel._disabled() and _kernel.get() is not None


@pytest.mark.parametrize("value", ["2", "maybe", "disable", "y e s"])
def test_no_kernel_refuses_other_words(fresh_state, value):
    import torch

    import attnlab

    fresh_state.setenv(_kernel.ENV_DISABLE, value)
    pattern = rf"ATTNLAB_NO_KERNEL must be .*1/true/yes/on.*0/false/no/off.*got '{value}'"
    for call in (_kernel.get, kernel_status, _kernel._disabled):
        with pytest.raises(ValueError, match=pattern):
            call()
    q = torch.randn(1, 1, 3, 4)
    with pytest.raises(ValueError, match=pattern):
        attnlab.scaled_dot_product_attention(q, q, q, return_weights=True)
