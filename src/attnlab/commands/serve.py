"""A local web server (FastAPI + uvicorn) that loads each model once and answers with the
explorer. Binds 127.0.0.1 unless --host says otherwise, and answers only requests addressed
to a local name or the bound address (--allow-host adds names).
"""

from __future__ import annotations

import argparse

__all__ = ["HELP", "add_arguments", "run_from_args"]

HELP = "serve the explorer locally: type a text, pick a model, explore it live"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", action="append", default=None, metavar="NAME",
                   help="a model to serve (repeatable)")
    p.add_argument("--trace", action="append", default=None, metavar="FILE",
                   help="instead of --model: open a saved trace (repeatable); the page fetches "
                   "exact rows, tiles and the QK view of any query from the server")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--max-chars", type=int, default=None, metavar="N",
                   help="longest text accepted, in characters: a cheap first filter before "
                   "the tokens are counted (default 100000)")
    p.add_argument("--max-memory", metavar="SIZE", default=None,
                   help="refuse a request whose traces would need more memory, e.g. 4GB "
                   "(default: half of this machine's memory)")
    p.add_argument("--allow-host", action="append", default=None, metavar="NAME",
                   help="also answer requests whose Host header is NAME (repeatable)")
    p.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="the only place the server may write (default: attnlab's cache)")
    p.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                   help="with --model: run the models in this precision (default: float32)")
    p.add_argument("--device", default=None, metavar="{auto,cpu,cuda,mps}",
                   help="with --model: run the models there (default: the CPU)")
    p.add_argument("--quiet", action="store_true", help="no progress or access log")


def run_from_args(args: argparse.Namespace) -> int:
    from attnlab._cli import UsageError
    from attnlab._text import one_line
    from attnlab.serve import ServeConfig
    from attnlab.serve import run as serve
    from attnlab.tracing.budget import parse_memory
    from attnlab.tracing.run_settings import resolve_device, resolve_dtype

    extra = {} if args.max_chars is None else {"max_chars": args.max_chars}
    config = ServeConfig(
        host=args.host, port=args.port, cache_dir=args.cache_dir,
        max_memory=None if args.max_memory is None else parse_memory(args.max_memory),
        allowed_hosts=tuple(args.allow_host or ()), dtype=args.dtype, device=args.device,
        **extra)
    if bool(args.model) == bool(args.trace):
        raise UsageError("serve needs --model NAME or --trace FILE (one of the two)")
    if args.trace and (args.dtype or args.device):
        raise UsageError("--dtype and --device say how --model runs; a saved trace (--trace) "
                         "has no model to run")
    for flag, value, check in (("--device", args.device, resolve_device),
                               ("--dtype", args.dtype, resolve_dtype)):
        try:  # a device or dtype this machine cannot run: one line, before any model loads
            check(value)
        except (ValueError, TypeError) as exc:
            msg = one_line(exc).removeprefix(flag[2:] + ": ")
            raise UsageError(f"{flag} {value}: {msg}") from exc
    if args.trace:
        from attnlab.serve.trace_api import run_traces

        run_traces(args.trace, config, quiet=args.quiet)
        return 0
    serve(args.model, config, quiet=args.quiet)
    return 0
