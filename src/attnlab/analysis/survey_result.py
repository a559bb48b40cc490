"""A survey's settings and its result: what is summed per head, and what the sums mean.

:class:`SurveyConfig` says how a survey runs; :data:`SCORES` and :data:`ROLES` what it
aggregates; :class:`SurveySums` holds the float64 sums whose size depends on the model
and settings only (what each process adds and saves, and what the processes reduce);
:class:`SurveyResult` turns the reduced sums into per-head means, standard deviations,
histograms, role shares, profiles and Sink% (:meth:`SurveyResult.to_json`, a
:class:`~attnlab.analysis._records.SurveyDocument`). The run itself is
:func:`attnlab.analysis.survey.survey`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnlab.analysis._records import (
    InductionHead,
    JSONScalar,
    PreviousTokenHead,
    ProbeScores,
    RoleShares,
    ScoreStats,
    SinkHead,
    SurveyCorpus,
    SurveyDocument,
    SurveyHeadline,
    SurveyRun,
)
from attnlab.analysis.detection import EPSILON
from attnlab.analysis.heads import Thresholds
from attnlab.analysis.survey_config import SurveyConfig

__all__ = ["FORMAT", "NEEDS_REPEAT", "ROLES", "SCORES", "VERSION", "SurveyConfig",
           "SurveyDocument", "SurveyHeadline", "SurveyResult", "SurveySums", "score_names",
           "score_ranges"]

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
#: Scores defined only on texts whose detection pattern is not empty (a repeated token)
NEEDS_REPEAT = ("duplicate", "induction", "tl-duplicate-abs", "tl-induction-abs")

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

#: What a survey's JSON and state files say they are.
FORMAT = "attnlab.survey"
VERSION = 1


def score_names(causal: bool) -> list[str]:
    """The scores of :data:`SCORES` a model gets (``tl-*-abs``: causal models only)."""
    return [s for s in SCORES if causal or not s.endswith("-abs")]


def score_ranges(names: Sequence[str], cfg: SurveyConfig) -> Tensor:
    """(S, 2) float64 (low, high) of each score's histogram under ``cfg``."""
    out = []
    for s in names:
        lo, hi = SCORES[s]
        if isinstance(hi, str):  # a bound named by what it depends on in cfg
            hi = {"log_max_tokens": math.log(cfg.max_tokens),
                  "max_tokens": float(cfg.max_tokens - 1)}.get(hi, hi)
        out.append((float(lo), float(hi)))
    return torch.tensor(out, dtype=torch.float64)


class SurveySums:
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

    model: dict[str, JSONScalar]
    corpus: SurveyCorpus
    config: SurveyConfig
    scores: list[str]
    sums: dict[str, Tensor]
    world_size: int = 1
    backend: str | None = None
    threads: int = 1
    seconds: dict[str, float] = field(default_factory=dict)
    probes: dict[str, ProbeScores] = field(default_factory=dict)
    #: how the processes shared the work: "batches" (each its share of the batches) or
    #: "heads" (fewer batches than processes: each ran every batch for its share of the
    #: heads)
    split: str = "batches"

    @property
    def num_layers(self) -> int:
        return int(self.sums["sum"].shape[0])

    @property
    def num_heads(self) -> int:
        return int(self.sums["sum"].shape[1])

    def ranges(self) -> list[tuple[float, float]]:
        """(low, high) of each score's histogram, in the order of :attr:`scores`."""
        return [(float(lo), float(hi))
                for lo, hi in score_ranges(self.scores, self.config).tolist()]

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

    def headline(self, k: int = 5) -> SurveyHeadline:
        """The numbers a reader asks first: Gu et al.'s Sink%, the ``k`` strongest
        induction heads by the TransformerLens demo score (with Olsson et al.'s prefix
        matching, attnlab's ``repeat_induction`` and the corpus scores of the same heads),
        the ``k`` strongest previous-token heads (TransformerLens ``"mul"`` = attnlab's
        ``previous``, the ``"abs"`` measure, the share of texts), the ``k`` heads with a sink
        in the largest share of texts; and the run's size and time."""
        def at(values: Tensor | None, layer: int, head: int) -> float | None:
            """``values[layer, head]`` to 4 decimals (None when not computed)."""
            return None if values is None else round(float(values[layer, head]), 4)

        def probe(name: str) -> Tensor | None:
            p = self.probes.get(name)
            return None if p is None else torch.tensor(p["scores"], dtype=torch.float64)

        def corpus(name: str) -> Tensor | None:
            return self.mean(name) if name in self.scores else None

        run: SurveyRun = {
            "model": self.model.get("name"), "texts": int(self.sums["texts"]),
            "tokens": int(self.sums["tokens"]), "world_size": self.world_size,
            "backend": self.backend, "threads": self.threads, "seconds": self.seconds,
            "sink_percent": self.sink_percent(),
            "sink_samples": int(self.sums["sink_samples"])}
        induction: list[InductionHead] | None = None
        demo = probe("tl-demo-induction")
        if demo is not None:
            induction = []
            for l_, h, v in self.top(demo, k):
                ind: InductionHead = {"layer": l_, "head": h, "tl_demo_induction": round(v, 4)}
                if (x := at(probe("olsson-prefix-matching"), l_, h)) is not None:
                    ind["olsson_prefix_matching"] = x
                if (x := at(probe("repeat_induction"), l_, h)) is not None:
                    ind["attnlab_repeat_induction"] = x
                if (x := at(corpus("induction"), l_, h)) is not None:
                    ind["corpus_induction_mul"] = x
                if (x := at(corpus("tl-induction-abs"), l_, h)) is not None:
                    ind["corpus_induction_abs"] = x
                if (x := at(self.role_share("induction"), l_, h)) is not None:
                    ind["corpus_induction_share"] = x
                induction.append(ind)
        previous: list[PreviousTokenHead] = []
        for l_, h, v in self.top(self.mean("previous"), k):
            prev: PreviousTokenHead = {"layer": l_, "head": h, "previous_mul": round(v, 4)}
            if (x := at(corpus("tl-previous-abs"), l_, h)) is not None:
                prev["previous_abs"] = x
            if (x := at(self.role_share("previous-token"), l_, h)) is not None:
                prev["share_of_texts"] = x
            if (x := at(corpus("diagonal"), l_, h)) is not None:
                prev["diagonal"] = x
            previous.append(prev)
        share, gu = self.role_share("sink"), self.mean("gu-sink")
        order = sorted(((float(share[l_, h]), float(gu[l_, h]), l_, h)
                        for l_ in range(self.num_layers) for h in range(self.num_heads)),
                       reverse=True)[:k]  # most texts first, then the larger importance
        sinks: list[SinkHead] = []
        for v, g, l_, h in order:
            sink: SinkHead = {"layer": l_, "head": h, "share_of_texts": round(v, 4),
                              "gu_importance": round(g, 4)}
            if (x := at(corpus("sink"), l_, h)) is not None:
                sink["attnlab_sink"] = x
            sinks.append(sink)
        if induction is None:
            return {**run, "previous_token": previous, "sink": sinks}
        return {**run, "induction": induction, "previous_token": previous, "sink": sinks}

    def to_json(self) -> SurveyDocument:
        """Everything as JSON-ready data (float64 values unrounded)."""
        cfg = self.config
        ranges = score_ranges(self.scores, cfg)
        scores: dict[str, ScoreStats] = {}
        for i, s in enumerate(self.scores):
            n = float(self.sums["score_texts"][i])
            hist = self.sums["hist"][..., i, :]
            entry: ScoreStats = {"texts": int(n), "range": ranges[i].tolist(),
                     "mean": self.mean(s).tolist(), "std": self.std(s).tolist(),
                     "histogram": (hist / n if n else hist).tolist()}
            if s in NEEDS_REPEAT:  # TransformerLens's list average counts every text
                t = float(self.sums["texts"])
                entry["mean_all_texts"] = (self.sums["sum"][..., i] / t if t else
                                           self.sums["sum"][..., i]).tolist()
            scores[s] = entry
        roles: dict[str, RoleShares] = {}
        for j, (role, (score, th, strict)) in enumerate(ROLES.items()):
            if score not in self.scores:
                continue
            roles[role] = {"score": score, "threshold": th, "relation": ">" if strict else ">=",
                           "texts": int(self.sums["role_texts"][j]),
                           "share": self.role_share(role).tolist()}
        d = cfg.max_distance
        return {
            "format": FORMAT, "version": VERSION, "model": self.model, "corpus": self.corpus,
            "config": cfg.to_json(), "num_layers": self.num_layers, "num_heads": self.num_heads,
            "world_size": self.world_size, "split": self.split, "backend": self.backend,
            "threads": self.threads, "seconds": self.seconds,
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

