"""``attnlab.positional``: the encodings of :mod:`attnlab.core.positional`."""

import torch  # noqa: F401  (the examples of the re-exported docstring use it)

from attnlab.core.positional import *  # noqa: F403
from attnlab.core.positional import __all__, __doc__  # noqa: F401
