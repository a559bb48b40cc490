"""Running an already-loaded model on a padded batch of token ids, one layer's dense
weights at a time.

:func:`trace` (:mod:`attnlab.tracing.tracer`) runs one input and keeps q, k and the
log-sum-exp of every layer. Scores averaged over many short inputs (the literature's
probes, the corpus survey) want the opposite: a batch of inputs of any lengths in one
forward pass, padded on the right with the padding hidden by the key mask, and each
layer's dense weights handed over as the layer runs, then dropped.
:func:`for_each_layer` does that under :func:`~attnlab.tracing.capture.capture`: the
weights are ``exp(s - lse)`` of the captured q and k under each record's score shape
(:func:`attnlab.core.weights.shaped_weights`, as the trace computes them on demand).

``model`` is duck-typed like :class:`attnlab.models.LoadedModel` (``.model``,
``.tokenizer``, ``.name``, ``.causal``, ``.num_layers``, ``.max_length``);
:func:`check_loaded` is the one check of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from attnlab.core.weights import shaped_weights
from attnlab.tracing._hf_forward import forward_params
from attnlab.tracing.adapters.huggingface import is_hf_model
from attnlab.tracing.capture import capture

__all__ = ["attention_patterns", "check_loaded", "for_each_layer", "forward",
           "layer_weights", "vocab_size"]

#: What :func:`for_each_layer` reads of a loaded model.
LOADED = ("model", "tokenizer", "name", "causal", "num_layers", "max_length")


def check_loaded(model: Any, needs: Sequence[str] = LOADED) -> None:
    """Refuse anything but an already-loaded model that has every attribute in ``needs``.

    >>> check_loaded("smollm2")
    Traceback (most recent call last):
    ...
    TypeError: model must be an already-loaded model (as attnlab.models.load gives: with \
model, tokenizer, name, causal, num_layers, max_length), got str (load it by name first)
    """
    missing = [a for a in needs if not hasattr(model, a)]
    if missing:
        raise TypeError(
            "model must be an already-loaded model (as attnlab.models.load gives: with "
            f"{', '.join(needs)}), got {type(model).__name__}"
            + (" (load it by name first)" if isinstance(model, str) else
               f" without {', '.join(missing)}"))


def vocab_size(model: Any) -> int | None:
    """How many token ids a loaded ``model`` embeds, when it says (None when it does not)."""
    net = model.model
    if is_hf_model(net):
        emb = net.get_input_embeddings()
        n = getattr(emb, "num_embeddings", None)
        return n if isinstance(n, int) else None
    n = getattr(getattr(net, "config", None), "vocab_size", None)
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def forward(model: Any, ids: Tensor, mask: Tensor) -> None:
    """One forward pass of ``ids`` (B, N) with the key mask ``mask`` (B, N; True for real
    tokens), without a KV cache or vocabulary logits. A model that takes no mask (attnlab's
    GPT) must be causal: its real tokens never see the padding on their right."""
    from attnlab.nn.transformer import Transformer

    net = model.model
    if is_hf_model(net):
        base = getattr(net, "base_model", net)  # no vocabulary logits
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask.long()}
        if "use_cache" in forward_params(base):
            kwargs["use_cache"] = False
        base(**kwargs)
        return
    if isinstance(net, Transformer):
        raise TypeError(f"model {model.name!r} is an encoder-decoder: give a decoder-only or "
                        "an encoder model")
    if not bool(mask.all()) and not model.causal:
        raise ValueError(f"model {model.name!r} takes no padding mask and is not causal: "
                         "give inputs of one length per batch")
    net(ids)  # causal: the padding on the right is never seen by the real tokens


def layer_weights(record: Any, heads: range | None = None) -> Tensor:
    """(B, h, Lq, Lk) float32 weights ``exp(s - lse)`` of a captured record: the query
    heads of ``heads`` (a contiguous range; None: all H), every one of a batch element in
    one call (grouped key/value heads read by index, not copied per head)."""
    q, k, lse = record.q, record.k, record.lse
    b, h, lq, _ = q.shape
    hs = range(h) if heads is None else heads
    lk = k.shape[2]
    kv = (torch.arange(h) // (h // k.shape[1]))[hs.start:hs.stop]
    rows = torch.arange(lq)
    out = torch.empty(b, len(hs), lq, lk)
    for bi in range(b):
        out[bi] = shaped_weights(q[bi, hs.start:hs.stop], k[bi, kv], lse[bi, hs.start:hs.stop],
                                 record.shapes[bi], rows=rows, head=list(hs), lq=lq, lk=lk)
    return out


def for_each_layer(model: Any, batch: Sequence[Sequence[int]],
                   on_layer: Callable[[int, Tensor], Any], *,
                   heads: range | None = None) -> None:
    """Run ``batch`` (token id lists, any lengths) through ``model`` in one forward pass,
    padded on the right with the padding hidden by the key mask, and call
    ``on_layer(layer, weights)`` with each layer's dense weights (B, H, N, N) float32 on
    the CPU as the layer runs: only one layer's weights exist at a time. Input ``b``'s own
    pattern is ``weights[b, :, :n_b, :n_b]`` (the key mask makes the padded keys 0 and the
    real rows sum to 1). ``heads`` (a contiguous range of query heads): only their
    weights are computed and given, (B, len(heads), N, N)."""
    check_loaded(model)
    if not batch or any(len(x) == 0 for x in batch):
        raise ValueError("batch must hold at least one non-empty list of token ids")
    vocab = vocab_size(model)
    lo = min(min(x) for x in batch)
    hi = max(max(x) for x in batch)
    if lo < 0 or (vocab is not None and hi >= vocab):
        raise ValueError(f"token ids in [{lo}, {hi}] lie outside the vocabulary [0, {vocab}) "
                         f"of {model.name}")
    n = max(len(x) for x in batch)
    if n > int(model.max_length):
        raise ValueError(f"batch: an input of {n} tokens is longer than {model.name} accepts "
                         f"({model.max_length})")
    pad = getattr(model.tokenizer, "pad_token_id", None)
    pad = pad if isinstance(pad, int) and 0 <= pad < (vocab or pad + 1) else 0
    ids = torch.full((len(batch), n), pad, dtype=torch.long)
    mask = torch.zeros(len(batch), n, dtype=torch.bool)
    for b, x in enumerate(batch):
        ids[b, :len(x)] = torch.tensor(list(x), dtype=torch.long)
        mask[b, :len(x)] = True
    net = model.model
    try:
        device = next(net.parameters()).device
    except StopIteration:
        device = torch.device("cpu")
    seen = [0]
    was_training = net.training
    net.eval()
    try:
        with torch.no_grad(), capture(net, qkv=True) as cap:
            def take(record: Any) -> None:
                cap.records.clear()  # nothing kept: the caller reduces each layer
                if record.dims[1:] == (n, n):
                    on_layer(seen[0], layer_weights(record, heads))
                    seen[0] += 1

            cap.on_record = take
            forward(model, ids.to(device), mask.to(device))
    finally:
        net.train(was_training)
    if seen[0] != int(model.num_layers):
        raise ValueError(f"{model.name}: {seen[0]} self-attention layers ran, the model "
                         f"declares {model.num_layers}")


def attention_patterns(model: Any, batch: Sequence[Sequence[int]]) -> list[Tensor]:
    """The dense patterns (L, H, n_b, n_b) float32 of each input of ``batch``, run as one
    padded batch (:func:`for_each_layer`). Short inputs only: L x H x N² floats each."""
    lengths = [len(x) for x in batch]
    layers: list[list[Tensor]] = [[] for _ in batch]

    def keep(layer: int, w: Tensor) -> None:
        for b, n in enumerate(lengths):
            layers[b].append(w[b, :, :n, :n].clone())

    for_each_layer(model, batch, keep)
    return [torch.stack(ls) for ls in layers]
