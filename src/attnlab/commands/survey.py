"""Run a corpus through MODEL a batch at a time and aggregate, per head, every score
(attnlab's, TransformerLens's head detector, Gu et al.'s sink), the share of texts in which
each head plays each role and the attention by relative distance; write DIR/survey.json and
the page DIR/index.html. The state is saved atomically every few batches: run the same
command again to resume. Under `torchrun --nproc_per_node=N -m attnlab survey ...` the
batches are shared among N processes (gloo on CPU, nccl on GPU; with fewer batches than
processes, the heads are) and the sums reduced with torch.distributed; across machines
add torchrun's --nnodes, --node_rank and --rdzv_endpoint (or --master_addr/--master_port).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import warnings

from attnlab._options import add_dataclass_options, positive_int
from attnlab.analysis.survey_config import SurveyConfig

__all__ = ["HELP", "OPTIONS", "add_arguments", "run_from_args"]

HELP = "score every head over a corpus: means, histograms, roles, Sink%% (resumable)"

#: SurveyConfig's fields as options, with their help; their types, defaults and checks are
#: the dataclass's (its module imports no torch, so ``--help`` stays instant).
OPTIONS = {
    "batch_size": "texts per forward pass",
    "max_tokens": "keep each text's first N tokens, BOS included (Gu et al.'s input "
                  "length is 64)",
    "checkpoint_every": "save the state every this many batches",
    "bins": "histogram bins per score",
    "max_distance": "relative distances profiled one by one; farther ones share a bin on "
                    "each side",
    "sink_tokens": "input length of Gu et al.'s sink count",
    "epsilon": "Gu et al.'s sink threshold",
    "seed": "seed of the random-token probes",
    "probes": "skip the random-token probes (TransformerLens demo induction score, Olsson "
              "et al. prefix matching)",
}
FLAGS = {"probes": "--no-probes"}
METAVARS = {"batch_size": "N", "max_tokens": "N", "checkpoint_every": "BATCHES", "bins": "N",
            "max_distance": "N", "sink_tokens": "N", "epsilon": "P", "seed": "N"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, metavar="NAME_OR_PATH",
                   help="minilm, smollm2, whisper-tiny-en, a Hugging Face model folder or a "
                        "trained run")
    p.add_argument("--texts", metavar="FILE", default=None,
                   help="a .txt file (one text a line) or .jsonl (a \"text\" field a line); "
                   "default: the paragraphs of attnlab's own docstrings, written to "
                   "DIR/corpus.txt")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    add_dataclass_options(p, SurveyConfig, help=OPTIONS, flags=FLAGS, metavars=METAVARS)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: a GPU per process under torchrun when there are enough")
    p.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                   help="run the model in this precision (default: as it loads, float32); "
                   "the traces' log-sum-exp stays float32")
    p.add_argument("--threads", type=positive_int, default=1, metavar="N",
                   help="torch threads per process (default 1, as torchrun sets: on a "
                   "shared or busy CPU more threads per process often run slower)")
    p.add_argument("--max-memory", metavar="SIZE", default=None,
                   help="refuse settings whose batch would need more memory per process, "
                   "e.g. 4GB or 512MiB (default: half of this machine's memory)")
    p.add_argument("--wait", action="store_true",
                   help="if another survey is writing --out, wait for it to end (default: "
                   "refuse at once, naming its pid)")
    p.add_argument("--restart", action="store_true",
                   help="discard the state saved in DIR and start over")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true",
                   help="print the headline numbers as JSON (rank 0)")


def _corpus(args: argparse.Namespace, rank: int):
    """--texts, every line checked before the model loads; or attnlab's docstrings, which
    rank 0 writes to DIR/corpus.txt."""
    from pathlib import Path

    from attnlab._cli import save
    from attnlab._io import atomic_write_text
    from attnlab.analysis.survey import Corpus, builtin_corpus

    if args.texts is not None:
        corpus = Corpus(args.texts, what="--texts")
        corpus.scan()
        return corpus
    texts = builtin_corpus()
    if rank == 0:
        save(lambda: atomic_write_text(Path(args.out) / "corpus.txt", "\n".join(texts) + "\n"),
             args.out)
    return Corpus.of(texts, name="attnlab docstrings")


def _in_dtype(loaded, dtype: str):
    """``loaded`` with its model in ``dtype`` (a copy; one line naming --dtype when this
    machine cannot run it)."""
    import dataclasses

    from attnlab._cli import UsageError
    from attnlab._text import one_line
    from attnlab.tracing.tracer import placed

    try:
        net = placed(loaded.model, dtype, None)
    except ValueError as exc:
        raise UsageError(f"--dtype {dtype}: {one_line(exc).removeprefix('dtype: ')}") from exc
    if dataclasses.is_dataclass(loaded) and not isinstance(loaded, type):
        return dataclasses.replace(loaded, model=net)
    return loaded


def run_from_args(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console

    from attnlab._cli import UsageError, emit_json, save
    from attnlab._io import check_output_dir, lock_folder
    from attnlab._options import config_from_args
    from attnlab._text import one_line
    from attnlab.analysis.survey import survey

    cfg = config_from_args(SurveyConfig, args, flags=FLAGS)
    if args.max_memory is not None:
        from attnlab.tracing.budget import parse_memory

        parse_memory(args.max_memory)  # a bad size is refused before the model loads
    rank = int(os.environ.get("RANK", "0"))
    check_output_dir(args.out, arg="--out")
    out = Path(args.out)
    # one survey writes --out at a time: refused (or waited for) before the model loads
    # (under torchrun, survey() locks each rank and the ranks agree)
    single = int(os.environ.get("WORLD_SIZE", "1")) <= 1
    with (lock_folder(out, name="survey-rank-0", wait=args.wait) if single
          else contextlib.nullcontext()):
        corpus = _corpus(args, rank)
        quiet = args.quiet or args.json or rank != 0
        console = Console(stderr=True, quiet=quiet)
        with console.status(f"loading {args.model}"):
            from attnlab.models import load

            try:
                loaded = load(args.model, progress=not quiet)
            except (ValueError, TypeError, OSError) as exc:
                raise UsageError(f"--model {args.model}: {one_line(exc)}") from exc
        if args.dtype is not None:
            loaded = _in_dtype(loaded, args.dtype)
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        with (Progress(TextColumn("survey: batch"), BarColumn(), MofNCompleteColumn(),
                       console=console, disable=quiet) as bar, warnings.catch_warnings()):
            # a note (texts cut to the model's limit) is one line on stderr, said at once
            warnings.showwarning = lambda message, *_a, **_k: console.print(
                f"note: {message}", highlight=False, markup=False)
            task = bar.add_task("survey", total=None)
            result = survey(loaded, corpus, out, config=cfg, device=args.device,
                            restart=args.restart, threads=args.threads, wait=args.wait,
                            max_memory=args.max_memory,
                            on_batch=lambda d, t: bar.update(task, completed=d, total=t))
        if rank != 0:
            return 0
        from attnlab.report.survey import headline_text, write_page

        page = save(lambda: write_page(result.to_json(), out / "index.html"), args.out)
        head = result.headline()
        if args.json:
            emit_json({"survey": str(out / "survey.json"), "page": str(page), **head})
        elif not args.quiet:
            Console().print(headline_text(head), highlight=False, markup=False)
        return 0
