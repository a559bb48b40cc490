"""Survey: per-head statistics over a corpus, streamed, resumable, data-parallel.

A head's role is a property of a distribution of inputs, not of one sentence. The survey
reads a corpus one batch of texts at a time and keeps, per head, sums whose size does not
depend on the corpus:

* for every score of :data:`SCORES` (attnlab's own, TransformerLens's ``"abs"`` measure,
  Gu et al.'s first-token importance; see :mod:`attnlab.analysis.literature`): its sum,
  sum of squares and a histogram over fixed bins, over the texts where it is defined;
* per role of :data:`ROLES`: in how many texts the head plays it;
* the attention profile by relative distance ``i - j`` (query minus key position), with
  one bin for everything beyond ``max_distance`` on each side;
* Gu et al.'s sink count on 64-token inputs (the first 64 tokens of each text that has
  them: for a causal model exactly the 64-token input's attention, as no query sees a
  later key; for a bidirectional one only texts of exactly 64 tokens after truncation).

Each text becomes the input TransformerLens uses (BOS first when the tokenizer has one;
:func:`~attnlab.analysis.literature.literature_ids`), cut to ``max_tokens``. Texts are
batched in corpus order, ``batch_size`` at a time, padded on the right with the padding
hidden by a key mask; every statistic of a text is computed from its own ``n x n``
pattern, so batching does not change it beyond float rounding.

Each statistic is made of the sums of :mod:`attnlab.analysis.sums`, the ones the streamed
head scores use, taken over each text's rows of the batch's dense weights
(:func:`attnlab.tracing.runner.for_each_layer`, one layer at a time).

**Corpus** (:mod:`attnlab.analysis.corpus`): a ``.txt`` file (one text a line; blank lines
skipped) or a ``.jsonl`` file (one JSON object a line with a string ``text``); or
:func:`builtin_corpus`, the paragraphs of attnlab's own docstrings. A bad line is refused
before any work, naming its line number. The settings and the result:
:mod:`attnlab.analysis.survey_result`.

**Resume**: every ``checkpoint_every`` batches each process writes its state (the sums,
the next batch, a fingerprint of corpus and settings) atomically to
``OUT/state/rank-R-of-W.safetensors`` (:mod:`attnlab.analysis._survey_state`); a survey
started again with the same ``OUT`` continues from there, and its result equals the
uninterrupted run's (the same float64 sums in the same order).

**Data-parallel**: under ``torchrun --nproc_per_node=N -m attnlab survey ...`` each
process joins the process group (``gloo`` on CPU, ``nccl`` on GPU), takes the batches
``b`` with ``b % N == rank`` (the batches themselves do not depend on N) and, at the end,
the sums are added with ``torch.distributed.all_reduce``: the result equals the
one-process run up to the order of float64 additions. With fewer batches than processes
(one long text, say) each process runs every batch instead, for its contiguous share of
the heads (``SurveyResult.split`` is ``"heads"``; rank 0 alone counts the texts): each
head's sums are one process's, so the reduced result is the one-process run's, and the
forward pass, which every process repeats, is the only work not shared. Across machines
the same command runs with torchrun's usual flags (``--nnodes``, ``--node_rank``,
``--master_addr``, ``--master_port`` or ``--rdzv_endpoint``); each process writes its own
state file, and rank 0 writes the result.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnlab._dist import join, leave
from attnlab._errors import AttnlabWarning, Error, check_optional_int
from attnlab._io import FolderBusyError, atomic_write_text, lock_folder
from attnlab.analysis import survey_result
from attnlab.analysis._records import JSONScalar, ProbeScores
from attnlab.analysis._survey_state import STATE_DIR, resume, state_path, write_state
from attnlab.analysis.corpus import CHARS_PER_TOKEN, Corpus, builtin_corpus, first_ids
from attnlab.analysis.detection import abs_from_sums
from attnlab.analysis.heads import induction_trace, repeat_induction
from attnlab.analysis.literature import demo_induction_score, prefix_matching
from attnlab.analysis.sums import SUMS, Occurrences, TileTargets, scores_from_sums, tile_sums
from attnlab.analysis.survey_result import ROLES, SCORES, SurveyConfig, SurveyResult, SurveySums
from attnlab.tracing.budget import SURVEY_CHUNK, check_survey_budget
from attnlab.tracing.runner import check_loaded, for_each_layer

__all__ = ["CHARS_PER_TOKEN", "RESULT_NAME", "ROLES", "SCORES", "STATE_DIR", "Corpus",
           "SurveyConfig", "SurveyResult", "SurveySums", "TextsCutWarning", "builtin_corpus",
           "first_ids", "survey"]

RESULT_NAME = "survey.json"


class TextsCutWarning(AttnlabWarning):
    """The model accepts fewer tokens than ``max_tokens``: texts are cut to its limit."""


def survey(model: Any, corpus: Corpus, out_dir: str | os.PathLike[str], *,
           config: SurveyConfig | None = None, device: str = "auto",
           on_batch: Callable[[int, int], Any] | None = None,
           write_result: bool = True, restart: bool = False,
           threads: int | None = None, wait: bool = False,
           max_memory: int | str | None = None) -> SurveyResult:
    """Survey every head of ``model`` (already loaded, like
    :class:`attnlab.models.LoadedModel`) over ``corpus``; state under ``out_dir/state``
    and, from rank 0, the result in ``out_dir/survey.json``.

    A state left in ``out_dir`` by an interrupted run of the same corpus and settings is
    resumed; one of another corpus, settings, model or number of processes is refused
    (``ValueError``: use a new ``out_dir`` or delete its ``state`` folder). Under
    ``torchrun``, see the module docstring. ``device``: ``"auto"`` (a GPU per process
    under torchrun when there are enough, else the CPU), ``"cpu"`` or ``"cuda"``.
    ``on_batch(done, total)`` is called after each batch this process runs (progress).
    ``restart`` discards this process's saved state first. ``threads``: torch threads for
    the run (restored after; default: as they are). Every process returns the same
    reduced result; the probes are rank 0's alone.

    One run writes ``out_dir`` at a time: each process locks its rank in the folder
    (:func:`attnlab._io.lock_folder`; every run has a rank 0, so two runs always meet), and
    a second run is refused before it reads or writes anything (:class:`attnlab._io
    .FolderBusyError`, naming the holder's pid) or, with ``wait``, waits for the first to
    end. Under torchrun the ranks agree: if one is refused, all are.

    Each text is cut to ``max_tokens``, or to the model's own limit when that is lower
    (a warning says so; the cut texts count as truncated). Before anything runs, the
    settings are checked against the memory budget (``max_memory``: bytes, a size such as
    ``"4GB"``, or None for half the machine's memory; per process): a batch of
    ``batch_size`` texts of that many tokens whose estimate
    (:func:`attnlab.tracing.budget.estimate_survey_bytes`) exceeds the budget, is refused
    (:class:`~attnlab.tracing.budget.MemoryBudgetError`, a ``ValueError`` naming the
    largest settings that fit). Each layer's dense weights are reduced a group
    of heads at a time, so a long text costs its one layer's weights and a bounded
    working set, not a table per distance.
    """
    check_loaded(model)
    cfg = config or SurveyConfig()
    if not isinstance(cfg, SurveyConfig):
        raise TypeError(f"config must be a SurveyConfig, got {type(cfg).__name__}")
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    tokens = _text_tokens(model, cfg)
    if tokens < cfg.max_tokens:
        warnings.warn(TextsCutWarning(
            f"max_tokens is {cfg.max_tokens}, above the {tokens} tokens {model.name} "
            f"accepts: longer texts are cut to {tokens} (counted as truncated)"), stacklevel=2)
    check_survey_budget(model, cfg.batch_size, tokens, max_memory)
    t0 = time.perf_counter()
    count, digest = corpus.scan()
    check_optional_int("threads", threads, minimum=1)
    group = join(device)
    rank, world, dev = group.rank, group.world, group.device
    before = torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        with _locked(Path(out_dir), rank, world, dev, wait):
            return _survey(model, corpus, Path(out_dir), cfg, rank, world, group.backend,
                           dev, on_batch, write_result, restart, count, digest, t0)
    finally:
        torch.set_num_threads(before)
        leave(group)


def _text_tokens(model: Any, cfg: SurveyConfig) -> int:
    """The tokens each text is cut to: ``max_tokens``, or the model's own limit when that
    is lower."""
    limit = getattr(model, "max_length", None)
    if isinstance(limit, int) and not isinstance(limit, bool) and 2 <= limit < cfg.max_tokens:
        return limit
    return cfg.max_tokens


@contextlib.contextmanager
def _locked(out: Path, rank: int, world: int, dev: torch.device, wait: bool
            ) -> Iterator[None]:
    """This rank's lock of ``out`` for the run; under torchrun every rank learns whether
    all got theirs, and all refuse if one did not (no rank is left waiting in a
    collective)."""
    with contextlib.ExitStack() as stack:
        refused: FolderBusyError | None = None
        try:
            stack.enter_context(lock_folder(out, name=f"survey-rank-{rank}", wait=wait))
        except FolderBusyError as exc:
            refused = exc
        if world > 1:
            import torch.distributed as dist

            flag = torch.tensor([0 if refused is None else 1], device=dev)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if refused is None and int(flag):
                refused = FolderBusyError(f"--out {out}: another attnlab process is writing "
                                          "this folder (another rank was refused its lock)")
        if refused is not None:
            raise refused
        yield


def _fingerprint(model: Any, digest: str, count: int, cfg: SurveyConfig,
                 names: list[str]) -> str:
    """What a saved state must match to be resumed: the corpus, the settings, the model and
    the scores, hashed."""
    nl, nh = int(model.num_layers), int(model.num_heads)
    return hashlib.sha256(json.dumps(
        {"corpus": digest, "texts": count, "config": cfg.fingerprint_fields(),
         "model": model.name, "path": getattr(model, "path", None), "layers": nl,
         "heads": nh, "scores": names}, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class _Share:
    """A process's share of a survey of ``n_batches`` global batches: ``split`` is
    ``"batches"`` (the batches ``mine``, every head) or ``"heads"`` (every batch, the
    heads ``heads``); ``count``: whether it counts the texts."""

    n_batches: int
    split: str
    heads: range
    mine: tuple[int, ...]
    count: bool


def _share(count: int, batch_size: int, nh: int, rank: int, world: int) -> _Share:
    """The :class:`_Share` of process ``rank`` among ``world`` for ``count`` texts."""
    n_batches = -(-count // batch_size)
    # global batch b (texts b*B ... b*B + B - 1, the same whatever the number of
    # processes) is this process's when b % world == rank; with fewer batches than
    # processes (one long text, say) each process runs every batch for its share of the
    # heads instead, and only rank 0 counts the texts
    split = "heads" if n_batches < world else "batches"
    heads = (range(rank * nh // world, (rank + 1) * nh // world) if split == "heads"
             else range(nh))
    mine = tuple(b for b in range(n_batches) if split == "heads" or b % world == rank)
    return _Share(n_batches, split, heads, mine, split == "batches" or rank == 0)


def _reduced(sums: SurveySums, seconds: float, world: int,
             dev: torch.device) -> tuple[dict[str, Tensor], float]:
    """(the sums of every process, the longest of their ``seconds``): a copy of this
    process's alone when it is the only one."""
    reduced = {k: v.clone() for k, v in sums.t.items()}
    if world > 1:
        import torch.distributed as dist

        for k in sorted(reduced):
            v = reduced[k].to(dev)
            dist.all_reduce(v, op=dist.ReduceOp.SUM)
            reduced[k] = v.cpu()
        wall = torch.tensor([seconds], dtype=torch.float64, device=dev)
        dist.all_reduce(wall, op=dist.ReduceOp.MAX)
        seconds = float(wall.cpu())
    return reduced, seconds


def _model_json(model: Any) -> dict[str, JSONScalar]:
    """The JSON-plain fields of the model's ``describe()`` (else its name)."""
    return {k: v for k, v in (model.describe().items() if hasattr(model, "describe")
                              else {"name": model.name}.items())
            if isinstance(v, (str, int, float, bool, type(None)))}


def _probes(model: Any, cfg: SurveyConfig, causal: bool) -> dict[str, ProbeScores]:
    """The literature's induction probes of the model (and attnlab's repeat_induction when
    it is causal), seeded by ``cfg.seed``."""
    demo, info = demo_induction_score(model, seed=cfg.seed)
    pm, pinfo = prefix_matching(model, seed=cfg.seed)
    probes: dict[str, ProbeScores] = {
        "tl-demo-induction": {"scores": demo.tolist(), "info": info},
        "olsson-prefix-matching": {"scores": pm.tolist(), "info": pinfo}}
    if causal:
        # attnlab's repeat_induction: the induction share over the second copy of BOS +
        # 40 distinct random ids, twice (as diagnose computes it)
        ri, rinfo = repeat_induction(induction_trace(model, seed=cfg.seed))
        probes["repeat_induction"] = {
            "scores": ri.tolist(),
            "info": {"period": rinfo["period"], "start": rinfo["start"], "seed": cfg.seed}}
    return probes


def _run_share(model: Any, corpus: Corpus, cfg: SurveyConfig, names: list[str],
               sums: SurveySums, causal: bool, share: _Share, start: int, done: bool,
               on_batch: Callable[[int, int], Any] | None,
               save: Callable[[int, bool], None]) -> None:
    """Add this process's ``share`` of the corpus's batches from batch ``start`` to
    ``sums`` (none when the saved state is ``done``), telling ``on_batch`` (batches done,
    of how many) after each and saving the state (next batch, finished) every
    ``cfg.checkpoint_every`` batches and at the end."""
    mine, mine_set = share.mine, set(share.mine)
    done_count = len(mine) if done else sum(b < start for b in mine)
    since = 0
    it = iter(corpus)
    for b_index in range(share.n_batches if not done else 0):
        batch = [t for _, t in zip(range(cfg.batch_size), it)]
        if b_index not in mine_set or b_index < start:
            continue
        _run_batch(model, batch, cfg, names, sums, causal, heads=share.heads,
                   count=share.count)
        done_count += 1
        since += 1
        if on_batch is not None:
            on_batch(done_count, len(mine))
        if since >= cfg.checkpoint_every:
            save(b_index + 1, False)
            since = 0
    if not done:
        save(share.n_batches, True)


def _survey(model: Any, corpus: Corpus, out: Path, cfg: SurveyConfig, rank: int, world: int,
            backend: str | None, dev: torch.device,
            on_batch: Callable[[int, int], Any] | None, write_result: bool, restart: bool,
            count: int, digest: str, t0: float) -> SurveyResult:
    """:func:`survey` once the process group is joined."""
    if dev.type == "cuda":
        model.model.to(dev)
    causal = bool(model.causal)
    names = survey_result.score_names(causal)
    nl, nh = int(model.num_layers), int(model.num_heads)
    sums = SurveySums(nl, nh, names, cfg)
    fingerprint = _fingerprint(model, digest, count, cfg, names)
    share = _share(count, cfg.batch_size, nh, rank, world)
    path = state_path(out, rank, world)
    saved, start, done = resume(out, rank, world, fingerprint, restart)
    resumed_from = None
    if saved is not None:
        for k, v in saved.items():
            sums.t[k] = v.to(torch.float64)
        resumed_from = start

    def save(next_batch: int, finished: bool) -> None:
        write_state(path, sums.t, {"fingerprint": fingerprint, "rank": rank, "world": world,
                                   "split": share.split, "format": survey_result.FORMAT,
                                   "next_batch": next_batch, "done": finished})

    _run_share(model, corpus, cfg, names, sums, causal, share, start, done, on_batch, save)
    reduced, seconds = _reduced(sums, time.perf_counter() - t0, world, dev)
    result = SurveyResult(
        model=_model_json(model),
        corpus={"name": corpus.name, "sha256": digest, "texts": count},
        config=cfg, scores=names, sums=reduced, world_size=world, backend=backend,
        seconds={"survey": round(seconds, 3)}, threads=torch.get_num_threads(),
        split=share.split)
    if resumed_from is not None:
        result.seconds["resumed_from_batch"] = resumed_from
    if rank == 0 and cfg.probes:
        t1 = time.perf_counter()
        result.probes = _probes(model, cfg, causal)
        result.seconds["probes"] = round(time.perf_counter() - t1, 3)
    if rank == 0 and write_result:
        atomic_write_text(out / RESULT_NAME, json.dumps(result.to_json(), indent=1,
                                                        allow_nan=False))
    if world > 1:
        import torch.distributed as dist

        dist.barrier()
    return result



# --------------------------------------------------------------------------------------
# one batch
# --------------------------------------------------------------------------------------


def _made(t: Tensor | None, what: str) -> Tensor:
    """``t``, which :class:`TileTargets` makes when given what it is made from."""
    if t is None:
        raise Error(f"the tile targets hold no {what}")
    return t


class _Batch:
    """What one batch of texts needs in every layer, padded to its longest text ``N``: each
    text's length, the targets of the sums (:class:`~attnlab.analysis.sums.TileTargets`:
    each text's own token ids, its padded rows left out), the distances the profile bins
    one by one, the texts that have Gu et al.'s ``sink_tokens``."""

    def __init__(self, items: list[list[int]], cfg: SurveyConfig, causal: bool) -> None:
        n = max(len(x) for x in items)
        self.lengths = torch.tensor([len(x) for x in items], dtype=torch.float64)
        # the padded rows are zeroed once, in the layer's own float64 copy (row_mask), so
        # the targets need not mask them again: a zero row adds nothing to any sum
        self.targets = TileTargets(0, n, 0, n, [Occurrences(torch.tensor(x)) for x in items])
        rows = TileTargets(0, n, 0, n, lengths=[len(x) for x in items])
        self.row_mask = _made(rows.row_mask, "row mask")
        # (B,) ones of each text's duplicate pattern
        self.pairs = _made(self.targets.pairs, "pairs")
        self.repeat = self.pairs > 0  # a token occurs twice: duplicate/induction defined
        self.max_distance = cfg.max_distance
        k = cfg.sink_tokens
        self.sink_k = k
        self.sink_rows = torch.tensor([len(x) >= k and (causal or len(x) == k) for x in items])
        self.causal = causal


def _batch_layer(w: Tensor, bt: _Batch, names: Sequence[str]
                 ) -> tuple[Tensor, Tensor, Tensor]:
    """One layer of a batch, every text and head, in float64: scores (B, H, S) in the order
    of ``names``, profile sums (B, H, P), Gu importance of the first token over the first
    ``sink_tokens`` queries (B, H) (0 for texts without them).

    The heads are taken a group at a time (:func:`_heads_layer`), as many as hold
    :data:`~attnlab.tracing.budget.SURVEY_CHUNK` bytes of float64 weights (at least one),
    so the working copies stay bounded whatever the texts' length; every sum is a head's
    own, so the groups do not change them.
    """
    b, h, n, _ = w.shape
    step = max(1, min(h, SURVEY_CHUNK // max(1, 8 * b * n * n)))
    parts = [_heads_layer(w[:, i:i + step], bt, names) for i in range(0, h, step)]
    if len(parts) == 1:
        return parts[0]
    scores, profile, sink = zip(*parts)
    return torch.cat(scores, 1), torch.cat(profile, 1), torch.cat(sink, 1)


def distance_profile(a: Tensor, max_distance: int, *, causal: bool = False) -> Tensor:
    """(..., 2d + 3) float64: the mass of ``a`` (..., N, N) at each relative distance
    ``i - j`` (query minus key) from ``-d`` to ``d`` (bins 1 ... 2d + 1, ``d`` =
    ``max_distance``), and beyond on each side: bin 0 holds the keys more than ``d`` after
    the query, bin 2d + 2 those more than ``d`` before it.

    The band is read off its diagonals, bin 0 off the triangle above it (none when
    ``causal``: a causal pattern holds nothing after the query) and bin 2d + 2 is the rest
    of the mass, so no (N², 2d + 3) table of offsets is built: O(N·d) beyond ``a``, and
    one triangle's copy for a bidirectional pattern.

    >>> w = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]],
    ...                  dtype=torch.float64)
    >>> [round(x, 12) for x in distance_profile(w, 1).tolist()]  # i - j = -1, 0, 1; 2 beyond
    [0.0, 0.0, 2.0, 0.8, 0.2]
    """
    d = max_distance
    n = a.shape[-1]
    out = torch.zeros(*a.shape[:-2], 2 * d + 3, dtype=torch.float64)
    for delta in range(-min(d, n - 1), min(d, n - 1) + 1):
        # i - j = delta: torch's diagonal offset is j - i
        out[..., delta + d + 1] = a.diagonal(-delta, -2, -1).sum(-1, dtype=torch.float64)
    if n > d + 1:
        if not causal:
            out[..., 0] = a.triu(d + 1).sum((-2, -1), dtype=torch.float64)
        total = a.sum((-2, -1), dtype=torch.float64)
        out[..., -1] = total - out[..., :-1].sum(-1)
    return out


def _heads_layer(w: Tensor, bt: _Batch, names: Sequence[str]
                 ) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`_batch_layer` for one group of heads ``w`` (B, h, N, N).

    Each text's scores are the sums of :func:`~attnlab.analysis.sums.tile_sums` over its
    own ``n x n`` pattern (its padded rows left out, the padded keys are 0 already):
    attnlab's scores, TransformerLens's ``"abs"`` measure unrounded
    (:func:`~attnlab.analysis.detection.abs_from_sums`), Gu et al.'s importance of the
    first token (its mass over the ``n`` queries).
    """
    a = w.to(torch.float64, copy=True)  # this group's own copy, masked in place
    a.mul_(bt.row_mask)  # the padded rows hold nothing
    sums = tile_sums(a, bt.targets)  # (B, h, len(SUMS))
    s = dict(zip(SUMS, sums.unbind(-1)))
    vals = scores_from_sums(sums, True)
    n = bt.lengths[:, None]
    vals["gu-sink"] = s["first"] / n
    if bt.causal:
        sizes = {"previous": n - 1, "duplicate": bt.pairs[:, None],
                 "induction": bt.pairs[:, None]}
        for key, size in sizes.items():
            vals[f"tl-{key}-abs"] = abs_from_sums(s["mass"], s[key], size, n,
                                                  round_abs=False)
    scores = torch.stack([vals[name] for name in names], dim=-1)
    profile = distance_profile(a, bt.max_distance, causal=bt.causal)
    nn = a.shape[-1]
    k = min(bt.sink_k, nn)
    sink = a[..., :k, 0].sum(-1) / bt.sink_k * bt.sink_rows[:, None].double()
    return scores, profile, sink


def _run_batch(model: Any, texts: list[str], cfg: SurveyConfig, names: list[str],
               sums: SurveySums, causal: bool, *, heads: range | None = None,
               count: bool = True) -> None:
    """Tokenize, run and add one batch of texts to ``sums``: the per-head sums of
    ``heads`` (a contiguous range; None: every head), and, if ``count``, the batch's
    counts of texts, tokens and samples (one process of those that share a batch by heads
    counts them)."""
    t = sums.t
    tokens = _text_tokens(model, cfg)
    items: list[list[int]] = []
    for text in texts:
        ids, longer = first_ids(model.tokenizer, text, tokens)
        if longer and count:
            t["truncated"] += 1
        if len(ids) < 2:
            if count:
                t["skipped"] += 1
            continue
        items.append(ids)
    if not items:
        return
    hs = range(t["sum"].shape[1]) if heads is None else heads
    h0, h1 = hs.start, hs.stop
    bt = _Batch(items, cfg, causal)
    ranges = survey_result.score_ranges(names, cfg)
    lo, width = ranges[:, 0], ranges[:, 1] - ranges[:, 0]
    needs_repeat = torch.tensor([s in survey_result.NEEDS_REPEAT for s in names])
    use = (~needs_repeat[None, :] | bt.repeat[:, None]).double()  # (B, S) score defined
    role_cols = [names.index(score) if score in names else -1
                 for score, _, _ in ROLES.values()]

    def on_layer(layer: int, w: Tensor) -> None:
        # (B, h, S), (B, h, P), (B, h): this process's heads h0 ... h1 - 1 (w holds only
        # their weights)
        vals, prof, sink = _batch_layer(w, bt, names)
        u = use[:, None, :]
        t["sum"][layer, h0:h1] += (vals * u).sum(0)
        t["sumsq"][layer, h0:h1] += (vals * vals * u).sum(0)
        bins = ((vals - lo) / width * cfg.bins).floor().clamp(0, cfg.bins - 1).long()
        onehot = torch.nn.functional.one_hot(bins, cfg.bins).double()  # (B, h, S, bins)
        t["hist"][layer, h0:h1] += (onehot * u[..., None]).sum(0)
        for r, (_score, th, strict) in enumerate(ROLES.values()):
            c = role_cols[r]
            if c < 0:
                continue
            v = vals[..., c]
            hit = (v > th) if strict else (v >= th)
            t["role_hits"][layer, h0:h1, r] += (hit.double() * use[:, c, None]).sum(0)
        t["profile"][layer, h0:h1] += prof.sum(0)
        t["sink_hits"][layer, h0:h1] += ((sink > cfg.epsilon)
                                         & bt.sink_rows[:, None]).double().sum(0)

    if h1 > h0:  # a process with no heads of its own runs no forward pass
        for_each_layer(model, items, on_layer, heads=hs)
    if not count:
        return
    t["texts"] += len(items)
    t["tokens"] += float(bt.lengths.sum())
    t["score_texts"] += use.sum(0)
    for r, c in enumerate(role_cols):
        if c >= 0:
            t["role_texts"][r] += use[:, c].sum()
    t["sink_samples"] += float(bt.sink_rows.sum())
