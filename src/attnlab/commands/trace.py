"""Run TEXT through MODEL (minilm, smollm2, whisper-tiny-en, a Hugging Face folder or a trained
attnlab run) and write its AttentionTrace (safetensors + JSON metadata); an encoder-decoder
model (source --text, --target or its own generation) writes its encoder, decoder and
cross-attention stacks apart in one file.
"""

from __future__ import annotations

import argparse

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
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true",
                   help="print path, bytes, tokens, seconds and peak memory as JSON")


def _shape(t) -> dict[str, object]:
    return {"layers": t.num_layers, "heads": t.num_heads, "causal": t.causal,
            "queries": t.seq_len, "keys": t.key_len}


def run_from_args(args: argparse.Namespace) -> int:
    from attnlab._cli import check_out, emit_json, save
    from attnlab.commands.model_run import ModelRun, is_stacked, target_error, target_text
    from attnlab.tracing import trace

    check_out(args.out)
    job = ModelRun(args)
    target, target_arg = target_text(args)
    if args.image is not None or args.audio is not None:
        t = job.media_trace(qkv=not args.no_qkv, context=args.context)
        path = save(lambda: t.save(args.out), args.out)
        if args.json:
            stacks = dict(t.items()) if is_stacked(t) else {"self": t}
            emit_json({"path": str(path), "bytes": path.stat().st_size, "model": t.model,
                       "stacks": {n: _shape(x) for n, x in stacks.items()}, **job.stats()})
        else:
            job.console.print(f"wrote {path}: {t!r}", highlight=False, markup=False)
        return 0
    text, arg = job.text()
    loaded = job.load()
    job.admit(loaded, text, arg, keep_weights=args.no_qkv, keep_context=args.context)
    kw = {} if target is None else {"target": target}
    try:
        with job.layers(loaded, "tracing"):
            t = trace(loaded, text, qkv=not args.no_qkv, context=args.context,
                      truncate=args.truncate, merge_pieces=not args.keep_pieces,
                      max_memory=job.budget, **kw)
    except ValueError as exc:
        raise target_error(exc, target, target_arg) from exc
    if is_stacked(t):
        job.announce_target_cut(t.meta, t["decoder"].seq_len, target_arg, loaded)
    path = save(lambda: t.save(args.out), args.out)
    if args.json and is_stacked(t):  # each stack apart
        emit_json({"path": str(path), "bytes": path.stat().st_size, "model": t.model,
                   "target": t.target, "target_from": t.meta.get("target_from"),
                   "stacks": {n: _shape(x) for n, x in t.items()}, **job.stats()})
    elif args.json:
        emit_json({"path": str(path), "bytes": path.stat().st_size, "model": t.model,
                   "layers": t.num_layers, "heads": t.num_heads, "causal": t.causal,
                   **job.stats()})
    else:
        job.console.print(f"wrote {path}: {t!r}", highlight=False, markup=False)
    return 0
