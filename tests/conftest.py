"""Shared fixtures. Real services (Prometheus, Alertmanager, PostgreSQL) live in tests/services/."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from collector.urls import forget_names

if TYPE_CHECKING:
    from tests.helpers.burst_backtest import BurstBacktest

# No deadline on any example: Hypothesis' default (200 ms) fails a test as "Unreliable test timings" when one
# example is slowed by the machine (seen at 301 ms on a loaded runner), which says nothing about the code.
settings.register_profile("kvpilot", deadline=None)
settings.load_profile("kvpilot")

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
SHARED = REPO.parent / "shared"


@pytest.fixture(autouse=True)
def _targets_named_afresh() -> None:
    """Each test meets its targets afresh: kvpilot numbers the targets that show alike (``?token=a``, ``?token=b``)
    in the order it meets them, for as long as the process runs (``collector.urls``)."""
    forget_names()


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


@pytest.fixture(scope="session")
def burst() -> BurstBacktest:
    """The synthetic burst backtested once for the session (tests/helpers/burst_backtest.py)."""
    from tests.helpers import burst_backtest  # the backtest's imports only where a test asks for it

    return burst_backtest.run()
