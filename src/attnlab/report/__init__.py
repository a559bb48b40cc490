"""The report: one self-contained HTML page in which every claim is computed, drawn and
given the verdict its numbers support (``attnlab report``, ``make report``).

The layers below return data — parity errors, experiment ``Result``s with their own
figures, traces, head diagnostics, training metrics — and this package alone turns them
into the page. One module per part, each with a ``build(ctx)`` section builder:

=============  =====================================  ==========================================
part           module                                 from
=============  =====================================  ==========================================
claims         :mod:`attnlab.report.claims`           :mod:`attnlab.experiments.claims` (runs
                                                      the experiments once for both parts)
parity         :mod:`attnlab.report.parity`           :mod:`attnlab.experiments.parity`
experiments    :mod:`attnlab.report.experiments`      :func:`attnlab.experiments.run_all`
explorer       :mod:`attnlab.report.explorer`         MiniLM (loaded here) + the viz explorer
real-models    :mod:`attnlab.report.real_models`      MiniLM and SmolLM2 (loaded here), analysis
architectures  :mod:`attnlab.report.architectures`    an encoder–decoder, a vision and a speech
                                                      model, traced (:mod:`attnlab.tracing`)
long-contexts  :mod:`attnlab.report.long_contexts`    SmolLM2 to 8,192 tokens, one process a point
attribution    :mod:`attnlab.report.attribution`      SmolLM2: importance against ablation,
                                                      KV-cache eviction, the score by band
survey         :mod:`attnlab.report.survey`           :mod:`attnlab.analysis.survey` on SmolLM2
trained        :mod:`attnlab.report.trained_model`    :mod:`attnlab.train.summary`
=============  =====================================  ==========================================

The report is one of the top layers: it may load models by name (:func:`attnlab.models.load`);
nothing below it builds a :class:`Section`.

>>> from attnlab.report import PROVIDERS
>>> list(PROVIDERS)
['claims', 'parity', 'experiments', 'explorer', 'real-models', 'architectures',
 'long-contexts', 'attribution', 'survey', 'trained']
"""

from attnlab.report.html import ReportContext, Section
from attnlab.report.page import PROVIDERS, ReportResult, build_report, render_page

__all__ = ["PROVIDERS", "ReportContext", "ReportResult", "Section", "build_report",
           "render_page"]
