"""Trace TEXT through a causal MODEL and ask what its attention is worth: each
attention-based importance of a token (the weights, the last layer's weights, rollout, the
accumulated attention, and a random baseline) against the measured rise of the loss when
that token is hidden from every layer (one forward pass per token, on the first
--ablation-tokens tokens), and every KV-cache eviction policy (H2O, SnapKV, TOVA,
StreamingLLM, KNorm, with random and oracle controls) at each budget: the share of the later
queries' attention each one loses.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from attnlab.commands.model_run import add_model_run_arguments

if TYPE_CHECKING:  # the command imports torch only when it runs
    from attnlab.analysis.attribute import AttributionStudy

__all__ = ["HELP", "add_arguments", "run_from_args"]

HELP = "importance against ablation, and KV-cache eviction measured exactly"


def _budgets(text: str) -> tuple[float, ...]:
    try:
        out = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected fractions like 0.1,0.25,0.5, got "
                                         f"{text!r}") from None
    if not out or any(not 0 < b <= 1 for b in out):
        raise argparse.ArgumentTypeError(f"expected fractions in (0, 1], got {text!r}")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_run_arguments(p)
    p.add_argument("--ablation-tokens", type=int, default=512, metavar="N",
                   help="run the ablation study on the first N tokens (default 512)")
    p.add_argument("--max-keys", type=int, default=128, metavar="K",
                   help="ablate at most K keys, spread evenly (default 128)")
    p.add_argument("--budgets", type=_budgets, default=(0.1, 0.25, 0.5), metavar="F,F,...",
                   help="fractions of the cache kept (default 0.1,0.25,0.5)")
    p.add_argument("--context", type=int, default=None, metavar="N",
                   help="the prefill's length for eviction (default: all but the last "
                   "eighth of the tokens)")
    p.add_argument("--no-ablation", action="store_true", help="skip the ablation study")
    p.add_argument("--no-eviction", action="store_true", help="skip the eviction table")
    p.add_argument("--no-eviction-loss", action="store_true",
                   help="skip the loss with only the kept keys (a forward of the later "
                   "tokens per policy and budget)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--json", action="store_true", help="print the whole study as JSON")


def _print(got: AttributionStudy) -> None:
    print(f"{got['model']}: {got['tokens']} tokens")
    if "ablation" in got:
        a = got["ablation"]
        print(f"ablation: {a['keys']} keys hidden one at a time from every layer, loss over "
              f"rows {a['targets'][0]}-{a['targets'][1]} of the first {a['tokens']} tokens "
              f"(clean {a['clean_loss']:.4f})")
        for name, rho in a["rho"].items():
            print(f"  {name:12s} Spearman ρ with the effect {rho:+.3f}   with |effect| "
                  f"{a['rho_abs'][name]:+.3f}")
        print(f"  best predictor: {a['best']}")
    if "eviction" in got:
        e = got["eviction"]
        print(f"eviction: prefill {e['context']} tokens, {e['later']} later queries; share "
              f"of their attention lost (mean over layers and heads)")
        heads = "".join(f"{'keep ' + format(b, 'g'):>12s}" for b in e["budgets"])
        print(f"  {'policy':10s}{heads}")
        for row in e["table"]:
            cells = "".join(f"{row[f'lost@{b:g}']:12.4f}" for b in e["budgets"])
            print(f"  {row['policy']:10s}{cells}")
        if "loss" in e:
            lo = e["loss"]
            print(f"  change of the later tokens' loss with only the kept keys (full cache: "
                  f"{lo['full']:.4f} nats)")
            print(f"  {'policy':10s}{heads}")
            for p, row in lo["delta"].items():
                cells = "".join(f"{row[f'{b:g}']:+12.4f}" for b in e["budgets"])
                print(f"  {p:10s}{cells}")


def run_from_args(args: argparse.Namespace) -> int:
    from attnlab._cli import UsageError, emit_json
    from attnlab.analysis.attribute import attribute
    from attnlab.commands.model_run import ModelRun
    from attnlab.tracing import one_stack, trace

    job = ModelRun(args)
    text, arg = job.text()
    loaded = job.load()
    if not getattr(loaded, "causal", False) or getattr(loaded, "kind", "") != "hf-causal":
        raise UsageError(f"--model {args.model}: the study needs a causal Hugging Face "
                         f"language model (the ablation runs its forward with a 4-D mask), "
                         f"got a {getattr(loaded, 'kind', type(loaded).__name__)} model")
    job.admit(loaded, text, arg)
    with job.layers(loaded, "tracing"):
        # (a causal language model traces one stack)
        t = one_stack(trace(loaded, text, truncate=args.truncate, merge_pieces=False,
                            max_memory=job.budget, **job.run_settings()),
                      f"--model {args.model}: the study's trace")
    with job.console.status("ablating and scoring"):
        got = attribute(loaded, t, ablation=not args.no_ablation,
                        eviction=not args.no_eviction,
                        eviction_loss=not args.no_eviction_loss,
                        ablation_tokens=args.ablation_tokens,
                        max_keys=args.max_keys, budgets=args.budgets, context=args.context)
    if args.json:
        emit_json({**got, "run": job.stats()})
    else:
        _print(got)
    return 0
