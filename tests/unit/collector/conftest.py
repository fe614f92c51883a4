"""Fixtures shared by the collector's unit tests."""

from __future__ import annotations

import pytest

import collector.adapt
import collector.exposition._page


@pytest.fixture(autouse=True)
def _fresh_targets() -> None:
    """Each test's targets are new ones: an engine a page of another test was read as (by the same URL) is not kept
    (``collector.adapt`` remembers it per target so that a live target does not flip engine)."""
    collector.adapt._found_engines.clear()


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
