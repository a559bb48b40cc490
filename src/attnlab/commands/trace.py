"""Run TEXT through MODEL (minilm, smollm2, whisper-tiny-en, a Hugging Face folder or a trained
attnlab run) and write its AttentionTrace (safetensors + JSON metadata); an encoder-decoder
model (source --text, --target or its own generation) writes its encoder, decoder and
cross-attention stacks apart in one file.

A trace that would not fit the memory budget (--max-memory, default half of this machine's
memory) is streamed to --out layer by layer as the model runs (said on stderr), so that one
layer is in memory at a time; --stream always does. --max-tokens N admits up to N tokens,
past the model's window for models with rotary positions (with a warning: the model was not
trained there); with --truncate a longer text is cut to N.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

from attnlab.commands.model_run import add_model_run_arguments, add_target_arguments

__all__ = ["HELP", "add_arguments", "run_from_args"]

HELP = "capture the attention of one text through a model and save it"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_run_arguments(p, media=True)
    add_target_arguments(p)
    p.add_argument("--out", required=True, metavar="FILE", help="e.g. trace.safetensors")
    p.add_argument("--no-qkv", action="store_true",
                   help="keep dense weights instead of q, k, v and the log-sum-exp (short "
                   "inputs only)")
    p.add_argument("--context", action="store_true", help="also keep each head's output")
    p.add_argument("--keep-pieces", action="store_true",
                   help="do not merge byte pieces of one character")
    p.add_argument("--stream", action="store_true",
                   help="write the trace to --out layer by layer as the model runs (one layer "
                   "in memory; the default when the whole trace would not fit --max-memory)")
    p.add_argument("--max-tokens", type=int, default=None, metavar="N",
                   help="admit up to N tokens instead of the model's limit; past its window "
                   "only for models with rotary positions (RoPE), with a warning")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true",
                   help="print path, bytes, tokens, seconds and peak memory as JSON")


def _shape(t) -> dict[str, object]:
    return {"layers": t.num_layers, "heads": t.num_heads, "causal": t.causal,
            "queries": t.seq_len, "keys": t.key_len}


def _run_media(args: argparse.Namespace, job: Any) -> int:
    """``--image`` or ``--audio``: trace it through the model, write ``--out`` and say so
    (each stack apart with ``--json``)."""
    from attnlab._cli import UsageError, emit_json, save
    from attnlab.commands.model_run import is_stacked

    if args.stream or args.max_tokens is not None:
        raise UsageError("--stream and --max-tokens are for --text/--text-file; trace an "
                         "image or a sound without them")
    t = job.media_trace(qkv=not args.no_qkv, context=args.context)
    path = save(lambda: t.save(args.out), args.out)
    if args.json:
        stacks = dict(t.items()) if is_stacked(t) else {"self": t}
        emit_json({"path": str(path), "bytes": path.stat().st_size, "model": t.model,
                   "stacks": {n: _shape(x) for n, x in stacks.items()}, **job.stats()})
    else:
        job.console.print(f"wrote {path}: {t!r}", highlight=False, markup=False)
    return 0


def _report(args: argparse.Namespace, job: Any, t: Any, path: Path) -> None:
    """Say what was written to ``path``: JSON with ``--json`` (each stack apart for an
    encoder-decoder model), else one line."""
    from attnlab._cli import emit_json
    from attnlab.commands.model_run import generation_json, is_stacked

    if args.json and is_stacked(t):  # each stack apart
        emit_json({"path": str(path), "bytes": path.stat().st_size, "model": t.model,
                   "target": t.target, "target_from": t.meta.get("target_from"),
                   "stacks": {n: _shape(x) for n, x in t.items()}, **job.stats()})
    elif args.json:
        emit_json({"path": str(path), "bytes": path.stat().st_size, "model": t.model,
                   "layers": t.num_layers, "heads": t.num_heads, "causal": t.causal,
                   "streamed": job.streaming, **generation_json(t), **job.stats()})
    else:
        job.console.print(f"wrote {path}: {t!r}", highlight=False, markup=False)


def run_from_args(args: argparse.Namespace) -> int:
    from attnlab._cli import UsageError, check_out, save
    from attnlab.commands.model_run import ModelRun, is_stacked, target_error, target_text
    from attnlab.tracing import trace
    from attnlab.tracing.tracer import BeyondWindowWarning, is_seq2seq

    check_out(args.out)
    if args.max_tokens is not None and args.max_tokens < 1:
        raise UsageError(f"--max-tokens must be a positive number of tokens, got "
                         f"{args.max_tokens}")
    job = ModelRun(args)
    target, target_arg = target_text(args)
    if args.image is not None or args.audio is not None:
        return _run_media(args, job)
    text, arg = job.text()
    loaded = job.load()
    one_stack = not is_seq2seq(loaded.model)
    if args.stream and not one_stack:
        raise UsageError(f"--stream: {loaded.name} is an encoder-decoder model (encoder, "
                         "decoder and cross-attention stacks); a streamed trace holds one stack")
    job.admit(loaded, text, arg, stream=True if args.stream else (None if one_stack else False),
              keep_weights=args.no_qkv, keep_context=args.context)
    kw: dict[str, Any] = {} if target is None else {"target": target}
    if job.streaming:
        kw["out"] = args.out
    try:
        with job.layers(loaded, "tracing"), warnings.catch_warnings():
            warnings.simplefilter("ignore", BeyondWindowWarning)  # admit said it on stderr
            def run():
                return trace(loaded, text, qkv=not args.no_qkv, context=args.context,
                             truncate=args.truncate, merge_pieces=not args.keep_pieces,
                             max_memory=job.budget, max_tokens=args.max_tokens,
                             **job.run_settings(), **kw)

            t = save(run, args.out) if job.streaming else run()  # streamed: writes --out
    except ValueError as exc:
        raise target_error(exc, target, target_arg) from exc
    if is_stacked(t):
        job.announce_target_cut(t.meta, t["decoder"].seq_len, target_arg, loaded)
    path = (Path(args.out) if job.streaming
            else save(lambda: t.save(args.out), args.out))
    _report(args, job, t, path)
    return 0
