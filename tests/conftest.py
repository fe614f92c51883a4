"""Shared fixtures. Real services (Prometheus, Alertmanager, PostgreSQL) live in tests/services/."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def metrics_fixtures() -> Path:
    return FIXTURES / "metrics"


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The real traces in ../shared/traces (read-only; see its README for licences)."""
    path = SHARED / "traces"
    if not path.is_dir():
        pytest.fail(f"real traces not found at {path}: CI lays ../shared beside the clone")
    return path
