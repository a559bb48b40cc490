"""``attnlab.positional``: the encodings of :mod:`attnlab.core.positional`."""

from attnlab.core.positional import *  # noqa: F403
from attnlab.core.positional import __all__, __doc__  # noqa: F401
