"""One module per mathematical claim, each computing it on real numbers.

Every experiment module exposes ``run(seed=0, *, plot=True, ...) -> Result``: it computes
the claim with attnlab's own functions, compares it with the theory and, when ``plot``,
draws its figure. Keyword hooks (``scale_fn``, ``mask_fn`` …) swap in a deliberately wrong
implementation, which the experiment must then report as failing.

>>> from attnlab.experiments import run
>>> r = run("pe-relative-position", plot=False)
>>> r.passed, r.measured < 1e-9
(True, True)
"""

from ._result import Check, Control, Result
from .registry import EXPERIMENTS, get, run, run_all

__all__ = ["Check", "Control", "EXPERIMENTS", "Result", "get", "run", "run_all"]
