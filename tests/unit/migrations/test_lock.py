"""Schema upgrades of one SQLite file run one process at a time (an flock on ``<file>-migrate-lock``): the lock is
waited for while another holds it, and a filesystem that cannot lock (NFS without its lock daemon) does not stop
the upgrade."""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from pathlib import Path

import pytest

import migrations


def test_an_upgrade_waits_for_the_lock_another_process_holds(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger="migrations")
    db = tmp_path / "k.db"
    url = f"sqlite:///{db}"
    fd = os.open(f"{db}-migrate-lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as another kvpilot migrating (flock: per open file, so this process too)
        upgrading = threading.Thread(target=migrations.upgrade, args=(url,), daemon=True)
        upgrading.start()
        upgrading.join(1.0)
        assert upgrading.is_alive()  # waiting for the lock
        assert migrations.current(url) is None
        assert f"waiting for the migration lock {db}-migrate-lock" in caplog.text  # said, not silent
    finally:
        os.close(fd)  # the other one is done
    upgrading.join(60)
    assert not upgrading.is_alive()
    assert migrations.is_at_head(url)


def test_a_filesystem_that_cannot_lock_does_not_stop_the_upgrade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_locks(_fd: int, _op: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(migrations.fcntl, "flock", no_locks)
    url = f"sqlite:///{tmp_path / 'k.db'}"
    migrations.upgrade(url)  # was: OSError [Errno 37] No locks available, and no kvpilot run
    assert migrations.is_at_head(url)
