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

**Corpus**: a ``.txt`` file (one text a line; blank lines skipped) or a ``.jsonl`` file
(one JSON object a line with a string ``text``); or :func:`builtin_corpus`, the
paragraphs of attnlab's own docstrings. A bad line is refused before any work, naming
its line number.

**Resume**: every ``checkpoint_every`` batches each process writes its state (the sums,
the next batch, a fingerprint of corpus and settings) atomically to
``OUT/state/rank-R-of-W.safetensors``; a survey started again with the same ``OUT``
continues from there, and its result equals the uninterrupted run's (the same float64
sums in the same order).

**Data-parallel**: under ``torchrun --nproc_per_node=N -m attnlab survey ...`` each
process joins the process group (``gloo`` on CPU, ``nccl`` on GPU), takes the batches
``b`` with ``b % N == rank`` (the batches themselves do not depend on N) and, at the end,
the sums are added with ``torch.distributed.all_reduce``: the result equals the
one-process run up to the order of float64 additions. Across machines the same command
runs with torchrun's usual flags (``--nnodes``, ``--node_rank``, ``--master_addr``,
``--master_port`` or ``--rdzv_endpoint``); each process writes its own state file, and
rank 0 writes the result.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnlab._io import (
    FolderBusyError,
    atomic_write_bytes,
    atomic_write_text,
    lock_folder,
    remove_stale_temps,
)
from attnlab.analysis.heads import Thresholds
from attnlab.analysis.literature import (
    EPSILON,
    _check_loaded,
    demo_induction_score,
    duplicate_token_pattern,
    for_each_layer,
    induction_pattern,
    literature_ids,
    prefix_matching,
    previous_token_pattern,
)
from attnlab.analysis.scores import _scores_from_sums

__all__ = ["ROLES", "SCORES", "Corpus", "SurveyConfig", "SurveyResult", "builtin_corpus",
           "survey"]

#: Per-text scores the survey aggregates, and their histogram ranges (``"max_tokens"``:
#: the range scales with the longest input). ``tl-*-abs`` are computed for causal models
#: only (TransformerLens's ``"abs"`` measure needs lower-triangular patterns).
SCORES: dict[str, tuple[float | str, float | str]] = {
    "entropy": (0.0, "log_max_tokens"), "max_weight": (0.0, 1.0), "sink": (0.0, 1.0),
    "previous": (0.0, 1.0), "diagonal": (0.0, 1.0), "distance": (0.0, "max_tokens"),
    "duplicate": (0.0, 1.0), "induction": (0.0, 1.0),
    "tl-previous-abs": (-1.0, 1.0), "tl-duplicate-abs": (-1.0, 1.0),
    "tl-induction-abs": (-1.0, 1.0), "gu-sink": (0.0, 1.0),
}
#: scores defined only on texts whose detection pattern is not empty (a repeated token)
_NEEDS_REPEAT = ("duplicate", "induction", "tl-duplicate-abs", "tl-induction-abs")

#: Role -> (score, threshold, strict): a head plays the role in a text when its score is
#: >= the threshold (> when strict). ``sink`` is Gu et al.'s criterion; the others use
#: :class:`~attnlab.analysis.heads.Thresholds`; duplicate-token uses the induction one.
ROLES: dict[str, tuple[str, float, bool]] = {
    "sink": ("gu-sink", EPSILON, True),
    "previous-token": ("previous", Thresholds.previous, False),
    "duplicate-token": ("duplicate", Thresholds.induction, False),
    "induction": ("induction", Thresholds.induction, False),
    "self": ("diagonal", Thresholds.diagonal, False),
}

_FORMAT = "attnlab.survey"
_VERSION = 1
STATE_DIR = "state"
RESULT_NAME = "survey.json"


# --------------------------------------------------------------------------------------
# the corpus
# --------------------------------------------------------------------------------------


class Corpus:
    """The texts of a ``.txt`` (one a line) or ``.jsonl`` (``{"text": ...}`` a line) file,
    read as a stream; or a list of texts given in memory (``Corpus.of``).

    :meth:`scan` reads the whole file once, checks every line (a bad line raises
    ``ValueError`` naming ``what``, the file and the line number) and returns the number
    of texts and the sha256 of the file; iterating yields the texts in order, again
    streamed.
    """

    def __init__(self, path: str | os.PathLike[str], *, what: str = "--texts") -> None:
        self.path: Path | None = Path(path)
        self.what = what
        self._texts: list[str] | None = None
        self.name = str(path)
        suffix = self.path.suffix.lower()
        if suffix not in (".txt", ".jsonl"):
            raise ValueError(f"{what} {path}: must be a .txt file (one text a line) or a "
                             f".jsonl file (a JSON object with a \"text\" string a line), "
                             f"got {suffix or 'no extension'}")
        self.jsonl = suffix == ".jsonl"
        if not self.path.exists():
            raise FileNotFoundError(f"{what} {path}: no such file")
        if self.path.is_dir():
            raise ValueError(f"{what} {path}: is a directory, not a corpus file")

    @classmethod
    def of(cls, texts: Sequence[str], name: str = "texts") -> Corpus:
        """A corpus of texts held in memory (each checked like a file's line)."""
        self = cls.__new__(cls)
        self.path, self.what, self.name, self.jsonl = None, name, name, False
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"{name}[{i}] must be a str, got {type(t).__name__}")
        self._texts = [t for t in texts if t.strip()]
        return self

    def _lines(self) -> Iterator[tuple[int, str]]:
        if self._texts is not None:
            yield from enumerate(self._texts, 1)
            return
        with open(self.path, "rb") as f:
            for number, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    raise ValueError(f"{self.what} {self.path}: line {number} is not UTF-8 "
                                     f"(byte 0x{raw[exc.start]:02x} at column "
                                     f"{exc.start + 1})") from None
                yield number, line.rstrip("\r\n")

    def _text(self, number: int, line: str) -> str | None:
        if not line.strip():
            return None
        if not self.jsonl:
            return line
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{self.what} {self.path}: line {number} is not valid JSON "
                             f"({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict) or "text" not in obj:
            raise ValueError(f"{self.what} {self.path}: line {number} has no \"text\" field "
                             f"(each line must be a JSON object with a \"text\" string)")
        text = obj["text"]
        if not isinstance(text, str):
            raise ValueError(f"{self.what} {self.path}: line {number}: \"text\" must be a "
                             f"string, got {type(text).__name__}")
        return text if text.strip() else None

    def __iter__(self) -> Iterator[str]:
        for number, line in self._lines():
            text = self._text(number, line)
            if text is not None:
                yield text

    def scan(self) -> tuple[int, str]:
        """(number of texts, sha256 of the corpus), every line checked."""
        h = hashlib.sha256()
        count = 0
        for number, line in self._lines():
            h.update(line.encode("utf-8") + b"\n")
            if self._text(number, line) is not None:
                count += 1
        if count == 0:
            where = f"{self.what} {self.path}" if self.path is not None else self.what
            raise ValueError(f"{where}: holds no text (every line is blank); give one text a "
                             f"line" + (", as {\"text\": ...}" if self.jsonl else ""))
        return count, h.hexdigest()


_SKIP_LINE = re.compile(r"^\s*(>>>|\.\.\.|={3,}|-{3,}|\+[-=+]+)")


def builtin_corpus(min_chars: int = 300) -> list[str]:
    """attnlab's own prose: every paragraph of at least ``min_chars`` characters of the
    docstrings of the package's modules, classes and functions, whitespace collapsed, in
    file order (paragraphs holding doctest lines or table rules are left out). It ships
    with attnlab, so it is the same wherever attnlab of one version is installed."""
    root = Path(__file__).resolve().parent.parent
    out: list[str] = []
    for path in sorted(root.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                     ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node)
            if not doc:
                continue
            for block in re.split(r"\n\s*\n", doc):
                lines = block.splitlines()
                if any(_SKIP_LINE.match(line) for line in lines):
                    continue
                text = " ".join(" ".join(lines).split())
                if len(text) >= min_chars:
                    out.append(text)
    return out


# --------------------------------------------------------------------------------------
# settings, state, result
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SurveyConfig:
    """How a survey runs. ``max_tokens``: each text is cut to its first tokens (after the
    BOS); ``batch_size`` texts a forward pass; ``bins`` histogram bins per score;
    ``max_distance`` the relative distances profiled one by one; ``sink_tokens`` and
    ``epsilon``: Gu et al.'s input length and threshold; ``checkpoint_every`` batches
    between state writes (per process); ``probes`` also computes the TransformerLens demo
    induction score and Olsson et al.'s prefix matching (random tokens, once, by rank 0);
    ``seed`` seeds them."""

    batch_size: int = 8
    max_tokens: int = 64
    bins: int = 20
    max_distance: int = 32
    sink_tokens: int = 64
    epsilon: float = EPSILON
    checkpoint_every: int = 16
    probes: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("batch_size", "max_tokens", "bins", "max_distance", "sink_tokens",
                     "checkpoint_every"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if self.max_tokens < 2:
            raise ValueError(f"max_tokens must be >= 2, got {self.max_tokens}")
        if not 0.0 <= float(self.epsilon) < 1.0:
            raise ValueError(f"epsilon must be in [0, 1), got {self.epsilon!r}")

    def fingerprint_fields(self) -> dict[str, Any]:
        """What a resumed state must share (``checkpoint_every`` and ``probes`` may change)."""
        d = asdict(self)
        d.pop("checkpoint_every")
        d.pop("probes")
        return d


def _score_names(causal: bool) -> list[str]:
    return [s for s in SCORES if causal or not s.endswith("-abs")]


def _ranges(names: Sequence[str], cfg: SurveyConfig) -> Tensor:
    out = []
    for s in names:
        lo, hi = SCORES[s]
        hi = {"log_max_tokens": math.log(cfg.max_tokens),
              "max_tokens": float(cfg.max_tokens - 1)}.get(hi, hi)  # type: ignore[arg-type]
        out.append((float(lo), float(hi)))
    return torch.tensor(out, dtype=torch.float64)


class _Sums:
    """The survey's sums, float64, whose size depends on the model and settings only."""

    def __init__(self, nl: int, nh: int, scores: Sequence[str], cfg: SurveyConfig) -> None:
        s, r, p = len(scores), len(ROLES), 2 * cfg.max_distance + 3
        f64 = torch.float64
        self.t: dict[str, Tensor] = {
            "texts": torch.zeros((), dtype=f64),
            "tokens": torch.zeros((), dtype=f64),
            "truncated": torch.zeros((), dtype=f64),
            "skipped": torch.zeros((), dtype=f64),
            "score_texts": torch.zeros(s, dtype=f64),
            "sum": torch.zeros(nl, nh, s, dtype=f64),
            "sumsq": torch.zeros(nl, nh, s, dtype=f64),
            "hist": torch.zeros(nl, nh, s, cfg.bins, dtype=f64),
            "role_texts": torch.zeros(r, dtype=f64),
            "role_hits": torch.zeros(nl, nh, r, dtype=f64),
            "profile": torch.zeros(nl, nh, p, dtype=f64),
            "sink_samples": torch.zeros((), dtype=f64),
            "sink_hits": torch.zeros(nl, nh, dtype=f64),
        }


@dataclass
class SurveyResult:
    """The reduced sums of a survey and what it ran on; :meth:`to_json` gives the per-head
    means, standard deviations, histograms, role shares, profiles and Sink%."""

    model: dict[str, Any]
    corpus: dict[str, Any]
    config: SurveyConfig
    scores: list[str]
    sums: dict[str, Tensor]
    world_size: int = 1
    backend: str | None = None
    threads: int = 1
    seconds: dict[str, float] = field(default_factory=dict)
    probes: dict[str, Any] = field(default_factory=dict)

    @property
    def num_layers(self) -> int:
        return int(self.sums["sum"].shape[0])

    @property
    def num_heads(self) -> int:
        return int(self.sums["sum"].shape[1])

    def ranges(self) -> list[tuple[float, float]]:
        """(low, high) of each score's histogram, in the order of :attr:`scores`."""
        return [(float(lo), float(hi)) for lo, hi in _ranges(self.scores, self.config).tolist()]

    def mean(self, score: str) -> Tensor:
        """(L, H) mean of ``score`` over the texts where it is defined (0 if none)."""
        i = self.scores.index(score)
        n = float(self.sums["score_texts"][i])
        return self.sums["sum"][..., i] / n if n else torch.zeros(self.num_layers,
                                                                 self.num_heads,
                                                                 dtype=torch.float64)

    def std(self, score: str) -> Tensor:
        """(L, H) standard deviation of ``score`` over the texts (population, ddof 0)."""
        i = self.scores.index(score)
        n = float(self.sums["score_texts"][i])
        if not n:
            return torch.zeros(self.num_layers, self.num_heads, dtype=torch.float64)
        m = self.sums["sum"][..., i] / n
        return (self.sums["sumsq"][..., i] / n - m * m).clamp_min(0.0).sqrt()

    def role_share(self, role: str) -> Tensor:
        """(L, H) share of the texts (where the role's score is defined) in which the head
        plays ``role``."""
        i = list(ROLES).index(role)
        n = float(self.sums["role_texts"][i])
        return self.sums["role_hits"][..., i] / n if n else torch.zeros_like(
            self.sums["role_hits"][..., i])

    def sink_percent(self) -> float | None:
        """Gu et al.'s Sink% over the texts with ``sink_tokens`` tokens (None if none)."""
        n = float(self.sums["sink_samples"])
        if not n:
            return None
        return float(self.sums["sink_hits"].sum()) / (n * self.num_layers * self.num_heads) * 100

    def profile(self) -> Tensor:
        """(L, H, 2D + 3) mean attention per query at relative distance ``i - j``: bin 0
        is ``< -D``, bins 1 ... 2D + 1 are ``-D ... D``, the last ``> D``; each head's
        profile sums to 1 (every row's mass is counted once)."""
        q = float(self.sums["tokens"])
        return self.sums["profile"] / q if q else self.sums["profile"].clone()

    def top(self, values: Tensor, k: int = 5) -> list[tuple[int, int, float]]:
        """The ``k`` largest entries of an (L, H) tensor as (layer, head, value)."""
        flat = values.flatten()
        v, idx = flat.topk(min(k, flat.numel()))
        h = self.num_heads
        return [(int(i) // h, int(i) % h, float(x)) for x, i in zip(v, idx)]

    def headline(self, k: int = 5) -> dict[str, Any]:
        """The numbers a reader asks first: Gu et al.'s Sink%, the ``k`` strongest
        induction heads by the TransformerLens demo score (with Olsson et al.'s prefix
        matching, attnlab's ``repeat_induction`` and the corpus scores of the same heads),
        the ``k`` strongest previous-token heads (TransformerLens ``"mul"`` = attnlab's
        ``previous``, the ``"abs"`` measure, the share of texts), the ``k`` heads with a sink
        in the largest share of texts; and the run's size and time."""
        out: dict[str, Any] = {
            "model": self.model.get("name"), "texts": int(self.sums["texts"]),
            "tokens": int(self.sums["tokens"]), "world_size": self.world_size,
            "backend": self.backend, "threads": self.threads, "seconds": self.seconds,
            "sink_percent": self.sink_percent(),
            "sink_samples": int(self.sums["sink_samples"])}

        def at(name: str, values: Tensor | None, layer: int, head: int) -> dict[str, float]:
            return {} if values is None else {name: round(float(values[layer, head]), 4)}

        def probe(name: str) -> Tensor | None:
            p = self.probes.get(name)
            return None if p is None else torch.tensor(p["scores"], dtype=torch.float64)

        def corpus(name: str) -> Tensor | None:
            return self.mean(name) if name in self.scores else None

        demo = probe("tl-demo-induction")
        if demo is not None:
            out["induction"] = [
                {"layer": l_, "head": h, "tl_demo_induction": round(v, 4),
                 **at("olsson_prefix_matching", probe("olsson-prefix-matching"), l_, h),
                 **at("attnlab_repeat_induction", probe("repeat_induction"), l_, h),
                 **at("corpus_induction_mul", corpus("induction"), l_, h),
                 **at("corpus_induction_abs", corpus("tl-induction-abs"), l_, h),
                 **at("corpus_induction_share", self.role_share("induction"), l_, h)}
                for l_, h, v in self.top(demo, k)]
        out["previous_token"] = [
            {"layer": l_, "head": h, "previous_mul": round(v, 4),
             **at("previous_abs", corpus("tl-previous-abs"), l_, h),
             **at("share_of_texts", self.role_share("previous-token"), l_, h),
             **at("diagonal", corpus("diagonal"), l_, h)}
            for l_, h, v in self.top(self.mean("previous"), k)]
        share, gu = self.role_share("sink"), self.mean("gu-sink")
        order = sorted(((float(share[l_, h]), float(gu[l_, h]), l_, h)
                        for l_ in range(self.num_layers) for h in range(self.num_heads)),
                       reverse=True)[:k]  # most texts first, then the larger importance
        out["sink"] = [
            {"layer": l_, "head": h, "share_of_texts": round(v, 4),
             "gu_importance": round(g, 4), **at("attnlab_sink", corpus("sink"), l_, h)}
            for v, g, l_, h in order]
        return out

    def to_json(self) -> dict[str, Any]:
        """Everything as JSON-ready data (float64 values unrounded)."""
        cfg = self.config
        ranges = _ranges(self.scores, cfg)
        scores = {}
        for i, s in enumerate(self.scores):
            n = float(self.sums["score_texts"][i])
            hist = self.sums["hist"][..., i, :]
            entry = {"texts": int(n), "range": ranges[i].tolist(),
                     "mean": self.mean(s).tolist(), "std": self.std(s).tolist(),
                     "histogram": (hist / n if n else hist).tolist()}
            if s in _NEEDS_REPEAT:  # TransformerLens's list average counts every text
                t = float(self.sums["texts"])
                entry["mean_all_texts"] = (self.sums["sum"][..., i] / t if t else
                                           self.sums["sum"][..., i]).tolist()
            scores[s] = entry
        roles = {}
        for j, (role, (score, th, strict)) in enumerate(ROLES.items()):
            if score not in self.scores:
                continue
            roles[role] = {"score": score, "threshold": th, "relation": ">" if strict else ">=",
                           "texts": int(self.sums["role_texts"][j]),
                           "share": self.role_share(role).tolist()}
        d = cfg.max_distance
        return {
            "format": _FORMAT, "version": _VERSION, "model": self.model, "corpus": self.corpus,
            "config": asdict(cfg), "num_layers": self.num_layers, "num_heads": self.num_heads,
            "world_size": self.world_size, "backend": self.backend, "threads": self.threads,
            "seconds": self.seconds,
            "texts": int(self.sums["texts"]), "tokens": int(self.sums["tokens"]),
            "truncated": int(self.sums["truncated"]), "skipped": int(self.sums["skipped"]),
            "scores": scores, "roles": roles,
            "profile": {"offsets": [f"<{-d}"] + [str(o) for o in range(-d, d + 1)] + [f">{d}"],
                        "mean": self.profile().tolist()},
            "sink": {"epsilon": cfg.epsilon, "tokens": cfg.sink_tokens,
                     "samples": int(self.sums["sink_samples"]),
                     "sink_percent": self.sink_percent(),
                     "per_head": (self.sums["sink_hits"] / max(1.0, float(
                         self.sums["sink_samples"]))).tolist()},
            "probes": self.probes,
        }


# --------------------------------------------------------------------------------------
# one text
# --------------------------------------------------------------------------------------


class _Batch:
    """What one batch of texts needs in every layer, padded to its longest text ``N``:
    the real rows, the TransformerLens detection patterns of each text (previous,
    duplicate, induction) and their sizes, the distance and relative-offset tables."""

    def __init__(self, items: list[list[int]], cfg: SurveyConfig, causal: bool) -> None:
        b = len(items)
        n = max(len(x) for x in items)
        self.lengths = torch.tensor([len(x) for x in items], dtype=torch.float64)
        self.rows = torch.zeros(b, n, dtype=torch.float64)  # 1 on each text's real rows
        self.targets = torch.zeros(b, 3, n, n, dtype=torch.float64)
        for i, ids in enumerate(items):
            m = len(ids)
            self.rows[i, :m] = 1.0
            self.targets[i, 0, :m, :m] = previous_token_pattern(m).double()
            self.targets[i, 1, :m, :m] = duplicate_token_pattern(ids).double()
            self.targets[i, 2, :m, :m] = induction_pattern(ids).double()
        self.sizes = self.targets.sum((-2, -1))  # (B, 3) ones in each pattern
        self.repeat = self.sizes[:, 1] > 0  # a token occurs twice: duplicate/induction defined
        pos = torch.arange(n)
        self.distance = (pos[:, None] - pos[None, :]).abs().double()
        d = cfg.max_distance
        bins = ((pos[:, None] - pos[None, :]).clamp(-d - 1, d + 1) + d + 1).reshape(-1)
        self.offsets = torch.zeros(n * n, 2 * d + 3, dtype=torch.float64)
        self.offsets[torch.arange(n * n), bins] = 1.0
        k = cfg.sink_tokens
        self.sink_k = k
        self.sink_rows = torch.tensor([len(x) >= k and (causal or len(x) == k) for x in items])
        self.causal = causal


def _batch_layer(w: Tensor, bt: _Batch, names: Sequence[str]
                 ) -> tuple[Tensor, Tensor, Tensor]:
    """One layer of a batch, every text and head at once, in float64: scores (B, H, S) in
    the order of ``names``, profile sums (B, H, P), Gu importance of the first token over
    the first ``sink_tokens`` queries (B, H) (0 for texts without them).

    The definitions are those of :mod:`attnlab.analysis.literature` on each text's own
    ``n x n`` pattern (the padded rows are zeroed, the padded keys are 0 already):
    attnlab's scores (:func:`~attnlab.analysis.literature.own_scores`), TransformerLens's
    ``"abs"`` measure unrounded, ``1 - (mass - 2 hits + |P|) / n`` (equal to
    ``sum|A - P| / n`` for a 0/1 pattern and weights in [0, 1]), Gu et al.'s importance.
    """
    a = w.double() * bt.rows[:, None, :, None]  # (B, H, N, N)
    m = a.sum(-1)  # (B, H, N) row masses
    mass = m.sum(-1)
    hits = torch.einsum("bhij,btij->bht", a, bt.targets)  # previous, duplicate, induction

    def ratio(num: Tensor, den: Tensor) -> Tensor:
        return torch.where(den > 0, num / den.clamp_min(1e-300), torch.zeros_like(num))

    n = bt.lengths[:, None]
    vals = {
        "entropy": ratio(-torch.special.xlogy(a, a).sum((-2, -1)), mass) + 0.0,
        "max_weight": ratio(a.amax(-1).sum(-1), mass),
        "sink": ratio(a[..., 1:, 0].sum(-1), m[..., 1:].sum(-1)),
        "previous": ratio(hits[..., 0], mass),
        "diagonal": ratio(a.diagonal(dim1=-2, dim2=-1).sum(-1), mass),
        "distance": ratio((a * bt.distance).sum((-2, -1)), mass),
        "duplicate": ratio(hits[..., 1], mass),
        "induction": ratio(hits[..., 2], mass),
        "gu-sink": a[..., :, 0].sum(-1) / n,
    }
    if bt.causal:
        for t, key in enumerate(("previous", "duplicate", "induction")):
            vals[f"tl-{key}-abs"] = 1.0 - (mass - 2.0 * hits[..., t]
                                           + bt.sizes[:, None, t]) / n
    scores = torch.stack([vals[s] for s in names], dim=-1)
    b, h, nn, _ = a.shape
    profile = (a.reshape(b, h, nn * nn) @ bt.offsets)
    k = min(bt.sink_k, nn)
    sink = a[..., :k, 0].sum(-1) / bt.sink_k * bt.sink_rows[:, None].double()
    return scores, profile, sink


# --------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------


def _dist_setup(device: str) -> tuple[int, int, str | None, torch.device, bool]:
    """(rank, world, backend, device, joined here); joins the process group under
    torchrun."""
    import torch.distributed as dist

    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        if device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device 'cuda' asked for, but torch sees no GPU")
        dev = torch.device("cuda" if device == "cuda" else "cpu")
        return 0, 1, None, dev, False
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available()
                                and torch.cuda.device_count() >= int(
                                    os.environ.get("LOCAL_WORLD_SIZE", str(world))))
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' asked for, but torch sees no GPU")
    backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(local)
    joined = not dist.is_initialized()
    if joined:
        dist.init_process_group(backend)
    else:
        backend = str(dist.get_backend())
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    return dist.get_rank(), dist.get_world_size(), backend, dev, joined


def _state_path(out: Path, rank: int, world: int) -> Path:
    return out / STATE_DIR / f"rank-{rank}-of-{world}.safetensors"


def _write_state(path: Path, sums: _Sums, meta: dict[str, Any]) -> None:
    from safetensors.torch import save

    data = save({k: v.contiguous() for k, v in sums.t.items()},
                metadata={"attnlab": json.dumps(meta, sort_keys=True)})
    atomic_write_bytes(path, data)


def _read_state(path: Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = json.loads((f.metadata() or {}).get("attnlab", "{}"))
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as exc:  # a damaged file: say which and how to go on
        raise ValueError(f"{path}: not a readable survey state ({type(exc).__name__}: "
                         f"{exc}); delete it to start that process over") from exc
    return tensors, meta


def survey(model: Any, corpus: Corpus, out_dir: str | os.PathLike[str], *,
           config: SurveyConfig | None = None, device: str = "auto",
           on_batch: Callable[[int, int], Any] | None = None,
           write_result: bool = True, restart: bool = False,
           threads: int | None = None, wait: bool = False) -> SurveyResult:
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
    """
    _check_loaded(model)
    cfg = config or SurveyConfig()
    if not isinstance(cfg, SurveyConfig):
        raise TypeError(f"config must be a SurveyConfig, got {type(cfg).__name__}")
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    t0 = time.perf_counter()
    count, digest = corpus.scan()
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    rank, world, backend, dev, joined = _dist_setup(device)
    before = torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        with _locked(Path(out_dir), rank, world, dev, wait):
            return _survey(model, corpus, Path(out_dir), cfg, rank, world, backend, dev,
                           on_batch, write_result, restart, count, digest, t0)
    finally:
        torch.set_num_threads(before)
        if joined:
            import torch.distributed as dist

            dist.destroy_process_group()


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


def _survey(model: Any, corpus: Corpus, out: Path, cfg: SurveyConfig, rank: int, world: int,
            backend: str | None, dev: torch.device,
            on_batch: Callable[[int, int], Any] | None, write_result: bool, restart: bool,
            count: int, digest: str, t0: float) -> SurveyResult:
    """:func:`survey` once the process group is joined."""
    if dev.type == "cuda":
        model.model.to(dev)
    causal = bool(model.causal)
    names = _score_names(causal)
    nl, nh = int(model.num_layers), int(model.num_heads)
    sums = _Sums(nl, nh, names, cfg)
    fingerprint = hashlib.sha256(json.dumps(
        {"corpus": digest, "texts": count, "config": cfg.fingerprint_fields(),
         "model": model.name, "path": getattr(model, "path", None), "layers": nl,
         "heads": nh, "scores": names}, sort_keys=True).encode()).hexdigest()
    n_batches = -(-count // cfg.batch_size)
    path = _state_path(out, rank, world)
    start, done = 0, False
    resumed_from = None
    remove_stale_temps(path.parent, [path.name])  # a write cut short by a kill
    if restart:
        path.unlink(missing_ok=True)
    others = sorted(p.name for p in (out / STATE_DIR).glob("rank-*-of-*.safetensors")
                    if not p.name.endswith(f"-of-{world}.safetensors")) if (
        out / STATE_DIR).is_dir() and not restart else []
    if others:
        raise ValueError(f"{out}: holds the state of a run with another number of processes "
                         f"({', '.join(others)}); resume it with as many processes, or use "
                         f"a new --out (or delete {out / STATE_DIR})")
    if path.is_file():
        tensors, meta = _read_state(path)
        if meta.get("fingerprint") != fingerprint:
            raise ValueError(f"{out}: holds the state of a survey of another corpus, model "
                             f"or settings; use a new --out, or delete {out / STATE_DIR} to "
                             f"start this one over")
        for k, v in tensors.items():
            sums.t[k] = v.to(torch.float64)
        start, done = int(meta["next_batch"]), bool(meta["done"])
        resumed_from = start
    meta = {"fingerprint": fingerprint, "rank": rank, "world": world, "format": _FORMAT}

    def save(next_batch: int, finished: bool) -> None:
        _write_state(path, sums, {**meta, "next_batch": next_batch, "done": finished})

    # global batch b (texts b*B ... b*B + B - 1, the same whatever the number of
    # processes) is this process's when b % world == rank
    mine = [b for b in range(n_batches) if b % world == rank]
    done_count = len(mine) if done else sum(b < start for b in mine)
    since = 0
    it = iter(corpus)
    for b_index in range(n_batches if not done else 0):
        batch = [t for _, t in zip(range(cfg.batch_size), it)]
        if b_index % world != rank or b_index < start:
            continue
        _run_batch(model, batch, cfg, names, sums, causal)
        done_count += 1
        since += 1
        if on_batch is not None:
            on_batch(done_count, len(mine))
        if since >= cfg.checkpoint_every:
            save(b_index + 1, False)
            since = 0
    if not done:
        save(n_batches, True)
    seconds = time.perf_counter() - t0
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
    result = SurveyResult(
        model={k: v for k, v in (model.describe().items() if hasattr(model, "describe")
                                 else {"name": model.name}.items())
               if isinstance(v, (str, int, float, bool, type(None)))},
        corpus={"name": corpus.name, "sha256": digest, "texts": count},
        config=cfg, scores=names, sums=reduced, world_size=world, backend=backend,
        seconds={"survey": round(seconds, 3)}, threads=torch.get_num_threads())
    if resumed_from is not None:
        result.seconds["resumed_from_batch"] = resumed_from
    if rank == 0 and cfg.probes:
        t1 = time.perf_counter()
        demo, info = demo_induction_score(model, seed=cfg.seed)
        pm, pinfo = prefix_matching(model, seed=cfg.seed)
        result.probes = {"tl-demo-induction": {"scores": demo.tolist(), "info": info},
                         "olsson-prefix-matching": {"scores": pm.tolist(), "info": pinfo}}
        if causal:
            ri, rinfo = _repeat_induction(model, cfg.seed)
            result.probes["repeat_induction"] = {"scores": ri.tolist(), "info": rinfo}
        result.seconds["probes"] = round(time.perf_counter() - t1, 3)
    if rank == 0 and write_result:
        atomic_write_text(out / RESULT_NAME, json.dumps(result.to_json(), indent=1,
                                                        allow_nan=False))
    if world > 1:
        import torch.distributed as dist

        dist.barrier()
    return result


def _repeat_induction(model: Any, seed: int) -> tuple[Tensor, dict[str, Any]]:
    """attnlab's ``repeat_induction`` (:func:`attnlab.analysis.heads.diagnose`): the
    induction share over the second copy of BOS + 40 distinct random ids, twice."""
    from attnlab.analysis.heads import _repeat_ids, induction_trace
    from attnlab.analysis.scores import _scan

    ind = induction_trace(model, seed=seed)
    spec = ind.meta["repeated_random"]
    period, start = spec["period"], spec["start"]
    ids = ind.token_ids if ind.token_ids is not None else _repeat_ids(start, period,
                                                                      ind.seq_len)
    sums, _, _ = _scan(ind, queries=range(start + period, start + 2 * period), token_ids=ids)
    return _scores_from_sums(sums, True)["induction"], {"period": period, "start": start,
                                                        "seed": seed}


#: A text is tokenized from a prefix of at least this many characters per kept token (a
#: 10 MB line of which 64 tokens are kept is not tokenized whole).
CHARS_PER_TOKEN = 32
_SPACE = re.compile(r"\s")


def first_ids(tokenizer: Any, text: str, n: int) -> tuple[list[int], bool]:
    """``(literature_ids(tokenizer, text)[:n], whether the text has more)`` without
    tokenizing a long text whole.

    The text is cut at its first whitespace after ``CHARS_PER_TOKEN · n`` characters (the
    budget grows ×4 until the cut keeps more than ``n + 1`` ids, or the whole text is
    read). A cut before whitespace leaves every word before it as it was — the
    pre-tokenizers of byte-level BPE, WordPiece and SentencePiece all split there — so the
    ids kept are those of the whole text.

    >>> class Words:  # one id per word, like a word-level tokenizer
    ...     def encode(self, text): return [0] + [len(w) for w in text.split()]
    >>> text = "ab " * 1_000_000  # 3 MB
    >>> first_ids(Words(), text, 4)
    ([0, 2, 2, 2], True)
    """
    budget = CHARS_PER_TOKEN * n
    while True:
        m = _SPACE.search(text, budget) if budget < len(text) else None
        part = text if m is None else text[:m.start()]
        ids = literature_ids(tokenizer, part)
        if m is None or len(ids) > n + 1:
            return ids[:n], len(ids) > n
        budget *= 4


def _run_batch(model: Any, texts: list[str], cfg: SurveyConfig, names: list[str],
               sums: _Sums, causal: bool) -> None:
    """Tokenize, run and add one batch of texts to ``sums``."""
    t = sums.t
    items: list[list[int]] = []
    for text in texts:
        ids, longer = first_ids(model.tokenizer, text, cfg.max_tokens)
        if longer:
            t["truncated"] += 1
        if len(ids) < 2:
            t["skipped"] += 1
            continue
        items.append(ids)
    if not items:
        return
    bt = _Batch(items, cfg, causal)
    ranges = _ranges(names, cfg)
    lo, width = ranges[:, 0], ranges[:, 1] - ranges[:, 0]
    needs_repeat = torch.tensor([s in _NEEDS_REPEAT for s in names])
    use = (~needs_repeat[None, :] | bt.repeat[:, None]).double()  # (B, S) score defined
    role_cols = [names.index(score) if score in names else -1
                 for score, _, _ in ROLES.values()]

    def on_layer(layer: int, w: Tensor) -> None:
        vals, prof, sink = _batch_layer(w, bt, names)  # (B, H, S), (B, H, P), (B, H)
        u = use[:, None, :]
        t["sum"][layer] += (vals * u).sum(0)
        t["sumsq"][layer] += (vals * vals * u).sum(0)
        bins = ((vals - lo) / width * cfg.bins).floor().clamp(0, cfg.bins - 1).long()
        onehot = torch.nn.functional.one_hot(bins, cfg.bins).double()  # (B, H, S, bins)
        t["hist"][layer] += (onehot * u[..., None]).sum(0)
        for r, (_score, th, strict) in enumerate(ROLES.values()):
            c = role_cols[r]
            if c < 0:
                continue
            v = vals[..., c]
            hit = (v > th) if strict else (v >= th)
            t["role_hits"][layer, :, r] += (hit.double() * use[:, c, None]).sum(0)
        t["profile"][layer] += prof.sum(0)
        t["sink_hits"][layer] += ((sink > cfg.epsilon) & bt.sink_rows[:, None]).double().sum(0)

    for_each_layer(model, items, on_layer)
    t["texts"] += len(items)
    t["tokens"] += float(bt.lengths.sum())
    t["score_texts"] += use.sum(0)
    for r, c in enumerate(role_cols):
        if c >= 0:
            t["role_texts"][r] += use[:, c].sum()
    t["sink_samples"] += float(bt.sink_rows.sum())
