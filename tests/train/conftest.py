"""Tiny configs that train in a fraction of a second per step."""

from __future__ import annotations

import pytest
from train_helpers import tiny_config


@pytest.fixture
def tiny():
    """``tiny(task="copy", **overrides)``: a TrainConfig for a model that trains instantly."""
    return tiny_config
