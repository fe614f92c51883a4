"""Fixtures shared by the collector's unit tests."""

from __future__ import annotations

import pytest

import collector.exposition._page


@pytest.fixture
def samples_built(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every `Sample` built while the test runs, by its arguments (a laid-out page read by position builds none)."""
    built: list[object] = []
    sample = collector.exposition._page.Sample

    def counting(*args: object) -> object:
        built.append(args)
        return sample(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(collector.exposition._page, "Sample", counting)
    return built
