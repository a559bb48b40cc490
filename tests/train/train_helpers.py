"""Helpers of the training tests: tiny configs, and running as a user who cannot write."""

from __future__ import annotations

from attnlab.train.config import TrainConfig


def tiny_config(task: str = "copy", **kw) -> TrainConfig:
    base = dict(num_layers=1, num_heads=2, embed_dim=16, batch_size=8, steps=6, warmup_steps=2,
                checkpoint_every=3, log_every=2, eval_batches=2)
    base.update(kw)
    return TrainConfig.for_task(task, **base)



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
