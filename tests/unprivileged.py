"""Running a test step as a user who cannot write a folder (root may write anywhere)."""

from __future__ import annotations


def run_unprivileged(fn, folder):
    """``fn()`` -> (exit code, stderr) where ``folder`` cannot be written: a forked child that
    drops to user nobody when this process is root (root may write anywhere), else in this
    process with ``folder`` made read-only. Call ``fn`` once before, so that every module it
    needs is imported (the child may not be able to read the interpreter's files)."""
    import contextlib
    import io
    import json
    import os

    os.chmod(folder, 0o555)
    try:
        if os.geteuid() != 0:
            buf = io.StringIO()
            with contextlib.redirect_stderr(buf):
                return fn(), buf.getvalue()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            try:
                os.close(r)
                os.setgid(65534)
                os.setuid(65534)
                buf = io.StringIO()
                with contextlib.redirect_stderr(buf):
                    rc = fn()
                os.write(w, json.dumps([rc, buf.getvalue()]).encode())
            except BaseException as exc:
                os.write(w, json.dumps([-1, repr(exc)]).encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            data = f.read()
        os.waitpid(pid, 0)
        rc, err = json.loads(data)
        return rc, err
    finally:
        os.chmod(folder, 0o755)
