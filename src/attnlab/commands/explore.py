"""Trace TEXT (and TEXT2) through a model and write a self-contained HTML explorer (no network
request of any kind): model, head, matrix, QK, geometry, positional and diagnostics views,
in English and Chinese; an encoder-decoder model (source --text, --target or its own
generation) with a stack selector (encoder, decoder, cross-attention), an image with the
image view.

With ``--trace FILE`` the page is written from a saved trace, without the model (the file
is memory-mapped and checked: :func:`attnlab.tracing.open_trace`); under ``torchrun
--nproc_per_node=K -m attnlab explore --trace FILE --out PAGE.html`` the K processes split
the one pass over the weights (the head table and the pooled maps) by heads, and rank 0
writes the page, the same page as one process writes.
"""

from __future__ import annotations

import argparse

from attnlab.commands.model_run import add_model_run_arguments, add_target_arguments

__all__ = ["HELP", "add_arguments", "run_from_args"]

HELP = "write the interactive attention explorer for a text as one HTML file"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_run_arguments(p, media=True, optional=True)
    p.add_argument("--trace", metavar="FILE", default=None,
                   help="write the page of a saved trace (.safetensors, attnlab trace --out) "
                   "instead of tracing --model on a text; no model is loaded")
    add_target_arguments(p)
    p.add_argument("--text2", default=None, help="a second text, shown as a second input")
    p.add_argument("--out", required=True, metavar="FILE.html", help="output file")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true",
                   help="print path, bytes, tokens, seconds and peak memory as JSON")


def run_from_args(args: argparse.Namespace) -> int:
    from attnlab._cli import UsageError, check_out, emit_json, save
    from attnlab.commands.model_run import ModelRun, target_error, target_text
    from attnlab.viz.explorer import Explorer, explore

    check_out(args.out, (".html", ".htm"))
    if args.trace is not None:
        return _from_trace(args)
    missing = [f for f, v in (("--model", args.model), ("--text, --text-file, --image or "
                                                       "--audio", args.text or args.text_file
                                                       or args.image or args.audio))
               if v is None]
    if missing:
        raise UsageError(f"explore needs {' and '.join(missing)} (or --trace FILE, a saved "
                         "trace)")
    job = ModelRun(args)
    target, target_arg = target_text(args)
    if args.image is not None or args.audio is not None:
        if args.text2 is not None:
            raise UsageError("--text2 goes with --text: give one --image or --audio alone")
        ex = Explorer([job.media_trace()])
        ex.payload()
    else:
        text, arg = job.text()
        texts = [(text, arg)]
        if args.text2 is not None:
            from attnlab.tracing.budget import check_text

            texts.append((check_text(args.text2, "--text2"), "--text2"))
        loaded = job.load()
        for t, a in texts:
            job.admit(loaded, t, a)
        targets = None if target is None else [target] + [None] * (len(texts) - 1)
        try:  # encoder–decoder models: --target is --text's target
            with job.layers(loaded, "tracing"):
                ex = explore(loaded, [t for t, _ in texts], target=targets,
                             truncate=args.truncate, run=job.run_settings())
        except ValueError as exc:
            raise target_error(exc, target, target_arg) from exc
        for _, kept, given in ex.target_cuts():  # --truncate's cut of the target, announced
            job.announce_cut(target_arg, kept, given, loaded)
    path = save(lambda: ex.save(args.out), args.out)
    size = path.stat().st_size
    stats = job.stats()
    info = {"path": str(path), "bytes": size, "model": ex.traces[0].model,
            **stats, "tokens": [t.seq_len for t in ex.traces]}
    if args.json:
        emit_json(info)
    else:
        job.console.print(f"wrote {path} ({size / 1e6:.2f} MB, tokens {info['tokens']}, "
                          f"{stats['seconds']:.1f} s)")
    return 0


def _from_trace(args: argparse.Namespace) -> int:
    """``--trace FILE``: the page of a saved trace, its pass over the weights split over
    the processes of a torchrun group (rank 0 writes the page)."""
    import time

    from attnlab._cli import UsageError, emit_json, save
    from attnlab._dist import join, leave
    from attnlab._proc import peak_rss_bytes
    from attnlab.commands.model_run import read_saved_trace
    from attnlab.viz.explorer import Explorer

    given = [f for f, v in (("--model", args.model), ("--text", args.text),
                            ("--text-file", args.text_file), ("--image", args.image),
                            ("--audio", args.audio), ("--text2", args.text2),
                            ("--target", args.target), ("--target-file", args.target_file))
             if v is not None]
    if given:
        raise UsageError(f"--trace writes the page of a saved trace without the model; leave "
                         f"out {', '.join(given)}")
    t0 = time.perf_counter()
    group = join("cpu")
    try:
        ex = Explorer([read_saved_trace(args.trace, group=group)])
        ex.payload(progress=not (args.quiet or args.json) and group.rank == 0, group=group)
    finally:
        leave(group)
    if group.rank != 0:
        return 0
    path = save(lambda: ex.save(args.out), args.out)
    size = path.stat().st_size
    info = {"path": str(path), "bytes": size, "model": ex.traces[0].model,
            "tokens": [t.seq_len for t in ex.traces], "trace": str(args.trace),
            "processes": group.world, "seconds": round(time.perf_counter() - t0, 3),
            "peak_memory_bytes": peak_rss_bytes()}
    if args.json:
        emit_json(info)
    else:
        print(f"wrote {path} ({size / 1e6:.2f} MB, tokens {info['tokens']}, "
              f"{info['seconds']:.1f} s, {group.world} process"
              f"{'es' if group.world > 1 else ''})")
    return 0
