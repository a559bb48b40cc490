"""Figures (matplotlib) and HTML helpers."""
