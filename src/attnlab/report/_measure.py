"""One point of the long-context curve, measured alone in a fresh process.

A job is a small JSON object; :func:`run_job` does it in this process, :func:`run_isolated`
in a new process (forked from a server that imported torch, transformers and the tracer
once: :func:`attnlab._proc.call_forked`; its peak reset when it starts), so the peak
resident set it reports (:func:`attnlab._proc.peak_rss_bytes` at the end) is that point's
own, model loading included::

    {"kind": "eager" | "trace", "model": "smollm2" | "tiny-llama", "tokens": N,
     "text": null | "DIR", "save": null | "FILE"}

* ``eager``: the model's Hugging Face eager attention with ``output_attentions=True``;
* ``trace``: :func:`attnlab.tracing.tracer.trace` on the same token ids (unmerged); with
  ``save``, the trace is then written to that file (:meth:`AttentionTrace.save
  <attnlab.tracing.attention.AttentionTrace.save>`), after the point's numbers are taken,
  so that the process that asked can read it instead of tracing the same ids again.

Both run the model's base (no vocabulary head: its N x vocabulary logits are not attention,
and the tracer skips them too). The ids are the first N tokens of the long text
(:func:`attnlab.report.long_text.long_text`: attnlab's course when ``text`` is null, else
the ``*.txt`` files of ``DIR`` in name order, joined by a blank line) under the model's
tokenizer;
``"tiny-llama"`` (a random-weight two-layer Llama, for quick runs of this machinery) takes
seeded random ids instead.

The result (:class:`Measured`): ``kind``, ``tokens``, ``num_layers``, ``num_heads``,
``num_kv_heads``, ``load_seconds``, ``forward_seconds`` (the forward or the trace alone),
``peak_rss_bytes``, ``kept_bytes`` (the attention weights eager returned, or the tensors
the trace holds), ``loadavg`` (1, 5, 15 min, at the start), ``save_seconds`` (writing the
trace, when saved); :func:`run_isolated` adds
``process_seconds`` (the whole process) or gives ``error`` instead of the numbers
(:class:`Failed`).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, TypedDict, final

from attnlab._proc import IsolatedCallError, call_forked, peak_rss_bytes

if TYPE_CHECKING:
    from typing import NotRequired  # Python 3.11's; annotations here are never evaluated

    from attnlab.tracing.tiny import tiny_llama

__all__ = ["KINDS", "MODELS", "Failed", "Job", "Measured", "job_ids", "run_isolated", "run_job",
           "tiny_llama"]

KINDS = ("eager", "trace")
MODELS = ("smollm2", "tiny-llama")
_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
#: What the server each job is forked from imports once: what every job imports first
#: (starting Python and importing them took 3.4 of a 256-token job's 4.5 s).
PRELOAD = ("torch", "transformers", "transformers.models.llama.modeling_llama",
           "attnlab.models", "attnlab.tracing.tracer", "attnlab.report._measure")


class Job(TypedDict):
    """One point to measure (see the module docstring)."""

    kind: str  # one of KINDS
    model: str  # one of MODELS
    tokens: int
    text: str | None  # a folder of *.txt texts (None: the course)
    save: NotRequired[str | None]  # a trace job's file to write the trace to


@final  # (so that a reader's `"error" in result` tells the two results apart)
class Measured(TypedDict):
    """One point, measured (see the module docstring)."""

    kind: str
    model: str
    tokens: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    load_seconds: float
    forward_seconds: float  # the forward or the trace alone
    peak_rss_bytes: int  # the process's resident peak at the end
    kept_bytes: int  # the weights eager returned, or the tensors the trace holds
    loadavg: list[float]  # 1, 5 and 15 minutes, at the start
    save_seconds: NotRequired[float]  # writing the trace to the job's ``save`` file
    process_seconds: NotRequired[float]  # the whole process (run_isolated)


class Failed(TypedDict):
    """A point whose process failed (:func:`run_isolated`): the job, and why."""

    kind: str
    tokens: int
    error: str


def job_ids(tokenizer: Any, text: str | None, n: int) -> list[int]:
    """The first ``n`` token ids of the long text (the course when ``text`` is None, else the
    ``*.txt`` files of the folder ``text``); ``ValueError`` if it holds fewer."""
    from attnlab.report.long_text import ARTICLES_ENV, first_tokens, long_text

    return first_tokens(tokenizer, long_text({ARTICLES_ENV: text} if text else {}).text, n)


def __getattr__(name: str) -> Any:
    """``tiny_llama`` (:func:`attnlab.tracing.tiny.tiny_llama`, the random-weight Llama of
    ``"tiny-llama"``), imported on first use: this module loads no torch until a job runs."""
    if name == "tiny_llama":
        from attnlab.tracing.tiny import tiny_llama

        return tiny_llama
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check_job(job: object) -> Job:
    """``job``'s fields, checked (a refusal names the field)."""
    if not isinstance(job, dict):
        raise TypeError(f"job must be a dict, got {type(job).__name__}")
    if job.get("kind") not in KINDS:
        raise ValueError(f"job['kind'] must be one of {KINDS}, got {job.get('kind')!r}")
    if job.get("model") not in MODELS:
        raise ValueError(f"job['model'] must be one of {MODELS}, got {job.get('model')!r}")
    n = job.get("tokens")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"job['tokens'] must be a positive int, got {n!r}")
    text = job.get("text")
    if text is not None and (not isinstance(text, str) or not text):
        raise ValueError(f"job['text'] must be null (the course) or a folder, got {text!r}")
    save = job.get("save")
    if save is not None and (not isinstance(save, str) or not save or job["kind"] != "trace"):
        raise ValueError(f"job['save'] must be null or, for a trace job, a file path, got "
                         f"{save!r} for a {job['kind']!r} job")
    return {"kind": job["kind"], "model": job["model"], "tokens": n, "text": text,
            "save": save}


def _model_and_ids(job: Job) -> tuple[Any, Any, list[int]]:
    """(what to trace, the nn.Module, ids) for the job's model."""
    n = job["tokens"]
    if job["model"] == "smollm2":
        from attnlab.models import load

        loaded = load("smollm2", progress=False)
        return loaded, loaded.model, job_ids(loaded.tokenizer, job["text"], n)
    import torch

    from attnlab.tracing.tiny import tiny_llama

    model = tiny_llama(max_length=max(n, 16))
    g = torch.Generator().manual_seed(n)
    return model, model, torch.randint(1, 128, (n,), generator=g).tolist()


def run_job(job: Job) -> Measured:
    """Do one job in this process (see the module docstring)."""
    job = _check_job(job)
    loadavg = list(os.getloadavg())
    t0 = time.perf_counter()
    import torch

    subject, module, ids = _model_and_ids(job)
    cfg = module.config
    load_s = time.perf_counter() - t0
    x = torch.tensor([ids])
    if job["kind"] == "eager":
        base = getattr(module, "base_model", module)  # no vocabulary head
        t1 = time.perf_counter()
        with torch.no_grad():
            res = base(input_ids=x, output_attentions=True, use_cache=False)
        forward_s = time.perf_counter() - t1
        kept = sum(a.nbytes for a in res.attentions)
    else:
        from attnlab.tracing import one_stack, trace

        t1 = time.perf_counter()
        t = one_stack(trace(subject, ids, merge_pieces=False))
        forward_s = time.perf_counter() - t1
        kept = sum(x.nbytes for x in (t.q, t.k, t.v, t.lse, t.context) if x is not None)
    out: Measured = {
        "kind": job["kind"], "model": job["model"], "tokens": len(ids),
        "num_layers": int(cfg.num_hidden_layers), "num_heads": int(cfg.num_attention_heads),
        "num_kv_heads": int(getattr(cfg, "num_key_value_heads", None)
                            or cfg.num_attention_heads),
        "load_seconds": load_s, "forward_seconds": forward_s,
        "peak_rss_bytes": peak_rss_bytes(), "kept_bytes": int(kept), "loadavg": loadavg}
    if job.get("save"):  # after the numbers: writing is not the point's cost
        t2 = time.perf_counter()
        t.save(str(job["save"]))
        out["save_seconds"] = time.perf_counter() - t2
    return out


def run_isolated(job: Job, *, timeout: float = 3600.0) -> Measured | Failed:
    """Do one job in a fresh Python process and return its result; a process that fails
    (killed for memory, an exception, the timeout) gives ``{"error": ...}`` with the job's
    ``kind`` and ``tokens`` instead of the numbers."""
    job = _check_job(job)
    t0 = time.perf_counter()
    try:
        # run_job's result, read back from the child's JSON
        result: Measured = call_forked("attnlab.report._measure:run_job", job=job,
                                       preload=PRELOAD, timeout=timeout, env=_OFFLINE)
    except IsolatedCallError as exc:
        return {"kind": job["kind"], "tokens": job["tokens"], "error": exc.reason}
    result["process_seconds"] = time.perf_counter() - t0
    return result
