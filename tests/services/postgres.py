"""Start Debian's real PostgreSQL on loopback for the tests: initdb into a temporary folder, then `postgres` on a
free port. initdb refuses to run as root, so as root both run as the `postgres` user (which owns the folder)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.services.ports import free_port

SUPERUSER = "kvpilot"


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    path = shutil.which(name)
    if path is None:
        raise FileNotFoundError(f"{name} not found: install Debian's postgresql (scripts/install-system-deps.sh)")
    return path


def _as_postgres(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


class PostgresServer:
    """One PostgreSQL cluster; ``stop()``/``start()`` let a test take the database away mid-run."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.log = root / "postgres.log"
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        subprocess.run(
            _as_postgres(
                [_bin("initdb"), "-D", str(self.data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-sync"]
            ),
            check=True,
            capture_output=True,
        )

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def start(self, *, timeout_s: float = 30.0) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        cmd = [
            _bin("postgres"),
            "-D",
            str(self.data),
            "-p",
            str(self.port),
            "-k",
            str(self.root),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",
            "-c",
            "full_page_writes=off",
        ]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(_as_postgres(cmd), stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.process.returncode}: {self.log.read_text()[-2000:]}")
            if self._accepts():
                return
            time.sleep(0.1)
        raise TimeoutError(f"postgres did not accept connections within {timeout_s} s: {self.log.read_text()[-2000:]}")

    def _accepts(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.url().replace("+psycopg", ""), connect_timeout=1):
                return True
        except psycopg.OperationalError:
            return False

    def stop(self) -> None:
        """Fast shutdown (SIGINT): connections are cut, as when the database host goes away."""
        if self.process is None or self.process.poll() is not None:
            return
        # Signal the postmaster itself: as root, self.process is runuser, which does not forward signals.
        pid_file = self.data / "postmaster.pid"
        if pid_file.exists():
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGINT)
        else:
            self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url().replace("+psycopg", ""), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@contextmanager
def run_postgres() -> Iterator[PostgresServer]:
    root = Path(tempfile.mkdtemp(prefix="kvpilot-pg-"))
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
    server = PostgresServer(root)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL for the session; tests create their own database in it."""
    with run_postgres() as server:
        yield server


def fresh_database(server: PostgresServer) -> str:
    """A new, empty database in ``server``; returns its URL."""
    return server.create_database(f"t_{uuid.uuid4().hex[:12]}")
