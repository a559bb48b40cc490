"""Trace TEXT through MODEL and score every head: entropy, max weight, sink mass,
previous-token, self and (causal models, on a repeated random token sequence) induction
scores, redundancy and clusters. An encoder-decoder model is scored stack by stack (encoder,
decoder, cross-attention; cross-attention without the scores that need queries and keys from
one sequence).

With ``--trace FILE`` a saved trace is diagnosed without the model (the file is opened
memory-mapped and every tensor's checksum verified before the scores); under
``torchrun --nproc_per_node=K -m attnlab diagnose --trace FILE`` the K processes split the
heads and every one of them gets the one-process result; rank 0 prints it.
"""

from __future__ import annotations

import argparse
from typing import Any

from attnlab.commands.model_run import add_model_run_arguments, add_target_arguments

__all__ = ["HELP", "add_arguments", "definitions_json", "run_from_args"]

HELP = "name the sink, previous-token and induction heads of a model"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_run_arguments(p, optional=True)
    p.add_argument("--trace", metavar="FILE", default=None,
                   help="diagnose a saved trace (.safetensors, attnlab trace --out) instead of "
                   "tracing --model on a text; no model is loaded (the induction score, which "
                   "needs the model's own trace of a repeated random sequence, is left out)")
    add_target_arguments(p)
    p.add_argument("--definition", metavar="NAME", default=None,
                   help="score every head by one definition only, e.g. tl-induction-mul, "
                   "tl-demo-induction, olsson-prefix-matching, gu-sink, previous (--json "
                   "without it gives all)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true",
                   help="print every score, and tokens, seconds and peak memory, as JSON")


def definitions_json(defs: dict) -> dict:
    """compute_definitions' result as JSON: each score's definition, source and (L, H)
    values (6 decimals), or why it is unavailable."""
    from attnlab.analysis.literature import DEFINITIONS

    out = {}
    for name, got in defs.items():
        d = DEFINITIONS[name]
        entry: dict[str, Any] = {"summary": d.summary, "source": d.source, "on": d.on}
        if "unavailable" in got:
            entry["unavailable"] = got["unavailable"]
        else:
            entry["scores"] = [[round(float(x), 6) for x in row] for row in got["scores"]]
            entry["info"] = got["info"]
        out[name] = entry
    return out


def _print_definition(name: str, got: dict, model: str, as_json: bool, stats: dict) -> None:
    """One definition's scores: JSON, or a layer x head table on stdout."""
    from attnlab._cli import UsageError, emit_json
    from attnlab.analysis.literature import DEFINITIONS

    entry = definitions_json({name: got})[name]
    if as_json:
        emit_json({"model": model, "definition": name, **entry, "run": stats})
        return
    if "unavailable" in entry:
        raise UsageError(f"--definition {name}: unavailable for {model}: {entry['unavailable']}")
    from rich.console import Console
    from rich.table import Table

    scores = got["scores"]
    table = Table(title=f"{model}: {name} ({DEFINITIONS[name].summary})",
                  caption=f"source: {DEFINITIONS[name].source}", padding=(0, 1), box=None)
    table.add_column("layer", justify="right")
    for h in range(scores.shape[1]):
        table.add_column(f"H{h}", justify="right")
    for layer, row in enumerate(scores.tolist()):
        table.add_row(str(layer), *(f"{x:.2f}" for x in row))
    Console().print(table)


def _print_tables(d: Any) -> None:
    """attnlab's scores of every head as rich tables on stdout (each stack apart)."""
    from rich.console import Console

    out = Console()
    for table in d.tables():
        out.print(table)


def _seq2seq(args: argparse.Namespace, job: Any, loaded: Any, text: str,
             target: str | None, target_arg: str) -> int:
    """An encoder–decoder model: every stack scored apart (no literature definitions)."""
    from attnlab._cli import UsageError, emit_json
    from attnlab.analysis import diagnose_model
    from attnlab.commands.model_run import target_error

    if args.definition is not None:
        raise UsageError(f"--definition: the literature's definitions score the heads of "
                         f"one-stack models; {loaded.name} is an encoder-decoder model "
                         "(leave --definition out to score each stack)")
    try:
        with job.layers(loaded, "tracing and scoring heads"):
            d = diagnose_model(loaded, text, seed=args.seed or 0, truncate=args.truncate,
                               target=target)
    except ValueError as exc:
        raise target_error(exc, target, target_arg) from exc
    job.announce_target_cut(d.meta, d.meta.get("target_tokens", 0), target_arg, loaded)
    if args.json:
        emit_json({**d.to_json(), "definitions": None, "run": job.stats()})
    else:
        _print_tables(d)
    return 0


def _from_trace(args: argparse.Namespace) -> int:
    """``--trace FILE``: the saved trace diagnosed without the model, on every process of
    a torchrun group (rank 0 prints)."""
    import time

    from attnlab._cli import UsageError, emit_json
    from attnlab._dist import join, leave
    from attnlab._proc import peak_rss_bytes
    from attnlab.analysis.heads import diagnose
    from attnlab.commands.model_run import read_saved_trace

    given = [f for f, v in (("--model", args.model), ("--text", args.text),
                            ("--text-file", args.text_file), ("--target", args.target),
                            ("--target-file", args.target_file),
                            ("--definition", args.definition)) if v is not None]
    if given:
        raise UsageError(f"--trace diagnoses a saved trace without the model; leave out "
                         f"{', '.join(given)}")
    t0 = time.perf_counter()
    group = join("cpu")
    try:
        t = read_saved_trace(args.trace, group=group)
        d = diagnose(t, group=group, progress=not (args.quiet or args.json) and group.rank == 0)
    finally:
        leave(group)
    if group.rank != 0:
        return 0
    stats = {"seconds": round(time.perf_counter() - t0, 3), "processes": group.world,
             "peak_rss_bytes": peak_rss_bytes(), "trace": str(args.trace)}
    if args.json:
        emit_json({**d.to_json(), "definitions": None, "run": stats})
    else:
        _print_tables(d)
    return 0


def run_from_args(args: argparse.Namespace) -> int:
    from attnlab._cli import UsageError, emit_json
    from attnlab.analysis import diagnose_model
    from attnlab.analysis.heads import HeadDiagnostics
    from attnlab.analysis.literature import DEFINITIONS, compute_definitions
    from attnlab.commands.model_run import ModelRun, target_text
    from attnlab.tracing.tracer import is_seq2seq

    if args.trace is not None:
        return _from_trace(args)
    missing = [f for f, v in (("--model", args.model),
                              ("--text or --text-file", args.text or args.text_file))
               if v is None]
    if missing:
        raise UsageError(f"diagnose needs {' and '.join(missing)} (or --trace FILE, a saved "
                         "trace)")
    if args.definition is not None and args.definition not in DEFINITIONS:
        raise UsageError(f"--definition: unknown definition {args.definition!r}; valid "
                         f"names: {', '.join(DEFINITIONS)}")
    job = ModelRun(args)
    text, arg = job.text()
    target, target_arg = target_text(args)
    loaded = job.load()
    job.admit(loaded, text, arg)
    net = getattr(loaded, "model", None)
    seq2seq = net is not None and is_seq2seq(net)
    if target is not None and not seq2seq:
        raise UsageError(f"{target_arg}: a target is for encoder-decoder models (a source and "
                         f"a target text); {loaded.name} has one attention stack and reads "
                         "one text: put all of it in --text")
    if seq2seq:
        return _seq2seq(args, job, loaded, text, target, target_arg)
    if args.definition is not None:
        with job.layers(loaded, f"scoring heads: {args.definition}"):
            got = compute_definitions(loaded, text, [args.definition], seed=args.seed or 0,
                                      truncate=args.truncate)[args.definition]
        _print_definition(args.definition, got, loaded.name, args.json, job.stats())
        return 0
    with job.layers(loaded, "tracing and scoring heads"):
        d = diagnose_model(loaded, text, seed=args.seed or 0, truncate=args.truncate,
                           run=job.run_settings())
    if args.json:
        with job.layers(loaded, "literature definitions"):
            defs = compute_definitions(loaded, text, seed=args.seed or 0, truncate=args.truncate,
                                       own=d.scores if isinstance(d, HeadDiagnostics) else None)
        emit_json({**d.to_json(), "definitions": definitions_json(defs), "run": job.stats()})
    else:
        _print_tables(d)
    return 0
