"""How a survey runs (:class:`SurveyConfig`), and Gu et al.'s sink threshold.

Imports no torch: ``attnlab survey --help`` builds its options from this dataclass (its
fields, defaults and checks are the options'), and the survey itself reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from attnlab._errors import check_int

__all__ = ["EPSILON", "SurveyConfig", "SurveyConfigFields", "SurveyFingerprintFields"]

#: Gu et al.'s threshold: a head has an attention sink when the first token's importance
#: exceeds it.
EPSILON = 0.3


class SurveyFingerprintFields(TypedDict):
    """The settings a saved survey state must share with the run that resumes it: every
    field of :class:`SurveyConfig` but ``checkpoint_every`` and ``probes``."""

    batch_size: int
    max_tokens: int
    bins: int
    max_distance: int
    sink_tokens: int
    epsilon: float
    seed: int


class SurveyConfigFields(SurveyFingerprintFields):
    """Every field of :class:`SurveyConfig`, as a survey's JSON records them (``config``)."""

    checkpoint_every: int
    probes: bool


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
            check_int(name, getattr(self, name), minimum=1)
        if self.max_tokens < 2:
            raise ValueError(f"max_tokens must be >= 2, got {self.max_tokens}")
        if not 0.0 <= float(self.epsilon) < 1.0:
            raise ValueError(f"epsilon must be in [0, 1), got {self.epsilon!r}")

    def to_json(self) -> SurveyConfigFields:
        """Every field, in the order they are declared.

        >>> import dataclasses
        >>> SurveyConfig().to_json() == dataclasses.asdict(SurveyConfig())
        True
        """
        return {"batch_size": self.batch_size, "max_tokens": self.max_tokens,
                "bins": self.bins, "max_distance": self.max_distance,
                "sink_tokens": self.sink_tokens, "epsilon": self.epsilon,
                "checkpoint_every": self.checkpoint_every, "probes": self.probes,
                "seed": self.seed}

    def fingerprint_fields(self) -> SurveyFingerprintFields:
        """What a resumed state must share (``checkpoint_every`` and ``probes`` may change)."""
        return {"batch_size": self.batch_size, "max_tokens": self.max_tokens,
                "bins": self.bins, "max_distance": self.max_distance,
                "sink_tokens": self.sink_tokens, "epsilon": self.epsilon, "seed": self.seed}
