"""What every command that runs a model on one input shares (trace, diagnose, explore):
its options (``--model``, ``--text``/``--text-file``/``--image``/``--audio``,
``--truncate``, ``--max-memory``, ``--target``/``--target-file``) and :class:`ModelRun`,
which reads the text, loads the model, admits the input's tokens against the model's limit
and the memory budget before anything runs, announces every cut on stderr, shows progress
per layer and measures time and peak memory for ``--json``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from attnlab._cli import UsageError, read_text_file
from attnlab._text import one_line, too_long

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    from attnlab.tracing import StackedTrace

__all__ = ["ModelRun", "add_model_run_arguments", "add_run_arguments", "add_target_arguments",
           "blocks",
           "read_saved_trace", "target_error", "target_text"]


def add_model_run_arguments(p: argparse.ArgumentParser, media: bool = False,
                            optional: bool = False) -> None:
    """--model and the input (--text / --text-file, and --image / --audio with ``media``);
    ``optional``: neither is required (the command has another source, e.g. a saved trace,
    and checks the combination itself)."""
    p.add_argument("--model", required=not optional, metavar="NAME_OR_PATH",
                   help="minilm, smollm2, whisper-tiny-en, a Hugging Face model folder or a "
                        "trained run")
    g = p.add_mutually_exclusive_group(required=not optional)
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
    add_run_arguments(p)


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """How the model runs (:class:`attnlab.tracing.run_settings.RunSettings`): --chat,
    --generate and its sampling, --dtype and --device."""
    g = p.add_argument_group("how the model runs")
    g.add_argument("--chat", action="store_true",
                   help="wrap the text as a user turn in the tokenizer's own chat template "
                   "(chat models such as smollm2)")
    g.add_argument("--generate", type=int, default=0, metavar="N",
                   help="append up to N tokens of the model's own continuation, traced "
                   "through its KV cache step by step (causal models; greedy by default)")
    g.add_argument("--temperature", type=float, default=None, metavar="T",
                   help="with --generate: sample at this temperature instead of greedy")
    g.add_argument("--top-p", type=float, default=None, metavar="P",
                   help="with --generate: sample from the smallest set of tokens whose "
                   "probability reaches P")
    g.add_argument("--seed", type=int, default=None, metavar="S",
                   help="seed of the sampling (and of diagnose's random induction sequence, "
                   "default 0)")
    g.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                   help="run the model in this precision (default: as it loads, float32)")
    g.add_argument("--device", default=None, metavar="{auto,cpu,cuda,mps}",
                   help="run the model there (default: the CPU; auto: CUDA, else MPS, else "
                   "the CPU); the trace comes back to this machine's memory layer by layer")


def add_target_arguments(p: argparse.ArgumentParser) -> None:
    """--target / --target-file: the text an encoder–decoder model's decoder reads."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--target", metavar="TEXT", default=None,
                   help="encoder-decoder models (T5, BART, Marian, ...): the target text the "
                   "decoder reads, --text being the source (default: the model's own greedy "
                   "generation)")
    g.add_argument("--target-file", metavar="PATH", default=None,
                   help="read the target text from a UTF-8 file")


def target_text(args: argparse.Namespace) -> tuple[str | None, str]:
    """(the target text or None, the argument it came from); --target-file is read into
    ``args.target``."""
    from attnlab.tracing.budget import check_text

    if getattr(args, "target_file", None) is not None:
        args.target = read_text_file(args.target_file, "--target-file")
        arg = "--target-file"
    else:
        arg = "--target"
    target = getattr(args, "target", None)
    if target is not None:
        check_text(target, arg)
    return target, arg


def target_error(exc: Exception, target: str | None, arg: str) -> UsageError:
    """A tracer's refusal about the target as one line naming the argument."""
    msg = one_line(exc)
    if target is not None and msg.startswith("target"):  # the argument's own name for it
        return UsageError(arg + msg[len("target"):])
    for name in ("generate", "chat", "dtype", "device"):  # how the model runs: its flag
        if msg.startswith(name + ":"):
            return UsageError(f"--{name}{msg[len(name):]}")
    return UsageError(msg)


def blocks(model: Any, num_layers: int) -> list:
    """The model's list of transformer blocks: the first ModuleList of ``num_layers``."""
    from torch import nn

    if num_layers < 1 or not isinstance(model, nn.Module):
        return []
    for m in model.modules():
        if isinstance(m, nn.ModuleList) and len(m) == num_layers:
            return list(m)
    return []


class ModelRun:
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
        #: Whether :meth:`admit` chose to stream the trace to its file (one layer counted).
        self.streaming = False
        self.t0 = time.perf_counter()

    def text(self) -> tuple[str, str]:
        """(text, the argument it came from), checked for at least one visible character."""
        from attnlab.tracing.budget import check_text

        if self.args.text_file is not None:
            arg, text = "--text-file", read_text_file(self.args.text_file)
        else:
            arg, text = "--text", self.args.text
        check_text(text, arg)
        return text, arg

    def load(self) -> Any:
        """The ``--model``, placed as ``--dtype`` and ``--device`` say (a device or dtype
        this machine cannot run is one line naming the flag, before the model loads)."""
        import dataclasses

        from attnlab.models import load
        from attnlab.tracing.run_settings import resolve_device, resolve_dtype
        from attnlab.tracing.tracer import placed

        args = self.args
        device, dtype = getattr(args, "device", None), getattr(args, "dtype", None)
        try:
            dev = resolve_device(device)
        except (ValueError, TypeError) as exc:
            raise UsageError(f"--device {device}: {one_line(exc).removeprefix('device: ')}"
                             ) from exc
        try:
            resolve_dtype(dtype, dev)
        except ValueError as exc:
            raise UsageError(f"--dtype {dtype}: {one_line(exc).removeprefix('dtype: ')}"
                             ) from exc
        self.run_settings()  # the sampling flags, checked before the model loads
        with self.console.status(f"loading {args.model}"):
            try:
                loaded = load(args.model, progress=not self.quiet)
            except (ValueError, TypeError, OSError) as exc:
                raise UsageError(f"--model {args.model}: {one_line(exc)}") from exc
        new = getattr(args, "generate", 0)
        if new and not getattr(loaded, "causal", False):
            raise UsageError(f"--generate {new}: {loaded.name} is not a causal language model "
                             "(it reads its text in both directions, or a source and a "
                             "target); generation is for decoder-only models such as smollm2")
        if dev is None and dtype is None:
            return loaded
        net = placed(loaded.model, dtype, dev)
        if net is loaded.model:
            return loaded
        if dataclasses.is_dataclass(loaded):
            return dataclasses.replace(loaded, model=net)
        loaded.model = net
        return loaded

    def run_settings(self) -> dict[str, Any]:
        """The tracer's keywords for --chat, --generate, --temperature, --top-p and --seed
        (only those given), checked: a bad value is one line naming its flag."""
        from attnlab.tracing.run_settings import RunSettings

        a = self.args
        kw: dict[str, Any] = {
            "chat": bool(getattr(a, "chat", False)), "generate": getattr(a, "generate", 0),
            "temperature": getattr(a, "temperature", None), "top_p": getattr(a, "top_p", None),
            "seed": getattr(a, "seed", None) if getattr(a, "generate", 0) else None}
        try:
            RunSettings(**kw)
        except (ValueError, TypeError) as exc:
            msg = one_line(exc)
            if msg.startswith("temperature, top_p and seed"):
                raise UsageError("--temperature, --top-p and --seed shape a generation: give "
                                 "--generate N too") from exc
            name = msg.split(" ", 1)[0]
            flag = "--" + name.replace("_", "-")
            if name in ("generate", "temperature", "top_p", "seed", "chat"):
                raise UsageError(f"{flag}: {msg.split(' ', 1)[1]}") from exc
            raise UsageError(msg) from exc
        return {k: v for k, v in kw.items() if v not in (None, False, 0)}

    def prompt(self, loaded: Any, text: str) -> str:
        """The text as the model reads it: inside its chat template with --chat."""
        if not getattr(self.args, "chat", False):
            return text
        from attnlab.tracing.run_settings import chat_text

        try:
            return chat_text(loaded.tokenizer, text, loaded.name)
        except ValueError as exc:
            raise UsageError(f"--chat: {one_line(exc).removeprefix('chat: ')}") from exc

    def admit(self, loaded: Any, text: str, arg: str, *, stream: bool | None = False,
              **keep: bool) -> int:
        """Count ``text``'s tokens; refuse or announce a cut; check the memory budget.

        The limit is the model's window, or ``--max-tokens`` where the command has one
        (past the window only for rotary-position models, with a warning on stderr:
        :func:`attnlab.tracing.tracer.token_limit`). ``stream``: ``False`` checks the whole
        trace against the budget; ``True`` counts one layer (the trace streams to its file);
        ``None`` streams only when the whole trace would not fit, and says so on stderr.
        :attr:`streaming` tells which was chosen.
        """
        from attnlab.tracing.budget import MemoryBudgetError, check_trace_budget, count_tokens
        from attnlab.tracing.tracer import beyond_window_note, token_limit

        try:
            n = count_tokens(loaded.tokenizer, self.prompt(loaded, text))
        except ValueError as exc:  # e.g. a symbol a trained run's vocabulary lacks
            raise UsageError(f"{arg}: {one_line(exc)}") from exc
        new = int(getattr(self.args, "generate", 0) or 0)
        if new and n + new > int(loaded.max_length) and not getattr(self.args, "max_tokens",
                                                                     None):
            raise UsageError(f"--generate {new}: {arg} has {n} tokens and {new} more exceed "
                             f"{loaded.name}'s limit of {int(loaded.max_length)} tokens")
        n += new
        max_tokens = getattr(self.args, "max_tokens", None)
        try:
            limit = token_limit(loaded, max_tokens)
        except ValueError as exc:
            raise UsageError(f"--max-tokens {max_tokens}: "
                             f"{one_line(exc).removeprefix('max_tokens: ')}") from exc
        kept = n
        if n > limit:
            if not self.args.truncate:
                raise UsageError(too_long(arg, n, limit, "tokens"))
            kept = limit
            self.announce_cut(arg, kept, n, loaded, limit)
        window = int(loaded.max_length)
        if kept > window:
            print(f"attnlab {self.args.command}: warning: "
                  f"{beyond_window_note(loaded.name, kept, window)}", file=sys.stderr,
                  flush=True)
        if stream:
            check_trace_budget(loaded, kept, self.budget, what=arg, streamed=True, **keep)
            self.streaming = True
        else:
            try:
                check_trace_budget(loaded, kept, self.budget, what=arg, **keep)
            except MemoryBudgetError as whole:
                if stream is False:
                    raise
                one = check_trace_budget(loaded, kept, self.budget, what=arg, streamed=True,
                                         **keep)
                self.streaming = True
                print(f"attnlab {self.args.command}: {one_line(whole).split(';')[0]}: "
                      f"streaming the trace to its file layer by layer instead "
                      f"({one.describe()})", file=sys.stderr, flush=True)
        self.tokens_given.append(n)
        self.tokens_kept.append(kept)
        return kept

    def announce_cut(self, arg: str, kept: int, given: int, loaded: Any,
                     limit: int | None = None) -> None:
        """Every cut --truncate makes, one line on stderr naming the argument (``limit``:
        a --max-tokens other than the model's own limit)."""
        most = (f"{loaded.name} accepts at most {int(loaded.max_length)}"
                if limit is None or limit == int(loaded.max_length) else f"--max-tokens {limit}")
        print(f"attnlab {self.args.command}: {arg} truncated: kept {kept} of {given} tokens "
              f"({most})", file=sys.stderr, flush=True)

    def announce_target_cut(self, meta: Mapping[str, object], kept: int, arg: str,
                            loaded: Any) -> None:
        """The target's cut, as the source's (``meta["target_truncated_from"]``, the tokens
        before the cut, in a trace's or its diagnostics' meta)."""
        given = meta.get("target_truncated_from")
        if isinstance(given, int):
            self.announce_cut(arg, kept, given, loaded)

    @contextlib.contextmanager
    def layers(self, loaded: Any, what: str):
        """A progress bar advanced by each of the model's blocks (stderr; --quiet hides)."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        found = blocks(loaded.model, int(loaded.num_layers))
        new = int(getattr(self.args, "generate", 0) or 0)
        # a generation: the prompt's pass, then one pass per new token (the bar counts them)
        unit = f"{what} and generating {new} tokens: layer pass" if new else f"{what}: layer"
        total = len(found) * (new + 1)
        with Progress(TextColumn(unit), BarColumn(), MofNCompleteColumn(),
                      console=self.console, disable=self.quiet or not found) as bar:
            task = bar.add_task(what, total=total)
            done = [0]

            def hook(*_: object) -> None:
                done[0] += 1
                bar.update(task, completed=(done[0] - 1) % total + 1)

            handles = [b.register_forward_hook(hook) for b in found]
            try:
                yield
            finally:
                for h in handles:
                    h.remove()

    def media_trace(self, **kw: Any) -> Any:
        """The trace of ``--image`` or ``--audio`` through the loaded ``--model``: an
        AttentionTrace (image) or a StackedTrace (audio); bad input is one line naming the
        argument."""
        from attnlab.tracing import trace
        from attnlab.tracing.inputs import read_image, wav_header

        args = self.args
        arg, path = ("--image", args.image) if args.image is not None else ("--audio",
                                                                              args.audio)
        try:  # a bad file is refused before the model loads (a WAV by its header alone)
            (read_image if arg == "--image" else wav_header)(path)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{arg} {path}: {one_line(exc)}") from exc
        loaded = self.load()
        key = "image" if arg == "--image" else "audio"
        target, targ = target_text(args)  # a speech model's text (--target or --target-file)
        if target is not None:
            kw["target"] = target
        try:
            with self.layers(loaded, "tracing"):
                t = trace(loaded, **{key: path}, truncate=args.truncate,
                          max_memory=self.budget, **kw)
        except (TypeError, ValueError) as exc:  # UnreadableAttentionError, MemoryBudgetError
            if target is not None and str(exc).startswith("target"):
                raise target_error(exc, target, targ) from exc
            raise UsageError(f"{arg} {path}: {one_line(exc)}") from exc
        first = t[t.names[0]] if is_stacked(t) else t
        self.tokens_given.append(first.seq_len)
        self.tokens_kept.append(first.seq_len)
        return t

    def stats(self) -> dict[str, object]:
        """Tokens, seconds and peak memory (the process's maximum resident set)."""
        from attnlab._proc import peak_rss_bytes

        a = self.args
        run = {"dtype": getattr(a, "dtype", None) or "float32",
               "device": str(getattr(a, "device", None) or "cpu")}
        if getattr(a, "device", None) == "auto":
            from attnlab.tracing.run_settings import resolve_device

            run["device"] = str(resolve_device("auto"))
        return {**run, "tokens": self.tokens_kept[0] if len(self.tokens_kept) == 1
                else self.tokens_kept,
                "tokens_given": self.tokens_given[0] if len(self.tokens_given) == 1
                else self.tokens_given,
                "seconds": round(time.perf_counter() - self.t0, 3),
                "peak_memory_bytes": peak_rss_bytes()}


class GenerationJSON(TypedDict):
    """What ``--json`` says of a trace's generation (:func:`generation_json`)."""

    prompt_tokens: int | None  # the prompt's tokens (the trace's, without a generation)
    generated: list[int]  # the generated tokens' positions
    generated_text: str | None
    chat: bool  # whether the text was put in the model's chat template


def generation_json(trace: Any) -> GenerationJSON:
    """What ``--json`` says of a trace's generation: ``prompt_tokens``, ``generated`` (the
    generated tokens' positions; empty without --generate) and the generated text."""
    meta = getattr(trace, "meta", {}) or {}
    gen = meta.get("generation") or {}
    return {"prompt_tokens": meta.get("prompt_tokens", getattr(trace, "seq_len", None)),
            "generated": list(meta.get("generated", [])),
            "generated_text": gen.get("text"), "chat": bool(meta.get("chat"))}


def is_stacked(trace: object) -> TypeIs[StackedTrace]:
    """Whether a trace is an encoder–decoder model's StackedTrace (several stacks)."""
    from attnlab.tracing import StackedTrace

    return isinstance(trace, StackedTrace)


def read_saved_trace(path: str, arg: str = "--trace", *, group: Any = None) -> Any:
    """The saved trace a command reads instead of running a model (``diagnose``,
    ``explore``, ``serve``): mapped and checked where the file allows
    (:func:`attnlab.tracing.open_trace`); a missing or unreadable file is a usage error
    naming ``arg``. ``group``: the ``torchrun`` group the command runs in
    (:func:`attnlab._dist.join`), whose processes check the file together, each its share
    (:func:`attnlab.tracing.verify_across`), rather than each the whole file."""
    from attnlab.tracing import open_trace, verify_across
    from attnlab.tracing.trace_file import TraceFormatError

    try:
        return verify_across(open_trace(path, verify=False), group)
    except FileNotFoundError:
        raise UsageError(f"{arg}: no such file: {path!r}") from None
    except (TraceFormatError, ValueError) as exc:
        raise UsageError(f"{arg} {path!r}: not a readable attnlab trace: {exc}") from None
