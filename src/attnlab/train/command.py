"""Train attnlab's GPT on copy, reverse, sort, induction, assoc-recall or modular-add; write
DIR/config.json, checkpoint.safetensors, metrics.jsonl and training.png. Resumable
(--resume); under `torchrun -m attnlab.train` it runs DDP. DIR must be new, empty or an
attnlab run: attnlab never overwrites a file it did not write; one training writes DIR at a
time.
"""

from __future__ import annotations

import argparse
import os

# the options are TrainConfig's (attnlab.train.config, beside the fields), shared with
# ``python -m attnlab.train``; nothing here imports torch until the run starts
from attnlab.train.config import add_arguments

__all__ = ["HELP", "add_arguments", "run_from_args"]

HELP = "train a tiny GPT on a synthetic task and find its specialized heads"


def run_from_args(args: argparse.Namespace) -> int:
    """Train the run the options describe; 0 when it finished."""
    from attnlab._cli import emit_json
    from attnlab.train.config import config_from_args
    from attnlab.train.trainer import train

    config = config_from_args(args)
    result = train(config, args.out, resume=args.resume, force=args.force,
                   quiet=args.quiet or args.json, wait=args.wait)
    if os.environ.get("RANK", "0") != "0":
        return 0
    if args.json:
        emit_json(result.to_json())
    elif not args.quiet:
        from rich.console import Console

        msg = (f"{result.run_dir}: step {result.step}, held-out accuracy "
               f"{result.eval_accuracy:.4f} (loss {result.eval_loss:.4f}), "
               f"{result.seconds:.1f} s")
        if result.heads_text():
            msg += "\n" + result.heads_text()
        Console(stderr=True).print(msg)
    return 0
