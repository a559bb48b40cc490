"""The ``attnlab`` command. Thin: it parses arguments and calls the library.

Bad input is one line on stderr and exit code 2; set ``ATTNLAB_DEBUG=1`` for the traceback.

Each subcommand is one ``@_command`` function that adds its parser and sets ``func``;
``python -m attnlab`` is the same program.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence

_REGISTRY: list[Callable[[argparse._SubParsersAction], None]] = []


def _command(add: Callable[[argparse._SubParsersAction], None]):
    _REGISTRY.append(add)
    return add


def _emit_json(obj: object) -> None:
    """Machine-readable output: alone on stdout, nothing else mixed in."""
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False) + "\n")


class UsageError(Exception):
    """A bad command-line value: printed as one line, exit code 2."""


# --------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------


@_command
def _report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="run every check and write a self-contained HTML report",
        description="Compute the parity checks and experiments, and write DIR/index.html "
        "(self-contained: no network request of any kind).",
    )
    p.add_argument("--out", default="report", help="output directory (default: report)")
    p.add_argument("--only", action="append", default=None, metavar="PART",
                   help="build only this part: parity, experiments, explorer, real-models, "
                   "trained (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")

    def run(args: argparse.Namespace) -> int:
        from attnlab.report import build_report

        result = build_report(args.out, only=args.only, quiet=args.quiet or args.json)
        if args.json:
            _emit_json(result.to_json())
        return 0 if result.passed else 1

    p.set_defaults(func=run)


@_command
def _explore(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explore",
        help="write the interactive attention explorer for a text as one HTML file",
        description="Trace TEXT (and TEXT2) through a model and write a self-contained HTML "
        "explorer (no network request of any kind): model, head, matrix, QK, geometry, "
        "positional and diagnostics views, in English and Chinese.",
    )
    p.add_argument("--model", required=True, metavar="NAME_OR_PATH",
                   help="minilm, smollm2, a Hugging Face model folder or a trained run")
    p.add_argument("--text", required=True, help="the input text")
    p.add_argument("--text2", default=None, help="a second text, shown as a second input")
    p.add_argument("--out", required=True, metavar="FILE.html", help="output file")
    p.add_argument("--truncate", action="store_true",
                   help="cut inputs longer than the model's limit instead of refusing them")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true", help="print path, size and tokens as JSON")

    def run(args: argparse.Namespace) -> int:
        from rich.console import Console

        from attnlab.viz.explorer import explore

        if not args.out.lower().endswith((".html", ".htm")):
            raise UsageError(f"--out must name an .html file, got {args.out!r}")
        texts = [args.text] + ([args.text2] if args.text2 is not None else [])
        console = Console(stderr=True, quiet=args.quiet or args.json)
        with console.status(f"tracing with {args.model}…"):
            ex = explore(args.model, texts, truncate=args.truncate)
            path = ex.save(args.out)
        size = path.stat().st_size
        info = {"path": str(path), "bytes": size, "model": ex.traces[0].model,
                "tokens": [t.seq_len for t in ex.traces]}
        if args.json:
            _emit_json(info)
        else:
            console.print(f"wrote {path} ({size / 1e6:.2f} MB, tokens {info['tokens']})")
        return 0

    p.set_defaults(func=run)


@_command
def _serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the explorer locally: type a text, pick a model, explore it live",
        description="A local web server (FastAPI + uvicorn) that loads each model once and "
        "answers with the explorer. Binds 127.0.0.1 unless --host says otherwise.",
    )
    p.add_argument("--model", action="append", required=True, metavar="NAME",
                   help="a model to serve (repeatable)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--max-chars", type=int, default=2000, metavar="N",
                   help="longest text accepted, in characters (default 2000)")
    p.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="the only place the server may write (default: attnlab's cache)")
    p.add_argument("--quiet", action="store_true", help="no progress or access log")

    def run(args: argparse.Namespace) -> int:
        from attnlab.serve import ServeConfig
        from attnlab.serve import run as serve

        config = ServeConfig(max_chars=args.max_chars, host=args.host, port=args.port,
                             cache_dir=args.cache_dir)
        serve(args.model, config, quiet=args.quiet)
        return 0

    p.set_defaults(func=run)


@_command
def _trace(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "trace",
        help="capture the attention of one text through a model and save it",
        description="Run TEXT through MODEL (minilm, smollm2, a Hugging Face folder or a "
        "trained attnlab run) and write its AttentionTrace (safetensors + JSON metadata).",
    )
    p.add_argument("--model", required=True, metavar="NAME_OR_PATH")
    p.add_argument("--text", required=True)
    p.add_argument("--out", required=True, metavar="FILE", help="e.g. trace.safetensors")
    p.add_argument("--no-qkv", action="store_true", help="keep only the weights")
    p.add_argument("--scores", action="store_true", help="also keep the raw scores")
    p.add_argument("--truncate", action="store_true",
                   help="cut a text longer than the model's limit instead of failing")
    p.add_argument("--keep-pieces", action="store_true",
                   help="do not merge byte pieces of one character")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true", help="print a summary as JSON")

    def run(args: argparse.Namespace) -> int:
        from rich.console import Console

        from attnlab.models import load
        from attnlab.trace import trace

        quiet = args.quiet or args.json
        console = Console(stderr=True, quiet=quiet)
        with console.status(f"loading {args.model}"):
            loaded = load(args.model, progress=not quiet)
        with console.status("tracing"):
            t = trace(loaded, args.text, qkv=not args.no_qkv, scores=args.scores,
                      truncate=args.truncate, merge_pieces=not args.keep_pieces)
        path = t.save(args.out)
        if args.json:
            _emit_json({"path": str(path), "model": t.model, "layers": t.num_layers,
                        "heads": t.num_heads, "tokens": t.tokens, "causal": t.causal})
        else:
            console.print(f"wrote {path}: {t!r}")
        return 0

    p.set_defaults(func=run)


@_command
def _plot(sub: argparse._SubParsersAction) -> None:
    kinds = ("heatmap", "grid", "arcs", "qk", "decomposition")  # attnlab.viz.figures.KINDS
    p = sub.add_parser(
        "plot",
        help="draw a saved trace: heatmap, grid, arcs, qk or decomposition",
        description="Draw one figure of a trace written by `attnlab trace` as PNG or SVG.",
    )
    p.add_argument("file", metavar="FILE", help="a trace (.safetensors)")
    p.add_argument("--kind", choices=kinds, default="heatmap")
    p.add_argument("--layer", type=int, default=0)
    p.add_argument("--head", type=int, default=0)
    p.add_argument("--out", required=True, metavar="PNG_OR_SVG")

    def run(args: argparse.Namespace) -> int:
        from attnlab.trace import AttentionTrace
        from attnlab.viz.figures import plot, save_figure

        t = AttentionTrace.load(args.file)
        try:
            fig = plot(t, args.kind, args.layer, args.head)
        except IndexError as exc:
            raise UsageError(str(exc)) from None
        print(save_figure(fig, args.out))
        return 0

    p.set_defaults(func=run)


@_command
def _diagnose(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diagnose",
        help="name the sink, previous-token and induction heads of a model",
        description="Trace TEXT through MODEL and score every head: entropy, max weight, "
        "sink mass, previous-token, self and (causal models, on a repeated random token "
        "sequence) induction scores, redundancy and clusters.",
    )
    p.add_argument("--model", required=True, metavar="NAME_OR_PATH")
    p.add_argument("--text", required=True)
    p.add_argument("--seed", type=int, default=0, help="seed of the random induction sequence")
    p.add_argument("--truncate", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true", help="print every score as JSON")

    def run(args: argparse.Namespace) -> int:
        from rich.console import Console

        from attnlab.analysis import diagnose_model
        from attnlab.models import load

        quiet = args.quiet or args.json
        err = Console(stderr=True, quiet=quiet)
        with err.status(f"loading {args.model}"):
            loaded = load(args.model, progress=not quiet)
        with err.status("tracing and scoring heads"):
            d = diagnose_model(loaded, args.text, seed=args.seed, truncate=args.truncate)
        if args.json:
            _emit_json(d.to_json())
        else:
            out = Console()
            for table in d.tables():
                out.print(table)
        return 0

    p.set_defaults(func=run)


@_command
def _train(sub: argparse._SubParsersAction) -> None:
    from attnlab.train.config import add_arguments

    p = sub.add_parser(
        "train",
        help="train a tiny GPT on a synthetic task and find its specialized heads",
        description="Train attnlab's GPT on copy, reverse, sort, induction, assoc-recall or "
        "modular-add; write DIR/config.json, checkpoint.safetensors, metrics.jsonl and "
        "training.png. Resumable (--resume); under `torchrun -m attnlab.train` it runs DDP.",
    )
    add_arguments(p)

    def run(args: argparse.Namespace) -> int:
        from attnlab.train.trainer import run_from_args

        result = run_from_args(args)
        if args.json:
            _emit_json(result.to_json())
        elif not args.quiet:
            from rich.console import Console

            r = result
            msg = (f"{r.run_dir}: step {r.step}, held-out accuracy {r.eval_accuracy:.4f} "
                   f"(loss {r.eval_loss:.4f}), {r.seconds:.1f} s")
            if r.heads:
                pt, ind = r.heads["previous_token"], r.heads["induction"]
                msg += (f"\nprevious-token head L{pt['layer']}H{pt['head']} "
                        f"(score {pt['score']:.2f}), induction head L{ind['layer']}H{ind['head']} "
                        f"(score {ind['score']:.2f})")
            Console(stderr=True).print(msg)
        return 0

    p.set_defaults(func=run)


@_command
def _verify(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify",
        help="run the mathematical experiments and check each against the theory",
        description="Compute every claim of the articles on real numbers (qk-variance, "
        "softmax-saturation, ...), print measured vs expected, and exit 1 if any fails.",
    )
    p.add_argument("--only", action="append", default=None, metavar="NAME",
                   help="run only this experiment (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--json", action="store_true",
                   help="print only a JSON list of results on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress output")

    def run(args: argparse.Namespace) -> int:
        from attnlab.experiments import EXPERIMENTS, run_all

        unknown = [n for n in args.only or [] if n not in EXPERIMENTS]
        if unknown:
            raise UsageError(f"--only: unknown experiment {', '.join(map(repr, unknown))}; "
                             f"valid names: {', '.join(EXPERIMENTS)}")
        results = run_all(args.only, seed=args.seed, quiet=args.quiet or args.json)
        if args.json:
            _emit_json([r.to_json() for r in results])
        else:
            from rich.console import Console
            from rich.table import Table

            from attnlab.experiments._result import fmt_num

            table = Table(title="attnlab verify")
            for col, just in (("name", "left"), ("measured", "right"),
                              ("expected", "right"), ("pass", "left"), ("s", "right")):
                table.add_column(col, justify=just)
            for r in results:
                failed = [c.name for c in r.checks if not c.passed]
                mark = "[green]pass[/]" if r.passed else "[red]FAIL[/]"
                if failed:
                    mark += f" [red]({'; '.join(failed)})[/]"
                table.add_row(r.name, fmt_num(r.measured), r.expected_text, mark,
                              f"{r.seconds:.1f}")
            Console().print(table)
        return 0 if all(r.passed for r in results) else 1

    p.set_defaults(func=run)


@_command
def _bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="time every attention backend against its rival (ratios, GFLOP/s, memory)",
        description="Fused vs torch SDPA, explicit-with-weights vs the naive code and vs "
        "nn.MultiheadAttention(need_weights=True), chunked and linear vs softmax; measured "
        "interleaved in one process, median of repeats, against the measured GEMM peak.",
    )
    p.add_argument("--quick", action="store_true", help="a ~20 s smoke run (N=256, 1024)")
    p.add_argument("--sizes", type=int, nargs="+", default=None, metavar="N",
                   help="sequence lengths (default 256 1024 4096 16384)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats per contender")
    p.add_argument("--no-backward", action="store_true", help="forward only")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true", help="print one JSON object")

    def run(args: argparse.Namespace) -> int:
        from attnlab.bench import main_cli

        result = main_cli(quick=args.quick, json_out=args.json, quiet=args.quiet,
                          sizes=args.sizes, repeats=args.repeats, no_backward=args.no_backward)
        if args.json:
            _emit_json(result)
        return 0

    p.set_defaults(func=run)


# -- subcommands above this line; each registers itself with @_command -------------------


def build_parser() -> argparse.ArgumentParser:
    from attnlab import __version__

    parser = argparse.ArgumentParser(
        prog="attnlab",
        description="attnlab, the attention laboratory: exact attention, every claim checked.",
    )
    parser.add_argument("--version", action="version", version=f"attnlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in _REGISTRY:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"attnlab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, FileNotFoundError) as exc:
        if os.environ.get("ATTNLAB_DEBUG"):  # the full traceback, for bug reports
            raise
        print(f"attnlab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
