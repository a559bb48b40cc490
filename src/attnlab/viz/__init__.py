"""Figures (matplotlib) and the attention explorer (Python side + static JS/CSS), drawn
from a trace's on-demand weights."""
