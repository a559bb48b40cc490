"""Tracing on an accelerator: one short script, run only where a CUDA device exists.

    python benchmarks/gpu.py [--device cuda] [--json]

Two cases, each measured side by side in one process after a warm-up:

* **SmolLM2 at 8,192 tokens** (float32 and bfloat16): the time of ``attnlab.trace`` (the
  capture; the trace's tensors come back to the host layer by layer) against a plain
  forward of the same model (``model.model(ids)``, sdpa, no weights); the peak device
  memory of each (``torch.cuda.max_memory_allocated``); the exact rows of the trace against
  the model's own eager weights on a 512-token prefix (the weights of every head,
  ``output_attentions=True``), with the rule the trace's ``meta["precision"]`` names.
* **A Llama-3-8B-shaped random model at 32,768 tokens** (2 layers of 32 heads, 8 key/value
  heads of 128, hidden 4,096, bfloat16; random weights: only the shapes and the memory
  matter): trace time against a plain forward, and the peak device memory.

Nothing here is a test: the suite never needs a GPU. The numbers go to the benchmark page
with the device's name.
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def _timed(fn, device: torch.device) -> tuple[float, float]:
    """(seconds, peak device GiB) of ``fn()`` after emptying the allocator's peak."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize(device)
    return time.perf_counter() - t0, torch.cuda.max_memory_allocated(device) / 2**30


def _side_by_side(net, ids: torch.Tensor, device: torch.device, tokenizer
                  ) -> tuple[float, float, float, float, object]:
    """(forward s, its peak GiB, trace s, its peak GiB, the trace): a plain forward of the
    base model (sdpa, no weights, no cache) after a warm-up, then ``attnlab.trace``."""
    import attnlab

    on = ids.to(device)

    def plain() -> None:
        with torch.no_grad():
            net.config._attn_implementation = "sdpa"
            try:
                net.model(on, use_cache=False)
            finally:
                net.config._attn_implementation = "eager"

    holder: dict = {}

    def traced() -> None:
        holder["t"] = attnlab.trace(net, ids[0].tolist(), tokenizer=tokenizer,
                                    max_memory="100GB")

    plain()
    fwd_s, fwd_gib = _timed(plain, device)
    tr_s, tr_gib = _timed(traced, device)
    return fwd_s, fwd_gib, tr_s, tr_gib, holder["t"]


def smollm2(device: torch.device, dtype: torch.dtype, tokens: int, prefix: int) -> dict:
    import attnlab
    from attnlab.models import load
    from attnlab.tracing.tracer import placed
    from attnlab.tracing.verify import check_stack

    m = load("smollm2", progress=False)
    net = placed(m.model, dtype, device)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(100, 40000, (1, tokens), generator=g)
    fwd_s, fwd_gib, tr_s, tr_gib, t = _side_by_side(net, ids, device, m.tokenizer)
    with torch.no_grad():
        maps = net(ids[:, :prefix].to(device), output_attentions=True).attentions
    short = attnlab.trace(net, ids[0, :prefix].tolist(), tokenizer=m.tokenizer)
    c = check_stack(short, [x.float().cpu() for x in maps])
    return {"dtype": str(dtype).removeprefix("torch."), "tokens": t.seq_len,
            "forward_s": round(fwd_s, 3), "trace_s": round(tr_s, 3),
            "ratio": round(tr_s / fwd_s, 2), "forward_peak_gib": round(fwd_gib, 3),
            "trace_peak_gib": round(tr_gib, 3), "prefix": prefix,
            "max_error_vs_eager": c.weights_error, "bound": c.weights_tol,
            "passed": c.passed, "precision": t.meta.get("precision")}


def llama8b_shape(device: torch.device, tokens: int) -> dict:
    import transformers as tf

    cfg = tf.LlamaConfig(vocab_size=1024, hidden_size=4096, intermediate_size=14336,
                         num_hidden_layers=2, num_attention_heads=32, num_key_value_heads=8,
                         max_position_embeddings=tokens, rope_theta=500000.0)
    with torch.device(device):
        net = tf.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    ids = torch.randint(0, 1024, (1, tokens))
    fwd_s, fwd_gib, tr_s, tr_gib, t = _side_by_side(net, ids, device, None)
    return {"tokens": tokens, "forward_s": round(fwd_s, 3), "trace_s": round(tr_s, 3),
            "ratio": round(tr_s / fwd_s, 2), "forward_peak_gib": round(fwd_gib, 3),
            "trace_peak_gib": round(tr_gib, 3), "layers": t.num_layers}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--long", type=int, default=32768)
    ap.add_argument("--prefix", type=int, default=512)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/gpu.py needs a CUDA device; this machine has none")
    device = torch.device(args.device)
    out = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__,
           "smollm2": [smollm2(device, dt, args.tokens, args.prefix)
                       for dt in (torch.float32, torch.bfloat16)],
           "llama8b_shape": llama8b_shape(device, args.long)}
    print(json.dumps(out, indent=2) if args.json else out)
    return out


if __name__ == "__main__":
    main()
