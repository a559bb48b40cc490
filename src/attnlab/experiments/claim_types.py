"""The claim inventory's record types: what a claim, its evidence and an extension are,
each checked when it is built.

The inventory's text (:mod:`.claims_000`, :mod:`.claims_001`, :mod:`.claims_data`) is a
tuple of these records; the verdicts computed from them are :mod:`.claims`.

Evidence names the part of one experiment's :class:`~attnlab.experiments.Result` that
decides a claim, written ``"<experiment>"`` (the whole result), ``"<experiment>:headline"``
(its headline relation alone) or ``"<experiment>:<check-id>[,<check-id>…]"`` (the checks
with those :attr:`~attnlab.experiments.Check.id`); a leading ``"!"`` marks evidence
*against* the article's claim. Check ids are stable: a check's readable name can change
without sending the evidence elsewhere, and an id no check has is an error, never a
silent match.

>>> evidence("qk-variance", "!softmax-saturation:no-explosion,gradient-vanishes-wq")[1]
Evidence(experiment='softmax-saturation', part='no-explosion,gradient-vanishes-wq', against=True)
>>> Evidence("softmax-saturation", "no-explosion,gradient-vanishes-wq").check_ids
('no-explosion', 'gradient-vanishes-wq')
"""

from __future__ import annotations

from dataclasses import dataclass

from ._result import CHECK_ID

__all__ = ["ARTICLES", "KINDS", "KIND_ZH", "HEADLINE", "Evidence", "Reading", "Claim",
           "Extension", "evidence"]

#: The two articles, by the number their file names start with.
ARTICLES = ("000", "001")
#: What an inventory item is: a statement, a code listing (or a line of one), advice, or one
#: of the article's own errors (a wrong statement, heading, label or code comment, quoted
#: verbatim, with the check that shows what is true instead).
KINDS = ("claim", "code", "recommendation", "error")
#: Each kind in Chinese.
KIND_ZH = {"claim": "论断", "code": "代码", "recommendation": "建议", "error": "文章的错误"}
#: :attr:`Evidence.part` that selects a result's headline relation only (not its checks).
HEADLINE = "headline"


def _check_ids(part: str, where: str) -> tuple[str, ...]:
    """The check ids of an evidence part (``""`` and :data:`HEADLINE` name none)."""
    if part in ("", HEADLINE):
        return ()
    ids = tuple(part.split(","))
    bad = [i for i in ids if not CHECK_ID.fullmatch(i)]
    if bad:
        raise ValueError(f"{where}: part must be '', {HEADLINE!r} or check ids (lowercase "
                         f"slugs, comma-separated), got {part!r}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{where}: part names a check id twice: {part!r}")
    return ids


@dataclass(frozen=True)
class Evidence:
    """The part of one experiment's result that decides a claim.

    ``part`` is ``""`` for the whole result (its headline relation and every check),
    :data:`HEADLINE` for the headline relation alone, or check ids, comma-separated: those
    checks (every one must exist, and all of them must pass). ``against``: the
    experiment's claim is the opposite of the article's, so the article's claim holds only
    if that part does *not* hold (e.g. the article says the gradient explodes, the
    experiment shows that it vanishes).
    """

    experiment: str
    part: str = ""
    against: bool = False

    def __post_init__(self) -> None:
        if not self.experiment.strip():
            raise ValueError("evidence needs an experiment name, got an empty one")
        _check_ids(self.part, f"evidence {self.experiment!r}")

    @property
    def check_ids(self) -> tuple[str, ...]:
        """The ids of the checks this evidence reads (empty for the whole result or its
        headline)."""
        return _check_ids(self.part, f"evidence {self.experiment!r}")


def evidence(*parts: str | Evidence) -> tuple[Evidence, ...]:
    """Evidence from ``"name"``, ``"name:part"`` or ``"!name:part"`` (against)."""
    out = []
    for p in parts:
        if isinstance(p, Evidence):
            out.append(p)
            continue
        against = p.startswith("!")
        name, _, part = p.lstrip("!").partition(":")
        out.append(Evidence(name, part, against))
    return tuple(out)


@dataclass(frozen=True)
class Reading:
    """Another way to read a sentence of the article, and the evidence that decides it.

    A claim's own ``reading_en`` / ``reading_zh`` and ``evidence`` are its plain reading;
    a :class:`Reading` in :attr:`Claim.readings` is a second one. When the readings'
    verdicts differ, the item's verdict is ``"depends on the reading"`` and both
    measurements are shown, rather than refuting the stronger reading.
    """

    en: str
    zh: str
    evidence: tuple[Evidence, ...]

    def __post_init__(self) -> None:
        if not self.en.strip() or not self.zh.strip():
            raise ValueError(f"a reading needs en and zh, got {self.en!r} / {self.zh!r}")
        if not self.evidence or not all(isinstance(e, Evidence) for e in self.evidence):
            raise ValueError(f"reading {self.en!r}: evidence must be one or more Evidence "
                             "records (see evidence())")


@dataclass(frozen=True)
class Claim:
    """One claim, code listing, recommendation or error of an article, and what decides it.

    ``quote_zh`` quotes the article verbatim; ``claim_en`` / ``claim_zh`` restate it as
    attnlab tests it. A claim is decided by its ``evidence``, holds only under
    ``conditions_en`` / ``conditions_zh`` when it has them, or says why no computation can
    decide it (``not_testable_en`` / ``not_testable_zh``: then it has neither).

    An item of kind ``"error"`` quotes something the article gets wrong; ``claim_en`` /
    ``claim_zh`` say what is wrong and what is true instead, and its evidence is the check
    that shows the truth, marked *against* the quote (``"!experiment:check-id"``): the
    verdict is ``"does not hold"`` while that check holds. It is always testable and has
    no conditions.

    ``reading_en`` / ``reading_zh``: the reading of the sentence that ``evidence`` tests
    (its plain reading; every item whose verdict is "does not hold" states it, so that a
    refutation says what it refutes). ``readings``: other readings, each with its own
    evidence (:class:`Reading`).

    ``timed``: the verdict depends on the machine's timing (a speed comparison), so a page
    written once (``docs/claims.md``) does not fix it; it is computed each time the
    inventory runs.

    ``null_result``: the evidence against the claim is the absence of an effect (the effect
    the claim predicts did not appear); such a refutation stands only with a
    ``positive_control`` that passes: evidence (check ids of an experiment) showing a
    variant of the same setup where the effect does appear, so that the setup could have
    shown it. Without one the verdict is ``"not decided here"``.

    ``existence``: the claim says that something exists (h heads can express *some* relation
    one head cannot): only a witness decides it (its ``evidence`` holds: ``"holds"``);
    failing to find one is ``"not decided here"``, never ``"does not hold"``, and
    ``search_en`` / ``search_zh`` say what search was made.
    """

    id: str
    article: str
    kind: str
    quote_zh: str
    claim_en: str
    claim_zh: str
    evidence: tuple[Evidence, ...] = ()
    conditions_en: str = ""
    conditions_zh: str = ""
    not_testable_en: str = ""
    not_testable_zh: str = ""
    timed: bool = False
    reading_en: str = ""
    reading_zh: str = ""
    readings: tuple[Reading, ...] = ()
    null_result: bool = False
    positive_control: tuple[Evidence, ...] = ()
    existence: bool = False
    search_en: str = ""
    search_zh: str = ""

    def __post_init__(self) -> None:
        where = f"claim {self.id!r}"
        if self.article not in ARTICLES:
            raise ValueError(f"{where}: article must be one of {ARTICLES}, got {self.article!r}")
        if self.kind not in KINDS:
            raise ValueError(f"{where}: kind must be one of {KINDS}, got {self.kind!r}")
        for f in ("id", "quote_zh", "claim_en", "claim_zh"):
            if not getattr(self, f).strip():
                raise ValueError(f"{where}: {f} is empty")
        if not all(isinstance(e, Evidence) for e in self.evidence):
            raise TypeError(f"{where}: evidence must be Evidence records (see evidence()), "
                            f"got {[type(e).__name__ for e in self.evidence]}")
        if bool(self.conditions_en) != bool(self.conditions_zh):
            raise ValueError(f"{where}: conditions need both conditions_en and conditions_zh")
        if bool(self.not_testable_en) != bool(self.not_testable_zh):
            raise ValueError(f"{where}: not testable needs both not_testable_en and "
                             "not_testable_zh")
        if self.not_testable_en and (self.evidence or self.conditions_en):
            raise ValueError(f"{where}: a claim that is not testable has no evidence and no "
                             "conditions")
        if not self.not_testable_en and not self.evidence:
            raise ValueError(f"{where}: a testable claim needs evidence (an experiment that "
                             "decides it), or not_testable_en saying why none can")
        if self.kind == "error":
            if not self.evidence:
                raise ValueError(f"{where}: an error of the article needs evidence (the check "
                                 "that shows what is true), not not_testable_en")
            if not all(e.against for e in self.evidence):
                raise ValueError(f"{where}: an error's evidence shows what is true instead of "
                                 "the quote, so each must be against it ('!experiment:part'), "
                                 f"got {[e.experiment for e in self.evidence if not e.against]}"
                                 " without '!'")
            if self.conditions_en:
                raise ValueError(f"{where}: an error of the article has no conditions")
        if bool(self.reading_en) != bool(self.reading_zh):
            raise ValueError(f"{where}: a reading needs both reading_en and reading_zh")
        if not all(isinstance(r, Reading) for r in self.readings):
            raise TypeError(f"{where}: readings must be Reading records, got "
                            f"{[type(r).__name__ for r in self.readings]}")
        if self.readings and not self.reading_en:
            raise ValueError(f"{where}: a claim with other readings states its own "
                             "(reading_en / reading_zh)")
        if self.readings and not self.testable:
            raise ValueError(f"{where}: a claim that is not testable has no readings")
        if not isinstance(self.timed, bool):
            raise TypeError(f"{where}: timed must be a bool, got {type(self.timed).__name__}")
        if not all(isinstance(e, Evidence) and not e.against for e in self.positive_control):
            raise ValueError(f"{where}: positive_control must be Evidence records, none "
                             "against (the variant where the effect appears must hold)")
        if self.positive_control and not self.null_result:
            raise ValueError(f"{where}: a positive control belongs to a null result "
                             "(null_result=True)")
        if bool(self.search_en) != bool(self.search_zh):
            raise ValueError(f"{where}: a search needs both search_en and search_zh")
        if self.existence and not self.search_en:
            raise ValueError(f"{where}: an existence claim states the search made for a "
                             "witness (search_en / search_zh)")
        if (self.existence or self.null_result) and (not self.testable
                                                     or self.kind == "error"):
            raise ValueError(f"{where}: existence and null results are for testable "
                             "claims, not errors or untestable items")
        if self.timed and not self.evidence:
            raise ValueError(f"{where}: a timed claim needs evidence (the timing that decides "
                             "it)")

    @property
    def testable(self) -> bool:
        return not self.not_testable_en

    @property
    def covered_by(self) -> tuple[str, ...]:
        """The experiments whose results decide this claim (all its readings), each once,
        in order."""
        every = (list(self.evidence) + [e for r in self.readings for e in r.evidence]
                 + list(self.positive_control))
        return tuple(dict.fromkeys(e.experiment for e in every))


@dataclass(frozen=True)
class Extension:
    """Something attnlab measures that is not a claim of the articles: a whole experiment
    of origin ``"attnlab"`` (``part`` empty), or checks of an article experiment, by id
    (an attnlab rule measured there)."""

    experiment: str
    what_en: str
    what_zh: str
    part: str = ""

    def __post_init__(self) -> None:
        _check_ids(self.part, f"extension {self.experiment!r}")

    @property
    def whole(self) -> bool:
        """The whole experiment is attnlab's (its ``Result.origin`` is ``"attnlab"``)."""
        return not self.part
