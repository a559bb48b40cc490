"""The ``attnlab`` command. Thin: it parses arguments and calls the library.

Bad input is one line on stderr and exit code 2, naming the argument and the cause (a model
folder that cannot be read, an ``--out`` that cannot be written, a text too long for the
memory budget, ...); set ``ATTNLAB_DEBUG=1`` for the traceback.

Each subcommand is one ``@_command`` function that adds its parser and sets ``func``;
``python -m attnlab`` is the same program.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
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


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


# --------------------------------------------------------------------------------------
# what every command that runs a model shares: its text, its model, its budget, progress
# --------------------------------------------------------------------------------------


def _add_model_run_arguments(p: argparse.ArgumentParser, media: bool = False) -> None:
    p.add_argument("--model", required=True, metavar="NAME_OR_PATH",
                   help="minilm, smollm2, whisper-tiny-en, a Hugging Face model folder or a "
                        "trained run")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--text", help="the input text")
    g.add_argument("--text-file", metavar="PATH", help="read the input text from a UTF-8 file")
    if media:  # attnlab.tracing.media: vision transformers and speech models
        g.add_argument("--image", metavar="FILE", help="an image (PNG, JPEG, ...) for a "
                       "vision transformer (ViT, DeiT, BEiT, DINOv2, CLIP/SigLIP vision, ...)")
        g.add_argument("--audio", metavar="FILE", help="a 16 kHz mono 16-bit WAV file for a "
                       "speech model (Whisper); its text is --target or the model's own")
    p.add_argument("--truncate", action="store_true",
                   help="cut a text longer than the model's limit instead of refusing it "
                   "(announced on stderr)")
    p.add_argument("--max-memory", metavar="SIZE", default=None,
                   help="refuse an input whose trace would need more memory, e.g. 4GB or "
                   "512MiB (default: half of this machine's memory)")


def _add_target_arguments(p: argparse.ArgumentParser) -> None:
    """--target / --target-file: the text an encoder–decoder model's decoder reads."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--target", metavar="TEXT", default=None,
                   help="encoder-decoder models (T5, BART, Marian, ...): the target text the "
                   "decoder reads, --text being the source (default: the model's own greedy "
                   "generation)")
    g.add_argument("--target-file", metavar="PATH", default=None,
                   help="read the target text from a UTF-8 file")


def _target_text(args: argparse.Namespace) -> tuple[str | None, str]:
    """(the target text or None, the argument it came from); --target-file is read into
    ``args.target``."""
    from attnlab.tracing.budget import check_text

    if getattr(args, "target_file", None) is not None:
        args.target = _read_text_file(args.target_file, "--target-file")
        arg = "--target-file"
    else:
        arg = "--target"
    target = getattr(args, "target", None)
    if target is not None:
        check_text(target, arg)
    return target, arg


def _target_error(exc: ValueError, target: str | None, arg: str) -> UsageError:
    """A tracer's refusal about the target as one line naming the argument."""
    msg = _one_line(exc)
    if target is not None and msg.startswith("target"):
        return UsageError(f"{arg}: {msg}")
    return UsageError(msg)


def _read_text_file(path: str, arg: str = "--text-file") -> str:
    """The UTF-8 text of ``path`` (a byte-order mark is dropped); UsageError otherwise."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise UsageError(f"{arg} {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{arg} {path}: is a directory, not a text file") from None
    except OSError as exc:
        raise UsageError(f"{arg} {path}: cannot read it ({exc.strerror})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{arg} {path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at "
                         f"offset {exc.start}); convert it to UTF-8 first, e.g. with "
                         f"iconv -t UTF-8") from None


class _ModelRun:
    """One command's run of a model: reads the text, loads the model, checks the input's
    tokens against the model's limit and the memory budget before tracing, shows progress
    per layer on stderr, and measures time and peak memory for ``--json``."""

    def __init__(self, args: argparse.Namespace) -> None:
        from rich.console import Console

        from attnlab.tracing.budget import default_budget, parse_memory

        self.args = args
        self.quiet = bool(args.quiet or args.json)
        self.console = Console(stderr=True, quiet=self.quiet)
        self.budget = (parse_memory(args.max_memory) if args.max_memory is not None
                       else default_budget())
        self.tokens_given: list[int] = []
        self.tokens_kept: list[int] = []
        self.t0 = time.perf_counter()

    def text(self) -> tuple[str, str]:
        """(text, the argument it came from), checked for at least one visible character."""
        from attnlab.tracing.budget import check_text

        if self.args.text_file is not None:
            arg, text = "--text-file", _read_text_file(self.args.text_file)
        else:
            arg, text = "--text", self.args.text
        check_text(text, arg)
        return text, arg

    def load(self) -> object:
        from attnlab.models import load

        with self.console.status(f"loading {self.args.model}"):
            try:
                return load(self.args.model, progress=not self.quiet)
            except (ValueError, TypeError, OSError) as exc:
                raise UsageError(f"--model {self.args.model}: {_one_line(exc)}") from exc

    def admit(self, loaded: object, text: str, arg: str, **keep: bool) -> int:
        """Count ``text``'s tokens; refuse or announce a cut; check the memory budget."""
        from attnlab.tracing.budget import check_trace_budget, count_tokens

        try:
            n = count_tokens(loaded.tokenizer, text)
        except ValueError as exc:  # e.g. a symbol a trained run's vocabulary lacks
            raise UsageError(f"{arg}: {_one_line(exc)}") from exc
        limit = int(loaded.max_length)
        kept = n
        if n > limit:
            if not self.args.truncate:
                raise UsageError(f"{arg}: {n} tokens, but {loaded.name} accepts at most "
                                 f"{limit}; shorten it or pass --truncate to keep the first "
                                 f"{limit}")
            kept = limit
            self.announce_cut(arg, kept, n, loaded)
        check_trace_budget(loaded, kept, self.budget, what=arg, **keep)
        self.tokens_given.append(n)
        self.tokens_kept.append(kept)
        return kept

    def announce_cut(self, arg: str, kept: int, given: int, loaded: object) -> None:
        """Every cut --truncate makes, one line on stderr naming the argument."""
        print(f"attnlab {self.args.command}: {arg} truncated: kept {kept} of {given} tokens "
              f"({loaded.name} accepts at most {int(loaded.max_length)})", file=sys.stderr,
              flush=True)

    def announce_target_cut(self, meta: dict, kept: int, arg: str, loaded: object) -> None:
        """The target's cut, as the source's (``meta["target_truncated_from"]``)."""
        given = meta.get("target_truncated_from")
        if given is not None:
            self.announce_cut(arg, kept, int(given), loaded)

    @contextlib.contextmanager
    def layers(self, loaded: object, what: str):
        """A progress bar advanced by each of the model's blocks (stderr; --quiet hides)."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        blocks = _blocks(loaded.model, int(loaded.num_layers))
        with Progress(TextColumn(f"{what}: layer"), BarColumn(), MofNCompleteColumn(),
                      console=self.console, disable=self.quiet or not blocks) as bar:
            task = bar.add_task(what, total=len(blocks))
            done = [0]

            def hook(*_: object) -> None:
                done[0] += 1
                bar.update(task, completed=(done[0] - 1) % len(blocks) + 1)

            handles = [b.register_forward_hook(hook) for b in blocks]
            try:
                yield
            finally:
                for h in handles:
                    h.remove()

    def stats(self) -> dict[str, object]:
        """Tokens, seconds and peak memory (the process's maximum resident set)."""
        from attnlab._proc import peak_rss_bytes

        return {"tokens": self.tokens_kept[0] if len(self.tokens_kept) == 1
                else self.tokens_kept,
                "tokens_given": self.tokens_given[0] if len(self.tokens_given) == 1
                else self.tokens_given,
                "seconds": round(time.perf_counter() - self.t0, 3),
                "peak_memory_bytes": peak_rss_bytes()}


def _media_trace(args: argparse.Namespace, job: _ModelRun, **kw: object) -> object:
    """The trace of ``--image`` or ``--audio`` through the loaded ``--model``: an
    AttentionTrace (image) or a StackedTrace (audio); bad input is one line naming the
    argument."""
    from attnlab.tracing import trace
    from attnlab.tracing.media import read_image, read_wav

    arg, path = ("--image", args.image) if args.image is not None else ("--audio", args.audio)
    try:  # a bad file is refused before the model loads
        (read_image if arg == "--image" else read_wav)(path)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{arg} {path}: {_one_line(exc)}") from exc
    loaded = job.load()
    key = "image" if arg == "--image" else "audio"
    target, targ = _target_text(args)  # a speech model's text (--target or --target-file)
    if target is not None:
        kw["target"] = target
    try:
        with job.layers(loaded, "tracing"):
            t = trace(loaded, **{key: path}, truncate=args.truncate, max_memory=job.budget,
                      **kw)
    except (TypeError, ValueError) as exc:  # UnreadableAttentionError, MemoryBudgetError too
        where = targ if target is not None and str(exc).startswith("target") else (
            f"{arg} {path}")
        raise UsageError(f"{where}: {_one_line(exc)}") from exc
    first = t if not hasattr(t, "names") else t[t.names[0]]
    job.tokens_given.append(first.seq_len)
    job.tokens_kept.append(first.seq_len)
    return t


def _is_seq2seq(loaded: object) -> bool:
    """Whether a loaded model is an encoder–decoder one (several attention stacks)."""
    from attnlab.tracing.tracer import is_seq2seq

    return is_seq2seq(getattr(loaded, "model", None))


def _blocks(model: object, num_layers: int) -> list:
    """The model's list of transformer blocks: the first ModuleList of ``num_layers``."""
    from torch import nn

    if num_layers < 1 or not isinstance(model, nn.Module):
        return []
    for m in model.modules():
        if isinstance(m, nn.ModuleList) and len(m) == num_layers:
            return list(m)
    return []


def _check_out(path: str, suffixes: tuple[str, ...] = ()) -> None:
    from attnlab._io import check_output_file

    if suffixes and not path.lower().endswith(suffixes):
        raise UsageError(f"--out must name a {' or '.join(suffixes)} file, got {path!r}")
    check_output_file(path, arg="--out")


def _save(write: Callable[[], object], out: str) -> object:
    """``write()``, with an OSError turned into one line naming ``--out``."""
    try:
        return write()
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write it ({exc.strerror or _one_line(exc)})"
                         ) from exc


def _definitions_json(defs: dict) -> dict:
    """compute_definitions' result as JSON: each score's definition, source and (L, H)
    values (6 decimals), or why it is unavailable."""
    from attnlab.analysis.literature import DEFINITIONS

    out = {}
    for name, got in defs.items():
        d = DEFINITIONS[name]
        entry = {"summary": d.summary, "source": d.source, "on": d.on}
        if "unavailable" in got:
            entry["unavailable"] = got["unavailable"]
        else:
            entry["scores"] = [[round(float(x), 6) for x in row] for row in got["scores"]]
            entry["info"] = got["info"]
        out[name] = entry
    return out


def _print_definition(name: str, got: dict, model: str, as_json: bool, job: object) -> None:
    """One definition's scores: JSON, or a layer x head table on stdout."""
    from attnlab.analysis.literature import DEFINITIONS

    entry = _definitions_json({name: got})[name]
    if as_json:
        _emit_json({"model": model, "definition": name, **entry, "run": job.stats()})
        return
    if "unavailable" in entry:
        raise UsageError(f"--definition {name}: unavailable for {model}: {entry['unavailable']}")
    from rich.console import Console
    from rich.table import Table

    scores = got["scores"]
    table = Table(title=f"{model}: {name} ({DEFINITIONS[name].summary})",
                  caption=f"source: {DEFINITIONS[name].source}", padding=(0, 1),
                  box=None)
    table.add_column("layer", justify="right")
    for h in range(scores.shape[1]):
        table.add_column(f"H{h}", justify="right")
    for layer, row in enumerate(scores.tolist()):
        table.add_row(str(layer), *(f"{x:.2f}" for x in row))
    Console().print(table)


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
                   help="build only this part: claims, parity, experiments, explorer, "
                   "real-models, architectures, long-contexts, survey, trained (repeatable)")
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
        "positional and diagnostics views, in English and Chinese; an encoder-decoder model "
        "(source --text, --target or its own generation) with a stack selector (encoder, "
        "decoder, cross-attention), an image with the image view.",
    )
    _add_model_run_arguments(p, media=True)
    _add_target_arguments(p)
    p.add_argument("--text2", default=None, help="a second text, shown as a second input")
    p.add_argument("--out", required=True, metavar="FILE.html", help="output file")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true",
                   help="print path, bytes, tokens, seconds and peak memory as JSON")

    def run(args: argparse.Namespace) -> int:
        from attnlab.viz.explorer import Explorer, explore

        _check_out(args.out, (".html", ".htm"))
        job = _ModelRun(args)
        target, target_arg = _target_text(args)
        if args.image is not None or args.audio is not None:
            if args.text2 is not None:
                raise UsageError("--text2 goes with --text: give one --image or --audio alone")
            ex = Explorer([_media_trace(args, job)])
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
                                 truncate=args.truncate)
            except ValueError as exc:
                raise _target_error(exc, target, target_arg) from exc
        path = _save(lambda: ex.save(args.out), args.out)
        size = path.stat().st_size
        stats = job.stats()
        info = {"path": str(path), "bytes": size, "model": ex.traces[0].model,
                **stats, "tokens": [t.seq_len for t in ex.traces]}
        if args.json:
            _emit_json(info)
        else:
            job.console.print(f"wrote {path} ({size / 1e6:.2f} MB, tokens {info['tokens']}, "
                              f"{stats['seconds']:.1f} s)")
        return 0

    p.set_defaults(func=run)


@_command
def _serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the explorer locally: type a text, pick a model, explore it live",
        description="A local web server (FastAPI + uvicorn) that loads each model once and "
        "answers with the explorer. Binds 127.0.0.1 unless --host says otherwise, and answers "
        "only requests addressed to a local name or the bound address (--allow-host adds "
        "names).",
    )
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
    p.add_argument("--quiet", action="store_true", help="no progress or access log")

    def run(args: argparse.Namespace) -> int:
        from attnlab.serve import ServeConfig
        from attnlab.serve import run as serve
        from attnlab.tracing.budget import parse_memory

        extra = {} if args.max_chars is None else {"max_chars": args.max_chars}
        config = ServeConfig(
            host=args.host, port=args.port, cache_dir=args.cache_dir,
            max_memory=None if args.max_memory is None else parse_memory(args.max_memory),
            allowed_hosts=tuple(args.allow_host or ()), **extra)
        if bool(args.model) == bool(args.trace):
            raise UsageError("serve needs --model NAME or --trace FILE (one of the two)")
        if args.trace:
            from attnlab.serve.trace_api import run_traces

            run_traces(args.trace, config, quiet=args.quiet)
            return 0
        serve(args.model, config, quiet=args.quiet)
        return 0

    p.set_defaults(func=run)


@_command
def _trace(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "trace",
        help="capture the attention of one text through a model and save it",
        description="Run TEXT through MODEL (minilm, smollm2, whisper-tiny-en, a Hugging Face "
        "folder or a trained attnlab run) and write its AttentionTrace (safetensors + JSON "
        "metadata); "
        "an encoder-decoder model (source --text, --target or its own generation) writes "
        "its encoder, decoder and cross-attention stacks apart in one file.",
    )
    _add_model_run_arguments(p, media=True)
    _add_target_arguments(p)
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

    def run(args: argparse.Namespace) -> int:
        from attnlab.tracing import trace

        _check_out(args.out)
        job = _ModelRun(args)
        target, target_arg = _target_text(args)
        if args.image is not None or args.audio is not None:
            mt = _media_trace(args, job, qkv=not args.no_qkv, context=args.context)
            path = _save(lambda: mt.save(args.out), args.out)
            stacks = {n: {"layers": x.num_layers, "heads": x.num_heads, "causal": x.causal,
                          "queries": x.seq_len, "keys": x.key_len}
                      for n, x in (mt.items() if hasattr(mt, "names") else [("self", mt)])}
            if args.json:
                _emit_json({"path": str(path), "bytes": path.stat().st_size, "model": mt.model,
                            "stacks": stacks, **job.stats()})
            else:
                job.console.print(f"wrote {path}: {mt!r}", highlight=False, markup=False)
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
            raise _target_error(exc, target, target_arg) from exc
        if hasattr(t, "names"):
            job.announce_target_cut(t.meta, t["decoder"].seq_len, target_arg, loaded)
        path = _save(lambda: t.save(args.out), args.out)
        if args.json and hasattr(t, "names"):  # a StackedTrace: each stack apart
            _emit_json({"path": str(path), "bytes": path.stat().st_size, "model": t.model,
                        "target": t.target, "target_from": t.meta.get("target_from"),
                        "stacks": {n: {"layers": x.num_layers, "heads": x.num_heads,
                                       "causal": x.causal, "queries": x.seq_len,
                                       "keys": x.key_len} for n, x in t.items()},
                        **job.stats()})
        elif args.json:
            _emit_json({"path": str(path), "bytes": path.stat().st_size, "model": t.model,
                        "layers": t.num_layers, "heads": t.num_heads, "causal": t.causal,
                        **job.stats()})
        else:
            job.console.print(f"wrote {path}: {t!r}", highlight=False, markup=False)
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
    p.add_argument("--stack", default=None, metavar="NAME",
                   help="the stack of an encoder–decoder trace: encoder, decoder or cross "
                        "(required for such a trace)")
    p.add_argument("--out", required=True, metavar="PNG_OR_SVG")

    def run(args: argparse.Namespace) -> int:
        from attnlab.tracing import StackedTrace, load_trace
        from attnlab.viz.figures import plot, save_figure

        _check_out(args.out, (".png", ".svg"))
        t = load_trace(args.file)
        if isinstance(t, StackedTrace):
            if args.stack not in t:
                raise UsageError(f"--stack must be one of {', '.join(t.names)} for this "
                                 f"encoder–decoder trace, got {args.stack!r}")
            t = t[args.stack]
        elif args.stack is not None and args.stack != t.stack:
            raise UsageError(f"--stack: this trace holds one stack ({t.stack!r}), "
                             f"got {args.stack!r}")
        try:
            fig = plot(t, args.kind, args.layer, args.head)
        except IndexError as exc:
            raise UsageError(str(exc)) from None
        print(_save(lambda: save_figure(fig, args.out), args.out))
        return 0

    p.set_defaults(func=run)


@_command
def _diagnose(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diagnose",
        help="name the sink, previous-token and induction heads of a model",
        description="Trace TEXT through MODEL and score every head: entropy, max weight, "
        "sink mass, previous-token, self and (causal models, on a repeated random token "
        "sequence) induction scores, redundancy and clusters. An encoder-decoder model is "
        "scored stack by stack (encoder, decoder, cross-attention; cross-attention without "
        "the scores that need queries and keys from one sequence).",
    )
    _add_model_run_arguments(p)
    _add_target_arguments(p)
    p.add_argument("--seed", type=int, default=0, help="seed of the random induction sequence")
    p.add_argument("--definition", metavar="NAME", default=None,
                   help="score every head by one definition only, e.g. tl-induction-mul, "
                   "tl-demo-induction, olsson-prefix-matching, gu-sink, previous (--json "
                   "without it gives all)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true",
                   help="print every score, and tokens, seconds and peak memory, as JSON")

    def run(args: argparse.Namespace) -> int:
        from rich.console import Console

        from attnlab.analysis import diagnose_model
        from attnlab.analysis.literature import DEFINITIONS, compute_definitions

        if args.definition is not None and args.definition not in DEFINITIONS:
            raise UsageError(f"--definition: unknown definition {args.definition!r}; valid "
                             f"names: {', '.join(DEFINITIONS)}")
        job = _ModelRun(args)
        text, arg = job.text()
        target, target_arg = _target_text(args)
        loaded = job.load()
        job.admit(loaded, text, arg)
        seq2seq = _is_seq2seq(loaded)
        if target is not None and not seq2seq:
            raise UsageError(f"{target_arg}: a target is for encoder-decoder models (a "
                             f"source and a target text); {loaded.name} has one attention "
                             "stack and reads one text: put all of it in --text")
        if seq2seq:
            if args.definition is not None:
                raise UsageError(f"--definition: the literature's definitions score the heads "
                                 f"of one-stack models; {loaded.name} is an encoder-decoder "
                                 "model (leave --definition out to score each stack)")
            try:
                with job.layers(loaded, "tracing and scoring heads"):
                    d = diagnose_model(loaded, text, seed=args.seed, truncate=args.truncate,
                                       target=target)
            except ValueError as exc:
                raise _target_error(exc, target, target_arg) from exc
            job.announce_target_cut(d.meta, d.meta.get("target_tokens", 0), target_arg, loaded)
            if args.json:
                _emit_json({**d.to_json(), "definitions": None, "run": job.stats()})
            else:
                out = Console()
                for table in d.tables():
                    out.print(table)
            return 0
        if args.definition is not None:
            with job.layers(loaded, f"scoring heads: {args.definition}"):
                got = compute_definitions(loaded, text, [args.definition], seed=args.seed,
                                          truncate=args.truncate)[args.definition]
            _print_definition(args.definition, got, loaded.name, args.json, job)
            return 0
        with job.layers(loaded, "tracing and scoring heads"):
            d = diagnose_model(loaded, text, seed=args.seed, truncate=args.truncate)
        if args.json:
            with job.layers(loaded, "literature definitions"):
                defs = compute_definitions(loaded, text, seed=args.seed,
                                           truncate=args.truncate, own=d.scores)
            _emit_json({**d.to_json(), "definitions": _definitions_json(defs),
                        "run": job.stats()})
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
        "training.png. Resumable (--resume); under `torchrun -m attnlab.train` it runs DDP. "
        "DIR must be new, empty or an attnlab run: attnlab never overwrites a file it did not "
        "write.",
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
            if r.heads_text():
                msg += "\n" + r.heads_text()
            Console(stderr=True).print(msg)
        return 0

    p.set_defaults(func=run)


@_command
def _verify(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify",
        help="run the mathematical experiments and check each against the theory",
        description="Compute every claim of the articles on real numbers (qk-variance, "
        "softmax-saturation, ...), print measured vs expected and the verdict. A claim the "
        "numbers refute, as its experiment expected, is a finding (exit 0); a verdict other "
        "than the one expected is a defect (exit 1).",
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
            for col, just in (("name", "left"), ("origin", "left"), ("measured", "right"),
                              ("expected", "right"), ("verdict", "left"), ("s", "right")):
                table.add_column(col, justify=just)
            for r in results:
                failed = [c.name for c in r.checks if not c.passed]
                if r.finding:
                    mark = "[yellow]does not hold — finding[/]"
                elif r.passed:
                    mark = "[green]holds[/]"
                else:
                    mark = (f"[red]DEFECT: {r.verdict}, expected "
                            f"{'holds' if r.expect_holds else 'does not hold'}[/]")
                if failed and not r.finding:
                    mark += f" [red]({'; '.join(failed)})[/]"
                elif failed:
                    mark += f" [yellow]({'; '.join(failed)})[/]"
                table.add_row(r.name, r.origin, fmt_num(r.measured), r.expected_text, mark,
                              f"{r.seconds:.1f}")
            Console().print(table)
            findings = [r for r in results if r.finding]
            for r in findings:
                Console().print(f"[yellow]finding[/] {r.name}: {r.expect_why}")
        return 0 if all(r.passed for r in results) else 1

    p.set_defaults(func=run)


@_command
def _claims(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "claims",
        help="every claim of the two articles, the experiments that decide it, its verdict",
        description="The claim inventory: each claim, code listing and recommendation of the "
        "two articles with a verbatim quote, the experiments whose numbers decide it (run now, "
        "without figures) and the verdict they give: holds, holds under stated conditions, "
        "does not hold, or not testable (with the reason). attnlab's own extensions are listed "
        "apart. Exit 1 only when an experiment gives a verdict other than the one it expected "
        "(a defect); a claim that does not hold is a result, exit 0.",
    )
    p.add_argument("--only", action="append", default=None, metavar="ID",
                   help="only this claim, e.g. 001-pe-linear-shift (repeatable): runs only the "
                   "experiments that decide it")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print only JSON on stdout")
    out.add_argument("--markdown", action="store_true",
                     help="print only the inventory as Markdown tables on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress output")

    def run(args: argparse.Namespace) -> int:
        from attnlab.experiments import claims as inventory
        from attnlab.experiments import run_all

        try:
            chosen = ([inventory.claim(i) for i in dict.fromkeys(args.only)]
                      if args.only else list(inventory.CLAIMS))
        except ValueError as exc:
            raise UsageError(f"--only: {exc}") from None
        names = inventory.covering_experiments(chosen)
        if not args.only:
            names += [e.experiment for e in inventory.EXTENSIONS if e.experiment not in names]
        results = (run_all(names, seed=args.seed,
                           quiet=args.quiet or args.json or args.markdown) if names else [])
        verdicts = inventory.verdicts(results, chosen)
        extensions = inventory.extension_verdicts(results) if not args.only else []
        if args.json:
            _emit_json(inventory.to_json(verdicts, extensions))
        elif args.markdown:
            sys.stdout.write(inventory.markdown(verdicts, extensions))
        else:
            _print_claims(verdicts, extensions, results)
        return 0 if all(r.passed for r in results) else 1

    p.set_defaults(func=run)


def _print_claims(verdicts: list, extensions: list, results: list) -> None:
    """The inventory as rich tables on stdout, then the verdict counts and any defect."""
    from rich.console import Console
    from rich.table import Table

    from attnlab.experiments.claims import counts

    colour = {"holds": "green", "holds under stated conditions": "cyan",
              "does not hold": "yellow", "not testable": "dim"}
    table = Table(title="attnlab claims", show_lines=True)
    for col in ("id", "quote", "experiments", "verdict", "measured or reason"):
        table.add_column(col, overflow="fold")
    for v in verdicts:
        c = v.claim
        if c.testable:
            note = "\n".join(f"{m.experiment}{' (against)' if m.against else ''}: {m.text()}"
                             for m in v.measurements)
            if c.conditions_en:
                note += f"\nconditions: {c.conditions_en}"
        else:
            note = c.not_testable_en
        table.add_row(c.id, c.quote_zh, "\n".join(c.covered_by) or "—",
                      f"[{colour[v.verdict]}]{v.verdict}[/]", note)
    out = Console()
    out.print(table)
    if extensions:
        ext = Table(title="attnlab's own extensions (not claims of the articles)")
        for col in ("experiment", "what it adds", "verdict", "measured"):
            ext.add_column(col, overflow="fold")
        for e in extensions:
            ext.add_row(e.extension.experiment, e.extension.what_en, e.verdict,
                        e.measurement.text())
        out.print(ext)
    out.print(", ".join(f"{n} {name}" for name, n in counts(verdicts).items()))
    for r in results:
        if not r.passed:
            out.print(f"[red]DEFECT[/] {r.name}: {r.verdict}, expected "
                      f"{'holds' if r.expect_holds else 'does not hold'}")


@_command
def _bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="time every attention backend against its rival (ratios, GFLOP/s, memory)",
        description="Fused vs torch SDPA, explicit-with-weights vs the naive code and vs "
        "nn.MultiheadAttention(need_weights=True), chunked and linear vs softmax; measured "
        "interleaved in one process, median of repeats, against the measured GEMM rate. "
        "The default run (forward, N = 256 1024 4096; chunked and torch SDPA at N = 32768 "
        "keys on 4096 query rows) takes about two minutes on two quiet cores and prints "
        "the whole table.",
    )
    p.add_argument("--quick", action="store_true", help="a ~20 s smoke run (N=256, 1024)")
    p.add_argument("--sizes", type=int, nargs="+", default=None, metavar="N",
                   help="sequence lengths (default 256 1024 4096)")
    p.add_argument("--backward", action="store_true",
                   help="also time forward+backward (about 4x longer)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats per contender")
    p.add_argument("--long-rows", type=int, default=None, metavar="ROWS",
                   help="query rows of the N = 32768 probe (default 4096; 32768: all, "
                   "8x longer)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (keys: see `pydoc attnlab.bench`)")

    def run(args: argparse.Namespace) -> int:
        from attnlab.bench import main_cli

        result = main_cli(quick=args.quick, json_out=args.json, quiet=args.quiet,
                          sizes=args.sizes, repeats=args.repeats, backward=args.backward,
                          long_rows=args.long_rows)
        if args.json:
            _emit_json(result)
        return 0

    p.set_defaults(func=run)


@_command
def _survey(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "survey",
        help="score every head over a corpus: means, histograms, roles, Sink%% (resumable)",
        description="Run a corpus through MODEL a batch at a time and aggregate, per head, "
        "every score (attnlab's, TransformerLens's head detector, Gu et al.'s sink), the "
        "share of texts in which each head plays each role and the attention by relative "
        "distance; write DIR/survey.json and the page DIR/index.html. The state is saved "
        "atomically every few batches: run the same command again to resume. Under "
        "`torchrun --nproc_per_node=N -m attnlab survey ...` the batches are shared among "
        "N processes (gloo on CPU, nccl on GPU) and the sums reduced with "
        "torch.distributed; across machines add torchrun's --nnodes, --node_rank and "
        "--rdzv_endpoint (or --master_addr/--master_port).",
    )
    p.add_argument("--model", required=True, metavar="NAME_OR_PATH",
                   help="minilm, smollm2, whisper-tiny-en, a Hugging Face model folder or a "
                        "trained run")
    p.add_argument("--texts", metavar="FILE", default=None,
                   help="a .txt file (one text a line) or .jsonl (a \"text\" field a line); "
                   "default: the paragraphs of attnlab's own docstrings, written to "
                   "DIR/corpus.txt")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--batch-size", type=int, default=8, metavar="N",
                   help="texts per forward pass (default 8)")
    p.add_argument("--max-tokens", type=int, default=64, metavar="N",
                   help="keep each text's first N tokens, BOS included (default 64: "
                   "Gu et al.'s input length)")
    p.add_argument("--checkpoint-every", type=int, default=16, metavar="BATCHES",
                   help="save the state every this many batches (default 16)")
    p.add_argument("--no-probes", action="store_true",
                   help="skip the random-token probes (TransformerLens demo induction "
                   "score, Olsson et al. prefix matching)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: a GPU per process under torchrun when there are enough")
    p.add_argument("--threads", type=int, default=1, metavar="N",
                   help="torch threads per process (default 1, as torchrun sets: on a "
                   "shared or busy CPU more threads per process often run slower)")
    p.add_argument("--wait", action="store_true",
                   help="if another survey is writing --out, wait for it to end (default: "
                   "refuse at once, naming its pid)")
    p.add_argument("--restart", action="store_true",
                   help="discard the state saved in DIR and start over")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true",
                   help="print the headline numbers as JSON (rank 0)")

    def run(args: argparse.Namespace) -> int:
        from pathlib import Path

        from rich.console import Console

        from attnlab._io import atomic_write_text, check_output_dir, lock_folder
        from attnlab.analysis.survey import Corpus, SurveyConfig, builtin_corpus, survey

        rank = int(os.environ.get("RANK", "0"))
        for flag, value in (("--batch-size", args.batch_size), ("--max-tokens", args.max_tokens),
                            ("--checkpoint-every", args.checkpoint_every),
                            ("--threads", args.threads)):
            if value < (2 if flag == "--max-tokens" else 1):
                raise UsageError(f"{flag} must be an integer >= "
                                 f"{2 if flag == '--max-tokens' else 1}, got {value}")
        check_output_dir(args.out, arg="--out")
        out = Path(args.out)
        # one survey writes --out at a time: refused (or waited for) before the model loads
        # (under torchrun, survey() locks each rank and the ranks agree)
        single = int(os.environ.get("WORLD_SIZE", "1")) <= 1
        with (lock_folder(out, name="survey-rank-0", wait=args.wait) if single
              else contextlib.nullcontext()):
            if args.texts is not None:
                corpus = Corpus(args.texts, what="--texts")
                corpus.scan()  # every line checked before the model loads
            else:
                texts = builtin_corpus()
                corpus = Corpus.of(texts, name="attnlab docstrings")
                if rank == 0:
                    _save(lambda: atomic_write_text(out / "corpus.txt", "\n".join(texts) + "\n"),
                          args.out)
            cfg = SurveyConfig(batch_size=args.batch_size, max_tokens=args.max_tokens,
                               checkpoint_every=args.checkpoint_every, probes=not args.no_probes)
            quiet = args.quiet or args.json or rank != 0
            console = Console(stderr=True, quiet=quiet)
            with console.status(f"loading {args.model}"):
                from attnlab.models import load

                try:
                    loaded = load(args.model, progress=not quiet)
                except (ValueError, TypeError, OSError) as exc:
                    raise UsageError(f"--model {args.model}: {_one_line(exc)}") from exc
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            with Progress(TextColumn("survey: batch"), BarColumn(), MofNCompleteColumn(),
                          console=console, disable=quiet) as bar:
                task = bar.add_task("survey", total=None)
                result = survey(loaded, corpus, out, config=cfg, device=args.device,
                                restart=args.restart, threads=args.threads, wait=args.wait,
                                on_batch=lambda d, t: bar.update(task, completed=d, total=t))
            if rank != 0:
                return 0
            from attnlab.report.survey import write_page

            page = _save(lambda: write_page(result.to_json(), out / "index.html"), args.out)
            head = result.headline()
            if args.json:
                _emit_json({"survey": str(out / "survey.json"), "page": str(page), **head})
            elif not args.quiet:
                from attnlab.report.survey import headline_text

                Console().print(headline_text(head), highlight=False, markup=False)
            return 0

    p.set_defaults(func=run)


@_command
def _support(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "support",
        help="which Hugging Face architecture families attnlab traces exactly",
        description="The support matrix: every model family of the installed transformers; "
        "each text decoder, encoder and encoder-decoder is built as a tiny random model and "
        "its trace (encoder, decoder and cross-attention stacks apart) checked "
        "against the model's own eager attention (exact, refused with the reason, no "
        "attention, not built); other kinds are listed as not yet. Exit 1 if a family is "
        "traced wrongly (a defect).",
    )
    p.add_argument("--family", action="append", default=None, metavar="MODEL_TYPE",
                   help="only this family, e.g. llama (repeatable)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print only JSON on stdout")
    out.add_argument("--markdown", action="store_true",
                     help="print only the matrix as a Markdown table, one row per family "
                          "(docs/support.md)")
    out.add_argument("--summary", action="store_true",
                     help="print only the matrix in brief as Markdown, one row per status "
                          "and kind (the table of docs/families.md)")

    def run(args: argparse.Namespace) -> int:
        from attnlab.tracing import support

        results = support.support_matrix(args.family)
        if args.json:
            _emit_json(support.to_json(results))
        elif args.markdown:
            sys.stdout.write(support.to_markdown(results))
        elif args.summary:
            sys.stdout.write(support.to_summary(results))
        else:
            for r in results:
                print(f"{r.family:28} {r.kind:16} {r.status:13} {r.detail()}")
            print(", ".join(f"{n} {s}" for s, n in support.counts(results).items() if n))
        return 1 if any(r.status == "wrong" for r in results) else 0

    p.set_defaults(func=run)


# -- subcommands above this line; each registers itself with @_command -------------------


def _version() -> str:
    """The installed distribution's version (the root package is not imported here)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attnlab")
    except PackageNotFoundError:  # pragma: no cover (running from a bare source tree)
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnlab",
        description="attnlab, the attention laboratory: exact attention, every claim checked.",
    )
    parser.add_argument("--version", action="version", version=f"attnlab {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in _REGISTRY:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``attnlab`` command; every expected failure is one line on stderr, exit 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (UsageError, ValueError, TypeError, OSError, MemoryError) as exc:
        if os.environ.get("ATTNLAB_DEBUG"):  # the full traceback, for bug reports
            raise
        msg = _one_line(exc)
        if isinstance(exc, MemoryError):
            msg = ("ran out of memory; give a shorter text or a lower --max-memory "
                   "(the budget is checked before a model runs)")
        print(f"attnlab {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
