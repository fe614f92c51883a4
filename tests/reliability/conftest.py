"""The reliability suite (issue 11): kvpilot probed as an attacker and as a failing environment would, on SQLite
and on a real PostgreSQL. Every probe records a row (probe, expected, observed); `make chaos` prints the table.

The PostgreSQL half is marked ``integration`` (it starts Debian's postgres on loopback, as tests/integration does),
so `make test-fast` keeps to SQLite and `make test` runs both."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import migrations
from tests.services.postgres import PostgresServer, fresh_database, run_postgres


@dataclass(frozen=True)
class Row:
    backend: str
    probe: str
    expected: str
    observed: str
    ok: bool


ROWS: list[Row] = []


@dataclass(frozen=True)
class Store:
    """An empty, migrated database: its URL, and for PostgreSQL the server (to stop it) and its data folder."""

    backend: str
    url: str
    server: PostgresServer | None = None

    @property
    def data_dir(self) -> Path:
        assert self.server is not None
        return self.server.data


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    with run_postgres() as server:
        yield server


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'kvpilot.db'}"
        migrations.upgrade(url)
        return Store("sqlite", url)
    server = request.getfixturevalue("postgres")
    url = fresh_database(server)
    migrations.upgrade(url)
    return Store("postgresql", url, server)


class Recorder:
    def __init__(self, backend: str) -> None:
        self.backend = backend

    def __call__(self, probe: str, expected: str, observed: str, ok: bool) -> None:
        """Record a row, then fail the test if the probe failed (after recording, so the table shows it)."""
        ROWS.append(Row(self.backend, probe, expected, observed, ok))
        assert ok, f"{probe}: expected {expected}, observed {observed}"


@pytest.fixture
def record(store: Store) -> Recorder:
    return Recorder(store.backend)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "reliability: the issue 11 probes (`make chaos` runs only these)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.reliability)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not ROWS:
        return
    w = terminalreporter
    widths = [max(len(f), *(len(getattr(r, f)) for r in ROWS)) for f in ("backend", "probe", "expected")]
    w.section("reliability probes (issue 11)")
    header = f"{'backend':<{widths[0]}}  {'probe':<{widths[1]}}  {'expected':<{widths[2]}}  observed"
    w.write_line(header)
    w.write_line("-" * len(header))
    for r in ROWS:
        mark = "" if r.ok else "   <-- FAILED"
        w.write_line(f"{r.backend:<{widths[0]}}  {r.probe:<{widths[1]}}  {r.expected:<{widths[2]}}  {r.observed}{mark}")
    failed = sum(not r.ok for r in ROWS)
    w.write_line(f"{len(ROWS)} probes, {failed} failed")
