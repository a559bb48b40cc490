"""attnlab's compiled CPU attention kernel: built on first use, cached, never required.

The explicit path (weights returned) runs ``src/attnlab/core/_cpp/attention.cpp`` when it
can: one C++ translation unit that computes each tile's scores with one GEMM into a
per-thread buffer, masks them, exponentiates them vectorised, writes the weights once
(streaming stores) and multiplies them by V while they are still in cache
(:mod:`attnlab.core.explicit` says when it is used). The first use in a fresh cache
compiles it with ``torch.utils.cpp_extension`` (g++ and ninja; about a minute on two
cores), into ``$XDG_CACHE_HOME/attnlab`` (``~/.cache/attnlab`` by default; the
``ATTNLAB_KERNEL_DIR`` environment variable overrides it) under a name keyed by the
source's hash, torch's version and the compiler flags; later processes load the cached
library in milliseconds.

No compiler, a failed build, a cache that cannot be written, or ``ATTNLAB_NO_KERNEL=1``:
attnlab takes its pure-PyTorch path, with the same results, and :func:`kernel_status`
says why. Nothing raises.

Flags: ``-O3`` plus the widest vector ISA that torch itself uses on this CPU
(``torch.backends.cpu.get_cpu_capability()``: AVX512, AVX2, or none) — the ISA of the
machine that runs it, checked at run time, never ``-march=native``.

>>> status = kernel_status()
>>> sorted(status)
['available', 'build_seconds', 'cache_dir', 'capability', 'flags', 'reason', 'source']
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

__all__ = ["kernel_status", "release_memory", "ENV_DISABLE", "ENV_DIR"]

#: Set to 1 (or anything but "" and "0") to never build or load the kernel.
ENV_DISABLE = "ATTNLAB_NO_KERNEL"
#: Where the built kernel is cached (default ``$XDG_CACHE_HOME/attnlab``).
ENV_DIR = "ATTNLAB_KERNEL_DIR"

_SOURCE = Path(__file__).parent / "_cpp" / "attention.cpp"
_NAME = "attnlab_kernel"

_lock = threading.Lock()
_state: dict[str, Any] = {"tried": False, "ops": None, "reason": None, "build_seconds": None,
                          "cache_dir": None, "flags": None, "source": None}


def _disabled() -> bool:
    return os.environ.get(ENV_DISABLE, "") not in ("", "0")


def _cache_root() -> Path:
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "attnlab"


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


def _build(final: Path, flags: list[str]) -> None:
    """Compile into a private directory, load it, then move it into place atomically (a
    process that finds ``final`` finds a whole library)."""
    from torch.utils.cpp_extension import load

    work = final.with_name(f"{final.name}.build-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        load(name=_NAME, sources=[str(_SOURCE)], extra_cflags=flags,
             extra_ldflags=["-fopenmp"], build_directory=str(work), is_python_module=False,
             verbose=False)
        try:
            os.replace(work, final)
        except OSError:  # another process finished first: its copy is as good
            pass
    finally:
        shutil.rmtree(work, ignore_errors=True)


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
    final = _cache_root() / f"kernel-{_key(source, flags)}"
    _state["cache_dir"] = str(final)
    lib = _library(final)
    if lib.is_file():
        torch.ops.load_library(str(lib))
        _state["source"] = "cache"
    else:
        compiler = os.environ.get("CXX") or "c++"
        if shutil.which(compiler) is None:
            _state["reason"] = f"no C++ compiler ({compiler!r} not on PATH)"
            return
        if shutil.which("ninja") is None:
            try:
                import ninja  # noqa: F401  (the pip package puts one on sys.path's bin)
            except ImportError:
                _state["reason"] = "ninja not found (torch.utils.cpp_extension needs it)"
                return
        t0 = time.perf_counter()
        _build(final, flags)
        _state["build_seconds"] = round(time.perf_counter() - t0, 1)
        _state["source"] = "built"
    _register_flops(torch.ops.attnlab_kernel)
    _state["ops"] = torch.ops.attnlab_kernel


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


def kernel_status(build: bool = False) -> dict[str, Any]:
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
        _state.update(tried=False, ops=None, reason=None, build_seconds=None, cache_dir=None,
                      flags=None, source=None)
