"""``attnlab.masks``: the mask constructors of :mod:`attnlab.core.masks`."""

import torch  # noqa: F401  (the examples of the re-exported docstring use it)

from attnlab.core.masks import *  # noqa: F403
from attnlab.core.masks import __all__, __doc__  # noqa: F401
