"""A tiny model's batch of two with the second left-padded by 3 tokens, captured: every real
row of each trace checked against the model's own ``output_attentions``."""

from __future__ import annotations

import torch


def padded_capture(family: str):
    """(model, the Capture) of ``family``'s tiny model on a left-padded batch of two, after
    checking that every real row equals the model's own maps within support.EXACT_TOL."""
    from attnlab.tracing import capture, support  # support needs transformers

    model = support.tiny_model(family)
    ids = torch.randint(3, 80, (2, 10), generator=torch.Generator().manual_seed(1))
    att = torch.ones_like(ids)
    att[1, :3] = 0
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=att, output_attentions=True).attentions
        with capture(model) as cap:
            model(input_ids=ids, attention_mask=att)
    for b, rows in ((0, slice(None)), (1, slice(3, None))):
        t = cap.trace(b)
        want = torch.stack([a[b] for a in ref])[:, :, rows]
        assert float((t.weights[:, :, rows] - want).abs().max()) <= support.EXACT_TOL
    return model, cap
