"""The articles' PyTorch listings as data and how they run: each listing's text (shipped
verbatim as ``listings/*.py.txt``), the :class:`Edit` records that correct article 001's,
and :func:`run_listings`, which executes listings in a fresh interpreter
(``sys.executable``), never in attnlab's own process.

What the runs show (the listings against attnlab's modules, the articles' debugging tips)
is the experiment :mod:`.article_code`; :mod:`.fused_qkv_speed` times the corrected
listing with the same runner.

>>> src = apply_edits(listing_source("001"), FIXES_001)
>>> "self.n_heads = n_heads" in src, len(diff_lines(listing_source("001"), src)) > 0
(True, True)
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

import torch
from torch import Tensor

__all__ = ["Edit", "Listing", "LISTINGS", "FIXES_001", "DEDENT_001", "FUSED_CALL_001",
           "LISTING_CALL_001", "HEATMAP_001", "RETURN_WEIGHTS_001", "fused_call_source",
           "listing_source", "apply_edits", "diff_lines", "run_listings", "ListingRun",
           "RunError", "CallRecord", "RunRecord"]


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` (which must occur exactly once) by ``new``; ``why`` says what it fixes."""

    old: str
    new: str
    why: str
    why_zh: str = ""


@dataclass(frozen=True)
class Listing:
    """One article's listing: its file, the class it defines and the arguments to build it."""

    article: str  # "000" or "001"
    filename: str  # under listings/
    cls: str
    takes_mask: bool  # forward(x, mask=None)


LISTINGS = {
    "000": Listing("000", "000_pure_self_attention.py.txt", "PureSelfAttention", False),
    "001": Listing("001", "001_multi_head_attention.py.txt", "MultiHeadAttention", True),
}

#: The fewest edits after which article 001's listing runs, in the order its failures
#: appear (each is found by running the listing with the edits before it).
FIXES_001: tuple[Edit, ...] = (
    Edit("        # 3. 掩码处理（解码器需要）if mask is not None:\n",
         "        # 3. 掩码处理（解码器需要）\n        if mask is not None:\n",
         "put `if mask is not None:` on its own line (it is inside the comment)",
         "把 `if mask is not None:` 单独放一行（原文把它写进了注释）"),
    Edit("        self.d_k = d_model // n_heads\n",
         "        self.d_k = d_model // n_heads\n        self.d_model = d_model\n"
         "        self.n_heads = n_heads\n",
         "set self.d_model and self.n_heads (used in forward, never set)",
         "设置 self.d_model 和 self.n_heads（forward 中使用，但从未赋值）"),
    Edit("        q = q.view(batch_size, -1, self.n_heads, self.d_k).transpose(1, 2)\n",
         "        q = q.view(batch_size, -1, self.n_heads, self.d_k).transpose(1, 2)\n"
         "        k = k.view(batch_size, -1, self.n_heads, self.d_k).transpose(1, 2)\n"
         "        v = v.view(batch_size, -1, self.n_heads, self.d_k).transpose(1, 2)\n",
         "split k and v into heads like q", "像 q 一样把 k 和 v 切分成多个头"),
)

#: The other reading of 001's comment line: dedent the masked_fill line instead of
#: restoring the ``if`` (with the other two fixes): the masking then runs unconditionally.
DEDENT_001: tuple[Edit, ...] = (
    Edit("            scores = scores.masked_fill(mask == 0, float('-inf'))\n",
         "        scores = scores.masked_fill(mask == 0, float('-inf'))\n",
         "dedent the masked_fill line (the `if` stays in the comment)",
         "取消 masked_fill 一行的缩进（`if` 仍留在注释里）"),
    *FIXES_001[1:],
)


#: The fused QKV projection as article 001's tip names it (「通过 nn.Linear(3*d_model) 一次性计算
#: QKV」), verbatim; and the call its listing makes for the same projection.
FUSED_CALL_001 = "nn.Linear(3*d_model)"
LISTING_CALL_001 = "nn.Linear(d_model, 3*d_model)"

#: Article 001's heat-map snippet (可视化复现方法), verbatim: it plots ``attn``, a local
#: variable of the listing's ``forward``, which returns only ``self.out_proj(out)``.
HEATMAP_001 = """# 示例：绘制第一个头的注意力热图
import matplotlib.pyplot as plt
plt.matshow(attn[0,0].detach().numpy(), cmap='Reds')
plt.colorbar()
plt.title("Attention Head 1")
"""

#: The control of the heat-map snippet: the corrected 001 listing with a ``forward`` that
#: returns its weights too, ``(output, attn)``, as attnlab's modules and torch's
#: ``nn.MultiheadAttention`` do.
RETURN_WEIGHTS_001 = Edit("        return self.out_proj(out)\n",
                          "        return self.out_proj(out), attn\n",
                          "forward returns its weights too: (output, attn)",
                          "forward 同时返回注意力权重：(output, attn)")


def fused_call_source(call: str) -> str:
    """A few lines that build the fused projection with ``call`` at article 001's size, as
    its listing's ``__init__`` would (``d_model = 512``)."""
    return f"import torch.nn as nn\n\nd_model = 512\nqkv_proj = {call}\n"


def listing_source(article: str) -> str:
    """The listing of article ``"000"`` or ``"001"``, verbatim as the article prints it."""
    if article not in LISTINGS:
        raise ValueError(f"article must be one of {sorted(LISTINGS)}, got {article!r}")
    path = resources.files("attnlab.experiments").joinpath("listings", LISTINGS[article].filename)
    return path.read_text(encoding="utf-8")


def apply_edits(source: str, edits: Sequence[Edit]) -> str:
    """``source`` with each edit applied in turn; an edit whose ``old`` text does not occur
    exactly once raises ``ValueError``."""
    for e in edits:
        count = source.count(e.old)
        if count != 1:
            raise ValueError(f"edit {e.why!r}: its text must occur exactly once in the "
                             f"listing, found {count} times: {e.old!r}")
        source = source.replace(e.old, e.new)
    return source


def diff_lines(before: str, after: str) -> list[str]:
    """The changed lines, ``-`` removed and ``+`` added (a unified diff without context)."""
    out = []
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0):
        if line.startswith(("---", "+++", "@@")):
            continue
        out.append(line.rstrip())
    return out


# -- what a run is, and what it records ------------------------------------------------------


class ListingRun(TypedDict):
    """One run of a listing in the driver (:func:`run_listings`)."""

    label: str
    source: str  # the listing's text
    filename: str  # how the listing names itself in tracebacks
    main: NotRequired[bool]  # execute its ``__main__`` block, capturing stdout
    cls: NotRequired[str]  # the class to build, with ``args``
    args: NotRequired[list[int]]
    state: NotRequired[str]  # the key prefix in the tensors of its load_state_dict
    #: each call: (input name, mask name or None) in the tensors -> ``forward(x[, mask])``
    calls: NotRequired[list[list[str | None]]]
    harness: NotRequired[str]  # source executed after the listing, in its namespace
    measure: NotRequired[str]  # the harness's function the driver calls with the tensors


class RunError(TypedDict):
    """The first error of a run or a call."""

    type: str  # the exception's class name
    message: str  # its first line
    line: int | None  # the line of the listing it arose in (None: not in the listing)
    text: str  # that line's text


class CallRecord(TypedDict):
    """One call of a run's module."""

    error: RunError | None


class RunRecord(TypedDict):
    """What one run recorded."""

    label: str
    error: RunError | None  # the listing (or its harness, or building its class) failed
    stdout: str
    calls: list[CallRecord]
    value: NotRequired[Any]  # what the harness's ``measure`` returned (a run with a harness)


# -- the driver: runs in a fresh interpreter, imports nothing of attnlab ---------------------

_DRIVER = r'''
import contextlib, io, json, sys, traceback
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
softmax = F.softmax
seen = []


def recording_softmax(*args, **kwargs):
    y = softmax(*args, **kwargs)
    seen.append(y.detach())
    return y


def error(exc, run):
    lines = run["source"].splitlines()
    line = None
    if isinstance(exc, SyntaxError):
        line, message = exc.lineno, exc.msg
    else:
        for frame in traceback.extract_tb(exc.__traceback__):
            if frame.filename == run["filename"]:
                line = frame.lineno
        message = str(exc)
    text = lines[line - 1].strip() if line and 0 < line <= len(lines) else ""
    first = message.strip().splitlines()[0] if message.strip() else ""
    return {"type": type(exc).__name__, "message": first, "line": line, "text": text}


def drive(spec):
    """One job: its runs one after the other, each in a namespace of its own."""
    tensors = torch.load(spec["tensors"], weights_only=True) if spec.get("tensors") else {}
    results, saved = [], {}
    for i, run in enumerate(spec["runs"]):
        res = {"label": run["label"], "error": None, "stdout": "", "calls": []}
        results.append(res)
        torch.manual_seed(spec["seed"])
        ns = {"__name__": "__main__" if run.get("main") else "article_listing",
              "__file__": run["filename"]}
        buf = io.StringIO()
        try:
            code = compile(run["source"], run["filename"], "exec")
            with contextlib.redirect_stdout(buf):
                exec(code, ns)
            if run.get("harness"):
                exec(compile(run["harness"], "<harness>", "exec"), ns)
                res["value"] = ns[run["measure"]](tensors)
            if run.get("cls"):
                module = ns[run["cls"]](*run.get("args", []))
                prefix = run.get("state")
                if prefix:
                    module.load_state_dict({k[len(prefix):]: v for k, v in tensors.items()
                                            if k.startswith(prefix)}, strict=True)
                module.eval()
        except Exception as exc:
            res["error"] = error(exc, run)
            res["stdout"] = buf.getvalue()
            continue
        res["stdout"] = buf.getvalue()
        for j, (x_name, mask_name) in enumerate(run.get("calls", [])):
            call = {"error": None}
            res["calls"].append(call)
            args = [tensors[x_name]] + ([] if mask_name is None else [tensors[mask_name]])
            del seen[:]
            F.softmax = recording_softmax
            try:
                with torch.no_grad():
                    y = module(*args)
            except Exception as exc:
                call["error"] = error(exc, run)
                continue
            finally:
                F.softmax = softmax
            saved[f"{i}/{j}/out"] = (y[0] if isinstance(y, tuple) else y).detach()
            if seen:
                saved[f"{i}/{j}/attn"] = seen[-1]
    torch.save(saved, spec["out"])
    return results


print(json.dumps([drive(json.load(open(path, encoding="utf-8"))) for path in sys.argv[1:]]))
# the objects alive now frozen: the exit does not walk them all for cycles (0.5-0.9 s of
# CPU of each run; attnlab._proc.run_as_program, which this driver does not import)
import gc
gc.freeze()
'''


def run_listings(
    jobs: Sequence[tuple[Sequence[ListingRun], dict[str, Tensor]]],
    *,
    seed: int = 0,
    timeout: float = 120.0,
) -> list[tuple[list[RunRecord], dict[str, Tensor]]]:
    """Run each job ``(runs, tensors)``, one after the other, in one fresh interpreter (it
    imports torch and nothing of attnlab; each run executes in a namespace of its own, so a
    listing sees only what it defines, as when it runs as a script).

    A run is a :class:`ListingRun`: ``label``, ``source`` (the listing's text),
    ``filename`` (how the listing names itself in tracebacks), optional ``main`` (execute
    the ``__main__`` block, capturing stdout), ``cls`` and ``args`` (build the class),
    ``state`` (a key prefix in ``tensors``: ``load_state_dict(strict=True)`` of those
    entries) and ``calls`` (``[(input name, mask name or None), ...]`` ->
    ``forward(x[, mask])``). Returns per job the runs' records (:class:`RunRecord`:
    ``error`` = ``{type, message, line, text}`` or None, ``stdout``, ``calls``: each with
    its ``error``, and ``value``: what ``ns[measure](tensors)`` returned when the run has a
    ``harness``, source executed after the listing in its namespace) and the tensors they
    produced, named
    ``"{run}/{call}/out"`` and ``"{run}/{call}/attn"`` (the last softmax of the call).
    The interpreter is started once for all the jobs (starting one and importing torch is
    most of a job's time).
    """
    with tempfile.TemporaryDirectory(prefix="attnlab-listing-") as tmp:
        specs, outs = [], []
        for n, (runs, tensors) in enumerate(jobs):
            spec_path = Path(tmp, f"spec{n}.json")
            tensor_path, out_path = Path(tmp, f"in{n}.pt"), Path(tmp, f"out{n}.pt")
            torch.save(dict(tensors), tensor_path)
            spec_path.write_text(json.dumps({"runs": list(runs), "seed": seed,
                                             "tensors": str(tensor_path),
                                             "out": str(out_path)}), encoding="utf-8")
            specs.append(str(spec_path))
            outs.append(out_path)
        if not specs:
            return []
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        proc = subprocess.Popen([sys.executable, "-c", _DRIVER, *specs], cwd=tmp, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            try:
                stdout, stderr = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"the listing driver ran past the {timeout:.0f} s "
                                   "timeout") from None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        lines = stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            last = (stderr.strip().splitlines() or ["no error output"])[-1]
            raise RuntimeError(f"the listing driver failed (exit status "
                               f"{proc.returncode}): {last[:300]}")
        # the driver's last line: each job's records, as the driver above writes them
        records = cast(list[list[RunRecord]], json.loads(lines[-1]))
        return [(recs, torch.load(out, weights_only=True)) for recs, out in zip(records, outs,
                                                                                 strict=True)]
