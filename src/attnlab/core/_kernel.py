"""attnlab's compiled CPU attention kernel: built on first use, cached, never required.

The explicit path (weights returned) runs ``src/attnlab/core/_cpp/attention.cpp`` when it
can: one C++ translation unit that computes each tile's scores with one GEMM into a
per-thread buffer, masks them, exponentiates them vectorised, writes the weights once
(streaming stores) and multiplies them by V while they are still in cache
(:mod:`attnlab.core.explicit` says when it is used). The first use in a fresh cache
compiles it with ``torch.utils.cpp_extension`` (g++ and ninja; about ten seconds on a
recent x86-64 core: the source includes only the operators it uses), into
``$XDG_CACHE_HOME/attnlab`` (``~/.cache/attnlab`` by default; the ``ATTNLAB_KERNEL_DIR``
environment variable overrides it) under a name keyed by the source's hash, torch's
version and the compiler flags; later processes load the cached library in milliseconds.

No compiler, a failed build, a cache that cannot be written, or ``ATTNLAB_NO_KERNEL=1``
(also ``true``, ``yes``, ``on``; ``0``, ``false``, ``no``, ``off`` or empty keep the kernel;
any other value is a ValueError): attnlab takes its pure-PyTorch path, with the same
results, and :func:`kernel_status` says why.

The cache cannot take a process down: the build writes the library's size and sha256
beside it (``attnlab_kernel.json``, written after the library is complete, in the build's
private folder, which gets the final name only when whole), and a library is loaded only
when it matches them. One that does not (a killed build, a full disk, a cache from before
the manifest) is rebuilt, or, when it cannot be, skipped with one line on stderr; so are a
library that will not load and a cache folder that is a file or cannot be written (each said
once per process, with what to do).

Flags: ``-O3`` plus the widest vector ISA that torch itself uses on this CPU
(``torch.backends.cpu.get_cpu_capability()``: AVX512, AVX2, or none) — the ISA of the
machine that runs it, checked at run time, never ``-march=native``.

>>> status = kernel_status()
>>> sorted(status)
['available', 'build_seconds', 'cache_dir', 'capability', 'flags', 'reason', 'source']
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import torch

from attnlab._errors import Error

__all__ = ["KernelStatus", "kernel_status", "release_memory", "ENV_DISABLE", "ENV_DIR"]

#: Set to 1/true/yes/on to never build or load the kernel (0/false/no/off/empty: use it).
ENV_DISABLE = "ATTNLAB_NO_KERNEL"
#: Where the built kernel is cached (default ``$XDG_CACHE_HOME/attnlab``).
ENV_DIR = "ATTNLAB_KERNEL_DIR"

_SOURCE = Path(__file__).parent / "_cpp" / "attention.cpp"
_NAME = "attnlab_kernel"
_MANIFEST = f"{_NAME}.json"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


class _State(TypedDict):
    """What this process has tried of the kernel, and what came of it."""

    tried: bool  # whether get() has built or loaded it (or failed to)
    ops: Any  # torch.ops.attnlab_kernel once loaded, else None
    reason: str | None  # why it is unavailable
    build_seconds: float | None  # this process's build
    cache_dir: str | None  # the folder of the built kernel
    flags: list[str] | None  # the compiler flags
    source: str | None  # "built" or "cache"


class KernelStatus(TypedDict):
    """Where the compiled kernel stands (:func:`kernel_status`)."""

    available: bool
    reason: str | None  # why not (None when available)
    capability: str | None  # the vector ISA it was compiled for
    build_seconds: float | None  # this process's build (None: loaded from the cache, or none)
    cache_dir: str | None
    flags: list[str] | None
    source: str | None  # "built", "cache" or None


_lock = threading.Lock()
_state: _State = {"tried": False, "ops": None, "reason": None, "build_seconds": None,
                  "cache_dir": None, "flags": None, "source": None}


_said: set[str] = set()  # the stderr lines this process has written (each once)
#: The cache key (folder name) of the library this process has loaded, if any. A library
#: registers its operators once per process: a second copy of the same key (another
#: process's build that won the race to the cache, read after this process loaded its own)
#: would register them again, which aborts the process; the loaded one is used instead.
_loaded_key: list[str] = []


def _disabled() -> bool:
    raw = os.environ.get(ENV_DISABLE, "")
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{ENV_DISABLE} must be one of 1/true/yes/on (no kernel) or "
                     f"0/false/no/off/empty (use the kernel), got {raw!r}")


def _say(line: str) -> None:
    """One line on stderr, once per process."""
    if line not in _said:
        _said.add(line)
        print(f"attnlab: {line}", file=sys.stderr, flush=True)


def _cache_root() -> Path:
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "attnlab"


def _root_name(root: Path) -> str:
    """How a message names the cache root: by the variable when it was set."""
    if os.environ.get(ENV_DIR):
        return f"{ENV_DIR}={root}"
    return f"the kernel cache {root} (set {ENV_DIR} to use another folder)"


def _unusable_root(root: Path) -> str | None:
    """Why a build cannot be written under ``root`` (None if it can)."""
    where = _root_name(root)
    fix = f"point {ENV_DIR} at a writable folder, or unset it"
    try:
        if root.exists() and not root.is_dir():
            return f"{where} is not a folder (it is a file); {fix}"
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"{where} cannot be created or entered ({exc.strerror or exc}); {fix}"
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=root)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"{where} is not writable ({exc.strerror or exc}); {fix}"
    return None


def _isa_flags() -> list[str]:
    """The vector ISA torch chose for this CPU at run time, as compiler flags."""
    cap = torch.backends.cpu.get_cpu_capability()
    if cap.startswith("AVX512"):
        return ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-mavx2",
                "-DCPU_CAPABILITY_AVX512", "-DCPU_CAPABILITY=AVX512"]
    if cap == "AVX2":
        return ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2", "-DCPU_CAPABILITY=AVX2"]
    return ["-DCPU_CAPABILITY=DEFAULT"]


def _flags() -> list[str]:
    return ["-O3", "-fopenmp", *_isa_flags()]


def _key(source: bytes, flags: list[str]) -> str:
    h = hashlib.sha256(source)
    for part in (torch.__version__, sys.version.split()[0], *flags):
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:16]


def _library(directory: Path) -> Path:
    return directory / f"{_NAME}.so"


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _write_manifest(directory: Path) -> None:
    """The library's size and sha256 beside it, written atomically (a temporary name, then
    renamed), after the library is complete."""
    lib = _library(directory)
    data = json.dumps({"size": lib.stat().st_size, "sha256": _digest(lib)})
    tmp = directory / f".{_MANIFEST}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / _MANIFEST)


def _check(directory: Path) -> str | None:
    """Why the library in ``directory`` must not be loaded (None: it matches its manifest).
    A truncated library is never mapped: loading one kills the process with SIGBUS."""
    lib, manifest = _library(directory), directory / _MANIFEST
    try:
        want = json.loads(manifest.read_text(encoding="utf-8"))
        size, digest = int(want["size"]), str(want["sha256"])
    except FileNotFoundError:
        return f"it has no manifest ({manifest.name})"
    except (OSError, ValueError, TypeError, KeyError) as exc:
        return f"its manifest {manifest.name} is unreadable ({type(exc).__name__})"
    try:
        have = lib.stat().st_size
        if have != size:
            return f"it is {have} bytes, its manifest says {size}"
        if _digest(lib) != digest:
            return "its sha256 differs from its manifest's"
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    return None


def _build(final: Path, flags: list[str]) -> None:
    """Compile into a private directory, load it, write the manifest, then move the
    directory into place atomically (a process that finds ``final`` finds a whole library
    and its manifest). A ``final`` that holds a library failing its check is replaced."""
    from torch.utils.cpp_extension import load

    work = final.with_name(f"{final.name}.build-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        load(name=_NAME, sources=[str(_SOURCE)], extra_cflags=flags,
             extra_ldflags=["-fopenmp"], build_directory=str(work), is_python_module=False,
             verbose=False)
        _write_manifest(work)
        try:
            os.replace(work, final)
        except OSError:  # final exists: another process's good copy, or the damaged one
            if final.is_dir() and _check(final) is None:
                return
            aside = final.with_name(f"{final.name}.bad-{os.getpid()}")
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(final, aside)
            try:
                os.replace(work, final)
            finally:
                shutil.rmtree(aside, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _no_build_reason() -> str | None:
    """Why this machine cannot compile the kernel (None if it can)."""
    compiler = os.environ.get("CXX") or "c++"
    if shutil.which(compiler) is None:
        return f"no C++ compiler ({compiler!r} not on PATH)"
    if shutil.which("ninja") is None:
        try:
            import ninja  # noqa: F401  (the pip package puts one on sys.path's bin)
        except ImportError:
            return "ninja not found (torch.utils.cpp_extension needs it)"
    return None


def _load() -> None:
    if _disabled():
        _state["reason"] = f"disabled by {ENV_DISABLE}={os.environ[ENV_DISABLE]}"
        return
    if not _SOURCE.is_file():
        _state["reason"] = f"kernel source missing: {_SOURCE}"
        return
    flags = _flags()
    _state["flags"] = flags
    source = _SOURCE.read_bytes()
    root = _cache_root()
    final = root / f"kernel-{_key(source, flags)}"
    _state["cache_dir"] = str(final)
    lib = _library(final)
    damaged = None
    try:
        present = lib.exists()
    except OSError:  # a root that cannot be entered: _unusable_root says so below
        present = False
    if present:
        damaged = _check(final)
        if damaged is None:
            _load_cached(final, lib)
            return
    bad_root = _unusable_root(root)
    if bad_root is not None:
        _state["reason"] = bad_root
        _say(f"{bad_root}; using the PyTorch path")
        return
    no_build = _no_build_reason()
    if no_build is not None:
        _state["reason"] = no_build
        if damaged is not None:
            _state["reason"] = (f"the cached kernel {lib} fails its check ({damaged}) and "
                                f"cannot be rebuilt: {no_build}")
            _say(f"{_state['reason']}; delete the folder {final} (it is rebuilt where a "
                 f"compiler is); using the PyTorch path")
        return
    with _one_build_at_a_time(root):
        if lib.exists() and _check(final) is None:  # built by the process this one waited for
            _load_cached(final, lib)
            return
        t0 = time.perf_counter()
        _build(final, flags)  # (loads the library it builds)
        _loaded_key.append(final.name)
    _state["build_seconds"] = round(time.perf_counter() - t0, 1)
    _state["source"] = "built"
    _register_flops(torch.ops.attnlab_kernel)
    _state["ops"] = torch.ops.attnlab_kernel


def _load_cached(final: Path, lib: Path) -> None:
    """Load the cache's library (checked), or say why it will not load."""
    try:
        if final.name not in _loaded_key:
            torch.ops.load_library(str(lib))
            _loaded_key.append(final.name)
    except Exception as exc:  # noqa: BLE001  (a library that will not load)
        msg = str(exc).strip().splitlines()
        _state["reason"] = (f"the cached kernel {lib} cannot load "
                            f"({type(exc).__name__}: {msg[-1] if msg else ''})")[:500]
        _say(f"cannot load the cached kernel {lib} ({type(exc).__name__}); delete "
             f"the folder {final} to rebuild it; using the PyTorch path")
        return
    _state["source"] = "cache"
    _register_flops(torch.ops.attnlab_kernel)
    _state["ops"] = torch.ops.attnlab_kernel


@contextlib.contextmanager
def _one_build_at_a_time(root: Path) -> Iterator[None]:
    """Hold the cache root's lock (``flock`` on the folder: nothing is written, and it is
    released when the process ends, however it ends): processes that start on a cold cache
    together (pytest's workers, ``torchrun``'s ranks) compile once, the others wait and load
    that build."""
    try:
        import fcntl

        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except (ImportError, OSError):  # (no flock here: each process builds, as before)
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (releases the lock)


def _register_flops(ops: Any) -> None:
    """Tell ``torch.utils.flop_counter`` what the kernel's ops compute, as it counts torch's
    own attention: every (query, key) pair, masked or not — 2·d for the score and 2·dv for
    its share of the output forward, twice that backward (dS·K, dSᵀ·Q, Pᵀ·dO, dO·Vᵀ)."""
    from torch.utils.flop_counter import flop_registry, register_flop_formula

    def pairs(q_shape: Any, k_shape: Any) -> int:  # q (..., Lq, d), k (..., Lk, d)
        return math.prod(q_shape[:-1]) * k_shape[-2]

    if ops.forward in flop_registry:  # a second load in one process (tests reset the state)
        return

    @register_flop_formula(ops.forward)
    def _forward(q_shape, k_shape, v_shape, *args, out_shape=None, **kwargs) -> int:
        return 2 * pairs(q_shape, k_shape) * (q_shape[-1] + v_shape[-1])

    @register_flop_formula(ops.backward)
    def _backward(q_shape, k_shape, v_shape, *args, out_shape=None, **kwargs) -> int:
        return 4 * pairs(q_shape, k_shape) * (q_shape[-1] + v_shape[-1])


def get() -> Any | None:
    """``torch.ops.attnlab_kernel`` (building it on first use), or None when unavailable."""
    if _state["tried"]:
        return _state["ops"]
    _disabled()  # a value it does not take raises here, not into the fallback's reason
    with _lock:
        if not _state["tried"]:
            try:
                _load()
            except Exception as exc:  # noqa: BLE001  (any failure means: use PyTorch)
                msg = str(exc).strip().splitlines()
                _state["reason"] = (f"build or load failed: {type(exc).__name__}: "
                                    f"{msg[-1] if msg else ''}")[:500]
                _state["ops"] = None
            _state["tried"] = True
    return _state["ops"]


def loaded() -> Any:
    """:func:`get`'s ops for a caller that has checked they are there (``_why_not_kernel``
    said so); raises :class:`attnlab.Error` if they are not."""
    ops = get()
    if ops is None:
        raise Error(f"the compiled attention kernel is unavailable: {_state['reason']}")
    return ops


def kernel_status(build: bool = False) -> KernelStatus:
    """Where the compiled kernel stands: ``available`` (bool), ``reason`` (why not, or
    None), ``capability`` (the vector ISA it was compiled for), ``build_seconds`` (this
    process's build, None if it was loaded from the cache or not built), ``cache_dir``,
    ``flags`` and ``source`` (``"built"``, ``"cache"`` or None).

    It does not build anything unless ``build=True`` (then it is :func:`get`'s first use).
    """
    if build:
        get()
    ops = _state["ops"]
    reason = _state["reason"]
    if not _state["tried"]:
        reason = f"disabled by {ENV_DISABLE}" if _disabled() else "not built or loaded yet"
    return {"available": ops is not None, "reason": None if ops is not None else reason,
            "capability": ops.capability() if ops is not None else None,
            "build_seconds": _state["build_seconds"], "cache_dir": _state["cache_dir"],
            "flags": _state["flags"], "source": _state["source"]}


def release_memory() -> int:
    """Unmap the freed weights buffer the kernel keeps for reuse; returns its bytes (0 if
    none, or if the kernel is not loaded).

    The kernel keeps one such buffer, the most recently freed weights of at least 8 MiB,
    so that the next call of about that size writes into memory that is already mapped
    instead of having the OS zero fresh pages (as long as the rest of the kernel at
    N = 4096). It is marked ``MADV_FREE``: the OS takes its pages back under pressure.
    """
    ops = _state["ops"]
    return int(ops.release_memory()) if ops is not None else 0


def _reset_for_tests() -> None:
    """Forget what was tried (the loaded library stays loaded)."""
    with _lock:
        _state.update({"tried": False, "ops": None, "reason": None, "build_seconds": None,
                       "cache_dir": None, "flags": None, "source": None})
