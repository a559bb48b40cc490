"""Atomic file writes, and the checks that an output path can be written at all.

A write goes to a temp file in the same folder, is fsynced, then renamed over the target, so a
reader sees either the old file or the new one, never half of one. The temp file of a target
``NAME`` is always ``.NAME.attnlab-XXXXXXXX.tmp`` (8 random characters): a process killed
mid-write leaves at most such a file beside the old one, and :func:`remove_stale_temps`
deletes exactly those (for the names it is given), never a file attnlab did not make.

Errors name the target, never the hidden temp file. Depends only on :mod:`attnlab._errors`.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = atomic_write_text(d / "a.txt", "hello")
>>> check_output_file(d, arg="--out")
Traceback (most recent call last):
...
ValueError: --out ...: is a directory; give a file name inside it
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from attnlab._errors import Error

__all__ = [
    "TEMP_MARK",
    "temp_beside",
    "atomic_open",
    "atomic_write_bytes",
    "atomic_write_text",
    "FolderBusyError",
    "check_output_dir",
    "check_output_file",
    "is_temp_of",
    "lock_folder",
    "memory_temp_parent",
    "remove_stale_temps",
]

#: Where a large temporary file can live in memory (tmpfs), tried in order.
MEMORY_TEMP_DIRS = ("/dev/shm",)

#: What distinguishes attnlab's temp files: ``.NAME`` + TEMP_MARK + 8 random chars + ``.tmp``.
TEMP_MARK = ".attnlab-"
_RANDOM = re.compile(r"[a-z0-9_]{8}")  # tempfile's alphabet and length


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _naming_target(exc: OSError, path: Path) -> OSError:
    """The same kind of OSError, naming ``path`` instead of a temp file."""
    return type(exc)(exc.errno, exc.strerror or str(exc), str(path))


def temp_beside(path: str | os.PathLike[str]) -> tuple[int, str]:
    """A new temp file beside ``path`` (its folder made if missing), named
    ``.NAME`` + :data:`TEMP_MARK` + ``….tmp`` so that a killed writer's leftovers are
    recognised, with the usual permissions (0666 less the umask): ``(fd, temp path)``. An
    ``OSError`` names ``path``."""
    path = Path(path)
    try:
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}{TEMP_MARK}",
                                   suffix=".tmp")
    except OSError as exc:
        raise _naming_target(exc, path) from exc
    try:
        os.chmod(tmp, 0o666 & ~_umask())
    except BaseException:
        os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise
    return fd, tmp


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "wb", *,
                encoding: str | None = None) -> Iterator[IO[Any]]:
    """``with atomic_open(p, "w", encoding="utf-8") as f: f.write(...)`` writes p atomically.

    The file gets the usual permissions (0666 less the umask), not mkstemp's 0600: what
    attnlab writes (reports, traces, figures, checkpoints) is meant to be read. An
    ``OSError`` (folder not writable, a file where a folder should be, a folder where the
    file should be) names ``path``.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    fd, tmp = temp_beside(path)
    try:
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        try:
            os.replace(tmp, path)
        except OSError as exc:
            raise _naming_target(exc, path) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # make the rename durable (not every fs allows it)
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path, "wb") as f:
        f.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return Path(path)


# --------------------------------------------------------------------------------------
# attnlab's own temp files
# --------------------------------------------------------------------------------------


def is_temp_of(path: str | os.PathLike[str], name: str) -> bool:
    """True if ``path`` is a temp file :func:`atomic_open` made for a target called ``name``.

    >>> is_temp_of(".config.json.attnlab-k3x_9a0q.tmp", "config.json")
    True
    >>> is_temp_of(".config.json.k3x_9a0q.tmp", "config.json")  # not attnlab's
    False
    """
    base = Path(path).name
    head, tail = f".{name}{TEMP_MARK}", ".tmp"
    return (base.startswith(head) and base.endswith(tail)
            and _RANDOM.fullmatch(base[len(head):-len(tail)]) is not None)


def remove_stale_temps(folder: str | os.PathLike[str], names: Iterable[str]) -> list[Path]:
    """Delete the temp files a killed writer left for the targets ``names`` in ``folder``.

    Only exact attnlab temp names are touched (see the module docstring); anything else in
    the folder, hidden or not, is left alone. Returns the paths removed.
    """
    folder = Path(folder)
    removed: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    names = list(names)
    for p in entries:
        if any(is_temp_of(p, n) for n in names) and p.is_file() and not p.is_symlink():
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


# --------------------------------------------------------------------------------------
# checking an output path before any work
# --------------------------------------------------------------------------------------


def _first_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _check_parent_chain(path: Path, arg: str) -> None:
    """The nearest existing ancestor of ``path`` must be a writable folder."""
    anc = _first_existing(path.parent)
    if not anc.is_dir():
        raise ValueError(f"{arg} {path}: {anc} is a file, not a folder")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise ValueError(f"{arg} {path}: folder {anc} is not writable")


def check_output_file(path: str | os.PathLike[str], *, arg: str = "path") -> Path:
    """Check, before any work, that a file can be written at ``path``; ``ValueError`` naming
    ``arg`` and the cause otherwise (a folder at ``path``, a file where a folder must be, a
    folder that is not writable)."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"{arg} must be a file path, got {path!r}")
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{arg} {p}: is a directory; give a file name inside it")
    if p.exists() and not p.is_file():
        raise ValueError(f"{arg} {p}: exists and is not a regular file")
    _check_parent_chain(p, arg)
    return p


def check_output_dir(path: str | os.PathLike[str], *, arg: str = "path") -> Path:
    """Check, before any work, that ``path`` is (or can become) a writable folder."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"{arg} must be a directory path, got {path!r}")
    p = Path(path)
    if p.exists():
        if not p.is_dir():
            raise ValueError(f"{arg} {p}: exists and is a file, not a directory")
        if not os.access(p, os.W_OK | os.X_OK):
            raise ValueError(f"{arg} {p}: directory is not writable")
        return p
    _check_parent_chain(p, arg)
    return p


# -- one writer per output folder ------------------------------------------------------------


class FolderBusyError(Error):
    """Another live process holds the lock of an output folder (the message names its pid)."""


_HELD: dict[str, int] = {}  # lock file -> how many blocks of this process hold it


@contextlib.contextmanager
def lock_folder(folder: str | os.PathLike[str], *, name: str = "writer", wait: bool = False,
                arg: str = "--out") -> Iterator[Path]:
    """Hold an exclusive lock on ``folder`` (created if needed) while the block runs.

    The lock is ``flock`` on ``folder/.attnlab-lock-NAME``, which holds the holder's pid: the
    kernel releases it when the holder ends, however it ends, so a lock file left by a
    killed process is taken over at once (there is no stale lock to clear by hand). Another
    live holder raises :class:`FolderBusyError` naming ``arg``, the folder and its pid; with
    ``wait`` the call blocks until the holder is done instead. Within one process the lock
    is reentrant (a command that locks its folder may call a function that locks it too).

    >>> import subprocess, sys, tempfile
    >>> d = tempfile.mkdtemp()
    >>> with lock_folder(d), lock_folder(d):  # reentrant in one process
    ...     code = "from attnlab._io import lock_folder as f\\nwith f(%r): pass" % d
    ...     r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    >>> "another attnlab process (pid" in r.stderr and "--wait" in r.stderr
    True
    """
    import fcntl

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f".attnlab-lock-{name}"
    key = str(path.resolve())
    if _HELD.get(key):
        _HELD[key] += 1
        try:
            yield folder
        finally:
            _HELD[key] -= 1
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise FolderBusyError(
                f"{arg} {folder}: another attnlab process (pid {holder}) is writing this "
                f"folder; wait for it to end, or run again with --wait") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        _HELD[key] = 1
        try:
            yield folder
        finally:
            del _HELD[key]
    finally:
        os.close(fd)  # releases the lock


def memory_temp_parent(need_bytes: int, *, candidates: Iterable[str] = MEMORY_TEMP_DIRS
                       ) -> str | None:
    """A folder in memory (tmpfs) for a temporary file of about ``need_bytes`` that one
    process writes and another maps, or None for the system's default temp folder.

    Written to a disk, such a file waits on the disk (a 1 GB trace took 12 s on a VM disk
    that writes 150 MB/s, against half a second in memory). A candidate is taken only if it
    is a writable folder with twice ``need_bytes`` free (the file's pages are memory that
    stays taken until it is deleted), and never when ``$TMPDIR`` is set: that is the user's
    choice of where temporary files go.

    >>> memory_temp_parent(1, candidates=["/nowhere"]) is None
    True
    """
    if os.environ.get("TMPDIR"):
        return None
    for folder in candidates:
        try:
            st = os.statvfs(folder)
        except OSError:
            continue
        if os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK) and \
                st.f_bavail * st.f_frsize >= 2 * need_bytes:
            return folder
    return None
